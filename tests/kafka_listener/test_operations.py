"""What admin clients ask of producers, groups and authorized operations: DescribeProducers
(the idempotent producers a partition knows), the authorized operations
(KIP-430) of a topic in Metadata, of the cluster in DescribeCluster and Metadata, of a
group in DescribeGroups (without tokens every operation the resource supports, as
Kafka's broker without an authorizer; with tokens what the token's grants allow), and
ListGroups by state and by type. Real servers, confluent-kafka and kafka-python, raw
frames for the exact bit sets; every call bounded in time."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicCollection
from confluent_kafka.admin import AclOperation, AdminClient  # type: ignore[attr-defined]
from kafka import TopicPartition as KpPartition
from kafka.admin import KafkaAdminClient
from kio.schema.errors import ErrorCode
from service.conftest import ServerProcess

from tiered_log.kafka.acls import DESCRIBE_ACLS
from tiered_log.kafka.admin import DESCRIBE_CLUSTER
from tiered_log.kafka.groups.handlers import DESCRIBE_GROUPS
from tiered_log.kafka.messages import METADATA
from tiered_log.kafka.producers import DESCRIBE_PRODUCERS

from .clients import Rec, confluent_produce
from .conftest import TIMEOUT_S, KafkaWire, create_topic, kafka_server, wait_until
from .test_sasl import ADMIN, OTHER, RO, RW, TOKENS
from .test_sasl import create as create_sasl_topic
from .test_sasl import wire as sasl_wire

pytestmark = pytest.mark.timeout(120)

Op = AclOperation
TOPIC_ALL = {
    Op.READ,
    Op.WRITE,
    Op.CREATE,
    Op.DELETE,
    Op.ALTER,
    Op.DESCRIBE,
    Op.DESCRIBE_CONFIGS,
    Op.ALTER_CONFIGS,
}
CLUSTER_ALL = {
    Op.CREATE,
    Op.ALTER,
    Op.DESCRIBE,
    Op.CLUSTER_ACTION,
    Op.DESCRIBE_CONFIGS,
    Op.ALTER_CONFIGS,
    Op.IDEMPOTENT_WRITE,
}
GROUP_ALL = {Op.READ, Op.DESCRIBE, Op.DELETE}
NOT_ASKED = -(2**31)


def ops_of(bits: int) -> set[AclOperation]:
    """The operations an int32 bit set names (written here from KIP-430's layout)."""
    assert bits != NOT_ASKED and bits >= 0, bits
    return {op for op in AclOperation if op.value > 2 and bits & (1 << op.value)}


@pytest.fixture(scope="module")
def sasl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from kafka_server(tmp_path_factory, "kafka-ops-sasl", auth_tokens=json.dumps(TOKENS))


@pytest.fixture(scope="module")
def admin(server: ServerProcess) -> Iterator[AdminClient]:
    yield AdminClient({"bootstrap.servers": server.kafka_bootstrap})


def test_confluent_admin_gets_every_operation_without_tokens(
    server: ServerProcess, admin: AdminClient
) -> None:
    create_topic(server, "ops-topic", partitions=2)
    confluent_produce(
        server.kafka_bootstrap, "ops-topic", [(0, None, b"a", []), (1, None, b"b", [])]
    )
    group = "ops-group"
    c = Consumer(
        {
            "bootstrap.servers": server.kafka_bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 6000,
        }
    )
    try:
        c.subscribe(["ops-topic"])
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and c.poll(0.2) is None:
            pass
        topics = TopicCollection(["ops-topic"])
        asked = admin.describe_topics(topics, include_authorized_operations=True)
        t = asked["ops-topic"].result(TIMEOUT_S)
        assert set(t.authorized_operations) == TOPIC_ALL
        plain = admin.describe_topics(topics, request_timeout=TIMEOUT_S)
        assert plain["ops-topic"].result(TIMEOUT_S).authorized_operations is None
        cl = admin.describe_cluster(include_authorized_operations=True).result(TIMEOUT_S)
        assert set(cl.authorized_operations) == CLUSTER_ALL
        assert admin.describe_cluster().result(TIMEOUT_S).authorized_operations is None
        g = admin.describe_consumer_groups([group], include_authorized_operations=True)
        described = g[group].result(TIMEOUT_S)
        assert set(described.authorized_operations) == GROUP_ALL
        # The member's host as Kafka names it.
        assert [m.host for m in described.members] == ["/127.0.0.1"]
        g = admin.describe_consumer_groups([group])
        assert g[group].result(TIMEOUT_S).authorized_operations is None
        listed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
        assert listed[group].result(TIMEOUT_S).group_id == group
    finally:
        c.close()


def test_kafka_python_describe_groups_gets_the_group_operations(server: ServerProcess) -> None:
    create_topic(server, "ops-kp")
    group = "ops-kp-group"
    c = Consumer(
        {
            "bootstrap.servers": server.kafka_bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
        }
    )
    ka = KafkaAdminClient(bootstrap_servers=server.kafka_bootstrap, request_timeout_ms=10_000)
    try:
        c.subscribe(["ops-kp"])

        def stable() -> bool:
            c.poll(0.1)
            return bool(ka.describe_groups([group])[group]["group_state"] == "Stable")

        wait_until(stable, 20, "the group to be stable")
        got = ka.describe_groups([group], include_authorized_operations=True)[group]
        assert {AclOperation[name] for name in got["authorized_operations"]} == GROUP_ALL, got
        assert [m["client_host"] for m in got["members"]] == ["/127.0.0.1"]
    finally:
        c.close()
        ka.close()


def test_a_tokens_operations_are_its_grants(sasl_server: ServerProcess) -> None:
    """Raw frames with tokens: the read-only token reads, describes and describes the
    configs of its topics; read-write adds WRITE (and IDEMPOTENT_WRITE on the cluster);
    admin on ``*`` gets everything."""
    topic = create_sasl_topic(sasl_server, "app.ops")
    body = {
        "topics": [{"name": topic, "topic_id": None}],
        "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": True,
        "include_topic_authorized_operations": True,
    }
    cluster = {"include_cluster_authorized_operations": True, "endpoint_type": 1}
    groups = {"groups": ["no-such-group"], "include_authorized_operations": True}
    expect = {
        RO: (
            {Op.READ, Op.DESCRIBE, Op.DESCRIBE_CONFIGS},
            {Op.DESCRIBE},
            {Op.READ, Op.DESCRIBE},
        ),
        RW: (
            {Op.READ, Op.WRITE, Op.DESCRIBE, Op.DESCRIBE_CONFIGS},
            {Op.DESCRIBE, Op.IDEMPOTENT_WRITE},
            {Op.READ, Op.DESCRIBE},
        ),
        ADMIN: (TOPIC_ALL, CLUSTER_ALL, GROUP_ALL),
    }
    for token, (topic_ops, cluster_ops, group_ops) in expect.items():
        with sasl_wire(sasl_server, token) as w:
            md = w.call(METADATA, 10, body)
            (row,) = md.topics
            assert ops_of(row.topic_authorized_operations) == topic_ops, token
            assert ops_of(md.cluster_authorized_operations) == cluster_ops, token
            described = w.call(DESCRIBE_CLUSTER, 1, cluster)
            assert ops_of(described.cluster_authorized_operations) == cluster_ops, token
            (g,) = w.call(DESCRIBE_GROUPS, 5, groups).groups
            assert ops_of(g.authorized_operations) == group_ops, token
            # Not asked: INT32_MIN, whatever the grants.
            quiet = {
                **body,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            }
            md = w.call(METADATA, 10, quiet)
            assert md.topics[0].topic_authorized_operations == NOT_ASKED
            assert md.cluster_authorized_operations == NOT_ASKED


def test_list_groups_by_state_and_type(server: ServerProcess, admin: AdminClient) -> None:
    """ListGroups v5: every group is classic (confluent-kafka's ``type``), a type filter
    naming only KIP-848's types lists none; the state filter as before."""
    from confluent_kafka import ConsumerGroupState, ConsumerGroupType

    create_topic(server, "ops-list")
    group = "ops-list-group"
    c = Consumer({"bootstrap.servers": server.kafka_bootstrap, "group.id": group})
    ka = KafkaAdminClient(bootstrap_servers=server.kafka_bootstrap, request_timeout_ms=10_000)
    try:
        c.subscribe(["ops-list"])

        def listed(**kw: object) -> dict[str, tuple[object, object]]:
            got = admin.list_consumer_groups(request_timeout=TIMEOUT_S, **kw).result(TIMEOUT_S)
            return {g.group_id: (g.state, g.type) for g in got.valid}

        def stable() -> bool:
            c.poll(0.1)
            return listed().get(group, (None,))[0] == ConsumerGroupState.STABLE

        wait_until(stable, 20, "the group to be listed as stable")
        assert listed()[group] == (ConsumerGroupState.STABLE, ConsumerGroupType.CLASSIC)
        assert group in listed(types={ConsumerGroupType.CLASSIC})
        assert listed(types={ConsumerGroupType.CONSUMER}) == {}
        assert group not in listed(states={ConsumerGroupState.EMPTY})
        rows = {g["group_id"]: g for g in ka.list_groups(types_filter=["classic"])}
        assert rows[group]["group_state"] == "Stable" and rows[group]["protocol_type"] == "consumer"
        assert ka.list_groups(types_filter=["consumer"]) == []
    finally:
        c.close()
        ka.close()


def describe_producers(w: KafkaWire, *topics: tuple[str, list[int]]) -> dict[tuple[str, int], Any]:
    """``(topic, partition) -> (error code, [(id, epoch, last sequence)])`` of a raw
    DescribeProducers."""
    body = {"topics": [{"name": t, "partition_indexes": ps} for t, ps in topics]}
    resp = w.call(DESCRIBE_PRODUCERS, 0, body)
    return {
        (t.name, p.partition_index): (
            p.error_code,
            [(a.producer_id, a.producer_epoch, a.last_sequence) for a in p.active_producers],
        )
        for t in resp.topics
        for p in t.partitions
    }


def test_describe_producers_lists_the_idempotent_producers(server: ServerProcess) -> None:
    """kafka-python's ``describe_producers`` (Kafka's ``kafka-transactions
    describe-producers``): an idempotent producer's id, epoch 0 and last sequence on the
    partition it wrote, none on the other (nor for a producer that is not idempotent);
    raw frames for an unknown topic and partition."""
    create_topic(server, "ops-producers", partitions=2)
    recs: list[Rec] = [(0, None, b"v%d" % i, []) for i in range(7)]
    assert (
        confluent_produce(
            server.kafka_bootstrap, "ops-producers", recs, **{"enable.idempotence": True}
        )
        == [None] * 7
    )
    assert confluent_produce(server.kafka_bootstrap, "ops-producers", [(1, None, b"x", [])]) == [
        None
    ]
    ka = KafkaAdminClient(bootstrap_servers=server.kafka_bootstrap, request_timeout_ms=10_000)
    try:
        got = ka.describe_producers(
            [KpPartition("ops-producers", 0), KpPartition("ops-producers", 1)]
        )
    finally:
        ka.close()
    (p0,) = got[KpPartition("ops-producers", 0)].active_producers
    assert (p0.producer_id >= 0, p0.producer_epoch, p0.last_sequence) == (True, 0, 6)
    assert p0.last_timestamp > 0 and p0.coordinator_epoch == -1
    assert got[KpPartition("ops-producers", 1)].active_producers == []
    with KafkaWire(server.kafka_bootstrap) as w:
        rows = describe_producers(w, ("ops-producers", [0, 7]), ("ops-no-such-topic", [0]))
    assert rows[("ops-producers", 0)] == (ErrorCode.none, [(p0.producer_id, 0, 6)])
    assert rows[("ops-producers", 7)][0] == ErrorCode.unknown_topic_or_partition
    assert rows[("ops-no-such-topic", 0)][0] == ErrorCode.unknown_topic_or_partition


def test_describe_producers_takes_read(sasl_server: ServerProcess) -> None:
    topic = create_sasl_topic(sasl_server, "app.producers")
    with sasl_wire(sasl_server, RO) as w:
        assert describe_producers(w, (topic, [0])) == {(topic, 0): (ErrorCode.none, [])}
    with sasl_wire(sasl_server, OTHER) as w:
        rows = describe_producers(w, (topic, [0]), ("other.t", [0]))
    assert rows[(topic, 0)] == (ErrorCode.topic_authorization_failed, [])
    assert rows[("other.t", 0)][0] == ErrorCode.unknown_topic_or_partition


ACL_FILTER = {
    "resource_type_filter": 1,
    "resource_name_filter": None,
    "pattern_type_filter": 1,
    "principal_filter": None,
    "host_filter": None,
    "operation": 1,
    "permission_type": 1,
}
"""DescribeAcls' filter matching every ACL (ANY everywhere)."""


def test_acl_apis_with_tokens_answer_where_access_is_set(sasl_server: ServerProcess) -> None:
    """With tokens any token may ask (the connection stays open) and learns that access is
    by the tokens' grants."""
    with sasl_wire(sasl_server, RO) as w:
        for _ in range(2):
            described = w.call(DESCRIBE_ACLS, 2, ACL_FILTER)
            assert described.error_code == ErrorCode.security_disabled
            assert "auth_tokens" in described.error_message


def test_acl_apis_answer_security_disabled(server: ServerProcess, admin: AdminClient) -> None:
    """No ACLs here: DescribeAcls, CreateAcls, DeleteAcls answer SECURITY_DISABLED with a
    message, as Kafka's broker without an authorizer (confluent-kafka, kafka-python)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AclBinding,
        AclBindingFilter,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )
    from kafka.admin import ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType
    from kafka.admin import ResourcePatternFilter as KpPatternFilter
    from kafka.admin import ResourceType as KpResourceType
    from kafka.errors import SecurityDisabledError

    match_all = AclBindingFilter(
        ResourceType.ANY,
        None,  # type: ignore[arg-type]
        ResourcePatternType.ANY,
        None,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    binding = AclBinding(
        ResourceType.TOPIC,
        "ops-acl",
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    calls = [
        admin.create_acls([binding], request_timeout=TIMEOUT_S)[binding],
        admin.delete_acls([match_all], request_timeout=TIMEOUT_S)[match_all],
    ]
    for fut in calls:
        with pytest.raises(KafkaException) as err:
            fut.result(TIMEOUT_S)
        e = err.value.args[0]
        assert e.code() == KafkaError.SECURITY_DISABLED, e
        assert "No Authorizer is configured" in e.str(), e
    # librdkafka leaves DescribeAcls' top-level error out of the result: no bindings.
    assert admin.describe_acls(match_all, request_timeout=TIMEOUT_S).result(TIMEOUT_S) == []
    with KafkaWire(server.kafka_bootstrap) as w:
        described = w.call(DESCRIBE_ACLS, 3, ACL_FILTER)
        assert (described.error_code, described.resources) == (ErrorCode.security_disabled, ())
        assert described.error_message.startswith("No Authorizer is configured")
    ka = KafkaAdminClient(bootstrap_servers=server.kafka_bootstrap, request_timeout_ms=10_000)
    try:
        with pytest.raises(SecurityDisabledError):
            ka.describe_acls(
                ACLFilter(
                    principal=None,
                    host="*",
                    operation=ACLOperation.ANY,
                    permission_type=ACLPermissionType.ANY,
                    resource_pattern=KpPatternFilter(
                        KpResourceType.ANY, None, ACLResourcePatternType.ANY
                    ),
                )
            )
    finally:
        ka.close()
