"""``tiered-log perf rebuild --segments N [N ...]``: a rebuild with an archive of many small
segments and producers writing at full speed, on a real 3-node
:class:`~tiered_log.cluster.dev.DevCluster` whose remote tier is an S3 bucket (moto's
server in its own process unless ``endpoint`` names another).

Per archive (``segments`` sealed segments of ``segment_kib``, shipped, with a short local
retention so the leaders' local start runs ahead all the time), on a fresh one-partition
topic with replication factor 3:

1. **Wiped follower under load.** Producer threads send ``acks=all`` requests of
   ``request_kib`` as fast as they are answered; ``wipes`` times (the two followers take
   turns, each wipe once the ISR is full again) a follower is SIGKILLed, its data
   directory deleted, and started again. Per wipe (``wipes``): ``rejoin_s`` from its
   start until the leader lists it in the ISR, ``resets`` (how often the leader sent it
   back to its remote end), ``tail_records`` (about what it copied); per archive the
   median ``rejoin_s`` and its range.
2. **New leader.** The producers stop; the leader is stopped (SIGTERM), and
   ``leader_ready_s`` runs from then until the new leader answers the partition's bounds
   with 200 (it serves reads only once it has read the bucket); ``rebuild_requests`` is
   the number of bucket requests that rebuild of its remote view made (the partition
   snapshot, one listing of what came after it, those copies' manifests).

Top-level figures: ``growth_10x_segments`` (the median ``rejoin_s`` of the largest archive
over the smallest's; target < 1.5 when it is 10 times larger), ``leader_ready_growth`` likewise,
and ``rebuild_requests`` per archive (target: independent of the segment count). Progress
goes to stderr; the result is one JSON-able dict. Not thread-safe.
"""

from __future__ import annotations

import os
import shutil
import statistics
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from .cluster import cluster_state, partition_of, wait_for
from .common import environment, ratio, say

if TYPE_CHECKING:
    from ..cluster.dev import DevCluster

DEFAULT_SEGMENTS = (200, 2000)
DEFAULT_SEGMENT_KIB = 64
DEFAULT_REQUEST_KIB = 256
DEFAULT_PRODUCERS = 2
DEFAULT_WIPES = 3
LOCAL_RETENTION_SEGMENTS = 4
STEP_TIMEOUT_S = 120.0
TARGET_GROWTH = 1.5


def _led(http: httpx.Client, c: DevCluster, topic: str) -> dict[str, Any]:
    """The partition's replication state as its leader reports it."""
    leader = c.nodes[_partition(http, c, topic)["leader"]]
    view = http.get(leader.url + "/v1/cluster").json()
    for p in view["replication"]:
        if p["topic"] == topic:
            return dict(p)
    raise RuntimeError(f"node {leader.node_id} does not report {topic}'s replication")


def _partition(http: httpx.Client, c: DevCluster, topic: str) -> dict[str, Any]:
    """The partition's metadata as the first live node that answers reports it."""
    part = partition_of(cluster_state(http, [n.url for n in c.nodes.values() if n.alive]), topic)
    if part is None:
        raise RuntimeError(f"{topic} is not in the cluster metadata (or no node answered)")
    return part


def _wait(what: str, cond: Any, timeout_s: float = STEP_TIMEOUT_S, every_s: float = 0.05) -> float:
    """:func:`~tiered_log.perf.cluster.wait_for`, failing the run when it times out."""
    took = wait_for(cond, timeout_s, every_s)
    if took is None:
        raise RuntimeError(f"not within {timeout_s:.0f} s: {what}")
    return took


class _Producers:
    """``n`` threads sending acks=all batches as fast as they are answered (each its own
    :class:`~tiered_log.client.Client`, which follows the leader)."""

    def __init__(self, c: DevCluster, topic: str, batch: list[bytes], n: int) -> None:
        self.c, self.topic, self.batch = c, topic, batch
        self.stop = threading.Event()
        self.acked = 0
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(n)]
        for t in self.threads:
            t.start()

    def _run(self) -> None:
        from ..client import Client
        from ..errors import TieredLogError

        with Client(self.c.urls, timeout=30, retry_timeout_s=30) as client:
            while not self.stop.is_set():
                try:
                    client.produce(self.topic, 0, self.batch, acks="all")
                except TieredLogError:
                    time.sleep(0.05)
                    continue
                with self._lock:
                    self.acked += 1

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(60)


def _wipe_once(
    c: DevCluster,
    http: httpx.Client,
    topic: str,
    load: _Producers,
    w: int,
    segments: int,
    show: bool,
) -> dict[str, Any]:
    """Wipe one follower (the two take turns) while ``load`` writes and wait until it is
    back in the ISR: its ``rejoin_s``, ``resets`` (how often the leader sent it back to
    the remote end meanwhile), ``acked_requests`` answered meanwhile and ``tail_records``
    (the leader's log end when it rejoined less its remote end when it restarted: about
    what it copied)."""
    _wait("a full ISR before the wipe", lambda: len(_partition(http, c, topic)["isr"]) == 3)
    st = _partition(http, c, topic)
    followers = sorted(n.node_id for n in c.nodes.values() if n.node_id != st["leader"])
    victim = c.nodes[followers[w % len(followers)]]

    def resets_of(view: dict[str, Any]) -> int:
        return next(
            (int(r.get("resets", 0)) for r in view["replicas"] if r["node_id"] == victim.node_id),
            0,
        )

    resets_before = resets_of(_led(http, c, topic))
    acked_before = load.acked
    victim.kill()
    shutil.rmtree(victim.data_dir, ignore_errors=True)
    say(
        f"rebuild --segments {segments}: wipe {w + 1}: node {victim.node_id} wiped; "
        "producers at full speed",
        enabled=show,
    )
    victim.start()
    started = time.monotonic()
    remote_end = int(_led(http, c, topic)["remote_end_offset"] or 0)
    _wait(
        "the wiped follower back in the ISR",
        lambda: victim.node_id in _partition(http, c, topic)["isr"],
        every_s=0.1,
    )
    rejoin_s = time.monotonic() - started
    view = _led(http, c, topic)
    resets = max(0, resets_of(view) - resets_before)
    say(
        f"rebuild --segments {segments}: wipe {w + 1}: rejoined in {rejoin_s:.2f} s after "
        f"{resets} reset(s)",
        enabled=show,
    )
    return {
        "node_id": victim.node_id,
        "rejoin_s": round(rejoin_s, 3),
        "resets": resets,
        "acked_requests": load.acked - acked_before,
        "tail_records": max(0, int(view["log_end_offset"] or 0) - remote_end),
    }


def run_case(
    c: DevCluster,
    http: httpx.Client,
    topic: str,
    segments: int,
    *,
    segment_kib: int,
    request_kib: int,
    producers: int,
    wipes: int,
    show: bool,
) -> dict[str, Any]:
    """One archive of ``segments`` segments: fill, ship, wipe a follower under load, then
    move the leadership; see the module docstring."""
    from ..client import Client

    seg_bytes = segment_kib << 10
    r = http.post(
        c.urls[0] + "/v1/topics",
        json={
            "name": topic,
            "partitions": 1,
            "replication_factor": 3,
            "config": {
                "segment_bytes": seg_bytes,
                "local_retention_bytes": LOCAL_RETENTION_SEGMENTS * seg_bytes,
            },
        },
    )
    if r.status_code != 201:
        raise RuntimeError(f"creating {topic}: {r.status_code} {r.text}")
    _wait("a full ISR", lambda: len(_partition(http, c, topic)["isr"]) == 3)
    # One batch a segment (a segment rolls once a batch takes it past its size).
    batch = [os.urandom(1024)] * max(1, min(request_kib, segment_kib))
    per_request = len(batch) * 1024
    target = segments * seg_bytes
    sent = requests_sent = 0
    t0 = last_say = time.monotonic()
    with Client(c.urls, timeout=60, retry_timeout_s=60) as client:
        while sent < target:
            client.produce(topic, 0, batch, acks="1")
            sent += per_request
            requests_sent += 1
            if show and time.monotonic() - last_say > 5:
                last_say = time.monotonic()
                say(
                    f"rebuild --segments {segments}: filled {sent >> 20:,} of "
                    f"{target >> 20:,} MiB ({time.monotonic() - t0:.0f} s)"
                )

    def shipped() -> int:
        return int(_led(http, c, topic)["remote_end_offset"] or 0)

    records = requests_sent * len(batch)
    last = [-1.0]

    def all_shipped() -> bool:
        n = shipped()
        if show and time.monotonic() - last[0] > 5:
            last[0] = time.monotonic()
            say(f"rebuild --segments {segments}: shipped {n:,} of ~{records:,} records")
        return n >= records - len(batch)  # all but the active segment

    _wait(
        "the archive to ship",
        all_shipped,
        timeout_s=max(STEP_TIMEOUT_S, segments * 0.5),
        every_s=0.5,
    )
    load = _Producers(c, topic, batch, producers)
    rounds: list[dict[str, Any]] = []
    try:
        time.sleep(1.0)
        for w in range(wipes):
            rounds.append(_wipe_once(c, http, topic, load, w, segments, show))
    finally:
        load.close()
    # The new leader: time until it serves reads (it has read the bucket).
    leader_node = c.nodes[_partition(http, c, topic)["leader"]]
    leader_node.stop()

    def new_leader_serves() -> bool:
        st = _partition(http, c, topic)
        node = c.nodes.get(st["leader"]) if st["leader"] is not None else None
        if node is None or not node.alive:
            return False
        try:
            b = http.get(f"{node.url}/v1/topics/{topic}/partitions/0/bounds")
        except httpx.HTTPError:
            return False
        return b.status_code == 200 and b.json()["log_start_offset"] == 0

    leader_ready_s = _wait("the new leader to serve reads", new_leader_serves)
    requests = int(_led(http, c, topic).get("rebuild_requests", 0))
    leader_node.start()
    _wait("every node back in the ISR", lambda: len(_partition(http, c, topic)["isr"]) == 3)
    http.delete(f"{c.urls[0]}/v1/topics/{topic}")
    say(
        f"rebuild --segments {segments}: new leader served reads after "
        f"{leader_ready_s:.2f} s, {requests} bucket requests",
        enabled=show,
    )
    return {
        "segments": segments,
        "segment_kib": segment_kib,
        "archive_mb": target >> 20,
        "rejoin_s": statistics.median(r["rejoin_s"] for r in rounds),
        "rejoin_s_range": [min(r["rejoin_s"] for r in rounds), max(r["rejoin_s"] for r in rounds)],
        "resets": max(r["resets"] for r in rounds),
        "acked_requests_during": sum(r["acked_requests"] for r in rounds),
        "wipes": rounds,
        "leader_ready_s": round(leader_ready_s, 3),
        "rebuild_requests": requests,
    }


def run_rebuild_segments(
    segments: Sequence[int] = DEFAULT_SEGMENTS,
    *,
    segment_kib: int = DEFAULT_SEGMENT_KIB,
    request_kib: int = DEFAULT_REQUEST_KIB,
    producers: int = DEFAULT_PRODUCERS,
    wipes: int = DEFAULT_WIPES,
    lease_ttl_s: int = 2,
    endpoint: str | None = None,
    directory: str | os.PathLike[str] | None = None,
    keep: bool = False,
    progress: bool | None = None,
) -> dict[str, Any]:
    """Rebuilds with archives of ``segments`` small segments; see the module docstring."""
    from ..cluster.dev import DevCluster
    from ..errors import InvalidArgumentError
    from .local import work_dir
    from .remote import s3_target

    counts = sorted(set(segments))
    if not counts or min(counts) < 1 or min(segment_kib, request_kib, producers, wipes) < 1:
        raise InvalidArgumentError(
            "segments, segment_kib, request_kib, producers and wipes must be positive"
        )
    show = progress is not False
    runs: list[dict[str, Any]] = []
    with s3_target(endpoint) as t, work_dir(directory, keep=keep) as root:
        import boto3

        boto3.client(
            "s3",
            endpoint_url=t.endpoint,
            region_name=t.region,
            aws_access_key_id=t.access_key,
            aws_secret_access_key=t.secret_key,
        ).create_bucket(Bucket=t.bucket)
        settings = {
            "TIERED_LOG_CLUSTER_LEASE_TTL_S": str(lease_ttl_s),
            "TIERED_LOG_REMOTE_URL": f"s3://{t.bucket}",
            "TIERED_LOG_S3_ENDPOINT_URL": t.endpoint,
            "TIERED_LOG_S3_REGION": t.region,
            "TIERED_LOG_S3_ACCESS_KEY": t.access_key or "testing",
            "TIERED_LOG_S3_SECRET_KEY": t.secret_key or "testing",
            "TIERED_LOG_SHIP_INTERVAL_MS": "100",
        }
        cluster = DevCluster(
            Path(root) / "cluster",
            3,
            settings=settings,
            progress=lambda m: say(f"rebuild --segments: {m}", enabled=show),
        )
        try:
            cluster.start()
            with httpx.Client(timeout=30) as http:
                for i, n in enumerate(counts):
                    runs.append(
                        run_case(
                            cluster,
                            http,
                            f"segments-{i}",
                            n,
                            segment_kib=segment_kib,
                            request_kib=request_kib,
                            producers=producers,
                            wipes=wipes,
                            show=show,
                        )
                    )
        finally:
            cluster.stop()
    small, large = runs[0], runs[-1]
    growth = ratio(large["rejoin_s"], small["rejoin_s"])
    return {
        "benchmark": "rebuild-segments",
        "runs": runs,
        "growth_10x_segments": growth,
        "segments_ratio": ratio(large["segments"], small["segments"]),
        "leader_ready_growth": ratio(large["leader_ready_s"], small["leader_ready_s"]),
        "rebuild_requests": {str(r["segments"]): r["rebuild_requests"] for r in runs},
        "targets": {
            "growth_10x_segments": TARGET_GROWTH,
            "rebuild_requests": "independent of the segment count",
        },
        "met": {"growth_10x_segments": growth < TARGET_GROWTH},
        "params": {
            "segments": counts,
            "segment_kib": segment_kib,
            "request_kib": request_kib,
            "producers": producers,
            "wipes": wipes,
            "lease_ttl_s": lease_ttl_s,
            "endpoint": "moto" if endpoint is None else endpoint,
        },
        "environment": environment(),
    }


__all__ = ["run_rebuild_segments"]
