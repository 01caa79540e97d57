"""The Kafka listener in a real three-node cluster (:class:`DevCluster`: etcd from the
wheel, three ``tiered-log serve`` processes, each with a Kafka listener of its own):
Metadata from any node lists every broker and each partition's leader, replicas and ISR
as the cluster's metadata has them; a client given one node's address produces with
acks=all to partitions led by every node and reads them back; a produce or fetch sent
to a follower is NOT_LEADER_OR_FOLLOWER; a topic auto-created through a follower exists
cluster-wide."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from cluster.conftest import dev_cluster
from kio.schema.errors import ErrorCode

from tiered_log.cluster.dev import DevCluster, DevNode
from tiered_log.kafka.messages import FETCH, METADATA, PRODUCE

from .clients import confluent_consume, confluent_produce, expected, sample
from .conftest import KafkaWire, wait_until
from .test_protocol import batch, fetch_body, metadata_body, produce_body

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    yield from dev_cluster(tmp_path_factory, {"TIERED_LOG_CLUSTER_LEASE_TTL_S": "2"})


def http_partitions(cluster: DevCluster, topic: str) -> dict[int, dict[str, Any]]:
    """The topic's partitions as a live node's HTTP API describes them."""
    url = next(n.url for n in cluster.nodes.values() if n.alive)
    r = httpx.get(f"{url}/v1/topics/{topic}", timeout=10)
    r.raise_for_status()
    return {p["partition"]: p for p in r.json()["partition_info"]}


def test_metadata_names_every_broker_and_leader(cluster: DevCluster) -> None:
    topic = "k-replicated"
    r = httpx.post(
        f"{cluster.urls[0]}/v1/topics",
        json={"name": topic, "partitions": 3, "replication_factor": 3},
        timeout=30,
    )
    assert r.status_code == 201, r.text
    brokers = {n.node_id: n.kafka_address for n in cluster.nodes.values()}
    wait_until(
        lambda: all(len(p["isr"]) == 3 for p in http_partitions(cluster, topic).values()),
        30,
        "every replica in sync",
    )
    parts = http_partitions(cluster, topic)

    def answers_as_the_cluster(node: Any) -> bool:
        # Each node applies the metadata at its own next refresh: wait for it.
        with KafkaWire(node.kafka_address) as w:
            resp = w.call(METADATA, 12, metadata_body(topic))
        assert {b.node_id: f"{b.host}:{b.port}" for b in resp.brokers} == brokers
        (t,) = resp.topics
        return t.error_code == ErrorCode.none and all(
            p.leader_id == parts[p.partition_index]["leader"]
            and p.leader_epoch == parts[p.partition_index]["leader_epoch"]
            and sorted(p.replica_nodes) == sorted(parts[p.partition_index]["replicas"])
            and sorted(p.isr_nodes) == sorted(parts[p.partition_index]["isr"])
            for p in t.partitions
        )

    for node in cluster.nodes.values():

        def answers(node: DevNode = node) -> bool:
            return answers_as_the_cluster(node)

        wait_until(answers, 15, f"node {node.node_id}'s metadata")
    assert len({p["leader"] for p in parts.values()}) > 1  # leaders spread over the nodes

    # one node's address is enough: the client finds each partition's leader
    recs = sample(300, 3, "cluster")
    errors = confluent_produce(cluster.nodes[2].kafka_address, topic, recs, acks="all")
    assert errors == [None] * len(recs)
    assert confluent_consume(cluster.nodes[3].kafka_address, topic, 3, len(recs)) == expected(recs)

    # at a follower: NOT_LEADER_OR_FOLLOWER, nothing appended there
    p0 = parts[0]
    follower = next(n for n in cluster.nodes.values() if n.node_id != p0["leader"])
    with KafkaWire(follower.kafka_address) as w:
        got = w.call(PRODUCE, 9, produce_body(topic, batch(b"x"), acks=-1))
        assert got.responses[0].partition_responses[0].error_code == (
            ErrorCode.not_leader_or_follower
        )
        fetched = w.call(FETCH, 12, fetch_body(topic, 0)).responses[0].partitions[0]
        assert fetched.error_code == ErrorCode.not_leader_or_follower
    assert http_partitions(cluster, topic)[0]["next_offset"] == len([r for r in recs if r[0] == 0])


def test_auto_creation_through_a_follower_is_cluster_wide(cluster: DevCluster) -> None:
    with KafkaWire(cluster.nodes[3].kafka_address) as w:
        resp = w.call(METADATA, 12, metadata_body("k-auto"))
    (t,) = resp.topics
    assert t.error_code == ErrorCode.none and len(t.partitions) == 1
    for url in cluster.urls:  # every node learns it from the metadata store's watch

        def knows_it(url: str = url) -> bool:
            return httpx.get(f"{url}/v1/topics/k-auto", timeout=10).status_code == 200

        wait_until(knows_it, 15, f"k-auto known at {url}")


def test_acks_all_below_min_insync_replicas_is_not_enough_replicas(cluster: DevCluster) -> None:
    """With a replica gone and min_insync_replicas 3, an acks=all produce is refused with
    NOT_ENOUGH_REPLICAS and nothing is appended (or, reaching the leader before it applied
    the shrink, appended and not acknowledged); acks=1 is still taken. The node comes
    back after."""
    topic = "k-min-isr"
    r = httpx.post(
        f"{cluster.urls[0]}/v1/topics",
        json={"name": topic, "partitions": 1, "replication_factor": 3, "min_insync_replicas": 3},
        timeout=30,
    )
    assert r.status_code == 201, r.text
    wait_until(lambda: len(http_partitions(cluster, topic)[0]["isr"]) == 3, 30, "a full ISR")
    leader = http_partitions(cluster, topic)[0]["leader"]
    victim = next(n for n in cluster.nodes.values() if n.node_id != leader)
    victim.kill()
    try:
        wait_until(lambda: len(http_partitions(cluster, topic)[0]["isr"]) == 2, 30, "ISR shrink")
        with KafkaWire(cluster.nodes[leader].kafka_address) as w:
            got = w.call(PRODUCE, 9, produce_body(topic, batch(b"all"), acks=-1))
            part = got.responses[0].partition_responses[0]
            # Refused before the append once the leader has applied the shrink; a produce
            # that reaches it before then is appended and, the shrink applied, answered
            # NOT_ENOUGH_REPLICAS_AFTER_APPEND: never acknowledged either way.
            refused = (ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append)
            assert part.error_code in refused, part
            if part.error_code == ErrorCode.not_enough_replicas:
                assert http_partitions(cluster, topic)[0]["next_offset"] == 0
            got = w.call(PRODUCE, 9, produce_body(topic, batch(b"one"), acks=1))
            assert got.responses[0].partition_responses[0].error_code == ErrorCode.none
    finally:
        victim.start()


def test_acks_all_that_cannot_commit_in_the_request_timeout_is_request_timed_out(
    cluster: DevCluster,
) -> None:
    """A follower paused (still in the ISR for a moment: its lease of 2 s has not run
    out) holds the high watermark back: an acks=all produce with a 300 ms timeout
    answers REQUEST_TIMED_OUT after it, not after the server's replication timeout
    (30 s, past the wire's 10 s socket timeout)."""
    topic = "k-timeout"
    r = httpx.post(
        f"{cluster.urls[0]}/v1/topics",
        json={"name": topic, "partitions": 1, "replication_factor": 3, "min_insync_replicas": 2},
        timeout=30,
    )
    assert r.status_code == 201, r.text
    wait_until(lambda: len(http_partitions(cluster, topic)[0]["isr"]) == 3, 30, "a full ISR")
    leader = http_partitions(cluster, topic)[0]["leader"]
    follower = next(n for n in cluster.nodes.values() if n.node_id != leader)
    with KafkaWire(cluster.nodes[leader].kafka_address) as w:
        follower.pause()
        try:
            body = produce_body(topic, batch(b"slow"), acks=-1) | {"timeout": 300}
            part = w.call(PRODUCE, 9, body).responses[0].partition_responses[0]
        finally:
            follower.resume()
    assert part.error_code == ErrorCode.request_timed_out, part


def test_producer_and_consumer_move_to_the_new_leader(cluster: DevCluster) -> None:
    """librdkafka produces acks=all while the partition's leader is SIGKILLed: it gets
    NOT_LEADER_OR_FOLLOWER (or a dead connection), refreshes its metadata and goes on
    at the new leader; every acknowledged record is then read back at its acknowledged
    offset through the new leader."""
    from confluent_kafka import Producer

    topic = "k-failover"
    r = httpx.post(
        f"{cluster.urls[0]}/v1/topics",
        json={"name": topic, "partitions": 1, "replication_factor": 3, "min_insync_replicas": 2},
        timeout=30,
    )
    assert r.status_code == 201, r.text
    wait_until(lambda: len(http_partitions(cluster, topic)[0]["isr"]) == 3, 30, "a full ISR")
    leader = http_partitions(cluster, topic)[0]["leader"]
    p = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "enable.idempotence": False,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 60_000,
            "retry.backoff.ms": 200,
        }
    )
    acked: dict[int, bytes] = {}
    failed: list[object] = []

    def report(err: object, msg: object) -> None:
        if err is not None:
            failed.append(err)
        else:
            acked[msg.offset()] = msg.value()  # type: ignore[attr-defined]

    victim = cluster.nodes[leader]
    try:
        for i in range(400):
            p.produce(topic, value=b"fo-%d" % i, partition=0, on_delivery=report)
            p.poll(0.005)
            if i == 150:
                p.flush(30)
                victim.kill()
        assert p.flush(60) == 0
        assert not failed, failed[:3]
        new_leader = http_partitions(cluster, topic)[0]["leader"]
        assert new_leader != leader
        rows = confluent_consume(cluster.nodes[new_leader].kafka_address, topic, 1, max(acked) + 1)
        stored = {o: v for _, o, _, v, _ in rows}
        assert all(stored.get(o) == v for o, v in acked.items())
        assert {v for v in acked.values()} == {b"fo-%d" % i for i in range(400)}
    finally:
        victim.start()


def test_metadata_keeps_every_broker_while_etcd_is_out_of_reach(cluster: DevCluster) -> None:
    """With etcd paused, Metadata still names the three brokers (the last list read),
    not only the node asked."""
    addresses = {n.node_id: n.kafka_address for n in cluster.nodes.values()}
    node = cluster.nodes[1]
    with KafkaWire(node.kafka_address) as w:
        w.call(METADATA, 12, metadata_body())  # read once while etcd answers
        cluster.etcd.pause()
        try:
            resp = w.call(METADATA, 12, metadata_body())
        finally:
            cluster.etcd.resume()
    assert {b.node_id: f"{b.host}:{b.port}" for b in resp.brokers} == addresses
