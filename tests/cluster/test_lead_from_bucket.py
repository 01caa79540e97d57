"""A node about to lead a partition whose log never held a record and was made at its
start (its copy lost) reads the bucket first (where the partition's offsets continue),
and that read runs on a thread of its own:
with the bucket hung (moto's server SIGSTOPped, the kernel still accepting its
connections) the node's other partitions still change role at once, and the waiting
partition takes the lead once the bucket answers.

A real two-node cluster (etcd, two ``tiered-log serve`` processes) on a moto S3 server
of the test's own."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from remote.test_fetch_timeout import MotoProcess

from tiered_log.cluster.dev import DevCluster
from tiered_log.format import naming

from .conftest import dev_cluster
from .helpers import wait_until

pytestmark = pytest.mark.timeout(180)

EMPTY = "a-empty"  # sorts first: the node meets it before the other topic in a poll
BUSY = "b-busy"
ROLE_CHANGE_S = 30.0
"""Bound of the role change of the partition that needs no bucket read: well under what
one hung bucket read takes to fail (a 30 s read timeout, retried)."""


@pytest.fixture
def cluster(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> Iterator[tuple[DevCluster, MotoProcess]]:
    moto = MotoProcess(tmp_path / "moto.log")
    try:
        bucket = f"lead-view-{uuid.uuid4().hex[:8]}"
        boto3.client(
            "s3",
            endpoint_url=moto.url,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        ).create_bucket(Bucket=bucket)
        settings = {
            "TIERED_LOG_CLUSTER_LEASE_TTL_S": "2",
            "TIERED_LOG_REPLICA_LAG_TIME_MAX_MS": "1500",
            "TIERED_LOG_REMOTE_URL": f"s3://{bucket}",
            "TIERED_LOG_S3_ENDPOINT_URL": moto.url,
            "TIERED_LOG_S3_REGION": "us-east-1",
            "TIERED_LOG_S3_ACCESS_KEY": "testing",
            "TIERED_LOG_S3_SECRET_KEY": "testing",
        }
        for c in dev_cluster(tmp_path_factory, settings, nodes=2):
            yield c, moto
    finally:
        moto.close()


def _view(url: str) -> dict[str, Any]:
    r = httpx.get(f"{url}/v1/cluster", timeout=10)
    assert r.status_code == 200, r.text
    return dict(r.json())


def _leader(url: str, topic: str, p: int) -> int | None:
    for part in _view(url)["partitions"]:
        if (part["topic"], part["partition"]) == (topic, p):
            return part["leader"] if len(part["isr"]) == 2 else None
    return None


def _leads(url: str, topic: str, p: int) -> bool:
    """Whether the node at ``url`` has taken the lead of ``topic``-``p`` (its role)."""
    return any((r["topic"], r["partition"]) == (topic, p) for r in _view(url)["replication"])


def test_a_hung_bucket_read_before_a_lead_does_not_hold_other_role_changes(
    cluster: tuple[DevCluster, MotoProcess],
) -> None:
    c, moto = cluster
    first = c.nodes[1].url
    for topic, partitions in ((EMPTY, 1), (BUSY, 2)):
        r = httpx.post(
            f"{first}/v1/topics",
            json={
                "name": topic,
                "partitions": partitions,
                "replication_factor": 2,
                "min_insync_replicas": 1,
            },
            timeout=10,
        )
        assert r.status_code == 201, r.text
    parts = [(EMPTY, 0), (BUSY, 0), (BUSY, 1)]
    wait_until(lambda: all(_leader(first, t, p) for t, p in parts), 20, "full ISRs")
    doomed = _leader(first, EMPTY, 0)
    assert doomed is not None
    survivor = next(n for n in c.nodes if n != doomed)
    s_url = c.nodes[survivor].url
    # The survivor loses its copy of the empty topic (a disk replaced): its log, made
    # again at its start, is one that needs the bucket's view before it leads. (A log
    # its node created while running, the topic's creation, leads from 0 at once.)
    c.nodes[survivor].stop()
    shutil.rmtree(c.nodes[survivor].data_dir / naming.TOPICS_DIR / EMPTY)
    c.nodes[survivor].start()
    wait_until(lambda: all(_leader(first, t, p) for t, p in parts), 30, "full ISRs again")
    busy = next(p for p in (0, 1) if _leader(first, BUSY, p) == doomed)
    r = httpx.post(
        f"{c.nodes[doomed].url}/v1/topics/{BUSY}/partitions/{busy}/records",
        params={"acks": "all"},
        json={"records": [{"value": f"v{i}"} for i in range(5)]},
        timeout=10,
    )
    assert r.status_code == 200, r.text  # acks=all: the survivor holds them too

    moto.hang()
    c.nodes[doomed].kill()
    # The survivor takes both partitions; the empty one must read the bucket first.
    wait_until(lambda: _leads(s_url, BUSY, busy), ROLE_CHANGE_S, "the busy partition's lead")
    assert _view(s_url)["stale"] is False
    assert not _leads(s_url, EMPTY, 0)  # its bucket read is still waiting on the bucket

    moto.resume()
    wait_until(lambda: _leads(s_url, EMPTY, 0), 60, "the empty partition's lead")
    r = httpx.post(
        f"{s_url}/v1/topics/{EMPTY}/partitions/0/records",
        params={"acks": "all"},
        json={"records": [{"value": "after"}]},
        timeout=30,
    )
    assert r.status_code == 200 and r.json()["offsets"] == [0], r.text
