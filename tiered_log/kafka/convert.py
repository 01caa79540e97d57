"""Records between Kafka's record batches (the wire) and the log's own batches (the disk),
until the log stores Kafka batches itself.

- :func:`producer_records`: the batches of a Produce request's partition, each checked
  (framing, magic 2, CRC-32C: :func:`tiered_log.format.kafka.iter_batches`) and
  decompressed (gzip, snappy, lz4, zstd), to the records to append. What the log cannot
  hold yet is :class:`~tiered_log.kafka.errors.InvalidRecordError` naming it: null or
  empty values, transactional and control batches, batches of an idempotent producer
  (a producer id: its sequence checks are not kept yet). Record timestamps are kept as
  sent (CreateTime); a record without one (-1) takes the log's clock.
- :func:`kafka_batches`: the log's stored batches (as a batch read returns them) to
  Kafka batches, one Kafka batch per stored batch with the same offsets, uncompressed,
  so a fetch that starts inside a stored batch gets the whole batch, as from Kafka.

Both are CPU work over whole requests: run them in a worker thread (they are pure and
keep no state: any thread).
"""

from __future__ import annotations

from ..format.batch import ProducerRecord, batch_header
from ..format.batch_decode import decode_records
from ..format.kafka import NewRecord, encode_batch, iter_batches
from ..format.kafka.compression import BytesLike
from .errors import InvalidRecordError


def producer_records(data: BytesLike) -> list[ProducerRecord | bytes]:
    """The records of the Kafka batches in ``data``, to append in this order.

    CorruptRecordError (CORRUPT_MESSAGE) for a batch that fails its checks or records
    that do not parse; InvalidRecordError (INVALID_RECORD) for what the log cannot hold.
    Either way the whole partition's data is refused: nothing of it is appended."""
    out: list[ProducerRecord | bytes] = []
    for batch in iter_batches(data):
        h = batch.header
        if h.is_control or h.is_transactional:
            raise InvalidRecordError(
                "a transactional or control batch: transactions are not supported yet"
            )
        if h.producer_id >= 0:
            raise InvalidRecordError(
                f"batch of producer id {h.producer_id}: idempotent producers are not "
                "supported yet (set enable.idempotence=false)"
            )
        for i, rec in enumerate(batch.records()):
            value = rec.value
            if value is None:
                raise InvalidRecordError(
                    f"record {i} of the batch has a null value (a tombstone): "
                    "this log cannot store null values yet"
                )
            if not value:
                raise InvalidRecordError(
                    f"record {i} of the batch has an empty value: "
                    "this log cannot store empty values yet"
                )
            ts = rec.timestamp if rec.timestamp >= 0 else None
            out.append(ProducerRecord(value, rec.key, rec.headers, ts))
    if not out:
        raise InvalidRecordError("the partition's data holds no records")
    return out


def kafka_batches(data: BytesLike) -> bytes:
    """The stored batches in ``data`` (whole, verified: a batch read's page) as Kafka v2
    batches, one per stored batch, at the same offsets."""
    buf = data if isinstance(data, bytes) else bytes(data)
    out = bytearray()
    pos, end = 0, len(buf)
    while pos < end:
        base, size, _count = batch_header(buf, pos)
        recs, _next, _bytes = decode_records(buf, pos, pos + size)
        out += encode_batch(
            [NewRecord(r.value, r.key, r.headers, r.timestamp) for r in recs],
            base_offset=base,
        )
        pos += size
    return bytes(out)


__all__ = ["kafka_batches", "producer_records"]
