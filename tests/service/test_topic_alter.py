"""Changing a topic's configuration on a running server: ``PATCH /v1/topics/{t}`` and
``tiered-log topics alter``, applied to the open logs at once and kept over a restart."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from .conftest import ServerProcess, service_env

Factory = Callable[..., ServerProcess]
DAY_MS = 24 * 3600 * 1000


def _create(srv: ServerProcess, name: str, **config: Any) -> dict[str, Any]:
    r = httpx.post(
        srv.url + "/v1/topics", json={"name": name, "partitions": 1, "config": config}, timeout=10
    )
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


def _patch(srv: ServerProcess, name: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.patch(f"{srv.url}/v1/topics/{name}", json=body, timeout=30)


def _bounds(srv: ServerProcess, name: str) -> dict[str, Any]:
    r = httpx.get(f"{srv.url}/v1/topics/{name}/partitions/0/bounds", timeout=10)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def _produce_old(srv: ServerProcess, name: str, n: int, *, age_ms: int) -> None:
    """``n`` records of 200 bytes stamped ``age_ms`` ago, in batches of 20."""
    ts = int(time.time() * 1000) - age_ms
    for i in range(0, n, 20):
        recs = [{"value": f"{j:04d}" + "x" * 196, "timestamp": ts} for j in range(i, i + 20)]
        r = httpx.post(
            f"{srv.url}/v1/topics/{name}/partitions/0/records", json={"records": recs}, timeout=10
        )
        assert r.status_code == 200, r.text


def _reached(srv: ServerProcess, name: str, bound: str, at_least: int) -> Callable[[], bool]:
    """Whether ``name``'s partition 0 has ``bound`` at ``at_least`` or more now."""
    return lambda: bool(_bounds(srv, name)[bound] >= at_least)


def _wait(cond: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.1)
    return cond()


def _error(r: httpx.Response, status: int = 400) -> str:
    assert r.status_code == status, r.text
    message: str = r.json()["error"]["message"]
    return message


def test_patch_changes_describe_and_resets(server_factory: Factory) -> None:
    srv = server_factory()
    _create(srv, "a", retention_ms=DAY_MS)
    r = _patch(
        srv,
        "a",
        {
            "config": {
                "retention_ms": 3_600_000,
                "local_retention_bytes": -1,
                "segment_bytes": 8192,
                "remote_compression": "lz4",
                "message_timestamp_type": "LogAppendTime",
                "flush_messages": None,
            }
        },
    )
    assert r.status_code == 200, r.text
    cfg = r.json()["config"]
    assert cfg["retention_ms"] == 3_600_000 and cfg["segment_bytes"] == 8192
    assert cfg["remote_compression"] == "lz4" and cfg["flush_messages"] is None
    assert cfg["local_retention_bytes"] is None
    assert cfg["message_timestamp_type"] == "LogAppendTime"
    assert r.json()["partition_info"][0]["partition"] == 0
    got = httpx.get(srv.url + "/v1/topics/a", timeout=10).json()["config"]
    assert got == cfg
    # LogAppendTime applies to the next append: the broker's clock, not the producer's.
    _produce_old(srv, "a", 1, age_ms=DAY_MS)
    rec = httpx.get(srv.url + "/v1/topics/a/partitions/0/records?offset=0", timeout=10).json()
    assert rec["records"][0]["timestamp"] > time.time() * 1000 - 60_000
    # delete_config: back to the server's default (retention_ms forever).
    r = _patch(srv, "a", {"delete_config": ["retention_ms", "segment_bytes"]})
    assert r.status_code == 200, r.text
    assert r.json()["config"]["retention_ms"] is None
    assert r.json()["config"]["segment_bytes"] == 64 << 20
    assert r.json()["config"]["remote_compression"] == "lz4"  # untouched


def test_bad_changes_are_refused_naming_the_key(server_factory: Factory) -> None:
    srv = server_factory()
    _create(srv, "b")
    msg = _error(_patch(srv, "b", {"config": {"retention_msx": 5}}))
    assert "retention_msx" in msg and "did you mean retention_ms" in msg
    msg = _error(_patch(srv, "b", {"config": {"partitions": 4}}))
    assert "partitions" in msg and "--partitions N" in msg
    msg = _error(_patch(srv, "b", {"config": {"segment_bytes": 10}}))
    assert "segment_bytes" in msg
    msg = _error(_patch(srv, "b", {"config": {"segment_bytes": None}}))
    assert "segment_bytes" in msg
    msg = _error(_patch(srv, "b", {"config": {"remote_compression": "brotli"}}))
    assert "remote_compression" in msg
    msg = _error(_patch(srv, "b", {"config": {"retention_ms": -5}}))
    assert "retention_ms" in msg
    msg = _error(_patch(srv, "b", {"delete_config": ["nope"]}))
    assert "nope" in msg
    msg = _error(
        _patch(srv, "b", {"config": {"retention_ms": 1}, "delete_config": ["retention_ms"]})
    )
    assert "retention_ms" in msg
    msg = _error(_patch(srv, "b", {"partitions": 1}))  # the count only grows (as in Kafka)
    assert "partition" in msg and "can only grow" in msg
    msg = _error(_patch(srv, "b", {"partitions": 0}))
    assert "partitions" in msg
    _error(_patch(srv, "missing", {"config": {"retention_ms": 1}}), 404)
    # Nothing changed by the refusals.
    cfg = httpx.get(srv.url + "/v1/topics/b", timeout=10).json()["config"]
    assert cfg["segment_bytes"] == 64 << 20 and cfg["retention_ms"] is None


def test_lowered_retention_deletes_old_segments_without_restart(server_factory: Factory) -> None:
    srv = server_factory(maintenance_interval_ms="100", ship_interval_ms="100")
    for name, remote in (("local", False), ("tiered", True)):
        _create(srv, name, segment_bytes=2048, remote_enabled=remote)
        _produce_old(srv, name, 100, age_ms=2 * DAY_MS)  # about 10 sealed segments
        if remote:  # the sealed segments reach the bucket first
            assert _wait(_reached(srv, name, "remote_end_offset", 80))
    time.sleep(0.5)
    for name in ("local", "tiered"):
        assert _bounds(srv, name)["log_start_offset"] == 0  # kept forever so far
        r = _patch(srv, name, {"config": {"retention_ms": DAY_MS}})
        assert r.status_code == 200, r.text
    for name in ("local", "tiered"):
        assert _wait(_reached(srv, name, "log_start_offset", 80)), _bounds(srv, name)
        b = _bounds(srv, name)
        assert b["next_offset"] == 100  # only the sealed segments go, never the active one


def test_segment_size_applies_to_the_active_segment(server_factory: Factory) -> None:
    srv = server_factory()
    _create(srv, "s", remote_enabled=False)
    pdir = srv.data_dir / "topics" / "s" / "0"
    _produce_old(srv, "s", 60, age_ms=0)
    assert len(list(pdir.glob("*.log"))) == 1  # 64 MiB segments: one
    r = _patch(srv, "s", {"config": {"segment_bytes": 2048}})
    assert r.status_code == 200, r.text
    _produce_old(srv, "s", 60, age_ms=0)  # three batches of about 4 KiB: a roll each
    assert len(list(pdir.glob("*.log"))) == 4
    rec = httpx.get(srv.url + "/v1/topics/s/partitions/0/records?offset=0&max_records=200")
    assert [x["offset"] for x in rec.json()["records"]] == list(range(120))


def test_changes_survive_a_restart(server_factory: Factory) -> None:
    srv = server_factory()
    _create(srv, "c")
    r = _patch(srv, "c", {"config": {"retention_bytes": 1 << 30, "segment_ms": 60_000}})
    assert r.status_code == 200, r.text
    meta = json.loads((srv.data_dir / "topics" / "c" / "topic.json").read_text())
    assert meta["config"]["retention_bytes"] == 1 << 30
    srv.restart()
    cfg = httpx.get(srv.url + "/v1/topics/c", timeout=10).json()["config"]
    assert cfg["retention_bytes"] == 1 << 30 and cfg["segment_ms"] == 60_000


def test_remote_disable_needs_a_policy(server_factory: Factory) -> None:
    srv = server_factory(ship_interval_ms="100", maintenance_interval_ms="100")
    for name in ("keep", "drop"):
        _create(srv, name, segment_bytes=2048, local_retention_bytes=0)
        _produce_old(srv, name, 100, age_ms=0)
        assert _wait(_reached(srv, name, "local_start_offset", 80))
        msg = _error(_patch(srv, name, {"config": {"remote_enabled": False}}))
        assert "remote_disable_policy" in msg
        msg = _error(
            _patch(
                srv, name, {"config": {"remote_enabled": False}, "remote_disable_policy": "maybe"}
            )
        )
        assert "remote_disable_policy" in msg

    # retain: nothing more is copied, the archived offsets stay readable.
    r = _patch(
        srv, "keep", {"config": {"remote_enabled": False}, "remote_disable_policy": "retain"}
    )
    assert r.status_code == 200, r.text
    end = _bounds(srv, "keep")["remote_end_offset"]
    _produce_old(srv, "keep", 100, age_ms=0)
    time.sleep(1.0)
    b = _bounds(srv, "keep")
    assert b["remote_end_offset"] == end and b["log_start_offset"] == 0
    rec = httpx.get(srv.url + "/v1/topics/keep/partitions/0/records?offset=0", timeout=10)
    assert rec.status_code == 200 and rec.json()["records"][0]["offset"] == 0

    # delete: the bucket's data goes, the log starts at its local start.
    remote_dir = Path(str(srv.data_dir) + "-remote")
    before = [p for p in remote_dir.rglob("*") if p.is_file() and "drop-" in str(p)]
    assert before
    r = _patch(
        srv, "drop", {"config": {"remote_enabled": False}, "remote_disable_policy": "delete"}
    )
    assert r.status_code == 200, r.text
    b = _bounds(srv, "drop")
    assert b["log_start_offset"] == b["local_start_offset"] >= 80
    after = [p for p in remote_dir.rglob("*") if p.is_file() and "/drop-" in str(p)]
    assert after == []

    # Both kept over a restart: retained data still readable, deleted data still gone.
    srv.restart()
    assert _bounds(srv, "keep")["log_start_offset"] == 0
    rec = httpx.get(srv.url + "/v1/topics/keep/partitions/0/records?offset=0", timeout=10)
    assert rec.status_code == 200 and rec.json()["records"][0]["offset"] == 0
    b = _bounds(srv, "drop")
    assert b["log_start_offset"] >= 80 and b["next_offset"] == 100
    # Tiering on again: copying resumes.
    r = _patch(srv, "drop", {"config": {"remote_enabled": True}})
    assert r.status_code == 200, r.text
    _produce_old(srv, "drop", 100, age_ms=0)
    assert _wait(lambda: _bounds(srv, "drop")["remote_end_offset"] >= 180)


def _cli(srv: ServerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    env = service_env()
    env["TIERED_LOG_URL"] = srv.url
    return subprocess.run(
        [sys.executable, "-m", "tiered_log.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_alter_round_trip_and_errors(server_factory: Factory) -> None:
    srv = server_factory()
    _create(srv, "d")
    p = _cli(
        srv,
        "topics",
        "alter",
        "d",
        "--config",
        "retention_ms=86400000",
        "--config",
        "remote_compression=gzip",
        "--config",
        "local_retention_bytes=-1",
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == (
        "altered topic d: retention_ms=86400000, remote_compression=gzip, "
        "local_retention_bytes=None"
    )
    p = _cli(srv, "topics", "describe", "d", "--json")
    cfg = json.loads(p.stdout)["config"]
    assert cfg["retention_ms"] == DAY_MS and cfg["remote_compression"] == "gzip"
    p = _cli(srv, "topics", "alter", "d", "--delete-config", "retention_ms", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["config"]["retention_ms"] is None

    p = _cli(srv, "topics", "alter", "d", "--config", "segment_bytes=12")
    assert p.returncode == 1
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tiered-log: ") and "segment_bytes" in lines[0]
    p = _cli(srv, "topics", "alter", "d", "--config", "remote_enabled=false")
    assert p.returncode == 1 and "remote_disable_policy" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    p = _cli(
        srv,
        "topics",
        "alter",
        "d",
        "--config",
        "remote_enabled=false",
        "--remote-disable-policy",
        "retain",
    )
    assert p.returncode == 0, p.stderr
    p = _cli(srv, "topics", "alter", "d")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    p = _cli(srv, "topics", "alter", "d", "--config", "retention_ms")
    assert p.returncode == 2
