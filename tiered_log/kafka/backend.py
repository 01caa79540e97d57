"""The Kafka listener's calls into the partitions that need putting in its terms.

:class:`Backend` answers in the listener's terms (topic and partition metadata, an
append of a Produce request's partition, a page of Kafka batches, an offset lookup);
the handlers await the broker directly where its calls need no translation (the log a
consumer reads, a fetch's long poll, a follower's fetch). It reaches the logs only
through what the HTTP API uses: the topic manager of
:mod:`tiered_log.broker.topics`, the broker (:class:`tiered_log.broker.Broker`:
leadership, ``acks``, ``min_insync_replicas``, the high-watermark wait, metrics,
wake-ups, its executors) and the cluster node's view.
Errors are the library's (:mod:`tiered_log.errors`); the handlers turn them into Kafka
codes (:mod:`tiered_log.kafka.errors`).

The log stores Kafka's record batches (magic 2) themselves, so the data path is a
pass-through: a Produce's partition data is verified (:func:`produce_batches`: framing,
CRC-32C, the records parse, compressed ones decompressed to check them) and appended as
sent, compression included, only each batch's base offset (and partition leader epoch)
written in place; a Fetch answers the stored batches as they lie in the segment files
and chunk cache (:class:`~tiered_log.local.ranges.FetchRanges`, sent with ``sendfile``
by the connection), never decoded or re-encoded.

Concurrency: coroutines and methods of the event loop; every call that can block (an
append and its fsync, a read of either tier) runs on the broker's executors, creating a
topic and etcd calls in worker threads.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import struct
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..broker.topics import (
    PartitionBounds,
    PartitionLog,
    partition_bounds,
    validate_topic_name,
)
from ..errors import (
    CorruptRecordError,
    InvalidArgumentError,
    RecordTooLargeError,
    TieredLogError,
    TopicExistsError,
)
from ..format.kafka.layout import MAX_TIMESTAMP_AT, PRODUCER_ID_AT
from ..format.records import EncodedBatch, receive_batches
from ..local.ranges import FetchRanges
from ..service.state import ServiceState
from ..service.wire import CreateTopicRequest
from .errors import InvalidRecordError

SINGLE_NODE_EPOCH = 0
"""The leader epoch of every partition of a single node (its Metadata answers it)."""

MAX_FETCH_RECORDS = 1_000_000
"""A page's record bound (the byte bound is what limits a Kafka fetch)."""


@dataclass(frozen=True, slots=True)
class Broker:
    """A node as Metadata lists it."""

    node_id: int
    host: str
    port: int


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition as Metadata lists it (leader -1: none now)."""

    index: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A topic as Metadata lists it; ``error``: why it is not listed (then no partitions)."""

    name: str
    topic_id: uuid.UUID
    partitions: tuple[PartitionInfo, ...]
    error: TieredLogError | None = None


@dataclass(frozen=True, slots=True)
class Page:
    """A fetch answer's partition: the stored Kafka batches (where they lie, sent from
    the files; ``b""`` when none) and the partition's bounds. ``close`` lets go of the
    files of a page that is not sent."""

    records: FetchRanges | bytes
    high_watermark: int
    log_start_offset: int
    count: int

    @property
    def size(self) -> int:
        """Bytes of the batches."""
        r = self.records
        return r.size if isinstance(r, FetchRanges) else len(r)

    def close(self) -> None:
        if isinstance(self.records, FetchRanges):
            self.records.close()


_I64 = struct.Struct(">q")


class Listed(NamedTuple):
    """A ListOffsets answer of one partition (-1 each: none)."""

    offset: int
    timestamp: int
    leader_epoch: int


class Produced(NamedTuple):
    """What a Produce's partition got: its first offset, and the log's clock its batches
    were stamped with on a LogAppendTime topic (-1 on a CreateTime one)."""

    base_offset: int
    log_append_time: int


def produce_batches(data: bytes | bytearray | memoryview, append_threshold: int) -> EncodedBatch:
    """The parse step of a Kafka Produce's partition data: its batches, each verified
    (:func:`~tiered_log.format.records.receive_batches`: framing, CRC-32C, the records
    parse, decompressed when compressed) and kept as sent, to append in this order (the
    log writes their base offsets in place).

    CorruptRecordError (CORRUPT_MESSAGE) for a batch that fails its checks;
    RecordTooLargeError (MESSAGE_TOO_LARGE) for a value over ``append_threshold``;
    InvalidRecordError (INVALID_RECORD) for what the log does not take: a
    transactional or control batch, a batch of an idempotent producer (a producer id)
    beside other batches (Kafka takes one batch per partition; the log checks an
    idempotent batch's sequence when it appends it), a timestamp out of range, no
    records. The
    whole partition's data is refused: nothing of it is appended. Pure CPU work: the
    broker runs it on its append executor."""
    if not data:
        raise InvalidRecordError("the partition's data holds no records")
    try:
        got = receive_batches(data, append_threshold, in_place=isinstance(data, bytearray))
    except (CorruptRecordError, RecordTooLargeError):
        raise
    except InvalidArgumentError as exc:
        raise InvalidRecordError(exc.message) from None
    if len(got.batches) > 1:
        buf = got.data
        for b in got.batches:
            (producer_id,) = _I64.unpack_from(buf, b.position + PRODUCER_ID_AT)
            if producer_id >= 0:
                raise InvalidRecordError(
                    f"{len(got.batches)} batches beside one of producer id {producer_id}: "
                    "an idempotent producer's batch must come alone"
                )
    if not got.count:
        raise InvalidRecordError("the partition's data holds no records")
    return got


def topic_uuid(topic_id: str) -> uuid.UUID:
    """The Kafka topic id (16 bytes) of a topic's id (32 hex digits)."""
    try:
        return uuid.UUID(hex=topic_id)
    except ValueError:
        return uuid.uuid5(uuid.NAMESPACE_OID, topic_id)


LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
"""ListOffsets v7+ (KIP-734): the record with the largest timestamp."""
EARLIEST_LOCAL_TIMESTAMP = -4
"""ListOffsets v8+ (KIP-405): the local tier's first offset."""
LATEST_TIERED_TIMESTAMP = -5
"""ListOffsets v9+ (KIP-1005): the last offset archived in the remote tier."""

_SCAN_RECORDS = 10_000
_SCAN_BYTES = 4 << 20


def max_timestamp_offset(plog: PartitionLog) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the first record holding the largest timestamp of the
    log, either tier (None: no record), as Kafka answers ListOffsets -3: the segment
    with the largest maximum timestamp (the earliest of equals) is found from the
    segments' metadata, then read from its start up to that record. Blocking (reads
    a segment, maybe from the bucket): the broker's read executor."""
    start = plog.log_start_offset
    best: tuple[int, int, int] | None = None  # (max timestamp, first offset, end)
    _, _, archived = plog.remote_segments(start)
    local = plog.local_segments()
    local_start = local[0].base_offset if local else plog.next_offset
    extents = [
        (int(s["max_timestamp"]), max(int(s["base_offset"]), start), int(s["next_offset"]))
        for s in archived
        if int(s["base_offset"]) < local_start
    ]
    extents += [(s.max_timestamp, s.base_offset, s.next_offset) for s in local]
    for ts, first, end in extents:
        if end > first and ts >= 0 and (best is None or ts > best[0]):
            best = (ts, first, end)
    if best is None:
        return None
    ts, offset, end = best
    while offset < end:
        recs = plog.read_range(offset, _SCAN_RECORDS, _SCAN_BYTES)
        if not recs:
            break
        for r in recs:
            if r.offset >= end:
                return None
            if r.timestamp == ts:
                return r.offset, ts
        offset = recs[-1].offset + 1
    return None


class Backend:
    """The partitions, as the Kafka listener sees them (see the module docstring).

    ``advertised``: this node's Kafka address (host, port) for Metadata. Event-loop
    thread only.
    """

    def __init__(self, state: ServiceState, advertised: tuple[str, int]) -> None:
        self.state = state
        self.advertised = advertised
        self.node_id = state.settings.node_id if state.settings.node_id is not None else 0
        self.cluster_id = state.settings.cluster_name
        self._last_brokers: list[Broker] = []

    @property
    def auto_create(self) -> bool:
        """Whether a missing topic is created (never on a read-only mount)."""
        settings = self.state.settings
        return settings.kafka_auto_create_topics and not settings.read_only_remote

    # ---- metadata ------------------------------------------------------------------------

    async def brokers(self) -> list[Broker]:
        """The brokers a client may connect to: this node, and in a cluster every live
        node with a Kafka listener (from their membership records in etcd; the last
        list read while etcd cannot be reached)."""
        host, port = self.advertised
        me = Broker(self.node_id, host, port)
        cluster = self.state.cluster
        if cluster is None:
            return [me]
        try:
            addresses = await asyncio.to_thread(cluster.membership.kafka_addresses)
        except TieredLogError:
            return self._last_brokers or [me]
        out = {me.node_id: me}
        for node_id, addr in addresses.items():
            h, _, p = addr.rpartition(":")
            if node_id != me.node_id and h and p.isdigit():
                out[node_id] = Broker(node_id, h.strip("[]"), int(p))
        self._last_brokers = [out[n] for n in sorted(out)]
        return self._last_brokers

    def controller_id(self) -> int:
        return self.node_id

    async def topics(self, names: Iterable[str] | None, auto_create: bool) -> list[TopicInfo]:
        """Metadata of ``names`` (None: every topic). A missing topic is created with the
        service's default partition count when ``auto_create`` and the setting allow it,
        else listed with TopicNotFoundError; a bad name with InvalidTopicNameError."""
        manager = self.state.topics
        if names is None:
            return await asyncio.to_thread(self._infos, [t.name for t in manager.list()])
        out = []
        for name in names:
            try:
                validate_topic_name(name)
                if not manager.exists(name):
                    if auto_create and self.auto_create:
                        await self._create(name)
                    else:
                        await self.state.broker.partition(name, 0)  # a cluster looks again
            except TieredLogError as exc:
                out.append(TopicInfo(name, uuid.UUID(int=0), (), exc))
                continue
            out.append(TopicInfo(name, uuid.UUID(int=0), ()))
        wanted = [t.name for t in out if t.error is None]
        found = {t.name: t for t in await asyncio.to_thread(self._infos, wanted)}
        return [found.get(t.name, t) for t in out]

    def _infos(self, names: list[str]) -> list[TopicInfo]:
        """The metadata of ``names`` (in a worker thread: a cluster's partition states
        are read under the node's lock, which its poll thread may hold across I/O)."""
        out = []
        for name in names:
            try:
                out.append(self._info(name))
            except TieredLogError as exc:  # deleted meanwhile
                out.append(TopicInfo(name, uuid.UUID(int=0), (), exc))
        return out

    async def _create(self, name: str) -> None:
        await self.create_topic(name, CreateTopicRequest.model_fields["partitions"].default)

    async def create_topic(
        self,
        name: str,
        partitions: int,
        overrides: dict[str, Any] | None = None,
        replication_factor: int | None = None,
        min_insync_replicas: int | None = None,
        *,
        exist_ok: bool = True,
    ) -> None:
        """Create a topic with the service's defaults and ``overrides`` (TopicConfig
        fields), as ``POST /v1/topics`` does: in a cluster through its metadata store
        (``replication_factor``/``min_insync_replicas`` None: the cluster's defaults),
        on a single node in its topic manager. A topic created meanwhile is no error
        when ``exist_ok`` (auto-creation), else TopicExistsError."""
        state = self.state
        with contextlib.suppress(*((TopicExistsError,) if exist_ok else ())):
            if state.cluster is not None:
                from ..service.clustering import create_cluster_topic

                await asyncio.to_thread(
                    create_cluster_topic,
                    state.cluster,
                    state.settings,
                    name,
                    partitions,
                    overrides or {},
                    replication_factor,
                    min_insync_replicas,
                )
            else:
                await asyncio.to_thread(state.topics.create, name, partitions, overrides)

    def _info(self, name: str) -> TopicInfo:
        topic = self.state.topics.get(name)
        parts = []
        for p in range(topic.meta.partitions):
            parts.append(self._partition_info(name, p))
        return TopicInfo(name, topic_uuid(topic.meta.topic_id), tuple(parts))

    def _partition_info(self, topic: str, partition: int) -> PartitionInfo:
        cluster = self.state.cluster
        if cluster is None:
            me = (self.node_id,)
            return PartitionInfo(partition, self.node_id, SINGLE_NODE_EPOCH, me, me)
        st = cluster.partition_state(topic, partition)
        if st is None:
            return PartitionInfo(partition, -1, -1, (), ())
        leader = st.leader if st.leader is not None else -1
        return PartitionInfo(partition, leader, st.leader_epoch, st.replicas, st.isr)

    def partition_count(self, topic: str) -> int:
        """Partitions of ``topic`` (TopicNotFoundError)."""
        return self.state.topics.get(topic).meta.partitions

    # ---- produce -------------------------------------------------------------------------

    async def produce(
        self,
        topic: str,
        partition: int,
        data: bytes | bytearray | memoryview,
        acks: int,
        timeout_ms: int,
    ) -> Produced:
        """Append the Kafka batches ``data`` as sent (:func:`produce_batches`; acks 0
        and 1: once the leader has them; -1: once every in-sync replica has, waiting at
        most the request's ``timeout_ms``). Returns the first offset assigned and, for a
        LogAppendTime topic, the log's clock the batches were stamped with. Nothing is
        appended when the batches are refused."""
        topics = self.state.topics
        parsed: list[EncodedBatch] = []

        def parse(body: bytes | bytearray | memoryview) -> EncodedBatch:
            # On the append thread, after the broker found the partition (in a cluster it
            # learns of a topic created elsewhere first): the topic's threshold is known.
            got = produce_batches(body, topics.get(topic).meta.config.append_threshold)
            parsed.append(got)
            return got

        done = await self.state.broker.produce(
            topic,
            partition,
            parse,
            data,
            acks="all" if acks == -1 else "1",
            timeout_ms=timeout_ms,
        )
        config = topics.get(topic).meta.config
        stamped = -1
        if config.message_timestamp_type == "LogAppendTime" and parsed:
            # The log stamps the batches in place (their buffer is the parse step's own
            # copy): the first one's maxTimestamp is the append time.
            got = parsed[0]
            (stamped,) = _I64.unpack_from(got.data, got.batches[0].position + MAX_TIMESTAMP_AT)
        return Produced(done.first, stamped)

    def log_start(self, topic: str, partition: int) -> int:
        """The partition's log start (-1 when unknown)."""
        try:
            return self.state.topics.partition(topic, partition).log_start_offset
        except TieredLogError:
            return -1

    # ---- fetch ---------------------------------------------------------------------------

    async def read(
        self, topic: str, plog: PartitionLog, offset: int, max_bytes: int, *, ranges: bool = True
    ) -> Page:
        """The stored Kafka batches from the one holding ``offset`` (either tier), about
        ``max_bytes`` (at least one batch when there is a record at ``offset``), verified;
        empty at the end of what a consumer may read. OffsetOutOfRangeError outside the
        log. With ``ranges`` (a Fetch answer) as places in files, sent from there;
        without, their bytes (a reader here, the consumer offsets' replay)."""
        upto = self.state.broker.read_cap(plog)

        def work() -> Page:
            b: PartitionBounds
            if not ranges:
                data = plog.read_batches(offset, MAX_FETCH_RECORDS, max_bytes, upto=upto)
                b = partition_bounds(plog)
                return Page(bytes(data.data), b.high_watermark, b.log_start_offset, data.count)
            got = plog.read_batch_ranges(offset, MAX_FETCH_RECORDS, max_bytes, upto=upto)
            try:
                b = partition_bounds(plog)
            except BaseException:
                got.close()  # it holds the files open
                raise
            hw = b.high_watermark
            if not got.size:
                got.close()
                return Page(b"", hw, b.log_start_offset, 0)
            return Page(got, hw, b.log_start_offset, got.count)

        return await self.state.broker.read(topic, work)

    def count_fetch(self, topic: str, page: Page) -> None:
        """The metrics of one partition's part of a fetch answer (once per answer, not
        per read of a long poll)."""
        m = self.state.metrics
        m.fetch_requests.inc(topic, "kafka")
        m.fetch_records.inc(topic, amount=page.count)
        m.fetch_bytes.inc(topic, amount=page.size)

    def bounds(self, plog: PartitionLog) -> Page:
        """An empty page with the partition's bounds now (no I/O)."""
        b = plog.bounds()
        hw = b.high_watermark if self.state.cluster is not None else b.next_offset
        return Page(b"", hw, b.log_start_offset, 0)

    # ---- offsets -------------------------------------------------------------------------

    async def list_offset(self, topic: str, partition: int, timestamp: int) -> Listed:
        """``(offset, timestamp, leader epoch)`` for a ListOffsets query: -1 latest (the
        high watermark), -2 earliest (the log start, either tier), -3 the record with
        the largest timestamp (:func:`max_timestamp_offset`), -4 the local tier's first
        offset, -5 the last offset archived in the remote tier (-1: none is), else the
        first offset whose timestamp is at or after ``timestamp`` in either tier
        (``(-1, -1, -1)``: none). An offset a consumer may not read yet (at or above the
        high watermark) is none, as in Kafka. The epoch is :meth:`leader_epoch_at`'s."""
        broker = self.state.broker
        plog = await broker.fetch_log(topic, partition)

        def work() -> Listed:
            offset, ts = find()
            if offset < 0:
                return Listed(-1, -1, -1)
            at = offset if timestamp != LATEST_TIMESTAMP else None
            return Listed(offset, ts, self.leader_epoch_at(plog, at))

        def find() -> tuple[int, int]:
            if timestamp == LATEST_TIMESTAMP:
                return partition_bounds(plog).high_watermark, -1
            if timestamp == EARLIEST_TIMESTAMP:
                return partition_bounds(plog).log_start_offset, -1
            cap = broker.read_cap(plog)
            if timestamp == EARLIEST_LOCAL_TIMESTAMP:
                return partition_bounds(plog).local_start_offset, -1
            if timestamp == LATEST_TIERED_TIMESTAMP:
                remote = plog.remote_tier
                if remote is None or not remote.has_data:
                    return -1, -1
                return remote.remote_end - 1, -1
            if timestamp == MAX_TIMESTAMP:
                got = max_timestamp_offset(plog)
                if got is None or (cap is not None and got[0] >= cap):
                    return -1, -1
                return got
            found = plog.offset_for_timestamp(timestamp)
            if found is None or (cap is not None and found >= cap):
                return -1, -1
            recs = plog.read_range(found, 1, 1 << 20)
            return found, recs[0].timestamp if recs else -1

        return await broker.read(topic, work)

    def leader_epoch_at(self, plog: PartitionLog, offset: int | None) -> int:
        """The leader epoch ``offset`` was written in (None: the latest, the epoch the
        partition is led in now), from the log's leader-epoch entries, as Kafka's
        ListOffsets answers it (librdkafka checks a reset position with it); -1 when
        unknown (an offset below the first entry). A single node's logs record no
        epochs: it leads every partition in epoch 0 (what its Metadata says), so every
        offset of such a log was written in 0. Blocking (the cache's lock): a worker
        thread."""
        entries = plog.leader_epoch_entries()
        if not entries:
            return SINGLE_NODE_EPOCH if self.state.cluster is None else -1
        if offset is None:
            return entries[-1].epoch
        i = bisect.bisect_right(entries, offset, key=lambda e: e.start_offset)
        return entries[i - 1].epoch if i else -1


__all__ = [
    "SINGLE_NODE_EPOCH",
    "Backend",
    "Broker",
    "Listed",
    "Page",
    "PartitionInfo",
    "Produced",
    "TopicInfo",
    "max_timestamp_offset",
    "produce_batches",
    "topic_uuid",
]
