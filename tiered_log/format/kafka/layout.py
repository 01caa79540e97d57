"""The fixed part of Kafka's record batch v2: offsets of its fields, its attribute bits,
the compression codecs and timestamp types, and the header struct.

The whole layout (header, records, headers) is drawn in :mod:`tiered_log.format.kafka`.
Everything here is a constant: safe from any thread.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import Final

# ---- the batch header: 61 bytes, big-endian --------------------------------------------------

BASE_OFFSET_AT: Final = 0
"""baseOffset int64: the offset of the batch's first record (the broker assigns it)."""
BATCH_LENGTH_AT: Final = 8
"""batchLength int32: bytes of the batch after this field (the whole batch less 12)."""
PARTITION_LEADER_EPOCH_AT: Final = 12
"""partitionLeaderEpoch int32: the leader epoch the broker appended the batch under."""
MAGIC_AT: Final = 16
"""magic int8: 2 for this format (0 and 1 are the legacy message sets)."""
CRC_AT: Final = 17
"""crc uint32: CRC-32C (Castagnoli) of the bytes from attributes to the batch's end."""
ATTRIBUTES_AT: Final = 21
"""attributes int16: codec, timestamp type, transactional, control, delete horizon bits.
The CRC covers the batch from here to its end."""
LAST_OFFSET_DELTA_AT: Final = 23
"""lastOffsetDelta int32: offset of the batch's last record less baseOffset."""
BASE_TIMESTAMP_AT: Final = 27
"""baseTimestamp int64: ms; the first record's timestamp (records store deltas from it),
or the delete horizon when attributes bit 6 is set."""
MAX_TIMESTAMP_AT: Final = 35
"""maxTimestamp int64: ms; the largest record timestamp, or the broker's clock under
LogAppendTime."""
PRODUCER_ID_AT: Final = 43
"""producerId int64: -1 when the producer is not idempotent."""
PRODUCER_EPOCH_AT: Final = 51
"""producerEpoch int16: -1 when the producer is not idempotent."""
BASE_SEQUENCE_AT: Final = 53
"""baseSequence int32: the first record's sequence number; -1 when not idempotent."""
RECORDS_COUNT_AT: Final = 57
"""records count int32: records in the batch (not compressed, also when the records are)."""
RECORDS_AT: Final = 61
"""The records (compressed as one block when the codec is not none)."""

HEADER_SIZE: Final = 61
"""Bytes of the header, before the first record."""
LOG_OVERHEAD: Final = 12
"""baseOffset + batchLength: the bytes of a batch that batchLength does not count."""
MIN_BATCH_LENGTH: Final = HEADER_SIZE - LOG_OVERHEAD
"""The smallest valid batchLength (a batch of no records)."""
MAGIC: Final = 2
"""The magic byte of record batch v2."""

HEADER: Final = struct.Struct(">qiibIhiqqqhii")
"""The 61-byte header, unpacked in the order of :class:`~.batch.BatchHeader`'s fields
after ``position``: baseOffset, batchLength, partitionLeaderEpoch, magic, crc,
attributes, lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch,
baseSequence, records count."""
assert HEADER.size == HEADER_SIZE

# ---- attributes (int16) ----------------------------------------------------------------------

COMPRESSION_MASK: Final = 0x07
"""Bits 0-2: the compression codec (:class:`Compression`)."""
TIMESTAMP_TYPE_BIT: Final = 0x08
"""Bit 3: 0 CreateTime (as the producer sent), 1 LogAppendTime (the broker's clock)."""
TRANSACTIONAL_BIT: Final = 0x10
"""Bit 4: the batch belongs to a transaction."""
CONTROL_BIT: Final = 0x20
"""Bit 5: a control batch (transaction markers), not user records."""
DELETE_HORIZON_BIT: Final = 0x40
"""Bit 6: baseTimestamp holds the delete horizon set by log compaction."""


class Compression(IntEnum):
    """The codec of a batch's records (attributes bits 0-2), as Kafka numbers them."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, name: str | int | Compression | None) -> Compression:
        """A codec from its name (``"zstd"``), its number, a member, or None (none)."""
        if name is None:
            return cls.NONE
        if isinstance(name, str):
            try:
                return cls[name.upper()]
            except KeyError:
                names = ", ".join(m.name.lower() for m in cls)
                raise ValueError(f"unknown compression {name!r} (one of {names})") from None
        return cls(name)


class TimestampType(IntEnum):
    """What a batch's timestamps mean (attributes bit 3)."""

    CREATE_TIME = 0
    """As the producer sent them."""
    LOG_APPEND_TIME = 1
    """The broker's clock at append, held in maxTimestamp for every record."""


NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
NO_PARTITION_LEADER_EPOCH: Final = -1
"""What a producer writes into partitionLeaderEpoch; the broker overwrites it."""
