"""The record batch: Kafka's record batch v2, its constants, the types of its records,
and the unverified reads of a batch's header.

A store file (a segment's ``.log``), a chunk in the bucket (a byte range of one), the
binary HTTP bodies (produce and fetch) and the Kafka listener's record sets are all the
same bytes: Kafka v2 batches back to back, nothing between them, exactly as Kafka's
protocol guide ("Record Batch") defines them and as Kafka's own log segments hold them.
The layout (all integers big-endian)::

    0   i64  baseOffset            offset of the batch's first record
    8   i32  batchLength           bytes after this field (the batch's size - 12)
   12   i32  partitionLeaderEpoch  the leader epoch the batch was appended under
   16   i8   magic                 2
   17   u32  crc                   CRC-32C (Castagnoli) of bytes 21..end
   21   i16  attributes            bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4,
                                   4 zstd), bit 3 LogAppendTime, bit 4 transactional,
                                   bit 5 control, bit 6 delete horizon
   23   i32  lastOffsetDelta       records - 1 (the log never leaves gaps)
   27   i64  baseTimestamp         the first record's timestamp (ms)
   35   i64  maxTimestamp          the largest record timestamp, or the log's clock
                                   at append under LogAppendTime
   43   i64  producerId            -1: none
   51   i16  producerEpoch         -1: none
   53   i32  baseSequence          -1: none
   57   i32  records count         n >= 1
   61        records               varint-framed (:mod:`tiered_log.format.kafka`),
                                   compressed as one block unless the codec is 0

Which check guards which bytes:

- the CRC-32C covers attributes to the end (the records as stored, compressed or
  not): one ``crc32c`` call per batch verifies its contents;
- baseOffset, batchLength, partitionLeaderEpoch and magic are outside it, so that the
  log assigns offsets and stamps its epoch in place. They are guarded by framing (magic
  2, batchLength in range and inside the buffer, the records count equal to
  lastOffsetDelta + 1) and by the walks, which check that each batch's offsets follow
  the previous batch's; on disk and in the bucket the local index entries and the
  remote tier's chunk and manifest checksums (xxh3) cover them too;
- a record's framing (its length matches its fields, offset deltas 0, 1, ...) is checked
  when a client's batches come in (:func:`~tiered_log.format.batch_decode.receive_batches`)
  and when records are decoded; the walks that verify a stored buffer check framing and
  CRC only, with no loop over records.

A record's *size* (what ``max_bytes`` limits count) is its bytes in the batch, its
varint length prefix included; a null key or value takes one byte, an empty one too.

Encoding is in :mod:`tiered_log.format.batch_encode` (:func:`encode_batch` cuts its input
into batches of at most :data:`MAX_BATCH_BYTES`, a larger single record getting a batch
of its own); verifying and decoding in :mod:`tiered_log.format.batch_decode`;
:mod:`tiered_log.format.records` gathers the public names of all three. The byte-level
codec (varints, records, compression codecs, the CRC walk) is
:mod:`tiered_log.format.kafka`; this module holds what both sides of the log share.

Everything here is pure and stateless: safe from any thread.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Final, NamedTuple

from ..errors import CorruptRecordError
from .kafka.layout import (
    ATTRIBUTES_AT,
    BASE_TIMESTAMP_AT,
    COMPRESSION_MASK,
    CONTROL_BIT,
    CRC_AT,
    DELETE_HORIZON_BIT,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    MAX_TIMESTAMP_AT,
    MIN_BATCH_LENGTH,
    PARTITION_LEADER_EPOCH_AT,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    Compression,
)
from .kafka.records import (
    MAX_HEADERS,
    Headers,
    ProducerRecord,
    Record,
    encode_headers,
)

CHECKED_FROM: Final = ATTRIBUTES_AT
"""The CRC-32C covers a batch from this byte (attributes) to its end."""
KNOWN_ATTRIBUTES: Final = COMPRESSION_MASK | TIMESTAMP_TYPE_BIT
"""The attribute bits a batch coming in may have: a codec and the timestamp type.
Transactional and control batches (and a delete horizon, which only compaction sets)
are refused where batches come in."""
RECORD_OVERHEAD: Final = 7
"""The fewest framing bytes a record takes: its length, attributes, timestampDelta,
offsetDelta, key length, value length and header count, one byte each."""
MAX_BATCH_BYTES: Final = 1 << 20
""":func:`~tiered_log.format.batch_encode.encode_batch` starts a new batch before one
would pass this size."""
MAX_RECORD_FRAMING: Final = 5 + 1 + 10 + 5 + 5 + 5 + 5
"""The most framing bytes a record takes (every varint at its longest)."""
MAX_BODY_BYTES: Final = (1 << 31) - 1 - (HEADER_SIZE - LOG_OVERHEAD) - MAX_RECORD_FRAMING
"""The largest key + value + headers one record may have (batchLength is an int32)."""

_FRAMING = struct.Struct(">qiibIhi")
"""baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes,
lastOffsetDelta: the header's first 27 bytes."""
_I64 = struct.Struct(">q")

LEGACY_MARK: Final = b"BT"
"""Bytes 20-21 of a batch of tiered_log's own format before Kafka v2 (its u16 magic
0x5442, "TB", little-endian)."""

LEGACY_HINT: Final = (
    "this is tiered_log's old batch format ('TB' columnar batches, before the Kafka v2 "
    "record batch): rewrite the directory with `tiered-log migrate DIR`"
)


class LegacyFormatError(CorruptRecordError):
    """Bytes of tiered_log's format before Kafka v2 where a Kafka v2 batch must be: the
    data is not damaged, but this version does not read it (see :data:`LEGACY_HINT`)."""


def is_legacy_batch(buf: bytes | bytearray | memoryview, pos: int = 0) -> bool:
    """Whether the bytes at ``pos`` open a batch of the old "TB" format: its magic at
    bytes 20-21, where a v2 batch holds its CRC's last byte and its attributes' high
    byte, which is never 0x54 (no attribute bit above 6 is defined). Needs 22 bytes;
    fewer: False."""
    if len(buf) - pos < 22:
        return False
    return bytes(buf[pos + 20 : pos + 22]) == LEGACY_MARK


class BatchInfo(NamedTuple):
    """One batch of a buffer: where it lies and what the indexes and chunks need."""

    base_offset: int
    record_count: int
    position: int
    size: int
    first_timestamp: int
    """The header's baseTimestamp."""
    max_timestamp: int
    """The header's maxTimestamp."""
    max_timestamp_offset: int
    """The offset of the first record holding ``max_timestamp`` when the records were
    read (encoding, a client's batches coming in), else the batch's last offset."""

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.record_count


@dataclass(frozen=True, slots=True)
class FetchData:
    """What a batch read of either tier returns (as Kafka's ``FetchDataInfo``): stored
    batches, unchanged and verified, holding the records from ``first_offset`` (the
    offset asked for) up to ``next_offset``. The first batch may begin below
    ``first_offset`` (a reader skips those records); ``data`` is empty when the read was
    at the log's end. Immutable (``data`` may be a view of a buffer nobody writes)."""

    data: bytes | memoryview
    first_offset: int
    next_offset: int

    @property
    def count(self) -> int:
        """Records from ``first_offset`` the batches hold."""
        return self.next_offset - self.first_offset


def batch_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int, int]:
    """``(base_offset, size, count)`` of the batch at ``pos`` without verifying it
    (``size`` = batchLength + 12, ``count`` = lastOffsetDelta + 1)."""
    base, length, _epoch, _magic, _crc, _attrs, lod = _FRAMING.unpack_from(buf, pos)
    return base, length + LOG_OVERHEAD, lod + 1


def first_timestamp(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """The baseTimestamp of the batch at ``pos``, without verifying it."""
    return int(_I64.unpack_from(buf, pos + BASE_TIMESTAMP_AT)[0])


def max_timestamp(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """The maxTimestamp of the batch at ``pos``, without verifying it."""
    return int(_I64.unpack_from(buf, pos + MAX_TIMESTAMP_AT)[0])


__all__ = [
    "ATTRIBUTES_AT",
    "CHECKED_FROM",
    "CONTROL_BIT",
    "CRC_AT",
    "DELETE_HORIZON_BIT",
    "HEADER",
    "HEADER_SIZE",
    "KNOWN_ATTRIBUTES",
    "LEGACY_HINT",
    "LOG_OVERHEAD",
    "MAGIC",
    "MAX_BATCH_BYTES",
    "MAX_BODY_BYTES",
    "MAX_HEADERS",
    "MIN_BATCH_LENGTH",
    "PARTITION_LEADER_EPOCH_AT",
    "RECORD_OVERHEAD",
    "TIMESTAMP_TYPE_BIT",
    "TRANSACTIONAL_BIT",
    "BatchInfo",
    "Compression",
    "FetchData",
    "Headers",
    "LegacyFormatError",
    "ProducerRecord",
    "Record",
    "batch_header",
    "encode_headers",
    "first_timestamp",
    "is_legacy_batch",
    "max_timestamp",
]
