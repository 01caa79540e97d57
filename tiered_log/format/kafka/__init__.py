"""Kafka's record batch v2 (magic 2): the codec, pure bytes in and out, no I/O.

This is the batch format of Kafka's protocol and log files since Kafka 0.11, built and
read here exactly as Kafka's documentation ("Record Batch") and its Java client define
it, so that bytes made here are read by any Kafka client or tool and the other way
round. Modules:

- :mod:`.layout`       field offsets, attribute bits, :class:`Compression`, :class:`TimestampType`
- :mod:`.compression`  the codecs of the records section, in Kafka's framing
- :mod:`.records`      zigzag varints; the record types (:class:`Record`,
                       :class:`ProducerRecord`, alias :data:`NewRecord`); records to
                       and from bytes (the project's one record codec)
- :mod:`.native`       aiokafka's C record reader, used by the log's decoders when it
                       is installed (optional)
- :mod:`.batch`        building a batch, the checked walk over a buffer of batches,
                       reading records on demand, in-place header edits

The log's own batch API (:mod:`tiered_log.format.records`) is built on these modules.

The batch (all integers big-endian; a buffer, a segment file, a fetch answer is batches
back to back, nothing between them)::

    offset  size  field                 covered by the CRC
    0       8     baseOffset int64      no   (the broker assigns it in place)
    8       4     batchLength int32     no   (bytes after this field: size - 12)
    12      4     partitionLeaderEpoch  no   (the broker stamps it in place)
    16      1     magic int8 = 2        no
    17      4     crc uint32            --   CRC-32C (Castagnoli) of bytes 21..end
    21      2     attributes int16      yes  bits 0-2 codec: 0 none, 1 gzip, 2 snappy,
                                               3 lz4, 4 zstd; bit 3 timestampType
                                               (1 LogAppendTime); bit 4 transactional;
                                               bit 5 control; bit 6 hasDeleteHorizonMs
    23      4     lastOffsetDelta int32 yes
    27      8     baseTimestamp int64   yes  (ms; the delete horizon if bit 6)
    35      8     maxTimestamp int64    yes  (ms; the broker's clock under LogAppendTime)
    43      8     producerId int64      yes  (-1: none)
    51      2     producerEpoch int16   yes  (-1: none)
    53      4     baseSequence int32    yes  (-1: none)
    57      4     records count int32   yes  (in the clear, also when compressed)
    61      ...   records               yes  (compressed as one block unless codec 0)

Each record (varint = zigzag-encoded base-128 varint, as protobuf's ``sint``)::

    length          varint   bytes of the record after this field
    attributes      int8     unused (0)
    timestampDelta  varlong  timestamp - baseTimestamp
    offsetDelta     varint   offset - baseOffset
    keyLength       varint   -1 for a null key
    key             bytes
    valueLength     varint   -1 for a null value
    value           bytes
    headers count   varint
      headerKeyLength    varint   (never null)
      headerKey          UTF-8
      headerValueLength  varint   -1 for a null value
      headerValue        bytes

Which check guards which bytes: the CRC-32C in the header covers attributes through the
last record byte (compressed bytes as stored). It does not cover baseOffset,
batchLength, partitionLeaderEpoch or magic, so that a broker can assign offsets and
stamp its epoch without touching the CRC; :func:`verify_batches` guards those by
framing alone (magic 2, batchLength in range and inside the buffer), and whatever
stores the batches must guard them with its own checks (the log's index entries and
the remote tier's chunk checksums). A record's framing is checked when its records are
decoded (:meth:`KafkaBatch.records`), never by the walk. A LogAppendTime edit
(:func:`set_log_append_time`) rewrites bytes under the CRC and recomputes it.

Everything here is pure; the in-place edits touch only the buffer given. Safe from any
thread as long as no two threads edit one buffer at once.
"""

from __future__ import annotations

from .batch import (
    BatchHeader,
    KafkaBatch,
    assign_offsets,
    attributes_of,
    decode_batches,
    encode_batch,
    iter_batches,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    verify_batches,
)
from .compression import compress, decompress
from .layout import HEADER_SIZE, LOG_OVERHEAD, MAGIC, Compression, TimestampType
from .records import Header, Headers, NewRecord, ProducerRecord, Record

__all__ = [
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "MAGIC",
    "BatchHeader",
    "Compression",
    "Header",
    "Headers",
    "KafkaBatch",
    "NewRecord",
    "ProducerRecord",
    "Record",
    "TimestampType",
    "assign_offsets",
    "attributes_of",
    "compress",
    "decode_batches",
    "decompress",
    "encode_batch",
    "iter_batches",
    "set_base_offset",
    "set_log_append_time",
    "set_partition_leader_epoch",
    "verify_batches",
]
