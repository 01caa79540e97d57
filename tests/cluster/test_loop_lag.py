"""The event loop is never blocked: a real three-node cluster on moto's S3 server behind
a delaying TCP proxy (a slow bucket) runs ``acks=all`` producers while a node hangs and
its partitions move (the nodes that followed them stop fetchers parked on it), then
joins again wiped (rebuilding from the slow bucket), the high watermarks checkpoint
(each second), and consumers read archived offsets cold (each read waits on the slow
bucket). Each node's event-loop watchdog (:mod:`tiered_log.service.loop_watchdog`) must
report no stall in ``/metrics``.

What counts as a stall, and why it holds on a noisy 2-core machine: the watchdog posts
a marker to the loop every 5 ms; a marker that waits more than 50 ms is a *late* one,
and on a loaded machine many are (the loop waits for a CPU, or for the GIL while worker
threads compute). A late marker counts only when most of the samples taken while it
waited (every 10 ms, at least three) show the loop thread off the CPU (kernel state
``S``/``D``, not the runnable ``R`` of a thread queued for a CPU) inside a call that is
not the selector's idle poll, with no other thread of the process runnable (a GIL
waiter is off the CPU too; the GIL is held long only by a thread that computes). That
is a loop blocked by a lock, an fsync or a bucket call of ours; CPU or GIL contention
never looks like it. A failure prints the stacks the watchdog logged.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
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
from .test_failover import SETTINGS, _any, leader_url, partition_state

pytestmark = pytest.mark.timeout(300)

TOPIC = "lag"
PARTITIONS = 3
SLOW_S = 1.5
"""The slow bucket's delay before each request reaches moto."""


class DelayProxy:
    """A TCP proxy on 127.0.0.1 in front of ``upstream``: each chunk a client sends
    waits :attr:`delay_s` before it is forwarded (so each S3 request answers that much
    later). Threads; :meth:`close` ends them."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.delay_s = 0.0
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._closed = False
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            up.settimeout(None)
            self._socks += [client, up]
            threading.Thread(target=self._pipe, args=(client, up, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(up, client, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, delayed: bool) -> None:
        try:
            while data := src.recv(1 << 16):
                if delayed and self.delay_s:
                    time.sleep(self.delay_s)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closed = True
        self._server.close()
        for s in self._socks:
            s.close()


@pytest.fixture(scope="module")
def proxy(s3_target: Any) -> Iterator[DelayProxy]:
    host, port = s3_target.endpoint.removeprefix("http://").rsplit(":", 1)
    p = DelayProxy((host, int(port)))
    yield p
    p.close()


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, s3_target: Any, s3_client: Any, proxy: DelayProxy
) -> Iterator[DevCluster]:
    bucket = f"tiered-log-lag-{uuid.uuid4().hex[:8]}"
    s3_client.create_bucket(Bucket=bucket)
    settings = {
        **SETTINGS,
        "TIERED_LOG_REMOTE_URL": f"s3://{bucket}",
        "TIERED_LOG_S3_ENDPOINT_URL": f"http://127.0.0.1:{proxy.port}",
        "TIERED_LOG_S3_REGION": s3_target.region,
        "TIERED_LOG_S3_ACCESS_KEY": s3_target.access_key or "testing",
        "TIERED_LOG_S3_SECRET_KEY": s3_target.secret_key or "testing",
        "TIERED_LOG_SHIP_INTERVAL_MS": "100",
        "TIERED_LOG_REMOTE_CACHE_BYTES": "0",
        "TIERED_LOG_TOPIC_DEFAULTS__LOCAL_RETENTION_BYTES": "4096",
    }
    yield from dev_cluster(tmp_path_factory, settings)


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not in /metrics")


def test_the_event_loop_is_not_blocked(cluster: DevCluster, proxy: DelayProxy) -> None:
    """Producers (``acks=all``) on every partition's leader; the bucket turns slow;
    consumers read archived offsets cold; one node hangs (SIGSTOP) past its lease, so
    the partitions it led move and the nodes that followed them stop fetchers parked on
    it; it is then killed, its disk wiped, and it joins again (rebuilding from the slow
    bucket) until it is back in every ISR. No node's loop may stall meanwhile."""
    _any(
        cluster,
        "POST",
        "/v1/topics",
        json={"name": TOPIC, "partitions": PARTITIONS, "replication_factor": 3},
    ).raise_for_status()
    stop = threading.Event()
    acked: list[int] = []
    errors: list[str] = []

    def produce(p: int) -> None:
        body = {"records": [{"value": "v" * 100} for _ in range(20)]}
        with httpx.Client(timeout=15) as http:
            while not stop.is_set():
                try:
                    url = leader_url(cluster, TOPIC, p)
                    if url is None:
                        time.sleep(0.1)
                        continue
                    r = http.post(
                        f"{url}/v1/topics/{TOPIC}/partitions/{p}/records",
                        json=body,
                        params={"acks": "all"},
                    )
                    if r.status_code == 200:
                        acked.append(r.json()["last_offset"])
                    else:
                        errors.append(r.text)
                except (httpx.HTTPError, AssertionError) as exc:
                    errors.append(str(exc))
                time.sleep(0.01)

    def cold_read(p: int, offset: int) -> None:
        url = leader_url(cluster, TOPIC, p)
        if url is None:
            return
        # Load only: a read sent to the node paused below may time out.
        with contextlib.suppress(httpx.HTTPError):
            httpx.get(
                f"{url}/v1/topics/{TOPIC}/partitions/{p}/records",
                params={"offset": offset, "max_records": 10},
                headers={"Accept": "application/octet-stream"},
                timeout=30,
            )

    threads = [threading.Thread(target=produce, args=(p,), daemon=True) for p in range(PARTITIONS)]
    for t in threads:
        t.start()
    try:
        for p in range(PARTITIONS):

            def shipped(p: int = p) -> bool:
                return _remote_end(cluster, p) > 200

            wait_until(shipped, 60, f"partition {p} shipped")
        proxy.delay_s = SLOW_S  # the bucket turns slow
        readers = [
            threading.Thread(target=cold_read, args=(p, o), daemon=True)
            for p in range(PARTITIONS)
            for o in (0, 60, 120)
        ]
        for r in readers:
            r.start()
        st = partition_state(cluster, TOPIC, 0)
        hung = cluster.nodes[st["leader"]]
        hung.pause()  # its followers' fetches to it hang; its partitions move on
        try:
            wait_until(
                lambda: all(
                    partition_state(cluster, TOPIC, p)["leader"] != hung.node_id
                    for p in range(PARTITIONS)
                ),
                60,
                "the hung node's partitions led by others",
            )
        finally:
            hung.resume()
            hung.kill()
        shutil.rmtree(hung.data_dir)
        hung.start()  # joins: rebuilds from the slow bucket, then fetches the tails
        wait_until(
            lambda: all(
                hung.node_id in partition_state(cluster, TOPIC, p)["isr"] for p in range(PARTITIONS)
            ),
            120,
            "the joined node back in every ISR",
        )
        for r in readers:
            r.join(40)
    finally:
        stop.set()
        for t in threads:
            t.join(20)
        proxy.delay_s = 0.0
    assert acked, errors[:5]
    stalls = {}
    for n in cluster.nodes.values():
        text = httpx.get(f"{n.url}/metrics", timeout=10).text
        stalls[n.node_id] = _metric(text, "tiered_log_event_loop_stalls_total")
    if any(stalls.values()):
        found = []
        for n in cluster.nodes.values():
            lines = n.log_tail(1 << 22).splitlines()
            for i, line in enumerate(lines):
                if "event loop stalled" in line:
                    stack = [x for x in lines[i + 1 : i + 80] if x.startswith("  ")]
                    found.append(f"node {n.node_id}: {line}\n" + "\n".join(stack[-14:]))
        raise AssertionError(f"event loop stalls per node {stalls}:\n" + "\n".join(found)[:30000])


def _remote_end(cluster: DevCluster, partition: int) -> int:
    url = leader_url(cluster, TOPIC, partition)
    if url is None:
        return 0
    for p in httpx.get(f"{url}/v1/cluster", timeout=10).json()["replication"]:
        if p["topic"] == TOPIC and p["partition"] == partition:
            return int(p["remote_end_offset"] or 0)
    return 0
