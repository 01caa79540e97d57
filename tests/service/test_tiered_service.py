"""The service over the remote tier: archived reads, metrics, restore from the store.

Each test runs the server as a real process with its remote tier on moto's S3 server
(``s3``) or the default local directory (``fs``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tiered_log.format.records import decode_records

from .conftest import ServerProcess

TINY = {"segment_bytes": 4096, "local_retention_bytes": 0}


def _remote_settings(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, str]:
    if kind == "fs":
        return {"remote_url": str(tmp_path / "bucket"), "ship_interval_ms": "50"}
    target: Any = request.getfixturevalue("s3_target")
    loc: Any = request.getfixturevalue("s3_location")
    url = f"s3://{loc.bucket}/{loc.prefix}" if loc.prefix else f"s3://{loc.bucket}"
    out = {
        "remote_url": url,
        "s3_endpoint_url": target.endpoint,
        "s3_region": target.region,
        "ship_interval_ms": "50",
    }
    if target.access_key:
        out["s3_access_key"] = target.access_key
        out["s3_secret_key"] = target.secret_key or ""
    return out


def _records(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {"value": f"value-{i:06d}-" + "x" * 100, "key": f"k{i % 7}", "timestamp": 1_000_000 + i}
        for i in range(start, start + n)
    ]


def _wait(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _bounds(c: httpx.Client, topic: str) -> dict[str, int]:
    r = c.get(f"/v1/topics/{topic}/partitions/0/bounds")
    assert r.status_code == 200, r.text
    out: dict[str, int] = r.json()
    return out


def _metric(c: httpx.Client, name: str, topic: str) -> float:
    for line in c.get("/metrics").text.splitlines():
        if line.startswith(f'{name}{{topic="{topic}"}} '):
            return float(line.rsplit(" ", 1)[1])
    return -1.0


def _read_all_json(
    c: httpx.Client, topic: str, start: int, end: int, partition: int = 0
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    offset = start
    while offset < end:
        r = c.get(
            f"/v1/topics/{topic}/partitions/{partition}/records",
            params={"offset": offset, "max_records": 200},
        )
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["records"], body
        out.extend(body["records"])
        offset = body["next_offset"]
    return out


@pytest.mark.parametrize("kind", ["fs", "s3"])
def test_archived_offsets_are_served_from_the_remote_tier(
    kind: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    server_factory: Callable[..., ServerProcess],
) -> None:
    srv = server_factory(**_remote_settings(kind, request, tmp_path))
    with srv.client() as c:
        assert (
            c.post(
                "/v1/topics", json={"name": "archive", "partitions": 1, "config": TINY}
            ).status_code
            == 201
        )
        for start in range(0, 600, 100):
            r = c.post(
                "/v1/topics/archive/partitions/0/records", json={"records": _records(100, start)}
            )
            assert r.status_code == 200, r.text
        _wait(lambda: _bounds(c, "archive")["local_start_offset"] > 300, "shipping")
        b = _bounds(c, "archive")
        assert b["log_start_offset"] == 0 and b["next_offset"] == 600
        recs = _read_all_json(c, "archive", 0, 600)
        assert [x["offset"] for x in recs] == list(range(600))
        assert all(x["value"] == _records(1, x["offset"])[0]["value"] for x in recs)
        assert all(x["timestamp"] == 1_000_000 + x["offset"] for x in recs)
        # The binary form decodes (and verifies) the same records from the archive.
        r = c.get(
            "/v1/topics/archive/partitions/0/records",
            params={"offset": 5, "max_records": 50},
            headers={"Accept": "application/octet-stream"},
        )
        assert r.status_code == 200
        frames, _, _ = decode_records(r.content, start_offset=5)
        assert [f.offset for f in frames][:3] == [5, 6, 7]
        assert frames[0].value == _records(1, 5)[0]["value"].encode()
        # A timestamp lookup that lands in the archive.
        r = c.get("/v1/topics/archive/partitions/0/offsets", params={"timestamp": 1_000_042})
        assert r.status_code == 200 and r.json()["offset"] == 42
        # Copy progress and remote reads show in /metrics.
        metrics = c.get("/metrics").text
        assert "tiered_log_remote_fetch_bytes" in metrics
    assert srv.stop() == 0


def test_empty_data_dir_restores_topics_from_the_store(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    server_factory: Callable[..., ServerProcess],
) -> None:
    settings = _remote_settings("s3", request, tmp_path)
    srv = server_factory(**settings)
    with srv.client() as c:
        assert (
            c.post(
                "/v1/topics",
                json={"name": "orders", "partitions": 2, "config": {"segment_bytes": 4096}},
            ).status_code
            == 201
        )
        for p in (0, 1):
            for start in range(0, 300, 30):  # a batch never splits: 10 segments each
                r = c.post(
                    f"/v1/topics/orders/partitions/{p}/records",
                    json={"records": _records(30, start)},
                )
                assert r.status_code == 200
        # Wait until the sealed segments are shipped; the active segments are not (they
        # are lost with the disk, as Kafka loses what no replica holds).
        _wait(
            lambda: (
                _metric(c, "tiered_log_copy_lag_segments", "orders") == 0
                and _metric(c, "tiered_log_remote_copy_segments_total", "orders") >= 16
            ),
            "shipping",
        )
        desc = c.get("/v1/topics/orders").json()
    assert srv.stop() == 0
    # A new server on an empty disk, same bucket.
    srv2 = server_factory(**settings)
    with srv2.client() as c:
        r = c.get("/v1/topics/orders")
        assert r.status_code == 200, r.text
        assert r.json()["topic_id"] == desc["topic_id"] and r.json()["partitions"] == 2
        infos = r.json()["partition_info"]
        for p in (0, 1):
            b = c.get(f"/v1/topics/orders/partitions/{p}/bounds").json()
            shipped = c.get(f"/v1/topics/orders/partitions/{p}/remote-segments").json()[
                "remote_end_offset"
            ]  # all the log has: its disk was lost
            assert b["log_start_offset"] == 0 and 0 < shipped < 300
            recs = _read_all_json(c, "orders", 0, shipped, partition=p)
            assert [x["offset"] for x in recs] == list(range(shipped))
            # The unshipped tail was acknowledged: its offsets are never handed out
            # again (issue 17); they are reported lost and read as 410.
            assert b["next_offset"] == 300
            assert infos[p]["lost_offsets"] == [[shipped, 300]]
            r = c.get(f"/v1/topics/orders/partitions/{p}/records", params={"offset": shipped})
            assert r.status_code == 410 and r.json()["error"]["code"] == "data_loss"
        r = c.post("/v1/topics/orders/partitions/0/records", json={"records": _records(1)})
        assert r.status_code == 200 and r.json()["first_offset"] == 300


def test_deleted_topic_leaves_nothing_behind(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    server_factory: Callable[..., ServerProcess],
) -> None:
    bucket = tmp_path / "bucket"
    srv = server_factory(**_remote_settings("fs", request, tmp_path))
    with srv.client() as c:
        assert (
            c.post("/v1/topics", json={"name": "gone", "partitions": 1, "config": TINY}).status_code
            == 201
        )
        for start in range(0, 300, 30):
            assert (
                c.post(
                    "/v1/topics/gone/partitions/0/records", json={"records": _records(30, start)}
                ).status_code
                == 200
            )
        _wait(lambda: _bounds(c, "gone")["local_start_offset"] > 0, "shipping")
        assert any(p.is_file() for p in bucket.rglob("*.log"))
        assert c.delete("/v1/topics/gone").status_code == 204
        _wait(
            lambda: not any(p.is_file() and not p.name.startswith(".") for p in bucket.rglob("*")),
            "remote deletion",
        )
        # The same name again is a new, empty topic.
        assert c.post("/v1/topics", json={"name": "gone", "partitions": 1}).status_code == 201
        b = _bounds(c, "gone")
        assert b["log_start_offset"] == 0 and b["next_offset"] == 0
    srv.stop()
    srv.start()
    with srv.client() as c:
        assert _bounds(c, "gone")["next_offset"] == 0


def test_remote_disabled_topic_applies_total_retention_locally(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    server_factory: Callable[..., ServerProcess],
) -> None:
    srv = server_factory(maintenance_interval_ms="50", **_remote_settings("fs", request, tmp_path))
    with srv.client() as c:
        assert (
            c.post(
                "/v1/topics",
                json={
                    "name": "local",
                    "partitions": 1,
                    "config": {
                        "segment_bytes": 4096,
                        "remote_enabled": False,
                        "retention_bytes": 8192,
                    },
                },
            ).status_code
            == 201
        )
        for start in range(0, 500, 50):
            assert (
                c.post(
                    "/v1/topics/local/partitions/0/records", json={"records": _records(50, start)}
                ).status_code
                == 200
            )
        _wait(lambda: _bounds(c, "local")["log_start_offset"] > 0, "retention")
        r = c.get("/v1/topics/local/partitions/0/records", params={"offset": 0})
        assert r.status_code == 416 or r.status_code == 404, r.text
    assert not any(p.is_file() for p in (tmp_path / "bucket").rglob("*.log"))
