"""Real Kafka clients (librdkafka through confluent-kafka, aiokafka, kafka-python)
against a real ``tiered-log serve``: each produces with keys, headers, null keys and null
values (tombstones) in every codec it supports and reads back exactly what it sent; acks
0, 1 and all; offset lookups; auto-creation; the log stores what a client sent
(compressed batches stay compressed)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from confluent_kafka import KafkaError, TopicPartition
from service.conftest import ServerProcess

from .clients import (
    CODECS,
    Rec,
    aiokafka_roundtrip,
    confluent_consume,
    confluent_consumer,
    confluent_produce,
    expected,
    kafka_python_roundtrip,
    sample,
)
from .conftest import bounds, create_topic, kafka_server


@pytest.mark.parametrize("codec", CODECS)
def test_confluent_produces_each_codec_and_consumes_exactly(
    server: ServerProcess, codec: str
) -> None:
    topic = f"cf-{codec}"
    create_topic(server, topic, partitions=2)
    recs = sample(300, 2, codec)
    errors = confluent_produce(
        server.kafka_bootstrap, topic, recs, **{"compression.type": codec, "acks": "all"}
    )
    assert errors == [None] * len(recs)
    assert confluent_consume(server.kafka_bootstrap, topic, 2, len(recs)) == expected(recs)


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_produces_each_codec_and_consumes_exactly(
    server: ServerProcess, codec: str
) -> None:
    topic = f"aio-{codec}"
    create_topic(server, topic, partitions=2)
    recs = sample(200, 2, codec)
    assert aiokafka_roundtrip(server.kafka_bootstrap, topic, recs, 2, codec) == expected(recs)


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_produces_each_codec_and_consumes_exactly(
    server: ServerProcess, codec: str
) -> None:
    topic = f"kp-{codec}"
    create_topic(server, topic, partitions=2)
    recs = sample(200, 2, codec)
    assert kafka_python_roundtrip(server.kafka_bootstrap, topic, recs, 2, codec) == expected(recs)


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_confluent_acks(server: ServerProcess, acks: str) -> None:
    """Every acks level stores every record once (acks=0 has no answer to wait for, so
    the consumer reads until it has them all)."""
    topic = f"acks-{acks}"
    create_topic(server, topic)
    recs = sample(100, 1, f"acks{acks}")
    errors = confluent_produce(server.kafka_bootstrap, topic, recs, acks=acks)
    assert errors == [None] * len(recs)
    assert confluent_consume(server.kafka_bootstrap, topic, 1, len(recs)) == expected(recs)
    time.sleep(0.3)  # nothing more arrives
    assert bounds(server, topic)["next_offset"] == len(recs)


def test_offsets_lookups_through_the_clients(server: ServerProcess) -> None:
    topic = "lookups"
    create_topic(server, topic)
    base = 1_750_000_000_000
    recs: list[Rec] = [(0, b"k", b"v%d" % i, []) for i in range(10)]
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": server.kafka_bootstrap, "enable.idempotence": False})
    for i, (_, k, v, _) in enumerate(recs):
        p.produce(topic, value=v, key=k, partition=0, timestamp=base + 1000 * i)
    assert p.flush(20) == 0
    c = confluent_consumer(server.kafka_bootstrap)
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 10)
        (found,) = c.offsets_for_times([TopicPartition(topic, 0, base + 4500)], timeout=10)
        assert found.offset == 5 and found.error is None
        (late,) = c.offsets_for_times([TopicPartition(topic, 0, base + 60_000)], timeout=10)
        assert late.offset == -1  # none at or after: the end
    finally:
        c.close()
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KpTP

    kc = KafkaConsumer(bootstrap_servers=server.kafka_bootstrap, request_timeout_ms=10_000)
    try:
        tp = KpTP(topic, 0)
        assert kc.beginning_offsets([tp], timeout_ms=10_000) == {tp: 0}
        assert kc.end_offsets([tp], timeout_ms=10_000) == {tp: 10}
        got = kc.offsets_for_times({tp: base + 2000}, timeout_ms=10_000)[tp]
        assert (got.offset, got.timestamp) == (2, base + 2000)
    finally:
        kc.close()


def test_producing_to_a_new_topic_creates_it(server: ServerProcess) -> None:
    errors = confluent_produce(server.kafka_bootstrap, "auto-made", [(0, b"k", b"v", [])])
    assert errors == [None]
    t = httpx.get(f"{server.url}/v1/topics/auto-made", timeout=10).json()
    assert t["partitions"] == 1


def test_tombstones_and_empty_values_round_trip(server: ServerProcess) -> None:
    """A null value (a tombstone) and an empty one are stored as sent and read back as
    sent, told apart, by a Kafka consumer and in the HTTP API's JSON."""
    topic = "tombstones"
    create_topic(server, topic)
    recs = [
        (0, b"gone", None, []),
        (0, b"empty", b"", []),
        (0, None, b"", [("h", b"")]),
        (0, b"kept", b"v", []),
    ]
    errors = confluent_produce(server.kafka_bootstrap, topic, recs)
    assert errors == [None] * len(recs)
    rows = confluent_consume(server.kafka_bootstrap, topic, 1, len(recs))
    assert [(r[2], r[3]) for r in rows] == [
        (b"gone", None),
        (b"empty", b""),
        (None, b""),
        (b"kept", b"v"),
    ]
    assert bounds(server, topic)["next_offset"] == 4
    js = httpx.get(
        f"{server.url}/v1/topics/{topic}/partitions/0/records", params={"offset": 0}, timeout=10
    ).json()["records"]
    assert [(j["key"], j["value"]) for j in js] == [
        ("gone", None),
        ("empty", ""),
        (None, ""),
        ("kept", "v"),
    ]


@pytest.fixture(scope="module")
def no_auto_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from kafka_server(tmp_path_factory, "kafka-no-auto", kafka_auto_create_topics="false")


def test_without_auto_creation_an_unknown_topic_is_an_error(
    no_auto_server: ServerProcess,
) -> None:
    srv = no_auto_server
    errors = confluent_produce(
        srv.kafka_bootstrap,
        "not-there",
        [(0, None, b"v", [])],
        **{"message.timeout.ms": 3000, "topic.metadata.propagation.max.ms": 1000},
    )
    (err,) = errors
    assert err is not None and err.code() in (
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._MSG_TIMED_OUT,
    ), err
    assert httpx.get(f"{srv.url}/v1/topics/not-there", timeout=10).status_code == 404
    c = confluent_consumer(srv.kafka_bootstrap)
    try:
        md = c.list_topics("not-there", timeout=10)
        assert md.topics["not-there"].error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    finally:
        c.close()
