"""DescribeConfigs and IncrementalAlterConfigs through librdkafka's AdminClient
(confluent-kafka) against a real server: a topic's settings under Kafka's names,
changed as the HTTP API changes them."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from service.conftest import ServerProcess

from .conftest import create_topic

pytestmark = pytest.mark.timeout(120)


def _admin(server: ServerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": server.kafka_bootstrap})


def _describe(admin: AdminClient, topic: str) -> dict[str, Any]:
    res = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([res])[res].result(timeout=20)
    return {name: e.value for name, e in entries.items()}


def _alter(admin: AdminClient, topic: str, *entries: ConfigEntry) -> None:
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=list(entries))
    admin.incremental_alter_configs([res])[res].result(timeout=20)


def test_describe_and_alter_with_kafka_names(server: ServerProcess) -> None:
    create_topic(server, "cfg-a", segment_bytes=1 << 20)
    admin = _admin(server)
    got = _describe(admin, "cfg-a")
    assert got["segment.bytes"] == str(1 << 20)
    assert got["retention.ms"] == "-1" and got["remote.storage.enable"] == "true"
    assert got["message.timestamp.type"] == "CreateTime"

    _alter(
        admin,
        "cfg-a",
        ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("local.retention.bytes", "0", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("segment.bytes", "", incremental_operation=AlterConfigOpType.DELETE),
    )
    got = _describe(admin, "cfg-a")
    assert got["retention.ms"] == "3600000" and got["local.retention.bytes"] == "0"
    assert got["segment.bytes"] == str(64 << 20)  # back to the default
    cfg = httpx.get(server.url + "/v1/topics/cfg-a", timeout=10).json()["config"]
    assert cfg["retention_ms"] == 3_600_000 and cfg["local_retention_bytes"] == 0


def test_bad_alters_are_refused_naming_the_key(server: ServerProcess) -> None:
    create_topic(server, "cfg-b")
    admin = _admin(server)
    set_ = AlterConfigOpType.SET
    for entry, word in (
        (ConfigEntry("cleanup.policy", "compact", incremental_operation=set_), "cleanup.policy"),
        (ConfigEntry("retention.ms", "soon", incremental_operation=set_), "retention.ms"),
        (ConfigEntry("segment.bytes", "10", incremental_operation=set_), "segment.bytes"),
        (ConfigEntry("remote.storage.enable", "false", incremental_operation=set_), "delete"),
    ):
        with pytest.raises(KafkaException) as info:
            _alter(admin, "cfg-b", entry)
        assert word in str(info.value)
    assert _describe(admin, "cfg-b")["retention.ms"] == "-1"  # nothing changed
    # KIP-950: turning tiering off with the remote data deleted, in one request.
    _alter(
        admin,
        "cfg-b",
        ConfigEntry("remote.storage.enable", "false", incremental_operation=set_),
        ConfigEntry("remote.log.delete.on.disable", "true", incremental_operation=set_),
    )
    assert _describe(admin, "cfg-b")["remote.storage.enable"] == "false"
