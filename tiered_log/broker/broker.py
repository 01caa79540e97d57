"""The broker: a partition's produce, a consumer's fetch and a follower's fetch, as every
protocol front end awaits them (Kafka's ``ReplicaManager``). The HTTP routes
(:mod:`tiered_log.service.routes`) and the Kafka listener (:mod:`tiered_log.kafka`) only
decode a request, await a :class:`Broker` method and encode the answer.

- :meth:`Broker.produce` (or :meth:`~Broker.produce_target` then :meth:`~Broker.append`,
  for a front end that checks leadership before it reads a body): leadership, the
  default ``acks`` and ``min_insync_replicas``; the parse step, the append and the high
  watermark's move (which may write its checkpoint file) in ONE call on the append
  executor; then, for ``acks=all``, parked on the partition until the high watermark
  passes the records; the metrics; the wake-ups.
- :meth:`Broker.fetch`: a consumer's read (in a cluster only from the leader, below the
  high watermark), parked at the end of the log for up to ``wait_ms``.
- :meth:`Broker.replica_fetch`: a follower's fetch (:mod:`tiered_log.cluster.protocol`),
  parked at the leader's log end for up to its ``wait_ms``.
- :meth:`Broker.delete_records`: a partition's log start moved up (Kafka's
  DeleteRecords), answered once the ISR's followers have it.

Where requests wait: :mod:`~tiered_log.broker.parking` (one mechanism, keyed by
partition: the high watermark moved, the log end moved, a remote chunk is ready). A read
of an archived offset whose chunk is not fetched yet does not hold a thread while the
bucket answers: the read runs under
:func:`~tiered_log.remote.fetch_wait.parked_reads`, gives back the fetch's future, the
request parks on it (at most ``fetch_max_wait_ms``, quota waits aside) and reads again.

Executors: the broker owns two thread pools, so that no blocking call runs on the event
loop and reads cannot starve appends: appends (parse, append, fsync, and the high
watermark's move a lone ISR member makes, with its checkpoint) and reads (the local
tier, cached chunks, the leader's answer to a follower, which records the follower's
log end and so is where a cluster's high watermark moves and its checkpoint is
written). Calls into the cluster node that take its lock run there too.

Concurrency: the coroutines run on the loop that serves the app (:meth:`Broker.start`
binds it); the blocking work goes to the executors. Invariant kept: an ``acks=all``
answer comes only once every in-sync replica has the records (the high watermark passed
them), or is an error.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from ..config import Settings
from ..errors import LogClosedError, ShuttingDownError, TopicNotFoundError
from ..remote.fetch_wait import FetchPending, parked_reads
from .append import Appended, Parse, parse_and_append
from .mount import MountedTopics
from .parking import Parking, await_commit, park_on, poll
from .topics import PartitionLog, TopicManager

if TYPE_CHECKING:  # a single node never loads the cluster package (nor its etcd client)
    from ..cluster.node import ClusterNode
    from ..cluster.protocol import ReplicaAnswer, ReplicaFetch
    from ..cluster.replica import LeaderReplication
    from ..service.service_metrics import ServiceMetrics

T = TypeVar("T")
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


def _pool_size() -> int:
    return max(4, (os.cpu_count() or 1) + 2)


class Broker:
    """The broker of one server (see the module docstring). One per app."""

    def __init__(self, settings: Settings, topics: TopicManager, metrics: ServiceMetrics) -> None:
        self.settings = settings
        self.topics = topics
        self.metrics = metrics
        self.parking = Parking()
        self.cluster: ClusterNode | None = None
        """This node's part in a cluster (None: a single node)."""
        self.stopping: asyncio.Event | None = None
        self._appends = ThreadPoolExecutor(_pool_size(), thread_name_prefix="tiered-log-append")
        self._reads = ThreadPoolExecutor(_pool_size(), thread_name_prefix="tiered-log-read")
        if isinstance(topics, MountedTopics):  # reads parked at the end wake when it moves
            hw = self.parking.hw
            topics.on_advance = lambda topic, partition: hw.notify_threadsafe((topic, partition))

    # ---- life ---------------------------------------------------------------------------

    def start(self) -> None:
        """Bind the running loop (the app's lifespan, on the loop)."""
        self.stopping = asyncio.Event()
        self.parking.bind(asyncio.get_running_loop())

    def join_cluster(self, node: ClusterNode) -> None:
        """Serve as ``node``'s broker: consumers and ``acks=all`` produces parked on a
        partition wake when its high watermark moves; every request parked on it (the
        followers' fetches too) when this node's leadership of it ends (from any
        thread)."""
        self.cluster = node
        hw, end = self.parking.hw, self.parking.end

        def leadership_ended(topic: str, partition: int) -> None:
            hw.notify_threadsafe((topic, partition))
            end.notify_threadsafe((topic, partition))

        node.on_commit = lambda topic, partition: hw.notify_threadsafe((topic, partition))
        node.on_leadership_end = leadership_ended

    @property
    def is_stopping(self) -> bool:
        return self.stopping is not None and self.stopping.is_set()

    def begin_shutdown(self) -> None:
        """Mark the shutdown and wake every parked request (loop thread)."""
        if self.stopping is not None:
            self.stopping.set()
        self.parking.notify_all()

    def close(self) -> None:
        """Stop the executors once their calls are done (after the last request)."""
        self._appends.shutdown(wait=True)
        self._reads.shutdown(wait=True)

    # ---- calls off the loop -------------------------------------------------------------

    async def _call(
        self, pool: ThreadPoolExecutor, topic: str, fn: Callable[..., T], *args: Any
    ) -> T:
        """``fn(*args)`` on ``pool``; a log closed under the call is 404 (its topic was
        deleted) or 503 (the server is stopping)."""
        try:
            return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)
        except LogClosedError:
            if self.is_stopping or self.topics.closed:
                raise ShuttingDownError("the service is shutting down") from None
            if not self.topics.exists(topic):
                raise TopicNotFoundError(f"topic {topic!r} does not exist") from None
            raise

    async def read(self, topic: str, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` (a read of a partition's log) on the read executor; a chunk of
        the remote tier not fetched yet parks the request on its fetch (no thread waits
        for the bucket) and the read runs again once it is in. A chunk asked for again
        after its fetch was waited for (a cache too small to keep it until the read
        comes back) is read waiting in the thread, as before parking, so a read always
        ends."""
        waited: set[str] = set()
        parked = True
        while True:
            try:
                if not parked:
                    return await self._call(self._reads, topic, fn, *args)
                return await self._call(self._reads, topic, _parked, fn, *args)
            except FetchPending as pending:
                if pending.what in waited:
                    parked = False
                    continue
                waited.add(pending.what)
                await _await_fetch(pending)

    # ---- the partitions -----------------------------------------------------------------

    async def partition(self, topic: str, partition: int) -> PartitionLog:
        """The open log of a partition (TopicNotFoundError if there is none). In a
        cluster a topic created a moment ago on another node may not be applied here
        yet: on a miss this node reads etcd's metadata once (off the loop) and looks
        again."""
        try:
            return self.topics.partition(topic, partition)
        except TopicNotFoundError:
            if self.cluster is None:
                raise
        await asyncio.to_thread(self.cluster.refresh)
        return self.topics.partition(topic, partition)

    # ---- produce --------------------------------------------------------------------------

    async def produce_target(self, topic: str, partition: int, acks: Acks | None) -> ProduceTarget:
        """The log a produce appends to, after the cluster's checks: NotLeaderError when
        this node does not lead the partition; ``acks`` None defaults to ``all`` when the
        partition has replicas; ``all`` raises NotEnoughReplicasError when the ISR is
        below ``min_insync_replicas``. TopicNotFoundError for no such partition;
        ReadOnlyError on a read-only mount."""
        plog = await self.partition(topic, partition)
        self.topics.check_writable(f"cannot produce to {topic}/{partition}")
        leader = None
        if self.cluster is not None:  # only the leader appends; acks=all checks the ISR first
            leader = self.cluster.leader_of(topic, partition)
            if acks is None:
                acks = "all" if len(leader.replicas) > 1 else "1"
            if acks == "all":
                leader.check_enough_replicas()
        return ProduceTarget(topic, partition, plog, leader, acks)

    async def append(
        self, target: ProduceTarget, parse: Parse, *args: Any, timeout_ms: int | None = None
    ) -> Appended:
        """``parse(*args)``, the append and (a leader) the high watermark's move in one
        call on the append executor, then (``acks=all``) parked until the high watermark
        passes the records (ReplicationTimeoutError after ``replication_timeout_ms``, or
        the request's own ``timeout_ms`` when shorter); counts the metrics and wakes the
        partition's long polls. The parse step's errors propagate with nothing
        appended."""
        topic, partition = target.topic, target.partition
        key = (topic, partition)
        node, leader = self.cluster, target.leader
        limit = self.topics.get(topic).meta.config.max_message_bytes
        done = await self._call(
            self._appends, topic, _append, target.plog, node, topic, partition, parse, args, limit
        )
        if node is not None and leader is not None:
            self.parking.end.notify(key)  # the followers' parked fetches
            if target.acks == "all":
                limit = self.settings.replication_timeout_ms
                if timeout_ms is not None and timeout_ms > 0:
                    limit = min(limit, timeout_ms)
                timeout = limit / 1000
                last = done.last
                if not await await_commit(
                    self.parking.hw, key, lambda: leader.committed(last), timeout
                ):
                    raise leader.timeout_error(last, timeout)
        m = self.metrics
        m.append_requests.inc(topic)
        m.append_records.inc(topic, amount=done.count)
        m.append_bytes.inc(topic, amount=done.payload_bytes)
        if node is None:  # a cluster's consumers wake when the high watermark moves
            self.parking.hw.notify(key)
        return done

    async def produce(
        self,
        topic: str,
        partition: int,
        parse: Parse,
        *args: Any,
        acks: Acks | None = None,
        timeout_ms: int | None = None,
    ) -> Appended:
        """:meth:`produce_target` then :meth:`append`: the records ``parse(*args)``
        gives, appended to the partition with ``acks``."""
        target = await self.produce_target(topic, partition, acks)
        return await self.append(target, parse, *args, timeout_ms=timeout_ms)

    # ---- a consumer's fetch ------------------------------------------------------------------

    async def fetch_log(self, topic: str, partition: int) -> PartitionLog:
        """The log a consumer's fetch reads: TopicNotFoundError for no such partition;
        in a cluster NotLeaderError unless this node leads it (consumers read the
        leader)."""
        plog = await self.partition(topic, partition)
        if self.cluster is not None:
            self.cluster.leader_of(topic, partition)
        return plog

    async def delete_records(
        self, topic: str, partition: int, before: int, timeout_s: float = 5.0
    ) -> int:
        """Kafka's DeleteRecords (and HTTP's delete-records): at the partition's leader
        (NotLeaderError elsewhere), move its log start up to ``before`` (-1: the high
        watermark; see :meth:`TieredLog.delete_records
        <tiered_log.partition.log.TieredLog.delete_records>`) on the append executor,
        then, in a cluster, wait (up to ``timeout_s``, without a thread) until every
        follower in the ISR has fetched twice since: it applied the answer that carried
        the new start (a follower sends its next fetch only once it applied the last
        one). Returns the log start then (Kafka's low watermark)."""
        plog = await self.partition(topic, partition)
        self.topics.check_writable(f"cannot delete records of {topic}/{partition}")
        rep = self.cluster.leader_of(topic, partition) if self.cluster is not None else None
        offset = before if before >= 0 else plog.high_watermark
        start: int = await self._call(self._appends, topic, plog.delete_records, offset)
        if rep is not None:
            want = {r: n + 2 for r, n in rep.follower_fetches().items()}
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout_s
            while loop.time() < deadline:
                now = rep.follower_fetches()  # one out of the ISR is not waited for
                if all(now.get(r, n) >= n for r, n in want.items()):
                    break
                await asyncio.sleep(0.02)
        return start

    def read_cap(self, plog: PartitionLog) -> int | None:
        """What a consumer may read up to, looked at for each read (a long poll wakes
        when it moves): the high watermark in a cluster, None (the log's end) on a single
        node."""
        return plog.high_watermark if self.cluster is not None else None

    async def fetch(
        self,
        topic: str,
        partition: int,
        read: Callable[[PartitionLog, int | None], T],
        empty: Callable[[T], bool],
        wait_ms: int,
    ) -> T:
        """A consumer's fetch of one partition: ``read(log, upto)`` (blocking; ``upto``
        the read cap) off the loop; while ``empty``, parked until the partition's high
        watermark (a single node: its end) moves, this node's leadership of it ends, the
        shutdown or ``wait_ms`` passed, and read again. In a cluster every read is a
        leader's: one that finds the leadership over raises NotLeaderError."""
        plog = await self.fetch_log(topic, partition)
        node = self.cluster

        async def read_now() -> T:
            if node is not None:
                node.leader_of(topic, partition)
            return await self.read(topic, read, plog, self.read_cap(plog))

        return await poll(
            self.parking.hw,
            self.stopping,
            [(topic, partition)],
            wait_ms,
            read_now,
            lambda result: not empty(result),
        )

    async def fetch_many(
        self,
        partitions: list[tuple[str, int]],
        read: Callable[[], Awaitable[T]],
        enough: Callable[[T], bool],
        release: Callable[[T], None],
        wait_ms: int,
    ) -> T:
        """A consumer's fetch of several partitions at once (Kafka's Fetch with its
        ``min_bytes``): ``read()`` (a coroutine that reads each partition through
        :meth:`fetch_log` and :meth:`read`); until its result is ``enough``, parked until
        the high watermark of any of ``partitions`` moves, the shutdown or ``wait_ms``
        passed, and read again (the result not sent given to ``release``)."""
        return await poll(
            self.parking.hw, self.stopping, partitions, wait_ms, read, enough, release
        )

    # ---- a follower's fetch ------------------------------------------------------------------

    async def replica_fetch(self, topic: str, partition: int, req: ReplicaFetch) -> ReplicaAnswer:
        """A follower's fetch (see :mod:`tiered_log.cluster.protocol`), answered by the
        node off the loop; at the leader's log end parked up to ``req.wait_ms`` on the
        ``end`` channel: woken by an append, or by the end of this node's leadership
        (read again, it then fails with NotLeaderError or FencedEpochError)."""
        node = self.cluster
        assert node is not None

        async def read() -> ReplicaAnswer:
            return await self.read(topic, node.replica_fetch, topic, partition, req)

        return await poll(
            self.parking.end,
            self.stopping,
            [(topic, partition)],
            req.wait_ms,
            read,
            lambda ans: not ans.waits,
        )


def _append(
    plog: PartitionLog,
    node: ClusterNode | None,
    topic: str,
    partition: int,
    parse: Parse,
    args: tuple[Any, ...],
    max_message_bytes: int,
) -> Appended:
    """The append executor's call: parse and append (batches up to the topic's
    ``max_message_bytes``), then (a leader) move the high watermark, which may write its
    checkpoint file."""
    done = parse_and_append(plog, parse, *args, max_message_bytes=max_message_bytes)
    if node is not None:
        node.appended(topic, partition)
    return done


def _parked(fn: Callable[..., T], *args: Any) -> T:
    with parked_reads():
        return fn(*args)


async def _await_fetch(pending: FetchPending) -> None:
    """Park until the fetch ``pending`` names is done: at most its ``max_wait_ms`` of
    time during which the fetch quota held nothing back (as
    :func:`~tiered_log.remote.fetch_wait.wait_for_fetch`), then RemoteTimeoutError."""
    left = pending.max_wait_ms / 1000
    loop = asyncio.get_running_loop()
    while True:
        held = pending.throttled()
        t0 = loop.time()
        if await park_on(pending.future, min(left, 0.1)):
            return
        if not (held or pending.throttled()):
            left -= loop.time() - t0
        if left <= 0:
            raise pending.timeout_error()


__all__ = ["Acks", "Broker", "ProduceTarget"]
