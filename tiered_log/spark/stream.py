"""Structured Streaming reads of a topic: per-partition offsets, rate limits, AvailableNow.

A micro-batch's offsets are ``{"<topic>": {"<partition>": next offset to read}}`` (the
shape of Kafka's), so the checkpoint records exactly where each partition stands and a
restarted query continues at those offsets: no record is skipped and none is read twice
by the source (end-to-end exactly-once then depends on the sink, as always in Spark).

- The first batch starts at ``startingOffsets`` (default ``latest``, as Kafka's source)
  or ``startingTimestamp``; a partition added later starts at its earliest offset.
- ``maxOffsetsPerTrigger`` caps each batch; the cap is shared between partitions in
  proportion to their backlog (every partition with a backlog gets at least one).
- ``Trigger.AvailableNow`` reads everything up to the high watermarks seen when the
  query started, in batches that respect ``maxOffsetsPerTrigger``, then stops.
- Each batch is planned like a batch read (archived segments from the bucket, the rest
  through the service). Offsets removed by retention before they were read follow
  ``failOnDataLoss``. The first batch that reads from the bucket checks it on the driver
  first (:func:`~tiered_log.spark.bucket.check_bucket`): a wrong ``bucketUrl`` or an
  unreachable endpoint stops the query with one line naming the option.

Thread-safety: Spark drives one reader from one thread at a time.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from .bucket import check_bucket
from .options import LATEST, OffsetSpec, ReadOptions
from .planning import PartitionState, ServiceClient, check_start, plan_splits, resolve_partitions
from .reading import bucket_of, read_split

Offsets = dict[str, dict[str, int]]


def share_limit(start: dict[int, int], latest: dict[int, int], max_rows: int) -> dict[int, int]:
    """End offsets reading at most ``max_rows`` in all, shared by backlog (see module doc)."""
    lag = {p: max(0, latest[p] - start.get(p, 0)) for p in latest}
    total = sum(lag.values())
    if total <= max_rows:
        return dict(latest)
    out = {p: start.get(p, 0) for p in latest}
    budget = max_rows
    for p, n in sorted(lag.items()):
        if n:
            take = min(n, max(1, max_rows * n // total), budget)
            out[p] += take
            budget -= take
    for p in sorted(lag):  # rounding leftovers, in partition order
        if budget <= 0:
            break
        extra = min(latest[p] - out[p], budget)
        out[p] += extra
        budget -= extra
    return out


class TieredLogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The streaming reader; see the module docstring."""

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self.cap: dict[int, int] | None = None
        self.bucket_checked = False  # check_bucket passed once: later batches skip it

    def _client(self) -> ServiceClient:
        return ServiceClient(self.opts.service_url, self.opts.token)

    def _wrap(self, offsets: dict[int, int]) -> Offsets:
        return {self.opts.topic: {str(p): int(o) for p, o in sorted(offsets.items())}}

    def _unwrap(self, offsets: dict[str, Any]) -> dict[int, int]:
        inner = offsets.get(self.opts.topic)
        if not isinstance(inner, dict):
            raise ValueError(
                f"checkpointed offsets {offsets!r} are not for topic {self.opts.topic!r}"
            )
        return {int(p): int(o) for p, o in inner.items()}

    def _latest(self, client: ServiceClient) -> dict[int, int]:
        parts = resolve_partitions(client, self.opts.topic, self.opts.partitions)
        hws = {p: client.bounds(self.opts.topic, p).high_watermark for p in parts}
        if self.cap is not None:
            hws = {p: min(h, self.cap.get(p, 0)) for p, h in hws.items()}
        return hws

    def initialOffset(self) -> Offsets:
        opts = self.opts
        spec = opts.starting if opts.starting_given else OffsetSpec(LATEST)
        out: dict[int, int] = {}
        with self._client() as client:
            for p in resolve_partitions(client, opts.topic, opts.partitions):
                b = client.bounds(opts.topic, p)
                if opts.starting_timestamp is not None:
                    found = client.offset_for_timestamp(opts.topic, p, opts.starting_timestamp)
                    out[p] = b.high_watermark if found is None else found
                    continue
                s = spec.for_partition(p)
                out[p] = (
                    b.log_start_offset if s < LATEST else b.high_watermark if s == LATEST else s
                )
        return self._wrap(out)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_offsets_per_trigger
        return ReadAllAvailable() if n is None else ReadMaxRows(n)

    def prepareForTriggerAvailableNow(self) -> None:
        with self._client() as client:
            self.cap = self._latest(client)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> Offsets:
        begin = self._unwrap(start)
        with self._client() as client:
            latest = self._latest(client)
        latest = {p: max(h, begin.get(p, 0)) for p, h in latest.items()}
        if isinstance(limit, ReadMaxRows):
            latest = share_limit(begin, latest, limit.max_rows)
        return self._wrap(latest)

    def reportLatestOffset(self) -> Offsets | None:
        with self._client() as client:
            return self._wrap(self._latest(client))

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, stop = self._unwrap(start), self._unwrap(end)
        wanted = {p: (begin.get(p, 0), e) for p, e in stop.items() if begin.get(p, 0) < e}
        if not wanted:
            return []
        opts = self.opts
        states: dict[int, PartitionState] = {}
        with self._client() as client:
            for p in wanted:
                states[p] = client.remote_segments(opts.topic, p)
        ranges = {
            p: (check_start(opts.topic, states[p], s, opts.fail_on_data_loss), e)
            for p, (s, e) in wanted.items()
        }
        ranges = {p: (min(s, e), e) for p, (s, e) in ranges.items()}
        splits = plan_splits(
            opts.topic, bucket_of(opts, states.values()), ranges, states, opts.min_partitions, None
        )
        if not self.bucket_checked:
            self.bucket_checked = check_bucket(opts, splits, states)
        return splits

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_split(partition, self.opts, self.schema)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: the source keeps no per-batch state (the log is the buffer)."""
