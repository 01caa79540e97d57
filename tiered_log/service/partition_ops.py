"""A partition's produce and fetch as every protocol front end does them: the HTTP
routes (:mod:`tiered_log.service.routes.records`) and the Kafka listener
(:mod:`tiered_log.kafka`) call these, so leadership checks, ``acks``, the high-watermark
wait, the metrics and the long-poll wake-ups are written once.

Produce is two steps, so that a front end may read its body between them (HTTP checks
leadership before it reads a body): :func:`produce_target` (the log; in a cluster the
leadership, the default ``acks`` and, for ``acks=all``, ``min_insync_replicas``) and
:func:`append_and_commit` (the parse step and append in one worker-thread call, then,
for ``acks=all``, the wait on the event loop until the high watermark passes the
records; the metrics; the consumers' and followers' wake-ups). Fetch:
:func:`fetch_target` (the log; in a cluster only the leader serves consumers) and
:func:`read_cap` (what a consumer may read up to: the high watermark in a cluster).

Concurrency: coroutines of the event loop; the blocking work goes to worker threads
(:func:`~tiered_log.service.deps.run_log_call`). Invariant kept: an ``acks=all`` answer
comes only once every in-sync replica has the records (the high watermark passed them),
or is an error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from .deps import partition_log, run_log_call
from .longpoll import await_commit
from .produce import Appended, Parse, parse_and_append
from .state import ServiceState
from .topics import PartitionLog

if TYPE_CHECKING:
    from ..cluster.replica import LeaderReplication

Acks = Literal["all", "1"]


@dataclass(frozen=True, slots=True)
class ProduceTarget:
    """Where a produce goes: the partition's log, this node's leadership of it (None on
    a single node) and the ``acks`` that apply."""

    topic: str
    partition: int
    plog: PartitionLog
    leader: LeaderReplication | None
    acks: Acks | None


async def produce_target(
    state: ServiceState, topic: str, partition: int, acks: Acks | None
) -> ProduceTarget:
    """The log a produce appends to, after the cluster's checks: NotLeaderError when
    this node does not lead the partition; ``acks`` None defaults to ``all`` when the
    partition has replicas; ``all`` raises NotEnoughReplicasError when the ISR is below
    ``min_insync_replicas``. TopicNotFoundError for no such partition."""
    plog = await partition_log(state, topic, partition)
    leader = None
    if state.cluster is not None:  # only the leader appends; acks=all checks the ISR first
        leader = state.cluster.leader_of(topic, partition)
        if acks is None:
            acks = "all" if len(leader.replicas) > 1 else "1"
        if acks == "all":
            leader.check_enough_replicas()
    return ProduceTarget(topic, partition, plog, leader, acks)


async def append_and_commit(
    state: ServiceState,
    target: ProduceTarget,
    parse: Parse,
    *args: Any,
    timeout_ms: int | None = None,
) -> Appended:
    """``parse(*args)`` and the append in one worker-thread call, then (``acks=all``)
    the wait until the high watermark passes the records (ReplicationTimeoutError after
    ``replication_timeout_ms``, or the request's own ``timeout_ms`` when shorter);
    counts the metrics and wakes the partition's long polls. The parse step's errors
    propagate with nothing appended."""
    topic, partition = target.topic, target.partition
    done = await run_log_call(state, topic, parse_and_append, target.plog, parse, *args)
    leader = target.leader
    if state.cluster is not None and leader is not None:
        state.cluster.appended(topic, partition)
        state.appends.notify((topic, partition))  # the followers' waiting fetches
        if target.acks == "all":  # waits on the loop (woken as the HW moves), not in a thread
            limit = state.settings.replication_timeout_ms
            if timeout_ms is not None and timeout_ms > 0:
                limit = min(limit, timeout_ms)
            timeout = limit / 1000
            last = done.last
            if not await await_commit(
                state.waiters, (topic, partition), lambda: leader.committed(last), timeout
            ):
                raise leader.timeout_error(last, timeout)
    m = state.metrics
    m.append_requests.inc(topic)
    m.append_records.inc(topic, amount=done.count)
    m.append_bytes.inc(topic, amount=done.payload_bytes)
    if state.cluster is None:  # a cluster's consumers wake when the high watermark moves
        state.waiters.notify((topic, partition))
    return done


async def fetch_target(state: ServiceState, topic: str, partition: int) -> PartitionLog:
    """The log a consumer's fetch reads: TopicNotFoundError for no such partition; in a
    cluster NotLeaderError unless this node leads it (consumers read the leader)."""
    plog = await partition_log(state, topic, partition)
    if state.cluster is not None:
        state.cluster.leader_of(topic, partition)
    return plog


def read_cap(state: ServiceState, plog: PartitionLog) -> int | None:
    """What a consumer may read up to, looked at for each read (a long poll wakes when
    it moves): the high watermark in a cluster, None (the log's end) on a single node."""
    return plog.high_watermark if state.cluster is not None else None


__all__ = [
    "Acks",
    "ProduceTarget",
    "append_and_commit",
    "fetch_target",
    "produce_target",
    "read_cap",
]
