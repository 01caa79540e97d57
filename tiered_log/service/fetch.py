"""Reading records for the API: decoded (JSON form) or as raw frames (binary form).

:func:`fetch_frames` serves the binary form. Where the records are on local disk it
never decodes or re-encodes them: it finds the first frame through the segment's index
(:meth:`~tiered_log.local.segment.Segment.position_of`), reads the byte range with one
``pread`` per segment and walks only the 20-byte frame headers to honour
``max_records``/``max_bytes``; the bytes go to the client as they were on disk (disk
format == wire format; the client verifies checksums). Records only in the remote tier
come back decoded from the tiered log and are framed again (identical bytes: framing is
deterministic).

Both functions block on disk: run them in a worker thread. They take no lock and may
race appends (they see a consistent prefix) and truncations (they may stop early or
return records the truncation then removes, as :class:`~tiered_log.local.log.Log` reads).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import CorruptRecordError, OffsetOutOfRangeError
from ..format.records import HEADER_SIZE, ProducerRecord, Record, encode_batch, frame_header
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

    parts: list[bytes] = []
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
        want = min(end - pos, max(max_bytes - total, 0))
        buf = seg.read_bytes(pos, want) if want >= HEADER_SIZE else b""
        walked = 0
        n = 0
        while walked + HEADER_SIZE <= len(buf) and count + n < max_records:
            off, fsize, _ = frame_header(buf, walked)
            if off != cur + n:
                if count + n == 0:
                    raise CorruptRecordError(f"expected offset {cur} at byte {pos} of {seg.store_path.name}")
                break  # a racing truncation rewrote the tail: stop here
            if walked + fsize > len(buf):
                break
            walked += fsize
            n += 1
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
        parts.append(buf if walked == len(buf) else buf[:walked])
        total += walked
        count += n
        cur += n
        if pos + walked < end or total >= max_bytes:
            break  # a limit was reached inside this segment
    data: bytes = parts[0] if len(parts) == 1 else b"".join(parts)
    return FrameBatch(data, count, offset, cur, partition_bounds(plog))


def fetch_records(plog: PartitionLog, offset: int, max_records: int,
                  max_bytes: int) -> tuple[list[Record], PartitionBounds]:
    """Decoded records from ``offset`` on (any tier) and the bounds after reading."""
    recs = plog.read_range(offset, max_records, max_bytes)
    return recs, partition_bounds(plog)


__all__ = ["FrameBatch", "fetch_frames", "fetch_records", "frame_records"]
