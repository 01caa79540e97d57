"""Replication over the Kafka listener: followers fetch from their leader with Kafka's
Fetch (``replica_id`` set) through SASL/PLAIN with the cluster token, and the leader
counts those fetches per listener in ``/metrics``; with the listeners off
(``kafka_port`` 0) the same cluster replicates over HTTP. Also the follower's transport
against a live leader: a token without ``admin`` and a wrong token are refused, and
the answer carries the leader's offsets and epochs in its tagged fields."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from kafka_listener.conftest import KafkaWire
from kafka_listener.test_protocol import fetch_body
from kio.schema.errors import ErrorCode

from tiered_log.cluster.dev import DevCluster
from tiered_log.cluster.kafka_fetch import KafkaTransport
from tiered_log.cluster.protocol import ReplicaAnswer, ReplicaFetch
from tiered_log.errors import NotLeaderError, TieredLogError
from tiered_log.kafka.auth import SASL_AUTHENTICATE, SASL_HANDSHAKE
from tiered_log.kafka.messages import FETCH
from tiered_log.local.ranges import FetchRanges

from .conftest import _skip_unless_etcd_runs
from .helpers import wait_until

pytestmark = pytest.mark.timeout(120)

TOKEN = "cluster-tok"
READER = "reader-tok"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SETTINGS = {
    "TIERED_LOG_CLUSTER_LEASE_TTL_S": "2",
    "TIERED_LOG_REPLICA_LAG_TIME_MAX_MS": "1500",
    "TIERED_LOG_REPLICATION_TIMEOUT_MS": "5000",
    "TIERED_LOG_TOPIC_DEFAULTS__SEGMENT_BYTES": "4096",
}


def _cluster(
    factory: pytest.TempPathFactory, settings: dict[str, str], *, kafka: bool
) -> Iterator[DevCluster]:
    _skip_unless_etcd_runs()
    c = DevCluster(factory.mktemp("cluster"), 2, settings=settings, kafka=kafka).start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture(scope="module")
def sasl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    tokens = {TOKEN: {"*": ["admin"]}, READER: {"*": ["read"]}}
    settings = {
        **SETTINGS,
        "TIERED_LOG_AUTH_TOKENS": json.dumps(tokens),
        "TIERED_LOG_CLUSTER_TOKEN": TOKEN,
    }
    yield from _cluster(tmp_path_factory, settings, kafka=True)


def _state(c: DevCluster, topic: str) -> dict[str, Any]:
    url = c.nodes[1].url
    parts = httpx.get(f"{url}/v1/cluster", headers=AUTH, timeout=5).json()["partitions"]
    return next(p for p in parts if p["topic"] == topic)


def _replicate(c: DevCluster, topic: str, n: int) -> tuple[dict[str, Any], int]:
    """Create ``topic`` (both nodes replicas), wait for a full ISR, write ``n`` records
    acks=all (each acknowledged only once the follower has it); the partition's state
    and the leader's node id."""
    r = httpx.post(
        f"{c.nodes[1].url}/v1/topics",
        headers=AUTH,
        json={"name": topic, "partitions": 1, "replication_factor": 2, "min_insync_replicas": 2},
        timeout=10,
    )
    assert r.status_code == 201, r.text
    wait_until(lambda: len(_state(c, topic)["isr"]) == 2, 20, "a full ISR")
    st = _state(c, topic)
    url = c.nodes[st["leader"]].url
    for i in range(0, n, 50):
        body = {"records": [{"value": f"v{j}" * 20} for j in range(i, min(n, i + 50))]}

        def produced(body: dict[str, Any] = body) -> bool:
            r = httpx.post(
                f"{url}/v1/topics/{topic}/partitions/0/records",
                params={"acks": "all"},
                headers=AUTH,
                json=body,
                timeout=10,
            )
            assert r.status_code in (200, 421), r.text  # 421: the leader takes its role
            return r.status_code == 200

        wait_until(produced, 10, "an acks=all produce")
    return st, st["leader"]


def _served(c: DevCluster, node: int) -> dict[str, float]:
    """The leader's replica fetches served, by listener (``/metrics``)."""
    text = httpx.get(f"{c.nodes[node].url}/metrics", headers=AUTH, timeout=5).text
    return {
        m[1]: float(m[2])
        for m in re.finditer(r'tiered_log_replica_fetches_total\{listener="(\w+)"\} (\S+)', text)
    }


def _follower_end(c: DevCluster, leader: int, topic: str) -> int:
    rep = httpx.get(f"{c.nodes[leader].url}/v1/cluster", headers=AUTH, timeout=5).json()
    part = next(p for p in rep["replication"] if p["topic"] == topic)
    ends = [r["log_end_offset"] for r in part["replicas"] if r["node_id"] != leader]
    return int(ends[0])


def _replicated_over(c: DevCluster, topic: str, n: int, used: str, unused: str) -> None:
    """``n`` records written to ``topic`` reach the follower, whose fetches the leader
    served over the ``used`` listener only."""
    _, leader = _replicate(c, topic, n)
    wait_until(lambda: _follower_end(c, leader, topic) == n, 10, "the follower's end")
    served = _served(c, leader)
    assert served.get(used, 0) > 0, served
    assert served.get(unused, 0) == 0, served


def test_followers_replicate_over_the_kafka_listener_with_sasl(sasl_cluster: DevCluster) -> None:
    _replicated_over(sasl_cluster, "over-kafka", 400, "kafka", "http")


def test_the_follower_transport_against_a_live_leader(sasl_cluster: DevCluster) -> None:
    c = sasl_cluster
    st, leader = _replicate(c, "raw-replica", 120)
    address = c.nodes[leader].kafka_address
    follower = next(n for n in c.nodes if n != leader)
    epoch = st["leader_epoch"]

    def fetch(
        token: str | None, offset: int = 0, last_epoch: int = -1, leader_epoch: int = epoch
    ) -> ReplicaAnswer:
        t = KafkaTransport(address, replica_id=follower, token=token, timeout_s=5)
        try:
            req = ReplicaFetch(follower, leader_epoch, offset, last_epoch, 1 << 20, 0)
            return t.fetch("raw-replica", 0, req)
        finally:
            t.close()

    ans = fetch(TOKEN)
    assert ans.high_watermark == 120 and ans.reset_to is None and ans.diverging is None
    assert ans.epochs and ans.epochs[0][1] == 0
    assert ans.rolls and ans.rolls[0] == 0  # the first segment begins at offset 0
    assert not isinstance(ans.data, FetchRanges)  # a follower's answer: its bytes
    assert len(bytes(ans.data)) > 120 * 40
    # A follower whose last epoch the leader never had: told where its log diverges.
    # (An epoch above the leader's latest: (-1, -1), which Kafka's own field cannot say.)
    ans = fetch(TOKEN, offset=120, last_epoch=epoch + 5)
    assert not isinstance(ans.data, FetchRanges)
    assert ans.diverging == (-1, -1) and not bytes(ans.data)
    # An epoch the leader does not know yet: refused as not its leader.
    with pytest.raises(NotLeaderError):
        fetch(TOKEN, leader_epoch=epoch + 1)
    # A token that may read but not replicate, and a wrong one, are refused.
    with pytest.raises(TieredLogError, match="error 29"):
        fetch(READER)
    with pytest.raises(TieredLogError, match="refused the cluster token"):
        fetch("not-a-token")


@pytest.fixture(scope="module")
def http_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    yield from _cluster(tmp_path_factory, SETTINGS, kafka=False)


def test_without_kafka_listeners_followers_replicate_over_http(http_cluster: DevCluster) -> None:
    _replicated_over(http_cluster, "over-http", 200, "http", "kafka")


def test_only_a_replica_fetch_carries_the_services_tags(sasl_cluster: DevCluster) -> None:
    """kio (like Kafka's clients, stricter) decodes a consumer's Fetch answer whole:
    it carries no tag of this service's; the same fetch as a replica's does (kio,
    which refuses unknown tags, then cannot decode it)."""
    c = sasl_cluster
    st, leader = _replicate(c, "raw-consumer", 60)
    plain = b"\0consumer\0" + TOKEN.encode()
    with KafkaWire(c.nodes[leader].kafka_address) as w:
        assert w.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}).error_code == ErrorCode.none
        assert w.call(SASL_AUTHENTICATE, 2, {"auth_bytes": plain}).error_code == ErrorCode.none
        part = w.call(FETCH, 12, fetch_body("raw-consumer", 0)).responses[0].partitions[0]
        assert part.error_code == ErrorCode.none and part.high_watermark == 60
        assert part.records
        follower = next(n for n in c.nodes if n != leader)
        body = fetch_body("raw-consumer", 0) | {"replica_id": follower}
        body["topics"][0]["partitions"][0]["current_leader_epoch"] = st["leader_epoch"]
        w.send(FETCH, 12, body)
        with pytest.raises(Exception, match=r"10000|tag"):
            w.receive(FETCH, 12)
