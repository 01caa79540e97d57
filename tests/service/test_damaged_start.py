"""Damaged tiering metadata at the service's start: contained to what is damaged.

Before: a damaged manifest (with the local remote-index files gone) made the whole service
exit 1 at start, and a partition whose copy journal could not be recovered did the same.
Now the rest of the service serves, the damaged range or topic answers a clear JSON
error, and describe names the damage. Real server processes, the bucket a local
directory (damaged by hand, as a disk or a tool would) or moto's server.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tiered_log.format import naming

from .conftest import ServerProcess, free_port
from .test_tiered_service import TINY, _bounds, _read_all_json, _records, _remote_settings, _wait


def _ship(c: httpx.Client, topic: str, n: int = 600) -> None:
    assert (
        c.post("/v1/topics", json={"name": topic, "partitions": 1, "config": TINY}).status_code
        == 201
    )
    for start in range(0, n, 100):
        r = c.post(
            f"/v1/topics/{topic}/partitions/0/records", json={"records": _records(100, start)}
        )
        assert r.status_code == 200, r.text
    _wait(lambda: _bounds(c, topic)["local_start_offset"] > n // 2, "shipping")


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x40
    path.write_bytes(bytes(data))


def test_damaged_manifest_and_data_are_contained_at_start(
    tmp_path: Path, request: Any, server_factory: Callable[..., ServerProcess]
) -> None:
    settings = _remote_settings("fs", request, tmp_path)
    srv = server_factory(**settings)
    with srv.client() as c:
        _ship(c, "hurt")
        _ship(c, "fine")
    assert srv.stop() == 0
    bucket = Path(settings["remote_url"])
    part = srv.data_dir / "topics" / "hurt" / "0"
    journal = [line for line in (part / "remote" / "segments.jsonl").read_text().splitlines()]

    segs = sorted(
        (json.loads(x) for x in journal if '"COPY_FINISHED"' in x), key=lambda d: d["base_offset"]
    )
    victim = segs[1]
    log_id = json.loads((part / "remote" / "location.json").read_text())["log_id"]
    for suffix, at in ((naming.RLI_SUFFIX, -30), (naming.LOG_SUFFIX, 200)):
        _flip(
            bucket / naming.segment_object_key(log_id, victim["base_offset"], victim["id"], suffix),
            at,
        )
    shutil.rmtree(part / "remote" / "index")  # not fsynced: a crash can lose them
    srv.start()  # used to exit 1 here
    with srv.client() as c:
        assert [x["offset"] for x in _read_all_json(c, "fine", 0, 600)] == list(range(600))
        lo, hi = victim["base_offset"], victim["next_offset"]
        assert [x["offset"] for x in _read_all_json(c, "hurt", 0, lo)] == list(range(lo))
        r = c.get("/v1/topics/hurt/partitions/0/records", params={"offset": lo + 1})
        assert r.status_code == 502, r.text
        err = r.json()["error"]
        assert err["code"] == "remote_corruption" and victim["id"] in err["message"]
        assert [x["offset"] for x in _read_all_json(c, "hurt", hi, 600)] == list(range(hi, 600))
        info = c.get("/v1/topics/hurt").json()["partition_info"][0]
        assert [(d["id"], d["base_offset"], d["next_offset"]) for d in info["remote_damage"]] == [
            (victim["id"], lo, hi)
        ]
        assert c.get("/v1/topics/fine").json()["partition_info"][0]["remote_damage"] == []
    assert srv.stop() == 0


def test_unrecoverable_journal_makes_one_topic_unavailable(
    tmp_path: Path, request: Any, server_factory: Callable[..., ServerProcess]
) -> None:
    """A damaged copy journal whose bucket cannot be reached: that topic answers 503
    naming the file; the other topics serve from local disk; nothing is recreated."""
    settings = _remote_settings("s3", request, tmp_path)
    srv = server_factory(**settings)
    with srv.client() as c:
        _ship(c, "hurt")
        assert c.post("/v1/topics", json={"name": "fine", "partitions": 1}).status_code == 201
        assert (
            c.post(
                "/v1/topics/fine/partitions/0/records", json={"records": _records(10)}
            ).status_code
            == 200
        )
    assert srv.stop() == 0
    journal = srv.data_dir / "topics" / "hurt" / "0" / "remote" / "segments.jsonl"
    lines = journal.read_bytes().split(b"\n")
    i = next(n for n, line in enumerate(lines) if b"COPY_FINISHED" in line)
    lines[i] = b"[" + lines[i][1:]
    journal.write_bytes(b"\n".join(lines))
    srv.settings["s3_endpoint_url"] = f"http://127.0.0.1:{free_port()}"  # nothing listens
    srv.start(timeout=60)
    with srv.client() as c:
        r = c.get("/v1/topics/hurt/partitions/0/records", params={"offset": 0})
        assert r.status_code == 503, r.text
        err = r.json()["error"]
        assert err["code"] == "topic_unavailable" and "segments.jsonl" in err["message"]
        assert c.post("/v1/topics", json={"name": "hurt", "partitions": 1}).status_code == 409
        assert [x["offset"] for x in _read_all_json(c, "fine", 0, 10)] == list(range(10))
    assert srv.stop() == 0
    assert journal.exists()  # left for the operator
