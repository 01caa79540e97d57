"""A topic's ``max_message_bytes`` (Kafka's ``max.message.bytes``): the largest record
batch a produce may append, as sent (after the producer's compression). Enforced on a
Kafka Produce (MESSAGE_TOO_LARGE, through librdkafka), on the HTTP API's JSON, raw
and record-batch bodies (413 naming the limit), nothing appended; described and altered
under Kafka's name (DescribeConfigs, IncrementalAlterConfigs) and over HTTP (PATCH)."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
)
from service.conftest import ServerProcess

from tiered_log.format.batch_encode import encode_batch
from tiered_log.format.records import ProducerRecord

from .conftest import create_topic
from .test_configs import _alter, _describe

pytestmark = pytest.mark.timeout(120)

LIMIT = 2048
BIG = b"x" * 1000 + bytes(range(256)) * 12  # 4,072 bytes, compresses well under LIMIT


def _produce(server: ServerProcess, topic: str, value: bytes, **conf: Any) -> KafkaError | None:
    """Produce one record through librdkafka; the delivery error (None: appended)."""
    got: list[KafkaError | None] = []
    p = Producer(
        {
            "bootstrap.servers": server.kafka_bootstrap,
            "linger.ms": 0,
            "message.timeout.ms": 20000,
            **conf,
        }
    )
    p.produce(topic, value, partition=0, on_delivery=lambda err, _msg: got.append(err))
    deadline = time.monotonic() + 30
    while not got and time.monotonic() < deadline:
        p.poll(0.2)
    p.flush(5)
    assert got, "no delivery report"
    return got[0]


def _end(server: ServerProcess, topic: str) -> int:
    r = httpx.get(f"{server.url}/v1/topics/{topic}/partitions/0/bounds", timeout=10)
    return int(r.json()["next_offset"])


def _refused(r: httpx.Response) -> str:
    assert r.status_code == 413, r.text
    msg = str(r.json()["error"]["message"])
    assert "max_message_bytes" in msg and str(LIMIT) in msg
    return msg


def test_max_message_bytes_on_every_produce_path(server: ServerProcess) -> None:
    create_topic(server, "mmb", max_message_bytes=LIMIT)
    admin = AdminClient({"bootstrap.servers": server.kafka_bootstrap})
    assert _describe(admin, "mmb")["max.message.bytes"] == str(LIMIT)

    # Kafka: too large uncompressed; the same value compressed fits; a small one fits.
    err = _produce(server, "mmb", BIG)
    assert err is not None and err.code() == KafkaError.MSG_SIZE_TOO_LARGE, err
    assert _end(server, "mmb") == 0  # nothing appended
    assert _produce(server, "mmb", BIG, **{"compression.type": "gzip"}) is None
    assert _produce(server, "mmb", b"small") is None
    assert _end(server, "mmb") == 2

    # HTTP: a JSON record, a raw body, a client's record batch.
    url = f"{server.url}/v1/topics/mmb/partitions/0/records"
    assert "record 1" in _refused(
        httpx.post(url, json={"records": [{"value": "v"}, {"value": "y" * 3000}]})
    )
    _refused(httpx.post(url, content=BIG, headers={"content-type": "application/octet-stream"}))
    frames = encode_batch(0, [ProducerRecord(BIG)], 1000, 1 << 20).data
    _refused(
        httpx.post(
            url,
            content=bytes(frames),
            headers={"content-type": "application/vnd.tiered-log.frames"},
        )
    )
    assert _end(server, "mmb") == 2
    r = httpx.post(url, json={"records": [{"value": "y" * 1500}]})
    assert r.status_code == 200, r.text

    # Altered under Kafka's name: the larger value goes in; described with its value.
    _alter(
        admin,
        "mmb",
        ConfigEntry("max.message.bytes", "8192", incremental_operation=AlterConfigOpType.SET),
    )
    assert _describe(admin, "mmb")["max.message.bytes"] == "8192"
    assert _produce(server, "mmb", BIG) is None
    assert _end(server, "mmb") == 4

    # Over HTTP: PATCH sets it; a value below one record's batch is refused, naming it.
    r = httpx.patch(f"{server.url}/v1/topics/mmb", json={"config": {"max_message_bytes": 10}})
    assert r.status_code in (400, 422) and "max_message_bytes" in r.text
    r = httpx.patch(f"{server.url}/v1/topics/mmb", json={"config": {"max_message_bytes": LIMIT}})
    assert r.status_code == 200 and r.json()["config"]["max_message_bytes"] == LIMIT
    assert _describe(admin, "mmb")["max.message.bytes"] == str(LIMIT)
    _refused(httpx.post(url, content=BIG, headers={"content-type": "application/octet-stream"}))
