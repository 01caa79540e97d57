"""``tiered-log produce`` and ``consume`` as a Kafka user (kcat, rpk, the console tools)
expects them, against a real server: keys and Kafka's default partitioner, a linger for
typed lines, a summary on Ctrl-C."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tiered_log.client import Client
from tiered_log.format.records import ProducerRecord
from tiered_log.partitioner import RecordMetadata, murmur2

from .conftest import ADMIN, ServerProcess, service_env


def _env(server: ServerProcess) -> dict[str, str]:
    env = service_env()
    env.update(TIERED_LOG_URL=server.url, TIERED_LOG_TOKEN=ADMIN)
    return env


def _cli(
    server: ServerProcess, *args: str, input: bytes | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "tiered_log.cli", *args],
        env=_env(server),
        input=input,
        capture_output=True,
        timeout=timeout,
    )


def _kafka_partition(key: bytes, partitions: int) -> int:
    """Where a Kafka client puts ``key`` (kafka-python's murmur2 when installed)."""
    try:
        from kafka.partitioner.default import murmur2 as kafka_murmur2
    except ImportError:
        return (murmur2(key) & 0x7FFFFFFF) % partitions
    return (int(kafka_murmur2(key)) & 0x7FFFFFFF) % partitions


def _all_records(
    c: Client, topic: str, partitions: int
) -> dict[int, list[tuple[bytes | None, bytes | None]]]:
    out: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
    for p in range(partitions):
        r = c.fetch(topic, p, 0, max_records=10_000)
        out[p] = [(x.key, x.value) for x in r.records]
    return out


def test_produce_keys_land_where_kafka_puts_them(server: ServerProcess, topic_name: str) -> None:
    with Client(server.url, token=ADMIN) as c:
        c.create_topic(topic_name, 3)
        lines = [f"user-{i}:event {i}:x" for i in range(60)]
        p = _cli(
            server,
            "produce",
            topic_name,
            "-K",
            ":",
            input=("\n".join(lines) + "\nno-separator\nempty:\n").encode(),
        )
        assert p.returncode == 0, p.stderr
        got = _all_records(c, topic_name, 3)
    expected: dict[int, list[tuple[bytes | None, bytes]]] = {0: [], 1: [], 2: []}
    for i in range(60):
        key = f"user-{i}".encode()
        expected[_kafka_partition(key, 3)].append((key, f"event {i}:x".encode()))
    assert all(expected.values())  # the keys spread over every partition
    expected[_kafka_partition(b"empty", 3)].append((b"empty", b""))  # an empty value, as kcat
    keyless = [(None, b"no-separator")]
    assert {p: [r for r in recs if r[0] is not None] for p, recs in got.items()} == expected
    assert sum((r for recs in got.values() for r in recs if r[0] is None), ()) == keyless[0]
    err = p.stderr.decode().strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"produced 62 records to {topic_name}: partition 0 ")


def test_produce_and_consume_null_values_as_kcat_does(
    server: ServerProcess, topic_name: str
) -> None:
    """kcat's -Z: an empty value is produced as a null value (a tombstone: ``key:`` with
    ``-K :`` deletes ``key``), and consume prints a null key or value as NULL (without
    -Z: as nothing; an empty value prints as nothing either way)."""
    with Client(server.url, token=ADMIN) as c:
        c.create_topic(topic_name, 1)
        p = _cli(server, "produce", topic_name, "-K", ":", "-Z", input=b"a:1\ngone:\nnokey\n")
        assert p.returncode == 0, p.stderr
        p = _cli(server, "produce", topic_name, "-K", ":", input=b"empty:\n")
        assert p.returncode == 0, p.stderr
        got = _all_records(c, topic_name, 1)[0]
    assert got == [(b"a", b"1"), (b"gone", None), (None, b"nokey"), (b"empty", b"")]
    fmt = "%k=%s (%K %S)\\n"
    p = _cli(server, "consume", topic_name, "-f", fmt, "-Z")
    assert p.returncode == 0, p.stderr
    assert p.stdout.decode().splitlines() == [
        "a=1 (1 1)",
        "gone=NULL (4 -1)",
        "NULL=nokey (-1 5)",
        "empty= (5 0)",
    ]
    p = _cli(server, "consume", topic_name, "-f", fmt)
    assert p.stdout.decode().splitlines()[1:3] == ["gone= (4 -1)", "=nokey (-1 5)"]
    p = _cli(server, "consume", topic_name, "-f", "json")
    rows = [json.loads(line) for line in p.stdout.decode().splitlines()]
    assert [(r["key"], r["value"], r["value_b64"]) for r in rows] == [
        ("a", "1", None),
        ("gone", None, None),
        (None, "nokey", None),
        ("empty", "", None),
    ]


def test_produce_one_key_and_an_explicit_partition(server: ServerProcess, topic_name: str) -> None:
    with Client(server.url, token=ADMIN) as c:
        c.create_topic(topic_name, 4)
        assert (
            _cli(server, "produce", topic_name, "--key", "order-7", input=b"a\nb\n").returncode == 0
        )
        assert _cli(server, "produce", topic_name, "-p", "3", input=b"c\n").returncode == 0
        got = _all_records(c, topic_name, 4)
    home = _kafka_partition(b"order-7", 4)
    assert got[home][:2] == [(b"order-7", b"a"), (b"order-7", b"b")]
    assert (None, b"c") in got[3]


def test_produce_keyless_batches_go_round_the_partitions(
    server: ServerProcess, topic_name: str
) -> None:
    with Client(server.url, token=ADMIN) as c:
        c.create_topic(topic_name, 3)
        p = _cli(
            server,
            "produce",
            topic_name,
            "--batch-size",
            "2",
            input=b"".join(b"v%d\n" % i for i in range(6)),
        )
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
    server: ServerProcess, topic_name: str
) -> None:
    with Client(server.url, token=ADMIN) as c:
        c.create_topic(topic_name)
        proc = subprocess.Popen(
            [sys.executable, "-m", "tiered_log.cli", "produce", topic_name],
            env=_env(server),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            assert proc.stdin is not None
            time.sleep(1.0)  # the command is up and waiting for input
            proc.stdin.write(b"typed\n")
            proc.stdin.flush()
            # stdin stays open: a command that waited for the end of input would never
            # send the line (the bound is a hang guard, not a speed check).
            sent_at = time.monotonic()
            while c.bounds(topic_name, 0).next_offset < 1:
                assert time.monotonic() - sent_at < 30.0, "the line waits for the end of input"
                time.sleep(0.02)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=15)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 130
    # The record is in the log; the command may or may not have read the answer yet
    # when the interrupt came, and says which.
    assert err.decode().strip().splitlines()[0] in (
        f"tiered-log: interrupted: produced 1 record to {topic_name}/0 (offsets 0..0)",
        f"tiered-log: interrupted: produced 0 records to {topic_name}, 1 record sent but "
        "not acknowledged (they may or may not be in the log)",
    )
    assert len(err.decode().strip().splitlines()) == 1


def test_produce_help_and_bad_input(server: ServerProcess, topic_name: str, tmp_path: Path) -> None:
    p = _cli(server, "produce", "--help")
    text = " ".join(p.stdout.decode().split())
    assert p.returncode == 0
    for needed in (
        "--key-separator SEP",
        "--linger-ms MS",
        "(default: 100)",
        "(default: 500)",
        "murmur2",
        "the topic to append to",
    ):
        assert needed in text, needed
    for bad in (
        ["-K", ""],
        ["--linger-ms", "-1"],
        ["--batch-size", "0"],
        ["-K", ":", "--key", "k"],
    ):
        p = _cli(server, "produce", topic_name, *bad, input=b"x\n")
        assert p.returncode == 2, (bad, p.stderr)
        assert len(p.stderr.decode().strip().splitlines()) == 1, p.stderr
        assert b"Traceback" not in p.stderr


# ---- consume ---------------------------------------------------------------------------------


def _three_partitions(server: ServerProcess, topic: str) -> Client:
    c = Client(server.url, token=ADMIN)
    c.create_topic(topic, 3)
    for p in range(3):
        c.produce(
            topic,
            p,
            [
                ProducerRecord(
                    f"p{p}-v{i}".encode(),
                    key=f"k{i}".encode(),
                    headers=(("h", b"x"),),
                    timestamp=1_000 + i,
                )
                for i in range(5)
            ],
        )
    return c


def test_consume_reads_every_partition_with_kcat_offsets_and_format(
    server: ServerProcess, topic_name: str
) -> None:
    with _three_partitions(server, topic_name):
        p = _cli(server, "consume", topic_name)
        assert p.returncode == 0, p.stderr
        assert sorted(p.stdout.decode().split()) == sorted(
            f"p{q}-v{i}" for q in range(3) for i in range(5)
        )
        p = _cli(server, "consume", topic_name, "-o", "-2", "-f", r"%t|%p|%o|%k|%s|%T|%h\n")
        assert p.returncode == 0, p.stderr
        assert sorted(p.stdout.decode().splitlines()) == sorted(
            f"{topic_name}|{q}|{i}|k{i}|p{q}-v{i}|{1000 + i}|h=x" for q in range(3) for i in (3, 4)
        )
        for spec, first in (("beginning", 0), ("3", 3), ("s@1004", 4), ("end", 5)):
            p = _cli(server, "consume", topic_name, "-p", "1", "-o", spec, "-f", "%o ")
            assert p.returncode == 0, (spec, p.stderr)
            assert p.stdout.decode().split() == [str(o) for o in range(first, 5)], spec
        p = _cli(
            server,
            "consume",
            topic_name,
            "-p",
            "2",
            "--timestamp",
            "1970-01-01T00:00:01.003Z",
            "-f",
            "json",
        )
        assert [json.loads(x)["offset"] for x in p.stdout.decode().splitlines()] == [3, 4]
        assert json.loads(p.stdout.decode().splitlines()[0])["partition"] == 2
        p = _cli(server, "consume", topic_name, "-n", "7")
        assert len(p.stdout.decode().splitlines()) == 7
        for bad in (
            ["-o", "latest-ish"],
            ["-o", "stored"],
            ["-f", "%q"],
            ["-f", "plain"],
            ["--timestamp", "yesterday"],
        ):
            p = _cli(server, "consume", topic_name, *bad)
            assert p.returncode == 2, (bad, p.stderr)
            assert len(p.stderr.decode().strip().splitlines()) == 1 and b"Traceback" not in p.stderr


def test_consume_follow_goes_on_through_a_server_restart(
    server_factory: Any, topic_name: str
) -> None:
    srv = server_factory()
    with Client(srv.url) as c:
        c.create_topic(topic_name, 2)
        c.produce(topic_name, 0, [b"before"])
    env = service_env()
    env["TIERED_LOG_URL"] = srv.url
    proc = subprocess.Popen(
        [sys.executable, "-m", "tiered_log.cli", "consume", topic_name, "--follow"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"before\n"
        srv.restart()
        with Client(srv.url) as c:
            c.produce(topic_name, 1, [b"after"])
        assert proc.stdout.readline() == b"after\n"
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
        assert proc.stderr is not None
        err = proc.stderr.read().decode()
        assert "retrying" in err and "Traceback" not in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_consume_after_a_restore_with_lost_offsets(
    server_factory: Any, tmp_path: Path, topic_name: str
) -> None:
    settings = {"remote_url": str(tmp_path / "bucket"), "ship_interval_ms": "50"}
    srv = server_factory(**settings)
    with Client(srv.url) as c:
        c.create_topic(topic_name, 1, {"segment_bytes": 4096})
        for start in range(0, 300, 30):
            c.produce(topic_name, 0, [b"v%04d-" % i + b"x" * 100 for i in range(start, start + 30)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with srv.client(None) as h:
                shipped = h.get(f"/v1/topics/{topic_name}/partitions/0/remote-segments").json()[
                    "remote_end_offset"
                ]
            if shipped >= 240:
                break
            time.sleep(0.05)
    assert srv.stop() == 0
    srv2 = server_factory(**settings)  # an empty disk, the same bucket: the tail is lost
    with Client(srv2.url) as c:
        info = c.describe_topic(topic_name)["partition_info"][0]
        ((lost_first, lost_end),) = info["lost_offsets"]
        c.produce(topic_name, 0, [b"new"])
    env = service_env()
    env["TIERED_LOG_URL"] = srv2.url
    p = subprocess.run(
        [sys.executable, "-m", "tiered_log.cli", "consume", topic_name],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert p.returncode == 1
    assert len(p.stdout.splitlines()) == lost_first
    err = p.stderr.decode().strip().splitlines()
    assert len(err) == 1 and f"the next readable offset of partition 0 is {lost_end}" in err[0]
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "tiered_log.cli",
            "consume",
            topic_name,
            "--skip-lost",
            "-f",
            r"%o\n",
        ],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.decode().split() == [str(o) for o in [*range(lost_first), lost_end]]
    assert f"offsets {lost_first}..{lost_end - 1} are lost; skipped" in p.stderr.decode()
