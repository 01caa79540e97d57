"""Streaming reads (three triggers, a restart between) and writes, batch and streaming."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tiered_log.client import Client
from tiered_log.format.records import Record

from .conftest import new_topic, wait_for
from .test_batch_read import all_records, produce

pytestmark = pytest.mark.spark


def _values(records: list[Record]) -> list[bytes]:
    """The records' values, none null (every record these tests produce has one)."""
    out = []
    for r in records:
        assert r.value is not None
        out.append(r.value)
    return out


def _run_available_now(spark: Any, opts: dict[str, str], out: Path, ckpt: Path) -> list[int]:
    """One run of an AvailableNow query into Parquet; the row counts of its batches."""
    q = (
        spark.readStream.format("tiered_log")
        .options(**opts)
        .load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    assert q.exception() is None, q.exception()
    return [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]


def test_stream_three_triggers_with_restart(
    spark: Any, client: Client, tmp_path: Path, read_options: Callable[..., dict[str, str]]
) -> None:
    topic = new_topic(client, partitions=2, segment_bytes=16384)
    for p in (0, 1):
        produce(client, topic, p, 150)
    wait_for(lambda: client.bounds(topic, 0).local_start_offset > 0, "shipping")
    opts = read_options(topic, startingOffsets="earliest", maxOffsetsPerTrigger="200")
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    # Run 1: 300 records, at most 200 a trigger: two triggers.
    assert _run_available_now(spark, opts, out, ckpt) == [200, 100]
    # More records arrive while the query is down; run 2 resumes from the checkpoint.
    produce(client, topic, 0, 80, start=150)
    assert _run_available_now(spark, opts, out, ckpt) == [80]
    rows = spark.read.parquet(str(out)).select("partition", "offset", "value").collect()
    seen = sorted((r.partition, r.offset) for r in rows)
    want = sorted([(0, o) for o in range(230)] + [(1, o) for o in range(150)])
    assert seen == want  # no gap, no duplicate
    values = {(r.partition, r.offset): bytes(r.value) for r in rows}
    for p in (0, 1):
        for rec in all_records(client, topic, p):
            assert values[(p, rec.offset)] == rec.value


def test_batch_write_and_read_back(
    spark: Any, client: Client, read_options: Callable[..., dict[str, str]], service: Any
) -> None:
    from pyspark.sql import Row

    topic = new_topic(client, partitions=2)
    rows = [
        Row(
            value=f"v{i}".encode(),
            key=(f"k{i}".encode() if i % 2 else None),
            partition=(i % 2 if i < 40 else None),
            headers=[Row(key="n", value=str(i).encode())],
        )
        for i in range(100)
    ]
    df = spark.createDataFrame(
        rows,
        "value binary, key binary, partition int, headers array<struct<key string, value binary>>",
    )
    df.write.format("tiered_log").option("serviceUrl", service.url).option(
        "token", read_options(topic)["token"]
    ).option("topic", topic).mode("append").save()
    got = (
        spark.read.format("tiered_log")
        .options(**read_options(topic, includeHeaders="true"))
        .load()
        .collect()
    )
    assert len(got) == 100
    by_value = {bytes(r.value): r for r in got}
    assert set(by_value) == {f"v{i}".encode() for i in range(100)}
    for i in range(100):
        r = by_value[f"v{i}".encode()]
        assert (bytes(r.key) if r.key is not None else None) == (
            f"k{i}".encode() if i % 2 else None
        )
        assert [(h.key, bytes(h.value)) for h in r.headers] == [("n", str(i).encode())]
        if i < 40:
            assert r.partition == i % 2
    # Offsets per partition are dense: nothing lost, nothing doubled.
    for p in (0, 1):
        offs = sorted(r.offset for r in got if r.partition == p)
        assert offs == list(range(len(offs)))


def test_bad_write_is_clear(spark: Any, client: Client, service: Any) -> None:
    topic = new_topic(client)
    df = spark.createDataFrame([("x", 1)], "value string, colour int")
    with pytest.raises(Exception, match="cannot write column"):
        df.write.format("tiered_log").option("serviceUrl", service.url).option(
            "token", "spark-admin-token"
        ).option("topic", topic).mode("append").save()


def test_stream_copy_topic_to_topic(
    spark: Any,
    client: Client,
    tmp_path: Path,
    read_options: Callable[..., dict[str, str]],
    service: Any,
) -> None:
    """A streaming query reading one topic and writing another (the streaming writer)."""
    src = new_topic(client)
    dst = new_topic(client)
    produce(client, src, 0, 120)
    q = (
        spark.readStream.format("tiered_log")
        .options(**read_options(src, startingOffsets="earliest"))
        .load()
        .select("key", "value", "partition")
        .writeStream.format("tiered_log")
        .option("serviceUrl", service.url)
        .option("token", read_options(src)["token"])
        .option("topic", dst)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination(120)
    assert q.exception() is None
    # Tasks produce in parallel: every record arrives once, not in the source's order.
    assert sorted(_values(all_records(client, dst, 0))) == sorted(
        _values(all_records(client, src, 0))
    )
