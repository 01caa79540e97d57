"""Kafka's default partitioner in the client: murmur2 exactly as Kafka's ``Utils.murmur2``,
``toPositive(murmur2(key)) % partitions``, and sticky keyless batches."""

from __future__ import annotations

import importlib
import random
import warnings
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiered_log.format.records import ProducerRecord
from tiered_log.partitioner import (
    DefaultPartitioner,
    murmur2,
    partition_for_key,
    to_positive,
)


def _kafka_python() -> ModuleType | None:
    """kafka-python's partitioner module (the dev extra): an independent implementation."""
    try:
        with warnings.catch_warnings():  # its schema loading uses deprecated importlib APIs
            warnings.simplefilter("ignore", DeprecationWarning)
            return importlib.import_module("kafka.partitioner.default")
    except ImportError:
        return None


kafka_default = _kafka_python()

needs_kafka_python = pytest.mark.skipif(kafka_default is None, reason="kafka-python not installed")

# Kafka's own test vectors (clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java,
# testMurmur2): the signed 32-bit results Java computes.
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("data", "expected"), list(KAFKA_VECTORS.items()))
def test_murmur2_matches_kafka_vectors(data: bytes, expected: int) -> None:
    assert murmur2(data) == expected


@needs_kafka_python
@settings(deadline=None)
@given(st.binary(max_size=64))
def test_murmur2_matches_kafka_python(data: bytes) -> None:
    assert kafka_default is not None
    assert murmur2(data) & 0xFFFFFFFF == kafka_default.murmur2(data)


@needs_kafka_python
def test_partition_for_key_is_kafkas_default_partitioner() -> None:
    assert kafka_default is not None
    for i in range(500):
        key = f"user-{i}".encode()
        for n in (1, 2, 3, 7, 12):
            expected = (kafka_default.murmur2(key) & 0x7FFFFFFF) % n
            assert partition_for_key(key, n) == expected
            assert partition_for_key(key.decode(), n) == expected
    assert to_positive(-1) == 0x7FFFFFFF and to_positive(-(1 << 31)) == 0


def test_keyless_records_stick_to_one_partition_per_batch() -> None:
    part = DefaultPartitioner(random.Random(7))
    seen = []
    for _ in range(6):
        groups = part.assign("t", [b"a", b"b", ProducerRecord(b"c"), "d"], 3)
        assert len(groups) == 1 and next(iter(groups.values())) == [0, 1, 2, 3]
        seen.append(next(iter(groups)))
    assert sorted(seen[:3]) == [0, 1, 2] and seen[3:] == seen[:3]
    keyed = part.assign("t", [ProducerRecord(b"v", key=b"21"), b"x"], 4)
    assert keyed[to_positive(-973932308) % 4][0] == 0
