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


def parse_and_append(plog: PartitionLog, parse: Parse, *args: Any) -> Appended:
    """``parse(*args)`` then append the records in one write (on the append executor)."""
    records = parse(*args)
    first, last = plog.append_batch(records)
    if isinstance(records, EncodedBatch):
        return Appended(
            first, last, records.count, records.payload_bytes, plog.flushed_offset > last
        )
    return Appended(first, last, len(records), _payload_bytes(records), plog.flushed_offset > last)


def _payload_bytes(records: Iterable[ProducerRecord | bytes]) -> int:
    """Bytes of values and keys in ``records`` (the append_bytes metric)."""
    n = 0
    for r in records:
        if r.__class__ is bytes:
            n += len(r)
        elif isinstance(r, ProducerRecord):
            n += len(r.value or b"") + len(r.key or b"")
    return n


__all__ = ["Appended", "Parse", "parse_and_append"]
