"""Reading records for the API: decoded (JSON form) or as raw frames (binary form).

:func:`fetch_frames` serves the binary form. Where the records are on local disk it
never decodes or re-encodes them: it finds the first frame through the segment's index
(:meth:`~tiered_log.local.segment.Segment.position_of`), and the end of a page that
stops inside the segment the same way (so a page is one ``pread`` and no frame walk);
otherwise it reads the byte range with one ``pread`` per segment and walks only the
20-byte frame headers to honour ``max_records``/``max_bytes``; the bytes go to the
client as they were on disk (disk
format == wire format; the client verifies checksums). Records only in the remote tier
come back decoded from the tiered log and are framed again (identical bytes: framing is
deterministic).

Both functions block on disk: run them in a worker thread. They take no lock and may
race appends (they see a consistent prefix) and truncations (they may stop early or
return records the truncation then removes, as :class:`~tiered_log.local.log.Log` reads).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import CorruptIndexError, CorruptRecordError, OffsetOutOfRangeError
from ..format.records import (
    HEADER,
    HEADER_SIZE,
    ProducerRecord,
    Record,
    encode_batch,
    frame_header,
)
from ..local.segment import Segment
from .topics import PartitionBounds, PartitionLog, partition_bounds


@dataclass(frozen=True, slots=True)
class FrameBatch:
    """Raw frames of ``count`` consecutive records starting at ``first_offset``."""

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


def frame_records(records: list[Record]) -> bytes:
    """Frame decoded consecutive records again (the same bytes the log stored)."""
    if not records:
        return b""
    prs = [ProducerRecord(r.value, r.key, r.headers, r.timestamp) for r in records]
    return encode_batch(records[0].offset, prs, 0, 1 << 62).data


def fetch_frames(plog: PartitionLog, offset: int, max_records: int, max_bytes: int) -> FrameBatch:
    """Frames from ``offset`` on: at least one record if any, then within both limits.

    OffsetOutOfRangeError below the log start or past the next offset; an empty batch at
    exactly the next offset.
    """
    b = partition_bounds(plog)
    if offset < b.log_start_offset or offset > b.next_offset:
        raise _out_of_range(offset, b)
    if offset == b.next_offset:
        return FrameBatch(b"", 0, offset, offset, b)
    if offset < b.local_start_offset:
        recs = plog.read_range(offset, max_records, max_bytes)
        nxt = recs[-1].offset + 1 if recs else offset
        return FrameBatch(frame_records(recs), len(recs), offset, nxt, partition_bounds(plog))

    parts: list[bytes | memoryview] = []
    total = 0
    count = 0
    cur = offset
    while count < max_records:
        try:
            seg = plog.segment_for(cur)
        except OffsetOutOfRangeError:
            if count == 0:
                # Retention or truncation moved the bounds since we looked.
                raise _out_of_range(offset, partition_bounds(plog)) from None
            break
        end = seg.size  # complete frames only: size grows after a write completes
        pos = seg.position_of(cur)
        if pos >= end:
            break
        quick = _page_by_index(seg, pos, end, cur, max_records - count, max_bytes - total)
        if quick is not None:  # the page ends inside this segment, found through its index
            parts.append(quick)
            total += len(quick)
            cur += max_records - count
            count = max_records
            break
        want = min(end - pos, max(max_bytes - total, 0))
        buf, walked, n = _walk_segment(seg, pos, want, cur, max_records - count, count == 0)
        if n == 0:
            if count:
                break  # the next frame does not fit in max_bytes
            # The first frame alone is larger than max_bytes: send it whole.
            hdr = seg.read_bytes(pos, HEADER_SIZE)
            if len(hdr) < HEADER_SIZE:
                raise CorruptRecordError(f"truncated frame at byte {pos} of {seg.store_path.name}")
            off, fsize, _ = frame_header(hdr)
            if off != cur:
                raise CorruptRecordError(f"expected offset {cur} at byte {pos} of {seg.store_path.name}")
            buf = seg.read_bytes(pos, fsize)
            if len(buf) < fsize:
                raise CorruptRecordError(f"truncated frame at byte {pos} of {seg.store_path.name}")
            walked, n = fsize, 1
        parts.append(buf if walked == len(buf) else memoryview(buf)[:walked])  # no copy
        total += walked
        count += n
        cur += n
        if pos + walked < end or total >= max_bytes:
            break  # a limit was reached inside this segment
    data: bytes | memoryview = parts[0] if len(parts) == 1 else b"".join(parts)
    return FrameBatch(data, count, offset, cur, partition_bounds(plog))


def _page_by_index(seg: Segment, pos: int, end: int, cur: int, records: int,
                   budget: int) -> bytes | None:
    """The frames of offsets ``cur .. cur + records - 1`` of ``seg`` (from byte ``pos``)
    in one read, when the offset after them is in the segment and the bytes fit in
    ``budget``: its position comes from the segment's index (a few frame headers from
    the nearest entry), so the frames in between are not walked. None when that does
    not apply (the page reaches the segment's end, or does not fit, or a racing
    truncation changed the file): the caller walks the frames instead.
    """
    stop = cur + records
    if stop >= seg.next_offset:
        return None
    try:
        stop_pos = seg.position_of(stop)
    except (CorruptIndexError, OffsetOutOfRangeError, OSError):
        return None
    if not pos < stop_pos <= end or stop_pos - pos > budget:
        return None
    buf = seg.read_bytes(pos, stop_pos - pos)
    if len(buf) != stop_pos - pos or frame_header(buf)[0] != cur:
        return None
    return buf


_READ_SLACK = 64 << 10
"""Bytes read beyond the estimate of what a page needs (one read is the aim)."""


def _walk_segment(seg: Segment, pos: int, want: int, cur: int, records: int,
                  first: bool) -> tuple[bytes, int, int]:
    """Read frames of ``seg`` from byte ``pos`` (offset ``cur``): at most ``want`` bytes
    and ``records`` frames. Returns the bytes read, how many of them are whole frames
    taken, and how many frames that is.

    Reads no more than the page needs: a first guess from the segment's average frame
    size (plus slack), grown geometrically when it falls short, never past ``want``. Only
    the 20-byte frame headers are looked at; the client verifies the checksums.
    """
    if want < HEADER_SIZE:
        return b"", 0, 0
    count = seg.next_offset - seg.base_offset
    avg = seg.size // count if count > 0 else HEADER_SIZE
    guess = min(want, avg * records + avg + _READ_SLACK)
    unpack = HEADER.unpack_from
    while True:
        buf = seg.read_bytes(pos, guess)
        size = len(buf)
        walked = 0
        n = 0
        complete = False  # stopped for a reason other than the end of buf
        while n < records:
            if walked + HEADER_SIZE > size:
                break
            off, blen, _ = unpack(buf, walked)
            if off != cur + n:
                if first and n == 0:
                    raise CorruptRecordError(
                        f"expected offset {cur} at byte {pos} of {seg.store_path.name}")
                complete = True  # a racing truncation rewrote the tail: stop here
                break
            fsize = HEADER_SIZE + blen
            if walked + fsize > size:
                break
            walked += fsize
            n += 1
        else:
            complete = True
        if complete or size < guess or guess >= want:
            return buf, walked, n
        guess = min(want, guess * 4)


def fetch_records(plog: PartitionLog, offset: int, max_records: int,
                  max_bytes: int) -> tuple[list[Record], PartitionBounds]:
    """Decoded records from ``offset`` on (any tier) and the bounds after reading."""
    recs = plog.read_range(offset, max_records, max_bytes)
    return recs, partition_bounds(plog)


__all__ = ["FrameBatch", "fetch_frames", "fetch_records", "frame_records"]
