"""Rewriting log directories written in the former "TB" batch format as Kafka batches.

What ``tiered-log migrate DIR`` (:mod:`tiered_log.cli.migrate`) runs. A log directory
whose segments hold the former format (:mod:`tiered_log.format.legacy`) is refused at
open (:func:`~tiered_log.local.segment.refuse_legacy`); :func:`migrate_log` rewrites each
such segment's store as Kafka v2 batches holding the same records (offsets, timestamps,
keys, values, headers), one Kafka batch per former batch, each stamped with the leader
epoch the log's ``leader-epoch-checkpoint`` gives its first offset (-1 without one), and
writes the segment's offset and time indexes anew (their positions changed). The
leader-epoch and high-watermark checkpoints stay as they are: offsets do not change.

Crash safety, per segment: the index files are deleted first, then the new store
replaces the old one with :func:`~tiered_log.local.files.write_atomic` (temporary file,
fsync, rename), then the index files are written. A migration stopped anywhere leaves
each segment either in the former format (migrated by running it again) or in the new
one with or without its index files (rebuilt at open); segments already in the new
format are skipped, so running it again finishes the work.

The last segment of a log may end in a torn tail (a write the process did not finish
before it was killed): as the former recovery did, it is left out (its bytes are counted
in :attr:`SegmentMigration.torn_bytes`). A truncation the former code left unfinished
(``<base>.cut``) is finished first. Damage anywhere else (a sealed segment whose batches
do not verify to its end) stops the migration with CorruptRecordError naming the
segment, leaving that segment unchanged.

Only the local segments are rewritten. The remote tier's copies in the bucket are not
touched (nor its local index files); the chunk cache (``remote/cache``), which holds
bytes of the bucket's copies, is left as it is.

Nothing here runs beside the process that owns the directory: :func:`migrate_log` takes
the log's lock (:class:`~tiered_log.errors.LogInUseError` when it is held), and
:func:`lock_data_dir` the data directory's. One thread per log.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CorruptRecordError, DataDirLockedError, InvalidArgumentError, LogInUseError
from ..format import legacy, naming
from ..format.records import ProducerRecord, batch_table, encode_batch, is_legacy_batch
from .files import fsync_dir, write_atomic
from .leader_epoch import LeaderEpochCache
from .log import LOCK_FILE, LogConfig, held_by
from .segment import LEGACY_HEAD
from .segment_index import build_index

_NO_LIMIT = 1 << 62
"""The value size limit of a migration: every former value was accepted once."""
_ONE_BATCH = (1 << 31) - 1
"""The batch size limit of a migration: each former batch becomes one Kafka batch."""


@dataclass(frozen=True, slots=True)
class SegmentMigration:
    """What :func:`migrate_log` did to one segment: ``migrated`` False when its store was
    in the new format already (or empty); then the counts are 0."""

    base_offset: int
    migrated: bool
    records: int = 0
    batches: int = 0
    old_bytes: int = 0
    new_bytes: int = 0
    torn_bytes: int = 0
    """Bytes of a torn tail left out (the last segment only)."""


@dataclass(slots=True)
class LogMigration:
    """What :func:`migrate_log` did to one log directory, segment by segment."""

    directory: Path
    segments: list[SegmentMigration] = field(default_factory=list)

    @property
    def migrated(self) -> list[SegmentMigration]:
        return [s for s in self.segments if s.migrated]

    @property
    def records(self) -> int:
        return sum(s.records for s in self.segments)

    @property
    def old_bytes(self) -> int:
        return sum(s.old_bytes for s in self.segments)

    @property
    def new_bytes(self) -> int:
        return sum(s.new_bytes for s in self.segments)

    @property
    def torn_bytes(self) -> int:
        return sum(s.torn_bytes for s in self.segments)


def is_legacy_store(path: Path) -> bool:
    """Whether the store file ``path`` begins with a batch in the former format."""
    try:
        with open(path, "rb") as f:
            head = f.read(LEGACY_HEAD)
    except FileNotFoundError:
        return False
    return is_legacy_batch(head)


def legacy_segments(directory: Path) -> list[int]:
    """Base offsets of the segments of the log in ``directory`` stored in the former
    format (a ``<base>.cut`` in it counts too: an unfinished truncation of one)."""
    out = []
    for base in naming.list_segment_bases(directory):
        store = naming.segment_path(directory, base, naming.LOG_SUFFIX)
        cut = naming.segment_path(directory, base, naming.CUT_SUFFIX)
        if is_legacy_store(store) or (cut.exists() and _legacy_cut(cut)):
            out.append(base)
    return out


def _legacy_cut(cut: Path) -> bool:
    blob = cut.read_bytes()
    return is_legacy_batch(blob, 8)


def find_logs(root: Path) -> list[Path]:
    """The log directories of ``root``: every partition of a service's data directory
    (``topics/<topic>/<partition>/``), or ``root`` itself when it holds segment files.
    InvalidArgumentError when it is neither (or not a directory)."""
    if not root.is_dir():
        what = "does not exist" if not root.exists() else "is not a directory"
        raise InvalidArgumentError(f"{root} {what}")
    topics = root / naming.TOPICS_DIR
    if topics.is_dir():
        return [
            p
            for t in sorted(d for d in topics.iterdir() if d.is_dir())
            for p in sorted(
                (d for d in t.iterdir() if d.is_dir() and d.name.isdigit()),
                key=lambda d: int(d.name),
            )
        ]
    if naming.list_segment_bases(root):
        return [root]
    raise InvalidArgumentError(
        f"{root} is not a tiered-log data directory (no {naming.TOPICS_DIR}/ in it) "
        "nor a log directory (no segment files)"
    )


def _flock(path: Path) -> int | None:
    """An exclusive flock on ``path`` (created if missing): its descriptor, or None when
    another process holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _holder(directory: Path) -> str:
    pid = held_by(directory)
    return f" (pid {pid})" if pid is not None else ""


@contextmanager
def lock_data_dir(root: Path) -> Iterator[None]:
    """Hold ``root``'s lock (the data directory's, or a log directory's) while the block
    runs: a service started meanwhile on it fails to start. DataDirLockedError when a
    running process holds it already."""
    fd = _flock(root / naming.DATA_DIR_LOCK)
    if fd is None:
        raise DataDirLockedError(
            f"{root} is in use by a running process{_holder(root)}: stop the service "
            "before migrating its data directory"
        )
    try:
        yield
    finally:
        os.close(fd)


def migrate_log(
    directory: Path,
    *,
    index_interval_bytes: int = LogConfig().index_interval_bytes,
    on_segment: Callable[[SegmentMigration], None] | None = None,
) -> LogMigration:
    """Rewrite every segment of the log in ``directory`` stored in the former format as
    Kafka batches (see the module docstring); segments in the new format are left as
    they are. ``on_segment`` is called after each segment. LogInUseError when the log is
    open elsewhere; CorruptRecordError for a damaged former segment (those before it are
    migrated already)."""
    fd = _flock(directory / LOCK_FILE)
    if fd is None:
        raise LogInUseError(
            f"the log in {directory} is open in another process{_holder(directory)}: "
            "stop it before migrating"
        )
    try:
        report = LogMigration(directory)
        bases = naming.list_segment_bases(directory)
        epochs: LeaderEpochCache | None = None
        for i, base in enumerate(bases):
            store = naming.segment_path(directory, base, naming.LOG_SUFFIX)
            cut = naming.segment_path(directory, base, naming.CUT_SUFFIX)
            if cut.exists() and _legacy_cut(cut):
                _finish_cut(store, cut)
            if not is_legacy_store(store):
                done = SegmentMigration(base, migrated=False)
            else:
                if epochs is None:
                    epochs = LeaderEpochCache(directory)
                last = i == len(bases) - 1
                done = _migrate_segment(directory, base, last, epochs, index_interval_bytes)
            report.segments.append(done)
            if on_segment is not None:
                on_segment(done)
        return report
    finally:
        os.close(fd)


def _finish_cut(store: Path, cut: Path) -> None:
    """Finish a truncation the former code left unfinished: cut ``store`` at the position
    ``cut`` holds (u64 little-endian) and append the former batch after it."""
    blob = cut.read_bytes()
    pos = int.from_bytes(blob[:8], "little")
    with open(store, "r+b") as f:
        f.truncate(pos)
        f.seek(pos)
        f.write(blob[8:])
        f.flush()
        os.fsync(f.fileno())
    cut.unlink()
    fsync_dir(store.parent)


def _migrate_segment(
    directory: Path, base: int, last: bool, epochs: LeaderEpochCache, interval: int
) -> SegmentMigration:
    store = naming.segment_path(directory, base, naming.LOG_SUFFIX)
    data = store.read_bytes()
    parts: list[bytes | bytearray] = []
    records = 0
    end = 0
    batches = 0
    now = time.time_ns() // 1_000_000
    for b in legacy.legacy_batches(data, base):
        prs = [ProducerRecord(r.value, r.key, r.headers, r.timestamp) for r in b.records]
        epoch = epochs.epoch_for(b.base_offset)
        encoded = encode_batch(
            b.base_offset,
            prs,
            now,
            _NO_LIMIT,
            max_batch_bytes=_ONE_BATCH,
            leader_epoch=-1 if epoch is None else epoch,
        )
        parts.append(encoded.data)
        records += len(b.records)
        batches += len(encoded.batches)
        end = b.position + b.size
    if end != len(data) and not last:
        raise CorruptRecordError(
            f"segment {store} (former format) is damaged at byte {end} of {len(data)}: "
            "it was not migrated (nor the segments after it); `tiered-log verify` on a "
            "copy made with the former version tells what is lost"
        )
    new = b"".join(parts)
    table, new_end = batch_table(new, base)
    if new_end != len(new) or sum(t.record_count for t in table) != records:
        raise CorruptRecordError(f"segment {store}: the rewritten batches do not verify")
    index_path = naming.segment_path(directory, base, naming.INDEX_SUFFIX)
    timeindex_path = naming.segment_path(directory, base, naming.TIMEINDEX_SUFFIX)
    index_path.unlink(missing_ok=True)
    timeindex_path.unlink(missing_ok=True)
    fsync_dir(directory)
    write_atomic(store, new)
    if not last and new:
        idx, _end, max_ts, max_rel, _nxt = build_index(new, base, interval)
        if not idx.time_max or idx.time_max[-1] < max_ts:
            idx.add_time(max_ts, max_rel)
        write_atomic(index_path, idx.encode_offsets())
        write_atomic(timeindex_path, idx.encode_times())
    return SegmentMigration(
        base, True, records, batches, len(data), len(new), len(data) - end if last else 0
    )


__all__ = [
    "LogMigration",
    "SegmentMigration",
    "find_logs",
    "is_legacy_store",
    "legacy_segments",
    "lock_data_dir",
    "migrate_log",
]
