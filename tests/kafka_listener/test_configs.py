"""DescribeConfigs and IncrementalAlterConfigs through librdkafka's AdminClient
(confluent-kafka) against a real server: a topic's settings under Kafka's names,
changed as the HTTP API changes them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourceType,
)
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType as KpResourceType
from kafka.admin import KafkaAdminClient
from kio.schema.errors import ErrorCode
from service.conftest import ServerProcess

from tiered_log.kafka.configs import DESCRIBE_CONFIGS

from .conftest import KafkaWire, create_topic, kafka_server

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


def test_configs_with_one_value_here_are_described_and_accepted_with_it(
    server: ServerProcess,
) -> None:
    """cleanup.policy and compression.type, which Kafka tools send at creation and which a
    legacy alter sends back as DescribeConfigs listed them: described with the one value
    this broker has, accepted with it at create and alter (nothing changes), refused with
    any other value, naming the config."""
    from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

    admin = _admin(server)
    fixed = {"cleanup.policy": "delete", "compression.type": "producer"}
    made = admin.create_topics([NewTopic("cfg-fixed", 1, 1, config=fixed)])
    made["cfg-fixed"].result(timeout=20)
    got = _describe(admin, "cfg-fixed")
    assert {k: got[k] for k in fixed} == fixed
    set_ = AlterConfigOpType.SET
    _alter(
        admin,
        "cfg-fixed",
        ConfigEntry("cleanup.policy", "delete", incremental_operation=set_),
        ConfigEntry("compression.type", "producer", incremental_operation=set_),
        ConfigEntry("retention.ms", "60000", incremental_operation=set_),
    )
    assert _describe(admin, "cfg-fixed")["retention.ms"] == "60000"
    for name, value in (("compression.type", "zstd"), ("cleanup.policy", "compact")):
        with pytest.raises(KafkaException) as info:
            _alter(admin, "cfg-fixed", ConfigEntry(name, value, incremental_operation=set_))
        assert name in str(info.value) and "only" in str(info.value)
        bad = admin.create_topics([NewTopic(f"cfg-bad-{value}", 1, 1, config={name: value})])
        with pytest.raises(KafkaException) as info:
            bad[f"cfg-bad-{value}"].result(timeout=20)
        assert name in str(info.value)
    # kafka-python's legacy alter sends back every config DescribeConfigs listed
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    kp = KafkaAdminClient(bootstrap_servers=server.kafka_bootstrap, request_timeout_ms=20_000)
    try:
        entries = {**_describe(admin, "cfg-fixed"), "retention.ms": "120000"}
        kp.alter_configs([KpResource(ConfigResourceType.TOPIC, "cfg-fixed", configs=entries)])
    finally:
        kp.close()
    assert _describe(admin, "cfg-fixed")["retention.ms"] == "120000"


def test_a_broker_is_described_with_its_topic_defaults_read_only(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """A broker's configs as Kafka names them: the topic defaults under their broker
    names (set in the settings: STATIC_BROKER_CONFIG; else DEFAULT_CONFIG), its id and
    CreateTopics' defaults, all read-only; the empty name (cluster-wide dynamic defaults)
    has none; another broker's id is refused."""
    for srv in kafka_server(
        tmp_path_factory, "broker-cfg", topic_defaults__retention_ms="86400000"
    ):
        admin = _admin(srv)
        res = ConfigResource(ResourceType.BROKER, "0")
        got = admin.describe_configs([res])[res].result(timeout=20)
        assert got["log.retention.ms"].value == "86400000"
        assert got["log.retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
        assert got["log.segment.bytes"].value == str(64 << 20)
        assert got["log.segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
        assert got["message.max.bytes"].value.isdigit()
        assert got["log.cleanup.policy"].value == "delete"
        assert got["broker.id"].value == "0" and got["num.partitions"].value == "1"
        assert got["default.replication.factor"].value == "1"
        assert Path(got["log.dirs"].value) == srv.data_dir.resolve()
        assert all(e.is_read_only for e in got.values())
        with KafkaWire(srv.kafka_bootstrap) as w:
            body = {
                "resources": [
                    {"resource_type": 4, "resource_name": name, "configuration_keys": None}
                    for name in ("", "7")
                ],
                "include_synonyms": False,
                "include_documentation": False,
            }
            empty, other = w.call(DESCRIBE_CONFIGS, 4, body).results
        assert (empty.error_code, list(empty.configs)) == (ErrorCode.none, [])
        assert other.error_code == ErrorCode.invalid_request
        assert "Unexpected broker id" in (other.error_message or "")
        kp = KafkaAdminClient(bootstrap_servers=srv.kafka_bootstrap)
        try:
            resp = kp.describe_configs(
                [KpConfigResource(KpResourceType.BROKER, "0")], config_filter="all"
            )
            assert resp["broker"]["0"]["log.retention.ms"]["value"] == "86400000"
            assert resp["broker"]["0"]["log.retention.ms"]["read_only"] is True
        finally:
            kp.close()
