"""A Kafka consumer reading from the earliest offset crosses from the bucket into the
local segments without noticing: a real server with small segments, a local-directory
remote tier and no local retention, so most of the partition is only in the bucket."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Producer, TopicPartition
from service.conftest import ServerProcess

from .clients import confluent_consume, confluent_consumer
from .conftest import bounds, kafka_server, wait_until

BASE_TS = 1_760_000_000_000
N = 2000


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    bucket = tmp_path_factory.mktemp("bucket")
    yield from kafka_server(
        tmp_path_factory,
        "kafka-tiered",
        remote_url=str(bucket),
        ship_interval_ms="50",
        topic_defaults__segment_bytes="4096",
        topic_defaults__local_retention_bytes="0",
    )


def test_consumer_from_earliest_reads_archived_then_local(tiered: ServerProcess) -> None:
    topic = "archived"
    p = Producer(
        {
            "bootstrap.servers": tiered.kafka_bootstrap,
            "enable.idempotence": False,
            "linger.ms": 20,
            "batch.num.messages": 25,  # many batches: segments of 4 KiB roll between them
            "compression.type": "lz4",
        }
    )
    for i in range(N):
        p.produce(
            topic, value=b"record-%06d" % i, key=b"%d" % (i % 7), partition=0, timestamp=BASE_TS + i
        )
    assert p.flush(30) == 0
    wait_until(lambda: bounds(tiered, topic)["local_start_offset"] >= N // 2, 60, "local retention")
    b = bounds(tiered, topic)
    assert b["log_start_offset"] == 0 and b["local_start_offset"] > N // 2
    rows = confluent_consume(tiered.kafka_bootstrap, topic, 1, N)
    assert [(o, k, v) for _, o, k, v, _ in rows] == [
        (i, b"%d" % (i % 7), b"record-%06d" % i) for i in range(N)
    ]
    c = confluent_consumer(tiered.kafka_bootstrap)
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, N)
        archived, local = 100, N - 5  # by timestamp, in the bucket and on local disk
        got = c.offsets_for_times([TopicPartition(topic, 0, BASE_TS + archived)], timeout=10)
        assert got[0].offset == archived
        got = c.offsets_for_times([TopicPartition(topic, 0, BASE_TS + local)], timeout=10)
        assert got[0].offset == local
    finally:
        c.close()
