"""Reading records for the API: decoded (JSON form) or as raw batches (binary form).

:func:`fetch_frames` serves the binary form. Where the records are on local disk it
never decodes or re-encodes them: it finds the batch holding the first wanted offset
through the segment's index (:meth:`~tiered_log.local.segment.Segment.position_of`),
reads from there with one ``pread`` per segment and walks only the 28-byte batch headers
to honour ``max_records``/``max_bytes``; the bytes go to the client as they were on disk
(disk format == wire format; the client verifies checksums). As in Kafka, a page is made
of whole batches: its first batch may begin before the asked offset (the client skips
those records) and its last may run past ``max_records``. Below the local start the
batches come from the remote tier's chunks the same way, verified there and not decoded
(:meth:`~tiered_log.tiered.TieredLog.read_remote_batches`).

Both functions block on disk: run them in a worker thread. They take no lock and may
race appends (they see a consistent prefix) and truncations (they may stop early or
return records the truncation then removes, as :class:`~tiered_log.local.log.Log` reads).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import CorruptRecordError, DataLossError, OffsetOutOfRangeError
from ..format.records import HEADER_SIZE, Record, batch_header
from ..local.segment import Segment
from .topics import PartitionBounds, PartitionLog, partition_bounds


@dataclass(frozen=True, slots=True)
class FrameBatch:
    """Raw batches holding ``count`` consecutive records from ``first_offset`` (the asked
    offset) to ``next_offset``; the first batch may hold records before ``first_offset``."""

    data: bytes | memoryview
    count: int
    first_offset: int
    next_offset: int
    bounds: PartitionBounds


def _out_of_range(offset: int, b: PartitionBounds) -> OffsetOutOfRangeError:
    return OffsetOutOfRangeError(
        f"offset {offset} is not in the log [{b.log_start_offset}, {b.next_offset})",
        log_start=b.log_start_offset, next_offset=b.next_offset,
    )


def fetch_frames(plog: PartitionLog, offset: int, max_records: int, max_bytes: int) -> FrameBatch:
    """Batches from the one holding ``offset`` on: at least one batch if there is a record
    at ``offset``, then whole batches while fewer than ``max_records`` records from
    ``offset`` and fewer than ``max_bytes`` bytes were taken.

    OffsetOutOfRangeError below the log start or past the next offset; an empty batch at
    exactly the next offset.
    """
    b = partition_bounds(plog)
    if offset < b.log_start_offset or offset > b.next_offset:
        raise _out_of_range(offset, b)
    if offset == b.next_offset:
        return FrameBatch(b"", 0, offset, offset, b)
    if offset < b.local_start_offset:
        try:
            archived, nxt = plog.read_remote_batches(offset, max_records, max_bytes)
        except DataLossError:
            # A truncation raced us: the bounds moved. Out of them now: 416; at or above
            # the local start now: read locally; else the data is truly missing.
            now = partition_bounds(plog)
            if offset < now.log_start_offset or offset > now.next_offset:
                raise _out_of_range(offset, now) from None
            if offset >= now.local_start_offset:
                return fetch_frames(plog, offset, max_records, max_bytes)
            raise
        return FrameBatch(archived, nxt - offset, offset, nxt, partition_bounds(plog))

    parts: list[bytes | memoryview] = []
    total = 0
    cur = offset
    while cur - offset < max_records and total < max_bytes:
        try:
            seg = plog.segment_for(cur)
        except OffsetOutOfRangeError:
            if not parts:
                # Retention or truncation moved the bounds since we looked.
                raise _out_of_range(offset, partition_bounds(plog)) from None
            break
        end = seg.size  # complete batches only: size grows after a write completes
        pos, base = seg.position_of(cur)
        if pos >= end:
            break
        buf, taken, nxt = _take_batches(seg, pos, end, base, offset + max_records - base,
                                        max_bytes - total, not parts)
        if taken == 0:
            break
        parts.append(buf if taken == len(buf) else memoryview(buf)[:taken])  # no copy
        total += taken
        cur = nxt
        if pos + taken < end:
            break  # a limit was reached inside this segment
    data: bytes | memoryview = parts[0] if len(parts) == 1 else b"".join(parts)
    return FrameBatch(data, cur - offset, offset, cur, partition_bounds(plog))


_READ_SLACK = 64 << 10
"""Bytes read beyond the estimate of what a page needs (one read is the aim)."""


def _take_batches(seg: Segment, pos: int, end: int, base: int, records: int, budget: int,
                  first: bool) -> tuple[bytes, int, int]:
    """Read whole batches of ``seg`` from byte ``pos`` (the batch at offset ``base``)
    until they hold ``records`` records from ``base`` or take ``budget`` bytes (the first
    batch always, when ``first``). Returns the bytes read, how many of them are batches
    taken, and the offset after the last one taken.

    Reads about what the page needs: a first guess from the segment's mean record size
    (plus slack), grown when it falls short, never past ``budget`` (except for a first
    batch larger than it, read whole). Only the batch headers are looked at; the client
    verifies the checksums.
    """
    count = seg.next_offset - seg.base_offset
    avg = seg.size // count if count > 0 else HEADER_SIZE
    guess = min(end - pos, max(budget, HEADER_SIZE) + _READ_SLACK, avg * (records + 1) + _READ_SLACK)
    while True:
        buf = seg.read_bytes(pos, guess)
        walked, nxt, short = 0, base, False
        while nxt - base < records and walked < budget:
            if walked + HEADER_SIZE > len(buf):
                short = True
                break
            off, size, n = batch_header(buf, walked)
            if off != nxt or size < HEADER_SIZE or n < 1:
                if walked == 0 and first:
                    raise CorruptRecordError(
                        f"expected offset {base} at byte {pos} of {seg.store_path.name}")
                break  # a racing truncation rewrote the tail: stop here
            if (walked or not first) and walked + size > budget:
                break
            if walked + size > len(buf):
                short = True
                break
            walked += size
            nxt = off + n
        grown = min(end - pos, max(budget, HEADER_SIZE) + _READ_SLACK, guess * 4)
        if short and len(buf) == guess and grown > guess:
            guess = grown  # the read fell short of what the limits allow: read more
            continue
        if walked == 0 and first:
            if len(buf) < HEADER_SIZE:
                raise CorruptRecordError(f"truncated batch at byte {pos} of {seg.store_path.name}")
            # The first batch is larger than the budget: take it whole on its own.
            off, size, n = batch_header(buf)
            whole = seg.read_bytes(pos, size) if pos + size <= end else b""
            if off != base or len(whole) != size:
                raise CorruptRecordError(f"truncated batch at byte {pos} of {seg.store_path.name}")
            return whole, size, off + n
        return buf, walked, nxt


def fetch_records(plog: PartitionLog, offset: int, max_records: int,
                  max_bytes: int) -> tuple[list[Record], PartitionBounds]:
    """Decoded records from ``offset`` on (any tier) and the bounds after reading."""
    recs = plog.read_range(offset, max_records, max_bytes)
    return recs, partition_bounds(plog)


__all__ = ["FrameBatch", "fetch_frames", "fetch_records"]
