"""Where the remote tier stands, outside ``/metrics``: ``GET .../bounds`` carries the remote
end, the copy lag and the lost ranges (after the fields it always had), and ``tiered-log
topics describe`` shows them in its table (lost ranges under it, without ``--json``).
Against real servers, the CLI through :func:`tiered_log.cli.main`."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tiered_log.cli import main

pytestmark = pytest.mark.timeout(180)

OLD_FIELDS = ["log_start_offset", "local_start_offset", "high_watermark", "next_offset"]


def produce(url: str, topic: str, n: int) -> None:
    for lo in range(0, n, 30):
        recs = [{"value": f"v{i:04d}" + "x" * 100} for i in range(lo, lo + 30)]
        r = httpx.post(f"{url}/v1/topics/{topic}/partitions/0/records", json={"records": recs})
        assert r.status_code == 200, r.text


def test_bounds_and_topic_describe_show_the_remote_tier(
    server_factory: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bucket = str(tmp_path / "bucket")
    # Uploads held to 3 KB/s: sealed segments wait to be shipped (a copy lag to see).
    srv = server_factory(
        remote_url=bucket, ship_interval_ms="50", remote_upload_bytes_per_sec="3000"
    )
    r = httpx.post(
        f"{srv.url}/v1/topics",
        json={
            "name": "t",
            "partitions": 1,
            "config": {"segment_bytes": 4096, "remote_compression": "none"},
        },
    )
    assert r.status_code == 201, r.text
    produce(srv.url, "t", 300)
    b = httpx.get(f"{srv.url}/v1/topics/t/partitions/0/bounds").json()
    assert list(b)[:4] == OLD_FIELDS and b["flushed_offset"] == 300  # kept, in order
    assert b["copy_lag_segments"] >= 2 and b["copy_lag_bytes"] > 4096 * 1.5, b
    assert b["lost_offsets"] == [] and 0 <= b["remote_end_offset"] < 300
    deadline = time.monotonic() + 60
    while b["remote_end_offset"] == 0:  # the first copy lands
        assert time.monotonic() < deadline, b
        time.sleep(0.1)
        b = httpx.get(f"{srv.url}/v1/topics/t/partitions/0/bounds").json()
    segs = httpx.get(f"{srv.url}/v1/topics/t/partitions/0/remote-segments").json()
    assert segs["remote_end_offset"] >= b["remote_end_offset"] > 0

    assert main(["topics", "describe", "t", "--url", srv.url]) == 0
    out = capsys.readouterr().out
    header, row = out.split("PARTITIONS\n")[1].splitlines()[:2]
    cols = dict(zip(header.split(), row.split(), strict=True))
    assert {"REMOTE-END-OFFSET", "COPY-LAG-BYTES", "COPY-LAG-SEGMENTS"} <= set(cols), out
    assert int(cols["REMOTE-END-OFFSET"]) >= b["remote_end_offset"]
    assert srv.stop() == 0  # the unshipped tail stays on this disk only

    srv2 = server_factory(remote_url=bucket)  # an empty disk, the same bucket
    b2 = httpx.get(f"{srv2.url}/v1/topics/t/partitions/0/bounds").json()
    ((first, end),) = b2["lost_offsets"]
    assert first == b2["remote_end_offset"] and end >= 300 and b2["copy_lag_segments"] == 0
    assert main(["topics", "describe", "t", "--url", srv2.url]) == 0
    out = capsys.readouterr().out
    assert f"partition 0 lost_offsets: [[{first},{end}]]" in out, out
