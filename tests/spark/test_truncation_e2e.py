"""Issue 14's truncation case end to end: a real service on moto's S3, the real client, Spark.

Produce 500 records, let them ship, truncate in the middle of the first chunk of the
second remote segment, produce 200 more and let them ship: the JSON fetch, the binary
consume, the timestamp lookup and a Spark read all serve the new records above the cut,
and none of the old ones (they came back before the fix: the clipped chunk was read to
its end).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tiered_log.client import Client
from tiered_log.format.records import ProducerRecord

from .conftest import ADMIN, new_topic, wait_for

pytestmark = pytest.mark.spark


def _produce(client: Client, topic: str, prefix: str, start: int, n: int) -> None:
    for lo in range(start, start + n, 10):
        client.produce(
            topic,
            0,
            [
                ProducerRecord(
                    f"{prefix}-{i:04d}-".encode() + b"v" * 90, timestamp=1_000_000 + i * 10
                )
                for i in range(lo, min(lo + 10, start + n))
            ],
        )


def _remote(url: str, topic: str) -> dict[str, Any]:
    r = httpx.get(
        f"{url}/v1/topics/{topic}/partitions/0/remote-segments",
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def test_truncation_inside_archived_chunk_then_appends(
    service: Any, client: Client, spark: Any, read_options: Any
) -> None:
    topic = new_topic(client, segment_bytes=16384)
    _produce(client, topic, "old", 0, 500)
    wait_for(
        lambda: (
            len(_remote(service.url, topic)["segments"]) >= 2
            and client.bounds(topic, 0).local_start_offset > 300
        ),
        "the first segments to ship",
    )
    second = _remote(service.url, topic)["segments"][1]
    first_chunk = second["chunks"][0]
    cut = (first_chunk[0] + first_chunk[1] + 1) // 2
    assert first_chunk[0] < cut <= first_chunk[1]
    client.truncate(topic, 0, cut)
    _produce(client, topic, "new", cut, 200)
    end = cut + 200
    wait_for(
        lambda: _remote(service.url, topic)["remote_end_offset"] > first_chunk[1] + 1,
        "the new records to ship past the old chunk's end",
    )

    def want(o: int) -> bytes:
        return f"{'old' if o < cut else 'new'}-{o:04d}-".encode() + b"v" * 90

    # JSON fetch from the chunk's first offset: below the cut old, from it new.
    h = {"Authorization": f"Bearer {ADMIN}"}
    body = httpx.get(
        f"{service.url}/v1/topics/{topic}/partitions/0/records",
        params={"offset": first_chunk[0], "max_records": 100},
        headers=h,
    ).json()
    got = [(r["offset"], r["value"].encode()) for r in body["records"]]
    assert got == [(o, want(o)) for o in range(first_chunk[0], first_chunk[0] + len(got))]
    assert body["next_offset"] == first_chunk[0] + len(got)
    # The binary consume from 0: dense, every record the current one.
    recs = [r for page in client.consume(topic, 0, 0, end_offset=end) for r in page.records]
    assert [(r.offset, r.value) for r in recs] == [(o, want(o)) for o in range(end)]
    # Timestamp lookup inside the cut chunk's range.
    assert client.offset_for_timestamp(topic, 0, 1_000_000 + cut * 10) == cut
    # Spark: exactly the high watermark's rows, once each.
    df = spark.read.format("tiered_log").options(**read_options(topic)).load()
    rows = sorted((r["offset"], bytes(r["value"])) for r in df.select("offset", "value").collect())
    assert rows == [(o, want(o)) for o in range(end)]
