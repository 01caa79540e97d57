"""The service's metrics: which series it exports and where each comes from.

Counters the handlers bump (appends and fetches per topic, HTTP requests by method and
status; see :class:`ServiceMetrics`'s attributes) and one collector that reads every
open partition log's stats and bounds at scrape time (copy lag, tier sizes, remote
fetches, cache hits, partition offsets). The text format itself is
:mod:`tiered_log.service.metrics`.

Thread-safety: the counters are :mod:`.metrics` metrics, safe from any thread or task;
the collector blocks on the logs (it reads their stats), so render the registry from a
worker thread (``asyncio.to_thread``), as ``GET /metrics`` does.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ..broker.topics import TopicManager, partition_bounds, partition_stats
from ..errors import TieredLogError
from .metrics import Family, Registry

if TYPE_CHECKING:
    from .loop_watchdog import LoopWatchdog


class ServiceMetrics:
    """The service's metrics; per-topic counters plus log stats read at scrape time."""

    _STATS: tuple[tuple[str, str, str, str], ...] = (
        (
            "copy_lag_bytes",
            "tiered_log_copy_lag_bytes",
            "gauge",
            "Bytes of sealed segments not yet copied to the remote tier.",
        ),
        (
            "copy_lag_segments",
            "tiered_log_copy_lag_segments",
            "gauge",
            "Sealed segments not yet copied to the remote tier.",
        ),
        ("local_bytes", "tiered_log_local_bytes", "gauge", "Bytes of segments on local disk."),
        (
            "remote_bytes",
            "tiered_log_remote_bytes",
            "gauge",
            "Bytes of segments in the remote tier.",
        ),
        (
            "uploaded_bytes",
            "tiered_log_remote_copy_bytes_total",
            "counter",
            "Bytes copied to the remote tier.",
        ),
        (
            "uploaded_segments",
            "tiered_log_remote_copy_segments_total",
            "counter",
            "Segments copied to the remote tier.",
        ),
        (
            "copy_failures",
            "tiered_log_remote_copy_errors_total",
            "counter",
            "Failed segment copies.",
        ),
        (
            "remote_fetch_bytes",
            "tiered_log_remote_fetch_bytes_total",
            "counter",
            "Bytes read from the remote tier.",
        ),
        (
            "remote_fetch_requests",
            "tiered_log_remote_fetch_requests_total",
            "counter",
            "Ranged reads from the remote tier.",
        ),
        (
            "remote_fetch_errors",
            "tiered_log_remote_fetch_errors_total",
            "counter",
            "Failed reads from the remote tier.",
        ),
        (
            "remote_fetch_throttled_ms",
            "tiered_log_remote_fetch_throttled_ms_total",
            "counter",
            "Milliseconds remote reads waited for the fetch quota (remote_fetch_bytes_per_sec).",
        ),
        (
            "cache_hits",
            "tiered_log_remote_cache_hits_total",
            "counter",
            "Remote reads served by the chunk cache.",
        ),
        (
            "cache_misses",
            "tiered_log_remote_cache_misses_total",
            "counter",
            "Remote reads that missed the chunk cache.",
        ),
        (
            "lost_offsets",
            "tiered_log_lost_offsets",
            "gauge",
            "Offsets acknowledged before the local disk was lost that never reached the "
            "bucket (found when the log was rebuilt from it; never handed out again).",
        ),
    )

    def __init__(self, topics: TopicManager) -> None:
        self.topics = topics
        r = self.registry = Registry()
        self.append_requests = r.counter(
            "tiered_log_append_requests_total", "Append requests that stored records.", ["topic"]
        )
        self.append_records = r.counter(
            "tiered_log_append_records_total", "Records appended.", ["topic"]
        )
        self.append_bytes = r.counter(
            "tiered_log_append_bytes_total", "Bytes of record values and keys appended.", ["topic"]
        )
        self.fetch_requests = r.counter(
            "tiered_log_fetch_requests_total",
            "Fetch requests answered, by form.",
            ["topic", "format"],
        )
        self.fetch_records = r.counter(
            "tiered_log_fetch_records_total", "Records returned by fetches.", ["topic"]
        )
        self.fetch_bytes = r.counter(
            "tiered_log_fetch_bytes_total", "Bytes of record frames returned by fetches.", ["topic"]
        )
        self.replica_fetches = r.counter(
            "tiered_log_replica_fetches_total",
            "Followers' replication fetches answered (as leader), by listener.",
            ["listener"],
        )
        self.http_requests = r.counter(
            "tiered_log_http_requests_total",
            "HTTP requests answered, by method and status.",
            ["method", "status"],
        )
        r.add_collector(self._collect_logs)

    def _collect_logs(self) -> Iterable[Family]:
        per_topic: dict[str, dict[str, float]] = {}
        starts: list[tuple[tuple[str, ...], float]] = []
        nexts: list[tuple[tuple[str, ...], float]] = []
        for topic in self.topics.list():
            sums = dict.fromkeys((k for k, *_ in self._STATS), 0.0)
            for i, plog in enumerate(topic.logs):
                if plog.closed:
                    continue
                try:
                    st = partition_stats(plog)
                    b = partition_bounds(plog)
                except TieredLogError:
                    continue
                for k in sums:
                    sums[k] += st.get(k, 0.0)
                starts.append(((topic.name, str(i)), float(b.log_start_offset)))
                nexts.append(((topic.name, str(i)), float(b.next_offset)))
            per_topic[topic.name] = sums
        out = [
            Family(
                name,
                kind,
                help,
                ("topic",),
                tuple(((t,), sums[key]) for t, sums in sorted(per_topic.items())),
            )
            for key, name, kind, help in self._STATS
        ]
        out.append(
            Family(
                "tiered_log_partition_log_start_offset",
                "gauge",
                "First offset of the partition (either tier).",
                ("topic", "partition"),
                tuple(starts),
            )
        )
        out.append(
            Family(
                "tiered_log_partition_next_offset",
                "gauge",
                "Offset the next append to the partition gets.",
                ("topic", "partition"),
                tuple(nexts),
            )
        )
        return out

    def watch_cluster(self, node: Any) -> None:
        """Export the replication state of the partitions ``node`` (a
        :class:`~tiered_log.cluster.node.ClusterNode`) leads: per replica its lag in
        offsets and bytes and whether it is in sync; per partition its high watermark."""

        def collect() -> Iterable[Family]:
            lag: list[tuple[tuple[str, ...], float]] = []
            lag_bytes: list[tuple[tuple[str, ...], float]] = []
            in_sync: list[tuple[tuple[str, ...], float]] = []
            resets: list[tuple[tuple[str, ...], float]] = []
            hws: list[tuple[tuple[str, ...], float]] = []
            for part in node.replication():
                key = (part["topic"], str(part["partition"]))
                hws.append((key, float(part["high_watermark"])))
                for r in part["replicas"]:
                    rk = (*key, str(r["node_id"]))
                    lag.append((rk, float(r["lag_offsets"])))
                    resets.append((rk, float(r.get("resets", 0))))
                    if r.get("lag_bytes") is not None:
                        lag_bytes.append((rk, float(r["lag_bytes"])))
                    in_sync.append((rk, 1.0 if r["state"] in ("leader", "in_sync") else 0.0))
            labels = ("topic", "partition", "replica")
            return [
                Family(
                    "tiered_log_replica_lag_offsets",
                    "gauge",
                    "Offsets a replica is "
                    "behind its leader's log end (led partitions of this node).",
                    labels,
                    tuple(lag),
                ),
                Family(
                    "tiered_log_replica_lag_bytes",
                    "gauge",
                    "Bytes of the leader's "
                    "local log a replica still has to copy (led partitions of this node).",
                    labels,
                    tuple(lag_bytes),
                ),
                Family(
                    "tiered_log_replica_in_sync",
                    "gauge",
                    "1 when the replica is in "
                    "the partition's in-sync replicas (or leads it), else 0.",
                    labels,
                    tuple(in_sync),
                ),
                Family(
                    "tiered_log_replica_resets",
                    "gauge",
                    "How often this leader sent the replica back to the remote end in its "
                    "epoch (a rebuild: once; more: it cannot keep up with local retention).",
                    labels,
                    tuple(resets),
                ),
                Family(
                    "tiered_log_partition_high_watermark",
                    "gauge",
                    "One past the last committed record of a partition this node leads.",
                    ("topic", "partition"),
                    tuple(hws),
                ),
            ]

        self.registry.add_collector(collect)

    def watch_loop(self, watchdog: LoopWatchdog) -> None:
        """Export the event loop's watchdog figures (see
        :mod:`~tiered_log.service.loop_watchdog`)."""

        def collect() -> Iterable[Family]:
            return [
                Family(
                    "tiered_log_event_loop_lag_max_seconds",
                    "gauge",
                    "The longest the event loop took to run a marker posted to it, since "
                    "the start.",
                    (),
                    (((), watchdog.lag_max_s()),),
                ),
                Family(
                    "tiered_log_event_loop_stalls_total",
                    "counter",
                    "Times the event loop was late past the watchdog's threshold while "
                    "blocked in a call (not waiting for a CPU); each logged with its stack.",
                    (),
                    (((), float(watchdog.stalls)),),
                ),
            ]

        self.registry.add_collector(collect)

    def forget_topic(self, name: str) -> None:
        self.registry.remove_label_value("topic", name)


__all__ = ["ServiceMetrics"]
