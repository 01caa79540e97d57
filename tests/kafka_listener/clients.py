"""The three Kafka client libraries as the tests drive them: produce a list of records
and consume a partition set back, every call bounded in time, results as plain tuples
``(partition, offset, key, value, headers)`` so the libraries can be compared."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

Row = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]
Rec = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]]]
"""A record to send: partition, key, value (None: a null value, a tombstone), headers."""

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def sample(n: int, partitions: int, tag: str, *, nulls: bool = True) -> list[Rec]:
    """``n`` records over ``partitions``: every third without a key, headers on most;
    with ``nulls``, every seventh keyed one a null value (a tombstone)."""
    out: list[Rec] = []
    for i in range(n):
        key = None if i % 3 == 0 else f"key-{i}".encode()
        headers = [] if i % 5 == 0 else [("seq", str(i).encode()), ("tag", tag.encode())]
        value: bytes | None = f"{tag}-value-{i}".encode() * (1 + i % 4)
        if nulls and key is not None and i % 7 == 1:
            value = None
        out.append((i % partitions, key, value, headers))
    return out


def expected(recs: list[Rec]) -> list[Row]:
    """The rows a consumer reads back after ``recs`` went to empty partitions in order."""
    next_offset: dict[int, int] = {}
    rows: list[Row] = []
    for p, k, v, h in recs:
        off = next_offset.get(p, 0)
        next_offset[p] = off + 1
        rows.append((p, off, k, v, tuple(h)))
    return sorted(rows)


# ---- confluent-kafka (librdkafka) ------------------------------------------------------


def confluent_produce(bootstrap: str, topic: str, recs: list[Rec], **config: Any) -> list[Any]:
    """Produce ``recs`` in order; the delivery errors (None for each success)."""
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": False,
            "message.timeout.ms": 15_000,
            "socket.timeout.ms": 10_000,
            "linger.ms": 5,
            **config,
        }
    )
    errors: list[Any] = []
    for part, key, value, headers in recs:
        p.produce(
            topic,
            value=value,
            key=key,
            partition=part,
            headers=list(headers) or None,  # a copy: confluent takes a list of str | bytes | None
            on_delivery=lambda err, _msg: errors.append(err),
        )
        p.poll(0)
    left = p.flush(20)
    assert left == 0, f"{left} records not delivered"
    return errors


def confluent_consumer(bootstrap: str, **config: Any) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "tests-assign-only",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "socket.timeout.ms": 10_000,
            **config,
        }
    )


def poll_messages(c: Consumer, n: int, timeout_s: float = 30) -> list[Any]:
    """Up to ``n`` messages an assigned consumer polls within ``timeout_s``; end-of-partition
    events are skipped, any other consumer error fails the test."""
    out: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        err = m.error()
        if err:
            if err.code() == KafkaError._PARTITION_EOF:
                continue
            raise AssertionError(f"consumer error: {err}")
        out.append(m)
    return out


def confluent_consume(
    bootstrap: str, topic: str, partitions: int, n: int, timeout_s: float = 30
) -> list[Row]:
    """The first ``n`` records of the partitions (assigned from the beginning)."""
    c = confluent_consumer(bootstrap)
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        return sorted(
            (m.partition(), m.offset(), m.key(), m.value(), tuple(m.headers() or ()))
            for m in poll_messages(c, n, timeout_s)
        )
    finally:
        c.close()


# ---- aiokafka --------------------------------------------------------------------------


def aiokafka_roundtrip(
    bootstrap: str, topic: str, recs: list[Rec], partitions: int, codec: str
) -> list[Row]:
    """Produce ``recs`` with aiokafka (acks=all) and read them back with its consumer."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as AioTP

    async def run() -> list[Row]:
        p = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            compression_type=None if codec == "none" else codec,
            acks="all",
            request_timeout_ms=10_000,
            linger_ms=5,
        )
        await p.start()
        try:
            futs = [
                await p.send(topic, value=v, key=k, partition=part, headers=h)
                for part, k, v, h in recs
            ]
            await asyncio.gather(*futs)
        finally:
            await p.stop()
        c = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            request_timeout_ms=10_000,
        )
        await c.start()
        try:
            tps = [AioTP(topic, i) for i in range(partitions)]
            c.assign(tps)
            await c.seek_to_beginning(*tps)
            rows: list[Row] = []
            deadline = time.monotonic() + 30
            while len(rows) < len(recs) and time.monotonic() < deadline:
                got = await c.getmany(timeout_ms=500)
                for tp, msgs in got.items():
                    rows += [
                        (tp.partition, m.offset, m.key, m.value, tuple(m.headers)) for m in msgs
                    ]
            return sorted(rows)
        finally:
            await c.stop()

    return asyncio.run(asyncio.wait_for(run(), 90))


# ---- kafka-python ----------------------------------------------------------------------


def kafka_python_roundtrip(
    bootstrap: str, topic: str, recs: list[Rec], partitions: int, codec: str
) -> list[Row]:
    """Produce ``recs`` with kafka-python's default producer (idempotent, acks=all) and
    read them back with its consumer."""
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KpTP

    p = KafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if codec == "none" else codec,
        request_timeout_ms=10_000,
        max_block_ms=10_000,
        linger_ms=5,
    )
    try:
        futs = [p.send(topic, value=v, key=k, partition=part, headers=h) for part, k, v, h in recs]
        p.flush(timeout=20)
        for f in futs:
            f.get(timeout=10)
    finally:
        p.close(timeout=10)
    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        request_timeout_ms=10_000,
        consumer_timeout_ms=2_000,
    )
    try:
        tps = [KpTP(topic, i) for i in range(partitions)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        rows: list[Row] = []
        deadline = time.monotonic() + 30
        while len(rows) < len(recs) and time.monotonic() < deadline:
            for tp, msgs in c.poll(timeout_ms=500).items():
                rows += [(tp.partition, m.offset, m.key, m.value, tuple(m.headers)) for m in msgs]
        return sorted(rows)
    finally:
        c.close()
