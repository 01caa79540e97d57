"""A wiped follower catches up while producers write at full speed: a real three-node
cluster on moto's S3 server, small segments and a short local retention, so the
leaders' local start runs ahead all the time. A reset (the follower sent to its
leader's remote end) fetches again at once, and the leader keeps the local segments a
live follower still copies, so the follower rejoins every ISR within the test's bound
after a handful of resets at most, not after the producers stop."""

from __future__ import annotations

import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tiered_log.cluster.dev import DevCluster

from .conftest import dev_cluster
from .helpers import wait_until
from .test_failover import SETTINGS, _any

pytestmark = pytest.mark.timeout(240)

TOPIC = "chase"
PARTITIONS = 3
REJOIN_BOUND_S = 45.0  # the 20 s on a quiet machine; 3 nodes + moto on 2 cores
MAX_RESETS = 3


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, s3_target: Any, s3_client: Any
) -> Iterator[DevCluster]:
    bucket = f"tiered-log-catchup-{uuid.uuid4().hex[:8]}"
    s3_client.create_bucket(Bucket=bucket)
    settings = {
        **SETTINGS,
        "TIERED_LOG_REMOTE_URL": f"s3://{bucket}",
        "TIERED_LOG_S3_ENDPOINT_URL": s3_target.endpoint,
        "TIERED_LOG_S3_REGION": s3_target.region,
        "TIERED_LOG_S3_ACCESS_KEY": s3_target.access_key or "testing",
        "TIERED_LOG_S3_SECRET_KEY": s3_target.secret_key or "testing",
        "TIERED_LOG_SHIP_INTERVAL_MS": "100",
    }
    yield from dev_cluster(tmp_path_factory, settings)


def _states(c: DevCluster) -> dict[int, dict[str, Any]]:
    return {
        p["partition"]: p
        for p in _any(c, "GET", "/v1/cluster").json()["partitions"]
        if p["topic"] == TOPIC
    }


class Producers:
    """One thread per partition writing acks=all batches as fast as they are answered,
    following the leader."""

    def __init__(self, c: DevCluster) -> None:
        self.c = c
        self.stop = threading.Event()
        self.acked = [0] * PARTITIONS
        self.refused: list[str] = []
        self.threads = [
            threading.Thread(target=self._run, args=(p,), daemon=True) for p in range(PARTITIONS)
        ]
        for t in self.threads:
            t.start()

    def _run(self, p: int) -> None:
        url: str | None = None
        body = {"records": [{"value": "v" * 200} for _ in range(40)]}
        with httpx.Client(timeout=10) as http:
            while not self.stop.is_set():
                try:
                    if url is None:
                        leader = _states(self.c)[p]["leader"]
                        node = self.c.nodes.get(leader) if leader is not None else None
                        url = node.url if node is not None and node.alive else None
                        if url is None:
                            time.sleep(0.1)
                            continue
                    r = http.post(
                        f"{url}/v1/topics/{TOPIC}/partitions/{p}/records",
                        params={"acks": "all"},
                        json=body,
                    )
                except (httpx.HTTPError, AssertionError, KeyError):
                    url = None
                    time.sleep(0.05)
                    continue
                if r.status_code == 200:
                    self.acked[p] += 40
                else:
                    self.refused.append(r.text)
                    url = None if r.status_code == 421 else url
                    time.sleep(0.05)

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(15)


def test_a_wiped_follower_rejoins_while_producers_write_at_full_speed(cluster: DevCluster) -> None:
    r = _any(
        cluster,
        "POST",
        "/v1/topics",
        json={
            "name": TOPIC,
            "partitions": PARTITIONS,
            "replication_factor": 3,
            "min_insync_replicas": 2,
            "config": {"segment_bytes": 32768, "local_retention_bytes": 262144},
        },
    )
    assert r.status_code == 201, r.text
    wait_until(lambda: all(len(s["isr"]) == 3 for s in _states(cluster).values()), 15, "full ISRs")
    producers = Producers(cluster)
    try:

        def shipped_and_dropped() -> bool:
            for p, st in _states(cluster).items():
                url = cluster.nodes[st["leader"]].url
                b = httpx.get(f"{url}/v1/topics/{TOPIC}/partitions/{p}/bounds", timeout=5)
                if b.status_code != 200 or b.json()["local_start_offset"] == 0:
                    return False
            return True

        wait_until(
            shipped_and_dropped, 60, "leaders to ship and drop local segments", interval_s=0.5
        )
        # A node that leads none of the partitions, if there is one.
        leaders = {s["leader"] for s in _states(cluster).values()}
        victim = next(
            (n for n in cluster.nodes.values() if n.node_id not in leaders),
            cluster.nodes[next(iter(leaders))],
        )
        victim.kill()
        shutil.rmtree(victim.data_dir)
        before = sum(producers.acked)
        victim.start()
        t0 = time.monotonic()
        wait_until(
            lambda: all(victim.node_id in s["isr"] for s in _states(cluster).values()),
            REJOIN_BOUND_S,
            "the wiped follower back in every ISR while producers write",
            interval_s=0.2,
        )
        took = time.monotonic() - t0
        assert sum(producers.acked) > before  # the producers kept writing meanwhile
        # The leaders count the resets, in GET /v1/cluster and in /metrics.
        for p, st in _states(cluster).items():
            leader = cluster.nodes[st["leader"]]
            view = httpx.get(leader.url + "/v1/cluster", timeout=5).json()
            part = next(
                x for x in view["replication"] if x["topic"] == TOPIC and x["partition"] == p
            )
            mine = next(r for r in part["replicas"] if r["node_id"] == victim.node_id)
            metric = (
                f'tiered_log_replica_resets{{topic="{TOPIC}",partition="{p}",'
                f'replica="{victim.node_id}"}} {int(mine["resets"])}'
            )
            assert metric in httpx.get(leader.url + "/metrics", timeout=5).text
    finally:
        producers.close()
    resets = victim.log_tail(1 << 22).count("restarting the local log there")
    print(f"rejoined every ISR in {took:.1f} s after {resets} reset(s)")
    assert resets <= MAX_RESETS * PARTITIONS, f"{resets} resets in {took:.1f} s"
