"""The admin and compatibility APIs older tools and newer clients send, against a real
server: the legacy AlterConfigs (confluent-kafka's and kafka-python's ``alter_configs``,
raw requests for the exact answers), DescribeCluster (confluent-kafka's and
kafka-python's ``describe_cluster``), ListOffsets' leader epochs, and requests carrying
tagged fields this listener does not know (raw frames: they are skipped, as Kafka does;
a frame cut short still closes the connection). In a real three-node cluster the same
through any node: a legacy alter reaches every node through the metadata store,
DescribeCluster lists the brokers Metadata lists, ListOffsets answers the epochs of a
leader change."""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from cluster.conftest import dev_cluster
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    ResourceType,
)
from kafka.admin import ConfigResource as KpConfigResource
from kafka.admin import ConfigResourceType as KpResourceType
from kafka.admin import KafkaAdminClient
from kio.schema.errors import ErrorCode
from service.conftest import ServerProcess

from tiered_log.cluster.dev import DevCluster, DevNode
from tiered_log.kafka.admin import DESCRIBE_CLUSTER, DESCRIBE_LOG_DIRS
from tiered_log.kafka.configs import ALTER_CONFIGS
from tiered_log.kafka.messages import API_VERSIONS, METADATA

from .clients import Rec, confluent_consumer, confluent_produce
from .conftest import KafkaWire, create_topic, encode_request, kafka_server, wait_until
from .test_admin import _admin, _partition, kill_leader, list_offsets_partition
from .test_sasl import ADMIN, RO, TOKENS
from .test_sasl import create as create_sasl_topic
from .test_sasl import http as sasl_http
from .test_sasl import wire as sasl_wire

pytestmark = pytest.mark.timeout(120)

TOPIC, BROKER, BROKER_LOGGER = 2, 4, 8
DEFAULT_SEGMENT_BYTES = 64 << 20


def _describe(admin: AdminClient, topic: str) -> dict[str, str]:
    res = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([res])[res].result(timeout=20)
    return {name: e.value for name, e in entries.items()}


def _http_config(url: str, topic: str) -> dict[str, Any]:
    r = httpx.get(f"{url}/v1/topics/{topic}", timeout=10)
    r.raise_for_status()
    out: dict[str, Any] = r.json()["config"]
    return out


def alter_body(
    *resources: tuple[int, str, dict[str, str | None]], validate_only: bool = False
) -> dict[str, Any]:
    return {
        "resources": [
            {
                "resource_type": kind,
                "resource_name": name,
                "configs": [{"name": k, "value": v} for k, v in configs.items()],
            }
            for kind, name, configs in resources
        ],
        "validate_only": validate_only,
    }


def altered(w: KafkaWire, version: int, *resources: Any, **kw: Any) -> list[tuple[int, str]]:
    """Each resource's ``(error code, error message)`` of a raw AlterConfigs."""
    resp = w.call(ALTER_CONFIGS, version, alter_body(*resources, **kw))
    return [(r.error_code, r.error_message or "") for r in resp.responses]


def list_offsets(w: KafkaWire, topic: str, ts: int, version: int = 9) -> tuple[int, int, int]:
    """``(error code, offset, leader epoch)`` of a raw ListOffsets of partition 0."""
    p = list_offsets_partition(w, topic, ts, version)
    return p.error_code, p.offset, getattr(p, "leader_epoch", -1)  # v4+


# ---- AlterConfigs ---------------------------------------------------------------------------


def test_confluent_alter_configs_replaces_the_dynamic_set(server: ServerProcess) -> None:
    """The whole set given replaces the topic's dynamic configs: what is not given goes
    back to its default, as Kafka's AlterConfigs does."""
    create_topic(server, "ac-a", segment_bytes=1 << 20, retention_ms=3_600_000)
    admin = _admin(server.kafka_bootstrap)
    res = ConfigResource(
        ResourceType.TOPIC, "ac-a", set_config={"retention.bytes": "1000000", "flush.ms": "500"}
    )
    admin.alter_configs([res])[res].result(timeout=20)
    got = _describe(admin, "ac-a")
    assert got["retention.bytes"] == "1000000" and got["flush.ms"] == "500"
    assert got["segment.bytes"] == str(DEFAULT_SEGMENT_BYTES)  # not given: its default
    assert got["retention.ms"] == "-1"
    cfg = _http_config(server.url, "ac-a")
    assert (cfg["retention_bytes"], cfg["flush_ms"]) == (1_000_000, 500)
    assert (cfg["segment_bytes"], cfg["retention_ms"]) == (DEFAULT_SEGMENT_BYTES, None)

    bad = ConfigResource(ResourceType.TOPIC, "ac-a", set_config={"cleanup.policy": "compact"})
    with pytest.raises(KafkaException) as info:
        admin.alter_configs([bad])[bad].result(timeout=20)
    assert "cleanup.policy" in str(info.value)
    assert _http_config(server.url, "ac-a")["flush_ms"] == 500  # nothing changed


def test_kafka_python_alter_configs_legacy(server: ServerProcess) -> None:
    """kafka-python's ``alter_configs(incremental=False)`` sends AlterConfigs with the
    topic's other dynamic configs filled in (as it reads them from DescribeConfigs), so
    they are kept."""
    create_topic(server, "ac-kp", segment_bytes=1 << 20)
    admin = KafkaAdminClient(bootstrap_servers=server.kafka_bootstrap, request_timeout_ms=20_000)
    try:
        res = KpConfigResource(KpResourceType.TOPIC, "ac-kp", configs={"retention.ms": "7200000"})
        got = admin.alter_configs([res], incremental=False)
    finally:
        admin.close()
    assert "ac-kp" in str(got) and "Error" not in str(got), got
    cfg = _http_config(server.url, "ac-kp")
    assert (cfg["retention_ms"], cfg["segment_bytes"]) == (7_200_000, 1 << 20)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_raw_alter_configs_answers(server: ServerProcess, version: int) -> None:
    topic = f"ac-raw-{version}"
    create_topic(server, topic, segment_bytes=1 << 20)
    with KafkaWire(server.kafka_bootstrap) as w:
        # validate_only: checked, nothing changes
        assert altered(
            w, version, (TOPIC, topic, {"retention.ms": "60000"}), validate_only=True
        ) == [(ErrorCode.none, "")]
        assert _http_config(server.url, topic)["segment_bytes"] == 1 << 20
        ((code, msg),) = altered(w, version, (TOPIC, topic, {"retention.ms": "soon"}))
        assert code == ErrorCode.invalid_config and "retention.ms" in msg
        ((code, msg),) = altered(w, version, (TOPIC, topic, {"no.such.config": "1"}))
        assert code == ErrorCode.invalid_config and "no.such.config" in msg
        ((code, msg),) = altered(w, version, (TOPIC, topic, {"retention.ms": None}))
        assert code == ErrorCode.invalid_request and "Null value" in msg
        ((code, msg),) = altered(w, version, (TOPIC, "ac-missing", {"retention.ms": "1"}))
        assert code == ErrorCode.unknown_topic_or_partition and "ac-missing" in msg
        twice = altered(w, version, (TOPIC, topic, {}), (TOPIC, topic, {"flush.ms": "1"}))
        assert [c for c, _ in twice] == [ErrorCode.invalid_request] * 2
        # the broker's configs are read-only here; an empty set changes nothing
        ((code, msg),) = altered(w, version, (BROKER, "0", {"log.retention.ms": "1"}))
        assert code == ErrorCode.invalid_config and "log.retention.ms" in msg
        assert (
            altered(w, version, (BROKER, "0", {}), (BROKER, "", {})) == [(ErrorCode.none, "")] * 2
        )
        assert altered(w, version, (BROKER, "node-a", {}))[0][0] == ErrorCode.invalid_request
        assert altered(w, version, (BROKER_LOGGER, "0", {}))[0][0] == ErrorCode.invalid_request
        assert _http_config(server.url, topic)["segment_bytes"] == 1 << 20  # none applied
        # a topic's resource and a broker's in one request: each answered
        got = altered(w, version, (TOPIC, topic, {"flush.messages": "10"}), (BROKER, "0", {}))
        assert got == [(ErrorCode.none, ""), (ErrorCode.none, "")]
    cfg = _http_config(server.url, topic)
    assert (cfg["flush_messages"], cfg["segment_bytes"]) == (10, DEFAULT_SEGMENT_BYTES)


# ---- DescribeCluster ------------------------------------------------------------------------


def test_describe_cluster_single_node(server: ServerProcess) -> None:
    host, port = server.kafka_bootstrap.rsplit(":", 1)
    admin = _admin(server.kafka_bootstrap)  # kept until the answer is in
    got = admin.describe_cluster(request_timeout=20).result(timeout=30)
    assert [(n.id, n.host, n.port) for n in got.nodes] == [(0, host, int(port))]
    assert got.controller is not None and got.controller.id == 0
    assert got.cluster_id

    kp = KafkaAdminClient(bootstrap_servers=server.kafka_bootstrap, request_timeout_ms=20_000)
    try:
        desc = kp.describe_cluster()
    finally:
        kp.close()
    assert desc["cluster_id"] == got.cluster_id and desc["controller_id"] == 0
    assert [(b["broker_id"], b["port"]) for b in desc["brokers"]] == [(0, int(port))]

    with KafkaWire(server.kafka_bootstrap) as w:
        for version in (0, 1, 2):
            body = {"include_cluster_authorized_operations": False, "endpoint_type": 1}
            resp = w.call(DESCRIBE_CLUSTER, version, body | {"include_fenced_brokers": True})
            assert resp.error_code == ErrorCode.none and resp.cluster_id == got.cluster_id
            assert [(b.broker_id, b.port) for b in resp.brokers] == [(0, int(port))]
        body = {"include_cluster_authorized_operations": False, "endpoint_type": 2}
        resp = w.call(DESCRIBE_CLUSTER, 1, body)
        assert resp.error_code == ErrorCode.unsupported_endpoint_type and resp.error_message
        assert resp.brokers == ()


# ---- DescribeLogDirs ------------------------------------------------------------------------


def log_dirs(w: KafkaWire, version: int, topics: dict[str, list[int]] | None) -> Any:
    body = {
        "topics": None
        if topics is None
        else [{"topic": t, "partitions": ps} for t, ps in topics.items()]
    }
    return w.call(DESCRIBE_LOG_DIRS, version, body)


def test_describe_log_dirs(server: ServerProcess) -> None:
    """The data directory, each partition's size on the local disk (what was produced,
    the batches as stored) and Kafka's offset lag of a current log (0)."""
    create_topic(server, "ld-a", 2)
    recs: list[Rec] = [(0, None, b"x" * 100, []) for _ in range(10)]
    assert confluent_produce(server.kafka_bootstrap, "ld-a", recs) == [None] * 10
    with KafkaWire(server.kafka_bootstrap) as w:
        for version in (1, 4):
            resp = log_dirs(w, version, {"ld-a": [0, 1, 7], "ld-missing": [0]})
            (result,) = resp.results
            assert result.error_code == ErrorCode.none and result.log_dir.endswith("data")
            (topic,) = result.topics
            sizes = {p.partition_index: p.partition_size for p in topic.partitions}
            assert topic.name == "ld-a" and sorted(sizes) == [0, 1]
            assert sizes[0] > 10 * 100 and sizes[1] == 0
            assert all(p.offset_lag == 0 and not p.is_future_key for p in topic.partitions)
            if version == 4:
                assert result.total_bytes > result.usable_bytes > 0
        every = log_dirs(w, 4, None).results[0].topics
        assert "ld-a" in {t.name for t in every}
    kp = KafkaAdminClient(bootstrap_servers=server.kafka_bootstrap, request_timeout_ms=20_000)
    try:
        got = kp.describe_log_dirs({"ld-a": [0]})
    finally:
        kp.close()
    assert "ld-a" in str(got) and str(sizes[0]) in str(got), got


# ---- ListOffsets' leader epoch --------------------------------------------------------------


def test_list_offsets_leader_epoch_on_a_single_node(server: ServerProcess) -> None:
    """A single node leads every partition in epoch 0 (its Metadata says so): every
    offset found is answered with epoch 0, none found with -1."""
    topic = "lo-epoch"
    create_topic(server, topic)
    with KafkaWire(server.kafka_bootstrap) as w:
        assert list_offsets(w, topic, -1) == (ErrorCode.none, 0, 0)
        assert list_offsets(w, topic, 0) == (ErrorCode.none, -1, -1)  # no record yet
        recs: list[Rec] = [(0, None, b"v%d" % i, []) for i in range(5)]
        assert confluent_produce(server.kafka_bootstrap, topic, recs) == [None] * 5
        for ts, offset in ((-1, 5), (-2, 0), (-4, 0), (0, 0)):
            assert list_offsets(w, topic, ts) == (ErrorCode.none, offset, 0), ts
        code, offset, epoch = list_offsets(w, topic, -3)  # the largest timestamp's record
        assert (code, epoch) == (ErrorCode.none, 0) and 0 <= offset < 5
        assert list_offsets(w, topic, 1 << 50) == (ErrorCode.none, -1, -1)
        assert list_offsets(w, topic, -1, version=1)[:2] == (ErrorCode.none, 5)
    c = confluent_consumer(server.kafka_bootstrap)  # librdkafka reads the epoch too
    try:
        (tp,) = c.offsets_for_times([TopicPartition(topic, 0, 0)], timeout=20)
    finally:
        c.close()
    assert (tp.error, tp.offset, tp.leader_epoch) == (None, 0, 0)


# ---- unknown tagged fields ------------------------------------------------------------------


def _frame(api_key: int, version: int, body: dict[str, Any], correlation_id: int) -> bytes:
    """A request frame without its size: header v2 (client id ``tests``), then the body."""
    return encode_request(api_key, version, correlation_id, body)[4:]


_HEAD_LEN = 2 + 2 + 4 + 2 + len("tests")  # up to the header's tagged-field count
_TAG_99 = bytes([1, 99, 3]) + b"new"  # one tagged field: tag 99, 3 bytes


def _send(w: KafkaWire, frame: bytes) -> None:
    w.sock.sendall(struct.pack(">i", len(frame)) + frame)


def test_unknown_tagged_fields_are_skipped(server: ServerProcess) -> None:
    """Tagged fields a newer client may send (unknown to this version's spec) in the
    header, the body and a structure inside it are skipped, as Kafka's broker skips
    them; a frame cut inside one still closes the connection."""
    create_topic(server, "tag-a")
    metadata = {
        "topics": [{"topic_id": uuid.UUID(int=0), "name": "tag-a"}],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False,
    }
    with KafkaWire(server.kafka_bootstrap) as w:
        # ApiVersions v3: the tag in its body (whose tagged fields come last)
        frame = _frame(
            API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}, 1
        )
        assert frame[-1] == 0
        _send(w, frame[:-1] + _TAG_99)
        cid, resp = w.receive(API_VERSIONS, 3)
        assert cid == 1 and resp.error_code == ErrorCode.none
        assert any(k.api_key == METADATA for k in resp.api_keys)
        # Metadata v12: tags in the header and in the topic's structure
        frame = _frame(METADATA, 12, metadata, 2)
        assert frame[_HEAD_LEN] == 0
        at = frame.index(b"tag-a") + len(b"tag-a")  # the topic's tagged-field count
        assert frame[at] == 0
        frame = frame[:_HEAD_LEN] + _TAG_99 + frame[_HEAD_LEN + 1 : at] + _TAG_99 + frame[at + 1 :]
        _send(w, frame)
        cid, resp = w.receive(METADATA, 12)
        assert cid == 2 and [(t.name, t.error_code) for t in resp.topics] == [
            ("tag-a", ErrorCode.none)
        ]
        assert len(resp.topics[0].partitions) == 1
        # the same connection goes on
        assert w.call(METADATA, 12, metadata).topics[0].name == "tag-a"
    with KafkaWire(server.kafka_bootstrap) as w:  # a tag whose size runs past the frame
        frame = _frame(
            API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}, 3
        )
        _send(w, frame[:-1] + bytes([1, 99, 40]) + b"short")
        assert w.closed_by_server()
    with KafkaWire(server.kafka_bootstrap) as w:  # the server serves on
        assert w.call(METADATA, 12, metadata).topics[0].error_code == ErrorCode.none


# ---- with tokens ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sasl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from kafka_server(tmp_path_factory, "kafka-compat-sasl", auth_tokens=json.dumps(TOKENS))


def test_grants_of_alter_configs_describe_cluster_and_log_dirs(sasl_server: ServerProcess) -> None:
    """AlterConfigs of a topic takes ``admin`` on it (HTTP's PATCH), DescribeCluster any
    token (Metadata lists the brokers to any), DescribeLogDirs ``admin`` on every topic
    (else CLUSTER_AUTHORIZATION_FAILED, as Kafka answers one without cluster rights)."""
    topic = create_sasl_topic(sasl_server, "app.compat")
    alter = (TOPIC, topic, {"retention.ms": "60000"})
    cluster = {"include_cluster_authorized_operations": False, "endpoint_type": 1}
    with sasl_wire(sasl_server, RO) as w:
        ((code, msg),) = altered(w, 2, alter)
        assert code == ErrorCode.topic_authorization_failed and msg
        assert w.call(DESCRIBE_CLUSTER, 1, cluster).error_code == ErrorCode.none
        denied = log_dirs(w, 4, None)
        assert (denied.error_code, denied.results) == (ErrorCode.cluster_authorization_failed, ())
        assert log_dirs(w, 1, None).results == ()  # v1 has no error code: no directory
    with sasl_wire(sasl_server, ADMIN) as w:
        assert altered(w, 2, alter) == [(ErrorCode.none, "")]
        assert log_dirs(w, 4, {topic: [0]}).results[0].topics[0].name == topic
    with sasl_http(sasl_server) as c:
        assert c.get(f"/v1/topics/{topic}").json()["config"]["retention_ms"] == 60_000


# ---- a cluster ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    yield from dev_cluster(tmp_path_factory, {"TIERED_LOG_CLUSTER_LEASE_TTL_S": "2"})


def _create(cluster: DevCluster, name: str, **fields: Any) -> None:
    r = httpx.post(
        f"{cluster.urls[0]}/v1/topics", json={"name": name, "partitions": 1, **fields}, timeout=10
    )
    assert r.status_code == 201, r.text


def test_cluster_describe_cluster_and_legacy_alter(cluster: DevCluster) -> None:
    with KafkaWire(cluster.nodes[1].kafka_address) as w:
        body = {"topics": [], "allow_auto_topic_creation": False}
        meta = w.call(METADATA, 12, body | {"include_topic_authorized_operations": False})
    listed = sorted((b.node_id, b.host, b.port) for b in meta.brokers)
    assert len(listed) == 3
    admin = _admin(cluster.bootstrap)
    got = admin.describe_cluster(request_timeout=20).result(timeout=30)
    assert sorted((n.id, n.host, n.port) for n in got.nodes) == listed
    assert got.cluster_id == meta.cluster_id and got.controller is not None

    single = "ld-cluster"
    _create(cluster, single, replication_factor=1)
    wait_until(lambda: _partition(cluster, single)["leader"] in (1, 2, 3), 20, "a leader")
    holder = _partition(cluster, single)["replicas"]
    for n in cluster.nodes.values():

        def knows_the_topic(n: DevNode = n) -> bool:
            return httpx.get(f"{n.url}/v1/topics/{single}", timeout=10).status_code == 200

        wait_until(knows_the_topic, 20, f"node {n.node_id} knows the topic")
        with KafkaWire(n.kafka_address) as w:

            def log_dir_applied(w: KafkaWire = w, n: DevNode = n) -> bool:
                return (single in {t.name for t in log_dirs(w, 4, None).results[0].topics}) == (
                    n.node_id in holder
                )

            # each node applies the topic at its next metadata round
            wait_until(log_dir_applied, 20, f"node {n.node_id}'s log dir")

    topic = "ac-cluster"
    _create(cluster, topic, config={"segment_bytes": 1 << 20})
    other = cluster.nodes[3]
    for n in cluster.nodes.values():  # each node applies a new topic at its next metadata round

        def knows_it(n: DevNode = n) -> bool:
            return httpx.get(f"{n.url}/v1/topics/{topic}", timeout=10).status_code == 200

        wait_until(knows_it, 20, f"node {n.node_id} knows the topic")
    with KafkaWire(other.kafka_address) as w:  # any node takes it: the metadata store
        assert altered(w, 2, (TOPIC, topic, {"retention.ms": "90000"})) == [(ErrorCode.none, "")]
    for n in cluster.nodes.values():

        def applies_the_alter(n: DevNode = n) -> bool:
            retention_ms: int = _http_config(n.url, topic)["retention_ms"]
            return retention_ms == 90_000

        wait_until(applies_the_alter, 20, f"node {n.node_id} applies the alter")
        assert _http_config(n.url, topic)["segment_bytes"] == DEFAULT_SEGMENT_BYTES


def test_cluster_list_offsets_leader_epochs_across_a_leader_change(cluster: DevCluster) -> None:
    """The leader answers the epoch each offset was written in, from its leader-epoch
    file: after a leader change the latest is the new epoch, the earliest the old."""
    topic = "lo-epoch-c"
    _create(cluster, topic, replication_factor=3)
    wait_until(lambda: len(_partition(cluster, topic)["isr"]) == 3, 30, "a full ISR")
    part = _partition(cluster, topic)
    leader, epoch = part["leader"], part["leader_epoch"]
    first: list[Rec] = [(0, None, b"a%d" % i, []) for i in range(10)]
    assert confluent_produce(cluster.bootstrap, topic, first, acks="all") == [None] * 10
    with KafkaWire(cluster.nodes[leader].kafka_address) as w:
        assert list_offsets(w, topic, -1) == (ErrorCode.none, 10, epoch)
        assert list_offsets(w, topic, -2) == (ErrorCode.none, 0, epoch)
    victim = cluster.nodes[leader]
    try:
        new_leader, new_epoch = kill_leader(cluster, topic, leader, epoch)
        second: list[Rec] = [(0, None, b"b%d" % i, []) for i in range(10)]
        assert confluent_produce(cluster.bootstrap, topic, second, acks="all") == [None] * 10
        with KafkaWire(cluster.nodes[new_leader].kafka_address) as w:
            assert list_offsets(w, topic, -1) == (ErrorCode.none, 20, new_epoch)
            assert list_offsets(w, topic, -2) == (ErrorCode.none, 0, epoch)
            code, offset, got_epoch = list_offsets(w, topic, -3)
            assert (code, got_epoch) == (ErrorCode.none, new_epoch) and 10 <= offset < 20
    finally:
        victim.start(wait_s=90)
