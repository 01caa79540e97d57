"""Planning a read: which byte ranges of which objects, and which tails, each task reads.

The driver asks the service, per partition, for ``GET .../remote-segments`` (bounds and
the remote log index of every finished remote segment; see
:mod:`tiered_log.service.app`) and never lists the bucket. An offset range
``[start, end)`` of one partition becomes:

- one :class:`ArchiveSplit` per archived segment overlapping ``[start, remote_end)``,
  holding the chunk entries the task fetches from the bucket with ranged GETs; a segment
  is cut into several splits along chunk boundaries when ``minPartitions`` asks for more
  splits than there are segments (by bytes, as evenly as chunks allow);
- one :class:`TailSplit` for ``[max(start, remote_end), end)``: records not yet shipped,
  read through the service's binary fetch.

Pruning: a partition filter drops partitions, offset bounds narrow ``[start, end)`` and a
lower timestamp bound drops chunks whose largest timestamp is below it (the index holds
each chunk's largest timestamp; there is no smallest, so an upper bound prunes nothing).

Splits are frozen and picklable (they travel to the executors). Functions here do
network I/O to the service; safe from any thread.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition

from ..client import Client
from ..errors import DataLossError, InvalidArgumentError

Chunk = tuple[int, int, int, int, int, int]
"""One remoteLogIndex entry: first_offset, last_offset, first_ts, largest_ts, position, length."""


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """One finished remote segment as the service describes it."""

    base_offset: int
    next_offset: int
    object_key: str
    size: int
    max_timestamp: int
    chunks: tuple[Chunk, ...]


@dataclass(frozen=True, slots=True)
class PartitionState:
    """Bounds and remote segments of one partition (``GET .../remote-segments``)."""

    partition: int
    log_id: str | None
    remote_url: str | None
    log_start_offset: int
    remote_end_offset: int
    high_watermark: int
    segments: tuple[SegmentInfo, ...]

    @classmethod
    def from_json(cls, partition: int, d: dict[str, Any]) -> PartitionState:
        segs = tuple(
            SegmentInfo(
                int(s["base_offset"]),
                int(s["next_offset"]),
                str(s["object_key"]),
                int(s["size"]),
                int(s["max_timestamp"]),
                tuple(tuple(int(x) for x in c) for c in s["chunks"]),  # type: ignore[misc]
            )
            for s in d["segments"]
        )
        return cls(
            partition,
            d.get("log_id"),
            d.get("remote_url"),
            int(d["log_start_offset"]),
            int(d["remote_end_offset"]),
            int(d["high_watermark"]),
            segs,
        )


class ArchiveSplit(InputPartition):
    """Chunks ``chunks`` of one segment object in ``bucket_url``, records ``[start, end)``."""

    def __init__(
        self,
        topic: str,
        partition: int,
        bucket_url: str,
        object_key: str,
        chunks: tuple[Chunk, ...],
        start: int,
        end: int,
    ) -> None:
        super().__init__(None)
        self.topic = topic
        self.bucket_url = bucket_url
        self.partition = partition
        self.object_key = object_key
        self.chunks = chunks
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return (
            f"ArchiveSplit({self.topic}-{self.partition} [{self.start}, {self.end}) "
            f"{self.object_key} {len(self.chunks)} chunk(s))"
        )


class TailSplit(InputPartition):
    """Records ``[start, end)`` of one partition, read through the service."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__(None)
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"TailSplit({self.topic}-{self.partition} [{self.start}, {self.end}))"


class ServiceClient(Client):
    """:class:`~tiered_log.client.Client` plus the one call the planner needs."""

    def __enter__(self) -> ServiceClient:
        return self

    def remote_segments(self, topic: str, partition: int) -> PartitionState:
        from urllib.parse import quote

        path = f"/v1/topics/{quote(topic, safe='')}/partitions/{int(partition)}/remote-segments"
        # From the partition's leader (a cluster: only its view of the bucket is current).
        resp = self._routed(
            topic, partition, lambda url: self._req_at(url, "GET", path), writes=False
        )
        return PartitionState.from_json(partition, resp.json())

    def partition_count(self, topic: str) -> int:
        return int(self.describe_topic(topic)["partitions"])


def split_archive(
    topic: str,
    bucket_url: str,
    st: PartitionState,
    start: int,
    end: int,
    min_timestamp: int | None,
    target_bytes: int | None,
) -> list[ArchiveSplit]:
    """Archive splits of ``[start, min(end, remote_end))`` of one partition (see module doc).

    ``target_bytes``: cut segments into splits of about this many bytes (None: one split
    per segment). A segment the index gives no chunks for is read whole.
    """
    out: list[ArchiveSplit] = []
    stop = min(end, st.remote_end_offset)
    for seg in st.segments:
        if seg.next_offset <= start or seg.base_offset >= stop:
            continue
        if min_timestamp is not None and seg.max_timestamp < min_timestamp:
            continue
        chunks: list[Chunk] = list(seg.chunks) or [
            (seg.base_offset, seg.next_offset - 1, -1, seg.max_timestamp, 0, seg.size)
        ]
        chunks = [
            c
            for c in chunks
            if c[1] >= start and c[0] < stop and (min_timestamp is None or c[3] >= min_timestamp)
        ]
        if not chunks:
            continue
        groups: list[list[Chunk]] = [chunks]
        if target_bytes is not None:
            total = sum(c[5] for c in chunks)
            n = min(len(chunks), max(1, math.ceil(total / target_bytes)))
            if n > 1:
                groups = []
                per = total / n
                cur: list[Chunk] = []
                acc = 0
                for c in chunks:
                    cur.append(c)
                    acc += c[5]
                    if acc >= per * (len(groups) + 1) and len(groups) < n - 1:
                        groups.append(cur)
                        cur = []
                if cur:
                    groups.append(cur)
        for g in groups:
            out.append(
                ArchiveSplit(
                    topic,
                    st.partition,
                    bucket_url,
                    seg.object_key,
                    tuple(g),
                    max(start, g[0][0]),
                    min(stop, seg.next_offset, g[-1][1] + 1),
                )
            )
    return out


def plan_splits(
    topic: str,
    bucket_url: str | None,
    ranges: dict[int, tuple[int, int]],
    states: dict[int, PartitionState],
    min_partitions: int | None,
    min_timestamp: int | None,
) -> list[InputPartition]:
    """Every split for ``ranges`` (partition -> ``[start, end)``), archive then tails.

    InvalidArgumentError when archived records are wanted and no bucket URL is known.
    """
    if bucket_url is None:
        if any(
            st.segments and ranges.get(p, (0, 0))[0] < st.remote_end_offset
            for p, st in states.items()
        ):
            raise InvalidArgumentError(
                f"topic {topic!r} has archived segments; the tiered_log source needs the "
                "option 'bucketUrl' to read them"
            )
        bucket_url = ""
    target: int | None = None
    if min_partitions is not None:
        plain = [
            split_archive(topic, bucket_url, states[p], s, e, min_timestamp, None)
            for p, (s, e) in ranges.items()
        ]
        n_tails = sum(1 for p, (s, e) in ranges.items() if max(s, states[p].remote_end_offset) < e)
        count = sum(len(x) for x in plain) + n_tails
        if count < min_partitions:
            total = sum(sum(c[5] for c in sp.chunks) for x in plain for sp in x)
            slots = max(1, min_partitions - n_tails)
            target = max(1, total // slots)
    splits: list[InputPartition] = []
    tails: list[InputPartition] = []
    for p, (s, e) in sorted(ranges.items()):
        if s >= e:
            continue
        splits.extend(split_archive(topic, bucket_url, states[p], s, e, min_timestamp, target))
        tail_start = max(s, states[p].remote_end_offset)
        if tail_start < e:
            tails.append(TailSplit(topic, p, tail_start, e))
    return splits + tails


def check_start(topic: str, st: PartitionState, start: int, fail_on_data_loss: bool) -> int:
    """``start``, or the log start if retention removed it (DataLossError when failing)."""
    if start >= st.log_start_offset:
        return start
    if fail_on_data_loss:
        raise DataLossError(
            f"offsets [{start}, {st.log_start_offset}) of {topic}-{st.partition} were removed "
            "by retention (the log now starts at "
            f"{st.log_start_offset}); set failOnDataLoss=false to skip them"
        )
    return st.log_start_offset


def resolve_partitions(
    client: ServiceClient, topic: str, wanted: tuple[int, ...] | None
) -> list[int]:
    """The topic's partitions, or ``wanted`` (InvalidArgumentError if one does not exist)."""
    n = client.partition_count(topic)
    if wanted is None:
        return list(range(n))
    missing = [p for p in wanted if p >= n]
    if missing:
        raise InvalidArgumentError(f"topic {topic!r} has {n} partition(s); no partition {missing}")
    return list(wanted)
