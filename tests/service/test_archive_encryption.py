"""The service with an encrypted, compressed archive: a real server process ships with
its key ring, nothing in the bucket shows a record, a missing key is an HTTP error naming
it (not a traceback, not a wrong answer), the ring file is re-read while it runs, and
after ``archive rewrap`` the old key can go. A bad key ring file stops the start in one
line; a bad ``remote_compression`` is a 400."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import ValidationError

from tiered_log.cli import main
from tiered_log.config import Settings
from tiered_log.format import naming

from .conftest import ServerProcess, service_env
from .test_tiered_service import TINY, _bounds, _read_all_json, _records, _wait

pytestmark = pytest.mark.timeout(180)

K1, K2 = os.urandom(32), os.urandom(32)


def write_ring(path: Path, active: str, keys: dict[str, bytes]) -> None:
    doc = {"active": active, "keys": {k: base64.b64encode(v).decode() for k, v in keys.items()}}
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


def wipe_chunk_caches(data_dir: Path) -> None:
    """The chunk caches hold decoded chunks: without them every read goes to the bucket."""
    for p in data_dir.rglob(naming.CHUNK_CACHE_DIR):
        if p.is_dir():
            shutil.rmtree(p)


def test_encrypted_archive_over_http(
    tmp_path: Path, server_factory: Callable[..., ServerProcess]
) -> None:
    ring = tmp_path / "ring.json"
    write_ring(ring, "k1", {"k1": K1})
    bucket = tmp_path / "bucket"
    settings = {
        "remote_url": str(bucket),
        "ship_interval_ms": "50",
        "remote_encryption_key_file": str(ring),
    }
    srv = server_factory(**settings)
    with srv.client() as c:
        r = c.post(
            "/v1/topics",
            json={"name": "t", "partitions": 1, "config": {**TINY, "remote_compression": "brotli"}},
        )
        assert r.status_code == 400 and "remote_compression" in r.text, r.text
        r = c.post("/v1/topics", json={"name": "t", "partitions": 1, "config": TINY})
        assert r.status_code == 201, r.text
        for start in range(0, 600, 100):
            r = c.post("/v1/topics/t/partitions/0/records", json={"records": _records(100, start)})
            assert r.status_code == 200, r.text
        _wait(lambda: _bounds(c, "t")["local_start_offset"] > 300, "shipping")
        shipped = _bounds(c, "t")["local_start_offset"]
        assert len(_read_all_json(c, "t", 0, shipped)) == shipped
    srv.stop()  # nothing is written to the bucket while it is read
    files = [p for p in bucket.rglob("*") if p.is_file()]
    assert any(p.suffix == ".log" for p in files)
    assert not [p for p in files if b"value-000123-" in p.read_bytes()]

    # The ring no longer holds k1: a clear error naming it, the server keeps serving.
    wipe_chunk_caches(srv.data_dir)
    write_ring(ring, "k2", {"k2": K2})
    srv.start()
    with srv.client() as c:
        r = c.get("/v1/topics/t/partitions/0/records", params={"offset": 0})
        assert r.status_code == 503 and r.json()["error"]["code"] == "remote_storage_error", r.text
        body = r.json()
        assert "'k1'" in json.dumps(body) and str(ring) in json.dumps(body), body
        assert c.get("/healthz").status_code == 200
        # k1 back in the ring file (k2 active): read again without a restart.
        write_ring(ring, "k2", {"k1": K1, "k2": K2})
        assert len(_read_all_json(c, "t", 0, shipped)) == shipped
        # Rotate while the service runs and reads: rewrap, then drop k1.
        assert main(["archive", "rewrap", "--remote", str(bucket), "--key-file", str(ring)]) == 0
        write_ring(ring, "k2", {"k2": K2})
        assert len(_read_all_json(c, "t", 0, shipped)) == shipped
    srv.stop()
    wipe_chunk_caches(srv.data_dir)
    srv.start()
    with srv.client() as c:
        assert len(_read_all_json(c, "t", 0, shipped)) == shipped


@pytest.mark.parametrize(
    "content,why",
    [
        pytest.param("{", "not JSON", id="not-json"),
        pytest.param('{"active": "k9", "keys": {"k1": "%s"}}', '"active" must name', id="active"),
        pytest.param('{"active": "k1", "keys": {"k1": "c2hvcnQ="}}', "32 bytes", id="short"),
    ],
)
def test_a_bad_key_ring_stops_the_start_in_one_line(tmp_path: Path, content: str, why: str) -> None:
    ring = tmp_path / "ring.json"
    ring.write_text(content.replace("%s", base64.b64encode(K1).decode()))
    env = service_env(data_dir=str(tmp_path / "d"), port="0", remote_encryption_key_file=str(ring))
    p = subprocess.run(
        [sys.executable, "-m", "tiered_log.cli", "serve"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    lines = p.stderr.strip().splitlines()
    assert p.returncode != 0 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert why in lines[0] and str(ring) in lines[0], lines[0]


def test_missing_ring_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ValidationError) as info:
        Settings(data_dir=tmp_path / "d", remote_encryption_key_file=tmp_path / "nope.json")
    assert "nope.json" in str(info.value) and "cannot be read" in str(info.value)
