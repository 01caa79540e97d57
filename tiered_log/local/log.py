"""The local segmented log: a directory of segments, one of them active.

A log is a directory of segments named by their 20-digit base offsets. Invariants::

    segments[i+1].base_offset == segments[i].next_offset     (no gaps, no overlap)
    segments[:-1] are sealed; segments[-1] is the one active (write) segment
    log_start_offset == segments[0].base_offset;  next_offset == segments[-1].next_offset

Reads resolve an offset to a segment by binary search (``bisect``) over base offsets.
The active segment rolls (is sealed, and a new one started) when an append would take
it past ``segment_bytes`` or when it is older than ``segment_ms``.

Crash recovery on open: leftover ``.tmp`` files are removed; every sealed segment's index
files are checked for size (and fully validated on first load), and rebuilt from the
store when missing or damaged; the last segment is scanned batch by batch, its torn or
damaged tail cut at the last verified batch, its indexes rebuilt in memory. Records that
reached the OS (written, even if not fsynced) survive a process kill; records that were
flushed (fsynced) survive a machine crash too. A segment in tiered_log's former batch
format is refused (:class:`~tiered_log.format.batch.LegacyFormatError`, one line naming
``tiered-log migrate``), never read or cut.

Thread-safety: :class:`Log` is safe to share between threads. Mutations (append, roll,
flush, truncate, retention, close) serialize on one lock; reads take no lock: they work on
a snapshot of the segment list and ``pread`` their own descriptors, so a reader of a
sealed segment never blocks a producer. A read racing a truncation of the same range may
fail with :class:`~tiered_log.errors.OffsetOutOfRangeError` or return records the
truncation then removes. The lock never leaves the class: a caller that needs the end
to hold still while it decides (a follower's copy, a leader epoch starting at the end)
passes a callback to :meth:`Log.append_copy` or :meth:`Log.at_end`.

Read-only open (:meth:`Log.open_read_only`): a view of a directory that another process
(a running server) owns, for inspection tools. It takes no lock and never writes,
truncates, renames or deletes a file: no recovery (a torn or growing tail is left as it
is and only its verified batches are read; damaged index files are rebuilt in memory).
It is a snapshot: the segments and their extents as they were when it was opened;
records appended later are not in it, and a segment the owner deletes afterwards
(retention) reads as :class:`~tiered_log.errors.OffsetOutOfRangeError` unless this view
already had it open. Every mutation raises :class:`~tiered_log.errors.InvalidArgumentError`.
:func:`held_by` tells whether (and by which process) the directory is open elsewhere.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from ..errors import (
    InvalidArgumentError,
    InvalidOffsetError,
    LogClosedError,
    LogInUseError,
    OffsetOutOfRangeError,
    TieredLogError,
)
from ..format import naming
from ..format.records import EncodedBatch, ProducerRecord, Record, encode_batch
from ..topic_config import MAX_SEGMENT_BYTES, TOPIC_DEFAULTS, TopicConfig, no_limit
from .files import fsync_dir
from .segment import Segment, SegmentInfo
from .segment_index import IndexCache

T = TypeVar("T")

LOCK_FILE = ".lock"
"""Held (flock) by the one open Log of a directory."""

READ_ONLY_OPEN_ATTEMPTS = 5
"""Listings of a directory a read-only open tries when segments vanish while it opens
them (the owner's retention) before it gives up."""


def held_by(directory: str | os.PathLike[str]) -> int | None:
    """The pid of the process holding ``directory``'s log lock (an open :class:`Log`,
    e.g. a running server), or None when no process holds it or it cannot be told
    (no ``/proc/locks``: not Linux). Takes no lock: reads ``/proc/locks``."""
    try:
        st = os.stat(Path(directory) / LOCK_FILE)
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    want = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    for line in lines:
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 15308 08:01:123456 0 EOF" (blocked waiters: "-> ...")
        if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == want and parts[4].isdigit():
            return int(parts[4])
    return None


def _no_epoch() -> int:
    """The leader epoch of a log whose owner set no source: none (-1, as a producer
    writes it)."""
    return -1


def now_ms() -> int:
    """Wall-clock milliseconds since the epoch."""
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class LogConfig:
    """Per-log settings. Immutable; validated on construction (InvalidArgumentError).

    The topic-level settings and their defaults are :class:`~tiered_log.topic_config.
    TopicConfig`'s (:meth:`of` derives a LogConfig from one): ``flush_messages=1`` by
    default, every append fsynced before it returns. ``None`` (or -1, as in Kafka) for a
    retention or flush setting means "no limit" (:func:`~tiered_log.topic_config.no_limit`).
    Retention here is the total retention: what a log without a remote tier applies.
    """

    segment_bytes: int = TOPIC_DEFAULTS.segment_bytes
    segment_ms: int | None = TOPIC_DEFAULTS.segment_ms
    index_interval_bytes: int = 4096
    append_threshold: int = TOPIC_DEFAULTS.append_threshold
    flush_messages: int | None = TOPIC_DEFAULTS.flush_messages
    flush_ms: int | None = TOPIC_DEFAULTS.flush_ms
    retention_ms: int | None = TOPIC_DEFAULTS.retention_ms
    retention_bytes: int | None = TOPIC_DEFAULTS.retention_bytes
    num_index_cached_read_segments: int = 64
    log_append_time: bool = TOPIC_DEFAULTS.message_timestamp_type == "LogAppendTime"
    """Every batch appended gets the log's clock (Kafka's LogAppendTime: attributes bit 3
    and maxTimestamp set, which readers report as every record's timestamp); False: the
    timestamps as the producer set them (CreateTime), the clock only where it set none."""

    @classmethod
    def of(cls, topic: TopicConfig, **local: int) -> LogConfig:
        """The LogConfig of a partition of a topic with settings ``topic``; ``local``:
        the settings of this log only (``index_interval_bytes``, ...)."""
        return cls(
            segment_bytes=topic.segment_bytes,
            segment_ms=topic.segment_ms,
            append_threshold=topic.append_threshold,
            flush_messages=topic.flush_messages,
            flush_ms=topic.flush_ms,
            retention_ms=topic.retention_ms,
            retention_bytes=topic.retention_bytes,
            log_append_time=topic.message_timestamp_type == "LogAppendTime",
            **local,
        )

    def __post_init__(self) -> None:
        def positive(name: str, v: int | None, *, optional: bool = False, lo: int = 1) -> None:
            if v is None and optional:
                return
            if not isinstance(v, int) or isinstance(v, bool) or v < lo:
                raise InvalidArgumentError(f"{name} must be an integer >= {lo}, got {v!r}")

        for name in ("segment_ms", "flush_messages", "flush_ms", "retention_ms", "retention_bytes"):
            object.__setattr__(self, name, no_limit(getattr(self, name)))
        positive("segment_bytes", self.segment_bytes, lo=64)
        if self.segment_bytes > MAX_SEGMENT_BYTES:
            raise InvalidArgumentError(f"segment_bytes must be at most {MAX_SEGMENT_BYTES}")
        positive("segment_ms", self.segment_ms, optional=True)
        positive("index_interval_bytes", self.index_interval_bytes)
        positive("append_threshold", self.append_threshold)
        positive("flush_messages", self.flush_messages, optional=True)
        positive("flush_ms", self.flush_ms, optional=True, lo=0)
        positive("retention_ms", self.retention_ms, optional=True, lo=0)
        positive("retention_bytes", self.retention_bytes, optional=True, lo=0)
        positive("num_index_cached_read_segments", self.num_index_cached_read_segments)
        if not isinstance(self.log_append_time, bool):
            raise InvalidArgumentError(
                f"log_append_time must be a bool, got {self.log_append_time!r}"
            )


@dataclass(frozen=True, slots=True)
class LogBounds:
    """Offsets that bound a log: ``[log_start_offset, next_offset)`` is readable."""

    log_start_offset: int
    next_offset: int
    flushed_offset: int


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What opening the log had to repair."""

    segments: int
    truncated_bytes: int
    rebuilt_indexes: int
    removed_files: int


def split_batches_at(batch: EncodedBatch, at: set[int]) -> list[EncodedBatch]:
    """``batch`` cut before each of its batches whose base offset is in ``at`` (where
    another log's segments begin); the pieces share no bytes with each other."""
    if not at:
        return [batch]
    out: list[EncodedBatch] = []
    start = 0
    infos = batch.batches
    for i in range(1, len(infos) + 1):
        if i == len(infos) or infos[i].base_offset in at:
            part = infos[start:i]
            first, last = part[0], part[-1]
            lo, hi = first.position, last.position + last.size
            out.append(
                EncodedBatch(
                    first.base_offset,
                    bytes(memoryview(batch.data)[lo:hi]),
                    [b._replace(position=b.position - lo) for b in part],
                    last.next_offset - first.base_offset,
                )
            )
            start = i
    return out


class Log:
    """A local segmented log in one directory. See the module docstring.

    Use :meth:`open` (or the constructor, which does the same) and :meth:`close` (or a
    ``with`` block).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        config: LogConfig | None = None,
        *,
        initial_offset: int = 0,
        read_only: bool = False,
    ) -> None:
        self.directory = Path(directory)
        self.read_only = read_only
        self._initial_offset = initial_offset
        self.config = config or LogConfig()
        self._lock = threading.RLock()
        self._cache = IndexCache(self.config.num_index_cached_read_segments)
        self._closed = False
        self._unflushed = 0
        self._last_flush_ms = now_ms()
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        self._view: tuple[list[Segment], list[int]] = ([], [])
        self._leader_epoch: Callable[[], int] = _no_epoch
        if read_only:
            self._lock_fd = -1
            self.recovery = self._open_read_only()
        else:
            self._lock_fd = self._lock_directory()
            try:
                self.recovery = self._open()
            except BaseException:
                os.close(self._lock_fd)
                raise
        self._flushed_offset = self.next_offset

    @classmethod
    def open(cls, directory: str | os.PathLike[str], config: LogConfig | None = None) -> Log:
        """Open (creating if needed) the log in ``directory``, recovering it after a crash."""
        return cls(directory, config)

    @classmethod
    def open_read_only(
        cls, directory: str | os.PathLike[str], config: LogConfig | None = None
    ) -> Log:
        """A read-only snapshot of the log in ``directory``, which may be open elsewhere
        (see the module docstring). InvalidArgumentError when it holds no segment."""
        return cls(directory, config, read_only=True)

    # ---- opening / recovery ------------------------------------------------------------

    def _lock_directory(self) -> int:
        """Create the directory and take its ``.lock`` (flock, held until close): one
        open Log per directory, across threads and processes. Returns the lock's fd."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InvalidArgumentError(
                f"cannot create log directory {self.directory}: {exc}"
            ) from exc
        if not self.directory.is_dir():
            raise InvalidArgumentError(f"{self.directory} is not a directory")
        try:
            fd = os.open(self.directory / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise InvalidArgumentError(
                f"cannot open {self.directory / LOCK_FILE}: {exc.strerror}"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise LogInUseError(
                f"the log in {self.directory} is open elsewhere "
                "(another process, or an unclosed Log)"
            ) from None
        return fd

    def _open(self) -> RecoveryReport:
        removed = 0
        for p in self.directory.iterdir():
            if p.name.endswith(naming.TMP_SUFFIX) or ".tmp-" in p.name:
                p.unlink(missing_ok=True)
                removed += 1
        bases = naming.list_segment_bases(self.directory)
        # Index (or cut) files without a store are leftovers of a deleted segment.
        for suffix in (naming.INDEX_SUFFIX, naming.TIMEINDEX_SUFFIX, naming.CUT_SUFFIX):
            for p in self.directory.glob("*" + suffix):
                b = naming.parse_offset_name(p.name, suffix)
                if b is not None and b not in bases:
                    p.unlink(missing_ok=True)
                    removed += 1
        cfg = self.config
        kw = {"index_interval_bytes": cfg.index_interval_bytes, "cache": self._cache}
        segments: list[Segment] = []
        rebuilt = 0
        cut = 0
        for i, base in enumerate(bases[:-1]):
            seg = Segment.open_sealed(self.directory, base, bases[i + 1], **kw)  # type: ignore[arg-type]
            rebuilt += seg.index_rebuilds
            segments.append(seg)
        if bases:
            last, cut = Segment.open_active(self.directory, bases[-1], **kw)  # type: ignore[arg-type]
            segments.append(last)
        else:
            segments.append(Segment.create(self.directory, self._initial_offset, **kw))  # type: ignore[arg-type]
        self._set_segments(segments)
        return RecoveryReport(len(segments), cut, rebuilt, removed)

    def _open_read_only(self) -> RecoveryReport:
        """Open the segments as they are, writing nothing; a segment that vanishes while
        they open (the owner's retention) makes it list the directory again."""
        if not self.directory.is_dir():
            raise InvalidArgumentError(f"log directory {self.directory} does not exist")
        cfg = self.config
        kw = {"index_interval_bytes": cfg.index_interval_bytes, "cache": self._cache}
        for _ in range(READ_ONLY_OPEN_ATTEMPTS):
            bases = naming.list_segment_bases(self.directory)
            if not bases:
                raise InvalidArgumentError(
                    f"{self.directory} holds no log (no *{naming.LOG_SUFFIX} segment files)"
                )
            try:
                segments = [
                    Segment.open_sealed(self.directory, b, bases[i + 1], read_only=True, **kw)  # type: ignore[arg-type]
                    for i, b in enumerate(bases[:-1])
                ]
                last, past = Segment.open_active(self.directory, bases[-1], read_only=True, **kw)  # type: ignore[arg-type]
            except FileNotFoundError:
                continue
            segments.append(last)
            self._set_segments(segments)
            rebuilt = sum(s.index_rebuilds for s in segments)
            return RecoveryReport(len(segments), past, rebuilt, 0)
        raise TieredLogError(
            f"the segments of {self.directory} kept being deleted while they were opened "
            f"({READ_ONLY_OPEN_ATTEMPTS} tries): try again",
            retriable=True,
        )

    def _set_segments(self, segments: list[Segment], bases: list[int] | None = None) -> None:
        # Replace both lists whole. Lock-free readers take their snapshot from ``_view``,
        # one attribute holding both: reading ``_segments`` and ``_bases`` one after the
        # other could pair the lists of two different moments (around a retention or a
        # truncation: the wrong segment for an offset, and false corruption errors).
        # ``bases``: the segments' base offsets when the caller has them (a roll).
        if bases is None:
            bases = [s.base_offset for s in segments]
        self._view = (segments, bases)
        self._segments = segments
        self._bases = bases

    # ---- bounds --------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._segments[0].base_offset

    @property
    def next_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def active_base_offset(self) -> int:
        """Base offset of the active (write) segment: it changes when the log rolls."""
        return self._segments[-1].base_offset

    @property
    def flushed_offset(self) -> int:
        """Offsets below this were fsynced (sealed segments always are)."""
        return self._flushed_offset

    def bounds(self) -> LogBounds:
        return LogBounds(self.log_start_offset, self.next_offset, self._flushed_offset)

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def bytes_from(self, offset: int) -> int:
        """Bytes this log holds from the batch holding ``offset`` to its end (all of it
        below the log start, 0 at or past the end): what a follower whose log ends at
        ``offset`` still has to copy. Reads a few batch headers of one segment; a segment
        deleted meanwhile counts whole. Any thread."""
        segs, i = self._segment_for(max(offset, 0))
        if i < 0:
            return sum(s.size for s in segs)
        total = sum(s.size for s in segs[i + 1 :])
        try:
            pos, _ = segs[i].position_of(offset)
        except (TieredLogError, OSError):
            pos = 0
        return total + max(0, segs[i].size - pos)

    def segments(self) -> list[SegmentInfo]:
        """Snapshots of every segment, oldest first (the last one is active)."""
        return [s.info() for s in self._segments]

    def segment_bases(self, start: int, end: int) -> list[int]:
        """Base offsets of the segments beginning in ``[start, end)`` (by bisection: the
        cost does not grow with the number of segments). Any thread."""
        bases = self._view[1]
        return bases[bisect_left(bases, start) : bisect_left(bases, end)]

    @property
    def index_cache(self) -> IndexCache:
        return self._cache

    # ---- appending -----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.directory} is closed")

    def _check_writable(self) -> None:
        self._check_open()
        if self.read_only:
            raise InvalidArgumentError(f"the log in {self.directory} was opened read-only")

    def set_leader_epoch_source(self, epoch: Callable[[], int]) -> None:
        """Where appends find the leader epoch they stamp into every batch's
        partitionLeaderEpoch: ``epoch()`` is called under the append lock, so an epoch
        assigned at the log end (:meth:`at_end`) is stamped into every batch appended
        after it and none before. It returns -1 when the log has no epoch (the default
        source). The partition log that owns this log sets it once, before appending."""
        self._leader_epoch = epoch

    def append(
        self,
        value: bytes | None,
        *,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes | None]] = (),
        timestamp: int | None = None,
    ) -> int:
        """Append one record (``value`` None: a null value, a tombstone); returns its
        offset."""
        try:
            hdrs = tuple(headers)
        except TypeError as exc:
            raise InvalidArgumentError("headers must be a sequence of (name, value) pairs") from exc
        rec = ProducerRecord(value, key, hdrs, timestamp)
        return self.append_batch([rec])[0]

    def append_batch(
        self, records: Sequence[ProducerRecord | bytes] | EncodedBatch, *, roll: bool = True
    ) -> tuple[int, int]:
        """Append records in one write; returns ``(first_offset, last_offset)``.

        All or nothing: bad input raises before anything is written. A bare ``bytes``
        item is a value with no key or headers, timestamped now. An
        :class:`~tiered_log.format.records.EncodedBatch` from
        :func:`~tiered_log.format.records.receive_batches` (a client's verified batches)
        is appended as it is, moved to the log's next offset. Either way every batch is
        written as this log's leader: it gets the leader epoch (see
        :meth:`set_leader_epoch_source`) and, under ``log_append_time``, the log's clock
        (a client's batches in place: :meth:`EncodedBatch.rebased
        <tiered_log.format.records.EncodedBatch.rebased>`). ``roll=False``: never roll
        by size or age here (a follower rolls exactly where its leader did, by
        :meth:`roll`).
        """
        if (records.count if isinstance(records, EncodedBatch) else len(records)) == 0:
            raise InvalidArgumentError("a batch needs at least one record")
        with self._lock:
            self._check_writable()
            cfg = self.config
            ts_now = now_ms()
            nxt = self._segments[-1].next_offset
            epoch = self._leader_epoch()
            lat = cfg.log_append_time
            if isinstance(records, EncodedBatch):
                batch = records.rebased(nxt, ts_now, leader_epoch=epoch, log_append_time=lat)
            else:
                batch = encode_batch(
                    nxt,
                    records,
                    ts_now,
                    cfg.append_threshold,
                    leader_epoch=epoch,
                    log_append_time=lat,
                )
            return self._write_locked(batch, ts_now, roll=roll)

    def _write_locked(
        self, batch: EncodedBatch, ts_now: int, *, roll: bool, flush: bool = True
    ) -> tuple[int, int]:
        """Write ``batch`` (at the next offset already) to the active segment, rolling
        first when ``roll`` and the segment is full or old, then flush by the policy
        (``flush=False``: the flush it owes is left to :meth:`flush_if_due`); returns the
        first and last offsets. Under the lock."""
        cfg = self.config
        active = self._segments[-1]
        if (
            roll
            and active.size
            and (
                active.size + len(batch.data) > cfg.segment_bytes
                or (cfg.segment_ms is not None and ts_now - active.created_ms >= cfg.segment_ms)
            )
        ):
            active = self._roll()
        try:
            active.append(batch)
        except OSError as exc:
            raise TieredLogError(
                f"write to {active.store_path} failed: {exc}", retriable=True
            ) from exc
        self._unflushed += batch.count
        if flush and self._flush_due(ts_now):
            self._flush_locked()
        return batch.base_offset, batch.next_offset - 1

    def _flush_due(self, ts_now: int) -> bool:
        """Whether the flush policy owes an fsync now: ``flush_messages`` unflushed
        records, or ``flush_ms`` since the last flush with records unflushed."""
        cfg = self.config
        return bool(self._unflushed) and (
            (cfg.flush_messages is not None and self._unflushed >= cfg.flush_messages)
            or (cfg.flush_ms is not None and ts_now - self._last_flush_ms >= cfg.flush_ms)
        )

    def _roll(self) -> Segment:
        """Seal the active segment and start a new one at the next offset (lock held)."""
        old = self._segments[-1]
        old.seal()
        self._flushed_offset = max(self._flushed_offset, old.next_offset)
        new = Segment.create(
            self.directory,
            old.next_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            cache=self._cache,
        )
        self._set_segments([*self._segments, new], [*self._bases, new.base_offset])
        return new

    def roll(self) -> None:
        """Seal the active segment now if it holds any record (e.g. before shipping)."""
        with self._lock:
            self._check_writable()
            if self._segments[-1].size:
                self._roll()
                self._flushed_offset = max(self._flushed_offset, self._segments[-1].base_offset)

    def reconfigure(self, config: LogConfig) -> None:
        """Take ``config``'s topic-level settings from now on (a topic's configuration
        changed while the log is open): segment size and age apply to the active segment
        at the next append or age check (segments already sealed stay as they are),
        flush settings to the next append, retention to the next round, the timestamp
        type to batches appended from now on. The settings of this log only
        (``index_interval_bytes``, ``num_index_cached_read_segments``) stay as they are.
        Under the append lock, so an append sees either the old or the new settings."""
        merged = replace(
            config,
            index_interval_bytes=self.config.index_interval_bytes,
            num_index_cached_read_segments=self.config.num_index_cached_read_segments,
        )
        with self._lock:
            self._check_writable()
            self.config = merged

    def maybe_roll_by_age(self) -> bool:
        """Roll the active segment if ``segment_ms`` has passed; for a periodic task."""
        cfg = self.config
        with self._lock:
            self._check_writable()
            active = self._segments[-1]
            if (
                active.size
                and cfg.segment_ms is not None
                and now_ms() - active.created_ms >= cfg.segment_ms
            ):
                self._roll()
                self._flushed_offset = max(self._flushed_offset, self._segments[-1].base_offset)
                return True
            return False

    def append_copy(
        self,
        batch: EncodedBatch,
        *,
        rolls: Sequence[int] | None = None,
        before: Callable[[int], None] | None = None,
        undo: Callable[[int], None] | None = None,
        sync: bool = True,
    ) -> int:
        """Append another log's verified batches at exactly this log's end, keeping their
        offsets and timestamps (a follower copying its leader); returns the new next
        offset. InvalidArgumentError when ``batch`` does not start at the next offset.

        ``sync=False``: the fsync the flush policy owes for these batches is not done
        here but by the caller's next :meth:`flush_if_due` (a follower catching up below
        its leader's high watermark copies records that are committed already, and its
        log end counts for nothing until it reaches that mark: it fsyncs once before
        it reports such an end, not after every copy); a roll still seals (fsyncs) the
        segment it closes.

        ``rolls``: the other log's segment bases among these offsets: the active segment
        rolls exactly there and never by its own size or age, so the segments are the
        other log's. None: one write, rolling by this log's own size and age.
        ``before(next_offset)`` runs once the start is checked, before anything is
        written (it may refuse by raising); ``undo(next_offset)`` runs if the write then
        fails, with the offset the log ends at. Both run with appends held off, so no
        other append comes between the check, the callbacks and the write; they must not
        call back into this log's mutations."""
        with self._lock:
            self._check_writable()
            nxt = self.next_offset
            if batch.base_offset != nxt:
                raise InvalidArgumentError(
                    f"replica batches start at offset {batch.base_offset}"
                    f" but this log's next offset is {nxt}"
                )
            if before is not None:
                before(nxt)
            try:
                # The leader's bytes, unchanged: offsets, timestamps and the leader epoch
                # it stamped stay as they are.
                if rolls is None:
                    self._write_locked(batch, now_ms(), roll=True, flush=sync)
                else:
                    at = set(rolls)
                    for piece in split_batches_at(batch, at):
                        active = self._segments[-1]
                        if piece.base_offset in at and active.base_offset != piece.base_offset:
                            self.roll()
                        self._write_locked(piece, now_ms(), roll=False, flush=sync)
            except BaseException:
                if undo is not None:
                    undo(self.next_offset)
                raise
            return self.next_offset

    def at_end(self, fn: Callable[[int], T]) -> T:
        """``fn(next_offset)``, with appends held off until it returns, so the log end it
        was given is still the end (a leader epoch that starts there). ``fn`` must not
        call back into this log's mutations."""
        with self._lock:
            self._check_open()
            return fn(self.next_offset)

    def flush(self) -> int:
        """fsync everything appended so far; returns the new flushed offset. Nothing
        appended since the last fsync (an append the flush policy already synced, as with
        the default ``flush_messages=1``) costs no system call, as Kafka's flush skips a
        log whose recovery point is its end."""
        with self._lock:
            self._check_writable()
            if self._unflushed or self._flushed_offset != self.next_offset:
                self._flush_locked()
            return self._flushed_offset

    def flush_if_due(self) -> int:
        """fsync what the flush policy owes (see :meth:`append_copy`'s ``sync``): records
        are unflushed and ``flush_messages`` or ``flush_ms`` says they are due; returns
        the flushed offset. Nothing to do costs no system call."""
        with self._lock:
            self._check_writable()
            if self._flush_due(now_ms()):
                self._flush_locked()
            return self._flushed_offset

    def maybe_flush(self) -> None:
        """Flush if ``flush_ms`` has elapsed with unflushed records; for a periodic task."""
        cfg = self.config
        with self._lock:
            if self._closed or not self._unflushed or cfg.flush_ms is None:
                return
            if now_ms() - self._last_flush_ms >= cfg.flush_ms:
                self._flush_locked()

    def _flush_locked(self) -> None:
        self._segments[-1].flush()
        self._unflushed = 0
        self._last_flush_ms = now_ms()
        self._flushed_offset = self.next_offset

    # ---- reading -------------------------------------------------------------------------

    def _segment_for(self, offset: int) -> tuple[list[Segment], int]:
        segs, bases = self._view
        i = bisect_right(bases, offset) - 1
        return segs, i

    def _check_offset(self, offset: int) -> None:
        if not isinstance(offset, int) or isinstance(offset, bool):
            raise InvalidOffsetError(f"offset must be an integer, got {offset!r}")
        if offset < 0:
            raise InvalidOffsetError(f"offset must not be negative, got {offset}")

    def read(self, offset: int) -> Record:
        """The record at ``offset``; OffsetOutOfRangeError outside the log's bounds."""
        recs = self.read_range(offset, max_records=1)
        if not recs:
            raise OffsetOutOfRangeError(
                f"offset {offset} is not in the log [{self.log_start_offset}, {self.next_offset})",
                log_start=self.log_start_offset,
                next_offset=self.next_offset,
            )
        return recs[0]

    def read_range(
        self, offset: int, max_records: int = 500, max_bytes: int = 1 << 20
    ) -> list[Record]:
        """Records from ``offset`` on, at most ``max_records`` and about ``max_bytes``.

        Returns at least one record when ``offset`` is below the next offset (even one
        larger than ``max_bytes``), and ``[]`` at exactly the next offset.
        """
        self._check_offset(offset)
        for limit in (max_records, max_bytes):
            if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
                raise InvalidArgumentError(
                    f"max_records and max_bytes must be integers >= 1, got {limit!r}"
                )
        self._check_open()
        segs, i = self._segment_for(offset)
        start, nxt = segs[0].base_offset, segs[-1].next_offset
        if offset < start or offset > nxt or i < 0:
            raise OffsetOutOfRangeError(
                f"offset {offset} is not in the log [{start}, {nxt})",
                log_start=start,
                next_offset=nxt,
            )
        out: list[Record] = []
        budget = max_bytes
        while i < len(segs) and len(out) < max_records and budget > 0:
            try:
                recs, used = segs[i].read(offset, max_records - len(out), budget)
            except OffsetOutOfRangeError:  # the segment was deleted under this reader
                raise OffsetOutOfRangeError(
                    f"offset {offset} was removed from the log [{self.log_start_offset}, "
                    f"{self.next_offset})",
                    log_start=self.log_start_offset,
                    next_offset=self.next_offset,
                ) from None
            if recs and out and used > budget:
                break  # past the first record, never exceed max_bytes
            out.extend(recs)
            budget -= used
            if recs:
                offset = recs[-1].offset + 1
            if offset < segs[i].next_offset:
                break  # a limit was reached inside this segment
            i += 1
        return out

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """First offset whose record timestamp is >= ``timestamp``; None if there is none."""
        if not isinstance(timestamp, int) or isinstance(timestamp, bool):
            raise InvalidArgumentError(f"timestamp must be an integer (ms), got {timestamp!r}")
        self._check_open()
        for seg in list(self._segments):
            if seg.max_timestamp >= timestamp:
                try:
                    found = seg.offset_for_timestamp(timestamp)
                except OffsetOutOfRangeError:
                    continue  # deleted meanwhile (retention): look in the later segments
                if found is not None:
                    return found
        return None

    def segment_for(self, offset: int) -> Segment:
        """The segment holding ``offset`` (for raw reads by the service and shipper)."""
        self._check_offset(offset)
        segs, i = self._segment_for(offset)
        if i < 0 or offset >= segs[-1].next_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is not in the log [{segs[0].base_offset}, {segs[-1].next_offset})",
                log_start=segs[0].base_offset,
                next_offset=segs[-1].next_offset,
            )
        return segs[i]

    # ---- repair ----------------------------------------------------------------------------

    def rewrite_sealed(self, base_offset: int, data: bytes | memoryview) -> int:
        """Put the good bytes ``data`` back into the sealed segment that begins at
        ``base_offset`` (the scrubber's repair of a damaged segment from another copy of
        the same batches): ``data`` must be exactly as long as the segment; only the bytes
        that differ are written, then fsynced. Its indexes stay as they are (the batches
        lie where they lay). Returns the bytes written (0: nothing differed).
        InvalidArgumentError when no sealed segment begins there (retention or a
        truncation took it meanwhile) or the lengths differ. Under the log's lock, so a
        truncation or retention cannot interleave."""
        with self._lock:
            self._check_writable()
            seg = next((s for s in self._segments[:-1] if s.base_offset == base_offset), None)
            if seg is None:
                raise InvalidArgumentError(f"no sealed segment begins at offset {base_offset}")
            info = seg.info()
            if info.size != len(data):
                raise InvalidArgumentError(
                    f"segment {info.store_path.name} is {info.size} bytes, the good copy "
                    f"{len(data)}"
                )
            view = memoryview(data)
            written = 0
            fd = os.open(info.store_path, os.O_RDWR)
            try:
                step = 1 << 20
                for pos in range(0, info.size, step):
                    good = view[pos : pos + step]
                    if os.pread(fd, len(good), pos) != good:
                        written += os.pwrite(fd, good, pos)
                if written:
                    os.fsync(fd)
            finally:
                os.close(fd)
            return written

    # ---- truncation and retention --------------------------------------------------------

    def truncate(self, offset: int) -> None:
        """Remove every record at and after ``offset``, across segments.

        ``offset == next_offset`` is a no-op; ``offset == log_start_offset`` empties the
        log (its next offset stays ``offset``). Offsets outside
        ``[log_start_offset, next_offset]`` raise OffsetOutOfRangeError.
        """
        self._check_offset(offset)
        with self._lock:
            self._check_writable()
            start, nxt = self.log_start_offset, self.next_offset
            if offset < start or offset > nxt:
                raise OffsetOutOfRangeError(
                    f"cannot truncate to {offset}: the log holds [{start}, {nxt})",
                    log_start=start,
                    next_offset=nxt,
                )
            if offset == nxt:
                return
            segs = self._segments
            i = bisect_right(self._bases, offset) - 1
            keep = segs[: i + 1]
            for seg in reversed(segs[i + 1 :]):
                seg.delete_files()
            target = keep[-1]
            target.truncate_to(offset)
            self._set_segments(keep)
            fsync_dir(self.directory)
            self._unflushed = 0
            self._flushed_offset = min(self._flushed_offset, offset)

    def reset(self, offset: int) -> None:
        """Delete every segment and restart the log empty at ``offset``.

        For the tiered log: truncation below the local start, or a local disk that fell
        behind the remote tier.
        """
        self._check_offset(offset)
        with self._lock:
            self._check_writable()
            for seg in self._segments:
                seg.delete_files()
            new = Segment.create(
                self.directory,
                offset,
                index_interval_bytes=self.config.index_interval_bytes,
                cache=self._cache,
            )
            self._set_segments([new])
            self._unflushed = 0
            self._flushed_offset = offset

    def delete_segments_before(self, base_offset: int) -> list[SegmentInfo]:
        """Delete whole sealed segments that end at or before ``base_offset``.

        Never deletes the active segment. Moves the log start offset. Returns what was
        deleted. The segments leave the log under its lock (no read or write finds them
        from then on); their files are closed and unlinked after it is released, so
        appends and fetches do not wait on the file system while a backlog is deleted
        (Kafka deletes a segment's files asynchronously too). A crash before the unlinks
        leaves files below the log start, deleted again after the next open.
        """
        with self._lock:
            self._check_writable()
            segs = self._segments
            doomed = [s for s in segs[:-1] if s.next_offset <= base_offset]
            if not doomed:
                return []
            self._set_segments(segs[len(doomed) :])
            infos = [s.info() for s in doomed]
        for s in doomed:
            s.delete_files()
        fsync_dir(self.directory)
        return infos

    def retention_candidates(
        self,
        retention_ms: int | None,
        retention_bytes: int | None,
        now: int | None = None,
        *,
        up_to: int | None = None,
        limit: int | None = None,
    ) -> list[SegmentInfo]:
        """Oldest sealed segments that time or size retention would remove, in order.

        Time: every record in the segment is older than ``retention_ms``. Bytes: while the
        log would still be at least ``retention_bytes`` without the oldest segment.
        ``up_to``: only segments ending at or below this offset (those shipped, for a
        tiered log; the walk stops at the first that does not, however many follow).
        ``limit``: at most this many (the oldest), the walk stopping there.
        """
        now = now_ms() if now is None else now
        segs = self._segments[:-1]
        total = sum(s.size for s in self._segments)
        out: list[SegmentInfo] = []
        for s in segs:
            if (up_to is not None and s.next_offset > up_to) or len(out) == limit:
                break
            by_time = retention_ms is not None and s.max_timestamp < now - retention_ms
            by_size = retention_bytes is not None and total - s.size >= retention_bytes
            if not (by_time or by_size):
                break
            out.append(s.info())
            total -= s.size
        return out

    def enforce_retention(self, now: int | None = None) -> list[SegmentInfo]:
        """Apply the config's ``retention_ms`` / ``retention_bytes``; returns deleted segments."""
        cands = self.retention_candidates(
            self.config.retention_ms, self.config.retention_bytes, now
        )
        if not cands:
            return []
        return self.delete_segments_before(cands[-1].next_offset)

    # ---- closing -------------------------------------------------------------------------

    def close(self) -> None:
        """Flush and release every file. Idempotent; later calls raise LogClosedError."""
        with self._lock:
            if self._closed:
                return
            self._flush_locked()
            for s in self._segments:
                s.close()
            self._closed = True
            if self._lock_fd >= 0:
                os.close(self._lock_fd)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> Log:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Log({str(self.directory)!r}, [{self.log_start_offset}, {self.next_offset}))"
