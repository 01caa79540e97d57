"""The cluster's metadata model (tiered_log.cluster.model): codecs, validation, Kafka's
election and ISR rules, replica placement; a property test of the transitions'
invariants. Pure and fast: no etcd."""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiered_log.broker import topics as broker_topics
from tiered_log.cluster.model import (
    NodeInfo,
    PartitionState,
    TopicMeta,
    assign_replicas,
    elect_leader,
    elect_preferred_leader,
    expand_isr,
    initial_state,
    shrink_isr,
    validate_topic_name,
)
from tiered_log.config import TopicConfig
from tiered_log.errors import InvalidArgumentError


def state(
    replicas: tuple[int, ...] = (1, 2, 3),
    leader: int | None = 1,
    isr: tuple[int, ...] = (1, 2, 3),
    leader_epoch: int = 4,
    partition_epoch: int = 9,
) -> PartitionState:
    return PartitionState("orders", 0, replicas, leader, leader_epoch, isr, partition_epoch)


# ---- nodes and topics -----------------------------------------------------------------


def test_node_info_round_trip_and_validation() -> None:
    n = NodeInfo(3, "http://10.0.0.3:8080")
    assert NodeInfo.from_json(n.to_json()) == n
    assert NodeInfo.from_dict(json.loads(n.to_json())) == n
    for bad in ((-1, "http://x"), (1, ""), (1, "http://a b"), (True, "http://x")):
        with pytest.raises(InvalidArgumentError):
            NodeInfo(*bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="has no 'url'"):
        NodeInfo.from_json('{"version": 1, "node_id": 2}')


def test_topic_meta_round_trip() -> None:
    config = TopicConfig.model_validate(
        {"segment_bytes": 1024, "retention_ms": None, "remote_enabled": True}
    )
    t = TopicMeta("orders", 6, 3, 2, config, topic_id="abc123", created_ms=7)
    again = TopicMeta.from_json(t.to_json())
    assert again == t and again.config.segment_bytes == 1024
    assert TopicMeta.from_dict(t.to_dict()) == t
    assert (
        TopicMeta.from_json(
            json.dumps({k: v for k, v in t.to_dict().items() if k != "topic_id"})
        ).topic_id
        == ""
    )


def test_topic_meta_reads_a_single_nodes_topic_json() -> None:
    """One TopicMeta for the cluster and the single node: a ``topic.json`` as a single
    node wrote it (no replication settings) reads with replication factor 1."""
    written = {
        "version": 1,
        "name": "orders",
        "topic_id": "f" * 32,
        "partitions": 2,
        "created_ms": 1234,
        "config": TopicConfig.model_validate({"segment_bytes": 4096}).model_dump(mode="json"),
    }
    meta = TopicMeta.from_json(json.dumps(written, indent=2).encode())
    assert (meta.partitions, meta.replication_factor, meta.min_insync_replicas) == (2, 1, 1)
    assert (meta.topic_id, meta.created_ms, meta.config.segment_bytes) == ("f" * 32, 1234, 4096)
    assert meta.as_dict() == {k: v for k, v in written.items() if k != "version"}
    assert broker_topics.TopicMeta is TopicMeta


@pytest.mark.parametrize(
    "args, message",
    [
        (("orders", 3, 3, 4), "min insync replicas 4 is more than the replication factor 3"),
        (("orders", 3, 3, 0), "min insync replicas must be >= 1, not 0"),
        (("orders", 0, 1, 1), "partitions must be >= 1, not 0"),
        (("orders", 1, 0, 1), "replication factor must be >= 1, not 0"),
        (("orders", 1, True, 1), "replication factor must be an integer, not true"),
        (("..", 1, 1, 1), "invalid topic name"),
        (("a/b", 1, 1, 1), "invalid topic name"),
    ],
)
def test_topic_meta_validation(args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(message)) as info:
        TopicMeta(*args)
    assert "\n" not in str(info.value)


def test_topic_meta_config_must_be_a_valid_topic_config() -> None:
    with pytest.raises(InvalidArgumentError, match="config must be a TopicConfig"):
        TopicMeta("t", 1, 1, 1, {"x": 1})  # type: ignore[arg-type]
    head = '{"version": 1, "name": "t", "partitions": 1, "replication_factor": 1, '
    with pytest.raises(InvalidArgumentError, match="config must be a JSON object"):
        TopicMeta.from_json(head + '"min_insync_replicas": 1, "config": []}')
    with pytest.raises(InvalidArgumentError, match="config segment_bytes") as info:
        TopicMeta.from_json(head + '"min_insync_replicas": 1, "config": {"segment_bytes": "x"}}')
    assert "\n" not in str(info.value)


def test_topic_name_rule_is_the_services() -> None:
    from tiered_log.service.wire import TOPIC_NAME_PATTERN

    service = re.compile(TOPIC_NAME_PATTERN)
    for name in (
        "orders",
        "a.b_c-d",
        "x" * 200,
        "x" * 201,
        ".",
        "..",
        "...",
        "a b",
        "",
        "a/b",
        "é",
        ".hidden",
    ):
        ours = True
        try:
            validate_topic_name(name)
        except InvalidArgumentError:
            ours = False
        assert ours == bool(service.fullmatch(name)), name


# ---- partition state codec ------------------------------------------------------------


def test_partition_state_round_trip() -> None:
    s = state()
    assert json.loads(s.to_json()) == {
        "version": 1,
        "topic": "orders",
        "partition": 0,
        "replicas": [1, 2, 3],
        "leader": 1,
        "leader_epoch": 4,
        "isr": [1, 2, 3],
        "partition_epoch": 9,
    }
    assert PartitionState.from_json(s.to_json()) == s
    offline = state(leader=None, isr=(2,))
    assert json.loads(offline.to_json())["leader"] is None
    assert PartitionState.from_json(offline.to_json().encode()) == offline
    extra = dict(s.to_dict(), added_later="x")  # unknown keys: ignored
    assert PartitionState.from_dict(extra) == s


def good() -> dict[str, Any]:
    return state().to_dict()


@pytest.mark.parametrize(
    "change, message",
    [
        ({"leader": 7}, "leader 7 is not in its isr [1, 2, 3]"),
        ({"isr": [1, 4]}, "isr [1, 4] is not a subset of its replicas [1, 2, 3]"),
        ({"replicas": [1, 1, 2]}, "replicas [1, 1, 2] has duplicates"),
        ({"replicas": [], "isr": [], "leader": None}, "has no replicas"),
        ({"leader_epoch": -1}, "leader_epoch must be >= 0, not -1"),
        ({"partition_epoch": "3"}, 'partition_epoch must be an integer, not "3"'),
        ({"leader": True}, "leader must be an integer, not true"),
        ({"isr": "1,2"}, 'isr must be a list of node ids, not "1,2"'),
        ({"isr": [1, 2.0]}, "isr entry must be an integer, not 2.0"),
        ({"version": 2}, "has version 2, expected 1"),
        ({"topic": "a/b"}, "invalid topic name"),
        ({"partition": -1}, "partition must be >= 0, not -1"),
    ],
)
def test_partition_state_strict_decoding(change: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(message)) as info:
        PartitionState.from_json(json.dumps(dict(good(), **change)))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "data, message",
    [
        ("{", "partition state is not JSON"),
        ("[1]", "partition state must be a JSON object"),
        (json.dumps({k: v for k, v in state().to_dict().items() if k != "isr"}), "has no 'isr'"),
        (
            json.dumps({k: v for k, v in state().to_dict().items() if k != "version"}),
            "has no 'version'",
        ),
    ],
)
def test_partition_state_bad_documents(data: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        PartitionState.from_json(data)


# ---- transitions ----------------------------------------------------------------------


def test_initial_state() -> None:
    s = initial_state("orders", 2, (3, 1, 2))
    assert (s.leader, s.isr, s.leader_epoch, s.partition_epoch) == (3, (3, 1, 2), 0, 0)
    s = initial_state("orders", 2, (3, 1, 2), live={1, 2})
    assert (s.leader, s.isr) == (1, (1, 2))
    with pytest.raises(InvalidArgumentError, match=r"none of its replicas \[3, 1, 2\] is alive"):
        initial_state("orders", 2, (3, 1, 2), live={9})


def test_elect_keeps_a_live_leader() -> None:
    assert elect_leader(state(leader=2), live={1, 2, 3}) is None
    assert elect_leader(state(leader=2), live={2}, unclean=True) is None


def test_elect_first_live_isr_member_in_replica_order() -> None:
    s = state(replicas=(1, 2, 3, 4), leader=1, isr=(1, 3, 4))
    new = elect_leader(s, live={2, 3, 4})
    assert new is not None
    # 2 is alive but not in the ISR: 3 is the first eligible; the dead leader leaves the ISR
    assert (new.leader, new.isr, new.leader_epoch, new.partition_epoch) == (3, (3, 4), 5, 10)


def test_elect_offline_bumps_epoch_keeps_isr_then_recovers_cleanly() -> None:
    s = state(leader=1, isr=(1, 2))
    off = elect_leader(s, live={3})
    assert off is not None
    assert (off.leader, off.isr, off.leader_epoch, off.partition_epoch) == (None, (1, 2), 5, 10)
    assert elect_leader(off, live={3}) is None  # offline already: nothing to write
    back = elect_leader(off, live={2, 3})  # an ISR member returns: clean election
    assert back is not None
    assert (back.leader, back.isr, back.leader_epoch, back.partition_epoch) == (2, (2,), 6, 11)


def test_elect_unclean() -> None:
    s = state(leader=1, isr=(1, 2))
    new = elect_leader(s, live={3}, unclean=True)
    assert new is not None and (new.leader, new.isr, new.leader_epoch) == (3, (3,), 5)
    # a clean candidate wins over unclean
    new = elect_leader(s, live={2, 3}, unclean=True)
    assert new is not None and (new.leader, new.isr) == (2, (2,))
    off = elect_leader(s, live=set(), unclean=True)
    assert off is not None and off.leader is None


def test_elect_preferred_leader() -> None:
    s = state(leader=2, isr=(1, 2, 3))
    new = elect_preferred_leader(s, live={1, 2, 3})
    assert new is not None
    assert (new.leader, new.isr, new.leader_epoch, new.partition_epoch) == (1, (1, 2, 3), 5, 10)
    assert elect_preferred_leader(new, live={1, 2, 3}) is None  # already
    assert elect_preferred_leader(s, live={2, 3}) is None  # not alive
    assert elect_preferred_leader(state(leader=2, isr=(2, 3)), live={1, 2, 3}) is None  # not in ISR


def test_shrink_isr() -> None:
    s = state(leader=1, isr=(1, 2, 3))
    new = shrink_isr(s, {3, 9})
    assert new is not None
    assert (new.isr, new.leader, new.leader_epoch, new.partition_epoch) == ((1, 2), 1, 4, 10)
    assert shrink_isr(new, {3}) is None
    with pytest.raises(InvalidArgumentError, match="leader 1 cannot leave its own isr"):
        shrink_isr(s, {1, 2})
    off = state(leader=None, isr=(2, 3))
    with pytest.raises(InvalidArgumentError, match="would leave the isr empty"):
        shrink_isr(off, {2, 3})
    only = shrink_isr(off, {2})
    assert only is not None and only.isr == (3,)


def test_expand_isr() -> None:
    s = state(replicas=(3, 1, 2), leader=1, isr=(1,))
    new = expand_isr(s, 3)
    assert new is not None
    assert (new.isr, new.leader_epoch, new.partition_epoch) == ((3, 1), 4, 10)  # replica order
    assert expand_isr(new, 3) is None
    with pytest.raises(
        InvalidArgumentError, match=r"node 7 is not one of its replicas \[3, 1, 2\]"
    ):
        expand_isr(s, 7)
    with pytest.raises(InvalidArgumentError, match="has no leader to admit node 2"):
        expand_isr(state(leader=None, isr=(1,)), 2)


# ---- replica placement ----------------------------------------------------------------


def test_assign_replicas_matches_kafka() -> None:
    # AdminUtilsTest.testReplicaAssignment: 5 brokers, 10 partitions, rf 3, start index 0
    assert assign_replicas(10, 3, [4, 2, 0, 3, 1], 0) == [
        (0, 1, 2),
        (1, 2, 3),
        (2, 3, 4),
        (3, 4, 0),
        (4, 0, 1),
        (0, 2, 3),
        (1, 3, 4),
        (2, 4, 0),
        (3, 0, 1),
        (4, 1, 2),
    ]


@pytest.mark.parametrize(
    "nodes, partitions, rf, start",
    [([0, 1, 2, 3, 4], 20, 3, 0), ([5, 7, 9], 9, 2, 2), ([1, 2, 3, 4, 5, 6], 12, 3, 4)],
)
def test_assign_replicas_spreads_leaders_and_replicas_evenly(
    nodes: list[int], partitions: int, rf: int, start: int
) -> None:
    got = assign_replicas(partitions, rf, nodes, start)
    assert len(got) == partitions
    assert all(len(r) == rf == len(set(r)) and set(r) <= set(nodes) for r in got)
    leaders = Counter(r[0] for r in got)
    replicas = Counter(n for r in got for n in r)
    assert set(leaders.values()) == {partitions // len(nodes)}
    assert set(replicas.values()) == {partitions * rf // len(nodes)}
    # followers of one node's partitions are not always the same node
    if partitions > len(nodes) > 2:
        followers_of = {r[1] for r in got if r[0] == nodes[0]}
        assert len(followers_of) > 1


def test_assign_replicas_continues_from_first_partition() -> None:
    whole = assign_replicas(10, 2, [0, 1, 2], 1)
    assert assign_replicas(4, 2, [0, 1, 2], 1, first_partition=6)[0][0] == whole[6][0]


def test_assign_replicas_refuses() -> None:
    with pytest.raises(
        InvalidArgumentError, match=r"^replication factor 3 is more than the 2 live nodes$"
    ):
        assign_replicas(4, 3, [0, 1], 0)
    assert assign_replicas(2, 1, [7], 0) == [(7,), (7,)]
    for args in ((0, 1, [0], 0), (1, 0, [0], 0), (1, 1, [0, 0], 0), (1, 1, [0], -1)):
        with pytest.raises(InvalidArgumentError):
            assign_replicas(*args)  # type: ignore[arg-type]


# ---- the invariants under any sequence of transitions ---------------------------------

NODES = range(5)
node_sets = st.frozensets(st.sampled_from(NODES))
ops = st.one_of(
    st.tuples(st.just("elect"), node_sets, st.booleans()),
    st.tuples(st.just("preferred"), node_sets, st.just(False)),
    st.tuples(st.just("shrink"), node_sets, st.just(False)),
    st.tuples(st.just("expand"), st.sampled_from(NODES), st.just(False)),
)


def check_invariants(s: PartitionState) -> None:
    assert s.replicas and len(set(s.replicas)) == len(s.replicas)
    assert set(s.isr) <= set(s.replicas) and len(set(s.isr)) == len(s.isr)
    assert s.leader is None or s.leader in s.isr
    assert PartitionState.from_json(s.to_json()) == s


@settings(max_examples=300, deadline=None)
@given(
    replicas=st.lists(st.sampled_from(NODES), min_size=1, max_size=5, unique=True),
    live=node_sets,
    steps=st.lists(ops, max_size=40),
)
def test_transitions_keep_every_invariant(
    replicas: list[int], live: frozenset[int], steps: list[tuple[str, Any, bool]]
) -> None:
    s = initial_state("t", 0, replicas, live | {replicas[-1]})
    leader_of_epoch: dict[int, int | None] = {s.leader_epoch: s.leader}
    for op, arg, unclean in steps:
        try:
            if op == "elect":
                new = elect_leader(s, arg, unclean)
            elif op == "preferred":
                new = elect_preferred_leader(s, arg)
            elif op == "shrink":
                new = shrink_isr(s, arg)
            else:
                new = expand_isr(s, arg)
        except InvalidArgumentError:
            continue  # refused: nothing changed
        if new is None:
            continue
        check_invariants(new)
        assert new != s
        assert new.partition_epoch == s.partition_epoch + 1
        if new.leader != s.leader:
            assert new.leader_epoch == s.leader_epoch + 1
        else:
            assert new.leader_epoch == s.leader_epoch
        if op in ("shrink", "expand"):
            assert new.leader == s.leader
        if op == "elect" and new.leader is not None:
            assert new.leader in arg
            assert unclean or new.leader in s.isr
        # no two leaders (or a leader and "none") ever share an epoch
        assert leader_of_epoch.setdefault(new.leader_epoch, new.leader) == new.leader
        s = new


def test_reassign_adds_then_drops_once_the_others_are_in_sync() -> None:
    from dataclasses import replace

    from tiered_log.cluster.model import begin_reassign, finish_reassign

    state = PartitionState("orders", 0, (1, 2, 3), 1, 4, (1, 2), 9)
    moving = begin_reassign(state, 3, 4)
    assert moving.replicas == (1, 2, 3, 4) and moving.removing == (3,)
    assert moving.partition_epoch == 10 and moving.leader_epoch == 4
    assert PartitionState.from_json(moving.to_json()) == moving
    assert "removing" not in state.to_dict()  # written only during a reassignment
    assert finish_reassign(moving, {1, 2, 4}) is None  # 4 not in sync yet
    done = finish_reassign(replace(moving, isr=(1, 2, 4)), {1, 2, 4})
    assert done is not None
    assert (done.replicas, done.isr, done.removing, done.leader) == ((1, 2, 4), (1, 2, 4), (), 1)
    # A leader being removed hands over (a leader change: epoch + 1).
    leaving = replace(begin_reassign(replace(state, isr=(1, 2, 3)), 1, 4), isr=(1, 2, 3, 4))
    handed = finish_reassign(leaving, {1, 2, 3, 4})
    assert handed is not None and handed.leader == 2 and handed.leader_epoch == 5
    for bad in ((9, 4), (3, 2)):
        with pytest.raises(InvalidArgumentError):
            begin_reassign(state, *bad)
    with pytest.raises(InvalidArgumentError):
        begin_reassign(moving, 2, 5)  # one at a time
