"""Tiering in a cluster (issue 16), in process: two or three TieredLogs, replicas of one
partition, share ONE bucket directory and one log id.

Only the leader ships: a follower copies its leader (rolling where it did) and its
``maintain()`` ships nothing; a new leader's first tiering round rebuilds its remote
state from the bucket and ships on from the remote end, its copies carrying its leader
epoch; a deposed leader whose fence says so commits nothing; a deposed leader that does
not know yet may finish a late copy of a segment the new leader copies too: the new
leader's sweep (when it finishes after) or the next leader's resync (when it finished
before) keeps the newer epoch's copy. The bucket's complete copies always tile
``[0, end)`` with no overlap and no gap. A single-node log writes no ``leader_epoch``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tiered_log import LogConfig, ProducerRecord
from tiered_log.errors import RemoteStorageError
from tiered_log.format import naming
from tiered_log.partition import TieredLog
from tiered_log.remote import copy as copy_module
from tiered_log.remote.fs import LocalDirStorage
from tiered_log.remote.metadata import CopyState
from tiered_log.remote.tier import TierConfig

from .test_tiered_log import remote_end

SMALL = LogConfig(segment_bytes=4096, index_interval_bytes=256)
LOG_ID = "orders-0"


def open_log(path: Path, bucket: Path, *, replicated: bool = True, **tier: object) -> TieredLog:
    cfg = {
        "chunk_bytes": 1024,
        "fetch_bytes": 4096,
        "prefetch_bytes": 4096,
        "remote_enabled": True,
        **tier,
    }
    return TieredLog(
        path,
        log_id=LOG_ID,
        storage=LocalDirStorage(bucket),
        config=SMALL,
        tier=TierConfig(**cfg),  # type: ignore[arg-type]
        start_shipper=False,
        rebuild=False,
        replicated=replicated,
        hw_checkpoint_interval_ms=0,
    )


def value(o: int) -> bytes:
    return hashlib.sha256(str(o).encode()).digest() * (1 + o % 5)


def produce(log: TieredLog, n: int, per_batch: int = 7) -> None:
    o = log.next_offset
    end = o + n
    while o < end:
        k = min(per_batch, end - o)
        log.append_batch(
            [
                ProducerRecord(value(x), key=b"k%d" % x, timestamp=1_000_000 + 10 * x)
                for x in range(o, o + k)
            ]
        )
        o += k


def replicate(leader: TieredLog, follower: TieredLog, max_bytes: int = 1500) -> None:
    """The follower's fetcher, in process, rolling where the leader did."""
    while follower.next_offset < leader.next_offset:
        o = follower.next_offset
        page = leader.read_batches(o, 500, max_bytes)
        follower.append_replica(
            page.data, leader.leader_epoch_entries(), leader.segment_bases(o, page.next_offset)
        )


def bases(log: TieredLog) -> list[int]:
    """The base offsets of ``log``'s sealed local segments, and its active one's."""
    return [s["base_offset"] for s in log.describe()["local_segments"]]


def read_all(log: TieredLog, start: int = 0) -> list[tuple[int, bytes]]:
    o, out = start, []
    while o < log.next_offset:
        got = log.read_range(o, 1000, 1 << 22)
        assert got, f"nothing read at {o}"
        for r in got:
            assert r.value is not None  # every record here has a value
            out.append((r.offset, bytes(r.value)))
        o = got[-1].offset + 1
    return out


@dataclass(frozen=True)
class Copy:
    base: int
    next: int
    seg_id: str
    epoch: int | None
    head: dict[str, object]


def bucket_files(bucket: Path) -> tuple[dict[tuple[int, str], set[str]], list[str]]:
    """Every segment object in the bucket, by (base, id) -> suffixes; and any other file
    of the segments directory (a partial upload's temp file)."""
    groups: dict[tuple[int, str], set[str]] = {}
    stray: list[str] = []
    for p in bucket.rglob("*"):
        if not p.is_file() or p.name.endswith(".xxh3") or p.name in ("meta.json", "snapshot.bin"):
            continue
        parsed = naming.parse_segment_object_key(p.name)
        if parsed is None:
            stray.append(p.name)
        else:
            groups.setdefault((parsed[0], parsed[1]), set()).add(parsed[2])
    return groups, stray


def complete_copies(bucket: Path) -> list[Copy]:
    """The bucket's complete copies (data and manifest both there), by base offset, with
    their manifest's first line."""
    groups, _ = bucket_files(bucket)
    out = []
    for (base, seg_id), suffixes in sorted(groups.items()):
        if suffixes >= {naming.LOG_SUFFIX, naming.RLI_SUFFIX}:
            key = naming.segment_object_key(LOG_ID, base, seg_id, naming.RLI_SUFFIX)
            head = json.loads((bucket / key).read_bytes().partition(b"\n")[0])
            assert head["base_offset"] == base and head["id"] == seg_id
            out.append(
                Copy(
                    base,
                    int(head["next_offset"]),
                    seg_id,  # type: ignore[call-overload]
                    head.get("leader_epoch"),
                    head,
                )
            )  # type: ignore[arg-type]
    return out


def assert_tiles(bucket: Path, end: int) -> list[Copy]:
    """The bucket holds only complete copies, and they tile [0, end) exactly."""
    groups, stray = bucket_files(bucket)
    assert stray == []
    incomplete = {k: v for k, v in groups.items() if v != {naming.LOG_SUFFIX, naming.RLI_SUFFIX}}
    assert incomplete == {}
    copies = complete_copies(bucket)
    assert [c.base for c in copies] == [0] + [c.next for c in copies[:-1]], copies
    assert copies[-1].next == end
    return copies


def journal_lines(log_dir: Path) -> list[dict[str, object]]:
    path = log_dir / naming.REMOTE_DIR / naming.COPY_JOURNAL_FILE
    return [json.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def finished_ids(log: TieredLog) -> set[str]:
    r = log.remote_tier
    assert r is not None
    return {s.id for s in r.journal.finished()}


# ---- a new leader ships on from the bucket --------------------------------------------


def test_new_leader_resyncs_and_ships_on(tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    a = open_log(tmp_path / "a", bucket)
    b = open_log(tmp_path / "b", bucket, local_retention_bytes=0)
    try:
        a.lead(1, fence=lambda: True)
        produce(a, 500)
        replicate(a, b)
        a_bases = bases(a)
        assert bases(b) == a_bases and len(a_bases) > 6
        a.set_high_watermark(a_bases[4])
        b.set_high_watermark(a_bases[4])
        assert a.tier_once() == 4
        a_end = a.bounds().remote_end_offset
        assert a_end == a_bases[4]
        before = complete_copies(bucket)
        assert [c.epoch for c in before] == [1] * 4
        # The follower ships nothing: maintain() on a following log does no tiering.
        b.maintain()
        b.maintain(tier=True)
        assert complete_copies(bucket) == before
        assert b.bounds().remote_end_offset == 0 and finished_ids(b) == set()
        assert (
            not (tmp_path / "b" / naming.REMOTE_DIR / naming.COPY_JOURNAL_FILE).exists()
            or journal_lines(tmp_path / "b") == []
        )
        # B leads epoch 2 (A is gone); its first round rebuilds from the bucket.
        a.close()
        assert b.lead(2) == 500
        produce(b, 150)
        b.roll()
        b.set_high_watermark(b.next_offset)
        copied = b.tier_once()
        assert copied > 2
        # Its remote state is A's copies and its own, after them.
        copies = assert_tiles(bucket, b.next_offset)
        assert copies[:4] == before
        assert {c.epoch for c in copies[4:]} == {2}
        assert copies[4].base == a_end
        assert b.bounds().remote_end_offset == b.next_offset
        assert finished_ids(b) == {c.seg_id for c in copies}
        lines = journal_lines(tmp_path / "b")
        assert {
            ln["id"]: ln.get("leader_epoch")
            for ln in lines
            if ln["state"] == CopyState.COPY_FINISHED
        } == {c.seg_id: c.epoch for c in copies}
        # Local retention 0: the new leader reads A's copies and its own from the bucket.
        assert b.bounds().local_start_offset == b.next_offset
        assert read_all(b) == [(o, value(o)) for o in range(650)]
    finally:
        a.close()
        b.close()


def test_first_round_resync_reaches_the_old_leaders_remote_end(tmp_path: Path) -> None:
    """With its HW where A stopped, B's first round only resyncs: its remote end is A's."""
    bucket = tmp_path / "bucket"
    a = open_log(tmp_path / "a", bucket)
    b = open_log(tmp_path / "b", bucket)
    try:
        a.lead(1)
        produce(a, 400)
        replicate(a, b)
        end = bases(a)[3]
        a.set_high_watermark(end)
        a.tier_once()
        b.set_high_watermark(end)
        b.lead(2)
        assert b.bounds().remote_end_offset == 0  # not before its first round
        assert b.tier_once() == 0
        assert b.bounds().remote_end_offset == a.bounds().remote_end_offset == end
        assert {s.leader_epoch for s in b.remote_tier.journal.finished()} == {1}  # type: ignore[union-attr]
        b.set_high_watermark(b.next_offset)
        b.roll()
        b.set_high_watermark(b.next_offset)
        assert b.tier_once() > 0
        copies = assert_tiles(bucket, b.next_offset)
        assert [c.epoch for c in copies] == [1] * 3 + [2] * (len(copies) - 3)
    finally:
        a.close()
        b.close()


# ---- a deposed leader that knows it ----------------------------------------------------


def test_fenced_leader_commits_nothing(tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    a = open_log(tmp_path / "a", bucket)
    b = open_log(tmp_path / "b", bucket)
    leads = {"a": True}
    try:
        a.lead(1, fence=lambda: leads["a"])
        produce(a, 400)
        replicate(a, b)
        segs = bases(a)
        a.set_high_watermark(segs[2])
        assert a.tier_once() == 2
        before, ids = complete_copies(bucket), finished_ids(a)
        assert len(before) == 2 and len(ids) == 2
        leads["a"] = False  # A is deposed (and asks its fence before each commit)
        a.set_high_watermark(segs[5])
        for _ in range(2):
            with pytest.raises(RemoteStorageError, match="no longer leads epoch 1"):
                a.tier_once()
            assert complete_copies(bucket) == before
            assert finished_ids(a) == ids
            assert a.bounds().remote_end_offset == segs[2]
            groups, stray = bucket_files(bucket)
            assert stray == [] and set(groups) == {(c.base, c.seg_id) for c in before}
            assert {
                ln["id"]
                for ln in journal_lines(tmp_path / "a")
                if ln["state"] == CopyState.COPY_FINISHED
            } == ids
        # B leads on from A's last commit.
        b.lead(2)
        b.set_high_watermark(segs[5])
        assert b.tier_once() == 3
        copies = assert_tiles(bucket, segs[5])
        assert [c.epoch for c in copies] == [1, 1, 2, 2, 2]
    finally:
        a.close()
        b.close()


# ---- a deposed leader that does not know yet ---------------------------------------------


@pytest.mark.parametrize("older_lists_first", [True, False])
def test_late_copies_by_a_deposed_leader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, older_lists_first: bool
) -> None:
    """(The bucket lists two copies of one segment by their random ids: the resync is
    tried with the older epoch's copy listed first, and last.)"""
    id_first = ["a"]  # the first hex digit of the next copy ids

    def new_id() -> str:
        return id_first[0] + uuid.uuid4().hex[1:]

    monkeypatch.setattr(copy_module, "new_segment_id", new_id)
    bucket = tmp_path / "bucket"
    a = open_log(tmp_path / "a", bucket)
    b = open_log(tmp_path / "b", bucket)
    c = open_log(tmp_path / "c", bucket, local_retention_bytes=0)
    try:
        a.lead(1, fence=lambda: True)  # it never learns it was deposed
        produce(a, 500)
        replicate(a, b)
        replicate(a, c)
        s = bases(a)
        assert bases(b) == bases(c) == s and len(s) > 5
        for log in (a, b, c):
            log.set_high_watermark(s[2])
        assert a.tier_once() == 2
        b.lead(2, fence=lambda: True)
        assert b.tier_once() == 0  # resync only: its HW is where A stopped
        assert b.bounds().remote_end_offset == s[2]

        # (a) A finishes its late copy of segment s[2] first, then B its own: B's sweep
        # deletes A's (older epoch).
        a.set_high_watermark(s[3])
        assert a.tier_once() == 1
        late = [x for x in complete_copies(bucket) if x.base == s[2]]
        assert [x.epoch for x in late] == [1]
        b.set_high_watermark(s[3])
        assert b.tier_once() == 1
        now = [x for x in complete_copies(bucket) if x.base == s[2]]
        assert [x.epoch for x in now] == [2]
        assert_tiles(bucket, s[3])

        # (b) B finishes its copy of s[3] first, then A its late one: A (epoch 1) leaves
        # B's alone, so both are complete until C (epoch 3) resyncs: it keeps B's.
        b.set_high_watermark(s[4])
        id_first[0] = "f" if older_lists_first else "0"
        assert b.tier_once() == 1
        a.set_high_watermark(s[4])
        id_first[0] = "0" if older_lists_first else "f"
        assert a.tier_once() == 1
        id_first[0] = "a"
        both = [x for x in complete_copies(bucket) if x.base == s[3]]
        assert [x.epoch for x in both] == ([1, 2] if older_lists_first else [2, 1])
        b_copy = next(x for x in both if x.epoch == 2)
        b.close()
        c.set_high_watermark(s[4])
        assert c.lead(3) == 500
        assert c.tier_once() == 0
        copies = assert_tiles(bucket, s[4])
        assert [x.epoch for x in copies] == [1, 1, 2, 2]
        assert b_copy in copies
        assert c.bounds().remote_end_offset == s[4]
        assert {x.id for x in c.remote_tier.journal.finished()} == {x.seg_id for x in copies}  # type: ignore[union-attr]
        # C ships on, and reads every record once (below s[4] from the bucket only).
        c.set_high_watermark(c.next_offset)
        c.roll()
        c.set_high_watermark(c.next_offset)
        assert c.tier_once() > 0
        copies = assert_tiles(bucket, 500)
        assert [x.epoch for x in copies][4:] == [3] * (len(copies) - 4)
        assert c.bounds().local_start_offset == 500
        assert read_all(c) == [(o, value(o)) for o in range(500)]
    finally:
        a.close()
        b.close()
        c.close()


def test_a_zombie_copy_above_the_new_leaders_log_end_waits_for_the_resync(
    tmp_path: Path,
) -> None:
    """A new leader looks for a deposed leader's late copy only below the log end it took
    the lead at (there the deposed one's in-flight copies are): one there goes; one above
    (records the deposed leader never got acknowledged) is left to the next resync, which
    keeps the newer epoch's, so every read is the new leader's records."""
    bucket = tmp_path / "bucket"
    a = open_log(tmp_path / "a", bucket)
    b = open_log(tmp_path / "b", bucket)
    try:
        a.lead(1, fence=lambda: True)  # it never learns it was deposed
        produce(a, 500)
        s = bases(a)
        assert len(s) > 5
        while b.next_offset < s[3]:  # B has A's log up to s[3] only
            o = b.next_offset
            page = a.read_batches(o, 500, 1500, upto=s[3])
            b.append_replica(
                page.data, a.leader_epoch_entries(), a.segment_bases(o, page.next_offset)
            )
        assert b.next_offset == s[3]
        for log in (a, b):
            log.set_high_watermark(s[2])
        assert a.tier_once() == 2
        b.lead(2, fence=lambda: True)
        assert b.tier_once() == 0  # resync only
        # A, deposed without knowing, finishes late copies of s[2] (below B's log end
        # when it took the lead) and s[3] (above: records B never had).
        a.set_high_watermark(s[4])
        assert a.tier_once() == 2
        produce(b, 200)
        b.set_high_watermark(b.next_offset)
        b.roll()
        assert b.tier_once() >= 2
        assert [x.epoch for x in complete_copies(bucket) if x.base == s[2]] == [2]
        assert sorted(x.epoch or 0 for x in complete_copies(bucket) if x.base == s[3]) == [1, 2]
        b_records = read_all(b)
        b.close()
        c = open_log(tmp_path / "c", bucket, local_retention_bytes=0)
        try:
            start = c.lead(3)  # an empty log continues above the bucket
            assert c.tier_once() == 0  # the resync keeps the epoch-2 copy of s[3]
            at_s3 = {x.seg_id: x.epoch for x in complete_copies(bucket) if x.base == s[3]}
            kept = {x.id for x in c.remote_tier.journal.finished() if x.base_offset == s[3]}  # type: ignore[union-attr]
            assert [at_s3[k] for k in kept] == [2]
            assert start == c.bounds().remote_end_offset
            assert start > s[4]
            assert read_all(c) == b_records[:start]
        finally:
            c.close()
    finally:
        a.close()
        b.close()


# ---- a single node ------------------------------------------------------------------------


def test_single_node_writes_no_leader_epoch(tmp_path: Path) -> None:
    bucket = tmp_path / "bucket"
    log = open_log(tmp_path / "a", bucket, replicated=False)
    try:
        produce(log, 300)
        log.roll()
        assert log.tier_once() > 2
        copies = assert_tiles(bucket, 300)
        assert all("leader_epoch" not in x.head for x in copies)
        lines = journal_lines(tmp_path / "a")
        assert lines and all("leader_epoch" not in ln for ln in lines)
        assert all(s.leader_epoch is None for s in log.remote_tier.journal.finished())  # type: ignore[union-attr]
    finally:
        log.close()
    log = open_log(tmp_path / "a", bucket, replicated=False)  # and after a reopen
    try:
        produce(log, 100)
        log.roll()
        assert log.tier_once() > 0
        assert all("leader_epoch" not in x.head for x in assert_tiles(bucket, 400))
        assert all("leader_epoch" not in ln for ln in journal_lines(tmp_path / "a"))
    finally:
        log.close()


# ---- a role change during a round ----------------------------------------------------------


class CountingStop(threading.Event):
    """The shipper's stop event, counting how often the round asked it."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def is_set(self) -> bool:
        self.asked += 1
        return super().is_set()


def test_a_round_under_way_commits_nothing_after_follow(tmp_path: Path) -> None:
    """The node's role change as it happens: the round has two copies in flight whose
    manifests passed the fence (this node still led), then the node learns it is deposed
    and calls follow() (which sets the shipper's stop event); the round may finish those
    two, but must commit nothing more."""
    bucket = tmp_path / "bucket"
    a = open_log(tmp_path / "a", bucket)
    stop = CountingStop()
    deposed = threading.Event()
    try:
        produce(a, 500)

        calls: list[int] = []
        lock = threading.Lock()
        both_asked = threading.Barrier(2)

        def fence() -> bool:
            with lock:
                calls.append(len(calls))
                if len(calls) > 2:
                    return False  # asked after the role change: no longer the leader
            # The two copies in flight ask while this node leads (both answered True)...
            both_asked.wait(timeout=10)
            deadline = time.monotonic() + 10
            while stop.asked < 3 and time.monotonic() < deadline:
                time.sleep(0.001)  # ...the round has asked its stop event for the third
            with lock:  # segment and waits for the first copy; now the node is deposed:
                if not deposed.is_set():
                    deposed.set()
                    a.follow()
                    stop.set()  # (follow() sets the shipper's stop event: stop_shipper)
            return True

        a.lead(1, fence=fence)
        a.set_high_watermark(a.next_offset)
        assert len(a.eligible_segments()) >= 4
        with contextlib.suppress(RemoteStorageError):
            a.tier_once(stop=stop)
        assert deposed.is_set() and stop.asked >= 3
        copies = complete_copies(bucket)
        assert [c.epoch for c in copies] == [1, 1], copies
    finally:
        a.close()


def test_a_new_leader_answers_not_ready_until_it_has_read_the_bucket(tmp_path: Path) -> None:
    """A follower whose local retention dropped what its leader shipped takes the lead:
    before its first round has read the bucket, its bounds (as the API reports them),
    archived reads and timestamp lookups answer retriable not_ready, never a log start
    above the true one or a 416 for an archived offset; local offsets are served. The
    round makes every offset readable again."""
    from tiered_log.broker.topics import partition_bounds
    from tiered_log.errors import PartitionNotReadyError

    bucket = tmp_path / "bucket"
    a = open_log(tmp_path / "a", bucket)
    b = open_log(tmp_path / "b", bucket, local_retention_bytes=0)
    try:
        a.lead(1, fence=lambda: True)
        produce(a, 500)
        replicate(a, b)
        a.roll()
        a.set_high_watermark(a.next_offset)
        b.set_high_watermark(a.next_offset)
        assert a.tier_once() > 4
        b.apply_replica_retention(remote_end(a))
        local_start = b.bounds().local_start_offset
        assert local_start > 0
        a.close()
        b.lead(2)
        for call in (
            lambda: partition_bounds(b),
            lambda: b.read_batches(0),
            lambda: b.read_range(0),
            lambda: b.offset_for_timestamp(0),
        ):
            with pytest.raises(PartitionNotReadyError) as err:
                call()
            assert err.value.retriable and err.value.code == "not_ready"
        if local_start < b.next_offset:
            assert b.read_range(local_start, 1)[0].offset == local_start
        produce(b, 10)  # appends are not held up (the bucket's end is moved alone)
        b.tier_once()
        assert partition_bounds(b).log_start_offset == 0
        assert b.offset_for_timestamp(0) == 0
        assert read_all(b) == [(o, value(o)) for o in range(510)]
    finally:
        a.close()
        b.close()
