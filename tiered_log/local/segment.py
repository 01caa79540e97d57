"""One local segment: a store file of record batches plus its sparse offset and time indexes.

Files (names from :mod:`tiered_log.format.naming`): ``<base>.log`` holds batches in offset
order (layout in :mod:`tiered_log.format.batch`); ``<base>.index`` and
``<base>.timeindex`` hold sparse index entries (layout in :mod:`tiered_log.format.index`),
which point at batches: an offset inside a batch is found from its batch's entry.

Invariants:
- the store holds Kafka record batches (v2); one whose first batch is in tiered_log's
  former format (:mod:`tiered_log.format.legacy`) is refused when the segment opens
  (:func:`refuse_legacy`: ``tiered-log migrate`` rewrites it), never read or cut;
- batches in the store hold consecutive offsets ``base_offset .. next_offset-1``;
- ``size`` is the byte length of complete, verified batches; readers never look past it;
- an *active* segment keeps its indexes in memory only (rebuilt from the store after a
  crash); a *sealed* segment is read-only, its store fsynced and its index files written
  whole (tmp, fsync, rename) at seal time.

Building the indexes from batches and the cache of sealed segments' indexes are in
:mod:`tiered_log.local.segment_index`; fsync and atomic-write helpers in
:mod:`tiered_log.local.files` (``fsync_dir``, ``write_atomic`` and ``IndexCache`` are
re-exported here for their importers).

A segment opened ``read_only`` (:meth:`Segment.open_active` / :meth:`Segment.open_sealed`
with ``read_only=True``, for a read-only :class:`~tiered_log.local.log.Log` beside the
process that owns the directory) never writes, truncates, renames or deletes a file: a
torn tail is left where it is and only the verified batches are read, a damaged or
missing index is rebuilt in memory only, and a store deleted under it (the owner's
retention) reads as :class:`~tiered_log.errors.OffsetOutOfRangeError`.

Thread-safety: one writer at a time (the owning :class:`~tiered_log.local.log.Log` holds
its lock around append, seal, truncate); any number of concurrent readers, which use
``os.pread`` on their own descriptor and take no lock, so reads never block appends.
Readers that map the store to check it (:class:`~tiered_log.local.ranges.MappedReader`)
hold :attr:`Segment.cut_guard`; a truncation waits for them before the store shrinks,
and they wait for a truncation under way.
"""

from __future__ import annotations

import itertools
import logging
import os
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import (
    CorruptIndexError,
    CorruptRangeError,
    CorruptRecordError,
    OffsetOutOfRangeError,
    TieredLogError,
)
from ..format import naming
from ..format.batch import (
    HEADER_SIZE,
    MAX_BODY_BYTES,
    BatchInfo,
    LegacyFormatError,
    Record,
    batch_header,
    is_legacy_batch,
)
from ..format.batch_decode import decode_records, scan_batches
from ..format.batch_encode import EncodedBatch, rebatch
from ..format.index import (
    OFFSET_ENTRY,
    OFFSET_ENTRY_SIZE,
    TIME_ENTRY,
    TIME_ENTRY_SIZE,
    SegmentIndex,
)
from .files import ReadFd, fsync_dir, write_atomic
from .ranges import CutGuard
from .segment_index import IndexCache, build_index, index_batches

log = logging.getLogger(__name__)

_CUT_POSITION = struct.Struct("<Q")
_UIDS = itertools.count()


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """A snapshot of one segment's extent, for listing, shipping and retention."""

    base_offset: int
    next_offset: int
    size: int
    max_timestamp: int
    sealed: bool
    store_path: Path

    @property
    def last_offset(self) -> int:
        return self.next_offset - 1

    @property
    def record_count(self) -> int:
        return self.next_offset - self.base_offset


LEGACY_HEAD = 22
"""Bytes of a store's start that tell the former batch format (its magic at 20-21)."""


def refuse_legacy(store_path: Path, head: bytes | memoryview) -> None:
    """Raise LegacyFormatError, in one line saying what to do, when ``head`` (the first
    bytes of the store ``store_path``, or of a ``.cut`` file's batch) begins a batch in
    tiered_log's former format: such a store is never read as Kafka batches nor cut as
    a torn tail; ``tiered-log migrate`` rewrites it. The directory to migrate named is
    the service's data directory when the log is one of its partitions."""
    if not is_legacy_batch(head):
        return
    log_dir = store_path.parent
    topics = log_dir.parent.parent
    target = topics.parent if topics.name == naming.TOPICS_DIR else log_dir
    raise LegacyFormatError(
        f"{store_path} holds tiered_log's old batch format ('TB' columnar batches, "
        "before the Kafka v2 record batch), which this version does not read: stop the "
        f"service and run `tiered-log migrate {target}` to rewrite it"
    )


class Segment:
    """One segment of a log; see the module docstring for files, invariants and threading."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        cache: IndexCache,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self._cache = cache
        self._uid = next(_UIDS)
        self.store_path = naming.segment_path(directory, base_offset, naming.LOG_SUFFIX)
        self.index_path = naming.segment_path(directory, base_offset, naming.INDEX_SUFFIX)
        self.timeindex_path = naming.segment_path(directory, base_offset, naming.TIMEINDEX_SUFFIX)
        self.next_offset = base_offset
        self.size = 0
        self.max_timestamp = -1
        self.sealed = False
        self.deleted = False  # set by delete_files; readers holding the segment then fail
        self.created_ms = 0  # wall clock of the first append (0 = empty), for segment_ms
        self.index_rebuilds = 0  # times rebuild_index ran (reported by the log's recovery)
        self.read_only = False  # opened beside the directory's owner: never writes a file
        self._damage_logged = False  # a read met damage and logged it
        self.cut_guard = CutGuard()  # a truncation waits for readers that map the store
        # Active-segment state (None once sealed).
        self._index: SegmentIndex | None = None
        self._wfd: int | None = None
        self._rfd: ReadFd | None = None
        self._since_index = 0
        self._max_ts_rel = 0

    # ---- opening -------------------------------------------------------------------

    @classmethod
    def create(
        cls, directory: Path, base_offset: int, *, index_interval_bytes: int, cache: IndexCache
    ) -> Segment:
        """A new, empty, active segment (creates its store file)."""
        seg = cls(directory, base_offset, index_interval_bytes=index_interval_bytes, cache=cache)
        seg._open_active(truncate=True)
        fsync_dir(directory)
        return seg

    @classmethod
    def open_active(
        cls,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        cache: IndexCache,
        read_only: bool = False,
    ) -> tuple[Segment, int]:
        """Reopen the last segment as the active one, recovering it from its store.

        Scans every batch verifying each (framing, CRC-32C) and the offset sequence,
        truncates a torn or damaged tail, and rebuilds the in-memory indexes. Returns the
        segment and the number of bytes cut from the tail. A store in the former batch
        format is refused (:func:`refuse_legacy`), never cut. ``read_only``: nothing is
        written (an interrupted cut is not finished, the tail is not cut, no write
        descriptor): the segment holds the verified batches the store had when it was
        read, and the count returned is of the bytes past them (an append under way, or
        damage).
        """
        seg = cls(directory, base_offset, index_interval_bytes=index_interval_bytes, cache=cache)
        seg.read_only = read_only
        seg._refuse_legacy()
        if not read_only and seg._cut_path.exists():  # an interrupted truncation: finish it
            blob = seg._cut_path.read_bytes()
            refuse_legacy(seg.store_path, blob[_CUT_POSITION.size :])
            seg._apply_cut(_CUT_POSITION.unpack_from(blob)[0], blob[_CUT_POSITION.size :])
        rfd = ReadFd(seg.store_path) if read_only else None  # kept readable if deleted
        data = seg.store_path.read_bytes()
        refuse_legacy(seg.store_path, data)  # never cut as a torn tail
        idx, end, max_ts, max_rel, nxt = build_index(data, base_offset, index_interval_bytes)
        cut = len(data) - end
        if read_only:
            seg._index, seg._rfd = idx, rfd
        elif cut:
            os.truncate(seg.store_path, end)
        if not read_only:
            for p in (seg.index_path, seg.timeindex_path):
                p.unlink(missing_ok=True)
        seg._index = idx
        seg.size = end
        seg.next_offset = nxt
        seg.max_timestamp = max_ts
        seg._max_ts_rel = max_rel
        seg._since_index = end - (idx.positions[-1] if len(idx.positions) else 0)
        seg.created_ms = int(time.time() * 1000) if end else 0
        if not read_only:
            seg._open_active(truncate=False)
        return seg, cut

    @classmethod
    def open_sealed(
        cls,
        directory: Path,
        base_offset: int,
        next_offset: int,
        *,
        index_interval_bytes: int,
        cache: IndexCache,
        read_only: bool = False,
    ) -> Segment:
        """Open a sealed segment lazily: its indexes load on first read via the cache.

        Reads only the store size and the first and last time-index entries (the last
        holds the segment's max timestamp, which retention and timestamp lookups trust
        before the index is loaded, so both entries are sanity-checked); a missing or
        damaged index is rebuilt from the store right away (``read_only``: in memory
        only). FileNotFoundError when the store is gone (deleted meanwhile).
        """
        seg = cls(directory, base_offset, index_interval_bytes=index_interval_bytes, cache=cache)
        seg.read_only = read_only
        seg.sealed = True
        seg.next_offset = next_offset
        seg.size = seg.store_path.stat().st_size
        seg._refuse_legacy()
        try:
            tsize = seg.timeindex_path.stat().st_size
            isize = seg.index_path.stat().st_size
            if tsize % TIME_ENTRY_SIZE or isize % 8 or (seg.size and (tsize == 0 or isize == 0)):
                raise CorruptIndexError("index files of the wrong size")
            if tsize:
                with open(seg.timeindex_path, "rb") as f:
                    first_ts, first_rel = TIME_ENTRY.unpack(f.read(TIME_ENTRY_SIZE))
                    f.seek(tsize - TIME_ENTRY_SIZE)
                    max_ts, max_rel = TIME_ENTRY.unpack(f.read(TIME_ENTRY_SIZE))
                # The first entry is the first record's; entries strictly increase; the
                # last one names a record of the segment; timestamps are never negative.
                if (
                    first_rel != 0
                    or first_ts < 0
                    or max_rel >= next_offset - base_offset
                    or (tsize > TIME_ENTRY_SIZE and (max_ts <= first_ts or max_rel == 0))
                ):
                    raise CorruptIndexError("time index entries are implausible")
                seg.max_timestamp = max_ts
        except (OSError, CorruptIndexError):
            seg.rebuild_index()
        seg._check_ends_at_next()
        return seg

    def _refuse_legacy(self) -> None:
        """:func:`refuse_legacy` on the store's first bytes (FileNotFoundError when the
        store is gone)."""
        with open(self.store_path, "rb") as f:
            refuse_legacy(self.store_path, f.read(LEGACY_HEAD))

    def _check_ends_at_next(self) -> None:
        """Raise CorruptRecordError if this sealed segment's store is whole and consistent
        but its records end before ``next_offset`` (the next segment's base): records are
        missing between them, e.g. a segment file was deleted by hand.

        Walks only the batch headers after the last offset-index entry (about one index
        interval of bytes, or one batch). A header that does not follow (damage inside the store) is
        left for reads to report, as before: this check only names a gap it is sure of.
        """
        last = -1
        try:
            isize = self.index_path.stat().st_size
            with open(self.index_path, "rb") as f:
                if isize >= OFFSET_ENTRY_SIZE:
                    f.seek(isize - OFFSET_ENTRY_SIZE)
                    rel, pos = OFFSET_ENTRY.unpack(f.read(OFFSET_ENTRY_SIZE))
                else:
                    rel, pos = 0, 0
            if pos > self.size or (self.size and pos == self.size):
                return  # a damaged index (found and rebuilt when it is loaded)
            with open(self.store_path, "rb") as f:
                f.seek(pos)
                buf = f.read(self.size - pos)
        except OSError:
            return
        expect, at = self.base_offset + rel, 0
        while at + HEADER_SIZE <= len(buf):
            off, bsize, count = batch_header(buf, at)
            if off != expect or count < 1 or bsize < HEADER_SIZE or at + bsize > len(buf):
                return  # damaged, not a gap
            last, expect, at = off + count - 1, off + count, at + bsize
        if at != len(buf) or (last < 0 and self.size):
            return
        if expect < self.next_offset:
            raise CorruptRecordError(
                f"offsets {expect}..{self.next_offset - 1} are missing from {self.directory}: "
                f"segment {self.store_path.name} ends at offset {expect - 1} but the next "
                f"segment starts at {self.next_offset} (was a segment file deleted?)"
            )

    def _open_active(self, *, truncate: bool) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if truncate else 0)
        self._wfd = os.open(self.store_path, flags, 0o644)
        if self._index is None:
            self._index = SegmentIndex()
        self._rfd = ReadFd(self.store_path)

    # ---- index access --------------------------------------------------------------

    def _reader(self) -> tuple[SegmentIndex, ReadFd]:
        if not self.sealed:
            idx, fd = self._index, self._rfd
            if idx is not None and fd is not None:
                return idx, fd
        entry = self._cache.get(self._uid)
        if entry is not None:
            return entry
        idx = self._load_index()
        entry = (idx, ReadFd(self.store_path))
        self._cache.put(self._uid, entry)
        return entry

    def _load_index(self) -> SegmentIndex:
        try:
            return SegmentIndex.decode(
                self.index_path.read_bytes(), self.timeindex_path.read_bytes(), self.size
            )
        except (OSError, CorruptIndexError):
            return self.rebuild_index()

    def rebuild_index(self) -> SegmentIndex:
        """Rebuild a sealed segment's index files from its store (after damage); a
        read-only segment keeps the rebuilt index in its cache entry and writes nothing."""
        data = self.store_path.read_bytes()
        idx, end, max_ts, max_rel, nxt = build_index(
            data, self.base_offset, self.index_interval_bytes
        )
        if end != len(data) or nxt != self.next_offset:
            raise CorruptRecordError(
                f"sealed segment {self.store_path.name} is damaged at byte {end} "
                f"(store has {len(data)} bytes)"
            )
        if end and (not len(idx.time_max) or idx.time_max[-1] < max_ts):
            idx.add_time(max_ts, max_rel)
        self.max_timestamp = max_ts
        self.index_rebuilds += 1
        if self.read_only:
            self._cache.put(self._uid, (idx, ReadFd(self.store_path)))
            return idx
        write_atomic(self.index_path, idx.encode_offsets())
        write_atomic(self.timeindex_path, idx.encode_times())
        self._cache.drop(self._uid)
        return idx

    def index_entries(self) -> SegmentIndex:
        """The segment's indexes (loading them through the cache if sealed)."""
        return self._reader()[0]

    # ---- writing (caller holds the log's lock) ---------------------------------------

    def append(self, batch: EncodedBatch) -> None:
        """Write batches in one write and index them. Active segments only."""
        assert self._wfd is not None and self._index is not None, "segment is sealed"
        data = batch.data
        view = memoryview(data)
        written = 0
        while written < len(data):
            written += os.write(self._wfd, view[written:])
        start = self.size
        self._since_index, self.max_timestamp, self._max_ts_rel = index_batches(
            self._index,
            batch.batches,
            start,
            self.base_offset,
            self.index_interval_bytes,
            self._since_index,
            self.max_timestamp,
            self._max_ts_rel,
        )
        if self.created_ms == 0:
            self.created_ms = int(time.time() * 1000)
        self.size = start + len(data)
        self.next_offset = batch.next_offset

    def flush(self) -> None:
        """fsync the store file (active segments; sealed ones are already durable)."""
        if self._wfd is not None:
            os.fsync(self._wfd)

    def seal(self) -> None:
        """Make the segment read-only: fsync the store, write its index files whole."""
        if self.sealed:
            return
        assert self._index is not None and self._wfd is not None
        os.fsync(self._wfd)
        os.close(self._wfd)
        self._wfd = None
        idx = self._index
        if self.size and (not idx.time_max or idx.time_max[-1] < self.max_timestamp):
            idx.add_time(self.max_timestamp, self._max_ts_rel)
        write_atomic(self.index_path, idx.encode_offsets())
        write_atomic(self.timeindex_path, idx.encode_times())
        self.sealed = True
        self._cache.put(self._uid, (idx, self._rfd or ReadFd(self.store_path)))
        self._index = None
        self._rfd = None

    def truncate_to(self, offset: int) -> None:
        """Remove every record at or after ``offset`` (within this segment); reopen active.

        An ``offset`` inside a batch cuts the store at that batch and writes the records
        of it below ``offset`` again as a batch of their own, with the header fields of
        the batch cut (codec, timestamp type, leader epoch, producer). So that a crash
        in between
        loses none of them, the cut is first saved whole in ``<base>.cut`` (position u64
        little-endian, then the new batch; written atomically): :meth:`open_active`
        finishes a cut it finds, and it is deleted (durably) once the store holds it.
        """
        if offset >= self.next_offset:
            return
        pos, base = self.position_of(offset) if offset > self.base_offset else (0, offset)
        again = b""
        if base < offset:
            keep = self.read(base, offset - base, 1 << 62)[0]
            like = self.read_bytes(pos, HEADER_SIZE)
            again = rebatch(keep, max_batch_bytes=MAX_BODY_BYTES, like=like)
            write_atomic(self._cut_path, _CUT_POSITION.pack(pos) + again)
        self._cache.drop(self._uid)
        if self._wfd is not None:
            os.close(self._wfd)
            self._wfd = None
        for p in (self.index_path, self.timeindex_path):
            p.unlink(missing_ok=True)
        with self.cut_guard.cutting():  # no reader maps the store, or sees it half cut
            self._apply_cut(pos, again)
            data = self.store_path.read_bytes()
            idx, end, max_ts, max_rel, _ = build_index(
                data, self.base_offset, self.index_interval_bytes
            )
            self._index = idx
            self.sealed = False
            self.size = end
            self.next_offset = offset
            self.max_timestamp = max_ts
            self._max_ts_rel = max_rel
            self._since_index = end - (idx.positions[-1] if len(idx.positions) else 0)
            if end == 0:
                self.created_ms = 0
            self._open_active(truncate=False)  # the store was fsynced by _apply_cut

    @property
    def _cut_path(self) -> Path:
        return naming.segment_path(self.directory, self.base_offset, naming.CUT_SUFFIX)

    def _apply_cut(self, pos: int, again: bytes) -> None:
        """Cut the store at ``pos``, append ``again``, fsync, then drop ``<base>.cut``
        (idempotent: a crash anywhere in it is finished by running it again)."""
        with open(self.store_path, "r+b") as f:
            f.truncate(pos)
            if again:
                f.seek(pos)
                f.write(again)
            f.flush()
            os.fsync(f.fileno())
        if self._cut_path.exists():
            self._cut_path.unlink()
            fsync_dir(self.directory)

    def close(self) -> None:
        """Release descriptors. The segment must not be used afterwards."""
        if self._wfd is not None:
            os.fsync(self._wfd)
            os.close(self._wfd)
            self._wfd = None
        self._rfd = None
        self._cache.drop(self._uid)

    def delete_files(self) -> None:
        """Close and remove all of this segment's files."""
        self.deleted = True
        self.close()
        for p in (self.store_path, self.index_path, self.timeindex_path):
            p.unlink(missing_ok=True)

    # ---- reading (any thread, no lock) -------------------------------------------------

    def info(self) -> SegmentInfo:
        return SegmentInfo(
            self.base_offset,
            self.next_offset,
            self.size,
            self.max_timestamp,
            self.sealed,
            self.store_path,
        )

    def position_of(self, offset: int) -> tuple[int, int]:
        """``(position, base offset)`` of the batch holding ``offset`` in the store (scans
        batch headers from the index floor); ``(size, next_offset)`` past the last one."""
        idx, fd = self._reader()
        rel0, pos = idx.floor_position(offset - self.base_offset)
        end = self.size
        cur = self.base_offset + rel0
        while pos < end:
            hdr = fd.pread(HEADER_SIZE, pos)
            if len(hdr) < HEADER_SIZE:
                break
            off, bsize, count = batch_header(hdr)
            if off != cur or count < 1 or bsize < HEADER_SIZE:
                raise CorruptIndexError(
                    f"index of {self.store_path.name} points at the wrong record"
                )
            if offset < off + count:
                return pos, off
            pos += bsize
            cur += count
        return end, self.next_offset

    def read(self, offset: int, max_records: int, max_bytes: int) -> tuple[list[Record], int]:
        """Verified records from ``offset`` on, within this segment and the given limits.

        Returns the records (at least one if ``offset`` is in the segment) and the bytes
        their frames take. A reader that raced the deletion of the segment (retention,
        truncation) gets OffsetOutOfRangeError. Damage in a sealed segment (a batch that
        fails its CRC-32C or framing on the way to the records asked for) is
        CorruptRangeError, logged once per segment as an ERROR.
        """
        try:
            try:
                return self._read(offset, max_records, max_bytes)
            except CorruptIndexError:
                if not self.sealed:
                    raise
                self.rebuild_index()
                return self._read(offset, max_records, max_bytes)
        except OSError as exc:
            raise self._read_error(exc) from exc
        except CorruptRecordError as exc:
            if not self.sealed or isinstance(exc, CorruptRangeError):
                raise  # an active segment's tail may be a racing truncation's
            if not self._damage_logged:
                self._damage_logged = True
                log.error(
                    "damaged sealed segment %s: %s (reading offset %d)",
                    self.store_path,
                    exc,
                    offset,
                )
            raise CorruptRangeError(
                f"offset {offset}: segment {self.store_path.name} is damaged: {exc}"
            ) from exc

    def _read_error(self, exc: OSError) -> TieredLogError:
        """Our error for an OSError met while reading (the files may have been deleted:
        by this log, or, for a read-only segment, by the directory's owner)."""
        if self.deleted or (self.read_only and isinstance(exc, FileNotFoundError)):
            return OffsetOutOfRangeError(f"segment {self.store_path.name} was deleted")
        return TieredLogError(f"cannot read {self.store_path}: {exc}", retriable=True)

    def _read(self, offset: int, max_records: int, max_bytes: int) -> tuple[list[Record], int]:
        idx, fd = self._reader()
        # next_offset before size: an append sets size first, so every offset below
        # ``last`` has its batch below ``end``. (The other order could see an offset whose
        # batch lies past the size this reader saw, and report it missing.)
        last = self.next_offset
        end = self.size
        if offset >= last:
            return [], 0
        # Batches past ``last`` may already be in the store (a racing append); they are not
        # part of the log until next_offset says so.
        max_records = min(max_records, last - offset)
        count = max(1, last - self.base_offset)
        rel0, pos = idx.floor_position(offset - self.base_offset)
        # Read about what the limits will take (by the segment's mean record size) plus the
        # scan from the index entry; too little costs another pread, too much a copy.
        g = (max_records * end) // count
        want = min(max_bytes, g + g // 8) + 2 * self.index_interval_bytes
        buf = fd.pread(min(end - pos, max(want, 4096)), pos)
        if len(buf) >= HEADER_SIZE and batch_header(buf)[0] != self.base_offset + rel0:
            raise CorruptIndexError(f"index of {self.store_path.name} points at the wrong record")
        out: list[Record] = []
        used_total = 0
        while True:
            recs, bpos, used = decode_records(
                buf,
                0,
                len(buf),
                start_offset=offset,
                max_records=max_records - len(out),
                max_bytes=max_bytes - used_total,
                at_least_one=not out,
            )
            if recs:
                if recs[0].offset != offset or recs[-1].offset != offset + len(recs) - 1:
                    raise CorruptRecordError(
                        f"expected offsets from {offset} in {self.store_path.name}, found "
                        f"{recs[0].offset}..{recs[-1].offset}"
                    )
                out.extend(recs)
                used_total += used
                offset += len(recs)
                if len(out) >= max_records or used_total >= max_bytes:
                    return out, used_total
            if (
                out
                and bpos + HEADER_SIZE <= len(buf)
                and bpos + batch_header(buf, bpos)[1] <= len(buf)
            ):
                return out, used_total  # stopped in a whole batch: the next record does not fit
            pos += bpos
            if pos >= end:
                if out:
                    return out, used_total
                raise CorruptRecordError(f"offset {offset} missing from {self.store_path.name}")
            # The buffer ended inside a batch: read on from it, at least all of it.
            hdr = buf[bpos : bpos + HEADER_SIZE]
            if len(hdr) < HEADER_SIZE:
                hdr = fd.pread(HEADER_SIZE, pos)
            if len(hdr) < HEADER_SIZE:
                raise CorruptRecordError(f"truncated batch in {self.store_path.name} at byte {pos}")
            bsize = batch_header(hdr)[1]
            if bsize < HEADER_SIZE or pos + bsize > end:
                raise CorruptRecordError(f"bad batch size in {self.store_path.name} at byte {pos}")
            g = ((max_records - len(out)) * end) // count
            buf = fd.pread(max(bsize, min(end - pos, max(4096, g + g // 8))), pos)

    def read_bytes(self, position: int, length: int) -> bytes:
        """Raw bytes of the store (any thread)."""
        return self._reader()[1].pread(length, position)

    def read_fd(self) -> ReadFd:
        """The store's read descriptor: held, it stays readable after the segment is
        deleted (any thread)."""
        return self._reader()[1]

    def offset_for_timestamp(self, ts: int) -> int | None:
        """First offset in this segment whose timestamp is >= ``ts``, or None."""
        if self.max_timestamp < ts or self.next_offset == self.base_offset:
            return None
        try:
            idx = self._reader()[0]
        except OSError as exc:
            raise self._read_error(exc) from exc
        rel = idx.time_floor_rel(ts)
        offset = self.base_offset + (rel if rel is not None else 0)
        while offset < self.next_offset:
            recs, _ = self.read(offset, 4096, 4 << 20)
            for r in recs:
                if r.timestamp >= ts:
                    return r.offset
            offset = recs[-1].offset + 1
        return None

    def batches(self) -> Iterator[BatchInfo]:
        """Every verified batch of the store (for verify and dump tools)."""
        data = self.store_path.read_bytes()[: self.size]
        yield from scan_batches(data, self.base_offset)


__all__ = [
    "IndexCache",  # re-exported: importers of local.segment keep working
    "Segment",
    "SegmentInfo",
    "fsync_dir",
    "write_atomic",
]
