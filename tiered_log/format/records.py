"""Record batches, the bytes of records in a segment's store file: every public name.

The batches are Kafka's record batch v2 (drawn in :mod:`tiered_log.format.batch`). The
format lives in three modules, one job each, over the byte-level codec of
:mod:`tiered_log.format.kafka`; this one gathers their public names so that
``from tiered_log.format.records import X`` is one import for any of them:

- :mod:`tiered_log.format.batch`: the byte layout, constants, :class:`Record`,
  :class:`ProducerRecord`, :class:`BatchInfo`, :class:`FetchData`, the unverified reads
  of a batch's header, and the recognition of the format before Kafka v2;
- :mod:`tiered_log.format.batch_encode`: :func:`encode_batch`, :class:`EncodedBatch`,
  :func:`rebatch`, :func:`validate_value`;
- :mod:`tiered_log.format.batch_decode`: the verified walk and what reads through it,
  :func:`decode_records`, :func:`decode_columns`, :func:`receive_batches`,
  :func:`batch_table`, :func:`scan_batches`, :func:`check_batches`.

Everything here is pure and stateless: safe from any thread.
"""

from __future__ import annotations

from .batch import (
    CHECKED_FROM,
    CRC_AT,
    HEADER,
    HEADER_SIZE,
    KNOWN_ATTRIBUTES,
    LEGACY_HINT,
    MAGIC,
    MAX_BATCH_BYTES,
    MAX_BODY_BYTES,
    MAX_HEADERS,
    RECORD_OVERHEAD,
    BatchInfo,
    Compression,
    FetchData,
    Headers,
    LegacyFormatError,
    ProducerRecord,
    Record,
    batch_header,
    encode_headers,
    first_timestamp,
    is_legacy_batch,
    max_timestamp,
)
from .batch_decode import (
    FrameColumns,
    batch_table,
    check_batches,
    decode_columns,
    decode_records,
    receive_batches,
    scan_batches,
)
from .batch_encode import NO_TIMESTAMP, EncodedBatch, encode_batch, rebatch, validate_value

__all__ = [
    "CHECKED_FROM",
    "CRC_AT",
    "HEADER",
    "HEADER_SIZE",
    "KNOWN_ATTRIBUTES",
    "LEGACY_HINT",
    "MAGIC",
    "MAX_BATCH_BYTES",
    "MAX_BODY_BYTES",
    "MAX_HEADERS",
    "NO_TIMESTAMP",
    "RECORD_OVERHEAD",
    "BatchInfo",
    "Compression",
    "EncodedBatch",
    "FetchData",
    "FrameColumns",
    "Headers",
    "LegacyFormatError",
    "ProducerRecord",
    "Record",
    "batch_header",
    "batch_table",
    "check_batches",
    "decode_columns",
    "decode_records",
    "encode_batch",
    "encode_headers",
    "first_timestamp",
    "is_legacy_batch",
    "max_timestamp",
    "rebatch",
    "receive_batches",
    "scan_batches",
    "validate_value",
]
