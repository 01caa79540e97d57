"""``tiered-log perf kafka``: Kafka clients against the service's Kafka listener, each
figure next to its baseline measured in the same run.

A real server process (:class:`~tiered_log.perf.http.ServerProcess`: ``python -m
tiered_log.service`` on 127.0.0.1, HTTP and Kafka listeners on free ports, data in a
fresh directory, its remote tier the default local directory beside it) serves three
measurements, each alternated with its baseline (their order reversed every other
round) for ``repeat`` rounds:

- **produce**: a ``confluent-kafka`` Producer sends ``mib`` MiB of 1 KiB records to a
  fresh one-partition topic (acks=1, no compression, large batches: see
  :data:`PRODUCER_CONFIG`), timed from the first ``produce()`` until ``flush()`` returns
  with every record acknowledged (the producer connected before, by one acknowledged
  record elsewhere; delivery reports for failures only, as a Python callback per
  record costs the producer about as much CPU as the broker spends on the record).
  Baseline **library**: ``append_batch`` of the same values, 1,000 a batch, on a
  partition log opened in this process as the server opens one (the function ``perf
  http-produce`` times). Ratio ``produce_vs_library`` (records per second). Each round
  also counts CPU seconds per MB: the server process's, the producing process's and the
  library's (``produce.cpu_s_per_mb``), and the library's over the server's
  (``produce.server_cpu_vs_library``: above 1, the server spends less CPU per byte than
  the in-process append), the figure that tells a machine with cores to spare.
- **consume local**: a ``confluent-kafka`` Consumer without a group (``assign()`` at
  offset 0, large fetches: :data:`CONSUMER_CONFIG`) reads one produced topic from the
  start to its end, timed from ``assign()`` to the last record. Baseline **loopback**:
  the topic's segment files sent by a plain ``sendfile`` process to a plain
  ``recv_into`` receiver, as ``perf http-fetch`` measures it
  (:func:`~tiered_log.perf.fetch_limit.loopback_seconds`). Both rates count the same
  bytes: the stored batches of the range read (what a Fetch answer carries). Ratio
  ``consume_local_vs_loopback``.
- **consume archived**: the same consumer on a topic whose sealed segments were shipped
  to the remote tier and dropped locally (``local_retention_bytes=0``), its archived
  range only; the chunk cache is warmed by one untimed read first (the report counts
  the bucket reads made while timed: 0 when it stayed warm). Ratio
  ``consume_archived_vs_loopback`` against the same round's loopback figure. Both
  reads count CPU seconds per MB of the server process and of the consuming process
  (``consume.cpu_s_per_mb``).

Every timed read checks that it received the records the producer delivered (count
and last offset); a shortfall raises. The report gives each round's figures and
ratios, their median (``ratios``) and range (``ranges``), and ``targets`` with ``met``.
Progress goes to stderr. Not thread-safe: one benchmark at a time.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..allocator import tune_malloc
from .common import (
    DEFAULT_BATCH,
    MB,
    Progress,
    alternate,
    cpu_seconds,
    environment,
    figures,
    say,
)
from .common import per_round as round_ratios
from .fetch_limit import (
    FETCH_BYTES,
    MIN_MEASURED_BYTES,
    archived_overrides,
    loopback_seconds,
    ship_archived,
)
from .fetch_limit import _metric as metric_value
from .http import RECORD_BYTES, ServerProcess, _batches, _produce_library, topic_overrides

DEFAULT_MIB = 128
"""MiB of 1 KiB records produced per run by default."""
DEFAULT_KAFKA_REPEAT = 3
"""Rounds of each measurement and its baseline by default."""
KAFKA = "kafka"
LIBRARY = "library"
LOOPBACK = "loopback"
LOCAL = "local"
SERVER = "server"
CLIENT = "client"
ARCHIVED = "archived"
LOCAL_TOPIC = "perf-kafka"
ARCHIVED_TOPIC = "perf-kafka-archived"
WARMUP_TOPIC = "perf-kafka-warmup"
TARGETS: dict[str, tuple[str, float]] = {
    "produce_vs_library": (LIBRARY, 0.5),
    "consume_local_vs_loopback": (LOOPBACK, 0.5),
    "consume_archived_vs_loopback": (LOOPBACK, 0.4),
}
"""Ratio name -> (its baseline, the minimum ratio)."""

PRODUCER_CONFIG: dict[str, Any] = {
    "acks": 1,
    "compression.type": "none",
    "linger.ms": 20,
    "batch.size": 4 << 20,
    "batch.num.messages": 100_000,
    "message.max.bytes": 16 << 20,
    "queue.buffering.max.messages": 2_000_000,
    "queue.buffering.max.kbytes": 2 << 20,
    "enable.idempotence": False,
    "delivery.report.only.error": True,
}
"""The producer's settings besides ``bootstrap.servers``: acks=1, no compression, 4 MiB
batches (one partition: one batch a request), a queue that holds a whole run."""

CONSUMER_CONFIG: dict[str, Any] = {
    "group.id": "perf-kafka",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "fetch.max.bytes": 64 << 20,
    "max.partition.fetch.bytes": FETCH_BYTES,
    "receive.message.max.bytes": (64 << 20) + (1 << 20),
    "fetch.wait.max.ms": 100,
    "queued.min.messages": 1_000_000,
    "queued.max.messages.kbytes": 1 << 20,
}
"""The consumer's settings besides ``bootstrap.servers``: no commits (``group.id`` is
only librdkafka's requirement; ``assign()`` joins no group), fetches of up to 64 MiB
with :data:`FETCH_BYTES` a partition (``perf http-fetch``'s request size), a deep
prefetch queue. CRC checks are librdkafka's default (off)."""

_CONSUME_BATCH = 10_000
"""Messages taken per ``Consumer.consume`` call."""


# ---- the clients --------------------------------------------------------------------------


def produce_kafka(
    bootstrap: str,
    topic: str,
    values: Sequence[bytes],
    progress: Progress,
    config: dict[str, Any] | None = None,
) -> tuple[float, int]:
    """Produce ``values`` to partition 0 of ``topic`` with :data:`PRODUCER_CONFIG` (and
    ``config`` over it): ``(seconds from the first produce until flush() returned with
    every record acknowledged, records delivered)``. A delivery error raises.

    The producer is connected before the clock starts: one record to
    :data:`WARMUP_TOPIC` (auto-created) is sent and acknowledged first, so the figure
    is the steady rate, not a client's start-up."""
    from confluent_kafka import KafkaException, Producer

    failed: list[Any] = []

    def on_delivery(err: Any, _msg: Any) -> None:  # called for failures only
        if err is not None:
            failed.append(err)

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            **PRODUCER_CONFIG,
            **(config or {}),
            "on_delivery": on_delivery,
        }
    )
    producer.produce(WARMUP_TOPIC, b"warm-up", partition=0)
    if producer.flush(30):
        raise KafkaException(f"{bootstrap}: the warm-up record was not acknowledged in 30 s")
    clock = time.perf_counter
    produce, poll, adv = producer.produce, producer.poll, progress.advance
    t0 = clock()
    for i, v in enumerate(values):
        while True:
            try:
                produce(topic, v, partition=0)
                break
            except BufferError:
                poll(0.05)
        if i & 4095 == 4095:
            poll(0)
            adv(4096)
    left = producer.flush(120)
    secs = clock() - t0
    progress.update(len(values))
    if failed or left:
        raise KafkaException(failed[0] if failed else f"{left} records still queued after 120 s")
    return max(secs, 1e-9), len(values)


def new_consumer(bootstrap: str) -> Any:
    """A confluent-kafka Consumer with :data:`CONSUMER_CONFIG` (no group joined)."""
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": bootstrap, **CONSUMER_CONFIG})


def consume_kafka(
    consumer: Any, topic: str, start: int, end: int, progress: Progress, timeout: float = 120.0
) -> tuple[float, int]:
    """Read partition 0 of ``topic`` from ``start`` until the record at ``end - 1``:
    ``(seconds from assign() to that record, records received in [start, end))``.
    A consumer error, or no progress for ``timeout`` seconds, raises. Returns once the
    consumer's last long-poll fetch has ended (see the comment at the end), so reads
    one after another do not time each other's tails."""
    from confluent_kafka import KafkaException, TopicPartition

    consume, adv = consumer.consume, progress.advance
    n = 0
    last = start - 1
    clock = time.perf_counter
    t0 = clock()
    consumer.assign([TopicPartition(topic, 0, start)])
    try:
        deadline = t0 + timeout
        while last < end - 1:
            # consume() returns when it has all it was asked for or at the timeout: never
            # ask for more than the range still holds.
            msgs = consume(max(1, min(_CONSUME_BATCH, end - 1 - last)), 1.0)
            if not msgs:
                if clock() > deadline:
                    raise KafkaException(
                        f"{topic}: no record past offset {last} within {timeout:.0f} s"
                    )
                continue
            for m in msgs:
                if m.error() is not None:
                    raise KafkaException(m.error())
            tail = msgs[-1].offset()
            if tail >= end:  # read past the range (the archived topic's local tail)
                n += sum(1 for m in msgs if m.offset() < end)
            else:
                n += len(msgs)
            last = tail
            adv(len(msgs))
            deadline = clock() + timeout
        secs = clock() - t0
    finally:
        consumer.unassign()
    # The fetch in flight at the range's end is a long poll: the listener answers a
    # connection's requests in order, so the next read's first fetch would queue behind
    # it. Let it end before the next clock starts.
    time.sleep(CONSUMER_CONFIG["fetch.wait.max.ms"] / 1000 + 0.05)
    return secs, n


# ---- the run ------------------------------------------------------------------------------


def _check(mib: int, repeat: int) -> None:
    from ..errors import InvalidArgumentError

    for name, v in (("mib", mib), ("repeat", repeat)):
        if v < 1:
            raise InvalidArgumentError(f"{name} must be at least 1, got {v}")


def _batch_bytes(client: Any, topic: str, start: int, end: int) -> int:
    """The stored batches' bytes of ``[start, end)`` (what Fetch answers carry)."""
    buffer = bytearray(FETCH_BYTES + (1 << 20))
    total, off = 0, start
    while off < end:
        got = client.fetch_batches(topic, 0, off, max_bytes=FETCH_BYTES, buffer=buffer)
        if got.next_offset <= off:
            raise RuntimeError(f"{topic}: fetch_batches at offset {off} read nothing")
        total += len(got.data)
        off = got.next_offset
    return total


def run_kafka(
    mib: int = DEFAULT_MIB,
    *,
    repeat: int = DEFAULT_KAFKA_REPEAT,
    directory: str | os.PathLike[str] | None = None,
    keep: bool = False,
    progress: bool | None = None,
) -> dict[str, Any]:
    """The three measurements and their baselines (see the module docstring); one
    JSON-able dict."""
    tune_malloc()  # the in-process side with the allocator settings of the service
    from ..client import Client
    from ..cluster.etcd_process import free_port
    from .local import _remove, work_dir

    _check(mib, repeat)
    show = progress is not False
    records = mib * (1 << 20) // RECORD_BYTES
    value_mb = records * RECORD_BYTES / MB
    with work_dir(directory, keep=keep) as root:
        say(f"kafka: preparing {records:,} records of {RECORD_BYTES} bytes", enabled=show)
        batches = _batches(records, DEFAULT_BATCH)
        values = [v for b in batches for v in b]
        (root / "server").mkdir()
        srv = ServerProcess(
            root / "server" / "data",
            root / "server" / "server.log",
            {
                "kafka_port": str(free_port()),
                "remote_cache_bytes": str(max(256 << 20, 2 * records * RECORD_BYTES)),
            },
        )
        say("kafka: starting the server", enabled=show)
        srv.start()
        assert srv.proc is not None
        server_pid = srv.proc.pid
        try:
            bootstrap = f"127.0.0.1:{srv.settings['kafka_port']}"
            with Client(srv.url, timeout=300) as client:
                say(f"kafka: server on {srv.url}, Kafka listener on {bootstrap}", enabled=show)

                cpu: dict[str, list[float]] = {SERVER: [], CLIENT: [], LIBRARY: []}

                def produce_round(i: int) -> float:
                    topic = LOCAL_TOPIC if i == 0 else f"{LOCAL_TOPIC}-{i}"
                    client.create_topic(topic, 1, topic_overrides(False))
                    with Progress(
                        records, f"produce round {i + 1}/{repeat} {KAFKA}", enabled=progress
                    ) as pr:
                        s0, c0 = cpu_seconds(server_pid), cpu_seconds()
                        secs, n = produce_kafka(bootstrap, topic, values, pr)
                        cpu[SERVER].append((cpu_seconds(server_pid) - s0) / value_mb)
                        cpu[CLIENT].append((cpu_seconds() - c0) / value_mb)
                    if n != records:
                        raise RuntimeError(f"{topic}: {n} records delivered of {records}")
                    if i:
                        client.delete_topic(topic)
                    return value_mb / secs

                def library_round(i: int) -> float:
                    lib_dir = root / f"library-{i}"
                    with Progress(
                        records, f"produce round {i + 1}/{repeat} {LIBRARY}", enabled=progress
                    ) as pr:
                        c0 = cpu_seconds()
                        secs = _produce_library(lib_dir, False, batches, pr)
                        cpu[LIBRARY].append((cpu_seconds() - c0) / value_mb)
                    if not keep:
                        _remove(lib_dir)
                    return value_mb / secs

                produce = alternate(
                    repeat, {KAFKA: produce_round, LIBRARY: library_round}, show, "kafka produce"
                )

                say("kafka: filling the archived topic (not timed)", enabled=show)
                archived_config = archived_overrides(False, records * RECORD_BYTES)
                client.create_topic(ARCHIVED_TOPIC, 1, archived_config)
                # A batch is never split between segments: batches of a quarter segment
                # let the segments roll (and be shipped) at their size.
                smaller = {"batch.size": max(16 << 10, archived_config["segment_bytes"] // 4)}
                with Progress(records, "fill archived topic", enabled=progress) as pr:
                    produce_kafka(bootstrap, ARCHIVED_TOPIC, values, pr, smaller)
                a_start, a_end = ship_archived(client, ARCHIVED_TOPIC)
                say(
                    f"kafka: offsets {a_start:,}-{a_end - 1:,} archived; warming the chunk cache",
                    enabled=show,
                )
                local_consumer = new_consumer(bootstrap)
                archived_consumer = new_consumer(bootstrap)
                try:
                    consumed: dict[str, list[int]] = {LOCAL: [], ARCHIVED: []}
                    read_cpu: dict[str, dict[str, list[float]]] = {
                        name: {SERVER: [], CLIENT: []} for name in (LOCAL, ARCHIVED)
                    }
                    for consumer, topic, start, end, name in (
                        (local_consumer, LOCAL_TOPIC, 0, records, LOCAL),
                        (archived_consumer, ARCHIVED_TOPIC, a_start, a_end, ARCHIVED),
                    ):
                        with Progress(end - start, f"warm-up read {name}", enabled=progress) as pr:
                            consumed[name].append(consume_kafka(consumer, topic, start, end, pr)[1])
                    local_bytes = _batch_bytes(client, LOCAL_TOPIC, 0, records)
                    arch_bytes = _batch_bytes(client, ARCHIVED_TOPIC, a_start, a_end)
                    files = sorted((srv.data_dir / "topics" / LOCAL_TOPIC / "0").glob("*.log"))
                    file_bytes = sum(f.stat().st_size for f in files)
                    passes = max(1, -(-MIN_MEASURED_BYTES // max(file_bytes, 1)))
                    buffer = bytearray(FETCH_BYTES + (1 << 20))
                    fetches_before = metric_value(
                        client.metrics(), "tiered_log_remote_fetch_requests_total", ARCHIVED_TOPIC
                    )

                    def loopback_round(i: int) -> float:
                        secs, n = loopback_seconds(files, passes, buffer)
                        return n / secs / MB

                    def consume_round(
                        consumer: Any, topic: str, start: int, end: int, name: str, nbytes: int
                    ) -> Callable[[int], float]:
                        mb = nbytes / MB

                        def run(i: int) -> float:
                            with Progress(
                                end - start,
                                f"consume round {i + 1}/{repeat} {name}",
                                enabled=progress,
                            ) as pr:
                                s0, c0 = cpu_seconds(server_pid), cpu_seconds()
                                secs, n = consume_kafka(consumer, topic, start, end, pr)
                                read_cpu[name][SERVER].append((cpu_seconds(server_pid) - s0) / mb)
                                read_cpu[name][CLIENT].append((cpu_seconds() - c0) / mb)
                            consumed[name].append(n)
                            if n != end - start:
                                raise RuntimeError(f"{topic}: read {n} records of {end - start}")
                            return nbytes / secs / MB

                        return run

                    consume = alternate(
                        repeat,
                        {
                            LOOPBACK: loopback_round,
                            LOCAL: consume_round(
                                local_consumer, LOCAL_TOPIC, 0, records, LOCAL, local_bytes
                            ),
                            ARCHIVED: consume_round(
                                archived_consumer,
                                ARCHIVED_TOPIC,
                                a_start,
                                a_end,
                                ARCHIVED,
                                arch_bytes,
                            ),
                        },
                        show,
                        "kafka consume",
                    )
                    fetches = (
                        metric_value(
                            client.metrics(),
                            "tiered_log_remote_fetch_requests_total",
                            ARCHIVED_TOPIC,
                        )
                        - fetches_before
                    )
                finally:
                    local_consumer.close()
                    archived_consumer.close()
        finally:
            srv.stop()
    say("kafka: done", enabled=show)
    per_round = {
        "produce_vs_library": round_ratios(produce, KAFKA, LIBRARY),
        "consume_local_vs_loopback": round_ratios(consume, LOCAL, LOOPBACK),
        "consume_archived_vs_loopback": round_ratios(consume, ARCHIVED, LOOPBACK),
    }
    ratios = {k: round(statistics.median(v), 3) for k, v in per_round.items()}
    # The library's CPU per MB over the server's, round by round: above 1, the server
    # spends less CPU per byte than the in-process append does.
    cpu_ratio = [
        round(lib / max(srv_cpu, 1e-9), 3)
        for lib, srv_cpu in zip(cpu[LIBRARY], cpu[SERVER], strict=True)
    ]
    ranges = {k: [min(v), max(v)] for k, v in per_round.items()}
    targets = {
        k: {
            "baseline": base,
            "min_ratio": minimum,
            "ratio": ratios[k],
            "range": ranges[k],
            "met": bool(ratios[k] >= minimum),
        }
        for k, (base, minimum) in TARGETS.items()
    }
    return {
        "benchmark": "kafka",
        "note": "produce: MB = 10**6 bytes of record values, kafka = confluent-kafka Producer "
        "from the first produce() until flush() returns (every record acknowledged), "
        "cpu_s_per_mb = CPU seconds per MB of the server process, the producing process "
        "and the library, library = append_batch in "
        "process (1,000 records a batch) on a log opened as the server opens partitions; "
        "consume: MB = the stored batches' bytes of the range read, kafka = confluent-kafka "
        "Consumer (assign() from the range's start, no group) to the range's last record, "
        "loopback = the local topic's segment files, plain sendfile sender to a plain "
        "recv_into receiver (passes times); rounds alternate each figure with its baseline, "
        "order reversed every other round; ratios = median of the rounds' ratios",
        "environment": environment(),
        "params": {
            "mib": mib,
            "records": records,
            "record_bytes": RECORD_BYTES,
            "repeat": repeat,
            "producer_config": PRODUCER_CONFIG,
            "consumer_config": CONSUMER_CONFIG,
            "topic_config": {LOCAL: topic_overrides(False), ARCHIVED: archived_config},
        },
        "produce": {
            "records": records,
            KAFKA: figures(produce[KAFKA]),
            LIBRARY: figures(produce[LIBRARY]),
            "cpu_s_per_mb": {k: [round(x, 5) for x in v] for k, v in cpu.items()},
            "server_cpu_vs_library": cpu_ratio,
        },
        "consume": {
            "records": {LOCAL: records, ARCHIVED: a_end - a_start},
            "records_read": consumed,
            "bytes": {LOCAL: local_bytes, ARCHIVED: arch_bytes, LOOPBACK: file_bytes * passes},
            "loopback_passes": passes,
            "archived_remote_fetches_while_timed": int(fetches),
            "cpu_s_per_mb": {
                name: {k: [round(x, 5) for x in v] for k, v in sides.items()}
                for name, sides in read_cpu.items()
            },
            LOOPBACK: figures(consume[LOOPBACK]),
            LOCAL: figures(consume[LOCAL]),
            ARCHIVED: figures(consume[ARCHIVED]),
        },
        "per_round": per_round,
        "ratios": ratios,
        "ranges": ranges,
        "targets": targets,
        "met": all(t["met"] for t in targets.values()),
    }


def format_lines(report: dict[str, Any]) -> str:
    """A readable summary of a :func:`run_kafka` report."""
    p = report["params"]
    lines = [
        f"perf kafka: {p['mib']} MiB ({p['records']:,} records of {p['record_bytes']} bytes), "
        f"{p['repeat']} rounds"
    ]
    for section, names in (("produce", (KAFKA, LIBRARY)), ("consume", (LOOPBACK, LOCAL, ARCHIVED))):
        for name in names:
            f = report[section][name]
            lines.append(
                f"{section:<8} {name:<9} best {f['mb_per_s']:>9,.1f} MB/s  runs "
                + ", ".join(f"{x:,.1f}" for x in f["runs_mb_per_s"])
            )
    cpu = report["produce"]["cpu_s_per_mb"]
    lines.append(
        "produce  CPU ms per MB: server "
        + ", ".join(f"{x * 1000:.2f}" for x in cpu[SERVER])
        + "; producer "
        + ", ".join(f"{x * 1000:.2f}" for x in cpu[CLIENT])
        + "; library "
        + ", ".join(f"{x * 1000:.2f}" for x in cpu[LIBRARY])
    )
    for name, sides in report["consume"]["cpu_s_per_mb"].items():
        lines.append(
            f"consume  {name} CPU ms per MB: server "
            + ", ".join(f"{x * 1000:.2f}" for x in sides[SERVER])
            + "; consumer "
            + ", ".join(f"{x * 1000:.2f}" for x in sides[CLIENT])
        )
    for k, t in report["targets"].items():
        lo, hi = t["range"]
        lines.append(
            f"{k}: median {t['ratio']:.2f} (range {lo:.2f}-{hi:.2f}, target >= {t['min_ratio']:g}) "
            f"{'met' if t['met'] else 'NOT MET'}"
        )
    return "\n".join(lines)


__all__ = [
    "CONSUMER_CONFIG",
    "DEFAULT_KAFKA_REPEAT",
    "DEFAULT_MIB",
    "PRODUCER_CONFIG",
    "TARGETS",
    "consume_kafka",
    "format_lines",
    "new_consumer",
    "produce_kafka",
    "run_kafka",
]
