"""Which partition a record goes to when the producer names none: Kafka's default
partitioner, so that a key lands on the partition a Kafka client would put it on. Used by
the clients (:mod:`tiered_log.client`) and by the service's topic-level produce, so it
imports neither.

- A record with a key: ``toPositive(murmur2(key)) % partitions``, with :func:`murmur2`
  exactly Kafka's ``Utils.murmur2`` (seed ``0x9747b28c``, signed 32-bit result) and
  :func:`to_positive` Kafka's ``Utils.toPositive`` (the low 31 bits). A key given as text
  is hashed as its UTF-8 bytes, as Kafka's ``StringSerializer`` sends it.
- A record without a key: sticky, as Kafka's producer is since KIP-480/KIP-794: every
  keyless record of one batch (one produce call) goes to the same partition, and the
  next batch goes to the next partition (starting at a random one), so keyless load
  spreads over all partitions without splitting a batch into many small requests.

:class:`DefaultPartitioner` holds the sticky state per topic and is thread-safe; the
functions are pure.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Sequence
from typing import NamedTuple

from .format.records import ProducerRecord

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` of ``data``: a signed 32-bit int, as Java computes it."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length - length % 4
    for i in range(0, whole, 4):
        k = data[i] | (data[i + 1] << 8) | (data[i + 2] << 16) | (data[i + 3] << 24)
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length % 4
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def to_positive(n: int) -> int:
    """Kafka's ``Utils.toPositive``: ``n & 0x7fffffff`` (not ``abs``, which overflows)."""
    return n & 0x7FFFFFFF


def partition_for_key(key: bytes | str, partitions: int) -> int:
    """The partition Kafka's default partitioner gives ``key`` in a topic of ``partitions``."""
    if partitions < 1:
        raise ValueError(f"a topic has at least one partition, not {partitions}")
    data = key.encode("utf-8") if isinstance(key, str) else bytes(key)
    return to_positive(murmur2(data)) % partitions


def record_key(record: ProducerRecord | bytes | str) -> bytes | None:
    """The key a record to produce carries (bare values carry none)."""
    return record.key if isinstance(record, ProducerRecord) else None


class RecordMetadata(NamedTuple):
    """Where a produced record went: its partition and its offset there."""

    partition: int
    offset: int


PARTITION_COUNT_MAX_AGE_S = 300.0
"""How long a client trusts the partition count it learnt of a topic (as Kafka's
``metadata.max.age.ms``, 5 minutes): a topic deleted and created again with other
partitions is seen again after this long at the latest."""


class PartitionCounts:
    """The partition count of each topic as a client last learnt it, for
    :data:`PARTITION_COUNT_MAX_AGE_S`. Thread-safe."""

    def __init__(self, max_age_s: float = PARTITION_COUNT_MAX_AGE_S) -> None:
        self.max_age_s = max_age_s
        self._lock = threading.Lock()
        self._counts: dict[str, tuple[int, float]] = {}

    def get(self, topic: str) -> int | None:
        """The count learnt for ``topic``; None when not known or too old."""
        with self._lock:
            got = self._counts.get(topic)
        if got is None or time.monotonic() - got[1] > self.max_age_s:
            return None
        return got[0]

    def put(self, topic: str, count: int) -> None:
        with self._lock:
            self._counts[topic] = (count, time.monotonic())

    def forget(self, topic: str) -> None:
        """Drop what is known of ``topic`` (a request found it missing or changed)."""
        with self._lock:
            self._counts.pop(topic, None)


class DefaultPartitioner:
    """Kafka's default partitioner (see the module docstring), with its sticky partition
    for keyless records kept per topic. Thread-safe."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._sticky: dict[str, int] = {}

    def _next_sticky(self, topic: str, partitions: int) -> int:
        with self._lock:
            last = self._sticky.get(topic)
            p = self._rng.randrange(partitions) if last is None else (last + 1) % partitions
            self._sticky[topic] = p
            return p

    def assign(
        self, topic: str, records: Sequence[ProducerRecord | bytes | str], partitions: int
    ) -> dict[int, list[int]]:
        """Split one batch of ``records`` over a topic of ``partitions``: partition ->
        the indexes of its records, in order. Keyed records by :func:`partition_for_key`,
        the keyless ones all to this batch's sticky partition."""
        if partitions < 1:
            raise ValueError(f"a topic has at least one partition, not {partitions}")
        out: dict[int, list[int]] = {}
        sticky: int | None = None
        for i, rec in enumerate(records):
            key = record_key(rec)
            if key is None:
                if sticky is None:
                    sticky = self._next_sticky(topic, partitions)
                p = sticky
            else:
                p = partition_for_key(key, partitions)
            out.setdefault(p, []).append(i)
        return out


__all__ = [
    "PARTITION_COUNT_MAX_AGE_S",
    "DefaultPartitioner",
    "PartitionCounts",
    "RecordMetadata",
    "murmur2",
    "partition_for_key",
    "record_key",
    "to_positive",
]
