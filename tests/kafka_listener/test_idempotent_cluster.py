"""Idempotent producers in a real three-node cluster (:class:`DevCluster`): producer ids
handed out by different nodes are distinct (blocks reserved in etcd by compare-and-swap);
a batch acknowledged by a leader that is then SIGKILLed is answered by the new leader as
a duplicate with its original offset (the new leader's producer state was built from the
replicated batches); and the idempotent producers of aiokafka and kafka-python (its
default producer), producing with acks=all across a SIGKILL of the partition's leader,
leave every acknowledged record in the log exactly once, in order, at the offset it was
acknowledged with; Metadata names no leader that is not a live broker."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from cluster.conftest import dev_cluster
from kio.schema.errors import ErrorCode

from tiered_log.cluster.dev import DevCluster, DevNode
from tiered_log.config import Settings
from tiered_log.kafka.messages import METADATA, PRODUCE
from tiered_log.kafka.producer_ids import BLOCK

from .clients import confluent_consume
from .conftest import KafkaWire, wait_until
from .test_cluster import http_partitions
from .test_idempotent import idem_batch, init_producer_id, produce, produce_body
from .test_protocol import batch, metadata_body

pytestmark = pytest.mark.timeout(240)

N = 2000
"""Records each client produces across the leader's kill."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    yield from dev_cluster(tmp_path_factory, {"TIERED_LOG_CLUSTER_LEASE_TTL_S": "2"})


def replicated_topic(cluster: DevCluster, topic: str) -> DevNode:
    """Create ``topic`` (one partition, three replicas, two in sync for acks=all) and
    wait for a full ISR; its leader's node."""
    r = httpx.post(
        f"{cluster.urls[0]}/v1/topics",
        json={"name": topic, "partitions": 1, "replication_factor": 3, "min_insync_replicas": 2},
        timeout=30,
    )
    assert r.status_code == 201, r.text
    wait_until(lambda: len(http_partitions(cluster, topic)[0]["isr"]) == 3, 30, "a full ISR")
    leader = cluster.nodes[http_partitions(cluster, topic)[0]["leader"]]
    # The metadata names the leader before that node has applied it (each node applies the
    # metadata at its own next refresh, as Kafka's brokers do): until then it answers
    # NOT_LEADER_OR_FOLLOWER. Wait for its own Metadata to name it.
    wait_until(lambda: names_itself_leader(leader, topic), 30, "the leader to take its role")
    return leader


def names_itself_leader(node: DevNode, topic: str) -> bool:
    """Whether ``node``'s Kafka Metadata names ``node`` the leader of partition 0."""
    with KafkaWire(node.kafka_address) as w:
        (t,) = w.call(METADATA, 12, metadata_body(topic)).topics
    return bool(t.error_code == ErrorCode.none and t.partitions[0].leader_id == node.node_id)


def new_leader(cluster: DevCluster, topic: str, old: int) -> DevNode:
    wait_until(
        lambda: http_partitions(cluster, topic)[0]["leader"] not in (old, -1, None),
        30,
        "a new leader",
    )
    return cluster.nodes[http_partitions(cluster, topic)[0]["leader"]]


def restart(node: DevNode) -> None:
    if not node.alive:
        node.start()


def test_producer_ids_from_two_nodes_are_distinct(cluster: DevCluster) -> None:
    got: dict[int, list[int]] = {}
    for node_id in (1, 2):
        with KafkaWire(cluster.nodes[node_id].kafka_address) as w:
            for _ in range(3):
                resp = init_producer_id(w)
                assert resp.error_code == ErrorCode.none
                got.setdefault(node_id, []).append(resp.producer_id)
    ids = got[1] + got[2]
    assert len(set(ids)) == len(ids)
    # each node hands out from a block of its own
    assert {i // BLOCK for i in got[1]}.isdisjoint({i // BLOCK for i in got[2]})


def test_new_leader_answers_a_retry_of_the_old_leaders_batch_as_a_duplicate(
    cluster: DevCluster,
) -> None:
    topic = "idem-c-retry"
    leader = replicated_topic(cluster, topic)
    with KafkaWire(leader.kafka_address) as w:
        pid = init_producer_id(w).producer_id
        for seq in (0, 2):
            part = produce(w, topic, idem_batch(pid, seq))  # acks=all
            assert (part.error_code, part.base_offset) == (ErrorCode.none, seq)
    leader.kill()
    try:
        successor = new_leader(cluster, topic, leader.node_id)
        with KafkaWire(successor.kafka_address) as w:
            # the retry of a lost answer, sent again (as a client does) while the successor
            # is named leader in the metadata but has not taken its role yet
            deadline = time.monotonic() + 30
            while True:
                again = produce(w, topic, idem_batch(pid, 2))
                if again.error_code != ErrorCode.not_leader_or_follower:
                    break
                assert time.monotonic() < deadline, "the successor never took its role"
                time.sleep(0.1)
            assert (again.error_code, again.base_offset) == (ErrorCode.none, 2)
            assert http_partitions(cluster, topic)[0]["next_offset"] == 4
            gap = produce(w, topic, idem_batch(pid, 6))
            assert gap.error_code == ErrorCode.out_of_order_sequence_number
            nxt = produce(w, topic, idem_batch(pid, 4))
            assert (nxt.error_code, nxt.base_offset) == (ErrorCode.none, 4)
    finally:
        restart(leader)


def test_a_follower_that_got_nothing_leads_a_new_topic_from_offset_zero(
    cluster: DevCluster,
) -> None:
    """A new topic's leader takes a batch (acks=1: reserving offsets in the bucket) that
    neither follower got (both SIGSTOPped), then is SIGKILLed: the follower that takes
    the lead, its log created empty while its node ran, starts at offset 0, as Kafka's
    would (nothing was committed), not above the dead leader's reservation of offsets."""
    topic = "idem-c-first-batch-lost"
    leader = replicated_topic(cluster, topic)
    followers = [n for n in cluster.nodes.values() if n is not leader]

    def ready() -> bool:
        # the metadata names the leader and a full ISR before the nodes have read the
        # topic and the leader has taken its role
        return (
            all(
                httpx.get(f"{n.url}/v1/topics/{topic}", timeout=5).status_code == 200
                for n in cluster.nodes.values()
            )
            and (
                httpx.get(f"{leader.url}/v1/topics/{topic}/partitions/0/bounds", timeout=5)
            ).status_code
            == 200
        )

    wait_until(ready, 30, "every node to hold the topic and its leader to serve")
    for n in followers:
        n.pause()
    # A follower's fetch sent before its pause may still wait at the leader (up to
    # replica_fetch_wait_max_ms; no event says when the last one was answered): the batch
    # would wake it and go into its socket, to be applied on resume. Let every such fetch
    # run out (answered empty) first.
    time.sleep(3 * Settings.model_fields["replica_fetch_wait_max_ms"].default / 1000)
    try:
        with KafkaWire(leader.kafka_address) as w:
            resp = w.call(PRODUCE, 9, produce_body(topic, batch(b"a", b"b", b"c"), acks=1))
            part = resp.responses[0].partition_responses[0]
            assert (part.error_code, part.base_offset) == (ErrorCode.none, 0)
        leader.kill()
    finally:
        for n in followers:
            n.resume()
    try:
        successor = new_leader(cluster, topic, leader.node_id)
        deadline = time.monotonic() + 30
        while True:  # until the successor has taken its role
            r = httpx.post(
                f"{successor.url}/v1/topics/{topic}/partitions/0/records",
                json={"records": [{"value": "after"}]},
                params={"acks": "all"},
                timeout=15,
            )
            if r.status_code == 200:
                break
            assert r.json()["error"]["retriable"], r.text  # not leading yet, or not ready
            assert time.monotonic() < deadline, r.text
            time.sleep(0.2)
        assert r.json()["offsets"] == [0]  # not above the reservation (100,000 offsets)
    finally:
        restart(leader)


def test_metadata_names_no_leader_that_is_not_a_live_broker(cluster: DevCluster) -> None:
    """Metadata never names a leader its brokers do not include (kafka-python's sender
    thread dies on such a one, UnknownBrokerIdError, losing every record after): from
    the SIGKILL of the controller, which leads a partition alone, until a new controller
    took the partition offline, each answer names that node among the brokers or as no
    leader at all (LEADER_NOT_AVAILABLE, leader -1, as Kafka's broker answers a leader
    that is not alive). The window between its lease's end and the new controller's
    round is short: a regression is caught often, not always."""
    topic = "idem-c-lonely"
    r = httpx.post(
        f"{cluster.urls[0]}/v1/topics",
        json={"name": topic, "partitions": 3, "replication_factor": 1},
        timeout=30,
    )
    assert r.status_code == 201, r.text
    wait_until(
        lambda: all(p["leader"] is not None for p in http_partitions(cluster, topic).values()),
        30,
        "leaders",
    )
    controller = httpx.get(f"{cluster.urls[0]}/v1/cluster", timeout=10).json()["controller_id"]
    led = {p["leader"]: i for i, p in http_partitions(cluster, topic).items()}
    assert controller in led, (controller, led)
    victim = cluster.nodes[controller]
    other = next(n for n in cluster.nodes.values() if n is not victim)

    def other_knows_the_topic() -> bool:
        # the topic was created through another node: ``other`` may not have read it yet
        with KafkaWire(other.kafka_address) as w:
            t = w.call(METADATA, 12, metadata_body(topic)).topics[0]
            return t.error_code == ErrorCode.none and len(t.partitions) == 3

    wait_until(other_knows_the_topic, 30, f"node {other.node_id} to know the topic")
    victim.kill()
    try:
        with KafkaWire(other.kafka_address) as w:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                resp = w.call(METADATA, 12, metadata_body(topic))
                brokers = {b.node_id for b in resp.brokers}
                p = resp.topics[0].partitions[led[controller]]
                if p.leader_id != -1:
                    assert p.leader_id in brokers and p.error_code == ErrorCode.none
                elif controller not in brokers:
                    assert p.error_code == ErrorCode.leader_not_available
                    if http_partitions(cluster, topic)[led[controller]]["leader"] is None:
                        break  # offline: the controller's round is done
            else:
                raise AssertionError("the partition never went offline")
    finally:
        restart(victim)


def aiokafka_produce(bootstrap: str, topic: str, kill: DevNode) -> dict[int, int]:
    """aiokafka's idempotent producer (acks=all) sends ``N`` records, the leader is
    SIGKILLed after a third of them were handed over; ``{record: acknowledged offset}``."""
    from aiokafka import AIOKafkaProducer

    async def run() -> list[Any]:
        p = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            enable_idempotence=True,
            acks="all",
            request_timeout_ms=10_000,
            retry_backoff_ms=200,
            linger_ms=2,
        )
        await p.start()
        try:
            futs = []
            for i in range(N):
                futs.append(await p.send(topic, value=b"r-%d" % i, partition=0))
                if i == N // 3:
                    kill.kill()
            return await asyncio.gather(*futs)
        finally:
            await p.stop()

    return {i: m.offset for i, m in enumerate(asyncio.run(asyncio.wait_for(run(), 120)))}


def kafka_python_produce(bootstrap: str, topic: str, kill: DevNode) -> dict[int, int]:
    """kafka-python's default producer (idempotent, acks=all), as
    :func:`aiokafka_produce`."""
    from kafka import KafkaProducer

    p = KafkaProducer(
        bootstrap_servers=bootstrap,
        request_timeout_ms=10_000,
        max_block_ms=30_000,
        delivery_timeout_ms=90_000,
        retry_backoff_ms=200,
        linger_ms=2,
    )
    try:
        assert p.config["enable_idempotence"] is True and p.config["acks"] == -1
        futs = []
        for i in range(N):
            futs.append(p.send(topic, value=b"r-%d" % i, partition=0))
            if i == N // 3:
                kill.kill()
        p.flush(timeout=100)
        return {i: f.get(timeout=10).offset for i, f in enumerate(futs)}
    finally:
        p.close(timeout=10)


@pytest.mark.parametrize(
    "produce_all",
    [
        pytest.param(aiokafka_produce, id="aiokafka"),
        pytest.param(kafka_python_produce, id="kafka-python"),
    ],
)
def test_idempotent_producer_across_a_leader_kill_stores_each_record_once(
    cluster: DevCluster, produce_all: Any
) -> None:
    topic = f"idem-c-kill-{produce_all.__name__.split('_')[0]}"
    leader = replicated_topic(cluster, topic)
    try:
        acked = produce_all(cluster.bootstrap, topic, leader)
        successor = new_leader(cluster, topic, leader.node_id)
        end = http_partitions(cluster, topic)[0]["next_offset"]
        assert end == N  # nothing written twice
        rows = confluent_consume(successor.kafka_address, topic, 1, end)
        assert [v for _, _, _, v, _ in rows] == [b"r-%d" % i for i in range(N)]
        assert [o for _, o, _, _, _ in rows] == list(range(N))
        assert acked == {i: i for i in range(N)}  # each at the offset it was acknowledged
    finally:
        restart(leader)
