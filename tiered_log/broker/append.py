"""The append step every produce ends in: a front end's *parse* step (its arguments to
the records to append) and the append, in ONE call on the broker's append executor
(decoding costs CPU, and one thread hop is cheaper than two).

Concurrency: :func:`parse_and_append` blocks (CPU, then the log's append and its
fsync): the broker runs it on its append executor, never on the event loop. It keeps no
state.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import RecordTooLargeError
from ..format.batch import HEADER_SIZE
from ..format.kafka.records import record_size
from ..format.records import EncodedBatch, ProducerRecord
from .topics import PartitionLog

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


def parse_and_append(
    plog: PartitionLog, parse: Parse, *args: Any, max_message_bytes: int | None = None
) -> Appended:
    """``parse(*args)`` then append the records in one write (on the append executor);
    RecordTooLargeError with nothing appended when a batch passes ``max_message_bytes``
    (the topic's, :func:`check_message_bytes`)."""
    records = parse(*args)
    if max_message_bytes is not None:
        check_message_bytes(records, max_message_bytes)
    first, last = plog.append_batch(records)
    if isinstance(records, EncodedBatch):
        return Appended(
            first, last, records.count, records.payload_bytes, plog.flushed_offset > last
        )
    return Appended(first, last, len(records), _payload_bytes(records), plog.flushed_offset > last)


def check_message_bytes(records: list[ProducerRecord | bytes] | EncodedBatch, limit: int) -> None:
    """Kafka's ``max.message.bytes``: RecordTooLargeError naming the limit when a client's
    batch (as sent: compressed if it is) is larger than ``limit`` bytes, or a record given
    alone (a JSON record, a raw body) would be, in a batch of its own."""
    if isinstance(records, EncodedBatch):
        for i, b in enumerate(records.batches):
            if b.size > limit:
                raise RecordTooLargeError(
                    f"record batch {i} is {b.size} bytes, more than the topic's "
                    f"max_message_bytes (max.message.bytes) of {limit} bytes"
                )
        return
    for i, r in enumerate(records):
        if r.__class__ is bytes:
            n = HEADER_SIZE + record_size(None, r)  # type: ignore[arg-type]
        elif isinstance(r, ProducerRecord):
            try:
                n = HEADER_SIZE + record_size(r.key, r.value, r.headers)
            except (TypeError, AttributeError):
                continue  # a bad field: the append's own check names it
        else:
            continue
        if n > limit:
            raise RecordTooLargeError(
                f"record {i} needs a record batch of {n} bytes, more than the topic's "
                f"max_message_bytes (max.message.bytes) of {limit} bytes"
            )


def _payload_bytes(records: Iterable[ProducerRecord | bytes]) -> int:
    """Bytes of values and keys in ``records`` (the append_bytes metric)."""
    n = 0
    for r in records:
        if r.__class__ is bytes:
            n += len(r)
        elif isinstance(r, ProducerRecord):
            n += len(r.value or b"") + len(r.key or b"")
    return n


__all__ = ["Appended", "Parse", "check_message_bytes", "parse_and_append"]
