"""Store files read as they are on disk: the record batches of a ``.log`` file, checked.

:func:`iter_store` walks the record batches of a store file's bytes (layout in
:mod:`tiered_log.format.records`: a 28-byte header ``u64 base_offset, u32 size,
u64 checksum, u16 magic, u16 attributes, u32 count``, then the record columns and data),
yielding a :class:`BatchEntry` per batch and, where the bytes stop parsing as batches,
one final :class:`StoreDamage`. :func:`scan_store` walks a store file and summarizes it
as a :class:`StoreScan`: checksums, the offset sequence, and the per-batch and per-record
columns the index checks (:mod:`.index_check`) compare index entries against.

Read-only (``Path.read_bytes``); pure functions over files, safe from any thread.
"""

from __future__ import annotations

import struct
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CorruptRecordError
from ..format.records import (
    HEADER,
    HEADER_SIZE,
    RECORD_OVERHEAD,
    Record,
    batch_table,
    batch_timestamps,
    decode_records,
)


@dataclass(frozen=True, slots=True)
class BatchEntry:
    """One record batch of a store file as found on disk (header fields as stored).

    ``error`` is None when the batch verifies (checksum, magic, lengths, header blocks),
    else why not; the fields of a batch that does not verify are what its bytes say and
    may be garbage. ``timestamps`` is the batch's timestamp column (one per record, the
    record with offset ``base_offset + i`` at ``i``), read even from a batch that does not
    verify as long as its header's ``count`` fits its ``size`` (else empty);
    ``first_timestamp`` / ``max_timestamp`` come from it (-1 when it is empty).
    ``records`` holds the decoded records only when asked for (``with_data``) and the
    batch verifies.
    """

    base_offset: int
    count: int
    position: int
    size: int
    first_timestamp: int
    max_timestamp: int
    checksum: int
    error: str | None = None
    timestamps: tuple[int, ...] = ()
    records: tuple[Record, ...] = ()

    @property
    def valid(self) -> bool:
        return self.error is None

    @property
    def last_offset(self) -> int:
        """The offset of the batch's last record (as its header says)."""
        return self.base_offset + self.count - 1

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.count


@dataclass(frozen=True, slots=True)
class StoreDamage:
    """Where the bytes of a store file stop being batches: from ``position`` to ``file_size``."""

    position: int
    file_size: int
    reason: str

    @property
    def unreadable_bytes(self) -> int:
        return self.file_size - self.position


_UNDECODABLE = (struct.error, ValueError, IndexError, OverflowError)
"""What a damaged batch might raise besides CorruptRecordError (a dump must never crash)."""


def _check_batch(
    data: bytes, pos: int, bend: int, *, with_data: bool = False
) -> tuple[str | None, tuple[Record, ...]]:
    """``(why the complete batch data[pos:bend] fails to verify or None, its records)``;
    the records only when it verifies and ``with_data`` (else ``()``)."""
    if not with_data:  # verify without building records where the batch allows it
        base = HEADER.unpack_from(data, pos)[0]
        try:
            infos, used = batch_table(memoryview(data)[pos:bend], base)
        except _UNDECODABLE as exc:
            return f"undecodable batch: {exc}", ()
        if infos and used == bend - pos:
            return None, ()
    try:  # (without data, batch_table only stops: decode it again for the reason)
        recs, after, _ = decode_records(data, pos, bend)
    except CorruptRecordError as exc:
        return str(exc), ()
    except _UNDECODABLE as exc:
        return f"undecodable batch: {exc}", ()
    if not recs or after != bend:
        return "batch lengths do not add up", ()
    if not with_data:
        return "the batch does not verify", ()
    return None, tuple(recs)


def _batch_extent(data: bytes, pos: int) -> tuple[int, str | None]:
    """``(end, None)`` of the batch at ``pos`` if its header fits and its size is
    plausible, else ``(pos, reason)``."""
    end = len(data)
    left = end - pos
    if not any(data[pos : pos + 4096]) and data.count(0, pos) == left:
        return (
            pos,
            f"the last {left} bytes are all zeros (a torn write, or space the file system preallocated)",
        )
    if left < HEADER_SIZE:
        return pos, f"the last {left} bytes are too short for a batch header (torn write?)"
    base, size = HEADER.unpack_from(data, pos)[:2]
    if size < HEADER_SIZE + RECORD_OVERHEAD:
        return pos, f"batch header claims base offset {base} and an impossible size {size}"
    bend = pos + size
    if bend > end:
        return pos, (
            f"batch header claims base offset {base} and {size} bytes but only "
            f"{left} remain (torn write or damaged size)"
        )
    return bend, None


def _timestamp_column(data: bytes, pos: int, size: int, count: int) -> tuple[int, ...]:
    """The ``i64[count]`` timestamps after the header of the batch at ``pos``, or ``()``
    when ``count`` does not fit the batch's ``size`` (a damaged header)."""
    if count < 1 or HEADER_SIZE + RECORD_OVERHEAD * count > size:
        return ()
    return tuple(batch_timestamps(data, pos, count))


def iter_store(data: bytes, *, with_data: bool = False) -> Iterator[BatchEntry | StoreDamage]:
    """Every batch of a store file's bytes, in order; then a StoreDamage if some bytes are left.

    A batch that fails its checksum is yielded (``error`` set) and the walk goes on when
    the next batch verifies (or the file ends right after it): a damaged batch inside an
    intact sequence. Otherwise the damage is taken to start at that batch and the walk
    ends with a StoreDamage naming its byte position. ``with_data`` fills each verified
    batch's ``records``.
    """
    pos = 0
    end = len(data)
    while pos < end:
        bend, why = _batch_extent(data, pos)
        if why is not None:
            yield StoreDamage(pos, end, why)
            return
        error, records = _check_batch(data, pos, bend, with_data=with_data)
        if error is not None and bend < end:
            nend, nwhy = _batch_extent(data, bend)
            if nwhy is not None or _check_batch(data, bend, nend)[0] is not None:
                yield StoreDamage(pos, end, f"{error}; the bytes after it do not parse as batches")
                return
        base, size, cs, _magic, _attrs, count = HEADER.unpack_from(data, pos)
        ts = _timestamp_column(data, pos, size, count)
        first, mx = (ts[0], max(ts)) if ts else (-1, -1)
        yield BatchEntry(base, count, pos, size, first, mx, cs, error, ts, records)
        pos = bend


@dataclass(slots=True)
class StoreScan:
    """What the index checks need to know about one store file.

    Per batch, in file order: ``positions`` (its first byte) and ``base_offsets`` (the
    base offset expected in sequence when a batch fails its checksum, since its header
    cannot be trusted). Per record: ``offsets`` and ``timestamps`` (a batch that fails its
    checksum contributes the records its header claims, with the timestamps its bytes
    hold, when that count fits its size; else none). ``end`` is where readable batches stop.
    """

    path: Path
    base_offset: int
    file_size: int
    positions: array[int] = field(default_factory=lambda: array("q"))
    base_offsets: array[int] = field(default_factory=lambda: array("q"))
    offsets: array[int] = field(default_factory=lambda: array("q"))
    timestamps: array[int] = field(default_factory=lambda: array("q"))
    bad_batches: int = 0
    end: int = 0
    damage: StoreDamage | None = None
    next_offset: int = 0
    """One past the offset of the last record (``base_offset`` if there is none)."""
    _rows: dict[int, int] | None = None

    @property
    def records(self) -> int:
        return len(self.offsets)

    @property
    def batches(self) -> int:
        return len(self.positions)

    @property
    def max_timestamp(self) -> int:
        return max(self.timestamps) if self.timestamps else -1

    def batch_at(self, position: int) -> int | None:
        """Batch row of the batch starting at byte ``position``, or None if none starts there."""
        i = bisect_left(self.positions, position)
        if i < len(self.positions) and self.positions[i] == position:
            return i
        return None

    def row_of(self, offset: int) -> int | None:
        """Record row of the record with ``offset``, or None."""
        i = offset - self.base_offset
        if 0 <= i < len(self.offsets) and self.offsets[i] == offset:
            return i
        if self._rows is None:  # offsets out of sequence: map them once
            self._rows = {}
            for j, o in enumerate(self.offsets):
                self._rows.setdefault(o, j)
        return self._rows.get(offset)


ProblemSink = Callable[[str, str, int | None, int | None], None]
"""``(kind, message, position, offset)`` reported while scanning one file."""


def scan_store(path: Path, base_offset: int, report: ProblemSink | None = None) -> StoreScan:
    """Walk a store file, checking checksums and the offset sequence from ``base_offset``.

    Problems go to ``report`` (kinds ``checksum``, ``base_offset``, ``offset_sequence``,
    ``store_damaged``); the returned StoreScan feeds the index checks. After a batch that
    fails its checksum the sequence goes on from the count its header claims, or, when
    that count does not fit its size, from the next batch's base offset. OSError propagates.
    """
    data = path.read_bytes()
    scan = StoreScan(path, base_offset, len(data))
    expect = base_offset
    resync = False  # the records of the last (bad) batch are unknown: follow the next one
    sink: ProblemSink = report or (lambda *_: None)
    for item in iter_store(data):
        if isinstance(item, StoreDamage):
            scan.damage = item
            sink(
                "store_damaged",
                f"damage starts at byte {item.position} of {item.file_size} "
                f"({item.unreadable_bytes} bytes not readable): {item.reason}",
                item.position,
                expect,
            )
            break
        base = item.base_offset
        n = item.count
        if item.error is not None:
            scan.bad_batches += 1
            sink(
                "checksum",
                f"batch at byte {item.position} (offset {expect}) fails its check: {item.error}",
                item.position,
                expect,
            )
            base = expect
            n = len(item.timestamps)
            resync = not n
        else:
            if base != expect and not (resync and base > expect):
                if not scan.positions:
                    sink(
                        "base_offset",
                        f"the first batch has base offset {base}, but the file "
                        f"name says the segment starts at {base_offset}",
                        item.position,
                        base,
                    )
                else:
                    sink(
                        "offset_sequence",
                        f"batch at byte {item.position} has base offset {base}, expected {expect}",
                        item.position,
                        base,
                    )
            resync = False
        scan.positions.append(item.position)
        scan.base_offsets.append(base)
        scan.offsets.extend(range(base, base + n))
        scan.timestamps.extend(item.timestamps[:n])
        scan.end = item.position + item.size
        expect = base + n
    scan.next_offset = expect
    return scan


__all__ = ["BatchEntry", "ProblemSink", "StoreDamage", "StoreScan", "iter_store", "scan_store"]
