"""Broker rebuild on a real three-node cluster (issue 17), in a cluster of its own: a
follower or the leader whose disk is lost rebuilds from the bucket plus the unshipped
tail (KIP-1023) and rejoins the ISR, visible in ``tiered-log cluster status`` and
``/metrics``; a dead node's replicas are reassigned to a spare node. The helpers are
:mod:`test_failover`'s."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tiered_log.cluster.dev import DevCluster

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
    for i in range(200):
        if (off := produce(leader_url(cluster, topic), topic, f"w{i}")) is not None:
            acked[f"w{i}"] = off
    wait_until(lambda: len(_bucket_copies(cluster, topic)) >= 3, 30, "the leader to ship")
    st = partition_state(cluster, topic)
    follower = cluster.nodes[next(r for r in st["replicas"] if r != st["leader"])]
    follower.kill()
    shutil.rmtree(follower.data_dir)
    follower.start()
    for i in range(200, 260):  # the producers go on while it rebuilds
        if (off := produce(leader_url(cluster, topic), topic, f"w{i}")) is not None:
            acked[f"w{i}"] = off
    wait_until(lambda: follower.node_id in partition_state(cluster, topic)["isr"], 30,
               "the rebuilt follower back in the ISR")
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
        return {p.name: p.read_bytes() for p in (n.data_dir / "topics" / topic / "0").glob("*.log")
                if p.stat().st_size}

    # Visible: every replica in sync in `tiered-log cluster status` and in /metrics.
    done = subprocess.run([sys.executable, "-m", "tiered_log.cli", "cluster", "status",
                           "--wait", "--timeout", "60", "--json", "--topic", topic, "--url",
                           ",".join(cluster.urls)], capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    parts = [p for p in json.loads(done.stdout)["partitions"] if p["topic"] == topic]
    assert [sorted(r["state"] for r in p["replicas"]) for p in parts] == [
        ["in_sync", "in_sync", "leader"]]
    metrics = httpx.get(f"{leader.url}/metrics", timeout=10).text
    assert (f'tiered_log_replica_in_sync{{topic="{topic}",partition="0",'
            f'replica="{follower.node_id}"}} 1') in metrics
    assert (f'tiered_log_replica_lag_bytes{{topic="{topic}",partition="0",'
            f'replica="{follower.node_id}"}}') in metrics
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
    for i in range(200):
        if (off := produce(leader_url(cluster, topic), topic, f"l{i}")) is not None:
            acked[f"l{i}"] = off
    wait_until(lambda: len(_bucket_copies(cluster, topic)) >= 3, 30, "the leader to ship")
    old = cluster.nodes[partition_state(cluster, topic)["leader"]]
    old.kill()
    shutil.rmtree(old.data_dir)
    wait_until(lambda: partition_state(cluster, topic)["leader"] not in (None, old.node_id),
               15, "a new leader")
    for i in range(200, 240):
        if (off := produce(leader_url(cluster, topic), topic, f"l{i}")) is not None:
            acked[f"l{i}"] = off
    old.start()
    wait_until(lambda: old.node_id in partition_state(cluster, topic)["isr"], 30,
               "the wiped node back in the ISR")
    logs = old.data_dir / "topics" / topic / "0"
    assert min(int(p.name.split(".")[0]) for p in logs.glob("*.log")) > 0
    check_exactly_once(cluster, topic, acked)


def test_reassign_a_dead_nodes_replicas(cluster: DevCluster) -> None:
    """A dead node replaced for good: `tiered-log cluster reassign --from N --to M` gives
    its replicas to M, which rebuilds and joins the ISR; then N is dropped (issue 17)."""
    topic = "moved"
    r = _any(cluster, "POST", "/v1/topics", json={"name": topic, "partitions": 1,
                                                     "replication_factor": 2})
    assert r.status_code == 201, r.text
    wait_until(lambda: len(partition_state(cluster, topic)["isr"]) == 2, 10, "a full ISR")
    acked = {f"m{i}": off for i in range(50)
             if (off := produce(leader_url(cluster, topic), topic, f"m{i}")) is not None}
    assert len(acked) == 50
    st = partition_state(cluster, topic)
    dead = next(n for n in st["replicas"] if n != st["leader"])
    spare = next(n for n in cluster.nodes if n not in st["replicas"])
    cluster.nodes[dead].kill()
    try:
        done = subprocess.run([sys.executable, "-m", "tiered_log.cli", "cluster", "reassign",
                               "--from", str(dead), "--to", str(spare), "--wait", "--timeout",
                               "60", "--url", leader_url(cluster, topic) or ""],
                              capture_output=True, text=True, timeout=90)
        assert done.returncode == 0, done.stdout + done.stderr
        after = partition_state(cluster, topic)
        assert sorted(after["replicas"]) == sorted([st["leader"], spare])
        assert spare in after["isr"] and dead not in after["isr"]
        check_exactly_once(cluster, topic, acked)
    finally:
        restart_dead(cluster)
