"""Consumer groups in a real three-node cluster (:class:`DevCluster`): the committed
offsets live in the replicated internal topic, so SIGKILLing the group's coordinator
(the leader of the group's ``__consumer_offsets`` partition) keeps them: a consumer
finds the new coordinator and resumes at the commits."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from cluster.conftest import dev_cluster
from confluent_kafka import Consumer, TopicPartition
from kio.schema.errors import ErrorCode

from tiered_log.cluster.dev import DevCluster

from .clients import Rec, confluent_produce
from .conftest import KafkaWire, wait_until

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    yield from dev_cluster(tmp_path_factory, {"TIERED_LOG_CLUSTER_LEASE_TTL_S": "2"})


def partitions(cluster: DevCluster, topic: str) -> dict[int, dict[str, Any]]:
    url = next(n.url for n in cluster.nodes.values() if n.alive)
    r = httpx.get(f"{url}/v1/topics/{topic}", timeout=10)
    r.raise_for_status()
    return {p["partition"]: p for p in r.json()["partition_info"]}


def coordinator(cluster: DevCluster, group: str) -> int:
    """The node FindCoordinator names for ``group`` (asked of a live node, retried while
    it is not available)."""
    node = next(n for n in cluster.nodes.values() if n.alive)
    deadline = time.monotonic() + 60
    while True:
        with KafkaWire(node.kafka_address) as w:
            r = w.call(10, 1, {"key": group, "key_type": 0})
        if r.error_code == ErrorCode.none:
            return int(r.node_id)
        if time.monotonic() > deadline:
            raise AssertionError(f"no coordinator for {group}: {r.error_code}")
        time.sleep(0.2)


def consumer(cluster: DevCluster, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": group,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "socket.timeout.ms": 10_000,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )


def test_killing_the_coordinator_keeps_the_commits(cluster: DevCluster) -> None:
    topic, group = "kg-topic", "kg-group"
    r = httpx.post(
        f"{cluster.urls[0]}/v1/topics",
        json={"name": topic, "partitions": 2, "replication_factor": 3},
        timeout=30,
    )
    assert r.status_code == 201, r.text
    recs: list[Rec] = [(i % 2, None, f"v{i}".encode(), []) for i in range(20)]
    assert confluent_produce(cluster.bootstrap, topic, recs, acks="all") == [None] * 20
    first = coordinator(cluster, group)
    offsets_partition = next(
        p
        for p, info in partitions(cluster, "__consumer_offsets").items()
        if info["leader"] == first
    )
    wait_until(
        lambda: len(partitions(cluster, "__consumer_offsets")[offsets_partition]["isr"]) == 3,
        60,
        "a full ISR of the group's offsets partition",
    )
    c = consumer(cluster, group)
    try:
        c.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(c.assignment()) < 2 and time.monotonic() < deadline:
            c.poll(0.2)
        assert len(c.assignment()) == 2
        done = c.commit(
            offsets=[TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 7)], asynchronous=False
        )
        assert all(tp.error is None for tp in done)
    finally:
        c.close()
    victim = cluster.nodes[first]
    victim.kill()
    try:
        wait_until(lambda: coordinator(cluster, group) != first, 60, "a new coordinator")
        c = consumer(cluster, group)
        try:
            deadline = time.monotonic() + 60
            seen: list[int] = []
            while time.monotonic() < deadline:
                try:
                    got = c.committed([TopicPartition(topic, p) for p in range(2)], timeout=10)
                    seen = [tp.offset for tp in got]
                    break
                except Exception:  # the coordinator still loading: the client's error
                    time.sleep(0.5)
            assert seen == [4, 7]
            c.subscribe([topic])
            read: list[tuple[int, int]] = []
            deadline = time.monotonic() + 60
            while len(read) < 9 and time.monotonic() < deadline:
                m = c.poll(0.2)
                if m is not None and m.error() is None:
                    read.append((int(m.partition() or 0), int(m.offset() or 0)))
            assert sorted(read) == [(0, o) for o in range(4, 10)] + [(1, o) for o in range(7, 10)]
        finally:
            c.close()
    finally:
        victim.start(wait_s=120)  # a loaded 2-core machine starts a node slowly
