"""A topic's configuration changed in a cluster (``PATCH /v1/topics/{t}`` at any node)
goes through etcd and every replica applies it: its ``topic.json`` and its open logs,
without a restart. A real three-node :class:`~tiered_log.cluster.dev.DevCluster`."""

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
        d = httpx.get(cluster.nodes[n].url + "/v1/topics/alt", timeout=10).json()
        assert d["config"]["remote_compression"] == "lz4"
    # The leader's retention round drops the old records (shipped first, then cut).
    wait_until(
        lambda: _at_leader(cluster)["log_start_offset"] >= 80,
        30,
        "the leader applies the lowered retention",
    )

    # Refused in a cluster: tiering deleted or turned on; a bad key names it.
    r = httpx.patch(
        url + "/v1/topics/alt",
        json={"config": {"remote_enabled": False}, "remote_disable_policy": "delete"},
        timeout=30,
    )
    assert r.status_code == 400 and "remote_disable_policy=retain" in r.text
    r = httpx.patch(url + "/v1/topics/alt", json={"config": {"partitions": 2}}, timeout=30)
    assert r.status_code == 400 and "partitions" in r.json()["error"]["message"]

    # A restarted node keeps it (etcd's and its own topic.json agree).
    cluster.nodes[2].stop()
    cluster.nodes[2].start()
    d = httpx.get(cluster.nodes[2].url + "/v1/topics/alt", timeout=10).json()
    assert d["config"]["retention_ms"] == DAY_MS
