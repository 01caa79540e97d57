"""Committed offsets, kept in the internal topic ``__consumer_offsets`` as Kafka keeps
them: a partitioned topic of the service's own log, replicated like every topic, so a
commit is as durable as an acknowledged record and survives a restart and, in a
cluster, the loss of the coordinator's node.

Which partition holds a group: ``abs(java_hash(group)) % partitions`` (Kafka's rule, so
the same group lands where a Kafka cluster with the same partition count puts it). The
leader of that partition is the group's coordinator: the node FindCoordinator names and
the only one that answers the group's requests (NOT_COORDINATOR elsewhere).

Records (the log's own records, key and value UTF-8 JSON)::

    commit:   key ["offset", group, topic, partition]
              value {"offset": int, "leader_epoch": int, "metadata": str, "ts": int ms,
                     "topic_id": str (the topic's id when committed; absent: unknown)}
    deletion: key ["deleted", group]                value {"deleted": true}
    one partition's offset deleted (OffsetDelete):
              key ["offset", group, topic, partition] value null (a tombstone, as Kafka's)

A partition's state is every record replayed in offset order (a later commit of a key
replaces the earlier; a deletion drops the group's offsets). A commit names the topic by
id as well: once its topic is deleted (or deleted and created again under the same name)
it is no longer served, as Kafka's coordinator drops the offsets of deleted partitions,
so a group reads a topic created again from its start. The state is rebuilt from the log
whenever this node (re)gains the partition's leadership (a new leader epoch), reading to
the log's end as Kafka's coordinator does: every acknowledged commit is in the new
leader's log (acks=all), and what else is there was written by the coordinator before.

Invariant: an OffsetCommit is answered only after its records are committed as an
``acks=all`` produce is (every in-sync replica has them), and the cache serves only what
is in the log.

Concurrency: event-loop only; the log reads and appends run in worker threads through
the service's partition operations.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from ...errors import (
    NotLeaderError,
    PartitionNotReadyError,
    TieredLogError,
    TopicNotFoundError,
)
from ...format.kafka import NewRecord, encode_batch, iter_batches
from ..backend import Backend

OFFSETS_TOPIC = "__consumer_offsets"
"""The internal topic's name (Kafka's)."""

OFFSETS_PARTITIONS = 8
"""Partitions of the internal topic when this service creates it (Kafka's default is 50;
fewer here, where a laptop runs a whole cluster). An existing topic keeps its count."""

MAX_METADATA = 4096
"""The longest commit metadata string kept (Kafka's ``offset.metadata.max.bytes``)."""

READ_BYTES = 8 << 20
"""Bytes read per step while loading a partition."""


class LoadInProgressError(PartitionNotReadyError):
    """The internal partition's high watermark has not reached its log end yet (a new
    leader): its offsets cannot be served until it has (COORDINATOR_LOAD_IN_PROGRESS)."""

    code = "coordinator_load_in_progress"


def is_internal(topic: str) -> bool:
    """Whether ``topic`` is the service's internal topic (hidden, refused to clients)."""
    return topic == OFFSETS_TOPIC


def java_hash(text: str) -> int:
    """Java's ``String.hashCode`` of ``text`` (over UTF-16 code units, as int32)."""
    h = 0
    data = text.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def partition_for(group: str, partitions: int) -> int:
    """The internal topic's partition holding ``group`` (Kafka's ``Utils.abs(hash) % n``:
    the int32 minimum maps to 0)."""
    return (java_hash(group) & 0x7FFFFFFF) % partitions


@dataclass(frozen=True, slots=True)
class Committed:
    """One committed offset of a group's partition."""

    offset: int
    leader_epoch: int
    metadata: str
    timestamp: int
    topic_id: str | None = None
    """The id of the topic committed to (None: not known, e.g. the topic was missing)."""


def commit_record(group: str, topic: str, partition: int, c: Committed) -> NewRecord:
    """The record of one commit (layout in the module docstring)."""
    key = json.dumps(["offset", group, topic, partition], separators=(",", ":"))
    fields: dict[str, object] = {
        "offset": c.offset,
        "leader_epoch": c.leader_epoch,
        "metadata": c.metadata,
        "ts": c.timestamp,
    }
    if c.topic_id is not None:
        fields["topic_id"] = c.topic_id
    value = json.dumps(fields, separators=(",", ":"))
    return NewRecord(value.encode(), key.encode(), (), c.timestamp)


def offset_tombstone(group: str, topic: str, partition: int) -> NewRecord:
    """The record that drops one partition's committed offset of ``group``."""
    key = json.dumps(["offset", group, topic, partition], separators=(",", ":"))
    return NewRecord(None, key.encode(), (), now_ms())


def deletion_record(group: str) -> NewRecord:
    """The record that drops every offset of ``group``."""
    key = json.dumps(["deleted", group], separators=(",", ":"))
    return NewRecord(b'{"deleted":true}', key.encode(), (), now_ms())


@dataclass(slots=True)
class PartitionOffsets:
    """The replayed state of one internal partition: group -> (topic, partition) ->
    Committed, as of ``epoch`` (the leader epoch it was loaded under)."""

    epoch: int
    groups: dict[str, dict[tuple[str, int], Committed]] = field(default_factory=dict)

    def apply(self, key: bytes | None, value: bytes | None) -> None:
        """Replay one record (records of another shape are skipped: the topic is ours)."""
        try:
            k = json.loads(key) if key else None
            v = json.loads(value) if value else None
        except ValueError:
            return
        if not isinstance(k, list) or not k:
            return
        if k[0] == "offset" and len(k) == 4 and isinstance(v, dict):
            _, group, topic, part = k
            topic_id = v.get("topic_id")
            self.groups.setdefault(str(group), {})[(str(topic), int(part))] = Committed(
                int(v["offset"]),
                int(v.get("leader_epoch", -1)),
                str(v.get("metadata", "")),
                int(v.get("ts", -1)),
                None if topic_id is None else str(topic_id),
            )
        elif k[0] == "offset" and len(k) == 4 and v is None:  # one offset deleted
            _, group, topic, part = k
            mine = self.groups.get(str(group))
            if mine is not None:
                mine.pop((str(topic), int(part)), None)
                if not mine:
                    del self.groups[str(group)]
        elif k[0] == "deleted" and len(k) == 2:
            self.groups.pop(str(k[1]), None)


class OffsetStore:
    """The internal topic's partitions this node leads, loaded, and the commits into
    them (see the module docstring). It reaches the partitions only through the Kafka
    listener's :class:`~tiered_log.kafka.backend.Backend`. Event-loop only."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.state = backend.state
        self._loaded: dict[int, PartitionOffsets] = {}
        self._locks: dict[int, asyncio.Lock] = {}
        self._create_lock = asyncio.Lock()

    # ---- the topic -------------------------------------------------------------------

    def partitions(self) -> int | None:
        """The internal topic's partition count (None: not created yet)."""
        try:
            return self.backend.partition_count(OFFSETS_TOPIC)
        except TieredLogError:
            return None

    async def ensure_topic(self) -> int:
        """The internal topic's partition count, creating it first when missing
        (replicated as the cluster's topics are by default)."""
        n = self.partitions()
        if n is not None:
            return n
        async with self._create_lock:
            n = self.partitions()
            if n is not None:
                return n
            await self.backend.create_topic(OFFSETS_TOPIC, OFFSETS_PARTITIONS)
            with contextlib.suppress(TieredLogError):  # a cluster node applies it meanwhile
                await self.backend.state.broker.fetch_log(OFFSETS_TOPIC, 0)
            n = self.partitions()
            if n is None:
                raise PartitionNotReadyError(f"{OFFSETS_TOPIC} is being created")
            return n

    async def partition_of(self, group: str) -> int:
        """The internal partition of ``group`` (the topic created if missing)."""
        return partition_for(group, await self.ensure_topic())

    # ---- leadership and loading --------------------------------------------------------

    def leader_node(self, partition: int) -> int | None:
        """The node leading internal ``partition`` (this node on a single node; None:
        none now). May block on the cluster node's lock: call it in a worker thread."""
        cluster = self.state.cluster
        if cluster is None:
            return self.backend.node_id
        st = cluster.partition_state(OFFSETS_TOPIC, partition)
        return None if st is None or st.leader is None else int(st.leader)

    def _epoch(self, partition: int) -> int:
        """This node's leader epoch of ``partition``; NotLeaderError when it does not
        lead it."""
        cluster = self.state.cluster
        if cluster is None:
            return 0
        return int(cluster.leader_of(OFFSETS_TOPIC, partition).leader_epoch)

    async def load(self, partition: int) -> tuple[PartitionOffsets, bool]:
        """The state of an internal partition this node leads, replayed from its log
        when not loaded under the current leader epoch; ``(state, reloaded)``.
        NotLeaderError when this node does not lead it; LoadInProgressError while a new
        leader's high watermark is below its log end."""
        epoch = self._epoch(partition)
        got = self._loaded.get(partition)
        if got is not None and got.epoch == epoch:
            return got, False
        lock = self._locks.setdefault(partition, asyncio.Lock())
        async with lock:
            epoch = self._epoch(partition)
            got = self._loaded.get(partition)
            if got is not None and got.epoch == epoch:
                return got, False
            got = await self._replay(partition, epoch)
            if self._epoch(partition) != epoch:
                raise NotLeaderError(f"{OFFSETS_TOPIC}/{partition} changed leader while loading")
            self._loaded[partition] = got
            return got, True

    async def _replay(self, partition: int, epoch: int) -> PartitionOffsets:
        """Every record of internal ``partition`` from its start to its log end."""
        be = self.backend
        plog = await be.state.broker.fetch_log(OFFSETS_TOPIC, partition)
        b = plog.bounds()
        end = b.next_offset
        if self.state.cluster is not None and b.high_watermark < end:
            raise LoadInProgressError(
                f"{OFFSETS_TOPIC}/{partition}: the high watermark {b.high_watermark} is "
                f"below the log end {end}"
            )
        out = PartitionOffsets(epoch)
        offset = b.log_start_offset
        while offset < end:
            page = await be.read(OFFSETS_TOPIC, plog, offset, READ_BYTES, ranges=False)
            if not page.size:
                break
            assert isinstance(page.records, bytes)
            for batch in iter_batches(page.records):
                for r in batch.records():
                    if r.offset >= offset:
                        out.apply(r.key, r.value)
                offset = max(offset, batch.header.last_offset + 1)
        return out

    def loaded(self) -> dict[int, PartitionOffsets]:
        """The partitions loaded so far (partition -> state)."""
        return dict(self._loaded)

    # ---- writes ------------------------------------------------------------------------

    async def append(self, partition: int, records: list[NewRecord]) -> None:
        """Append ``records`` to internal ``partition`` and return once they are
        committed as an ``acks=all`` produce is. The library's errors propagate."""
        await self.backend.produce(OFFSETS_TOPIC, partition, encode_batch(records), -1, 0)

    def _topic_ids(self, topics: Iterable[str]) -> dict[str, str | None]:
        """The id of each of ``topics`` as this node knows it now: None for a topic that
        does not exist; a topic whose id cannot be known now (it could not be opened at
        start) is left out."""
        out: dict[str, str | None] = {}
        for t in topics:
            try:
                out[t] = self.state.topics.get(t).meta.topic_id
            except TopicNotFoundError:
                out[t] = None
            except TieredLogError:
                continue
        return out

    async def commit(self, group: str, offsets: Iterable[tuple[str, int, Committed]]) -> None:
        """Write the commits of ``group`` durably, then into the loaded state; each names
        its topic's current id (see the module docstring)."""
        partition = await self.partition_of(group)
        state, _ = await self.load(partition)
        given = list(offsets)
        if not given:
            return
        ids = self._topic_ids({t for t, _, _ in given})
        items = [(t, p, dataclasses.replace(c, topic_id=ids.get(t))) for t, p, c in given]
        await self.append(partition, [commit_record(group, t, p, c) for t, p, c in items])
        if self._loaded.get(partition) is state:
            mine = state.groups.setdefault(group, {})
            for t, p, c in items:
                mine[(t, p)] = c

    async def delete(self, group: str) -> None:
        """Drop every offset of ``group`` durably."""
        partition = await self.partition_of(group)
        state, _ = await self.load(partition)
        await self.append(partition, [deletion_record(group)])
        if self._loaded.get(partition) is state:
            state.groups.pop(group, None)

    async def delete_offsets(self, group: str, keys: Iterable[tuple[str, int]]) -> None:
        """Drop the committed offsets of ``group`` for these (topic, partition) durably."""
        partition = await self.partition_of(group)
        state, _ = await self.load(partition)
        doomed = list(keys)
        if not doomed:
            return
        await self.append(partition, [offset_tombstone(group, t, p) for t, p in doomed])
        if self._loaded.get(partition) is state:
            mine = state.groups.get(group, {})
            for key in doomed:
                mine.pop(key, None)
            if not mine:
                state.groups.pop(group, None)

    async def offsets(self, group: str) -> dict[tuple[str, int], Committed]:
        """The committed offsets of ``group`` (a copy), without those of a topic deleted
        since (its id is not the current one's, or it is gone)."""
        state, _ = await self.load(await self.partition_of(group))
        have = state.groups.get(group, {})
        ids = self._topic_ids({t for t, _ in have})
        return {
            key: c
            for key, c in have.items()
            if c.topic_id is None or ids.get(key[0], c.topic_id) == c.topic_id
        }


def now_ms() -> int:
    """The wall clock in ms (a commit's timestamp)."""
    return int(time.time() * 1000)


__all__ = [
    "MAX_METADATA",
    "OFFSETS_PARTITIONS",
    "OFFSETS_TOPIC",
    "Committed",
    "LoadInProgressError",
    "OffsetStore",
    "PartitionOffsets",
    "is_internal",
    "java_hash",
    "partition_for",
]
