"""``tiered-log produce`` and ``consume`` as a Kafka user (kcat, rpk, the console tools)
expects them, against a real server: keys and Kafka's default partitioner, a linger for
typed lines, a summary on Ctrl-C."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from tiered_log.client import Client
from tiered_log.client.partitioner import RecordMetadata, murmur2
from tiered_log.format.records import ProducerRecord

from .conftest import ADMIN, ServerProcess, service_env


def _env(server: ServerProcess) -> dict[str, str]:
    env = service_env()
    env.update(TIERED_LOG_URL=server.url, TIERED_LOG_TOKEN=ADMIN)
    return env


def _cli(server: ServerProcess, *args: str, input: bytes | None = None,
         timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([sys.executable, "-m", "tiered_log.cli", *args], env=_env(server),
                          input=input, capture_output=True, timeout=timeout)


def _kafka_partition(key: bytes, partitions: int) -> int:
    """Where a Kafka client puts ``key`` (kafka-python's murmur2 when installed)."""
    try:
        from kafka.partitioner.default import murmur2 as kafka_murmur2
    except ImportError:
        return (murmur2(key) & 0x7FFFFFFF) % partitions
    return (int(kafka_murmur2(key)) & 0x7FFFFFFF) % partitions


def _all_records(c: Client, topic: str, partitions: int) -> dict[int, list[tuple[bytes | None, bytes]]]:
    out: dict[int, list[tuple[bytes | None, bytes]]] = {}
    for p in range(partitions):
        r = c.fetch(topic, p, 0, max_records=10_000)
        out[p] = [(x.key, x.value) for x in r.records]
    return out


def test_produce_keys_land_where_kafka_puts_them(server: ServerProcess, topic_name: str) -> None:
    with Client(server.url, token=ADMIN) as c:
        c.create_topic(topic_name, 3)
        lines = [f"user-{i}:event {i}:x" for i in range(60)]
        p = _cli(server, "produce", topic_name, "-K", ":",
                 input=("\n".join(lines) + "\nno-separator\nempty:\n").encode())
        assert p.returncode == 0, p.stderr
        got = _all_records(c, topic_name, 3)
    expected: dict[int, list[tuple[bytes | None, bytes]]] = {0: [], 1: [], 2: []}
    for i in range(60):
        key = f"user-{i}".encode()
        expected[_kafka_partition(key, 3)].append((key, f"event {i}:x".encode()))
    assert all(expected.values())  # the keys spread over every partition
    keyless = [(None, b"no-separator")]
    assert {p: [r for r in recs if r[0] is not None] for p, recs in got.items()} == expected
    assert sum((r for recs in got.values() for r in recs if r[0] is None), ()) == keyless[0]
    err = p.stderr.decode().strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"produced 61 records to {topic_name}: partition 0 ")
    assert err[0].endswith("skipped 1 empty line")


def test_produce_one_key_and_an_explicit_partition(server: ServerProcess, topic_name: str) -> None:
    with Client(server.url, token=ADMIN) as c:
        c.create_topic(topic_name, 4)
        assert _cli(server, "produce", topic_name, "--key", "order-7",
                    input=b"a\nb\n").returncode == 0
        assert _cli(server, "produce", topic_name, "-p", "3", input=b"c\n").returncode == 0
        got = _all_records(c, topic_name, 4)
    home = _kafka_partition(b"order-7", 4)
    assert got[home][:2] == [(b"order-7", b"a"), (b"order-7", b"b")]
    assert (None, b"c") in got[3]


def test_produce_keyless_batches_go_round_the_partitions(server: ServerProcess,
                                                          topic_name: str) -> None:
    with Client(server.url, token=ADMIN) as c:
        c.create_topic(topic_name, 3)
        p = _cli(server, "produce", topic_name, "--batch-size", "2",
                 input=b"".join(b"v%d\n" % i for i in range(6)))
        assert p.returncode == 0, p.stderr
        got = _all_records(c, topic_name, 3)
    assert sorted(len(v) for v in got.values()) == [2, 2, 2]  # one batch each, not all on 0


def test_client_produce_without_a_partition(server: ServerProcess, topic_name: str) -> None:
    with Client(server.url, token=ADMIN) as c:
        c.create_topic(topic_name, 5)
        keys = [f"k{i}".encode() for i in range(20)]
        sent = c.send(topic_name, [ProducerRecord(b"v", key=k) for k in keys])
        assert [m.partition for m in sent] == [_kafka_partition(k, 5) for k in keys]
        assert all(isinstance(m, RecordMetadata) for m in sent)
        offsets = c.produce(topic_name, None, [ProducerRecord(b"w", key=b"k0")])
        assert offsets == [sum(1 for m in sent if m.partition == sent[0].partition)]
        first = c.send(topic_name, [b"x", b"y"])
        second = c.send(topic_name, [b"z"])
        assert first[0].partition == first[1].partition != second[0].partition


def test_typed_lines_are_sent_within_the_linger_and_ctrl_c_says_what_was_acked(
        server: ServerProcess, topic_name: str) -> None:
    with Client(server.url, token=ADMIN) as c:
        c.create_topic(topic_name)
        proc = subprocess.Popen([sys.executable, "-m", "tiered_log.cli", "produce", topic_name],
                                env=_env(server), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            assert proc.stdin is not None
            time.sleep(1.0)  # the command is up and waiting for input
            proc.stdin.write(b"typed\n")
            proc.stdin.flush()
            sent_at = time.monotonic()
            while c.bounds(topic_name, 0).next_offset < 1:
                assert time.monotonic() - sent_at < 3.0, "the line waits for the end of input"
                time.sleep(0.02)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=15)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 130
    assert err.decode().strip().splitlines() == [
        f"tiered-log: interrupted: produced 1 record to {topic_name}/0 (offsets 0..0)"]


def test_produce_help_and_bad_input(server: ServerProcess, topic_name: str, tmp_path: Path) -> None:
    p = _cli(server, "produce", "--help")
    text = " ".join(p.stdout.decode().split())
    assert p.returncode == 0
    for needed in ("--key-separator SEP", "--linger-ms MS", "(default: 100)", "(default: 500)",
                   "murmur2", "the topic to append to"):
        assert needed in text, needed
    for bad in (["-K", ""], ["--linger-ms", "-1"], ["--batch-size", "0"], ["-K", ":", "--key", "k"]):
        p = _cli(server, "produce", topic_name, *bad, input=b"x\n")
        assert p.returncode == 2, (bad, p.stderr)
        assert len(p.stderr.decode().strip().splitlines()) == 1, p.stderr
        assert b"Traceback" not in p.stderr
