"""Consumer groups with the real clients against a real ``tiered-log serve``: members of
one group split a topic's partitions and take them over when one leaves, commits survive
the consumers and the server, aiokafka and kafka-python group consumers resume at the
committed offsets, and the fencing codes over a raw connection."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from kio.schema.errors import ErrorCode
from service.conftest import ServerProcess

from .clients import Rec, confluent_produce
from .conftest import TIMEOUT_S, KafkaWire, create_topic, kafka_server

GROUP_CONF = {
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 500,
    "socket.timeout.ms": 10_000,
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
    "topic.metadata.refresh.interval.ms": 1000,
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from kafka_server(tmp_path_factory, "groups")


def produce_n(server: ServerProcess, topic: str, partitions: int, n: int) -> None:
    recs: list[Rec] = [(i % partitions, f"k{i}".encode(), f"v{i}".encode(), []) for i in range(n)]
    assert confluent_produce(server.kafka_bootstrap, topic, recs) == [None] * n


def group_consumer(server: ServerProcess, group: str, **extra: Any) -> Consumer:
    return Consumer(
        {"bootstrap.servers": server.kafka_bootstrap, "group.id": group, **GROUP_CONF, **extra}
    )


def poll_until(
    consumers: list[Consumer], done: Any, timeout_s: float, label: str
) -> dict[int, list[tuple[int, int]]]:
    """Poll every consumer until ``done(assigned)``; ``index -> [(partition, offset)]`` of
    the records each read."""
    got: dict[int, list[tuple[int, int]]] = {i: [] for i in range(len(consumers))}
    deadline = time.monotonic() + timeout_s
    while True:
        for i, c in enumerate(consumers):
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got[i].append((int(m.partition() or 0), int(m.offset() or 0)))
        if done(got):
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out: {label}: {[c.assignment() for c in consumers]}")


def parts(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "cooperative-sticky"])
def test_two_confluent_members_split_the_partitions_and_one_takes_over(
    server: ServerProcess, strategy: str
) -> None:
    """The assignors run in the clients (the broker relays their plans), the incremental
    cooperative one included."""
    topic, group = f"grp-split-{strategy}", f"g-split-{strategy}"
    create_topic(server, topic, partitions=4)
    produce_n(server, topic, 4, 40)
    conf = {"partition.assignment.strategy": strategy}
    a = group_consumer(server, group, **conf)
    b = group_consumer(server, group, **conf)
    try:
        a.subscribe([topic])
        b.subscribe([topic])
        poll_until(
            [a, b],
            lambda _: len(parts(a)) == 2 and len(parts(b)) == 2,
            30,
            "two members with two partitions each",
        )
        assert parts(a) | parts(b) == {0, 1, 2, 3}
        b.close()
        poll_until([a], lambda _: parts(a) == {0, 1, 2, 3}, 30, "the survivor takes all")
    finally:
        a.close()


def test_commit_close_and_a_new_member_resumes(server: ServerProcess) -> None:
    topic, group = "grp-resume", "g-resume"
    create_topic(server, topic, partitions=4)
    produce_n(server, topic, 4, 40)  # 10 per partition
    a = group_consumer(server, group)
    try:
        a.subscribe([topic])
        got = poll_until([a], lambda g: len(g[0]) == 40, 30, "all 40 records")
        assert sorted(got[0]) == sorted((p, o) for p in range(4) for o in range(10))
        commits = [TopicPartition(topic, p, 6) for p in range(4)]
        done = a.commit(offsets=commits, asynchronous=False)
        assert all(tp.error is None for tp in done)
        seen = a.committed([TopicPartition(topic, p) for p in range(4)], timeout=TIMEOUT_S)
        assert [tp.offset for tp in seen] == [6, 6, 6, 6]
    finally:
        a.close()
    b = group_consumer(server, group)
    try:
        b.subscribe([topic])
        got = poll_until([b], lambda g: len(g[0]) == 16, 30, "the 16 records after the commits")
        assert sorted(got[0]) == sorted((p, o) for p in range(4) for o in range(6, 10))
    finally:
        b.close()


def test_committed_offsets_of_partitions_are_deleted_when_no_member_reads_them(
    server: ServerProcess,
) -> None:
    """OffsetDelete (kafka-python's ``delete_group_offsets``): refused per partition with
    GROUP_SUBSCRIBED_TO_TOPIC while a member subscribes to the topic; once it left, the
    named partitions' offsets go (the others stay) and a new member reads those from the
    start; an unknown group is GROUP_ID_NOT_FOUND."""
    from kafka import TopicPartition as KpTopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import GroupIdNotFoundError, GroupSubscribedToTopicError, NoError

    topic, group = "grp-offdel", "g-offdel"
    create_topic(server, topic, partitions=2)
    produce_n(server, topic, 2, 20)  # 10 per partition
    admin = KafkaAdminClient(bootstrap_servers=server.kafka_bootstrap, request_timeout_ms=20_000)
    a = group_consumer(server, group)
    try:
        a.subscribe([topic])
        poll_until([a], lambda g: len(g[0]) == 20, 30, "all 20 records")
        done = a.commit(offsets=[TopicPartition(topic, p, 8) for p in range(2)], asynchronous=False)
        assert all(tp.error is None for tp in done)
        got = admin.delete_group_offsets(group, [KpTopicPartition(topic, 0)])
        assert got == {KpTopicPartition(topic, 0): GroupSubscribedToTopicError}
    finally:
        a.close()
    try:
        got = admin.delete_group_offsets(group, [KpTopicPartition(topic, 0)])
        assert got == {KpTopicPartition(topic, 0): NoError}
        left = admin.list_group_offsets(group)[group]
        assert {tp.partition: o.offset for tp, o in left.items()} == {1: 8}
        with pytest.raises(GroupIdNotFoundError):
            admin.delete_group_offsets("g-none", [KpTopicPartition(topic, 0)])
    finally:
        admin.close()
    b = group_consumer(server, group)
    try:
        b.subscribe([topic])
        got2 = poll_until([b], lambda g: len(g[0]) == 12, 30, "partition 0 whole, 1 after 8")
        assert sorted(got2[0]) == sorted([(0, o) for o in range(10)] + [(1, 8), (1, 9)])
    finally:
        b.close()


def test_commits_survive_a_restart(tmp_path_factory: pytest.TempPathFactory) -> None:
    for srv in kafka_server(tmp_path_factory, "groups-restart"):
        create_topic(srv, "grp-restart", partitions=2)
        produce_n(srv, "grp-restart", 2, 10)
        c = group_consumer(srv, "g-restart")
        try:
            c.assign([TopicPartition("grp-restart", p, 0) for p in range(2)])
            c.commit(
                offsets=[TopicPartition("grp-restart", 0, 3), TopicPartition("grp-restart", 1, 4)],
                asynchronous=False,
            )
        finally:
            c.close()
        srv.stop()
        srv.start()
        c = group_consumer(srv, "g-restart")
        try:
            seen = c.committed(
                [TopicPartition("grp-restart", p) for p in range(2)], timeout=TIMEOUT_S
            )
            assert [tp.offset for tp in seen] == [3, 4]
            c.subscribe(["grp-restart"])
            got = poll_until([c], lambda g: len(g[0]) == 3, 30, "3 records after the commits")
            assert sorted(got[0]) == [(0, 3), (0, 4), (1, 4)]
        finally:
            c.close()


def test_aiokafka_group_consumer_commits_and_resumes(server: ServerProcess) -> None:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATP

    topic, group = "grp-aio", "g-aio"
    create_topic(server, topic, partitions=2)
    produce_n(server, topic, 2, 20)

    async def run(expect: int, commit: bool) -> list[tuple[int, int]]:
        c = AIOKafkaConsumer(
            topic,
            bootstrap_servers=server.kafka_bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            request_timeout_ms=10_000,
        )
        await asyncio.wait_for(c.start(), TIMEOUT_S)
        got: list[tuple[int, int]] = []
        try:
            deadline = time.monotonic() + 30
            while len(got) < expect and time.monotonic() < deadline:
                batch = await c.getmany(timeout_ms=500)
                for msgs in batch.values():
                    got += [(m.partition, m.offset) for m in msgs]
            if commit:
                await asyncio.wait_for(c.commit({ATP(topic, 0): 7, ATP(topic, 1): 8}), TIMEOUT_S)
        finally:
            await asyncio.wait_for(c.stop(), TIMEOUT_S)
        return sorted(got)

    first = asyncio.run(run(20, commit=True))
    assert first == sorted((p, o) for p in range(2) for o in range(10))
    again = asyncio.run(run(5, commit=False))
    assert again == [(0, 7), (0, 8), (0, 9), (1, 8), (1, 9)]


def test_kafka_python_group_consumer_commits_and_resumes(server: ServerProcess) -> None:
    from kafka import KafkaConsumer
    from kafka.structs import OffsetAndMetadata
    from kafka.structs import TopicPartition as KTP

    topic, group = "grp-kp", "g-kp"
    create_topic(server, topic, partitions=2)
    produce_n(server, topic, 2, 20)

    def run(expect: int, commit: bool) -> list[tuple[int, int]]:
        c = KafkaConsumer(
            topic,
            bootstrap_servers=server.kafka_bootstrap,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
            request_timeout_ms=10_000,
            consumer_timeout_ms=30_000,
        )
        got: list[tuple[int, int]] = []
        try:
            deadline = time.monotonic() + 30
            while len(got) < expect and time.monotonic() < deadline:
                for msgs in c.poll(timeout_ms=500).values():
                    got += [(m.partition, m.offset) for m in msgs]
            if commit:
                c.commit(
                    {
                        KTP(topic, 0): OffsetAndMetadata(5, "", -1),
                        KTP(topic, 1): OffsetAndMetadata(9, "", -1),
                    }
                )
        finally:
            c.close(autocommit=False)
        return sorted(got)

    first = run(20, commit=True)
    assert first == sorted((p, o) for p in range(2) for o in range(10))
    again = run(6, commit=False)
    assert again == [(0, 5), (0, 6), (0, 7), (0, 8), (0, 9), (1, 9)]


# ---- the codes over a raw connection -----------------------------------------------------


def join(wire: KafkaWire, group: str, member_id: str = "", version: int = 5) -> Any:
    return wire.call(
        11,
        version,
        {
            "group_id": group,
            "session_timeout": 6000,
            "rebalance_timeout": 6000,
            "member_id": member_id,
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"m"}],
        },
    )


def test_fencing_codes(server: ServerProcess) -> None:
    group = "g-codes"
    with KafkaWire(server.kafka_bootstrap) as w:
        found = w.call(10, 1, {"key": group, "key_type": 0})
        assert found.error_code == ErrorCode.none and found.port == int(
            server.kafka_bootstrap.rsplit(":", 1)[1]
        )
        batched = w.call(10, 4, {"key_type": 0, "coordinator_keys": [group, "other"]})
        assert [c.error_code for c in batched.coordinators] == [ErrorCode.none] * 2
        first = join(w, group)
        assert first.error_code == ErrorCode.member_id_required and first.member_id
        me = first.member_id
        joined = join(w, group, me)
        assert joined.error_code == ErrorCode.none and joined.leader == me
        gen = int(joined.generation_id)
        sync = w.call(
            14,
            3,
            {
                "group_id": group,
                "generation_id": gen,
                "member_id": me,
                "group_instance_id": None,
                "assignments": [{"member_id": me, "assignment": b"mine"}],
            },
        )
        assert sync.error_code == ErrorCode.none and sync.assignment == b"mine"

        def hb(gen_id: int, member: str) -> Any:
            return w.call(
                12,
                3,
                {
                    "group_id": group,
                    "generation_id": gen_id,
                    "member_id": member,
                    "group_instance_id": None,
                },
            ).error_code

        assert hb(gen, me) == ErrorCode.none
        assert hb(gen - 1, me) == ErrorCode.illegal_generation
        assert hb(gen, "nobody") == ErrorCode.unknown_member_id

        def commit(gen_id: int, member: str) -> Any:
            r = w.call(
                8,
                7,
                {
                    "group_id": group,
                    "generation_id_or_member_epoch": gen_id,
                    "member_id": member,
                    "group_instance_id": None,
                    "topics": [
                        {
                            "name": "t",
                            "partitions": [
                                {
                                    "partition_index": 0,
                                    "committed_offset": 5,
                                    "committed_leader_epoch": -1,
                                    "committed_metadata": "x",
                                }
                            ],
                        }
                    ],
                },
            )
            return r.topics[0].partitions[0].error_code

        assert commit(gen + 1, me) == ErrorCode.illegal_generation
        assert commit(gen, "nobody") == ErrorCode.unknown_member_id
        assert commit(-1, "") == ErrorCode.unknown_member_id  # the group has a member
        assert commit(gen, me) == ErrorCode.none
        fetched = w.call(
            9,
            8,
            {
                "groups": [
                    {"group_id": group, "topics": [{"name": "t", "partition_indexes": [0, 1]}]}
                ]
            },
        )
        rows = fetched.groups[0].topics[0].partitions
        assert [(r.committed_offset, r.metadata) for r in rows] == [(5, "x"), (-1, "")]
        left = w.call(
            13, 3, {"group_id": group, "members": [{"member_id": me, "group_instance_id": None}]}
        )
        assert left.error_code == ErrorCode.none
        assert left.members[0].error_code == ErrorCode.none
        assert hb(gen, me) == ErrorCode.unknown_member_id
        listed = w.call(16, 4, {"states_filter": []})
        assert (group, "Empty") in {(g.group_id, g.group_state) for g in listed.groups}
        gone = w.call(42, 2, {"groups_names": [group, "never-seen"]})
        assert [r.error_code for r in gone.results] == [
            ErrorCode.none,
            ErrorCode.group_id_not_found,
        ]


def test_clients_cannot_produce_to_the_internal_topic(server: ServerProcess) -> None:
    from confluent_kafka import KafkaError

    errors = confluent_produce(
        server.kafka_bootstrap, "__consumer_offsets", [(0, b"k", b"v", [])], **{"retries": 0}
    )
    assert len(errors) == 1 and isinstance(errors[0], KafkaError)
    assert errors[0].code() == KafkaError.TOPIC_EXCEPTION


def test_the_internal_topic_is_listed_only_when_asked(server: ServerProcess) -> None:
    import httpx

    with KafkaWire(server.kafka_bootstrap) as w:  # creates the internal topic
        assert w.call(10, 1, {"key": "g-listing", "key_type": 0}).error_code == ErrorCode.none
    plain = httpx.get(f"{server.url}/v1/topics", timeout=TIMEOUT_S).json()["topics"]
    assert "__consumer_offsets" not in {t["name"] for t in plain}
    asked = httpx.get(f"{server.url}/v1/topics?internal=true", timeout=TIMEOUT_S).json()["topics"]
    assert "__consumer_offsets" in {t["name"] for t in asked}


# ---- HTTP ----------------------------------------------------------------------------------


def test_http_shows_members_assignments_offsets_and_lag(server: ServerProcess) -> None:
    import httpx

    topic, group = "grp-http", "g-http"
    create_topic(server, topic, partitions=2)
    produce_n(server, topic, 2, 10)
    c = group_consumer(server, group, **{"client.id": "http-client"})
    try:
        c.subscribe([topic])
        poll_until([c], lambda _: len(parts(c)) == 2, 30, "two partitions assigned")
        c.commit(
            offsets=[TopicPartition(topic, 0, 2), TopicPartition(topic, 1, 5)], asynchronous=False
        )
        r = httpx.get(f"{server.url}/v1/groups/{group}", timeout=TIMEOUT_S)
        assert r.status_code == 200, r.text
        g = r.json()
        assert g["state"] == "Stable" and g["protocol_type"] == "consumer"
        assert [(m["client_id"], m["assignment"]) for m in g["members"]] == [
            ("http-client", {topic: [0, 1]})
        ]
        assert [(o["partition"], o["committed_offset"], o["lag"]) for o in g["offsets"]] == [
            (0, 2, 3),
            (1, 5, 0),
        ]
        assert g["total_lag"] == 3
        listed = httpx.get(f"{server.url}/v1/groups", timeout=TIMEOUT_S).json()["groups"]
        assert {
            "group": group,
            "state": "Stable",
            "protocol_type": "consumer",
            "members": 1,
            "coordinator": 0,
        } in listed
        busy = httpx.post(
            f"{server.url}/v1/groups/{group}/offsets",
            json={"offsets": [{"topic": topic, "partition": 0, "offset": 1}]},
            timeout=TIMEOUT_S,
        )
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "group_has_members"
    finally:
        c.close()
    r = httpx.post(
        f"{server.url}/v1/groups/{group}/offsets",
        json={"offsets": [{"topic": topic, "partition": 0, "offset": 1}]},
        timeout=TIMEOUT_S,
    )
    assert r.status_code == 204, r.text
    g = httpx.get(f"{server.url}/v1/groups/{group}", timeout=TIMEOUT_S).json()
    assert g["state"] == "Empty" and g["members"] == []
    assert [(o["partition"], o["committed_offset"]) for o in g["offsets"]] == [(0, 1), (1, 5)]
    missing = httpx.get(f"{server.url}/v1/groups/no-such-group", timeout=TIMEOUT_S)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "group_not_found"
    bad = httpx.post(
        f"{server.url}/v1/groups/{group}/offsets",
        json={"offsets": [{"topic": topic, "partition": 0, "offset": -3}]},
        timeout=TIMEOUT_S,
    )
    assert bad.status_code == 400
    spec = httpx.get(f"{server.url}/openapi.json", timeout=TIMEOUT_S).json()
    assert {"/v1/groups", "/v1/groups/{group}", "/v1/groups/{group}/offsets"} <= set(spec["paths"])


def test_a_static_member_rejoining_fences_its_old_member_id(server: ServerProcess) -> None:
    group = "g-static"

    def join_static(wire: KafkaWire) -> Any:
        return wire.call(
            11,
            5,
            {
                "group_id": group,
                "session_timeout": 6000,
                "rebalance_timeout": 6000,
                "member_id": "",
                "group_instance_id": "instance-1",
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": b"m"}],
            },
        )

    with KafkaWire(server.kafka_bootstrap) as w:
        first = join_static(w)  # a static member needs no MEMBER_ID_REQUIRED round
        assert first.error_code == ErrorCode.none and first.member_id
        second = join_static(w)
        assert second.error_code == ErrorCode.none
        assert second.member_id != first.member_id
        assert second.generation_id > first.generation_id
        old = w.call(
            12,
            3,
            {
                "group_id": group,
                "generation_id": second.generation_id,
                "member_id": first.member_id,
                "group_instance_id": "instance-1",
            },
        )
        assert old.error_code == ErrorCode.fenced_instance_id
        left = w.call(
            13,
            3,
            {"group_id": group, "members": [{"member_id": "", "group_instance_id": "instance-1"}]},
        )
        assert left.members[0].error_code == ErrorCode.none


def test_an_offset_tombstone_replays_as_a_deletion() -> None:
    """The internal topic's records replayed (as a new coordinator loads them): a
    partition's tombstone drops that offset only; the group goes with its last one."""
    from tiered_log.kafka.groups.offsets import (
        Committed,
        PartitionOffsets,
        commit_record,
        offset_tombstone,
    )

    state = PartitionOffsets(epoch=0)
    for p in (0, 1):
        rec = commit_record("g", "t", p, Committed(5 + p, -1, "", 1))
        state.apply(rec.key, rec.value)
    gone = offset_tombstone("g", "t", 0)
    assert gone.value is None
    state.apply(gone.key, gone.value)
    assert list(state.groups["g"]) == [("t", 1)]
    last = offset_tombstone("g", "t", 1)
    state.apply(last.key, last.value)
    assert "g" not in state.groups
