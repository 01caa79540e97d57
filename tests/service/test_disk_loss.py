"""A single node that loses its disk never hands an acknowledged offset out again: a
real server process under steady acknowledged writes is SIGKILLed, its data directory
deleted, and started again on the same bucket (moto's S3 server, or a directory)."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from .conftest import ServerProcess
from .test_tiered_service import _remote_settings

pytestmark = pytest.mark.timeout(180)


@pytest.mark.parametrize("kind", ["s3", "fs"])
def test_sigkill_and_a_wiped_disk_reuse_no_acknowledged_offset(
    kind: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    server_factory: Callable[..., ServerProcess],
) -> None:
    settings = _remote_settings(kind, request, tmp_path)
    srv = server_factory(**settings)
    with srv.client() as c:
        r = c.post(
            "/v1/topics",
            json={"name": "orders", "partitions": 2, "config": {"segment_bytes": 8192}},
        )
        assert r.status_code == 201, r.text
    acked: dict[int, dict[int, str]] = {0: {}, 1: {}}
    stop = threading.Event()

    def produce(p: int) -> None:
        i = 0
        with httpx.Client(base_url=srv.url, timeout=5) as c:
            while not stop.is_set():
                values = [f"p{p}-{i + j}" for j in range(5)]
                try:
                    r = c.post(
                        f"/v1/topics/orders/partitions/{p}/records",
                        json={"records": [{"value": v} for v in values]},
                    )
                except httpx.HTTPError:
                    return  # the server died: this request is not acknowledged
                if r.status_code == 200:
                    first = r.json()["first_offset"]
                    for j, v in enumerate(values):
                        acked[p][first + j] = v
                i += 5

    threads = [threading.Thread(target=produce, args=(p,)) for p in (0, 1)]
    for t in threads:
        t.start()

    def shipped(p: int) -> int:
        r = httpx.get(f"{srv.url}/v1/topics/orders/partitions/{p}/remote-segments", timeout=5)
        return int(r.json()["remote_end_offset"]) if r.status_code == 200 else 0

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (
        min(len(a) for a in acked.values()) < 600 or min(shipped(0), shipped(1)) == 0
    ):
        time.sleep(0.05)
    srv.kill()  # SIGKILL under load
    stop.set()
    for t in threads:
        t.join(10)
    assert min(len(a) for a in acked.values()) >= 600
    shutil.rmtree(srv.data_dir)  # the disk is lost
    srv.start()
    with srv.client() as c:
        for p in (0, 1):
            top = max(acked[p])
            for k in range(10):
                r = c.post(
                    f"/v1/topics/orders/partitions/{p}/records",
                    json={"records": [{"value": f"after-rebuild-{k}"}]},
                )
                assert r.status_code == 200, r.text
                off = r.json()["first_offset"]
                assert off > top, f"partition {p}: offset {off} was acknowledged before"
            # What the archive kept reads as written; the rest is reported lost.
            b = c.get(f"/v1/topics/orders/partitions/{p}/bounds").json()
            assert b["log_start_offset"] == 0
            # A cold archived read may answer retriable 503 remote_timeout on a loaded
            # machine (the tier's worker process starting, the fetch going on): read
            # again, as a client does.
            deadline = time.monotonic() + 60
            while True:
                r = c.get(
                    f"/v1/topics/orders/partitions/{p}/records",
                    params={"offset": 0, "max_records": 50},
                )
                if r.status_code != 503 or time.monotonic() > deadline:
                    break
                assert r.json()["error"]["retriable"], r.text
                time.sleep(0.2)
            assert r.status_code == 200, r.text
            for rec in r.json()["records"]:
                assert acked[p].get(rec["offset"], rec["value"]) == rec["value"]
