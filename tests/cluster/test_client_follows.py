"""The clients follow partition leaders (:mod:`tiered_log.client.routing`), against a real
three-node cluster (:class:`~tiered_log.cluster.dev.DevCluster`: etcd from the wheel,
three ``tiered-log serve`` processes) and a real single node.

- a :class:`Client` given only a follower's URL produces (acks=all) and consumes;
- the leader SIGKILLed under one-batch-at-a-time acks=all produce, with a follow
  consumer running through it: every acknowledged value is read back exactly once, at
  its acknowledged offset, offsets dense, and the consumer saw no offset twice and no
  gap;
- :class:`AsyncClient` produces and consumes through a leader change;
- a single node (not clustered) with one URL, or a dead URL before it, works as before,
  and an unreachable single URL fails at once (no retrying for ``retry_timeout_s``).

One cluster serves the module; each test leaves every node running again. Every wait is
bounded."""

from __future__ import annotations

import asyncio
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tiered_log.client import AsyncClient, Client
from tiered_log.cluster.dev import DevCluster
from tiered_log.cluster.etcd_process import free_port
from tiered_log.errors import ConnectionFailedError, TieredLogError
from tiered_log.format.records import ProducerRecord
from tiered_log.partitioner import partition_for_key

from .conftest import dev_cluster
from .helpers import wait_until

pytestmark = pytest.mark.timeout(120)

LEASE_TTL_S = 2
SETTINGS = {
    "TIERED_LOG_CLUSTER_LEASE_TTL_S": str(LEASE_TTL_S),
    "TIERED_LOG_REPLICA_LAG_TIME_MAX_MS": "1500",
    "TIERED_LOG_REPLICATION_TIMEOUT_MS": "5000",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    yield from dev_cluster(tmp_path_factory, SETTINGS)


@pytest.fixture
def live_cluster(cluster: DevCluster) -> Iterator[DevCluster]:
    """The module's cluster; a node a test killed is started again after it, whatever
    the test's outcome (the next test needs three live nodes)."""
    yield cluster
    for n in cluster.nodes.values():
        if not n.alive:
            n.start()


def partition(c: Client, topic: str) -> dict[str, Any]:
    info = c.cluster()
    assert info is not None, "the cluster answered as a single node"
    for p in info["partitions"]:
        if p["topic"] == topic and p["partition"] == 0:
            return dict(p)
    raise AssertionError(f"{topic}-0 is not in the cluster metadata")


def create(cluster: DevCluster, topic: str) -> Client:
    """The topic (3 replicas) with a full ISR; a Client given every node's URL."""
    c = Client(",".join(cluster.urls), retry_timeout_s=20)
    c.create_topic(topic, 1, replication_factor=3)
    wait_until(lambda: len(partition(c, topic)["isr"]) == 3, 15, "a full ISR")
    return c


def restart_dead(cluster: DevCluster, c: Client, topic: str) -> None:
    for n in cluster.nodes.values():
        if not n.alive:
            n.start()
    wait_until(lambda: len(partition(c, topic)["isr"]) == 3, 30, "a full ISR again")


def read_all(c: Client, topic: str) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.value) for page in c.consume(topic, 0, 0) for r in page.records]


def check_exactly_once(got: list[tuple[int, bytes | None]], acked: dict[bytes, int]) -> None:
    offsets = [o for o, _ in got]
    assert offsets == list(range(len(got))), "offsets are dense, from 0, none twice"
    where: dict[bytes | None, list[int]] = {}
    for o, v in got:
        where.setdefault(v, []).append(o)
    for value, offset in acked.items():
        assert where.get(value) == [offset], (
            f"acknowledged {value!r} at {offset} is read at {where.get(value)}"
        )


def test_a_client_given_a_follower_produces_and_consumes(cluster: DevCluster) -> None:
    topic = "via-follower"
    with create(cluster, topic) as admin:
        st = partition(admin, topic)
    follower = next(cluster.nodes[r] for r in st["replicas"] if r != st["leader"])
    with Client(follower.url) as c:
        acked: dict[bytes, int] = {}
        for i in range(5):
            values = [f"f{i}-{j}".encode() for j in range(4)]
            acked.update(zip(values, c.produce(topic, 0, values, acks="all"), strict=True))
        assert c.bounds(topic, 0).high_watermark == 20
        assert c.offset_for_timestamp(topic, 0, 0) == 0
        check_exactly_once(read_all(c, topic), acked)
        assert c.fetch(topic, 0, 18).records[0].value == b"f4-2"


def test_a_topic_produce_at_any_node_reaches_every_partitions_leader(
    cluster: DevCluster,
) -> None:
    """POST /v1/topics/{t}/records to one node: the partitions it does not lead are
    forwarded to their leaders; every record is where its key puts it."""
    topic = "topic-produce"
    with Client(",".join(cluster.urls), retry_timeout_s=20) as c:
        c.create_topic(topic, 3, replication_factor=3)
        wait_until(
            lambda: all(
                len(p["isr"]) == 3
                for p in (c.cluster() or {"partitions": []})["partitions"]
                if p["topic"] == topic
            ),
            15,
            "a full ISR",
        )
        leaders = {
            p["partition"]: p["leader"]
            for p in (c.cluster() or {"partitions": []})["partitions"]
            if p["topic"] == topic
        }
        node = next(iter(cluster.nodes.values()))
        assert set(leaders.values()) != {node.node_id}, "one node leads every partition"
        keys = [f"k{i}" for i in range(30)]
        r = httpx.post(
            f"{node.url}/v1/topics/{topic}/records",
            json={"records": [{"key": k, "value": k} for k in keys]},
            params={"acks": "all"},
            timeout=30,
        )
        assert r.status_code == 200, r.text
        places = r.json()["offsets"]
        assert [p["partition"] for p in places] == [partition_for_key(k, 3) for k in keys]
        for p in range(3):
            got = [(rec.offset, rec.key) for page in c.consume(topic, p, 0) for rec in page.records]
            want = [
                (pl["offset"], k.encode())
                for k, pl in zip(keys, places, strict=True)
                if pl["partition"] == p
            ]
            assert got == want


def segment_files(node_dir: Path, topic: str) -> dict[str, bytes]:
    """A node's segment files of ``topic`` (relative path -> bytes)."""
    return {
        str(p.relative_to(node_dir)): p.read_bytes()
        for p in sorted(node_dir.rglob("*.log"))
        if topic in str(p.relative_to(node_dir))
    }


def test_followers_store_the_leaders_batches_byte_for_byte(cluster: DevCluster) -> None:
    """A follower's segments are its leader's, byte for byte: compressed batches as the
    client sent them (zstd, null values and all), each stamped by the leader with its
    epoch, neither decoded nor rewritten on the way (the replication fetch sends them from
    the leader's files, the follower appends them as they came)."""
    topic = "replica-bytes"
    with create(cluster, topic) as c:
        st = partition(c, topic)
        recs = [
            ProducerRecord(None if j % 5 == 0 else b"v%d" % j * 50, key=b"k%d" % (j % 7))
            for j in range(60)
        ]
        for codec in ("zstd", "gzip", None, "lz4", "snappy"):
            c.produce(topic, 0, recs, acks="all", compression=codec)
        end = c.bounds(topic, 0).next_offset
        assert end == 300
        got = [r for page in c.consume(topic, 0, 0) for r in page.records]
        assert [r.value for r in got[:60]] == [r.value for r in recs]
        assert got[0].value is None and got[1].value == b"v1" * 50
        batches = c.fetch_batches(topic, 0, 0)
    data = bytes(batches.data)
    assert data[16] == 2 and data[22] & 7 == 4  # magic 2; the first batch zstd, as sent
    assert struct.unpack_from(">i", data, 12)[0] == st["leader_epoch"]  # stamped by the leader
    leader = cluster.nodes[st["leader"]]
    wait_until(
        lambda: all(
            segment_files(cluster.nodes[r].data_dir, topic) == segment_files(leader.data_dir, topic)
            for r in st["replicas"]
        ),
        15,
        "every replica's segments equal to the leader's",
    )
    files = segment_files(leader.data_dir, topic)
    assert files and sum(map(len, files.values())) >= len(data)


@pytest.mark.usefixtures("live_cluster")
def test_sigkill_the_leader_under_acks_all_produce_and_a_follow_consume(
    cluster: DevCluster,
) -> None:
    topic = "kill-leader"
    admin = create(cluster, topic)
    acked: dict[bytes, int] = {}
    failures: list[str] = []
    stop = threading.Event()
    produced = threading.Event()  # the producer has stopped: acked is final

    def producer() -> None:
        with Client(cluster.urls, retry_timeout_s=15) as c:
            i = 0
            while not stop.is_set():
                values = [f"k{i}-{j}".encode() for j in range(3)]
                i += 1
                try:
                    offsets = c.produce(topic, 0, values, acks="all")
                except TieredLogError as exc:  # not acknowledged: allowed, counted
                    failures.append(f"{type(exc).__name__}: {exc}")
                    time.sleep(0.05)
                    continue
                acked.update(zip(values, offsets, strict=True))

    consumed: list[tuple[int, bytes | None]] = []
    consumer_error: list[BaseException] = []

    def consumer() -> None:
        try:
            with Client(cluster.urls[::-1], retry_timeout_s=15) as c:
                for page in c.consume(topic, 0, 0, follow=True, wait_ms=200):
                    consumed.extend((r.offset, r.value) for r in page.records)
                    if produced.is_set() and len(consumed) > max(acked.values()):
                        return
        except BaseException as exc:
            consumer_error.append(exc)

    threads = [
        threading.Thread(target=producer, daemon=True),
        threading.Thread(target=consumer, daemon=True),
    ]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: len(acked) >= 60, 20, "acks=all produce under way")
        old = partition(admin, topic)["leader"]
        killed_at = time.monotonic()
        at_kill = len(acked)
        cluster.nodes[old].kill()
        wait_until(
            lambda: len(acked) >= at_kill + 60,
            LEASE_TTL_S + 20,
            "acks=all produce to go on on the new leader",
        )
        failover_s = time.monotonic() - killed_at
        new = partition(admin, topic)["leader"]
        assert new not in (None, old)
    finally:
        stop.set()
        threads[0].join(30)
        produced.set()
    threads[1].join(30)
    assert not threads[1].is_alive(), "the follow consumer did not reach the end"
    assert not consumer_error, consumer_error
    print(
        f"failover to the first acknowledged produce took <= {failover_s:.2f}s; "
        f"{len(acked)} acknowledged, {len(failures)} failed: {failures[:3]}"
    )
    got = read_all(admin, topic)
    check_exactly_once(got, acked)
    # the consumer that ran through the failover: no offset twice, no gap
    assert [o for o, _ in consumed] == list(range(len(consumed)))
    assert consumed == got[: len(consumed)]
    restart_dead(cluster, admin, topic)
    admin.close()


@pytest.mark.usefixtures("live_cluster")
def test_async_client_through_a_leader_change(cluster: DevCluster) -> None:
    topic = "async-change"
    admin = create(cluster, topic)

    async def main() -> list[tuple[int, bytes | None]]:
        acked: dict[bytes, int] = {}
        async with AsyncClient(cluster.urls, retry_timeout_s=20) as c:
            for i in range(5):
                values = [f"a{i}-{j}".encode() for j in range(3)]
                acked.update(
                    zip(values, await c.produce(topic, 0, values, acks="all"), strict=True)
                )
            old = partition(admin, topic)["leader"]
            cluster.nodes[old].kill()
            for i in range(5, 10):  # retried until the new leader takes them
                values = [f"a{i}-{j}".encode() for j in range(3)]
                acked.update(
                    zip(values, await c.produce(topic, 0, values, acks="all"), strict=True)
                )
            assert partition(admin, topic)["leader"] not in (None, old)
            got = [
                (r.offset, r.value) async for page in c.consume(topic, 0, 0) for r in page.records
            ]
            assert (await c.bounds(topic, 0)).high_watermark == 30
        check_exactly_once(got, acked)
        assert len(got) == 30
        return got

    asyncio.run(asyncio.wait_for(main(), 60))
    restart_dead(cluster, admin, topic)
    admin.close()


def test_a_single_node_works_as_before(tmp_path: Path) -> None:
    from tiered_log.perf.http import running_server

    dead = f"http://127.0.0.1:{free_port()}"
    with running_server(tmp_path) as srv:
        with Client(srv.url) as c:
            assert c.cluster() is None
            c.create_topic("single", 1)
            assert c.produce("single", 0, [b"a", b"b"], acks="all") == [0, 1]
            assert c.produce("single", 0, [b"c"], acks="1") == [2]
            assert [v for _, v in read_all(c, "single")] == [b"a", b"b", b"c"]
        with Client(f"{dead}, {srv.url}") as c:  # the dead one is skipped
            assert c.produce("single", 0, [b"d"]) == [3]
            assert c.bounds("single", 0).next_offset == 4
            assert [t["name"] for t in c.list_topics()] == ["single"]
    start = time.monotonic()
    with Client(dead) as c, pytest.raises(ConnectionFailedError):
        c.produce("single", 0, [b"x"])
    assert time.monotonic() - start < 5, "a single unreachable URL is not retried"


def test_cli_takes_several_urls(
    cluster: DevCluster, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tiered_log.cli import main

    dead = f"http://127.0.0.1:{free_port()}"
    urls = ",".join([dead, *cluster.urls])
    assert (
        main(
            [
                "topics",
                "create",
                "cli-topic",
                "--replication-factor",
                "3",
                "--min-insync-replicas",
                "2",
                "--json",
                "--url",
                urls,
            ]
        )
        == 0
    )
    described = capsys.readouterr().out
    assert '"replication_factor": 3' in described and '"min_insync_replicas": 2' in described
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(f"line {i}\n" for i in range(7)))
    assert (
        main(
            [
                "produce",
                "cli-topic",
                "--file",
                str(lines),
                "--batch-size",
                "3",
                "--acks",
                "all",
                "--url",
                urls,
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert main(["consume", "cli-topic", "--offset", "0", "--url", urls]) == 0
    assert capsys.readouterr().out.splitlines() == [f"line {i}" for i in range(7)]
    assert (
        main(["produce", "cli-topic", "--file", str(lines), "--acks", "2", "--url", urls]) == 2
    )  # argparse refuses it
    capsys.readouterr()
    assert main(["topics", "list", "--url", dead]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("tiered-log: connection_failed: "), err


def test_retry_rules() -> None:
    """Which failures a routed call retries (no servers: the rules alone)."""
    from tiered_log import errors as E
    from tiered_log.client import RequestNotSentError
    from tiered_log.client.routing import Attempts, Routes

    routes = Routes(["http://a"])
    cluster = {
        "nodes": [
            {"node_id": 1, "url": "http://a", "alive": True},
            {"node_id": 2, "url": "http://b", "alive": True},
        ],
        "partitions": [{"topic": "t", "partition": 0, "leader": 1}],
    }

    def retried(exc: E.TieredLogError, *, writes: bool) -> str | bool | None:
        try:
            step = Attempts(routes, "t", 0, writes=writes, timeout_s=5).after(exc)
        except E.TieredLogError as raised:
            assert raised is exc
            return False
        return step.url

    refused = E.NotLeaderError(
        "node 1 does not lead t-0: node 2 (http://b) leads it", leader_id=2, leader_url="http://b"
    )
    assert retried(refused, writes=True) is False  # not clustered yet: as a single node
    assert routes.learn("http://a", cluster, "t", 0) == "http://a"
    assert retried(refused, writes=True) == "http://b"
    assert routes.leader("t", 0) == "http://b"
    electing = E.NotLeaderError("node 1 does not lead t-0: it has no leader now")
    assert retried(electing, writes=True) is None and routes.leader("t", 0) is None
    lost_after_append = E.NotLeaderError("leader epoch 4 begins")
    assert retried(lost_after_append, writes=True) is False
    assert retried(lost_after_append, writes=False) is None
    before = E.NotEnoughReplicasError(
        "1 in-sync replicas [1], fewer than min_insync_replicas=2; nothing was appended"
    )
    after = E.NotEnoughReplicasError(
        "1 in-sync replicas [1], fewer than min_insync_replicas="
        "2; the records were appended but are not acknowledged"
    )
    assert retried(before, writes=True) is not False
    assert retried(after, writes=True) is False
    assert retried(E.ReplicationTimeoutError("not replicated"), writes=True) is False
    assert retried(RequestNotSentError("refused"), writes=True) is None
    assert retried(E.ConnectionFailedError("reset after sending"), writes=True) is False
    assert retried(E.ConnectionFailedError("reset after sending"), writes=False) is None
    assert retried(E.TopicNotFoundError("no such topic"), writes=False) is False
    # a new leader still reading the bucket answers before doing anything: tried again there
    routes.set_leader("t", 0, "http://b")
    not_ready = E.PartitionNotReadyError("t-0: reading the bucket: retry shortly")
    assert retried(not_ready, writes=False) == "http://b"
    assert retried(not_ready, writes=True) == "http://b"
