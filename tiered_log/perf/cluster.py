"""Benchmarks of a replicated cluster (issue 16), on real processes on loopback: etcd and
``tiered-log serve`` nodes started by :class:`~tiered_log.cluster.dev.DevCluster`.

``tiered-log perf failover`` (:func:`run_failover`): a topic with one partition and
replication factor 3; a producer thread sends ``acks=all`` single-record produces one
after another, each with a fresh value, and records every acknowledged value and offset
and which node answered. ``kills`` times: SIGKILL the partition's leader and measure the
time from the kill to the first ``acks=all`` produce acknowledged by another node (the
producer finds the new leader by itself: it asks the nodes' ``GET /v1/cluster`` for the
leader and follows ``not_leader``'s ``leader_url``; a node that refuses the connection
is skipped); restart the killed node and wait until it is back in the ISR before the next
kill. Per kill it also reports when the producer first learnt of a new leader
(``leader_learnt_s``: mostly the lease running out and the controller's election) and
how long the restarted node took to be back in the ISR (``rejoin_s``, from its restart
on). At the end the whole partition is read back from the leader: every acknowledged
record must be there exactly once, at its acknowledged offset (``acked_lost`` counts
those that are not), and the offsets dense. Target: p50 <= lease TTL + 1 s and
``acked_lost`` 0. The lease TTL is the baseline: a dead node is noticed when its lease
runs out, so that much of a failover is by design. ``reads_ready_s`` per kill: from the
kill to the first 200 of the partition's bounds from another node, polled every 10 ms
from the kill on (only a leader answers bounds, and a new leader only once it knows
where its log starts: it reads the bucket's partition snapshot first). ``--tiered``
gives the topic small segments that ship and leave the local disks during the run, so
that read has something to find; by default the topic is local-only.

``tiered-log perf replicated-latency`` (:func:`run_replicated_latency`): p50/p99 of
single small records produced one at a time over HTTP (JSON body, one keep-alive
connection per target, plain httpx so the three targets get the same request) to

- ``single``: one ``tiered-log serve`` process without cluster settings (no etcd, the
  baseline);
- ``acks_1``: the leader of a replication-factor-3 partition of a 3-node DevCluster,
  ``acks=1`` (answered once the leader's log has the record);
- ``acks_all``: the same partition, ``acks=all`` (answered once the ISR has it).

The three take turns in ``rounds`` rounds (the order rotating), so a noisy machine
disturbs them alike; the ratios are to ``single``. It is a separate command rather than
a mode of ``perf produce-latency``, which measures in-process appends against a tiering
S3 bucket (moto): nothing of that set-up is shared with an HTTP cluster on loopback.

Both print progress to stderr and return one JSON-able dict. Not thread-safe: one
benchmark at a time.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx

from .common import environment, ratio, say
from .http import ServerProcess, latency_figures, percentile

if TYPE_CHECKING:
    from ..cluster.dev import DevCluster

DEFAULT_KILLS = 10
DEFAULT_LEASE_TTL_S = 2
DEFAULT_NODES = 3
REPLICATION_FACTOR = 3
DEFAULT_LATENCY_RECORDS = 2000
DEFAULT_VALUE_BYTES = 100
DEFAULT_ROUNDS = 10
TOPIC = "perf-failover"
LATENCY_TOPIC = "perf-latency"
RETRY_PAUSE_S = 0.025
"""The producer's pause after a failed produce or leader lookup (the failover's resolution)."""
STEP_TIMEOUT_S = 60.0
"""How long one step (a failover, a rejoin, a full ISR) may take before the run gives up on it."""
TOPIC_CONFIG = {"remote_enabled": False}
"""A cluster's logs are local-only; the single node's too, so both do the same work."""
TIERED_TOPIC_CONFIG = {
    "remote_enabled": True,
    "segment_bytes": 64 << 10,
    "local_retention_bytes": 256 << 10,
}
"""``perf failover --tiered``: small segments that ship and leave the local disks as the
run goes, so a new leader must learn its log's start from the bucket before it serves
reads."""
READS_POLL_S = 0.01
"""How often :class:`_ReadsReady` asks the nodes for the partition's bounds."""


def _records_path(topic: str) -> str:
    return f"/v1/topics/{topic}/partitions/0/records"


# ---- the cluster's metadata -------------------------------------------------------------------


def cluster_state(http: httpx.Client, urls: Sequence[str]) -> dict[str, Any] | None:
    """``GET /v1/cluster`` of the first node in ``urls`` that answers it, or None."""
    for url in urls:
        try:
            r = http.get(url + "/v1/cluster", timeout=1.0)
        except httpx.HTTPError:
            continue
        if r.status_code == 200:
            return dict(r.json())
    return None


def partition_of(state: dict[str, Any] | None, topic: str) -> dict[str, Any] | None:
    for part in (state or {}).get("partitions", []):
        if part["topic"] == topic and part["partition"] == 0:
            return dict(part)
    return None


def leader_of(state: dict[str, Any] | None, topic: str) -> tuple[int, str] | None:
    """The partition's leader (id, URL) if the metadata names one among the live nodes."""
    part = partition_of(state, topic)
    if part is None or part["leader"] is None:
        return None
    for n in (state or {}).get("nodes", []):
        if n["node_id"] == part["leader"]:
            return int(n["node_id"]), str(n["url"])
    return None


def wait_for(pred: Callable[[], bool], timeout_s: float, interval_s: float = 0.05) -> float | None:
    """Seconds until ``pred()`` held, or None if it did not within ``timeout_s``."""
    t0 = time.monotonic()
    while True:
        if pred():
            return time.monotonic() - t0
        if time.monotonic() - t0 > timeout_s:
            return None
        time.sleep(interval_s)


def create_topic(
    http: httpx.Client,
    urls: Sequence[str],
    topic: str,
    replication_factor: int | None,
    config: dict[str, Any] | None = None,
) -> None:
    body: dict[str, Any] = {"name": topic, "partitions": 1, "config": config or TOPIC_CONFIG}
    if replication_factor is not None:
        body["replication_factor"] = replication_factor
    last = ""
    for url in urls:
        try:
            r = http.post(url + "/v1/topics", json=body, timeout=30)
        except httpx.HTTPError as exc:
            last = str(exc)
            continue
        if r.status_code == 201:
            return
        last = r.text
    raise RuntimeError(f"could not create {topic}: {last}")


def full_isr(http: httpx.Client, urls: Sequence[str], topic: str, size: int) -> bool:
    part = partition_of(cluster_state(http, urls), topic)
    return part is not None and part["leader"] is not None and len(part["isr"]) == size


# ---- failover -----------------------------------------------------------------------------------


@dataclass
class Ack:
    value: str
    offset: int
    at: float  # time.monotonic() when the answer arrived
    url: str


@dataclass
class _Producer:
    """acks=all produces one after another, each a fresh value, until stopped; finds the
    leader by itself (see the module docstring)."""

    urls: Sequence[str]
    topic: str
    acks: list[Ack] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    found: list[tuple[float, str]] = field(default_factory=list)  # (when, leader URL) learnt
    attempts: int = 0
    stop: threading.Event = field(default_factory=threading.Event)
    _url: str | None = None

    def _find_leader(self, http: httpx.Client) -> str | None:
        # Each node's own view: one may still name a dead leader, another a new one.
        for url in self.urls:
            found = leader_of(cluster_state(http, [url]), self.topic)
            if found is not None:
                return found[1]
        return None

    def run(self) -> None:
        path = _records_path(self.topic)
        with httpx.Client(timeout=30) as http:
            for seq in itertools.count():
                if self.stop.is_set():
                    return
                url = self._url
                if url is None:
                    url = self._find_leader(http)
                    if url is None:
                        self.errors["no_leader_known"] += 1
                        time.sleep(RETRY_PAUSE_S)
                        continue
                    self.found.append((time.monotonic(), url))
                self.attempts += 1
                try:
                    r = http.post(
                        url + path,
                        params={"acks": "all"},
                        json={"records": [{"value": f"v{seq:09d}"}]},
                    )
                except httpx.HTTPError as exc:
                    self.errors[type(exc).__name__] += 1
                    self._url = None
                    time.sleep(RETRY_PAUSE_S)
                    continue
                if r.status_code == 200:
                    self._url = url
                    self.acks.append(
                        Ack(f"v{seq:09d}", int(r.json()["first_offset"]), time.monotonic(), url)
                    )
                    continue
                try:
                    err = r.json()["error"]
                except (ValueError, KeyError, TypeError):
                    err = {"code": f"http_{r.status_code}"}
                self.errors[str(err.get("code"))] += 1
                self._url = (err.get("details") or {}).get("leader_url") or None
                if self._url is not None:
                    self.found.append((time.monotonic(), self._url))
                time.sleep(RETRY_PAUSE_S)


def read_partition(http: httpx.Client, urls: Sequence[str], topic: str) -> list[tuple[int, str]]:
    """Every record below the high watermark, from the leader: (offset, value)."""
    out: list[tuple[int, str]] = []
    offset = 0
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while time.monotonic() < deadline:
        found = leader_of(cluster_state(http, urls), topic)
        if found is None:
            time.sleep(0.1)
            continue
        try:
            r = http.get(
                found[1] + _records_path(topic),
                params={"offset": offset, "max_records": 1000},
                timeout=30,
            )
        except httpx.HTTPError:
            time.sleep(0.1)
            continue
        if r.status_code != 200:
            time.sleep(0.1)
            continue
        body = r.json()
        out += [(rec["offset"], rec["value"]) for rec in body["records"]]
        if not body["records"] and body["next_offset"] >= body["high_watermark"]:
            return out
        offset = body["next_offset"]
    raise RuntimeError(f"could not read {topic} back within {STEP_TIMEOUT_S:.0f}s")


def check_acks(acks: Sequence[Ack], got: Sequence[tuple[int, str]]) -> dict[str, Any]:
    """How the acknowledged records fared in the log read back."""
    where: dict[str, list[int]] = {}
    for off, value in got:
        where.setdefault(value, []).append(off)
    missing = duplicated = moved = 0
    for a in acks:
        offs = where.get(a.value, [])
        if not offs:
            missing += 1
        elif len(offs) > 1:
            duplicated += 1
        elif offs[0] != a.offset:
            moved += 1
    acked_values = {a.value for a in acks}
    offsets = [o for o, _ in got]
    return {
        "acked_lost": missing + duplicated + moved,
        "acked_missing": missing,
        "acked_duplicated": duplicated,
        "acked_moved": moved,
        "records_read": len(got),
        "offsets_dense": offsets == list(range(offsets[0], offsets[0] + len(offsets)))
        if offsets
        else True,
        "values_read_twice": sum(1 for v in where.values() if len(v) > 1),
        "unacked_in_log": sum(1 for _, v in got if v not in acked_values),
    }


def _node_of(cluster: DevCluster, url: str) -> int | None:
    return next((i for i, n in cluster.nodes.items() if n.url == url), None)


class _ReadsReady:
    """From a leader's SIGKILL on, asks every other node for the partition's bounds every
    :data:`READS_POLL_S` on a thread of its own; :attr:`at` is when one first answered
    200. Only a leader answers bounds (421 elsewhere), and a new leader only once it
    knows where its log starts (503 ``not_ready`` while it reads the bucket), so this is
    when a consumer starting from "earliest" is served again."""

    def __init__(self, urls: Sequence[str], topic: str) -> None:
        self._urls = list(urls)
        self._path = f"/v1/topics/{topic}/partitions/0/bounds"
        self._stop = threading.Event()
        self.at: float | None = None
        self._thread = threading.Thread(target=self._run, name="failover-reads", daemon=True)

    def start(self) -> _ReadsReady:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        with httpx.Client(timeout=1.0) as http:
            while not self._stop.is_set():
                for url in self._urls:
                    try:
                        ok = http.get(url + self._path).status_code == 200
                    except httpx.HTTPError:
                        continue
                    if ok:
                        self.at = time.monotonic()
                        return
                self._stop.wait(READS_POLL_S)


def _one_kill(
    cluster: DevCluster, http: httpx.Client, prod: _Producer, i: int, kills: int, show: bool
) -> dict[str, Any]:
    urls = cluster.urls
    # Steady state first: a full ISR and acks=all going on.
    if (
        wait_for(lambda: full_isr(http, urls, prod.topic, REPLICATION_FACTOR), STEP_TIMEOUT_S)
        is None
    ):
        raise RuntimeError("the partition's ISR did not fill up")
    before = len(prod.acks)
    if wait_for(lambda: len(prod.acks) >= before + 20, STEP_TIMEOUT_S) is None:
        raise RuntimeError(f"acks=all produce did not go on: errors {dict(prod.errors)}")
    part = partition_of(cluster_state(http, urls), prod.topic)
    assert part is not None
    victim = cluster.nodes[part["leader"]]
    n_acks, n_found, errors_before = len(prod.acks), len(prod.found), Counter(prod.errors)
    reads = _ReadsReady([n.url for n in cluster.nodes.values() if n is not victim], prod.topic)
    t_kill = time.monotonic()
    victim.kill()
    reads.start()

    def successor() -> Ack | None:
        return next((a for a in prod.acks[n_acks:] if a.at > t_kill and a.url != victim.url), None)

    wait_for(lambda: successor() is not None, STEP_TIMEOUT_S, 0.01)
    first = successor()
    failover = round(first.at - t_kill, 3) if first is not None else None
    errors = dict(prod.errors - errors_before)
    wait_for(lambda: reads.at is not None, STEP_TIMEOUT_S, 0.01)
    reads.stop()
    reads_ready = round(reads.at - t_kill, 3) if reads.at is not None else None
    learnt = next((t for t, u in prod.found[n_found:] if t > t_kill and u != victim.url), None)
    t_start = time.monotonic()
    victim.start()
    back = wait_for(
        lambda: (
            (p := partition_of(cluster_state(http, urls), prod.topic)) is not None
            and victim.node_id in p["isr"]
            and len(p["isr"]) == REPLICATION_FACTOR
        ),
        STEP_TIMEOUT_S,
    )
    rejoin = time.monotonic() - t_start if back is not None else None
    new = _node_of(cluster, first.url) if first is not None else None
    say(
        f"failover: kill {i}/{kills}: node {victim.node_id} (epoch {part['leader_epoch']}) "
        + (
            f"-> node {new} acknowledged acks=all after {failover:.3f}s"
            if failover is not None
            else f"-> no successor within {STEP_TIMEOUT_S:.0f}s"
        )
        + (
            f"; node {victim.node_id} back in the ISR after {rejoin:.2f}s"
            if rejoin is not None
            else f"; node {victim.node_id} NOT back in the ISR"
        ),
        enabled=show,
    )
    return {
        "kill": i,
        "killed_node": victim.node_id,
        "killed_epoch": part["leader_epoch"],
        "new_leader": new,
        "failover_s": failover,
        "reads_ready_s": reads_ready,
        "leader_learnt_s": round(learnt - t_kill, 3) if learnt is not None else None,
        "acked_before_kill": n_acks,
        "produce_errors": errors,
        "rejoin_s": round(rejoin, 3) if rejoin is not None else None,
    }


def run_failover(
    kills: int = DEFAULT_KILLS,
    *,
    lease_ttl_s: int = DEFAULT_LEASE_TTL_S,
    nodes: int = DEFAULT_NODES,
    directory: str | os.PathLike[str] | None = None,
    keep: bool = False,
    progress: bool | None = None,
    tiered: bool = False,
) -> dict[str, Any]:
    """SIGKILL the leader ``kills`` times under acks=all load; see the module docstring.
    ``tiered``: the topic ships small segments (:data:`TIERED_TOPIC_CONFIG`)."""
    from ..cluster.dev import DevCluster
    from ..errors import InvalidArgumentError
    from .local import work_dir

    if kills < 1 or lease_ttl_s < 1:
        raise InvalidArgumentError("kills and lease_ttl_s must be at least 1")
    if nodes < REPLICATION_FACTOR:
        raise InvalidArgumentError(
            f"a partition of replication factor {REPLICATION_FACTOR} "
            f"needs at least {REPLICATION_FACTOR} nodes, got {nodes}"
        )
    show = progress is not False
    settings = {"TIERED_LOG_CLUSTER_LEASE_TTL_S": str(lease_ttl_s)}
    per_kill: list[dict[str, Any]] = []
    with work_dir(directory, keep=keep) as root:
        cluster = DevCluster(
            root / "cluster",
            nodes,
            settings=settings,
            progress=lambda m: say(f"failover: {m}", enabled=show),
        )
        try:
            cluster.start()
            with httpx.Client(timeout=30) as http:
                config = TIERED_TOPIC_CONFIG if tiered else TOPIC_CONFIG
                create_topic(http, cluster.urls, TOPIC, REPLICATION_FACTOR, config)
                prod = _Producer(cluster.urls, TOPIC)
                th = threading.Thread(target=prod.run, name="failover-producer", daemon=True)
                th.start()
                try:
                    for i in range(1, kills + 1):
                        per_kill.append(_one_kill(cluster, http, prod, i, kills, show))
                finally:
                    prod.stop.set()
                    th.join(60)
                say(
                    f"failover: reading the partition back ({len(prod.acks):,} acknowledged)",
                    enabled=show,
                )
                checked = check_acks(prod.acks, read_partition(http, cluster.urls, TOPIC))
        finally:
            cluster.stop()
    return failover_report(
        per_kill,
        checked,
        kills=kills,
        lease_ttl_s=lease_ttl_s,
        nodes=nodes,
        tiered=tiered,
        acked=len(prod.acks),
        attempts=prod.attempts,
        errors=dict(prod.errors),
    )


def failover_report(
    per_kill: list[dict[str, Any]],
    checked: dict[str, Any],
    *,
    kills: int,
    lease_ttl_s: int,
    nodes: int,
    acked: int,
    attempts: int,
    errors: dict[str, int],
    tiered: bool = False,
) -> dict[str, Any]:
    times = [k["failover_s"] for k in per_kill if k["failover_s"] is not None]
    reads = [k["reads_ready_s"] for k in per_kill if k.get("reads_ready_s") is not None]
    timed_out = len(per_kill) - len(times)
    p50 = round(percentile(times, 0.5), 3) if times else None
    bound = lease_ttl_s + 1.0
    met = (
        p50 is not None
        and p50 <= bound
        and checked["acked_lost"] == 0
        and timed_out == 0
        and checked["offsets_dense"]
    )
    return {
        "benchmark": "failover",
        "note": "failover = SIGKILL of the partition's leader to the first acks=all produce "
        "acknowledged by another node, the producer finding the leader by itself "
        "(GET /v1/cluster on the nodes, not_leader's leader_url); reads_ready = SIGKILL "
        "to the first 200 of the partition's bounds from another node (a new leader "
        "answers 503 not_ready until it knows its log's start); p50 by the "
        "nearest rank; acked_lost = acknowledged records not read back exactly once "
        "at their offset",
        "environment": environment(),
        "params": {
            "kills": kills,
            "lease_ttl_s": lease_ttl_s,
            "nodes": nodes,
            "replication_factor": REPLICATION_FACTOR,
            "acks": "all",
            "retry_pause_s": RETRY_PAUSE_S,
            "tiered": tiered,
            "topic_config": TIERED_TOPIC_CONFIG if tiered else TOPIC_CONFIG,
        },
        "failover_p50_s": p50,
        "failover_max_s": round(max(times), 3) if times else None,
        "failover_min_s": round(min(times), 3) if times else None,
        "failover_timed_out": timed_out,
        "reads_ready_p50_s": round(percentile(reads, 0.5), 3) if reads else None,
        "reads_ready_max_s": round(max(reads), 3) if reads else None,
        "lease_ttl_s": lease_ttl_s,
        "p50_vs_lease_ttl": round(ratio(p50, lease_ttl_s), 3) if p50 is not None else None,
        "kills": len(per_kill),
        "acked": acked,
        **checked,
        "produce_attempts": attempts,
        "produce_errors": errors,
        "per_kill": per_kill,
        "target": {
            "text": "p50 <= lease TTL + 1 s, acked_lost 0",
            "p50_max_s": bound,
            "met": bool(met),
        },
        "met": bool(met),
    }


def format_failover(report: dict[str, Any]) -> str:
    lines = [
        f"perf failover: {report['kills']} kills of the leader, {report['params']['nodes']} "
        f"nodes, lease TTL {report['lease_ttl_s']} s"
    ]
    for k in report["per_kill"]:
        f = "timed out" if k["failover_s"] is None else f"{k['failover_s']:.3f} s"
        lines.append(
            f"  kill {k['kill']:>2}: node {k['killed_node']} -> node {k['new_leader']}"
            f"  failover {f}  reads served after {k.get('reads_ready_s')} s"
            f"  rejoin {k['rejoin_s']} s"
        )
    lines.append(
        f"failover p50 {report['failover_p50_s']} s  min {report['failover_min_s']} s  "
        f"max {report['failover_max_s']} s  (lease TTL {report['lease_ttl_s']} s); reads "
        f"served again p50 {report['reads_ready_p50_s']} s max {report['reads_ready_max_s']} s"
    )
    lines.append(
        f"acknowledged {report['acked']:,}, lost {report['acked_lost']} (missing "
        f"{report['acked_missing']}, duplicated {report['acked_duplicated']}, moved "
        f"{report['acked_moved']}); offsets dense: {report['offsets_dense']}"
    )
    t = report["target"]
    lines.append(f"target: {t['text']}: {'met' if t['met'] else 'NOT MET'}")
    return "\n".join(lines)


# ---- replicated produce latency -------------------------------------------------------------


SINGLE, ACKS_1, ACKS_ALL = "single", "acks_1", "acks_all"


def run_replicated_latency(
    records: int = DEFAULT_LATENCY_RECORDS,
    *,
    value_bytes: int = DEFAULT_VALUE_BYTES,
    rounds: int = DEFAULT_ROUNDS,
    directory: str | os.PathLike[str] | None = None,
    keep: bool = False,
    progress: bool | None = None,
) -> dict[str, Any]:
    """p50/p99 of single-record produce: single node, 3-node cluster acks=1 and acks=all;
    see the module docstring. ``records`` per target, in ``rounds`` turns."""
    from ..cluster.dev import DevCluster
    from ..errors import InvalidArgumentError
    from .local import work_dir

    if records < 1 or value_bytes < 1 or rounds < 1:
        raise InvalidArgumentError("records, value_bytes and rounds must be at least 1")
    rounds = min(rounds, records)
    show = progress is not False
    value = ("0123456789abcdef" * (value_bytes // 16 + 1))[:value_bytes]
    body = {"records": [{"value": value}]}
    lat: dict[str, list[float]] = {SINGLE: [], ACKS_1: [], ACKS_ALL: []}
    quiet = {"TIERED_LOG_LOG_LEVEL": "warning"}
    with work_dir(directory, keep=keep) as root:
        (root / "single").mkdir()
        say("replicated-latency: starting a single node", enabled=show)
        srv = ServerProcess(root / "single" / "data", root / "single" / "server.log").start()
        cluster = DevCluster(
            root / "cluster",
            3,
            settings=quiet,
            progress=lambda m: say(f"replicated-latency: {m}", enabled=show),
        )
        try:
            cluster.start()
            with httpx.Client(timeout=60) as admin:
                create_topic(admin, [srv.url], LATENCY_TOPIC, None)
                create_topic(admin, cluster.urls, LATENCY_TOPIC, REPLICATION_FACTOR)
                if (
                    wait_for(
                        lambda: full_isr(admin, cluster.urls, LATENCY_TOPIC, 3), STEP_TIMEOUT_S
                    )
                    is None
                ):
                    raise RuntimeError("the cluster's partition did not get a full ISR")
                found = leader_of(cluster_state(admin, cluster.urls), LATENCY_TOPIC)
                assert found is not None
            path = _records_path(LATENCY_TOPIC)
            targets = {
                SINGLE: (srv.url + path, {}),
                ACKS_1: (found[1] + path, {"acks": "1"}),
                ACKS_ALL: (found[1] + path, {"acks": "all"}),
            }
            clients = {name: httpx.Client(timeout=60) for name in targets}
            try:
                for name, (url, params) in targets.items():  # warm-up, not timed
                    for _ in range(20):
                        clients[name].post(url, params=params, json=body).raise_for_status()
                order = list(targets)
                per_round = math.ceil(records / rounds)
                for r in range(rounds):
                    n = min(per_round, records - r * per_round)
                    for name in order:
                        url, params = targets[name]
                        lat[name] += _timed_posts(clients[name], url, params, body, n)
                    order = order[1:] + order[:1]
                    say(
                        f"replicated-latency: round {r + 1}/{rounds}: "
                        + ", ".join(
                            f"{k} p50 {percentile(v, 0.5) * 1000:.2f} ms" for k, v in lat.items()
                        ),
                        enabled=show,
                    )
            finally:
                for c in clients.values():
                    c.close()
        finally:
            cluster.stop()
            srv.stop()
    return latency_report(lat, records=records, value_bytes=value_bytes, rounds=rounds)


def _timed_posts(
    http: httpx.Client, url: str, params: dict[str, str], body: dict[str, Any], n: int
) -> list[float]:
    out: list[float] = []
    clock = time.perf_counter
    for _ in range(n):
        t0 = clock()
        r = http.post(url, params=params, json=body)
        out.append(clock() - t0)
        if r.status_code != 200:
            raise RuntimeError(f"produce to {url} {params} answered {r.status_code}: {r.text}")
    return out


def latency_report(
    lat: dict[str, list[float]], *, records: int, value_bytes: int, rounds: int
) -> dict[str, Any]:
    figs = {k: latency_figures(v) for k, v in lat.items()}
    ratios = {
        f"{k}_vs_single": {
            q: round(ratio(figs[k][q], figs[SINGLE][q]), 3) for q in ("p50_ms", "p99_ms")
        }
        for k in (ACKS_1, ACKS_ALL)
    }
    return {
        "benchmark": "replicated-latency",
        "note": "one record per request, one request at a time, JSON body, keep-alive "
        "connection; single = a tiered-log serve process without cluster settings; "
        "acks_1 / acks_all = the leader of a replication-factor-3 partition on a "
        "3-node cluster on loopback (etcd + 3 serve processes on the same machine); "
        "the three take turns in rounds; ratio = target / single",
        "environment": environment(),
        "params": {
            "records": records,
            "value_bytes": value_bytes,
            "rounds": rounds,
            "replication_factor": REPLICATION_FACTOR,
            "topic_config": TOPIC_CONFIG,
        },
        "results": figs,
        "ratios": ratios,
    }


def format_latency(report: dict[str, Any]) -> str:
    p = report["params"]
    lines = [
        f"perf replicated-latency: {p['records']:,} single-record produces of "
        f"{p['value_bytes']} bytes per target, in {p['rounds']} rounds"
    ]
    for name, f in report["results"].items():
        extra = ""
        if name != SINGLE:
            r = report["ratios"][f"{name}_vs_single"]
            extra = f"  ({r['p50_ms']:.2f}x / {r['p99_ms']:.2f}x single)"
        lines.append(
            f"{name:<9} p50 {f['p50_ms']:.3f} ms  p99 {f['p99_ms']:.3f} ms  "
            f"max {f['max_ms']:.3f} ms{extra}"
        )
    return "\n".join(lines)


__all__ = [
    "DEFAULT_KILLS",
    "DEFAULT_LATENCY_RECORDS",
    "DEFAULT_LEASE_TTL_S",
    "DEFAULT_NODES",
    "DEFAULT_ROUNDS",
    "DEFAULT_VALUE_BYTES",
    "check_acks",
    "failover_report",
    "format_failover",
    "format_latency",
    "latency_report",
    "run_failover",
    "run_replicated_latency",
]
