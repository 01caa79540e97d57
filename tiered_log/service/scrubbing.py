"""The node's scrubber: a pass over both tiers of every partition this node holds
(:func:`scrub_node`), run in the background every ``scrub_interval_s`` seconds when that
is set and on demand (``POST /v1/archive/scrub``, ``tiered-log archive scrub --url``),
its figures exported in ``/metrics``.

A pass (:func:`~tiered_log.partition.scrub.scrub_partition` per partition) reads at
``scrub_bytes_per_sec`` on a thread of its own, never on the event loop: each node
checks its own local segments and, for the partitions it leads, their archived copies,
so in a cluster every node should run it (the bucket is read once per partition, by its
leader). Damage is logged as it is found, repaired from a good copy where one exists
(the other tier here, else another replica's local batches, asked over the cluster's
HTTP: :func:`peer_batches`), and counted per topic and tier in
``tiered_log_scrub_damaged_segments`` while it stays.
A read-only node (``read_only_remote``) finds and reports but repairs nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ..broker.topics import TopicManager
from ..cluster.protocol import REPLICA_BATCHES_PATH
from ..errors import LogClosedError
from ..partition.scrub import PeerBatches, scrub_partition
from ..remote.limits import RateLimiter
from ..remote.scrub import Scrubber, ScrubReport
from .metrics import Family
from .state import ServiceState

if TYPE_CHECKING:  # a single node never loads the cluster node (nor its etcd client)
    from ..cluster.node import ClusterNode

log = logging.getLogger(__name__)


def scrub_node(
    topics: TopicManager,
    limiter: RateLimiter,
    topic: str | None,
    progress: Callable[[ScrubReport], None],
    cancel: threading.Event,
    *,
    repair: bool = True,
    peers: Callable[[str, int], PeerBatches | None] = lambda _t, _p: None,
) -> ScrubReport:
    """One pass over every partition ``topics`` holds (``topic``'s only, when given:
    TopicNotFoundError if it is not held here). ``peers(topic, partition)``: where a
    repair finds the partition's other replicas' batches (a cluster's, :func:`peer_batches`).
    Blocking; one at a time."""
    chosen = [topics.get(topic)] if topic is not None else topics.list()
    rep = ScrubReport(started_ms=int(time.time() * 1000))
    for t in chosen:
        for i, plog in enumerate(t.logs):
            if cancel.is_set():
                break
            try:
                scrub_partition(
                    plog,
                    t.name,
                    i,
                    rep,
                    limiter,
                    repair=repair,
                    peers=peers(t.name, i),
                    progress=progress,
                    cancel=cancel,
                )
            except LogClosedError:
                continue  # the topic was deleted under the pass
    rep.finished_ms = int(time.time() * 1000)
    return rep


def peer_batches(
    cluster: ClusterNode, topic: str, partition: int, timeout_s: float = 60.0
) -> PeerBatches:
    """The partition's other replicas' batches, asked of each live replica in turn (its
    leader first) at :data:`~tiered_log.cluster.protocol.REPLICA_BATCHES_PATH` with the
    cluster's token; the first that holds the range whole answers. Blocking."""
    import httpx  # a cluster's only: a single node's server does not load it

    path = REPLICA_BATCHES_PATH.format(topic=topic, partition=partition)

    def fetch(base: int, end: int) -> tuple[bytes, str] | None:
        for node_id, url in cluster.other_replicas(topic, partition):
            try:
                r = httpx.get(
                    url.rstrip("/") + path,
                    params={"offset": base, "end": end},
                    headers=cluster.config.fetch_headers,
                    timeout=timeout_s,
                )
            except httpx.HTTPError as exc:
                log.warning(
                    "scrub: node %s did not answer for %s-%d: %s", node_id, topic, partition, exc
                )
                continue
            if r.status_code == 200:
                return r.content, f"node {node_id}"
        return None

    return fetch


def start_scrubber(state: ServiceState) -> Scrubber:
    """Make the node's scrubber (passes in the background only when
    ``scrub_interval_s`` is set) and export its metrics. Call from the lifespan; stop it
    at shutdown (:meth:`Scrubber.stop`, blocking: from a worker thread)."""
    settings = state.settings
    limiter = RateLimiter(settings.scrub_bytes_per_sec)
    repair = not settings.read_only_remote

    def run_pass(
        topic: str | None, progress: Callable[[ScrubReport], None], cancel: threading.Event
    ) -> ScrubReport:
        cluster = state.cluster

        def peers(name: str, partition: int) -> PeerBatches | None:
            return peer_batches(cluster, name, partition) if cluster is not None else None

        return scrub_node(
            state.topics, limiter, topic, progress, cancel, repair=repair, peers=peers
        )

    scrubber = Scrubber(run_pass, settings.scrub_interval_s)

    def collect() -> Iterable[Family]:
        return [
            Family(name, kind, help, labels, tuple(samples))
            for name, kind, help, labels, samples in scrubber.samples()
        ]

    state.metrics.registry.add_collector(collect)
    state.scrubber = scrubber.start()
    return state.scrubber


__all__ = ["peer_batches", "scrub_node", "start_scrubber"]
