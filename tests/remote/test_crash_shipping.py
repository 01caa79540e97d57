"""SIGKILL in the middle of shipping: a real shipper process (crash_shipper.py) is killed
while it uploads a segment and while remote retention deletes segments; the log is then
opened again here and tiers once. Afterwards the bucket must hold exactly one copy of
each segment, nothing else but ``meta.json`` and the partition snapshot (no orphaned
objects, temp files or unfinished multipart uploads), and every record must read back
identical.

Runs against the local-directory store and against S3 (moto's server on 127.0.0.1, or
``TIERED_LOG_TEST_S3_ENDPOINT``).
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tiered_log import OffsetOutOfRangeError
from tiered_log.format import naming
from tiered_log.partition import TieredLog
from tiered_log.remote.fs import LocalDirStorage
from tiered_log.remote.metadata import CopyState
from tiered_log.remote.snapshot import snapshot_key
from tiered_log.remote.storage import RemoteStorage
from tiered_log.remote.tier import TierConfig

from .crash_shipper import LOG_ID, RECORDS, RETAIN_BYTES, expected_record, log_config

HELPER = Path(__file__).with_name("crash_shipper.py")
MARKER_TIMEOUT = 60.0


@dataclass
class Target:
    """One backend: the spec the helper understands, a store for this process, and a raw
    view of everything in it (including what ``list`` hides)."""

    spec: str
    storage: RemoteStorage
    raw_keys: Callable[[], list[str]]
    """Every object key under the log's prefix, plus temp files (fs) / in-progress multipart
    uploads (s3), each marked so that it can never pass for a segment object."""


@pytest.fixture(params=["fs", "s3"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Target:
    prefix = naming.log_prefix(LOG_ID) + "/"
    if request.param == "fs":
        root = tmp_path / "bucket"
        storage = LocalDirStorage(root)

        def fs_raw() -> list[str]:
            out: list[str] = []
            for dirpath, _, files in os.walk(root):
                for name in files:
                    rel = Path(dirpath, name).relative_to(root).as_posix()
                    if rel.startswith(prefix) and not name.startswith("."):
                        out.append(rel if ".tmp-" not in name else f"TMP:{rel}")
            return sorted(out)

        return Target(f"fs:{root}", storage, fs_raw)
    loc = request.getfixturevalue("s3_location")
    endpoint = request.getfixturevalue("s3_endpoint")
    client = request.getfixturevalue("s3_client")
    storage = request.getfixturevalue("s3_storage")
    full = f"{loc.prefix}/{prefix}" if loc.prefix else prefix
    cut = len(loc.prefix) + 1 if loc.prefix else 0

    def s3_raw() -> list[str]:
        out: list[str] = []
        for page in client.get_paginator("list_objects_v2").paginate(
            Bucket=loc.bucket, Prefix=full
        ):
            out.extend(o["Key"][cut:] for o in page.get("Contents", []))
        uploads = client.list_multipart_uploads(Bucket=loc.bucket, Prefix=full).get("Uploads", [])
        out.extend(f"UPLOAD:{u['Key'][cut:]}" for u in uploads)
        return sorted(out)

    return Target(f"s3:{endpoint}|{loc.bucket}|{loc.prefix}", storage, s3_raw)


# ---- the helper process -------------------------------------------------------------------


class Helper:
    """A running crash_shipper.py whose stdout markers we can wait for."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HELPER), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=Path(__file__).parents[2],
        )
        self.lines: list[str] = []

    def wait_for(self, pred: Callable[[str], bool]) -> str:
        """The next stdout line satisfying ``pred`` (fails if the helper exits first)."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + MARKER_TIMEOUT
        while time.monotonic() < deadline:
            raw = self.proc.stdout.readline()
            if not raw:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                pytest.fail(
                    f"helper exited ({self.proc.wait()}) before the marker; "
                    f"saw {self.lines}; stderr:\n{err}"
                )
            line = raw.decode().strip()
            self.lines.append(line)
            if pred(line):
                return line
        pytest.fail(f"no marker within {MARKER_TIMEOUT}s; saw {self.lines}")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        assert self.proc.wait(30) == -signal.SIGKILL
        for f in (self.proc.stdout, self.proc.stderr):
            if f is not None:
                f.close()


def journal_states(log_dir: Path) -> dict[str, tuple[int, str]]:
    """The copy journal as a crash left it: attempt id -> (base offset, last state)."""
    out: dict[str, tuple[int, str]] = {}
    path = log_dir / naming.REMOTE_DIR / "segments.jsonl"
    for line in path.read_bytes().splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        out[d["id"]] = (d["base_offset"], d["state"])
    return out


def wait_until(cond: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.005)
    pytest.fail(f"timed out waiting for {what}")


# ---- checks -------------------------------------------------------------------------------


def check_bucket(target: Target, tlog: TieredLog) -> None:
    """Exactly one complete copy per segment, and nothing else but meta.json."""
    assert tlog.remote_tier is not None
    finished = tlog.remote_tier.finished_segments
    assert finished, "nothing was shipped"
    # The finished copies tile the archive without gaps or overlaps.
    assert finished[0].base_offset == tlog.remote_tier.start_offset or finished[0].base_offset == 0
    for a, b in itertools.pairwise(finished):
        assert a.next_offset == b.base_offset
    # No attempt is left half-way in the journal.
    assert all(s.state == CopyState.COPY_FINISHED for s in tlog.remote_tier.journal.segments())
    keys = target.raw_keys()
    meta = naming.meta_object_key(LOG_ID)
    snapshot = snapshot_key(LOG_ID)  # the partition snapshot, rewritten by each leader
    by_base: dict[int, set[str]] = {}
    stray = []
    for k in keys:
        parsed = naming.parse_segment_object_key(k) if ":" not in k else None
        if parsed is None:
            if k not in (meta, snapshot):
                stray.append(k)
            continue
        by_base.setdefault(parsed[0], set()).add(parsed[1])
    assert stray == [], f"orphaned objects in the bucket: {stray}"
    assert {b: len(ids) for b, ids in by_base.items() if len(ids) != 1} == {}, "duplicate copies"
    assert {b: next(iter(ids)) for b, ids in by_base.items()} == {
        s.base_offset: s.id for s in finished
    }
    expected = sorted(
        naming.segment_object_key(LOG_ID, s.base_offset, s.id, sfx)
        for s in finished
        for sfx in naming.SEGMENT_OBJECT_SUFFIXES
    )
    assert sorted(k for k in keys if k not in (meta, snapshot)) == expected


def check_records(tlog: TieredLog, start: int, end: int) -> None:
    """Every record in [start, end) reads back identical, in order, from either tier."""
    o = start
    while o < end:
        recs = tlog.read_range(o, max_records=97, max_bytes=16 * 1024)
        assert recs and recs[0].offset == o
        for r in recs:
            want = expected_record(r.offset)
            assert (r.value, r.key, r.headers, r.timestamp) == (
                want.value,
                want.key,
                tuple(want.headers),
                want.timestamp,
            ), r.offset
        o = recs[-1].offset + 1
    assert o == end


def reopen(log_dir: Path, target: Target, **tier: Any) -> TieredLog:
    return TieredLog(
        log_dir,
        log_id=LOG_ID,
        storage=target.storage,
        config=log_config(),
        tier=TierConfig(chunk_bytes=1024, **tier),
        start_shipper=False,
    )


# ---- the tests ----------------------------------------------------------------------------


def test_sigkill_during_upload(tmp_path: Path, target: Target) -> None:
    log_dir = tmp_path / "log"
    killed_attempts: list[str] = []
    for _ in range(2):
        h = Helper("upload", str(log_dir), target.spec)
        h.wait_for(lambda line: line.startswith("copied "))
        line = h.wait_for(lambda line: line.startswith("copying "))
        base = int(line.split()[1])

        # Wait until that copy is journaled as started and has bytes in the bucket (an
        # object, or the temp file of one), then kill the process while it is throttled.
        def started(base: int = base) -> str | None:
            return next(
                (
                    i
                    for i, (b, st) in journal_states(log_dir).items()
                    if b == base and st == CopyState.COPY_STARTED
                ),
                None,
            )

        attempt: str = wait_until(started, "COPY_STARTED")

        def has_bytes(attempt: str = attempt) -> bool:
            return any(attempt in k for k in target.raw_keys())

        wait_until(has_bytes, "the first bytes of the copy")
        h.kill()
        # The crash really was in the middle of the upload: started, never finished.
        assert journal_states(log_dir)[attempt][1] == CopyState.COPY_STARTED
        # (The manifest may already be up: it goes up beside the data; the data may not.)
        partial = [k for k in target.raw_keys() if attempt in k]
        assert partial and not any(k.endswith(naming.LOG_SUFFIX) and ":" not in k for k in partial)
        killed_attempts.append(attempt)

    tlog = reopen(log_dir, target, local_retention_bytes=0)
    tlog.tier_once()
    assert tlog.bounds().remote_end_offset == RECORDS
    assert tlog.bounds().local_start_offset == RECORDS  # every local copy dropped
    check_bucket(target, tlog)
    assert tlog.remote_tier is not None
    assert not {s.id for s in tlog.remote_tier.finished_segments} & set(killed_attempts)
    check_records(tlog, 0, RECORDS)
    tlog.close()
    # And once more after a reopen (the state on disk agrees).
    tlog = reopen(log_dir, target)
    check_bucket(target, tlog)
    check_records(tlog, 0, RECORDS)
    tlog.close()


def test_sigkill_with_two_copies_in_flight(tmp_path: Path, target: Target) -> None:
    """A tiering round keeps two copies in flight: killed while both are under way, the
    next round cleans both attempts up and ships every segment exactly once."""
    log_dir = tmp_path / "log"
    h = Helper("round", str(log_dir), target.spec)
    h.wait_for(lambda line: line.startswith("produced "))

    def two_started() -> list[str] | None:
        ids = [i for i, (_, st) in journal_states(log_dir).items() if st == CopyState.COPY_STARTED]
        return ids if len(ids) == 2 else None

    attempts: list[str] = wait_until(two_started, "two copies started")
    wait_until(
        lambda: all(any(a in k for k in target.raw_keys()) for a in attempts),
        "bytes of both copies in the bucket",
    )
    h.kill()
    states = journal_states(log_dir)
    assert [states[a][1] for a in attempts] == [CopyState.COPY_STARTED] * 2

    tlog = reopen(log_dir, target, local_retention_bytes=0)
    tlog.tier_once()
    assert tlog.bounds().remote_end_offset == RECORDS
    check_bucket(target, tlog)
    assert tlog.remote_tier is not None
    assert not {s.id for s in tlog.remote_tier.finished_segments} & set(attempts)
    check_records(tlog, 0, RECORDS)
    tlog.close()


def test_sigkill_during_remote_retention_delete(tmp_path: Path, target: Target) -> None:
    log_dir = tmp_path / "log"
    # Set up: ship the whole log (local copies kept), fast, in this process.
    tlog = reopen(log_dir, target)
    from .crash_shipper import produce

    produce(tlog, RECORDS)
    tlog.tier_once()
    assert tlog.remote_tier is not None
    n_segments = len(tlog.remote_tier.finished_segments)
    assert n_segments >= 8
    tlog.close()

    # Stop at the second segment's deletion: fs removes 2 paths per key (the object and
    # its digest sidecar), so the 10th removal is inside the second segment.
    kill_at = "10" if target.spec.startswith("fs:") else "2"
    h = Helper("delete", str(log_dir), target.spec, kill_at)
    h.wait_for(lambda line: line.startswith("deleting "))
    h.kill()
    states = journal_states(log_dir)
    pending = sorted(b for b, st in states.values() if st == CopyState.DELETE_STARTED)
    assert len(pending) >= 2, f"not killed in the middle of a deletion: {states}"

    tlog = reopen(log_dir, target, retention_bytes=RETAIN_BYTES)
    tlog.tier_once()
    start = tlog.log_start_offset
    assert start > pending[-1]  # the deleted segments stay deleted, locally too
    assert tlog.bounds().local_start_offset >= start
    with pytest.raises(OffsetOutOfRangeError):
        tlog.read(start - 1)
    with pytest.raises(OffsetOutOfRangeError):
        tlog.read(0)
    check_bucket(target, tlog)
    assert tlog.remote_tier is not None
    assert tlog.remote_tier.finished_segments[0].base_offset == start
    check_records(tlog, start, RECORDS)
    tlog.close()
    # Rebuilt from the bucket alone, the log agrees.
    rebuilt = reopen(tmp_path / "rebuilt", target)
    assert rebuilt.log_start_offset == start
    assert rebuilt.next_offset == RECORDS
    check_records(rebuilt, start, RECORDS)
    rebuilt.close()
