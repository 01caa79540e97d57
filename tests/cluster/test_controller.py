"""ClusterMetadata and the Controller against a real etcd: topics created atomically with
replicas spread over the live nodes, a dead node's partitions get a new leader from the
ISR with the next leader epoch (and the dead node leaves the other ISRs), offline
partitions stay offline until an ISR member returns, a deposed controller's and a deposed
leader's writes are refused, and racing controllers never store two leaders in one
leader epoch."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest

from tiered_log.cluster.controller import Controller, decide
from tiered_log.cluster.etcd import Fence, MetaStore
from tiered_log.cluster.membership import CONTROLLER_KEY, ControllerElection, Membership
from tiered_log.cluster.metadata import ClusterMetadata, partition_key, topic_key
from tiered_log.cluster.model import PartitionState, TopicMeta, elect_leader
from tiered_log.config import TopicConfig
from tiered_log.errors import InvalidArgumentError, TopicExistsError, TopicNotFoundError

from .helpers import wait_until

pytestmark = pytest.mark.timeout(30)

TTL = 2


@pytest.fixture
def stack() -> Iterator[ExitStack]:
    with ExitStack() as s:
        yield s


def node(store: MetaStore, stack: ExitStack, node_id: int) -> Membership:
    m = Membership(store, node_id, f"http://node{node_id}:80", lease_ttl_s=TTL).start()
    stack.callback(m.close)
    return m


def controller_on(store: MetaStore, stack: ExitStack, m: Membership, **kw: object) -> Controller:
    """A Controller on ``m`` whose election has just been won (no threads running)."""
    election = ControllerElection(store, m)
    assert election.campaign()
    return Controller(store, m, election, **kw)  # type: ignore[arg-type]


def states(md: ClusterMetadata, topic: str) -> dict[int, PartitionState]:
    return {p: s for (_, p), (s, _) in md.partitions(topic).items()}


def test_create_topic_spreads_replicas_and_leaders(store: MetaStore, stack: ExitStack) -> None:
    for i in (1, 2, 3):
        node(store, stack, i)
    md = ClusterMetadata(store)
    created = md.create_topic(
        TopicMeta("orders", 3, 3, 2, TopicConfig.model_validate({"retention_ms": 1000})), [1, 2, 3]
    )
    assert [s.partition for s in created] == [0, 1, 2]
    for s in created:
        assert sorted(s.replicas) == [1, 2, 3] and s.isr == s.replicas
        assert s.leader == s.replicas[0] and s.leader_epoch == 0 and s.partition_epoch == 0
    assert {s.leader for s in created} == {1, 2, 3}  # one leader per node
    assert states(md, "orders") == dict(enumerate(created))
    meta = md.topic("orders")
    assert meta is not None and meta.topic_id and meta.config.retention_ms == 1000
    assert md.topics() == {"orders": meta}

    with pytest.raises(TopicExistsError):
        md.create_topic(TopicMeta("orders", 1, 1, 1), [1, 2, 3])
    with pytest.raises(InvalidArgumentError, match="replication factor 3 is more than the 2 live"):
        md.create_topic(TopicMeta("small", 1, 3, 1), [1, 2])
    assert md.topic("small") is None and md.partitions("small") == {}

    # delete: partitions and topic go; the name can be used again, with a new topic id
    assert md.delete_topic("orders")
    assert md.topics() == {} and md.partitions() == {}
    with pytest.raises(TopicNotFoundError):
        md.delete_topic("orders")
    md.create_topic(TopicMeta("orders", 2, 1, 1), [1, 2, 3], start=0)
    again = md.topic("orders")
    assert again is not None and again.topic_id != meta.topic_id
    assert [s.replicas for s in states(md, "orders").values()] == [(1,), (2,)]


def test_create_topic_is_all_or_nothing(store: MetaStore) -> None:
    md = ClusterMetadata(store)
    # a partition key left by an interrupted delete blocks the name, and nothing is written
    leftover = PartitionState("t", 1, (1,), 1, 0, (1,), 0)
    assert store.create(partition_key("t", 1), leftover.to_dict())
    with pytest.raises(TopicExistsError, match="still being deleted"):
        md.create_topic(TopicMeta("t", 3, 1, 1), [1])
    assert store.get(topic_key("t")) is None and set(md.partitions("t")) == {("t", 1)}
    assert not md.delete_topic("t")  # finishes the interrupted delete
    assert md.create_topic(TopicMeta("t", 3, 1, 1), [1])


def test_decide() -> None:
    s = PartitionState("t", 0, (1, 2, 3), 1, 4, (1, 2, 3), 9)
    assert decide(s, {1, 2, 3}) is None
    shrunk = decide(s, {1, 3})
    assert shrunk is not None and shrunk.isr == (1, 3) and shrunk.leader == 1
    assert shrunk.leader_epoch == 4 and shrunk.partition_epoch == 10
    elected = decide(s, {2, 3})
    assert elected is not None and elected.leader == 2 and elected.leader_epoch == 5
    assert elected.isr == (2, 3)


def test_dead_node_loses_leadership_and_isr_membership(store: MetaStore, stack: ExitStack) -> None:
    nodes = {i: node(store, stack, i) for i in (1, 2, 3)}
    md = ClusterMetadata(store)
    before = {s.partition: s for s in md.create_topic(TopicMeta("orders", 3, 3, 2), [1, 2, 3])}
    election = ControllerElection(store, nodes[1]).start()
    stack.callback(election.close)
    ctl = Controller(store, nodes[1], election, interval_s=0.1).start()
    stack.callback(ctl.close)
    wait_until(lambda: election.is_controller, 5, "node 1 became the controller")
    assert states(md, "orders") == before  # all healthy: nothing written

    nodes[3].close()  # revokes its lease: node 3 is gone at once

    def settled() -> bool:
        return all(3 not in s.isr for s in states(md, "orders").values())

    took = wait_until(settled, 5, "node 3 left every ISR and leadership")
    assert took < 3, took
    after = states(md, "orders")
    for p, old in before.items():
        new = after[p]
        assert new.replicas == old.replicas and new.isr == tuple(r for r in old.isr if r != 3)
        if old.leader == 3:  # a new leader from the ISR, the next leader epoch
            assert new.leader in old.isr and new.leader != 3
            assert new.leader_epoch == old.leader_epoch + 1
        else:  # the leader stays, in its epoch; only the ISR shrank
            assert new.leader == old.leader and new.leader_epoch == old.leader_epoch
        assert new.partition_epoch == old.partition_epoch + 1


def test_offline_partition_waits_for_its_isr(
    store: MetaStore, stack: ExitStack, caplog: pytest.LogCaptureFixture
) -> None:
    m1, m2 = node(store, stack, 1), node(store, stack, 2)
    md = ClusterMetadata(store)
    # t/0 on node 2 alone, t/1 on node 1; u/0 on nodes 2 and 1 (2 leading, ISR shrunk to 2)
    md.create_topic(TopicMeta("t", 2, 1, 1), [1, 2], start=1)
    md.create_topic(TopicMeta("u", 1, 2, 1), [1, 2], start=1)
    ((u0, _),) = md.partitions("u").values()
    assert u0.leader == 2
    assert md.change_isr("u", 0, 2, 0, [2]) is not None
    ctl = controller_on(store, stack, m1)

    m2.close()
    caplog.set_level(logging.INFO, logger="tiered_log.cluster.controller")
    first = ctl.run_once()
    assert first.acted and first.offline == [("t", 0), ("u", 0)]
    u = states(md, "u")[0]
    assert u.leader is None and u.leader_epoch == 1 and u.isr == (2,)  # not node 1: not in ISR
    for _ in range(3):
        again = ctl.run_once()
        assert again.written == [] and again.lost == []
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert sorted(r.getMessage().split()[1] for r in warnings) == ["t/0", "u/0"]  # once each

    node(store, stack, 2)  # node 2 comes back: elected again, cleanly
    back = ctl.run_once()
    assert {(s.topic, s.partition) for s in back.written} == {("t", 0), ("u", 0)}
    u = states(md, "u")[0]
    assert u.leader == 2 and u.leader_epoch == 2 and u.isr == (2,)
    assert any("back online" in r.getMessage() for r in caplog.records)


def test_unclean_election_takes_a_live_replica(store: MetaStore, stack: ExitStack) -> None:
    m1, m2 = node(store, stack, 1), node(store, stack, 2)
    md = ClusterMetadata(store)
    md.create_topic(TopicMeta("u", 1, 2, 1), [1, 2], start=1)
    assert md.change_isr("u", 0, 2, 0, [2]) is not None
    ctl = controller_on(store, stack, m1, unclean_leader_election=True)
    m2.close()
    ctl.run_once()
    u = states(md, "u")[0]
    assert u.leader == 1 and u.isr == (1,) and u.leader_epoch == 1


def test_deposed_controller_cannot_write(store: MetaStore, stack: ExitStack) -> None:
    m1, m2, m3 = (node(store, stack, i) for i in (1, 2, 3))
    md = ClusterMetadata(store)
    created = md.create_topic(TopicMeta("orders", 3, 3, 2), [1, 2, 3])
    old = controller_on(store, stack, m1)
    old_fence = old.election.fence
    assert old_fence is not None
    # the controller key goes (as when node 1's lease expires in a pause) and node 2 wins
    v = store.get(CONTROLLER_KEY)
    assert v is not None and store.delete_if(CONTROLLER_KEY, v.mod_revision)
    new = controller_on(store, stack, m2)
    new_fence = new.election.fence
    assert new_fence is not None and new_fence.create_revision > old_fence.create_revision
    assert old.election.is_controller  # node 1 still believes it leads

    ((state, rev),) = [md.partitions("orders")[("orders", 0)]]
    leader = elect_leader(state, {r for r in state.replicas if r != state.leader})
    assert leader is not None
    assert not md.update_partition(state, rev, leader, fence=old_fence)
    assert md.partitions("orders")[("orders", 0)] == (state, rev)

    m3.close()
    stale = old.run_once()  # decides, but etcd refuses every write; then it stops trying
    assert stale.acted and stale.written == [] and len(stale.lost) == 3
    assert states(md, "orders") == dict(enumerate(created))
    assert not old.run_once().acted
    done = new.run_once()
    assert len(done.written) == 3 and all(3 not in s.isr for s in done.written)


def test_deposed_leader_cannot_change_the_isr(store: MetaStore, stack: ExitStack) -> None:
    m1 = node(store, stack, 1)
    m2 = node(store, stack, 2)
    node(store, stack, 3)
    md = ClusterMetadata(store)
    md.create_topic(TopicMeta("t", 1, 3, 1), [1, 2, 3], start=0)
    s = states(md, "t")[0]
    assert s.leader == 1 and s.isr == (1, 2, 3)
    shrunk = md.change_isr("t", 0, 1, 0, [3, 1])  # order follows the replicas
    assert shrunk is not None and shrunk.isr == (1, 3) and shrunk.partition_epoch == 1
    assert md.change_isr("t", 0, 1, 0, [1, 3]) == shrunk  # no change: nothing written
    with pytest.raises(InvalidArgumentError, match="cannot leave its own isr"):
        md.change_isr("t", 0, 1, 0, [3])
    with pytest.raises(InvalidArgumentError, match="not replicas"):
        md.change_isr("t", 0, 1, 0, [1, 7])
    assert md.change_isr("t", 0, 2, 0, [2, 1]) is None  # node 2 never led
    assert md.change_isr("t", 0, 1, 1, [1]) is None  # an epoch that does not exist

    ctl = controller_on(store, stack, m2)
    m1.close()
    ctl.run_once()  # node 3 takes over in leader epoch 1
    s = states(md, "t")[0]
    assert s.leader == 3 and s.leader_epoch == 1
    assert md.change_isr("t", 0, 1, 0, [1, 2, 3]) is None  # the deposed leader: refused
    assert states(md, "t")[0] == s
    assert md.change_isr("t", 0, 3, 1, [2, 3]) is not None  # the new one may
    with pytest.raises(TopicNotFoundError):
        md.change_isr("t", 5, 3, 1, [3])


def test_isr_change_does_not_undo_the_controllers_removal(
    store: MetaStore, stack: ExitStack
) -> None:
    m1, _, m3 = (node(store, stack, i) for i in (1, 2, 3))
    md = ClusterMetadata(store)
    md.create_topic(TopicMeta("t", 1, 3, 1), [1, 2, 3], start=0)
    ctl = controller_on(store, stack, m1)
    m3.close()
    ctl.run_once()
    assert states(md, "t")[0].isr == (1, 2)  # the controller removed dead node 3
    # the leader's proposal was computed from the ISR before that: drop lagging node 2
    s = md.change_isr("t", 0, 1, 0, [1, 3], base_isr=[1, 2, 3])
    assert s is not None and s.isr == (1,) and s.partition_epoch == 2  # 3 stays out
    assert md.change_isr("t", 0, 1, 0, [1, 3]) == s  # a dead node is never added
    node(store, stack, 3)
    s = md.change_isr("t", 0, 1, 0, [1, 3], base_isr=[1])  # back and caught up: joins
    assert s is not None and s.isr == (1, 3)


def test_update_partition_refuses_a_bad_successor(store: MetaStore) -> None:
    md = ClusterMetadata(store)
    md.create_topic(TopicMeta("t", 1, 2, 1), [1, 2], start=0)
    ((s, rev),) = md.partitions("t").values()
    same_epoch = PartitionState("t", 0, s.replicas, 2, s.leader_epoch, s.isr, s.partition_epoch + 1)
    with pytest.raises(InvalidArgumentError, match="without a larger leader epoch"):
        md.update_partition(s, rev, same_epoch)
    stale = PartitionState("t", 0, s.replicas, 1, 0, (1,), 0)
    with pytest.raises(InvalidArgumentError, match="does not follow"):
        md.update_partition(s, rev, stale)
    new = PartitionState("t", 0, s.replicas, 1, 0, (1,), 1)
    assert md.update_partition(s, rev, new)
    assert not md.update_partition(s, rev, new)  # the revision moved: lost, no overwrite


def test_racing_controllers_never_share_a_leader_epoch(store: MetaStore, stack: ExitStack) -> None:
    """Two controller instances of the same epoch (as two threads of one controller), and
    one deposed, run rounds concurrently while nodes die and return and leaders expand
    their ISRs: every state ever written forms one chain per partition (partition epoch
    +1 each), one leader per leader epoch, each elected leader from its predecessor's ISR."""
    members = {i: node(store, stack, i) for i in (1, 2, 3, 4)}
    md = ClusterMetadata(store)
    md.create_topic(TopicMeta("r", 6, 3, 1), [1, 2, 3, 4])
    deposed = controller_on(store, stack, members[4])
    v = store.get(CONTROLLER_KEY)
    assert v is not None and store.delete_if(CONTROLLER_KEY, v.mod_revision)
    a = controller_on(store, stack, members[1])
    b = Controller(store, members[1], a.election)
    history: dict[tuple[str, int], dict[int, PartitionState]] = {
        key: {s.partition_epoch: s} for key, (s, _) in md.partitions().items()
    }
    lock = threading.Lock()

    def record(ctl_md: ClusterMetadata) -> None:
        inner = ctl_md.update_partition

        def update(
            old_state: PartitionState,
            mod_revision: int,
            new_state: PartitionState,
            *,
            fence: Fence | None = None,
        ) -> bool:
            ok = inner(old_state, mod_revision, new_state, fence=fence)
            if ok:
                with lock:
                    chain = history[(new_state.topic, new_state.partition)]
                    assert new_state.partition_epoch not in chain, new_state
                    chain[new_state.partition_epoch] = new_state
            return ok

        ctl_md.update_partition = update  # type: ignore[method-assign]

    for ctl in (a, b, deposed):
        record(ctl.metadata)
    record(md)  # the leaders' ISR changes below

    def race() -> None:
        barrier = threading.Barrier(3)
        errors: list[BaseException] = []

        def go(fn: Callable[[], object]) -> None:
            try:
                barrier.wait(5)
                fn()
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=go, args=(c.run_once,)) for c in (a, b, deposed)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert not errors, errors

    for victim in (2, 3, 2, 4, 3, 2):
        members[victim].close()
        race()
        race()
        members[victim] = node(store, stack, victim)
        for (topic, p), (s, _) in md.partitions().items():  # leaders admit every live replica
            if s.leader is not None:
                md.change_isr(topic, p, s.leader, s.leader_epoch, s.replicas)
        race()

    assert deposed.run_once().written == []
    for key, chain in history.items():
        epochs = sorted(chain)
        assert epochs == list(range(len(epochs))), (key, epochs)  # one chain, no gap
        leaders: dict[int, int | None] = {}
        for pe in epochs[1:]:
            prev, cur = chain[pe - 1], chain[pe]
            assert leaders.setdefault(cur.leader_epoch, cur.leader) == cur.leader, (key, cur)
            if cur.leader != prev.leader:
                assert cur.leader_epoch == prev.leader_epoch + 1
                assert cur.leader is None or cur.leader in prev.isr, (prev, cur)
            else:
                assert cur.leader_epoch == prev.leader_epoch
    elections = sum(
        1
        for chain in history.values()
        for pe in chain
        if pe and chain[pe].leader_epoch != chain[pe - 1].leader_epoch
    )
    assert elections >= 3  # the race did exercise failovers
