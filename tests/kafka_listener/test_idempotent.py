"""Idempotent producers against a real ``tiered-log serve``: InitProducerId, the
clients' idempotent producers (confluent-kafka, aiokafka), a retried batch stored once
and answered with its original offset (also after a SIGKILL and a restart), sequence
gaps and old epochs refused with Kafka's codes, the HTTP binary produce of the same
batches answering 409, and an idle producer forgotten after ``producer_id_expiration_ms``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import TransactionalIdAuthorizationFailed
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from kafka import KafkaProducer
from kafka.errors import TransactionalIdAuthorizationFailedError
from kio.schema.errors import ErrorCode
from service.conftest import ServerProcess

from tiered_log.format.kafka import NewRecord, encode_batch
from tiered_log.kafka.messages import PRODUCE
from tiered_log.kafka.producers import INIT_PRODUCER_ID

from .conftest import TIMEOUT_S, KafkaWire, bounds, create_topic, kafka_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    yield from kafka_server(tmp_path_factory, "idempotent")


def produce_body(topic: str, records: bytes, acks: int = -1) -> dict[str, Any]:
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout": 10_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    }


def init_producer_id(w: KafkaWire, version: int = 4, txn: str | None = None) -> Any:
    body: dict[str, Any] = {
        "transactional_id": txn,
        "transaction_timeout": 60_000,
        "producer_id": -1,
        "producer_epoch": -1,
    }
    return w.call(INIT_PRODUCER_ID, version, body)


def idem_batch(pid: int, seq: int, n: int = 2, epoch: int = 0, tag: bytes = b"r") -> bytes:
    recs = [NewRecord(tag + b"-%d" % (seq + i), b"k", (), 1_700_000_000_000 + i) for i in range(n)]
    return encode_batch(recs, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def produce(w: KafkaWire, topic: str, records: bytes) -> Any:
    resp = w.call(PRODUCE, 9, produce_body(topic, records))
    return resp.responses[0].partition_responses[0]


def consume_values(bootstrap: str, topic: str, n: int, timeout_s: float = 30) -> list[bytes]:
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "idempotent-tests",
            "enable.auto.commit": False,
            "socket.timeout.ms": 10_000,
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list[bytes] = []
        deadline = time.monotonic() + timeout_s
        while len(out) < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            err = m.error()
            if err is not None:
                assert err.code() == KafkaError._PARTITION_EOF, err
                continue
            value = m.value()
            assert value is not None
            out.append(value)
        return out
    finally:
        c.close()


def test_init_producer_id_hands_out_distinct_ids_and_refuses_transactions(
    server: ServerProcess,
) -> None:
    with KafkaWire(server.kafka_bootstrap) as w:
        ids = set()
        for version in range(5):
            resp = init_producer_id(w, version)
            assert resp.error_code == ErrorCode.none
            assert resp.producer_id >= 0 and resp.producer_epoch == 0
            ids.add(resp.producer_id)
        assert len(ids) == 5
        txn = init_producer_id(w, 4, txn="my-txn")
        assert txn.error_code == ErrorCode.transactional_id_authorization_failed
        assert txn.producer_id == -1


def test_transactional_producers_of_each_client_fail_at_once(server: ServerProcess) -> None:
    """No transactions: each client's transactional producer is refused with the fatal
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED as soon as it starts (FindCoordinator for the
    transaction key names a node, whose InitProducerId refuses it), not retried until a
    timeout."""
    p = Producer({"bootstrap.servers": server.kafka_bootstrap, "transactional.id": "txn-c"})
    began = time.monotonic()
    with pytest.raises(KafkaException) as info:
        p.init_transactions(30)
    err = info.value.args[0]
    assert err.code() == KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED and err.fatal()
    assert time.monotonic() - began < 25  # refused, not timed out

    async def aiokafka_start() -> None:
        a = AIOKafkaProducer(bootstrap_servers=server.kafka_bootstrap, transactional_id="txn-a")
        try:
            with pytest.raises(TransactionalIdAuthorizationFailed):
                await asyncio.wait_for(a.start(), TIMEOUT_S)
        finally:
            await a.stop()

    asyncio.run(aiokafka_start())
    k = KafkaProducer(bootstrap_servers=server.kafka_bootstrap, transactional_id="txn-k")
    try:
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            k.init_transactions()
    finally:
        k.close(timeout=5)


def test_confluent_idempotent_producer_round_trip(server: ServerProcess) -> None:
    topic = "idem-confluent"
    create_topic(server, topic)
    n = 2000
    p = Producer(
        {
            "bootstrap.servers": server.kafka_bootstrap,
            "enable.idempotence": True,
            "message.timeout.ms": 20_000,
            "linger.ms": 2,
            "batch.num.messages": 100,
        }
    )
    errors: list[Any] = []
    for i in range(n):
        p.produce(topic, value=b"c-%d" % i, partition=0, on_delivery=lambda e, _m: errors.append(e))
        p.poll(0)
    assert p.flush(30) == 0
    assert errors == [None] * n
    assert bounds(server, topic)["next_offset"] == n
    assert consume_values(server.kafka_bootstrap, topic, n) == [b"c-%d" % i for i in range(n)]


def test_aiokafka_idempotent_producer_round_trip(server: ServerProcess) -> None:
    from aiokafka import AIOKafkaProducer

    topic = "idem-aiokafka"
    create_topic(server, topic)
    n = 500

    async def run() -> None:
        p = AIOKafkaProducer(
            bootstrap_servers=server.kafka_bootstrap,
            enable_idempotence=True,
            request_timeout_ms=10_000,
            linger_ms=2,
        )
        await p.start()
        try:
            futs = [await p.send(topic, value=b"a-%d" % i, partition=0) for i in range(n)]
            await asyncio.gather(*futs)
        finally:
            await p.stop()

    asyncio.run(asyncio.wait_for(run(), 60))
    assert bounds(server, topic)["next_offset"] == n
    assert consume_values(server.kafka_bootstrap, topic, n) == [b"a-%d" % i for i in range(n)]


def test_retried_batch_is_stored_once_gaps_and_old_epochs_refused(server: ServerProcess) -> None:
    topic = "idem-raw"
    create_topic(server, topic)
    with KafkaWire(server.kafka_bootstrap) as w:
        pid = init_producer_id(w).producer_id
        plain = produce(w, topic, encode_batch([NewRecord(b"plain")]))
        assert (plain.error_code, plain.base_offset) == (ErrorCode.none, 0)
        first = produce(w, topic, idem_batch(pid, 0))
        again = produce(w, topic, idem_batch(pid, 0))
        assert first.error_code == again.error_code == ErrorCode.none
        assert first.base_offset == again.base_offset == 1
        assert bounds(server, topic)["next_offset"] == 3
        gap = produce(w, topic, idem_batch(pid, 5))
        assert gap.error_code == ErrorCode.out_of_order_sequence_number
        assert "sequence 5" in (gap.error_message or "")
        nxt = produce(w, topic, idem_batch(pid, 2))
        assert (nxt.error_code, nxt.base_offset) == (ErrorCode.none, 3)
        bumped = produce(w, topic, idem_batch(pid, 0, epoch=1))
        assert (bumped.error_code, bumped.base_offset) == (ErrorCode.none, 5)
        old = produce(w, topic, idem_batch(pid, 4, epoch=0))
        assert old.error_code == ErrorCode.invalid_producer_epoch
        assert bounds(server, topic)["next_offset"] == 7
    # The HTTP binary produce takes the same batches, checked the same way.
    url = f"{server.url}/v1/topics/{topic}/partitions/0/records"
    head = {"content-type": "application/vnd.tiered-log.frames"}
    r = httpx.post(url, content=idem_batch(pid, 2, epoch=1), headers=head, timeout=TIMEOUT_S)
    assert r.status_code == 200, r.text
    assert r.json()["first_offset"] == 7
    r = httpx.post(url, content=idem_batch(pid, 2, epoch=1), headers=head, timeout=TIMEOUT_S)
    assert r.status_code == 200 and r.json()["first_offset"] == 7  # the duplicate
    r = httpx.post(url, content=idem_batch(pid, 9, epoch=1), headers=head, timeout=TIMEOUT_S)
    assert r.status_code == 409, r.text
    assert r.json()["error"]["code"] == "out_of_order_sequence"
    assert bounds(server, topic)["next_offset"] == 9


def test_duplicate_detected_after_sigkill_and_restart(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    for srv in kafka_server(tmp_path_factory, "idem-restart"):
        topic = "idem-kill"
        create_topic(srv, topic)
        with KafkaWire(srv.kafka_bootstrap) as w:
            pid = init_producer_id(w).producer_id
            for seq in range(0, 20, 2):
                assert produce(w, topic, idem_batch(pid, seq)).error_code == ErrorCode.none
            last = produce(w, topic, idem_batch(pid, 20))
            assert last.base_offset == 20
        srv.kill()  # SIGKILL: no snapshot written at close
        srv.start()
        with KafkaWire(srv.kafka_bootstrap) as w:
            again = produce(w, topic, idem_batch(pid, 20))
            assert (again.error_code, again.base_offset) == (ErrorCode.none, 20)
            assert bounds(srv, topic)["next_offset"] == 22
            gap = produce(w, topic, idem_batch(pid, 30))
            assert gap.error_code == ErrorCode.out_of_order_sequence_number
            assert produce(w, topic, idem_batch(pid, 22)).base_offset == 22
            # Ids are never handed out twice across the restart.
            assert init_producer_id(w).producer_id > pid
        srv.stop()  # a clean stop writes the snapshot; the restart reads it
        srv.start()
        with KafkaWire(srv.kafka_bootstrap) as w:
            again = produce(w, topic, idem_batch(pid, 22))
            assert (again.error_code, again.base_offset) == (ErrorCode.none, 22)
            assert bounds(srv, topic)["next_offset"] == 24


def test_idle_producer_is_forgotten_after_the_expiration(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """With ``producer_id_expiration_ms`` short, the partition forgets an idle producer:
    a retry of its batch, answered as a duplicate before, is then written as a new one."""
    for srv in kafka_server(
        tmp_path_factory,
        "idem-expiry",
        producer_id_expiration_ms="500",
        maintenance_interval_ms="50",
    ):
        topic = "idem-expiry"
        create_topic(srv, topic)
        with KafkaWire(srv.kafka_bootstrap) as w:
            pid = init_producer_id(w).producer_id
            assert produce(w, topic, idem_batch(pid, 0)).base_offset == 0
            deadline = time.monotonic() + 20
            while True:  # retries: duplicates (offset 0) until the producer is forgotten
                part = produce(w, topic, idem_batch(pid, 0))
                assert part.error_code == ErrorCode.none and part.base_offset in (0, 2)
                if part.base_offset == 2:
                    break
                assert time.monotonic() < deadline, "the idle producer never forgotten"
                time.sleep(0.05)
        assert bounds(srv, topic)["next_offset"] == 4
