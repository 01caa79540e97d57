"""Kafka v2 record batches: building one, walking and checking a buffer of them, reading
their records, and the in-place header edits a broker makes.

The layout and which check guards which bytes are in :mod:`tiered_log.format.kafka`.

- :func:`encode_batch`: records -> one batch (what a producer sends).
- :func:`verify_batches`: the checked walk over a buffer of concatenated batches
  (framing, magic, codec number, CRC-32C), giving each batch's :class:`BatchHeader`
  without reading a record: what a produce path runs on a request body and a fetch path
  on what it reads, so it does per-batch work only (one ``struct`` unpack and one C
  CRC call per batch, no per-record work).
- :func:`iter_batches`: the same walk yielding :class:`KafkaBatch` views (a memoryview
  of each batch, no copy) whose :meth:`KafkaBatch.records` decompresses and decodes on
  demand.
- :func:`set_base_offset`, :func:`set_partition_leader_epoch`, :func:`assign_offsets`
  (fields outside the CRC: no CRC work) and :func:`set_log_append_time` (attributes bit 3
  and maxTimestamp, inside the CRC: recomputed), on a writable buffer.

Functions are pure or touch only the buffer passed in: safe from any thread as long as
no two threads edit the same buffer at once.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from crc32c import crc32c

from ...errors import CorruptRecordError, InvalidArgumentError
from .compression import BytesLike, compress, decompress
from .layout import (
    ATTRIBUTES_AT,
    BASE_OFFSET_AT,
    COMPRESSION_MASK,
    CONTROL_BIT,
    CRC_AT,
    DELETE_HORIZON_BIT,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MAGIC_AT,
    MAX_TIMESTAMP_AT,
    MIN_BATCH_LENGTH,
    NO_PARTITION_LEADER_EPOCH,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    NO_SEQUENCE,
    PARTITION_LEADER_EPOCH_AT,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    Compression,
    TimestampType,
)
from .records import NewRecord, Record, decode_records, encode_records

_new = tuple.__new__
_unpack_header = HEADER.unpack_from
_pack_header = HEADER.pack_into


class BatchHeader(NamedTuple):
    """One batch's header fields, and where the batch lies in the buffer walked.

    ``position`` is the batch's first byte in that buffer; the batch takes
    :attr:`size` bytes (``batch_length + 12``). Field names follow Kafka's
    (``base_offset`` is baseOffset, ...); ``crc`` is the stored CRC-32C.
    """

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes of the whole batch."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def end(self) -> int:
        """The position just past the batch (the next batch's position)."""
        return self.position + self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        """baseOffset + lastOffsetDelta: the batch's last offset."""
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        """The offset after the batch's last one."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        """The records' codec (attributes bits 0-2)."""
        return Compression(self.attributes & COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        """CreateTime or LogAppendTime (attributes bit 3)."""
        return TimestampType(1 if self.attributes & TIMESTAMP_TYPE_BIT else 0)

    @property
    def is_transactional(self) -> bool:
        """Attributes bit 4."""
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        """Attributes bit 5: transaction markers, not user records."""
        return bool(self.attributes & CONTROL_BIT)

    @property
    def has_delete_horizon(self) -> bool:
        """Attributes bit 6: baseTimestamp is the delete horizon."""
        return bool(self.attributes & DELETE_HORIZON_BIT)


def attributes_of(
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    *,
    transactional: bool = False,
    control: bool = False,
    delete_horizon: bool = False,
) -> int:
    """The attributes int16 for these settings."""
    a = int(compression) & COMPRESSION_MASK
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        a |= TIMESTAMP_TYPE_BIT
    if transactional:
        a |= TRANSACTIONAL_BIT
    if control:
        a |= CONTROL_BIT
    if delete_horizon:
        a |= DELETE_HORIZON_BIT
    return a


# ---- building a batch ------------------------------------------------------------------------


def encode_batch(
    records: Sequence[NewRecord],
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
    compression: Compression | str | None = Compression.NONE,
    compression_level: int | None = None,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    now: int | None = None,
) -> bytes:
    """One v2 batch holding ``records`` at offsets ``base_offset``, ``base_offset + 1``, ...

    baseTimestamp is the first record's timestamp and maxTimestamp the largest, as
    Kafka's producer writes them; a record without a timestamp takes ``now`` (default:
    the clock, in ms). Under ``TimestampType.LOG_APPEND_TIME`` maxTimestamp is
    ``log_append_time`` (required then). The records section is compressed with
    ``compression`` (:class:`Compression`, its name, or None for none) in Kafka's
    framing (:mod:`.compression`), also when that makes it larger, as Kafka's producer
    does. Raises :class:`~tiered_log.errors.InvalidArgumentError` for no records or an
    out-of-range field.
    """
    if not records:
        raise InvalidArgumentError("a Kafka record batch needs at least one record")
    if len(records) > 0x7FFFFFFF:
        raise InvalidArgumentError("too many records for one batch")
    try:
        codec = Compression.parse(compression)
    except ValueError as exc:
        raise InvalidArgumentError(str(exc)) from None
    if now is None:
        now = time.time_ns() // 1_000_000
    stamps = [now if r.timestamp is None else r.timestamp for r in records]
    base_timestamp = stamps[0]
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        if log_append_time is None:
            raise InvalidArgumentError("LogAppendTime needs log_append_time")
        max_timestamp = log_append_time
    else:
        max_timestamp = max(stamps)
    section = encode_records(records, base_timestamp, now)
    body = section if codec == Compression.NONE else compress(codec, section, compression_level)
    out = bytearray(HEADER_SIZE + len(body))
    try:
        _pack_header(
            out,
            0,
            base_offset,
            len(out) - LOG_OVERHEAD,
            partition_leader_epoch,
            MAGIC,
            0,
            attributes_of(codec, timestamp_type, transactional=transactional),
            len(records) - 1,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            len(records),
        )
    except Exception as exc:  # struct.error: a field out of its integer range
        raise InvalidArgumentError(f"a batch header field is out of range: {exc}") from None
    out[HEADER_SIZE:] = body
    view = memoryview(out)
    out[CRC_AT : CRC_AT + 4] = crc32c(view[ATTRIBUTES_AT:]).to_bytes(4, "big")
    view.release()
    return bytes(out)


# ---- walking a buffer of batches -------------------------------------------------------------


def _corrupt(pos: int, why: str) -> CorruptRecordError:
    return CorruptRecordError(f"Kafka record batch at byte {pos}: {why}")


def _view(buf: BytesLike) -> memoryview:
    view = memoryview(buf)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def verify_batches(buf: BytesLike, *, allow_truncated_tail: bool = False) -> list[BatchHeader]:
    """The headers of the batches that make up ``buf``, each checked.

    Each batch must fit the buffer (batchLength at least 49, and not past the end), have
    magic 2, a known codec number, a non-negative records count and lastOffsetDelta, and
    a CRC-32C that matches the bytes from attributes to its end. Records are not read.
    Raises :class:`~tiered_log.errors.CorruptRecordError` naming the first batch that
    fails, with its byte position. With ``allow_truncated_tail`` a last batch cut short
    (fewer bytes left than its header or its batchLength asks) ends the walk instead:
    the batches before it are returned, and the last one's :attr:`BatchHeader.end` is
    where the whole batches stop (a fetch page cut at a byte limit, a torn log tail).
    """
    view = _view(buf)
    n = len(view)
    pos = 0
    out: list[BatchHeader] = []
    append = out.append
    unpack = _unpack_header
    while pos < n:
        if n - pos < HEADER_SIZE:
            if allow_truncated_tail:
                break
            if n - pos > MAGIC_AT and view[pos + MAGIC_AT] != MAGIC:
                raise _corrupt(pos, f"magic {view[pos + MAGIC_AT]}, not 2")
            raise _corrupt(pos, f"only {n - pos} bytes left, less than the 61-byte header")
        f = unpack(view, pos)
        length = f[1]
        end = pos + LOG_OVERHEAD + length
        if f[3] != MAGIC:
            raise _corrupt(pos, f"magic {f[3]}, not 2 (not a v2 record batch)")
        if length < MIN_BATCH_LENGTH:
            raise _corrupt(pos, f"batchLength {length} is below the 49-byte minimum")
        if end > n:
            if allow_truncated_tail:
                break
            raise _corrupt(
                pos, f"batchLength {length} runs past the buffer ({n - pos - 12} bytes left)"
            )
        if crc32c(view[pos + ATTRIBUTES_AT : end]) != f[4]:
            raise _corrupt(pos, "CRC-32C mismatch (attributes..end damaged)")
        if f[5] & COMPRESSION_MASK > 4:
            raise _corrupt(pos, f"unknown compression codec {f[5] & COMPRESSION_MASK}")
        if f[12] < 0 or f[6] < 0:
            raise _corrupt(pos, f"records count {f[12]}, lastOffsetDelta {f[6]}")
        append(_new(BatchHeader, (pos,) + f))  # noqa: RUF005 (concatenation is faster here)
        pos = end
    return out


class KafkaBatch:
    """One batch of a buffer: its header and a memoryview of its bytes (no copy).

    :meth:`records` decompresses and decodes the records on each call. Holds a view of
    the buffer walked, so that buffer stays alive (and a bytearray cannot be resized)
    while the batch does. Immutable; safe to read from any thread.
    """

    __slots__ = ("data", "header")

    def __init__(self, header: BatchHeader, data: memoryview) -> None:
        self.header = header
        self.data = data

    def __repr__(self) -> str:
        h = self.header
        return (
            f"KafkaBatch(offsets {h.base_offset}..{h.last_offset}, {h.records_count} "
            f"records, {h.size} bytes, {h.compression.name.lower()})"
        )

    def records_section(self) -> bytes:
        """The records section, decompressed (a copy when not compressed)."""
        return decompress(self.header.attributes & COMPRESSION_MASK, self.data[HEADER_SIZE:])

    def records(self) -> list[Record]:
        """The batch's records, decoded (``checksum`` the batch's CRC); raises
        CorruptRecordError if they do not parse. Control batches decode the same way
        (their key and value hold the marker)."""
        h = self.header
        lat = h.max_timestamp if h.attributes & TIMESTAMP_TYPE_BIT else None
        return decode_records(
            self.records_section(), h.records_count, h.base_offset, h.base_timestamp, lat, h.crc
        )


def iter_batches(buf: BytesLike, *, allow_truncated_tail: bool = False) -> Iterator[KafkaBatch]:
    """The batches of ``buf`` as :class:`KafkaBatch` views, all checked first as by
    :func:`verify_batches` (so a damaged buffer raises before any batch is yielded)."""
    view = _view(buf)
    for h in verify_batches(view, allow_truncated_tail=allow_truncated_tail):
        yield KafkaBatch(h, view[h.position : h.position + h.batch_length + LOG_OVERHEAD])


def decode_batches(buf: BytesLike) -> list[tuple[BatchHeader, list[Record]]]:
    """Every batch of ``buf`` checked and its records decoded: the convenience reader."""
    return [(b.header, b.records()) for b in iter_batches(buf)]


# ---- in-place edits --------------------------------------------------------------------------


def _writable(buf: bytearray | memoryview) -> memoryview:
    view = _view(buf)
    if view.readonly:
        raise TypeError("a batch is edited in place: pass a bytearray or writable memoryview")
    return view


def set_base_offset(buf: bytearray | memoryview, position: int, base_offset: int) -> None:
    """Write baseOffset of the batch at ``position``. Outside the CRC: nothing else
    changes."""
    _writable(buf)[position + BASE_OFFSET_AT : position + BASE_OFFSET_AT + 8] = (
        base_offset.to_bytes(8, "big", signed=True)
    )


def set_partition_leader_epoch(buf: bytearray | memoryview, position: int, epoch: int) -> None:
    """Write partitionLeaderEpoch of the batch at ``position``. Outside the CRC."""
    at = position + PARTITION_LEADER_EPOCH_AT
    _writable(buf)[at : at + 4] = epoch.to_bytes(4, "big", signed=True)


def assign_offsets(
    buf: bytearray | memoryview,
    headers: Sequence[BatchHeader],
    first_offset: int,
    partition_leader_epoch: int | None = None,
) -> int:
    """Give the batches ``headers`` (from :func:`verify_batches` on ``buf``) consecutive
    offsets from ``first_offset`` (each batch takes lastOffsetDelta + 1), and stamp
    ``partition_leader_epoch`` when given: what a broker does to a produce request's
    batches. Touches no CRC-covered byte. Returns the next offset after the last batch.
    """
    view = _writable(buf)
    offset = first_offset
    epoch = (
        None
        if partition_leader_epoch is None
        else partition_leader_epoch.to_bytes(4, "big", signed=True)
    )
    for h in headers:
        p = h.position
        view[p : p + 8] = offset.to_bytes(8, "big", signed=True)
        if epoch is not None:
            view[p + PARTITION_LEADER_EPOCH_AT : p + PARTITION_LEADER_EPOCH_AT + 4] = epoch
        offset += h.last_offset_delta + 1
    return offset


def set_log_append_time(buf: bytearray | memoryview, position: int, timestamp: int) -> int:
    """Mark the batch at ``position`` LogAppendTime with ``timestamp`` (ms): attributes
    bit 3 set and maxTimestamp written, then the CRC-32C recomputed (both are under it).
    Records keep their timestamp deltas (readers report maxTimestamp for every record),
    and a compressed batch is not recompressed: as Kafka's broker does. Returns the new
    CRC. The batch must be whole in ``buf``; its framing is not re-checked here.
    """
    view = _writable(buf)
    length = int.from_bytes(view[position + 8 : position + 12], "big", signed=True)
    end = position + LOG_OVERHEAD + length
    if end > len(view):
        raise _corrupt(position, "batchLength runs past the buffer")
    a = position + ATTRIBUTES_AT
    attributes = int.from_bytes(view[a : a + 2], "big") | TIMESTAMP_TYPE_BIT
    view[a : a + 2] = attributes.to_bytes(2, "big")
    m = position + MAX_TIMESTAMP_AT
    view[m : m + 8] = timestamp.to_bytes(8, "big", signed=True)
    crc = crc32c(view[a:end])
    view[position + CRC_AT : position + CRC_AT + 4] = crc.to_bytes(4, "big")
    return int(crc)


__all__ = [
    "BatchHeader",
    "KafkaBatch",
    "assign_offsets",
    "attributes_of",
    "decode_batches",
    "encode_batch",
    "iter_batches",
    "set_base_offset",
    "set_log_append_time",
    "set_partition_leader_epoch",
    "verify_batches",
]
