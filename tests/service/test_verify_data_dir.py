"""``tiered-log verify`` on a service's data directory, written by the real server.

A data directory holds one log per partition (``topics/<topic>/<partition>/``); verify
checks each of them and reports per partition, read-only, also while the server that
owns them runs and appends (no lock taken, nothing written). A directory where nothing
could be checked is never reported clean.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tiered_log.format import naming

from .conftest import ServerProcess, service_env

# topic -> (partitions, records produced per partition: one batch per produce of BATCH)
TOPICS = {"orders": (3, [120, 0, 60]), "audit": (1, [40])}
BATCH = 20
SMALL = {"segment_bytes": 1024}
"""Small segments: every partition with records has several."""


def verify(*args: str | os.PathLike[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``tiered-log verify ARGS`` in its own process."""
    return subprocess.run(
        [sys.executable, "-m", "tiered_log.cli", "verify", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=service_env(),
    )


def snapshot(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``root``: its bytes and modification time."""
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def fill(srv: ServerProcess) -> None:
    """Create TOPICS and produce their records."""
    with srv.client() as c:
        for name, (partitions, counts) in TOPICS.items():
            r = c.post("/v1/topics", json={"name": name, "partitions": partitions, "config": SMALL})
            assert r.status_code == 201, r.text
            for p, n in enumerate(counts):
                for start in range(0, n, BATCH):
                    r = c.post(
                        f"/v1/topics/{name}/partitions/{p}/records",
                        json={
                            "records": [
                                {"value": f"{name}-{p}-{i}" * 3}
                                for i in range(start, start + BATCH)
                            ]
                        },
                    )
                    assert r.status_code == 200, r.text


def partition_lines(out: str) -> dict[str, str]:
    """``topics/<t>/<p>`` -> the rest of its line in verify's text output."""
    lines = {}
    for line in out.splitlines():
        head, sep, rest = line.partition(": ")
        if sep and head.startswith("topics/") and head.count("/") == 2:
            lines[head] = rest
    return lines


@pytest.fixture(scope="module")
def stopped_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The data directory of a server that wrote TOPICS and then stopped."""
    base = tmp_path_factory.mktemp("verify")
    srv = ServerProcess(base / "data", base, {})
    srv.start()
    try:
        fill(srv)
    finally:
        assert srv.stop(timeout=30) == 0
    yield base / "data"


@pytest.fixture
def data_copy(stopped_data_dir: Path, tmp_path: Path) -> Path:
    d = tmp_path / "data"
    shutil.copytree(stopped_data_dir, d)
    return d


def _expected_partitions() -> dict[str, int]:
    return {f"topics/{t}/{p}": n for t, (_, counts) in TOPICS.items() for p, n in enumerate(counts)}


@pytest.mark.timeout(120)
def test_every_partition_of_a_running_service(server_factory: Any) -> None:
    srv: ServerProcess = server_factory()
    fill(srv)
    expected = _expected_partitions()
    total = sum(expected.values())
    p = verify(srv.data_dir)  # the server runs and holds every log's lock
    assert p.returncode == 0, p.stdout + p.stderr
    (note,) = p.stderr.splitlines()  # one line: what follows is a snapshot
    assert "snapshot of a live directory" in note and str(srv.proc.pid) in note, note  # type: ignore[union-attr]
    lines = partition_lines(p.stdout)
    assert set(lines) == set(expected), p.stdout
    for part, n in expected.items():
        assert f", {n:,} records (offsets [0, {n}))" in lines[part], p.stdout
        assert lines[part].endswith(": clean"), p.stdout
    assert "orders/0" in p.stdout and "segments" in lines["topics/orders/0"]
    assert p.stdout.splitlines()[-1].startswith(f"{len(expected)} logs: ")
    assert f", {total:,} records, " in p.stdout.splitlines()[-1]
    assert p.stdout.splitlines()[-1].endswith(": clean")

    pj = verify(srv.data_dir, "--json")
    assert pj.returncode == 0, pj.stdout + pj.stderr
    report = json.loads(pj.stdout)
    assert report["ok"] is True and report["records"] == total and report["unchecked"] == []
    assert [
        Path(r["directory"]).relative_to(srv.data_dir).as_posix() for r in report["logs"]
    ] == sorted(expected, key=lambda k: (k.split("/")[1], int(k.split("/")[2])))
    assert all(r["checked"] and r["ok"] for r in report["logs"])

    # One partition's log on its own: as for any log directory.
    one = srv.data_dir / "topics" / "orders" / "0"
    p = verify(one)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip().endswith(
        f"{expected['topics/orders/0']} records (offsets [0, "
        f"{expected['topics/orders/0']})), "
        f"{sum(f.stat().st_size for f in one.glob('*.log')):,} "
        "bytes: clean"
    )

    # The server is unaffected: still appends to the logs verify read.
    with srv.client() as c:
        r = c.post("/v1/topics/audit/partitions/0/records", json={"records": [{"value": "x"}]})
        assert r.status_code == 200 and r.json()["first_offset"] == expected["topics/audit/0"]


@pytest.mark.timeout(60)
def test_verify_writes_nothing(data_copy: Path) -> None:
    before = snapshot(data_copy)
    assert verify(data_copy).returncode == 0
    assert verify(data_copy, "--json").returncode == 0
    assert snapshot(data_copy) == before


@pytest.mark.timeout(60)
def test_damage_in_one_partition_is_named(data_copy: Path) -> None:
    part = data_copy / "topics" / "orders" / "2"
    store = naming.segment_path(part, naming.list_segment_bases(part)[0], naming.LOG_SUFFIX)
    data = bytearray(store.read_bytes())
    data[100] ^= 0x01
    store.write_bytes(bytes(data))
    p = verify(data_copy)
    assert p.returncode == 1, p.stdout + p.stderr
    rel = store.relative_to(data_copy).as_posix()
    assert any(
        line.startswith(f"{rel}: batch at byte 0 ") and "CRC-32C mismatch" in line
        for line in p.stdout.splitlines()
    ), p.stdout
    lines = partition_lines(p.stdout)
    assert ": DAMAGED: " in lines["topics/orders/2"], p.stdout
    assert all(v.endswith(": clean") for k, v in lines.items() if k != "topics/orders/2")
    assert " in 1 log, 0 warnings" in p.stdout.splitlines()[-1], p.stdout
    assert ": DAMAGED: " in p.stdout.splitlines()[-1], p.stdout


@pytest.mark.timeout(60)
def test_a_partition_without_segments_is_not_clean(data_copy: Path) -> None:
    part = data_copy / "topics" / "orders" / "1"
    for f in part.iterdir():
        if naming.parse_offset_name(f.name, naming.LOG_SUFFIX) is not None:
            f.unlink()
    p = verify(data_copy)
    assert p.returncode == 1, p.stdout + p.stderr
    lines = partition_lines(p.stdout)
    assert "NOTHING CHECKED: no segment store files" in lines["topics/orders/1"], p.stdout
    assert p.stdout.splitlines()[-1].endswith(
        ": NOT ALL CHECKED: 1 of 4 logs with nothing to check"
    )
    report = json.loads(verify(data_copy, "--json").stdout)
    assert report["ok"] is False and report["unchecked"] == [str(part)]


@pytest.mark.timeout(60)
def test_nothing_to_check_is_an_error(server_factory: Any, tmp_path: Path) -> None:
    """A data directory without topics, an empty directory, a partition directory whose
    segment files are gone: one line on stderr, exit 1, never 'clean'."""
    srv: ServerProcess = server_factory()  # runs, no topics
    empty = tmp_path / "empty"
    (empty / "sub").mkdir(parents=True)
    bare = tmp_path / "bare"
    (bare / naming.REMOTE_DIR).mkdir(parents=True)  # a partition's remote state only
    for d, fragment in (
        (srv.data_dir, "data directory without partitions"),
        (empty, "no segment files in"),
        (bare, "no segment files in"),
    ):
        p = verify(d)
        assert p.returncode == 1, p
        assert p.stdout == "" and "Traceback" not in p.stderr
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("tiered-log: error: nothing to check: ")
        assert fragment in lines[0], lines[0]


@pytest.mark.timeout(180)
def test_verify_beside_a_busy_server(server_factory: Any) -> None:
    """While a producer appends and the server rolls, ships and deletes local segments,
    every verify of the data directory is clean: an append under way and a segment
    deleted during the check are not damage."""
    srv: ServerProcess = server_factory(ship_interval_ms="20", maintenance_interval_ms="20")
    with srv.client() as c:
        r = c.post(
            "/v1/topics",
            json={
                "name": "busy",
                "partitions": 2,
                "config": {"segment_bytes": 2048, "local_retention_bytes": 0},
            },
        )
        assert r.status_code == 201, r.text
    stop = threading.Event()
    produced = [0]
    errors: list[str] = []

    def produce() -> None:
        with httpx.Client(base_url=srv.url, timeout=30) as c:
            i = 0
            while not stop.is_set():
                r = c.post(
                    f"/v1/topics/busy/partitions/{i % 2}/records",
                    json={"records": [{"value": f"v{i}-{j}" * 8} for j in range(5)]},
                )
                if r.status_code != 200:
                    errors.append(r.text)
                    return
                produced[0] += 5
                i += 1

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 60
        runs = 0
        while runs < 8 and time.monotonic() < deadline:
            p = verify(srv.data_dir)
            assert p.returncode == 0, p.stdout + p.stderr
            assert p.stdout.splitlines()[-1].startswith("2 logs: "), p.stdout
            assert "clean" in p.stdout.splitlines()[-1], p.stdout
            runs += 1
        assert runs >= 3
    finally:
        stop.set()
        t.join(30)
    assert not errors, errors
    assert produced[0] > 0
    # The server rolled, shipped and deleted local segments meanwhile (the checks raced
    # all three).
    for part in ("0", "1"):
        assert naming.list_segment_bases(srv.data_dir / "topics" / "busy" / part)[0] > 0
