"""Broker rebuild on a real three-node cluster (issue 17), in a cluster of its own: a
follower or the leader whose disk is lost rebuilds from the bucket plus the unshipped
tail (KIP-1023) and rejoins the ISR, visible in ``tiered-log cluster status`` and
``/metrics``; a dead node's replicas are reassigned to a spare node (and a live one's,
through :class:`~tiered_log.client.AsyncClient`). The helpers are :mod:`test_failover`'s."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tiered_log.client import AsyncClient
from tiered_log.cluster.dev import DevCluster
from tiered_log.errors import InvalidArgumentError

from .conftest import dev_cluster
from .helpers import wait_until
from .test_failover import (
    SETTINGS,
    _any,
    _bucket_copies,
    check_exactly_once,
    create,
    leader_url,
    partition_state,
    produce,
    produce_values,
    read_all,
    restart_dead,
)

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    yield from dev_cluster(tmp_path_factory, SETTINGS)


def test_a_wiped_follower_rebuilds_from_the_bucket_and_the_tail(cluster: DevCluster) -> None:
    """A follower whose disk is lost comes back empty: it starts its local log at the
    leader's remote end (KIP-1023: what the bucket holds is not copied again), copies
    only the tail, rejoins the ISR, and its segments above that point are the leader's,
    byte for byte (issue 17)."""
    topic = "wiped"
    create(cluster, topic)
    acked: dict[str, int] = {}
    for b in range(0, 200, 10):  # batches of ten ~60-byte records: ~3 to a 2 KiB segment
        values = [f"w{i}-".ljust(60, "x") for i in range(b, b + 10)]
        if (offs := produce_values(leader_url(cluster, topic), topic, values)) is not None:
            acked.update(zip(values, offs, strict=True))
    wait_until(lambda: len(_bucket_copies(cluster, topic)) >= 3, 30, "the leader to ship")
    st = partition_state(cluster, topic)
    follower = cluster.nodes[next(r for r in st["replicas"] if r != st["leader"])]
    follower.kill()
    shutil.rmtree(follower.data_dir)
    follower.start()
    for i in range(200, 260):  # the producers go on while it rebuilds
        if (off := produce(leader_url(cluster, topic), topic, f"w{i}")) is not None:
            acked[f"w{i}"] = off
    wait_until(
        lambda: follower.node_id in partition_state(cluster, topic)["isr"],
        30,
        "the rebuilt follower back in the ISR",
    )
    # Restarted within its lease, it waits to be dropped from the ISR before it
    # registers: it gets back in by fetching, not on what its lost disk held (KIP-903).
    # (On a busy machine its start may outlast the lease: then the controller dropped
    # it before it came back, and there was nothing to wait for.)
    tail = follower.log_tail(1 << 20)
    if "from before this start: waiting for the controller" in tail:
        assert "out of every shared ISR; registering" in tail
        assert "registering anyway" not in tail
    leader = cluster.nodes[partition_state(cluster, topic)["leader"]]

    def segments(n: Any) -> dict[str, bytes]:
        return {
            p.name: p.read_bytes()
            for p in (n.data_dir / "topics" / topic / "0").glob("*.log")
            if p.stat().st_size
        }

    # Visible: every replica in sync in `tiered-log cluster status` and in /metrics.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tiered_log.cli",
            "cluster",
            "status",
            "--wait",
            "--timeout",
            "60",
            "--json",
            "--topic",
            topic,
            "--url",
            ",".join(cluster.urls),
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stderr
    parts = [p for p in json.loads(done.stdout)["partitions"] if p["topic"] == topic]
    assert [sorted(r["state"] for r in p["replicas"]) for p in parts] == [
        ["in_sync", "in_sync", "leader"]
    ]
    metrics = httpx.get(f"{leader.url}/metrics", timeout=10).text
    assert (
        f'tiered_log_replica_in_sync{{topic="{topic}",partition="0",'
        f'replica="{follower.node_id}"}} 1'
    ) in metrics
    assert (
        f'tiered_log_replica_lag_bytes{{topic="{topic}",partition="0",'
        f'replica="{follower.node_id}"}}'
    ) in metrics
    mine, theirs = segments(follower), segments(leader)
    first = min(mine)
    assert int(first.split(".")[0]) > 0, "the rebuilt follower copied the archived head again"
    assert mine == {k: v for k, v in theirs.items() if k >= first}
    check_exactly_once(cluster, topic, acked)


def test_a_wiped_leader_comes_back_as_a_rebuilt_follower(cluster: DevCluster) -> None:
    """The leader's disk is lost: an ISR follower takes over (nothing acknowledged is
    lost), and the wiped node comes back through the same rebuild as a follower: from
    the remote end, then the tail, back in the ISR (issue 17)."""
    topic = "wiped-leader"
    create(cluster, topic)
    acked: dict[str, int] = {}
    for b in range(0, 200, 10):  # batches of ten ~60-byte records: ~3 to a 2 KiB segment
        values = [f"l{i}-".ljust(60, "x") for i in range(b, b + 10)]
        if (offs := produce_values(leader_url(cluster, topic), topic, values)) is not None:
            acked.update(zip(values, offs, strict=True))
    wait_until(lambda: len(_bucket_copies(cluster, topic)) >= 3, 30, "the leader to ship")
    old = cluster.nodes[partition_state(cluster, topic)["leader"]]
    old.kill()
    shutil.rmtree(old.data_dir)
    wait_until(
        lambda: partition_state(cluster, topic)["leader"] not in (None, old.node_id),
        15,
        "a new leader",
    )
    for i in range(200, 240):
        if (off := produce(leader_url(cluster, topic), topic, f"l{i}")) is not None:
            acked[f"l{i}"] = off
    old.start()
    wait_until(
        lambda: old.node_id in partition_state(cluster, topic)["isr"],
        30,
        "the wiped node back in the ISR",
    )
    logs = old.data_dir / "topics" / topic / "0"
    assert min(int(p.name.split(".")[0]) for p in logs.glob("*.log")) > 0
    check_exactly_once(cluster, topic, acked)


def test_reassign_a_dead_nodes_replicas(cluster: DevCluster) -> None:
    """A dead node replaced for good: `tiered-log cluster reassign --from N --to M` gives
    its replicas to M, which rebuilds and joins the ISR; then N is dropped (issue 17)."""
    topic = "moved"
    create(cluster, topic, replication_factor=2)
    acked = {
        f"m{i}": off
        for i in range(50)
        if (off := produce(leader_url(cluster, topic), topic, f"m{i}")) is not None
    }
    assert len(acked) == 50
    st = partition_state(cluster, topic)
    dead = next(n for n in st["replicas"] if n != st["leader"])
    spare = next(n for n in cluster.nodes if n not in st["replicas"])
    cluster.nodes[dead].kill()
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "tiered_log.cli",
                "cluster",
                "reassign",
                "--from",
                str(dead),
                "--to",
                str(spare),
                "--wait",
                "--timeout",
                "60",
                "--url",
                leader_url(cluster, topic) or "",
            ],
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        after = partition_state(cluster, topic)
        assert sorted(after["replicas"]) == sorted([st["leader"], spare])
        assert spare in after["isr"] and dead not in after["isr"]
        check_exactly_once(cluster, topic, acked)
    finally:
        restart_dead(cluster)


def test_a_new_leader_serves_reads_only_once_it_knows_the_bucket(cluster: DevCluster) -> None:
    """A follower whose local start is far above 0 (local retention dropped what the
    bucket holds) becomes leader: until it has read the bucket it answers retriable
    503 not_ready for its bounds and for archived offsets, never a log start above the
    true one, a 416 for offset 0 or a 500 (an index file replaced under a read)."""
    topic = "newleader"
    r = _any(
        cluster,
        "POST",
        "/v1/topics",
        json={
            "name": topic,
            "partitions": 1,
            "replication_factor": 3,
            "config": {"segment_bytes": 4096, "local_retention_bytes": 65536},
        },
    )
    assert r.status_code == 201, r.text
    wait_until(lambda: len(partition_state(cluster, topic)["isr"]) == 3, 10, "a full ISR")
    n = 0
    while n < 4000:
        url = leader_url(cluster, topic)
        assert url is not None
        recs = [{"value": f"r{i:05d}-" + "x" * 64} for i in range(n, n + 200)]
        r = httpx.post(
            f"{url}/v1/topics/{topic}/partitions/0/records",
            params={"acks": "all"},
            json={"records": recs},
            timeout=10,
        )
        assert r.status_code == 200, r.text
        n += 200

    def bounds(url: str) -> dict[str, Any]:
        return dict(httpx.get(f"{url}/v1/topics/{topic}/partitions/0/bounds", timeout=5).json())

    st = partition_state(cluster, topic)
    leader = cluster.nodes[st["leader"]]
    wait_until(
        lambda: bounds(leader.url)["local_start_offset"] > 1000,
        30,
        "the leader to ship and drop local segments",
    )
    follower = cluster.nodes[next(r for r in st["replicas"] if r != st["leader"])]
    follower.kill()
    follower.start()
    wait_until(
        lambda: follower.node_id in partition_state(cluster, topic)["isr"],
        30,
        "the restarted follower back in the ISR",
    )

    def own_local_start(url: str) -> int:  # a follower describes its own log
        return int(
            httpx.get(f"{url}/v1/topics/{topic}", timeout=5).json()["partition_info"][0][
                "local_start_offset"
            ]
        )

    wait_until(lambda: own_local_start(follower.url) > 1000, 30, "the follower's local retention")
    others = [m for m in cluster.nodes.values() if m.node_id != follower.node_id]
    stoppers = [threading.Thread(target=m.stop) for m in others]  # both at once
    for t in stoppers:
        t.start()
    for t in stoppers:
        t.join(30)
    answers: list[tuple[int, str, int | None]] = []
    try:
        deadline = time.monotonic() + 30
        served = 0
        while served < 20 and time.monotonic() < deadline:
            try:
                b = httpx.get(f"{follower.url}/v1/topics/{topic}/partitions/0/bounds", timeout=5)
                f = httpx.get(
                    f"{follower.url}/v1/topics/{topic}/partitions/0/records",
                    params={"offset": 0, "max_records": 5},
                    timeout=5,
                )
            except httpx.TransportError:
                continue
            for resp, what in ((b, "bounds"), (f, "fetch")):
                code = resp.json().get("error", {}).get("code") if resp.status_code != 200 else None
                answers.append((resp.status_code, what, None))
                assert resp.status_code in (200, 421, 503), (what, resp.status_code, resp.text)
                if resp.status_code == 503:
                    assert code in (
                        "not_ready",
                        "not_leader",
                        "metadata_unavailable",
                        "remote_timeout",
                    ), resp.text
            if b.status_code == 200:
                assert b.json()["log_start_offset"] == 0, b.json()
            if f.status_code == 200:
                assert f.json()["records"][0]["offset"] == 0, f.text
            if b.status_code == 200 and f.status_code == 200:
                served += 1
        assert served == 20, answers[-10:]
    finally:
        for m in others:
            m.start()
        wait_until(
            lambda: len(partition_state(cluster, topic)["isr"]) == 3,
            60,
            "every node back in the ISR",
        )


def test_a_segment_damaged_in_both_tiers_is_repaired_from_a_replica(cluster: DevCluster) -> None:
    """The leader's local segment and the archived copy of the same offsets both get a
    flipped byte, and a follower's first segment another: ``archive scrub --url`` runs a
    pass on every node, which repairs the leader's segment from another replica (neither
    tier there is good), the archived copy, and the follower's segment; it exits 0 and
    every byte is the original again."""
    restart_dead(cluster)
    topic = "scrubbed"
    create(cluster, topic)
    for b in range(0, 120, 10):
        values = [f"s{i}-".ljust(60, "x") for i in range(b, b + 10)]
        assert produce_values(leader_url(cluster, topic), topic, values) is not None
    wait_until(lambda: len(_bucket_copies(cluster, topic)) >= 3, 30, "the leader to ship")
    st = partition_state(cluster, topic)
    leader = cluster.nodes[st["leader"]]
    follower = cluster.nodes[next(r for r in st["replicas"] if r != st["leader"])]
    base, _, copy_id = _bucket_copies(cluster, topic)[1]
    archived = next((cluster.work_dir / "remote").rglob(f"{base:020d}-{copy_id}.log"))
    leader_seg = leader.data_dir / "topics" / topic / "0" / f"{base:020d}.log"
    follower_seg = follower.data_dir / "topics" / topic / "0" / f"{0:020d}.log"
    good = {p: p.read_bytes() for p in (archived, leader_seg, follower_seg)}
    for p, at in ((archived, 30), (leader_seg, 90), (follower_seg, 150)):
        blob = bytearray(good[p])
        blob[at] ^= 0x08
        p.write_bytes(bytes(blob))

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tiered_log.cli",
            "archive",
            "scrub",
            "--url",
            ",".join(cluster.urls),
            "--topic",
            topic,
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    reports = {n["node_id"]: n["report"] for n in json.loads(done.stdout)}
    assert set(reports) == set(st["replicas"])
    assert all(d["repaired"] for r in reports.values() for d in r["damaged"]), reports
    mine = [(d["tier"], d["repair"]) for d in reports[leader.node_id]["damaged"]]
    assert sorted(t for t, _ in mine) == ["local", "remote"], mine
    assert any(t == "local" and r.startswith("from replica node ") for t, r in mine), mine
    assert [d["tier"] for d in reports[follower.node_id]["damaged"]] == ["local"]
    assert {p: p.read_bytes() for p in good} == good


def test_the_async_client_reassigns_restores_and_scrubs(cluster: DevCluster) -> None:
    """``AsyncClient`` given every node's URL: ``reassign`` moves a live follower's
    replica to the spare node, which rebuilds and joins the ISR while the follower is
    dropped, every record still there; a node onto itself is refused. ``restore`` skips
    a topic the cluster has and names one the bucket lacks; ``archive_scrub`` runs a pass
    on every live node and answers each one's report. Last in the module: the reassign
    moves every replica the follower holds that the spare lacks."""
    restart_dead(cluster)
    topic = "moved-async"
    values = [f"a{i}".encode() for i in range(50)]

    async def main() -> None:
        async with AsyncClient(cluster.urls, retry_timeout_s=20) as c:

            async def state() -> dict[str, Any]:
                doc = await c.cluster()
                assert doc is not None
                [part] = [p for p in doc["partitions"] if p["topic"] == topic]
                return dict(part)

            async def until(ready: Callable[[dict[str, Any]], bool], what: str) -> None:
                deadline = time.monotonic() + 60
                while not ready(await state()):
                    assert time.monotonic() < deadline, what
                    await asyncio.sleep(0.05)

            await c.create_topic(topic, replication_factor=2)
            await until(lambda st: len(st["isr"]) == 2, "a full ISR")
            assert await c.produce(topic, 0, values, acks="all") == list(range(50))
            st = await state()
            follower = next(n for n in st["replicas"] if n != st["leader"])
            spare = next(n for n in cluster.nodes if n not in st["replicas"])
            answer = await c.reassign(follower, spare)
            assert (answer["from_node"], answer["to_node"]) == (follower, spare)
            assert {"topic": topic, "partition": 0} in answer["partitions"]
            await until(
                lambda st: (
                    sorted(st["replicas"]) == sorted([st["leader"], spare])
                    and spare in st["isr"]
                    and follower not in st["isr"]
                ),
                "the spare in the ISR and the follower dropped",
            )
            got = [r.value async for page in c.consume(topic, 0, 0) for r in page.records]
            assert got == values
            with pytest.raises(InvalidArgumentError):
                await c.reassign(spare, spare)

            body = await c.restore([topic, "nope-async"], replication_factor=2)
            assert body["restored"] == [] and body["missing"] == ["nope-async"]
            assert [t["name"] for t in body["skipped"]] == [topic]

            nodes = await c.archive_scrub(topic)
            assert {n["node_id"]: n["url"] for n in nodes} == {
                i: n.url for i, n in cluster.nodes.items()
            }
            assert all(n["report"]["damaged"] == [] for n in nodes)

    asyncio.run(main())


def test_a_long_poll_at_a_leader_moved_away_answers_when_its_leadership_ends(
    cluster: DevCluster,
) -> None:
    """A consumer parked at the leader's end while `reassign` moves the leader's replica
    to the spare node: once the controller hands the partition on, the poll answers
    421 not_leader, long before its wait is over (the end of a
    leadership wakes the requests parked on the partition, as Kafka completes its
    delayed fetches on a leader change); every record is still there. After the other
    reassign test: this one also moves every replica the leader holds that the spare
    lacks."""
    restart_dead(cluster)
    topic = "moved-leader"
    create(cluster, topic, replication_factor=2)
    offs = produce_values(leader_url(cluster, topic), topic, [f"l{i}" for i in range(20)])
    assert offs == list(range(20))
    st = partition_state(cluster, topic)
    old = cluster.nodes[st["leader"]]
    spare = next(n for n in cluster.nodes if n not in st["replicas"])
    wait_s = 30.0
    got: list[tuple[httpx.Response, float]] = []
    poll = threading.Thread(
        target=lambda: got.append(
            (
                httpx.get(
                    f"{old.url}/v1/topics/{topic}/partitions/0/records",
                    params={"offset": 20, "wait_ms": int(wait_s * 1000)},
                    timeout=wait_s + 30,
                ),
                time.monotonic(),
            )
        ),
        daemon=True,
    )
    poll.start()
    started = time.monotonic()
    time.sleep(0.5)  # the poll is parked (if not yet, it is answered not_leader all the same)
    done = subprocess.run(
        [
            *(sys.executable, "-m", "tiered_log.cli", "cluster", "reassign"),
            *("--from", str(old.node_id), "--to", str(spare), "--wait", "--timeout", "60"),
            *("--url", old.url),
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    moved = partition_state(cluster, topic)
    assert old.node_id not in moved["replicas"] and moved["leader"] != old.node_id
    poll.join(wait_s + 30)
    assert got, "the parked poll was never answered"
    answer, answered_at = got[0]
    # Before: the poll waited out its 30 s and then answered 200 with no records, read
    # from the deposed leader's log (its leadership was looked at only once, first).
    assert answer.status_code == 421, answer.text
    assert answer.json()["error"]["code"] == "not_leader"
    assert answered_at - started < wait_s - 5, "answered only when its wait was over"
    assert [v for _, v in read_all(cluster, topic)] == [f"l{i}" for i in range(20)]
