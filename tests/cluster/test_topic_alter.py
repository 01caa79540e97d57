"""A topic's configuration changed in a cluster (``PATCH /v1/topics/{t}`` at any node)
goes through etcd and every replica applies it: its ``topic.json`` and its open logs,
without a restart; tiering turned off with the bucket's data deleted and on again
(KIP-950) on every replica, shipping again from where the leader stands, also after a
failover. A real three-node :class:`~tiered_log.cluster.dev.DevCluster`."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tiered_log.client import Client
from tiered_log.cluster.dev import DevCluster
from tiered_log.format.records import ProducerRecord

from .conftest import dev_cluster
from .helpers import wait_until

pytestmark = pytest.mark.timeout(180)

DAY_MS = 24 * 3600 * 1000
SETTINGS = {
    "TIERED_LOG_CLUSTER_LEASE_TTL_S": "2",
    "TIERED_LOG_MAINTENANCE_INTERVAL_MS": "200",
    "TIERED_LOG_SHIP_INTERVAL_MS": "200",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    yield from dev_cluster(tmp_path_factory, SETTINGS)


def _stored_config(cluster: DevCluster, node: int, topic: str) -> dict[str, Any]:
    path = cluster.nodes[node].data_dir / "topics" / topic / "topic.json"
    cfg: dict[str, Any] = json.loads(path.read_text())["config"]
    return cfg


def _applied(cluster: DevCluster, node: int) -> Callable[[], bool]:
    """Whether ``node``'s ``topic.json`` of ``alt`` holds the changed retention."""
    return lambda: bool(_stored_config(cluster, node, "alt")["retention_ms"] == DAY_MS)


def _at_leader(cluster: DevCluster) -> dict[str, Any]:
    """Partition 0 of topic ``alt`` as its leader describes it (a follower does not
    know the remote tier's bounds)."""
    url = cluster.nodes[1].url + "/v1/topics/alt"
    leader = httpx.get(url, timeout=10).json()["partition_info"][0]["leader"]
    d = httpx.get(cluster.nodes[leader].url + "/v1/topics/alt", timeout=10).json()
    info: dict[str, Any] = d["partition_info"][0]
    return info


def test_alter_reaches_every_replica(cluster: DevCluster) -> None:
    c = Client(",".join(cluster.urls), retry_timeout_s=20)
    c.create_topic("alt", 1, {"segment_bytes": 2048}, replication_factor=3)
    ts = int(time.time() * 1000) - 2 * DAY_MS
    for _ in range(5):  # five batches, each a segment of its own
        c.produce("alt", 0, [ProducerRecord(b"x" * 200, timestamp=ts)] * 20)

    wait_until(lambda: _at_leader(cluster)["remote_end_offset"] >= 80, 30, "segments shipped")
    # Through the last node, not necessarily the leader: etcd carries it to all.
    url = cluster.nodes[3].url
    r = httpx.patch(
        url + "/v1/topics/alt",
        json={"config": {"retention_ms": DAY_MS, "remote_compression": "lz4"}},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    assert r.json()["config"]["retention_ms"] == DAY_MS
    for n in cluster.nodes:
        wait_until(_applied(cluster, n), 15, f"node {n} applies the change")
        # topic.json is written before the node's open topic takes the change: its
        # describe shows the change once it has
        node_url = cluster.nodes[n].url + "/v1/topics/alt"

        def describes_the_change(u: str = node_url) -> bool:
            compression: str = httpx.get(u, timeout=10).json()["config"]["remote_compression"]
            return compression == "lz4"

        wait_until(describes_the_change, 15, f"node {n} describes the change")
    # The leader's retention round drops the old records (shipped first, then cut).
    wait_until(
        lambda: _at_leader(cluster)["log_start_offset"] >= 80,
        30,
        "the leader applies the lowered retention",
    )

    # Refused: a bad key, named.
    r = httpx.patch(url + "/v1/topics/alt", json={"config": {"partitions": 2}}, timeout=30)
    assert r.status_code == 400 and "partitions" in r.json()["error"]["message"]

    # A restarted node keeps it (etcd's and its own topic.json agree).
    cluster.nodes[2].stop()
    cluster.nodes[2].start()
    d = httpx.get(cluster.nodes[2].url + "/v1/topics/alt", timeout=10).json()
    assert d["config"]["retention_ms"] == DAY_MS


def _leader_of(cluster: DevCluster, topic: str) -> int:
    """Partition 0's leader as the first node that answers names it (-1: none does)."""
    for node in cluster.nodes.values():
        try:
            d = httpx.get(node.url + f"/v1/topics/{topic}", timeout=10).json()
            leader: int = d["partition_info"][0]["leader"]
            return leader
        except (httpx.HTTPError, KeyError, TypeError):
            continue
    return -1


def _part(cluster: DevCluster, topic: str) -> dict[str, Any]:
    """Partition 0 of ``topic`` as its leader describes it (None-safe while it moves)."""
    try:
        node = cluster.nodes[_leader_of(cluster, topic)]
        d = httpx.get(node.url + f"/v1/topics/{topic}", timeout=10).json()
        info: dict[str, Any] = d["partition_info"][0]
        return info
    except (httpx.HTTPError, KeyError, TypeError):
        return {}


def _segments(cluster: DevCluster, topic: str) -> list[dict[str, Any]] | None:
    """The archived segments partition 0's leader serves (None while it cannot say)."""
    try:
        node = cluster.nodes[_leader_of(cluster, topic)]
        r = httpx.get(node.url + f"/v1/topics/{topic}/partitions/0/remote-segments", timeout=10)
        segs: list[dict[str, Any]] = r.json()["segments"]
        return segs
    except (httpx.HTTPError, KeyError, TypeError):
        return None


def _bucket_keys(cluster: DevCluster, log_id: str) -> set[str] | None:
    """The log's objects in the bucket, when it is a directory (None otherwise)."""
    from pathlib import Path

    from tiered_log.format import naming

    root = Path(cluster.remote_url.removeprefix("file://"))
    if "://" in cluster.remote_url and not cluster.remote_url.startswith("file://"):
        return None
    where = root / naming.log_prefix(log_id)
    return {str(p.relative_to(root)) for p in where.rglob("*") if p.is_file()}


def test_tiering_off_with_delete_and_on_again(cluster: DevCluster) -> None:
    c = Client(",".join(cluster.urls), retry_timeout_s=20)
    created = c.create_topic(
        "kip", 1, {"segment_bytes": 2048, "local_retention_bytes": 0}, replication_factor=3
    )
    log_id = f"kip-{created['topic_id'][:12]}-0"
    for _ in range(5):  # five batches, each a segment of its own
        c.produce("kip", 0, [ProducerRecord(b"y" * 200)] * 20)
    wait_until(lambda: _part(cluster, "kip").get("remote_end_offset", 0) >= 80, 30, "shipped")
    wait_until(lambda: _part(cluster, "kip").get("local_start_offset", 0) >= 80, 30, "local cut")
    assert _bucket_keys(cluster, log_id) != set()

    # Off, the bucket's data deleted: applied by every replica, through etcd.
    url = cluster.nodes[3].url + "/v1/topics/kip"
    r = httpx.patch(
        url,
        json={"config": {"remote_enabled": False}, "remote_disable_policy": "delete"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    assert r.json()["config"]["remote_delete_on_disable"] is True
    for n in cluster.nodes:

        def tiering_off(n: int = n) -> bool:
            return not _stored_config(cluster, n, "kip")["remote_enabled"]

        wait_until(tiering_off, 15, f"node {n} turns tiering off")
    wait_until(lambda: _segments(cluster, "kip") == [], 30, "the leader serves no segment")
    wait_until(lambda: not _bucket_keys(cluster, log_id), 30, "the bucket's objects deleted")
    p = _part(cluster, "kip")
    assert p["log_start_offset"] == p["local_start_offset"] >= 80
    start = p["log_start_offset"]

    # On again: the leader ships from where it stands.
    c.produce("kip", 0, [ProducerRecord(b"z" * 200)] * 20)
    r = httpx.patch(url, json={"config": {"remote_enabled": True}}, timeout=30)
    assert r.status_code == 200, r.text
    for _ in range(4):
        c.produce("kip", 0, [ProducerRecord(b"z" * 200)] * 20)
    wait_until(
        lambda: _part(cluster, "kip").get("remote_end_offset", 0) >= 160, 30, "shipping again"
    )
    segs = _segments(cluster, "kip") or []
    assert segs and min(s["base_offset"] for s in segs) >= start
    assert _bucket_keys(cluster, log_id) != set()
    offsets: list[int] = []
    while not offsets or offsets[-1] < 199:  # the bucket's copies, then the local tail
        got = c.fetch("kip", 0, offsets[-1] + 1 if offsets else start).records
        assert got, offsets[-1:]
        offsets += [rec.offset for rec in got]
    assert offsets == list(range(start, 200))

    # The leader fails: its successor (a follower when tiering came back on) ships on.
    old = _leader_of(cluster, "kip")
    cluster.nodes[old].stop()
    try:
        wait_until(lambda: _leader_of(cluster, "kip") not in (old, -1), 30, "a new leader")
        end = _part(cluster, "kip").get("remote_end_offset", 0)
        for _ in range(4):
            c.produce("kip", 0, [ProducerRecord(b"w" * 200)] * 20)
        wait_until(
            lambda: _part(cluster, "kip").get("remote_end_offset", 0) >= max(end, 160) + 60,
            30,
            "the new leader ships",
        )
    finally:
        cluster.nodes[old].start()
