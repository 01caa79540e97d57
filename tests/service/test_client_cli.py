"""The sync and async clients and the service CLI commands, against a real server."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tiered_log import (
    InvalidArgumentError,
    InvalidTopicNameError,
    OffsetOutOfRangeError,
    ProducerRecord,
    RecordTooLargeError,
    TopicExistsError,
    TopicNotFoundError,
)
from tiered_log.client import (
    AsyncClient,
    Client,
    ConnectionFailedError,
    PartitionBounds,
    partition_for_key,
)
from tiered_log.errors import NotAClusterError
from tiered_log.service.auth import AuthenticationError, PermissionDeniedError

from .conftest import ADMIN, READER, ServerProcess, free_port, service_env


def test_sync_client_round_trip(server: ServerProcess, topic_name: str) -> None:
    with Client(server.url, token=ADMIN) as c:
        d = c.create_topic(topic_name, 2, {"segment_bytes": 2048})
        assert d["partitions"] == 2 and d["config"]["segment_bytes"] == 2048
        assert topic_name in [t["name"] for t in c.list_topics()]
        assert c.describe_topic(topic_name)["topic_id"] == d["topic_id"]
        offsets = c.produce(
            topic_name,
            1,
            [
                b"bytes\xff",
                "text",
                ProducerRecord(b"v", key=b"k", headers=(("h", b"\x00"), ("n", None)), timestamp=42),
            ],
        )
        assert offsets == [0, 1, 2]
        assert c.produce_raw(topic_name, 1, [b"chunk1-", b"chunk2"], key="rk") == 3
        assert c.produce_raw(topic_name, 1, b"plain", timestamp=43) == 4
        r = c.fetch(topic_name, 1, 0)
        assert [x.value for x in r.records] == [
            b"bytes\xff",
            b"text",
            b"v",
            b"chunk1-chunk2",
            b"plain",
        ]
        assert r.records[2].key == b"k" and r.records[2].headers == (("h", b"\x00"), ("n", None))
        assert r.records[2].timestamp == 42 and r.records[3].key == b"rk"
        assert (r.next_offset, r.high_watermark, r.log_start_offset) == (5, 5, 0)
        assert r.records[4].timestamp == 43
        r = c.fetch(topic_name, 1, 1, max_records=2)
        assert [x.offset for x in r.records] == [1, 2] and r.next_offset == 3
        assert c.fetch(topic_name, 1, 5).records == []
        assert c.offset_for_timestamp(topic_name, 1, 0) == 0
        assert c.offset_for_timestamp(topic_name, 1, r.records[0].timestamp) == 0
        assert c.offset_for_timestamp(topic_name, 1, 1 << 50) is None
        b = c.bounds(topic_name, 1)
        assert isinstance(b, PartitionBounds) and b.next_offset == 5
        assert c.truncate(topic_name, 1, 3).next_offset == 3
        assert "tiered_log_append_records_total" in c.metrics()
        assert c.health()["status"] == "ok"
        c.delete_topic(topic_name)
        with pytest.raises(TopicNotFoundError):
            c.describe_topic(topic_name)


def test_client_errors_map_to_the_library_tree(server: ServerProcess, topic_name: str) -> None:
    with Client(server.url, token=ADMIN) as c:
        c.create_topic(topic_name, config={"append_threshold": 100})
        c.produce(topic_name, 0, [b"a", b"b"])
        with pytest.raises(TopicExistsError):
            c.create_topic(topic_name)
        with pytest.raises(InvalidTopicNameError):
            c.create_topic("../etc")
        with pytest.raises(TopicNotFoundError):
            c.fetch("no-such-topic", 0, 0)
        with pytest.raises(OffsetOutOfRangeError) as ei:
            c.fetch(topic_name, 0, 10)
        assert (ei.value.log_start, ei.value.next_offset) == (0, 2)
        with pytest.raises(RecordTooLargeError):
            c.produce_raw(topic_name, 0, b"x" * 101)
        with pytest.raises(RecordTooLargeError):
            c.produce(topic_name, 0, [b"y" * 101])
    with Client(server.url) as c, pytest.raises(AuthenticationError):
        c.list_topics()
    with Client(server.url, token=READER) as c, pytest.raises(PermissionDeniedError):
        c.fetch(topic_name, 0, 0)
    with Client(f"http://127.0.0.1:{free_port()}") as c, pytest.raises(ConnectionFailedError) as ce:
        c.health()
    assert ce.value.retriable


def test_async_client_round_trip(server: ServerProcess, topic_name: str) -> None:
    async def main() -> None:
        async with AsyncClient(server.url, token=ADMIN) as c:
            await c.create_topic(topic_name)
            offsets = await asyncio.gather(
                *(c.produce(topic_name, 0, [f"m{i}".encode()]) for i in range(20))
            )
            assert sorted(o[0] for o in offsets) == list(range(20))

            async def gen() -> Any:
                for i in range(3):
                    yield bytes([65 + i]) * 10

            assert await c.produce_raw(topic_name, 0, gen()) == 20
            r = await c.fetch(topic_name, 0, 0, max_records=100)
            assert len(r.records) == 21 and r.records[-1].value == b"A" * 10 + b"B" * 10 + b"C" * 10
            assert {x.value for x in r.records[:20]} == {f"m{i}".encode() for i in range(20)}
            assert (await c.bounds(topic_name, 0)).next_offset == 21
            assert await c.offset_for_timestamp(topic_name, 0, 0) == 0
            assert (await c.truncate(topic_name, 0, 20)).next_offset == 20
            assert (await c.describe_topic(topic_name))["name"] == topic_name
            assert topic_name in [t["name"] for t in await c.list_topics()]
            with pytest.raises(OffsetOutOfRangeError):
                await c.fetch(topic_name, 0, 99)
            await c.delete_topic(topic_name)
            with pytest.raises(TopicNotFoundError):
                await c.bounds(topic_name, 0)

    asyncio.run(main())


def test_async_client_delete_records_and_assign_partitions(
    server: ServerProcess, topic_name: str
) -> None:
    """``AsyncClient.delete_records`` moves the partition's log start (reads below it
    are out of range; -1 is the high watermark; above it is refused) on that partition
    only; ``assign_partitions`` places a batch as the sync client's does (keyed records
    by the murmur2 hash of the key, a keyless batch on one partition, the next batch on
    the next one); on a single node the cluster calls are refused, and the archive calls
    answer as the sync client's do (a restore needs a source and a new name)."""
    keys = [f"k{i}".encode() for i in range(40)]
    keyed = [ProducerRecord(f"v{i}".encode(), key=k) for i, k in enumerate(keys)]
    want = {p: [i for i, k in enumerate(keys) if partition_for_key(k, 3) == p] for p in range(3)}

    async def main() -> None:
        async with AsyncClient(server.url, token=ADMIN) as c:
            await c.create_topic(topic_name, partitions=3)
            assert await c.assign_partitions(topic_name, keyed) == want
            keyless = [await c.assign_partitions(topic_name, [b"a", "b", b"c"]) for _ in range(4)]
            assert all(list(g.values()) == [[0, 1, 2]] for g in keyless)
            first = next(iter(keyless[0]))
            assert [next(iter(g)) for g in keyless] == [(first + i) % 3 for i in range(4)]
            with pytest.raises(TopicNotFoundError):
                await c.assign_partitions(topic_name + "-nope", keyed)
            other = topic_name + "-grows"
            await c.create_topic(other, partitions=1)
            assert await c.partitions(other) == 1  # now cached
            assert (await c.alter_topic(other, partitions=4))["partitions"] == 4
            assert await c.partitions(other) == 4  # the cache forgot the old count
            spread = await c.assign_partitions(other, keyed)
            assert spread == {
                p: [i for i, k in enumerate(keys) if partition_for_key(k, 4) == p] for p in range(4)
            }
            await c.delete_topic(other)

            assert await c.produce(topic_name, 1, [f"r{i}".encode() for i in range(10)]) == list(
                range(10)
            )
            await c.produce(topic_name, 2, [b"other"])
            b = await c.delete_records(topic_name, 1, 4)
            assert (b.log_start_offset, b.next_offset) == (4, 10)
            with pytest.raises(OffsetOutOfRangeError) as oor:
                await c.fetch(topic_name, 1, 3)
            assert oor.value.log_start == 4
            got = await c.fetch(topic_name, 1, 4)
            assert [(r.offset, r.value) for r in got.records] == [
                (i, f"r{i}".encode()) for i in range(4, 10)
            ]
            assert (await c.delete_records(topic_name, 1, 2)).log_start_offset == 4  # never down
            with pytest.raises(OffsetOutOfRangeError):
                await c.delete_records(topic_name, 1, 11)
            b = await c.delete_records(topic_name, 1, -1)
            assert (b.log_start_offset, b.next_offset) == (10, 10)
            assert (await c.bounds(topic_name, 2)).log_start_offset == 0
            with pytest.raises(TopicNotFoundError):
                await c.delete_records(topic_name + "-nope", 0, 1)

            with Client(server.url, token=ADMIN) as sync:
                assert sync.assign_partitions(topic_name, keyed) == want
                assert await c.archive_anomalies() == sync.archive_anomalies()
                assert await c.archived_segments(topic_name, 1) == sync.archived_segments(
                    topic_name, 1
                )
            for call in (c.reassign(1, 2), c.restore([topic_name])):
                with pytest.raises(NotAClusterError):
                    await call
            with pytest.raises(TopicExistsError, match="exists already"):
                await c.restore_topic(topic_name + "-nope", topic_name, to_offset=1)
            with pytest.raises(TopicNotFoundError, match="-nope"):
                await c.restore_topic(topic_name + "-nope", topic_name + "-copy", to_offset=1)

    asyncio.run(main())


def test_consume_pages_every_record_once(server: ServerProcess, topic_name: str) -> None:
    """Pipelined consume: every offset once and in order, pages honour max_records, the
    end_offset is exclusive, follow picks up records appended meanwhile."""
    import threading

    with Client(server.url, token=ADMIN) as c:
        c.create_topic(topic_name)
        for i in range(0, 250, 50):
            c.produce(topic_name, 0, [f"r{j}".encode() for j in range(i, i + 50)])
        pages = list(c.consume(topic_name, 0, 0, max_records=40))
        got = [r.offset for p in pages for r in p.records]
        assert got == list(range(250))
        assert all(len(p.records) <= 40 for p in pages) and pages[-1].next_offset == 250
        assert [r.value for p in pages for r in p.records][7] == b"r7"
        plain = list(c.consume(topic_name, 0, 0, max_records=40, prefetch=False))
        assert [[r.offset for r in p.records] for p in plain] == [
            [r.offset for r in p.records] for p in pages
        ]
        # end_offset is exclusive and never overshot, even inside a page.
        got = [
            r.offset
            for p in c.consume(topic_name, 0, 13, end_offset=101, max_records=40)
            for r in p.records
        ]
        assert got == list(range(13, 101))
        assert list(c.consume(topic_name, 0, 5, end_offset=5)) == []
        # Breaking out early is fine (the request in flight is waited for).
        it = c.consume(topic_name, 0, 0, max_records=10)
        assert [r.offset for r in next(it).records] == list(range(10))
        it.close()

        # follow: records produced after the consumer reached the end arrive too.
        def later() -> None:
            time.sleep(0.3)
            c.produce(topic_name, 0, [b"late-1", b"late-2"])

        th = threading.Thread(target=later)
        th.start()
        seen: list[bytes | None] = []
        for p in c.consume(topic_name, 0, 248, follow=True, wait_ms=200):
            seen.extend(r.value for r in p.records)
            if len(seen) >= 4:
                break
        th.join()
        assert seen == [b"r248", b"r249", b"late-1", b"late-2"]
        with pytest.raises(InvalidArgumentError):
            list(c.consume(topic_name, 0, 10, end_offset=5))
        with pytest.raises(OffsetOutOfRangeError):
            list(c.consume(topic_name, 0, 999))

    async def main() -> None:
        async with AsyncClient(server.url, token=ADMIN) as ac:
            offs = [
                r.offset
                async for p in ac.consume(topic_name, 0, 3, max_records=64)
                for r in p.records
            ]
            assert offs == list(range(3, 252))
            offs = [
                r.offset
                async for p in ac.consume(topic_name, 0, 0, end_offset=70, max_records=64)
                for r in p.records
            ]
            assert offs == list(range(70))

    asyncio.run(main())


def _fetch_requests(c: Client, topic: str) -> int:
    """The server's count of binary fetches answered for ``topic`` (from /metrics)."""
    for line in c.metrics().splitlines():
        if (
            line.startswith("tiered_log_fetch_requests_total{")
            and f'topic="{topic}"' in line
            and 'format="binary"' in line
        ):
            return int(float(line.rsplit(" ", 1)[1]))
    return 0


def test_consume_sizes_requests_apart_from_pages(server: ServerProcess, topic_name: str) -> None:
    """As a Kafka consumer: a request brings up to max_bytes of records, handed out
    max_records at a time, so small pages do not cost a request each."""
    with Client(server.url, token=ADMIN) as c:
        c.create_topic(topic_name)
        for i in range(0, 3000, 500):
            c.produce(topic_name, 0, [b"v%d" % j for j in range(i, i + 500)])
        before = _fetch_requests(c, topic_name)
        pages = list(c.consume(topic_name, 0, 0, max_records=7))
        assert [r.offset for p in pages for r in p.records] == list(range(3000))
        assert all(1 <= len(p.records) <= 7 for p in pages[:-1]) and len(pages) >= 3000 // 7
        # 3,000 records under the 10,000 a request asks for: one request, plus the one
        # that finds the end of the log.
        assert _fetch_requests(c, topic_name) - before == 2
        # max_bytes bounds a request (whole batches): 20 batches of one 20 KB record,
        # 64 KiB requests -> at least 6 requests.
        for _ in range(20):
            c.produce(topic_name, 0, [b"x" * 20_000])
        before = _fetch_requests(c, topic_name)
        got = [
            r.offset
            for p in c.consume(topic_name, 0, 3000, max_records=1000, max_bytes=64 << 10)
            for r in p.records
        ]
        assert got == list(range(3000, 3020))
        assert _fetch_requests(c, topic_name) - before >= 20 * 20_000 // (64 << 10)


def test_client_survives_server_restart_on_kept_alive_connections(
    server_factory: Any, topic_name: str
) -> None:
    """Record GETs and POSTs reuse kept-alive connections; after the server restarts
    those are dead: the client notices before reuse (or retries a GET) and goes on."""
    srv = server_factory()
    with Client(srv.url) as c:
        c.create_topic(topic_name)
        assert c.produce(topic_name, 0, [b"a", b"b"]) == [0, 1]
        assert [r.value for r in c.fetch(topic_name, 0, 0).records] == [b"a", b"b"]
        srv.restart()
        assert [r.value for r in c.fetch(topic_name, 0, 0).records] == [b"a", b"b"]
        srv.restart()
        assert c.produce(topic_name, 0, [b"c"]) == [2]
        assert [r.offset for p in c.consume(topic_name, 0, 0) for r in p.records] == [0, 1, 2]
        srv.stop()
        with pytest.raises(ConnectionFailedError):
            c.fetch(topic_name, 0, 0)
        with pytest.raises(ConnectionFailedError):
            c.produce(topic_name, 0, [b"d"])


# ---- CLI -----------------------------------------------------------------------------------


def _cli(
    server: ServerProcess,
    *args: str,
    input: bytes | None = None,
    token: str | None = ADMIN,
    timeout: float = 60,
) -> subprocess.CompletedProcess[bytes]:
    env = service_env()
    env["TIERED_LOG_URL"] = server.url
    if token:
        env["TIERED_LOG_TOKEN"] = token
    return subprocess.run(
        [sys.executable, "-m", "tiered_log.cli", *args],
        env=env,
        input=input,
        capture_output=True,
        timeout=timeout,
    )


def test_cli_topics(server: ServerProcess, topic_name: str) -> None:
    p = _cli(
        server,
        "topics",
        "create",
        topic_name,
        "--partitions",
        "2",
        "--config",
        "flush_messages=10",
        "--config",
        "retention_ms=null",
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.decode().strip() == f"created topic {topic_name} with 2 partition(s)"
    p = _cli(server, "topics", "list")
    assert [topic_name, "2", "-"] in [ln.split() for ln in p.stdout.decode().splitlines()]
    p = _cli(server, "topics", "describe", topic_name, "--json")
    d = json.loads(p.stdout)
    assert d["config"]["flush_messages"] == 10 and d["config"]["retention_ms"] is None
    p = _cli(server, "topics", "create", topic_name)
    assert p.returncode == 1
    assert p.stderr.decode().strip().splitlines() == [
        f"tiered-log: topic_exists: topic {topic_name!r} exists already"
    ]
    p = _cli(server, "topics", "delete", topic_name)
    assert p.returncode == 0
    p = _cli(server, "topics", "describe", topic_name)
    assert p.returncode == 1 and len(p.stderr.decode().strip().splitlines()) == 1
    p = _cli(server, "topics", "list", token=None)
    assert p.returncode == 1 and b"unauthenticated" in p.stderr
    p = _cli(server, "topics", "create", "x", "--config", "flush_messages")
    assert p.returncode == 2


def test_cli_produce_and_consume(server: ServerProcess, topic_name: str, tmp_path: Path) -> None:
    assert _cli(server, "topics", "create", topic_name).returncode == 0
    lines = [f"line {i} ✓" for i in range(1200)]
    f = tmp_path / "in.txt"
    f.write_text("\n".join(lines[:1000]) + "\n", encoding="utf-8")
    p = _cli(server, "produce", topic_name, "--file", str(f), "--batch-size", "300", "--progress")
    assert p.returncode == 0, p.stderr
    assert "produced 1,000 records" in p.stderr.decode()
    before_stdin = int(time.time() * 1000)
    time.sleep(0.01)
    p = _cli(server, "produce", topic_name, input=("\r\n".join(lines[1000:]) + "\r\n").encode())
    assert p.returncode == 0, p.stderr

    p = _cli(server, "consume", topic_name)
    assert p.returncode == 0, p.stderr
    assert p.stdout.decode().splitlines() == lines
    p = _cli(server, "consume", topic_name, "--offset", "1195")
    assert p.stdout.decode().splitlines() == lines[1195:]
    p = _cli(server, "consume", topic_name, "--offset", "10", "-n", "3", "--format", "json")
    recs = [json.loads(x) for x in p.stdout.decode().splitlines()]
    assert [r["offset"] for r in recs] == [10, 11, 12] and recs[0]["value"] == lines[10]
    p = _cli(server, "consume", topic_name, "--timestamp", str(before_stdin))
    assert p.stdout.decode().splitlines() == lines[1000:]
    p = _cli(server, "consume", topic_name, "--offset", "5000")
    assert p.returncode == 1 and b"offset_out_of_range" in p.stderr


def test_cli_consume_follow_stops_on_sigterm(server: ServerProcess, topic_name: str) -> None:
    assert _cli(server, "topics", "create", topic_name).returncode == 0
    env = service_env()
    env.update(TIERED_LOG_URL=server.url, TIERED_LOG_TOKEN=ADMIN)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tiered_log.cli", "consume", topic_name, "--follow"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        with Client(server.url, token=ADMIN) as c:
            time.sleep(1.0)
            c.produce(topic_name, 0, [b"first", b"second"])
            assert proc.stdout is not None
            assert proc.stdout.readline() == b"first\n"
            assert proc.stdout.readline() == b"second\n"
            c.produce(topic_name, 0, [b"third"])
            assert proc.stdout.readline() == b"third\n"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_follow_with_max_records_ends(server: ServerProcess, topic_name: str) -> None:
    with Client(server.url, token=ADMIN) as c:
        c.create_topic(topic_name)
        c.produce(topic_name, 0, [b"a", b"b", b"c"])
    p = _cli(server, "consume", topic_name, "--follow", "-n", "2")
    assert p.returncode == 0 and p.stdout == b"a\nb\n"


def test_cli_serve_invalid_settings(tmp_path: Path) -> None:
    env = service_env(port="nope")
    p = subprocess.run(
        [sys.executable, "-m", "tiered_log.cli", "serve", "--data-dir", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        "tiered-log: invalid setting port (TIERED_LOG_PORT): Input should be a valid integer, "
        "unable to parse "
        "string as an integer"
    ]


def test_cli_main_in_process(
    server: ServerProcess, topic_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from tiered_log.cli import main

    base = ["--url", server.url, "--token", ADMIN]
    assert main(["topics", "create", topic_name, *base]) == 0
    assert main(["topics", "list", "--json", *base]) == 0
    out = capsys.readouterr().out
    assert topic_name in out
    assert main(["topics", "delete", topic_name, *base]) == 0
    assert main(["topics", "delete", topic_name, *base]) == 1
    assert "topic_not_found" in capsys.readouterr().err
