"""Inspecting a running service's data directory: ``describe``, ``read``, ``dump`` and
``verify`` work beside the server (they answered ``the log ... is open elsewhere``), say
that what they print is a snapshot of a live directory, change no file, and get through
an append under way and a segment deleted by retention under the read with a note.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from tiered_log.local.log import Log, LogConfig

from .conftest import ServerProcess

LIVE = "snapshot of a live directory"


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tiered_log.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def files_state(root: Path) -> dict[str, tuple[int, int]]:
    """Every file below ``root``: (size, mtime in ns)."""
    out = {}
    for p in root.rglob("*"):
        if p.is_file():
            st = p.stat()
            out[str(p.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


def wait_shipped(srv: ServerProcess, topic: str, segments: int) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        d = httpx.get(f"{srv.url}/v1/topics/{topic}", timeout=10).json()
        r = httpx.get(f"{srv.url}/v1/topics/{topic}/partitions/0/remote-segments", timeout=10)
        if len(r.json().get("segments", [])) >= segments:
            return dict(d)
        assert time.monotonic() < deadline, r.text
        time.sleep(0.2)


def test_inspect_a_running_services_data_directory(server_factory: Any, tmp_path: Path) -> None:
    srv: ServerProcess = server_factory(ship_interval_ms="100")
    data = srv.data_dir
    r = httpx.post(
        f"{srv.url}/v1/topics",
        json={
            "name": "x",
            "partitions": 1,
            "config": {"segment_bytes": 4096, "local_retention_bytes": 0},
        },
        timeout=10,
    )
    assert r.status_code == 201, r.text
    for i in range(6):
        body = {"records": [{"value": f"v{i}-{j}-" + "p" * 50} for j in range(60)]}
        r = httpx.post(f"{srv.url}/v1/topics/x/partitions/0/records", json=body, timeout=10)
        assert r.status_code == 200, r.text
    wait_shipped(srv, "x", 5)
    part = data / "topics" / "x" / "0"
    time.sleep(1.5)  # let the server's own rounds settle before the files are compared
    before = files_state(data)

    p = cli("describe", str(data), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "open elsewhere" not in p.stderr
    assert LIVE in p.stdout and str(srv.proc.pid) in p.stdout  # type: ignore[union-attr]
    assert "COPY_FINISHED" in p.stdout and "active" in p.stdout
    p = cli("describe", str(part), "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    j = json.loads(p.stdout)["logs"][0]
    assert j["live"] == srv.proc.pid  # type: ignore[union-attr]
    assert j["bounds"]["next_offset"] == 360 and j["bounds"]["remote_end_offset"] > 0
    assert j["remote_segments"] and j["local_segments"]

    p = cli("read", str(part), "--max-records", "3", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    first_local = j["bounds"]["local_start_offset"]
    assert p.stdout.splitlines()[0].split("\t")[0] == str(first_local)
    assert LIVE in p.stderr and len(p.stdout.splitlines()) == 3

    for args in (("dump", str(part)), ("verify", str(data))):
        p = cli(*args, cwd=tmp_path)
        assert p.returncode == 0, (args, p.stdout, p.stderr)
        assert LIVE in p.stderr, args
        assert "Traceback" not in p.stderr

    assert files_state(data) == before  # nothing written, truncated or renamed
    # Still the server's: it appends and answers as before.
    r = httpx.post(
        f"{srv.url}/v1/topics/x/partitions/0/records", json={"records": [{"value": "z"}]}
    )
    assert r.status_code == 200 and r.json()["first_offset"] == 360, r.text


def test_read_and_describe_leave_an_append_under_way_alone(tmp_path: Path) -> None:
    """A torn tail (bytes of a batch being written) is read past, not cut."""
    d = tmp_path / "log"
    with Log.open(d, LogConfig(segment_bytes=4096)) as owner:
        owner.append_batch([b"a" * 100 for _ in range(100)])
        owner.flush()
        active = owner.segments()[-1].store_path
        with open(active, "ab") as f:
            f.write(b"\x00" * 37)  # half a batch header: an append under way
        size = active.stat().st_size
        p = cli("read", str(d), "--offset", "99", cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        assert p.stdout.startswith("99\t") and len(p.stdout.splitlines()) == 1
        assert LIVE in p.stderr and str(os.getpid()) in p.stderr
        p = cli("describe", str(d), "--json", cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        desc = json.loads(p.stdout)["logs"][0]
        assert desc["bounds"]["next_offset"] == 100 and desc["unverified_tail_bytes"] == 37
        assert active.stat().st_size == size  # not truncated
        assert owner.append(b"after") == 100  # the owner's log is untouched


def test_read_goes_on_past_a_segment_deleted_under_it(tmp_path: Path) -> None:
    """The owner's retention deletes segments the reader has not opened yet: one note
    naming the skipped offsets, the records after them, no traceback."""
    d = tmp_path / "log"
    with Log.open(d, LogConfig(segment_bytes=150_000)) as owner:
        for i in range(0, 6000, 500):
            owner.append_batch([f"{k:06d}".encode() + b"v" * 200 for k in range(i, i + 500)])
        owner.flush()
        bases = [s.base_offset for s in owner.segments()]
        assert len(bases) > 6
        proc = subprocess.Popen(
            [sys.executable, "-m", "tiered_log.cli", "read", str(d)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=tmp_path,
        )
        try:
            assert proc.stdout is not None
            # The first page (1,000 records, ~220 KB) fills the pipe: the reader blocks
            # in its first write, with only the first page's segments opened.
            ready, _, _ = select.select([proc.stdout], [], [], 60)
            assert ready
            cut = bases[5]
            assert cut > 1000
            owner.delete_segments_before(cut)  # retention, while the reader waits
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = err.decode()
    assert proc.returncode == 0, text
    assert "Traceback" not in text
    offsets = [int(line.split(b"\t")[0]) for line in out.splitlines()]
    assert offsets[:1000] == list(range(1000))
    skipped_from = offsets[offsets.index(999) + 1]
    assert skipped_from == cut  # read on at the first segment still there
    assert offsets[-1] == 5999
    notes = [ln for ln in text.splitlines() if "were deleted" in ln]
    assert len(notes) == 1 and f"[1000, {cut})" in notes[0], text


def test_dump_goes_on_past_files_deleted_under_it(tmp_path: Path) -> None:
    """``dump`` of a directory whose owner's retention deletes segments it listed but has
    not read yet: a line per deleted file, the others dumped, exit 0."""
    d = tmp_path / "log"
    with Log.open(d, LogConfig(segment_bytes=150_000)) as owner:
        for i in range(0, 3000, 500):
            owner.append_batch([f"{k:06d}".encode() + b"v" * 200 for k in range(i, i + 500)])
        owner.flush()
        bases = [s.base_offset for s in owner.segments()]
        proc = subprocess.Popen(
            [sys.executable, "-m", "tiered_log.cli", "dump", str(d), "--print-data"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=tmp_path,
        )
        try:
            assert proc.stdout is not None
            ready, _, _ = select.select([proc.stdout], [], [], 60)  # blocked in segment 0
            assert ready
            owner.delete_segments_before(bases[3])  # retention: segments 0..2 go
            out, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = out.decode()
    assert proc.returncode == 0, err.decode()
    assert "Traceback" not in err.decode()
    skipped = [
        ln.removeprefix("Skipped ").split(": deleted")[0]
        for ln in text.splitlines()
        if ln.startswith("Skipped ")
    ]
    # The files of segments 0-2 not read before the deletion; the pipe's buffering
    # decides how far the dump had got, never further than segment 2.
    assert skipped, text[-2000:]
    assert all(int(Path(f).name.split(".")[0]) < bases[3] for f in skipped), skipped
    assert any(Path(f).name.endswith(".timeindex") for f in skipped), skipped
    assert f"({len(skipped)} files deleted meanwhile)" in text.splitlines()[-1]
    assert f"{bases[3]:020d}.log" in text and not any(f"{bases[3]:020d}" in f for f in skipped)
