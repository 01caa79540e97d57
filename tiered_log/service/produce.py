"""Produce bodies to appends: parse a body and append its records in one worker-thread call.

The three produce forms (see :mod:`tiered_log.service.routes.records`) each end in a
*parse* step, run with the append in ONE worker-thread call (:func:`parse_and_append`):
decoding costs CPU, and one thread hop is cheaper than two. The parse steps:
:func:`one_record` (a raw body: its one record), :func:`parse_frames` (binary batches,
each verified; a bad one is the client's: 400 naming it) and :func:`parse_batch` (a
JSON batch; malformed is 400).

Concurrency: every function here blocks (CPU, then the log's append and its fsync):
call them from a worker thread, never on the event loop. They keep no state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ..errors import CorruptRecordError, InvalidArgumentError, InvalidRequestError
from ..format.records import EncodedBatch, ProducerRecord, receive_batches
from .error_mapping import validation_message
from .topics import PartitionLog
from .wire import MAX_BATCH_RECORDS, ProduceRequest

Parse = Callable[..., list[ProducerRecord | bytes] | EncodedBatch]
"""A parse step: its arguments to the records to append."""


@dataclass(frozen=True, slots=True)
class Appended:
    """What :func:`parse_and_append` did: the offsets, for the answer and the metrics."""

    first: int
    last: int
    count: int
    payload_bytes: int
    durable: bool


def parse_and_append(plog: PartitionLog, parse: Parse, *args: Any) -> Appended:
    """``parse(*args)`` then append the records in one write (in a worker thread)."""
    records = parse(*args)
    first, last = plog.append_batch(records)
    if isinstance(records, EncodedBatch):
        return Appended(first, last, records.count, records.payload_bytes,
                        plog.flushed_offset > last)
    return Appended(first, last, len(records), _payload_bytes(records),
                    plog.flushed_offset > last)


def one_record(record: ProducerRecord) -> list[ProducerRecord | bytes]:
    """The "parse" step of a raw body: its one record."""
    return [record]


def parse_frames(body: bytes, append_threshold: int) -> EncodedBatch:
    """The batches of a binary produce body, every one verified, values bounded by
    ``append_threshold`` (RecordTooLargeError); a bad batch is InvalidRequestError naming
    it (the client sent it: 400, not a storage fault)."""
    try:
        return receive_batches(body, append_threshold, max_records=MAX_BATCH_RECORDS)
    except CorruptRecordError as exc:
        raise InvalidRequestError(f"bad record batch: {exc}") from None


def parse_batch(body: bytes) -> list[ProducerRecord | bytes]:
    """The records of a JSON produce body (in a worker thread: parsing and base64 cost
    CPU); InvalidRequestError / InvalidArgumentError when malformed."""
    try:
        batch = ProduceRequest.model_validate_json(body)
    except ValidationError as exc:
        raise InvalidRequestError(validation_message(
            exc.errors(include_url=False, include_input=False))) from None
    out: list[ProducerRecord | bytes] = []
    for i, rec in enumerate(batch.records):
        try:
            out.append(rec.to_producer_record())
        except InvalidArgumentError as exc:
            raise InvalidRequestError(f"records.{i}: {exc.message}") from None
    return out


def _payload_bytes(records: Iterable[ProducerRecord | bytes]) -> int:
    """Bytes of values and keys in ``records`` (the append_bytes metric)."""
    n = 0
    for r in records:
        if r.__class__ is bytes:
            n += len(r)
        elif isinstance(r, ProducerRecord):
            n += len(r.value) + len(r.key or b"")
    return n


__all__ = ["Appended", "Parse", "one_record", "parse_and_append", "parse_batch", "parse_frames"]
