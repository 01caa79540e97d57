"""A whole cluster restored to a point in time (``tiered-log cluster restore
--to-timestamp``), with real processes: a one-node cluster ships a topic and is lost
whole; a new cluster on the same bucket restores the topic holding exactly its records
up to the time (a batch cut inside), and takes new records right after them."""

from __future__ import annotations

import base64
import json
import os
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

pytestmark = pytest.mark.timeout(240)

TOPIC = "events"


@pytest.fixture
def clusters() -> Iterator[list[DevCluster]]:
    _skip_unless_etcd_runs()
    made: list[DevCluster] = []
    yield made
    for c in made:
        c.stop()


def _leader(c: DevCluster) -> str:
    return c.nodes[partition_state(c, TOPIC, 0)["leader"]].url


def _remote_end(c: DevCluster) -> int:
    for part in httpx.get(_leader(c) + "/v1/cluster", timeout=10).json()["replication"]:
        if part["topic"] == TOPIC:
            return int(part["remote_end_offset"] or 0)
    return 0


def test_a_new_cluster_restores_a_topic_to_a_time(
    tmp_path: Path, clusters: list[DevCluster]
) -> None:
    settings = {**SETTINGS, "TIERED_LOG_SHIP_INTERVAL_MS": "100"}
    bucket = str(tmp_path / "bucket")
    old = DevCluster(tmp_path / "old", 1, settings=settings, remote_url=bucket).start()
    clusters.append(old)
    r = _any(old, "POST", "/v1/topics", json={"name": TOPIC, "replication_factor": 1})
    assert r.status_code == 201, r.text
    wait_until(lambda: partition_state(old, TOPIC, 0)["leader"] is not None, 15, "a leader")
    sent = []
    for start in range(0, 200, 50):  # a batch a request, each in a segment of its own
        recs = [
            {"value": f"r{i}-" + "x" * 40, "timestamp": 5000 + i} for i in range(start, start + 50)
        ]
        resp = httpx.post(
            f"{_leader(old)}/v1/topics/{TOPIC}/partitions/0/records",
            params={"acks": "all"},
            json={"records": recs},
            timeout=10,
        )
        assert resp.status_code == 200, resp.text
        sent.extend(recs)
    wait_until(lambda: _remote_end(old) >= 150, 60, "the leader to ship")
    for node in old.nodes.values():
        node.kill()
    old.etcd.stop()

    # The new cluster encrypts what it ships: the copy cut at the restore point is
    # written encrypted, though the old cluster shipped in the clear.
    ring = tmp_path / "ring.json"
    ring.write_text(
        json.dumps({"active": "k1", "keys": {"k1": base64.b64encode(os.urandom(32)).decode()}})
    )
    encrypted = {**settings, "TIERED_LOG_REMOTE_ENCRYPTION_KEY_FILE": str(ring)}
    new = DevCluster(tmp_path / "new", 1, settings=encrypted, remote_url=bucket).start()
    clusters.append(new)
    argv = [sys.executable, "-m", "tiered_log.cli", "cluster", "restore", "--json"]
    argv += ["--to-timestamp", "5120", "--wait", "--timeout", "120", "--url", new.urls[0]]
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    [entry] = report["restored"]
    assert (entry["name"], entry["end_offsets"], entry["to_timestamp"]) == (TOPIC, [121], 5120)
    heads: dict[int, list[dict[str, Any]]] = {}
    for rli in Path(bucket).rglob("*.rli"):
        head = json.loads(rli.read_bytes().partition(b"\n")[0])
        heads.setdefault(int(head["base_offset"]), []).append(head)
    [cut] = [h for h in heads[100] if h["next_offset"] == 121]
    assert cut["encryption"]["key_id"] == "k1"
    got: list[dict[str, object]] = []
    while len(got) < 121:
        resp = httpx.get(
            f"{_leader(new)}/v1/topics/{TOPIC}/partitions/0/records",
            params={"offset": len(got)},
            timeout=10,
        )
        assert resp.status_code == 200, resp.text
        assert resp.json()["records"]
        got.extend(resp.json()["records"])
    assert [(g["offset"], g["value"], g["timestamp"]) for g in got] == [
        (i, s["value"], s["timestamp"]) for i, s in enumerate(sent[:121])
    ]
    resp = httpx.post(
        f"{_leader(new)}/v1/topics/{TOPIC}/partitions/0/records",
        params={"acks": "all"},
        json={"records": [{"value": "after"}]},
        timeout=10,
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["first_offset"] == 121

    # A restore through the cluster's node: the new topic takes the unshipped record too
    # (from the node's replica) and is created in the cluster, led and readable.
    argv = [sys.executable, "-m", "tiered_log.cli", "archive", "restore", "--json"]
    argv += ["--url", new.urls[0], "--topic", TOPIC, "--as", "copy", "--to-offset", "122"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    [part] = json.loads(done.stdout)["partitions"]
    assert part["end_offset"] == 122 and part["tail_records"] >= 1
    wait_until(lambda: partition_state(new, "copy", 0)["leader"] is not None, 15, "a leader")
    url = new.nodes[partition_state(new, "copy", 0)["leader"]].url
    copied: list[dict[str, object]] = []

    def read_copy() -> bool:
        resp = httpx.get(
            f"{url}/v1/topics/copy/partitions/0/records", params={"offset": len(copied)}, timeout=10
        )
        if resp.status_code == 200:
            copied.extend(resp.json()["records"])
        return len(copied) >= 122

    wait_until(read_copy, 30, "the copy to read whole")
    assert [g["value"] for g in copied[:122]] == [g["value"] for g in got] + ["after"]
