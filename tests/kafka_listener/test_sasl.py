"""The Kafka listener with the service's tokens: SASL/PLAIN (a token as the password),
the tokens' grants per request, and TLS (SASL_SSL, SSL) with the HTTP server's
certificate. Real servers, the three client libraries, and raw frames for the exact
codes; every call bounded in time."""

from __future__ import annotations

import asyncio
import json
import ssl
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from kio.schema.errors import ErrorCode
from service.conftest import ServerProcess
from service.test_lifecycle import _self_signed

from tiered_log.kafka.admin import CREATE_TOPICS, DELETE_TOPICS, OFFSET_FOR_LEADER_EPOCH
from tiered_log.kafka.auth import SASL_AUTHENTICATE, SASL_HANDSHAKE
from tiered_log.kafka.messages import APIS, FETCH, LIST_OFFSETS, METADATA, PRODUCE

from .clients import poll_messages
from .conftest import TIMEOUT_S, KafkaWire, kafka_server, wait_until
from .test_protocol import batch, fetch_body, metadata_body, produce_body

ADMIN = "adm-0123456789"
RW = "rw-0123456789"
RO = "ro-0123456789"
OTHER = "other-0123456789"
TOKENS = {
    ADMIN: {"*": ["admin"]},
    RW: {"app.*": ["read", "write"]},
    RO: {"app.*": ["read"]},
    OTHER: {"other.*": ["read", "write"]},
}
DENIED = ErrorCode.topic_authorization_failed


def sasl(token: str, user: str = "alice") -> dict[str, Any]:
    """confluent-kafka's settings for SASL_PLAINTEXT with ``token``."""
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": token,
    }


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server with tokens and a remote tier without local retention (small segments:
    most of a partition is only in the bucket)."""
    bucket = tmp_path_factory.mktemp("sasl-bucket")
    yield from kafka_server(
        tmp_path_factory,
        "kafka-sasl",
        auth_tokens=json.dumps(TOKENS),
        remote_url=str(bucket),
        ship_interval_ms="50",
        topic_defaults__segment_bytes="4096",
        topic_defaults__local_retention_bytes="0",
    )


def http(srv: ServerProcess, token: str = ADMIN) -> httpx.Client:
    return httpx.Client(
        base_url=srv.url, headers={"Authorization": f"Bearer {token}"}, timeout=TIMEOUT_S
    )


def create(srv: ServerProcess, name: str) -> str:
    with http(srv) as c:
        r = c.post("/v1/topics", json={"name": name, "partitions": 1})
        assert r.status_code == 201, r.text
    return name


def high_watermark(srv: ServerProcess, topic: str) -> int:
    with http(srv) as c:
        r = c.get(f"/v1/topics/{topic}/partitions/0/bounds")
        r.raise_for_status()
        return int(r.json()["high_watermark"])


def login(w: KafkaWire, token: str, version: int = 2) -> Any:
    """SaslHandshake v1 then SaslAuthenticate at ``version``; its answer."""
    hs = w.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
    assert hs.error_code == ErrorCode.none and list(hs.mechanisms) == ["PLAIN"]
    return w.call(SASL_AUTHENTICATE, version, {"auth_bytes": b"\x00user\x00" + token.encode()})


def wire(srv: ServerProcess, token: str) -> KafkaWire:
    w = KafkaWire(srv.kafka_bootstrap)
    assert login(w, token).error_code == ErrorCode.none
    return w


def produce(bootstrap: str, topic: str, values: list[bytes], **config: Any) -> list[Any]:
    """Produce ``values`` to partition 0; the delivery errors (None for each success)."""
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "message.timeout.ms": 10_000,
            "socket.timeout.ms": 10_000,
            **config,
        }
    )
    errors: list[Any] = []
    for v in values:
        p.produce(topic, value=v, partition=0, on_delivery=lambda e, _m: errors.append(e))
    assert p.flush(20) == 0
    return errors


def consume(
    bootstrap: str, topic: str, n: int, timeout_s: float = 30, **config: Any
) -> list[bytes | None]:
    """The first ``n`` values of partition 0 read within ``timeout_s`` (fails on a
    consumer error)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "sasl-tests",
            "enable.auto.commit": False,
            "socket.timeout.ms": 10_000,
            **config,
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        return [m.value() for m in poll_messages(c, n, timeout_s)]
    finally:
        c.close()


# ---- confluent-kafka ------------------------------------------------------------------


def test_confluent_produces_and_consumes_with_a_granted_token(server: ServerProcess) -> None:
    topic = create(server, "app.orders")
    values = [b"order-%d" % i for i in range(50)]
    assert produce(server.kafka_bootstrap, topic, values, **sasl(RW)) == [None] * 50
    assert consume(server.kafka_bootstrap, topic, 50, **sasl(RW)) == values
    assert consume(server.kafka_bootstrap, topic, 50, **sasl(RO, user="bob")) == values


def test_a_wrong_password_is_an_authentication_error(server: ServerProcess) -> None:
    errors: list[Any] = []
    p = Producer(
        {
            "bootstrap.servers": server.kafka_bootstrap,
            "error_cb": errors.append,
            "message.timeout.ms": 5_000,
            **sasl("not-a-token"),
        }
    )
    p.produce("app.orders", value=b"never", partition=0)
    deadline = time.monotonic() + 15
    while not errors and time.monotonic() < deadline:
        p.poll(0.2)
    p.purge()
    p.flush(5)
    assert errors, "no error reported within 15 s"
    assert errors[0].code() == KafkaError._AUTHENTICATION
    assert "one of the service's tokens" in errors[0].str()


def test_a_read_only_token_consumes_but_cannot_produce(server: ServerProcess) -> None:
    topic = create(server, "app.readonly")
    assert produce(server.kafka_bootstrap, topic, [b"a", b"b"], **sasl(RW)) == [None, None]
    assert consume(server.kafka_bootstrap, topic, 2, **sasl(RO)) == [b"a", b"b"]
    errors = produce(server.kafka_bootstrap, topic, [b"refused"], **sasl(RO))
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    assert high_watermark(server, topic) == 2
    with wire(server, RO) as w:  # the raw answer: the code and the grant it lacks
        part = w.call(PRODUCE, 9, produce_body(topic, batch(b"x"))).responses[0]
        assert part.partition_responses[0].error_code == DENIED
        assert "no 'write' grant" in part.partition_responses[0].error_message
        w.send(PRODUCE, 9, produce_body(topic, batch(b"y"), acks=0))  # no answer due
        assert w.closed_by_server()
    assert high_watermark(server, topic) == 2


def test_a_token_without_a_grant_reads_nothing_archived_included(server: ServerProcess) -> None:
    topic = create(server, "app.archived")
    values = [b"r-%04d" % i for i in range(400)]
    many = {"batch.num.messages": 25, "linger.ms": 20}  # 4 KiB segments roll between batches
    assert produce(server.kafka_bootstrap, topic, values, **sasl(RW), **many) == [None] * 400
    with http(server) as c:

        def archived() -> bool:
            r = c.get(f"/v1/topics/{topic}/partitions/0/bounds").json()
            return bool(r["local_start_offset"] > 0)

        wait_until(archived, 30, "local retention after shipping")
    with wire(server, RO) as w:  # granted: offset 0 comes from the bucket
        got = w.call(FETCH, 12, fetch_body(topic, 0)).responses[0].partitions[0]
        assert got.error_code == ErrorCode.none and got.records
    with wire(server, OTHER) as w:
        got = w.call(FETCH, 12, fetch_body(topic, 0)).responses[0]
        assert got.topic == topic
        assert got.partitions[0].error_code == DENIED and not got.partitions[0].records
        offsets = w.call(
            LIST_OFFSETS,
            7,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -2}
                        ],
                    }
                ],
            },
        )
        assert offsets.topics[0].partitions[0].error_code == DENIED
        meta = w.call(METADATA, 12, metadata_body(topic))
        assert [(t.name, t.error_code) for t in meta.topics] == [(topic, DENIED)]
        every = w.call(METADATA, 12, metadata_body() | {"topics": None})
        assert all(not t.name.startswith("app.") for t in every.topics)
    assert consume(server.kafka_bootstrap, topic, 1, timeout_s=3, **sasl(OTHER)) == []


def test_auto_creation_needs_admin(server: ServerProcess) -> None:
    with wire(server, RW) as w:
        meta = w.call(METADATA, 12, metadata_body("app.auto-refused"))
        assert [(t.name, t.error_code) for t in meta.topics] == [("app.auto-refused", DENIED)]
    with http(server) as c:
        assert c.get("/v1/topics/app.auto-refused").status_code == 404
    with wire(server, ADMIN) as w:
        meta = w.call(METADATA, 12, metadata_body("app.auto-created"))
        assert meta.topics[0].error_code == ErrorCode.none and meta.topics[0].partitions


@pytest.mark.skipif(
    not {CREATE_TOPICS, DELETE_TOPICS, OFFSET_FOR_LEADER_EPOCH} <= APIS.keys(),
    reason="the listener does not serve CreateTopics, DeleteTopics, OffsetForLeaderEpoch",
)
def test_topic_admin_needs_admin_and_leader_epochs_read(server: ServerProcess) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    def admin(token: str) -> Any:
        return AdminClient({"bootstrap.servers": server.kafka_bootstrap, **sasl(token)})

    def error(fut: Any) -> Any:
        try:
            fut.result(timeout=20)
        except Exception as exc:
            return exc.args[0].code()
        return None

    name = "app.admin-made"
    rw, adm = admin(RW), admin(ADMIN)  # kept: a client destroyed fails its futures
    refused = rw.create_topics([NewTopic(name, 1)], request_timeout=15)
    assert error(refused[name]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert error(adm.create_topics([NewTopic(name, 1)], request_timeout=15)[name]) is None
    refused = rw.delete_topics([name], request_timeout=15)
    assert error(refused[name]) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    with http(server) as c:
        assert c.get(f"/v1/topics/{name}").status_code == 200
    assert error(adm.delete_topics([name], request_timeout=15)[name]) is None
    epochs = {
        "replica_id": -1,
        "topics": [
            {
                "topic": "app.orders",
                "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}],
            }
        ],
    }
    with http(server) as c:  # the module's tests may run on other workers' servers
        made = c.post("/v1/topics", json={"name": "app.orders", "partitions": 1})
        assert made.status_code in (201, 409), made.text
    with wire(server, OTHER) as w:
        got = w.call(OFFSET_FOR_LEADER_EPOCH, 4, epochs).topics[0]
        assert (got.topic, got.partitions[0].error_code) == ("app.orders", DENIED)
    with wire(server, RO) as w:
        got = w.call(OFFSET_FOR_LEADER_EPOCH, 4, epochs).topics[0]
        assert got.partitions[0].error_code == ErrorCode.none


def test_configs_and_producer_ids_follow_the_grants(server: ServerProcess) -> None:
    topic = create(server, "app.configs")
    describe = {
        "resources": [{"resource_type": 2, "resource_name": topic, "configuration_keys": None}],
        "include_synonyms": False,
        "include_documentation": False,
    }
    alter = {
        "resources": [
            {
                "resource_type": 2,
                "resource_name": topic,
                "configs": [{"name": "retention.ms", "config_operation": 0, "value": "60000"}],
            }
        ],
        "validate_only": False,
    }
    init = {
        "transactional_id": None,
        "transaction_timeout": 60_000,
        "producer_id": -1,
        "producer_epoch": -1,
    }
    with wire(server, RO) as w:
        assert w.call(32, 4, describe).results[0].error_code == ErrorCode.none
        assert w.call(44, 1, alter).responses[0].error_code == DENIED
        assert w.call(22, 4, init).error_code == ErrorCode.cluster_authorization_failed
    with wire(server, OTHER) as w:
        assert w.call(32, 4, describe).results[0].error_code == DENIED
        assert w.call(22, 4, init).producer_id >= 0
    with http(server) as c:
        assert c.get(f"/v1/topics/{topic}").json()["config"]["retention_ms"] is None
    with wire(server, ADMIN) as w:
        assert w.call(44, 1, alter).responses[0].error_code == ErrorCode.none


def test_group_requests_follow_the_http_grants(server: ServerProcess) -> None:
    topic = create(server, "app.grouped")
    commit = {
        "group_id": "g-sasl",
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
        "retention_time": -1,
        "topics": [
            {
                "name": name,
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": 0,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                ],
            }
            for name in (topic, "other.topic")
        ],
    }
    with wire(server, RO) as w:
        got = w.call(8, 8, commit)
        codes = {t.name: t.partitions[0].error_code for t in got.topics}
        assert codes == {topic: ErrorCode.none, "other.topic": DENIED}
        fetched = w.call(
            9,
            7,
            {
                "group_id": "g-sasl",
                "topics": [
                    {"name": topic, "partition_indexes": [0]},
                    {"name": "other.topic", "partition_indexes": [0]},
                ],
                "require_stable": False,
            },
        )
        codes = {t.name: t.partitions[0].error_code for t in fetched.topics}
        assert codes == {topic: ErrorCode.none, "other.topic": DENIED}
        deleted = w.call(42, 2, {"groups_names": ["g-sasl"]})
        assert deleted.results[0].error_code == ErrorCode.group_authorization_failed
    with wire(server, ADMIN) as w:
        assert w.call(42, 2, {"groups_names": ["g-sasl"]}).results[0].error_code == 0


# ---- the SASL exchange on the wire ----------------------------------------------------


def test_a_wrong_password_is_answered_then_the_connection_closes(server: ServerProcess) -> None:
    with KafkaWire(server.kafka_bootstrap) as w:
        got = login(w, "wrong-token")
        assert got.error_code == ErrorCode.sasl_authentication_failed
        assert "one of the service's tokens" in got.error_message
        assert w.closed_by_server()


@pytest.mark.parametrize(
    "message",
    [
        b"\x00user\x00 " + RW.encode(),
        b"\x00user\x00",
        b"user" + RW.encode(),
        b"a\x00b\x00" + RW.encode(),
    ],
    ids=["padded-token", "no-password", "no-nul", "other-authzid"],
)
def test_malformed_plain_messages_fail(server: ServerProcess, message: bytes) -> None:
    with KafkaWire(server.kafka_bootstrap) as w:
        w.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        got = w.call(SASL_AUTHENTICATE, 2, {"auth_bytes": message})
        assert got.error_code == ErrorCode.sasl_authentication_failed
        assert w.closed_by_server()


def test_another_mechanism_is_refused_with_the_enabled_ones(server: ServerProcess) -> None:
    with KafkaWire(server.kafka_bootstrap) as w:
        got = w.call(SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"})
        assert got.error_code == ErrorCode.unsupported_sasl_mechanism
        assert list(got.mechanisms) == ["PLAIN"]
        assert w.closed_by_server()


def test_v0_handshake_takes_a_raw_token(server: ServerProcess) -> None:
    with KafkaWire(server.kafka_bootstrap) as w:
        assert w.call(SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}).error_code == 0
        w.sock.sendall(struct.pack(">i", 3 + len(RW)) + b"\x00u\x00" + RW.encode())
        assert w._read(4) == b"\x00\x00\x00\x00"
        assert w.call(METADATA, 12, metadata_body()).topics is not None
    with KafkaWire(server.kafka_bootstrap) as w:
        assert w.call(SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}).error_code == 0
        w.sock.sendall(struct.pack(">i", 4) + b"\x00u\x00x")
        assert w.closed_by_server()


def test_an_unauthenticated_produce_closes_and_stores_nothing(server: ServerProcess) -> None:
    topic = create(server, "app.unauthenticated")
    with KafkaWire(server.kafka_bootstrap) as w:
        w.send(PRODUCE, 9, produce_body(topic, batch(b"sneaked")))
        assert w.closed_by_server()
    with KafkaWire(server.kafka_bootstrap) as w:  # authenticated halfway: the same
        w.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
        w.send(PRODUCE, 9, produce_body(topic, batch(b"sneaked")))
        assert w.closed_by_server()
    assert high_watermark(server, topic) == 0
    assert "produce before SASL authentication" in server.log()


# ---- aiokafka and kafka-python ---------------------------------------------------------


def test_aiokafka_with_sasl_plaintext(server: ServerProcess) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as AioTP

    topic = create(server, "app.aiokafka")
    auth = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "carol",
        "sasl_plain_password": RW,
        "request_timeout_ms": 10_000,
    }

    async def run() -> list[bytes]:
        p = AIOKafkaProducer(bootstrap_servers=server.kafka_bootstrap, acks="all", **auth)
        await p.start()
        try:
            for i in range(5):
                await p.send_and_wait(topic, b"aio-%d" % i, partition=0)
        finally:
            await p.stop()
        c = AIOKafkaConsumer(
            bootstrap_servers=server.kafka_bootstrap, enable_auto_commit=False, **auth
        )
        await c.start()
        try:
            tp = AioTP(topic, 0)
            c.assign([tp])
            await c.seek_to_beginning(tp)
            out: list[bytes] = []
            while len(out) < 5:
                for msgs in (await c.getmany(timeout_ms=500)).values():
                    out += [m.value for m in msgs]
            return out
        finally:
            await c.stop()

    assert asyncio.run(asyncio.wait_for(run(), 60)) == [b"aio-%d" % i for i in range(5)]


def test_kafka_python_with_sasl_plaintext(server: ServerProcess) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KpTP

    topic = create(server, "app.kafka-python")
    auth = {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "dave",
        "sasl_plain_password": RW,
        "request_timeout_ms": 10_000,
    }
    p = KafkaProducer(bootstrap_servers=server.kafka_bootstrap, max_block_ms=10_000, **auth)
    try:
        for i in range(5):
            p.send(topic, b"kp-%d" % i, partition=0).get(timeout=10)
    finally:
        p.close(timeout=10)
    c = KafkaConsumer(
        bootstrap_servers=server.kafka_bootstrap,
        enable_auto_commit=False,
        consumer_timeout_ms=2_000,
        **auth,
    )
    try:
        tp = KpTP(topic, 0)
        c.assign([tp])
        c.seek_to_beginning(tp)
        out: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(out) < 5 and time.monotonic() < deadline:
            for msgs in c.poll(timeout_ms=500).values():
                out += [m.value for m in msgs]
    finally:
        c.close()
    assert out == [b"kp-%d" % i for i in range(5)]


# ---- TLS -------------------------------------------------------------------------------


@pytest.mark.parametrize("with_tokens", [True, False], ids=["sasl_ssl", "ssl"])
def test_tls_with_the_http_certificate(
    tmp_path_factory: pytest.TempPathFactory, with_tokens: bool
) -> None:
    certs: Path = tmp_path_factory.mktemp("certs")
    cert, key = _self_signed(certs)
    settings = {"tls_certfile": str(cert), "tls_keyfile": str(key)}
    if with_tokens:
        settings["auth_tokens"] = json.dumps(TOKENS)
    root = tmp_path_factory.mktemp("kafka-tls")
    srv = ServerProcess(root / "data", root, {"log_level": "info", **settings}, scheme="https")
    srv.start(verify=str(cert))
    try:
        trust = ssl.create_default_context(cafile=str(cert))
        with httpx.Client(
            base_url=srv.url, verify=trust, headers={"Authorization": f"Bearer {ADMIN}"}
        ) as c:
            assert c.post("/v1/topics", json={"name": "app.tls"}).status_code == 201
        tls: dict[str, Any] = {"security.protocol": "SSL", "ssl.ca.location": str(cert)}
        if with_tokens:
            tls |= sasl(RW) | {"security.protocol": "SASL_SSL"}
        values = [b"secret-%d" % i for i in range(10)]
        assert produce(srv.kafka_bootstrap, "app.tls", values, **tls) == [None] * 10
        assert consume(srv.kafka_bootstrap, "app.tls", 10, **tls) == values
        with KafkaWire(srv.kafka_bootstrap) as w:  # the SASL APIs over TLS, on the wire
            w.sock = trust.wrap_socket(w.sock, server_hostname="127.0.0.1")
            hs = w.call(SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
            if with_tokens:
                assert hs.error_code == ErrorCode.none
            else:  # as a Kafka listener without SASL answers
                assert hs.error_code == ErrorCode.illegal_sasl_state
                assert w.call(METADATA, 12, metadata_body()).topics is not None
        errors: list[Any] = []  # plaintext against the TLS listener: no answer
        p = Producer({"bootstrap.servers": srv.kafka_bootstrap, "error_cb": errors.append})
        deadline = time.monotonic() + 15
        while not errors and time.monotonic() < deadline:
            p.poll(0.2)
        assert errors
    finally:
        srv.stop()
