"""Kafka record batches through the Spark source and writer: null keys and values read
as Spark nulls and empty ones as empty binaries, in the archive (fetched from the bucket
by the executors) and in the local tail alike, compressed batches decoded; the writer
writes null values (tombstones) and compresses its batches when asked."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tiered_log.client import Client
from tiered_log.format.records import ProducerRecord

from .conftest import ADMIN, new_topic, wait_for

pytestmark = pytest.mark.spark

BASE_TS = 1_700_000_000_000
N = 300


def key_value(i: int) -> tuple[bytes | None, bytes | None]:
    """Offset ``i``'s key and value: null, empty or text, in turn."""
    value = None if i % 4 == 0 else b"" if i % 4 == 1 else f"value-{i}-".encode() * 20
    key = None if i % 3 == 0 else b"" if i % 3 == 1 else f"k{i}".encode()
    return key, value


def as_bytes(b: Any) -> bytes | None:
    return None if b is None else bytes(b)


def test_null_keys_and_values_are_spark_nulls(
    spark: Any, client: Client, read_options: Callable[..., dict[str, str]]
) -> None:
    topic = new_topic(client)
    for lo in range(0, N, 10):  # every other batch compressed by the producer
        client.produce(
            topic,
            0,
            [
                ProducerRecord(key_value(i)[1], key=key_value(i)[0], timestamp=BASE_TS + i)
                for i in range(lo, lo + 10)
            ],
            compression="zstd" if (lo // 10) % 2 else None,
        )
    wait_for(lambda: client.bounds(topic, 0).local_start_offset > N // 2, "most of it shipped")
    rows = (
        spark.read.format("tiered_log")
        .options(**read_options(topic))
        .load()
        .select("offset", "key", "value", "timestamp")
        .collect()
    )
    assert sorted(r.offset for r in rows) == list(range(N))
    for r in rows:
        assert (as_bytes(r.key), as_bytes(r.value)) == key_value(r.offset), r.offset
    assert sum(r.value is None for r in rows) == N // 4  # Spark nulls, not empty binaries
    assert sum(r.key is None for r in rows) == N // 3


def test_writer_writes_null_values_compressed(spark: Any, client: Client, service: Any) -> None:
    topic = new_topic(client)
    rows = [key_value(i) for i in range(40)]
    df = spark.createDataFrame(rows, "key binary, value binary")
    (
        df.write.format("tiered_log")
        .options(serviceUrl=service.url, token=ADMIN, topic=topic, compression="lz4")
        .mode("append")
        .save()
    )
    got = client.fetch(topic, 0, 0, max_records=1000).records
    assert sorted(((r.key, r.value) for r in got), key=repr) == sorted(rows, key=repr)
    assert sum(r.value is None for r in got) == 10
