"""Batch reads by a real local SparkSession: both tiers, bounds, pushdown, data loss."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from tiered_log.client import Client
from tiered_log.errors import DataLossError
from tiered_log.format.records import ProducerRecord, Record

from .conftest import ADMIN, READER, new_topic, wait_for

pytestmark = pytest.mark.spark

BASE_TS = 1_700_000_000_000


def produce(
    client: Client,
    topic: str,
    partition: int,
    n: int,
    start: int = 0,
    ts: Callable[[int], int] = lambda i: BASE_TS + i * 1000,
) -> None:
    """``n`` records with keys, headers and spaced timestamps, in batches of 5 (about
    1.3 KB: a segment holds several, so its chunks, and the splits cut from them, are
    finer than a segment)."""
    for lo in range(start, start + n, 5):
        batch = [
            ProducerRecord(
                f"value-{partition}-{i:05d}-".encode() + b"x" * 200,
                key=f"k{i % 5}".encode() if i % 3 else None,
                headers=(("h", f"{i}".encode()), ("null", None)) if i % 2 else (),
                timestamp=ts(i),
            )
            for i in range(lo, min(lo + 5, start + n))
        ]
        client.produce(topic, partition, batch)


def all_records(client: Client, topic: str, partition: int) -> list[Record]:
    b = client.bounds(topic, partition)
    out: list[Record] = []
    off = b.log_start_offset
    while off < b.high_watermark:
        res = client.fetch(topic, partition, off, max_records=1000)
        out.extend(res.records)
        off = res.next_offset
    return out


def remote_state(service_url: str, topic: str, partition: int) -> dict[str, Any]:
    r = httpx.get(
        f"{service_url}/v1/topics/{topic}/partitions/{partition}/remote-segments",
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert r.status_code == 200, r.text
    d: dict[str, Any] = r.json()
    return d


@pytest.fixture(scope="module")
def two_tier_topic(service: Any) -> str:
    """2 partitions, 600 records each: most archived (remote only), a local-only tail."""
    with Client(service.url, ADMIN) as c:
        topic = new_topic(c, partitions=2, segment_bytes=16384)
        for p in (0, 1):
            produce(c, topic, p, 600)
        for p in (0, 1):

            def shipped(p: int = p) -> bool:
                return c.bounds(topic, p).local_start_offset > 300

            wait_for(shipped, "segments shipped and dropped locally")
    return topic


def rows_of(df: Any) -> list[Any]:
    return sorted(df.collect(), key=lambda r: (r.partition, r.offset))


def test_remote_segments_endpoint(service: Any, two_tier_topic: str) -> None:
    d = remote_state(service.url, two_tier_topic, 0)
    assert d["log_id"].startswith(f"{two_tier_topic}-") and d["log_id"].endswith("-0")
    assert d["remote_url"].startswith("s3://")
    assert d["log_start_offset"] == 0 and d["high_watermark"] == 600
    assert 0 < d["remote_end_offset"] < 600 and d["local_start_offset"] <= d["remote_end_offset"]
    segs = d["segments"]
    assert segs[0]["base_offset"] == 0 and segs[-1]["next_offset"] == d["remote_end_offset"]
    for a, b in itertools.pairwise(segs):
        assert a["next_offset"] == b["base_offset"]
    for s in segs:
        assert s["object_key"].endswith(".log") and s["size"] > 0
        chunks = s["chunks"]
        assert chunks[0][0] == s["base_offset"] and chunks[-1][1] == s["last_offset"]
        assert chunks[0][4] == 0 and sum(c[5] for c in chunks) == s["size"]
    # Read-grant auth, as the records endpoint.
    path = f"/v1/topics/{two_tier_topic}/partitions/0/remote-segments"
    assert httpx.get(service.url + path).status_code == 401
    r = httpx.get(service.url + path, headers={"Authorization": f"Bearer {READER}"})
    assert r.status_code == 403
    r = httpx.get(
        service.url + f"/v1/topics/{two_tier_topic}/partitions/9/remote-segments",
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert r.status_code == 404


def test_reads_both_tiers_exactly(
    spark: Any, client: Client, two_tier_topic: str, read_options: Callable[..., dict[str, str]]
) -> None:
    df = (
        spark.read.format("tiered_log")
        .options(**read_options(two_tier_topic, includeHeaders="true"))
        .load()
    )
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "headers"]
    rows = rows_of(df)
    assert len(rows) == 1200
    for p in (0, 1):
        got = [r for r in rows if r.partition == p]
        assert [r.offset for r in got] == list(range(600))
        want = all_records(client, two_tier_topic, p)
        for r, w in zip(got, want, strict=True):
            assert r.topic == two_tier_topic
            assert bytes(r.value) == w.value
            assert (bytes(r.key) if r.key is not None else None) == w.key
            assert int(r.timestamp.timestamp() * 1000) == w.timestamp
            headers = tuple(
                (h.key, bytes(h.value) if h.value is not None else None) for h in r.headers
            )
            assert headers == w.headers
    # Archive splits (one per segment) plus one tail per partition.
    st = [remote_state(client.base_url, two_tier_topic, p) for p in (0, 1)]
    assert df.rdd.getNumPartitions() == sum(len(s["segments"]) for s in st) + 2


def _offsets(df: Any) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for r in rows_of(df.select("partition", "offset")):
        out.setdefault(r.partition, []).append(r.offset)
    return out


def test_starting_and_ending_offsets(
    spark: Any, two_tier_topic: str, read_options: Callable[..., dict[str, str]]
) -> None:
    t = two_tier_topic
    df = (
        spark.read.format("tiered_log")
        .options(
            **read_options(
                t,
                startingOffsets=f'{{"{t}": {{"0": 123, "1": -2}}}}',
                endingOffsets=f'{{"{t}": {{"0": 550, "1": 17}}}}',
            )
        )
        .load()
    )
    got = _offsets(df)
    assert got == {0: list(range(123, 550)), 1: list(range(17))}
    df = (
        spark.read.format("tiered_log")
        .options(**read_options(t, startingOffsets="latest", endingOffsets="latest"))
        .load()
    )
    assert df.count() == 0


def test_starting_and_ending_timestamps(
    spark: Any, two_tier_topic: str, read_options: Callable[..., dict[str, str]]
) -> None:
    # Record i has timestamp BASE_TS + i s: [100 s, 450 s) is offsets [100, 450).
    df = (
        spark.read.format("tiered_log")
        .options(
            **read_options(
                two_tier_topic,
                partitions="1",
                startingTimestamp=str(BASE_TS + 100_000),
                endingTimestamp=str(BASE_TS + 450_000),
            )
        )
        .load()
    )
    assert _offsets(df) == {1: list(range(100, 450))}


def test_pushdown_prunes_segments(
    spark: Any, two_tier_topic: str, read_options: Callable[..., dict[str, str]]
) -> None:
    from pyspark.sql import functions as F

    df = (
        spark.read.format("tiered_log")
        .options(**read_options(two_tier_topic, filterPushdown="true"))
        .load()
    )
    full = df.rdd.getNumPartitions()
    st = remote_state(read_options(two_tier_topic)["serviceUrl"], two_tier_topic, 0)
    seg = st["segments"][1]
    one = df.filter(
        (F.col("partition") == 0)
        & (F.col("offset") >= seg["base_offset"])
        & (F.col("offset") <= seg["last_offset"])
    )
    assert one.rdd.getNumPartitions() == 1  # just that segment
    assert _offsets(one) == {0: list(range(seg["base_offset"], seg["next_offset"]))}
    tail = df.filter((F.col("partition") == 1) & (F.col("offset") >= 590))
    assert tail.rdd.getNumPartitions() == 1 < full  # just the tail
    assert _offsets(tail) == {1: list(range(590, 600))}
    since = dt.datetime.fromtimestamp((BASE_TS + 400_000) / 1000, dt.UTC)
    ts = df.filter(F.col("timestamp") >= F.lit(since))
    lo = 400  # record i has timestamp BASE_TS + i s
    assert ts.rdd.getNumPartitions() < full
    assert _offsets(ts) == {0: list(range(lo, 600)), 1: list(range(lo, 600))}


def test_without_pushdown_a_dataframe_is_reusable(
    spark: Any, two_tier_topic: str, read_options: Callable[..., dict[str, str]]
) -> None:
    """The default (no pushdown): a filtered query never changes what the same
    DataFrame returns next (pyspark 4.3 leaks pushed read plans; see tiered_log.spark)."""
    from pyspark.sql import functions as F

    df = spark.read.format("tiered_log").options(**read_options(two_tier_topic)).load()
    assert _offsets(df.filter((F.col("partition") == 1) & (F.col("offset") >= 590))) == {
        1: list(range(590, 600))
    }
    assert _offsets(df) == {0: list(range(600)), 1: list(range(600))}


def test_min_partitions_splits_segments(
    spark: Any, two_tier_topic: str, read_options: Callable[..., dict[str, str]]
) -> None:
    df = spark.read.format("tiered_log").options(**read_options(two_tier_topic)).load()
    n = df.rdd.getNumPartitions()
    more = (
        spark.read.format("tiered_log")
        .options(**read_options(two_tier_topic, minPartitions=str(n * 2)))
        .load()
    )
    assert more.rdd.getNumPartitions() >= n * 2
    assert _offsets(more) == {0: list(range(600)), 1: list(range(600))}


def test_bad_options_are_clear(
    spark: Any, two_tier_topic: str, read_options: Callable[..., dict[str, str]]
) -> None:
    for extra, msg in [
        ({"startingOffsets": "soonest"}, "startingOffsets"),
        ({"minPartitions": "0"}, "minPartitions"),
        ({"startOffsets": "earliest"}, "unknown tiered_log read option"),
    ]:
        with pytest.raises(Exception, match=msg):
            spark.read.format("tiered_log").options(
                **read_options(two_tier_topic, **extra)
            ).load().count()


def test_retention_data_loss(
    spark: Any, client: Client, service: Any, read_options: Callable[..., dict[str, str]]
) -> None:
    # Old records (1970) fall to 1-day retention as soon as they are shipped.
    topic = new_topic(client, retention_ms=86_400_000)
    produce(client, topic, 0, 200, ts=lambda i: 1_000_000 + i)
    wait_for(lambda: client.bounds(topic, 0).log_start_offset > 0, "retention")
    start = client.bounds(topic, 0).log_start_offset
    opts = read_options(topic, startingOffsets=f'{{"{topic}": {{"0": 0}}}}')
    with pytest.raises(Exception, match=r"removed by retention.*failOnDataLoss"):
        spark.read.format("tiered_log").options(**opts).load().count()
    df = spark.read.format("tiered_log").options(**{**opts, "failOnDataLoss": "false"}).load()
    end = client.bounds(topic, 0).high_watermark
    assert _offsets(df).get(0, []) == list(range(client.bounds(topic, 0).log_start_offset, end))
    assert start > 0


def test_segment_removed_after_planning(
    client: Client, read_options: Callable[..., dict[str, str]], s3_client: Any, spark_bucket: str
) -> None:
    """A segment deleted between planning and reading (retention racing the query)."""
    from pyspark.sql.datasource import InputPartition

    from tiered_log.spark.options import parse_read_options
    from tiered_log.spark.planning import ArchiveSplit
    from tiered_log.spark.source import TieredLogReader, source_schema

    topic = new_topic(client)
    produce(client, topic, 0, 300)
    wait_for(lambda: client.bounds(topic, 0).local_start_offset > 100, "shipping")
    for fail in (True, False):
        reader = TieredLogReader(
            parse_read_options(read_options(topic, failOnDataLoss=str(fail).lower())),
            source_schema(False),
        )
        splits: list[InputPartition] = reader.partitions()
        first = splits[0]
        assert isinstance(first, ArchiveSplit)
        s3_client.delete_object(Bucket=spark_bucket, Key=f"log/{first.object_key}")
        if fail:
            with pytest.raises(DataLossError, match=r"gone.*failOnDataLoss=false"):
                list(reader.read(first))
        else:
            assert list(reader.read(first)) == []
            rows = sum(b.num_rows for s in splits[1:] for b in reader.read(s))
            assert rows == 300 - (first.end - first.start)
