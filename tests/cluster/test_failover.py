"""A real three-node cluster (etcd from the wheel, three ``tiered-log serve``
processes, :class:`~tiered_log.cluster.dev.DevCluster`) through crashes: SIGKILLed
leaders under acks=all load, a leader paused past its lease and woken, a follower down
while records are written, etcd stopped and started. Requests here are plain HTTP
(the client's leader-following has its own tests): these check what the servers do.

One cluster serves the module; each test leaves every node running again."""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tiered_log.cluster.dev import DevCluster

from .conftest import dev_cluster
from .helpers import wait_until

pytestmark = pytest.mark.timeout(240)

LEASE_TTL_S = 2
SETTINGS = {
    "TIERED_LOG_CLUSTER_LEASE_TTL_S": str(LEASE_TTL_S),
    "TIERED_LOG_REPLICA_LAG_TIME_MAX_MS": "1500",
    "TIERED_LOG_REPLICATION_TIMEOUT_MS": "5000",
    "TIERED_LOG_MAINTENANCE_INTERVAL_MS": "200",
    "TIERED_LOG_TOPIC_DEFAULTS__SEGMENT_BYTES": "2048",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    yield from dev_cluster(tmp_path_factory, SETTINGS)


def _any(c: DevCluster, method: str, path: str, **kw: Any) -> httpx.Response:
    """A request to the first node that answers."""
    last: Exception | None = None
    for n in c.nodes.values():
        if not n.alive:
            continue
        try:
            return httpx.request(method, n.url + path, timeout=10, **kw)
        except httpx.HTTPError as exc:
            last = exc
    raise AssertionError(f"no node answered: {last}")


def partition_state(c: DevCluster, topic: str, p: int = 0) -> dict[str, Any]:
    for part in _any(c, "GET", "/v1/cluster").json()["partitions"]:
        if part["topic"] == topic and part["partition"] == p:
            return dict(part)
    raise AssertionError(f"{topic}-{p} is not in the cluster metadata")


def leader_url(c: DevCluster, topic: str, p: int = 0) -> str | None:
    st = partition_state(c, topic, p)
    n = c.nodes.get(st["leader"]) if st["leader"] is not None else None
    return n.url if n is not None and n.alive else None


def create(c: DevCluster, topic: str, replication_factor: int = 3) -> None:
    """Create ``topic`` (one partition) and wait for its full ISR."""
    body = {"name": topic, "partitions": 1, "replication_factor": replication_factor}
    r = _any(c, "POST", "/v1/topics", json=body)
    assert r.status_code == 201, r.text
    wait_until(
        lambda: len(partition_state(c, topic)["isr"]) == replication_factor, 10, "a full ISR"
    )


def read_all(c: DevCluster, topic: str) -> list[tuple[int, str]]:
    """Every committed record, from the current leader: (offset, value)."""
    out: list[tuple[int, str]] = []
    offset = 0
    deadline = time.monotonic() + 60
    while True:
        url = None
        wait_until(lambda: leader_url(c, topic) is not None, 15, "a leader")
        url = leader_url(c, topic)
        try:
            r = httpx.get(
                f"{url}/v1/topics/{topic}/partitions/0/records",
                params={"offset": offset, "max_records": 1000},
                timeout=10,
            )
        except httpx.TransportError:
            r = None
        if r is None or r.status_code != 200:
            # A leader change under way (refused, 421 not_leader, 503) is retried; any
            # other answer, or one that lasts, is a failure of its own, not a timeout.
            retriable = r is None or r.status_code in (421, 503)
            assert retriable and time.monotonic() < deadline, (
                f"reading {topic} at {offset}: {r.status_code if r else 'refused'} "
                f"{r.text if r else ''}"
            )
            time.sleep(0.1)
            continue
        body = r.json()
        out += [(rec["offset"], rec["value"]) for rec in body["records"]]
        if not body["records"]:
            return out
        offset = body["next_offset"]


def produce(url: str | None, topic: str, value: str, acks: str = "all") -> int | None:
    """The offset of an acknowledged record, or None (not acknowledged)."""
    got = produce_values(url, topic, [value], acks)
    return None if got is None else got[0]


def produce_values(
    url: str | None, topic: str, values: list[str], acks: str = "all"
) -> list[int] | None:
    """The offsets of an acknowledged batch of records, or None (not acknowledged)."""
    if url is None:
        return None
    try:
        r = httpx.post(
            f"{url}/v1/topics/{topic}/partitions/0/records",
            params={"acks": acks},
            json={"records": [{"value": v} for v in values]},
            timeout=10,
        )
    except httpx.HTTPError:
        return None
    return [int(o) for o in r.json()["offsets"]] if r.status_code == 200 else None


def check_exactly_once(c: DevCluster, topic: str, acked: dict[str, int]) -> None:
    got = read_all(c, topic)
    offsets = [o for o, _ in got]
    assert offsets == list(range(len(got))), "offsets are dense and start at 0"
    seen = {v: o for o, v in got}
    values = [v for _, v in got]
    for value, offset in acked.items():
        assert values.count(value) == 1, f"acknowledged {value} is read {values.count(value)} times"
        assert seen[value] == offset, f"{value} moved from {offset} to {seen[value]}"


def restart_dead(c: DevCluster) -> None:
    for n in c.nodes.values():
        if not n.alive:
            n.start()


def test_sigkill_the_leader_again_and_again_under_acks_all(cluster: DevCluster) -> None:
    topic = "kills"
    create(cluster, topic)
    acked: dict[str, int] = {}
    stop = threading.Event()

    def producer() -> None:
        i = 0
        while not stop.is_set():
            value = f"r{i}"
            i += 1
            off = produce(leader_url(cluster, topic), topic, value)
            if off is not None:
                acked[value] = off
            else:
                time.sleep(0.05)

    def acks_go_on() -> None:
        before = len(acked)
        wait_until(lambda: len(acked) > before + 20, 30, "acks=all produce to go on")

    th = threading.Thread(target=producer, daemon=True)
    th.start()
    try:
        for _ in range(2):
            acks_go_on()
            st = partition_state(cluster, topic)
            cluster.nodes[st["leader"]].kill()

            def new_leader(old: int = st["leader"]) -> bool:
                return partition_state(cluster, topic)["leader"] not in (None, old)

            wait_until(new_leader, 15, "a new leader")
            restart_dead(cluster)
            wait_until(
                lambda: len(partition_state(cluster, topic)["isr"]) == 3,
                30,
                "the restarted node back in the ISR",
            )
        # Acknowledged writes go on after the last kill too (how many the producer
        # gets through in between depends on the machine, so no total is asserted).
        acks_go_on()
    finally:
        stop.set()
        th.join(20)
    check_exactly_once(cluster, topic, acked)


def segment_tails(c: DevCluster, topic: str) -> list[dict[str, bytes]]:
    """Each node's non-empty segment files of ``topic``-0 (name -> bytes) from the first
    segment every node holds on (a follower that started empty begins at the leader's
    remote end, KIP-1023, and lacks what the bucket holds)."""
    files = [
        {
            p.name: p.read_bytes()
            for p in (n.data_dir / "topics" / topic / "0").glob("*.log")
            if p.stat().st_size
        }
        for n in c.nodes.values()
    ]
    first = max((min(f) for f in files if f), default="")
    return [{k: v for k, v in f.items() if k >= first} for f in files]


def test_a_paused_leader_is_fenced_and_its_tail_truncated(cluster: DevCluster) -> None:
    topic = "paused"
    create(cluster, topic)
    acked = {
        f"a{i}": off
        for i in range(20)
        if (off := produce(leader_url(cluster, topic), topic, f"a{i}")) is not None
    }
    assert len(acked) == 20
    st = partition_state(cluster, topic)
    old = cluster.nodes[st["leader"]]
    old.pause()
    try:
        wait_until(
            lambda: partition_state(cluster, topic)["leader"] not in (None, old.node_id),
            LEASE_TTL_S + 10,
            "a new leader while the old one sleeps",
        )
        acked.update(
            {
                f"b{i}": off
                for i in range(10)
                if (off := produce(leader_url(cluster, topic), topic, f"b{i}")) is not None
            }
        )
    finally:
        old.resume()
    # Woken, the old leader may take a write before it learns it was replaced: an
    # acks=1 write may land in its log, an acks=all one is never acknowledged.
    stale_all = produce(old.url, topic, "stale-all", acks="all")
    stale_one = produce(old.url, topic, "stale-one", acks="1")
    assert stale_all is None, "a deposed leader acknowledged an acks=all write"
    wait_until(
        lambda: len(partition_state(cluster, topic)["isr"]) == 3,
        30,
        "the old leader back in the ISR as a follower",
    )
    values = [v for _, v in read_all(cluster, topic)]
    assert "stale-all" not in values
    if stale_one is not None:
        assert "stale-one" not in values, "the deposed leader's tail was not truncated"
    check_exactly_once(cluster, topic, acked)
    # Every replica holds the same log, the deposed leader's included: the same
    # segments, byte for byte.
    wait_until(
        lambda: (t := segment_tails(cluster, topic))[0] == t[1] == t[2],
        15,
        "every replica's segments equal the leader's",
    )


def test_a_follower_down_catches_up_and_rejoins(cluster: DevCluster) -> None:
    topic = "catchup"
    create(cluster, topic)
    st = partition_state(cluster, topic)
    follower = cluster.nodes[next(r for r in st["replicas"] if r != st["leader"])]
    follower.kill()
    wait_until(
        lambda: follower.node_id not in partition_state(cluster, topic)["isr"],
        LEASE_TTL_S + 10,
        "the dead follower out of the ISR",
    )
    acked: dict[str, int] = {}
    for b in range(0, 200, 10):  # batches of ten ~60-byte records: ~3 to a 2 KiB segment
        values = [f"c{i}-".ljust(60, "x") for i in range(b, b + 10)]
        if (offs := produce_values(leader_url(cluster, topic), topic, values)) is not None:
            acked.update(zip(values, offs, strict=True))
    assert len(acked) == 200  # two in-sync replicas meet min_insync_replicas=2
    follower.start()
    wait_until(
        lambda: follower.node_id in partition_state(cluster, topic)["isr"],
        30,
        "the follower back in the ISR",
    )
    check_exactly_once(cluster, topic, acked)
    # Every replica rolled where the leader did: the same segments, byte for byte (from
    # where each begins: a follower that was still empty when it went down starts at the
    # leader's remote end, KIP-1023, and skips what the bucket holds).
    tails = segment_tails(cluster, topic)
    assert len(tails[0]) >= 1 and tails[0] == tails[1] == tails[2]


def test_leaders_keep_serving_while_etcd_is_down(cluster: DevCluster) -> None:
    topic = "etcd-down"
    create(cluster, topic)
    url = leader_url(cluster, topic)
    acked = {f"d{i}": off for i in range(10) if (off := produce(url, topic, f"d{i}")) is not None}
    cluster.etcd.stop()
    try:
        for i in range(10, 40):
            off = produce(url, topic, f"d{i}")
            assert off is not None, "the leader stopped serving without etcd"
            acked[f"d{i}"] = off
        r = httpx.get(
            f"{url}/v1/topics/{topic}/partitions/0/records", params={"offset": 0}, timeout=10
        )
        assert r.status_code == 200 and len(r.json()["records"]) == 40
        r = httpx.post(
            f"{url}/v1/topics", json={"name": "no-etcd", "replication_factor": 3}, timeout=15
        )
        assert r.status_code == 503 and r.json()["error"]["code"] == "metadata_unavailable"
    finally:
        cluster.etcd.restart()
    wait_until(
        lambda: produce(leader_url(cluster, topic), topic, "after") is not None,
        30,
        "the cluster to serve after etcd is back",
    )
    check_exactly_once(cluster, topic, acked)
    create(cluster, "etcd-back")  # metadata changes work again


def _bucket_copies(c: DevCluster, topic: str) -> list[tuple[int, int, str]]:
    """Every complete copy of ``topic``'s partition 0 in the shared bucket:
    ``(base_offset, next_offset, copy id)`` from each manifest's header, sorted."""
    out = []
    for rli in (c.work_dir / "remote").rglob("*.rli"):
        if f"/{topic}-" not in str(rli) or not rli.with_suffix(".log").exists():
            continue
        head = json.loads(rli.read_bytes().partition(b"\n")[0])
        out.append((int(head["base_offset"]), int(head["next_offset"]), str(head["id"])))
    return sorted(out)


def test_shipping_continues_after_a_failover_each_range_once(cluster: DevCluster) -> None:
    """Only the leader ships; its successor rebuilds its view from the bucket and ships
    on from the bucket's remote end: the bucket holds each offset range once."""
    topic = "shipped"
    create(cluster, topic)
    acked: dict[str, int] = {}

    def produce_range(lo: int, hi: int) -> None:
        # Batches of 10 records of ~60 bytes: about 3 batches to a 2 KiB segment.
        for b in range(lo, hi, 10):
            values = [f"s{i}-".ljust(60, "x") for i in range(b, b + 10)]
            offs = produce_values(leader_url(cluster, topic), topic, values)
            if offs is not None:
                acked.update(zip(values, offs, strict=True))

    produce_range(0, 150)
    wait_until(lambda: len(_bucket_copies(cluster, topic)) >= 3, 30, "the leader to ship")
    st = partition_state(cluster, topic)
    cluster.nodes[st["leader"]].kill()
    wait_until(
        lambda: partition_state(cluster, topic)["leader"] not in (None, st["leader"]),
        15,
        "a new leader",
    )
    shipped_before = _bucket_copies(cluster, topic)[-1][1]
    produce_range(150, 300)
    wait_until(
        lambda: _bucket_copies(cluster, topic)[-1][1] > shipped_before + 40,
        30,
        "the new leader to ship on",
    )
    restart_dead(cluster)
    wait_until(lambda: len(partition_state(cluster, topic)["isr"]) == 3, 30, "full ISR")
    copies = _bucket_copies(cluster, topic)
    assert copies[0][0] == 0
    for (_, end, _), (base, _, _) in itertools.pairwise(copies):
        assert base == end, f"copies {copies} overlap or leave a gap"
    check_exactly_once(cluster, topic, acked)


def test_a_long_poll_at_the_high_watermark_gets_the_next_committed_record(
    cluster: DevCluster,
) -> None:
    """A consumer waiting at the end is woken when the high watermark passes the next
    record (not when it is appended, when it may not be committed yet): its one long
    poll answers that record."""
    topic = "longpoll"
    create(cluster, topic)
    url = leader_url(cluster, topic)
    assert produce(url, topic, "first") == 0
    got: list[httpx.Response] = []
    th = threading.Thread(
        target=lambda: got.append(
            httpx.get(
                f"{url}/v1/topics/{topic}/partitions/0/records",
                params={"offset": 1, "wait_ms": 20_000},
                timeout=30,
            )
        )
    )
    th.start()
    time.sleep(0.5)  # the poll is waiting
    assert produce(url, topic, "second") == 1
    th.join(30)
    assert got and got[0].status_code == 200
    assert [r["value"] for r in got[0].json()["records"]] == ["second"]
