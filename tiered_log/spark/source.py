"""The ``tiered_log`` PySpark data source: batch reads (here), streaming reads and writes.

Schema (as Spark's Kafka source)::

    key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp, headers array<struct<key string, value binary>>  (includeHeaders)

Usage::

    from tiered_log.spark import register
    register(spark)            # registers the source, turns on Python filter pushdown
    df = (spark.read.format("tiered_log")
          .option("serviceUrl", "http://127.0.0.1:8080").option("topic", "orders")
          .option("bucketUrl", "s3://archive/prod").option("s3.endpointUrl", "...")
          .load())

Options are in :mod:`tiered_log.spark.options`; they are checked when the DataFrame is
loaded (a malformed or unknown option, or a path given to ``load()``, fails ``load()``).
``bucketUrl`` defaults to the store the service reports (fine for a local directory shared
with the executors; an S3 store needs its credentials given here). A batch read plans from
the remote log index the service serves (see :mod:`tiered_log.spark.planning`): one split
per archived segment, read from the bucket by the executors, and one per unshipped tail,
read through the service. Planning checks the bucket with one request before any task
runs (:mod:`tiered_log.spark.bucket`): a wrong ``bucketUrl`` or an unreachable endpoint
fails there, in one line naming the option. Reading, the source writes nothing: no
directory, no object, no file (a local store is opened read-only).

Filter pushdown is opt-in: give ``filterPushdown=true`` (and keep
``spark.sql.python.filterPushdown.enabled``, which :func:`register` sets). Then
``partition`` (=, IN) and ``offset`` (=, <, <=, >, >=) filters are applied by the source
exactly and not evaluated again; ``timestamp >= / >`` prunes chunks whose largest
timestamp is lower and is still evaluated by Spark. It is off by default because
pyspark 4.3 keeps the read plan of a filtered query on the DataFrame's data source and
reuses it for a later *unfiltered* query of the same DataFrame, which then returns only
the filtered rows (fixed upstream for Spark 5.0). With pushdown on, load a fresh
DataFrame per query; ``startingOffsets``/``endingOffsets`` and the timestamp options
prune the same way and are always safe.

Thread-safety: Spark creates and pickles these objects; each is used by one thread.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ..errors import InvalidArgumentError
from .bucket import check_bucket
from .options import EARLIEST, LATEST, ReadOptions, parse_read_options, parse_write_options
from .planning import (
    PartitionState,
    ServiceClient,
    check_start,
    plan_splits,
    resolve_partitions,
)
from .reading import bucket_of, read_split

NAME = "tiered_log"


def source_schema(include_headers: bool) -> StructType:
    """The rows' schema; ``headers`` only with ``includeHeaders``."""
    fields = [
        StructField("key", BinaryType(), True),
        StructField("value", BinaryType(), True),
        StructField("topic", StringType(), True),
        StructField("partition", IntegerType(), True),
        StructField("offset", LongType(), True),
        StructField("timestamp", TimestampType(), True),
    ]
    if include_headers:
        fields.append(
            StructField(
                "headers",
                ArrayType(
                    StructType(
                        [
                            StructField("key", StringType(), True),
                            StructField("value", BinaryType(), True),
                        ]
                    ),
                    True,
                ),
                True,
            )
        )
    return StructType(fields)


def resolve_ranges(
    client: ServiceClient,
    opts: ReadOptions,
    partitions: Sequence[int],
    states: dict[int, PartitionState],
    *,
    streaming: bool = False,
) -> dict[int, tuple[int, int]]:
    """``[start, end)`` per partition from the offset/timestamp options and bounds.

    Explicit starts below the log start are data loss (see :func:`check_start`); an end
    past the high watermark is clipped to it.
    """
    out: dict[int, tuple[int, int]] = {}
    for p in partitions:
        st = states[p]
        hw = st.high_watermark
        if opts.starting_timestamp is not None:
            found = client.offset_for_timestamp(opts.topic, p, opts.starting_timestamp)
            start = hw if found is None else found
        else:
            s = opts.starting.for_partition(p)
            start = st.log_start_offset if s == EARLIEST else hw if s == LATEST else s
            if s >= 0:
                if s > hw:
                    raise InvalidArgumentError(
                        f"startingOffsets: {opts.topic}-{p} offset {s} is past the end of the "
                        f"log ({hw})"
                    )
                start = check_start(opts.topic, st, s, opts.fail_on_data_loss)
        if streaming:
            end = hw
        elif opts.ending_timestamp is not None:
            found = client.offset_for_timestamp(opts.topic, p, opts.ending_timestamp)
            end = hw if found is None else found
        else:
            e = opts.ending.for_partition(p)
            end = hw if e == LATEST else min(e, hw)
        out[p] = (max(start, st.log_start_offset), max(end, st.log_start_offset))
    return out


def _ms(value: object) -> int | None:
    """Milliseconds of a pushed-down timestamp literal (aware, or naive taken as UTC)."""
    if isinstance(value, dt.datetime):
        v = value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
        return int(v.timestamp() * 1000)
    return None


class TieredLogReader(DataSourceReader):
    """Batch reader: plans splits on the driver (``partitions``), reads them on executors.

    ``pushFilters`` records bounds that ``partitions`` then uses; the reader is pickled
    to the executors after planning.
    """

    def __init__(self, opts: ReadOptions, schema: StructType) -> None:
        self.opts = opts
        self.schema = schema
        self.part_filter: set[int] | None = None
        self.offset_lo = 0
        self.offset_hi: int | None = None  # exclusive
        self.ts_lo: int | None = None

    def _keep_partitions(self, values: Iterable[int]) -> None:
        vs = set(values)
        self.part_filter = vs if self.part_filter is None else self.part_filter & vs

    def _push_one(self, f: Filter) -> bool:
        """Record ``f`` if the source applies it exactly; True then."""
        col = getattr(f, "attribute", None)
        value = getattr(f, "value", None)
        if col == ("partition",):
            if isinstance(f, EqualTo) and isinstance(value, int):
                self._keep_partitions([value])
                return True
            if (
                isinstance(f, In)
                and isinstance(value, tuple | list)
                and all(isinstance(v, int) for v in value)
            ):
                self._keep_partitions(value)
                return True
            return False
        if col == ("offset",) and isinstance(value, int) and not isinstance(value, bool):
            if isinstance(f, EqualTo):
                self.offset_lo = max(self.offset_lo, value)
                self._hi(value + 1)
            elif isinstance(f, GreaterThan):
                self.offset_lo = max(self.offset_lo, value + 1)
            elif isinstance(f, GreaterThanOrEqual):
                self.offset_lo = max(self.offset_lo, value)
            elif isinstance(f, LessThan):
                self._hi(value)
            elif isinstance(f, LessThanOrEqual):
                self._hi(value + 1)
            else:
                return False
            return True
        if col == ("timestamp",) and isinstance(f, GreaterThan | GreaterThanOrEqual):
            ms = _ms(value)
            if ms is not None:
                self.ts_lo = ms if self.ts_lo is None else max(self.ts_lo, ms)
        return False  # timestamps: pruned here, evaluated by Spark

    def _hi(self, value: int) -> None:
        self.offset_hi = value if self.offset_hi is None else min(self.offset_hi, value)

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Keep partition/offset filters (applied exactly); give back the rest."""
        return [f for f in filters if not self._push_one(f)]

    def partitions(self) -> list[InputPartition]:
        opts = self.opts
        with ServiceClient(opts.service_url, opts.token) as client:
            parts = resolve_partitions(client, opts.topic, opts.partitions)
            if self.part_filter is not None:
                parts = [p for p in parts if p in self.part_filter]
            states = {p: client.remote_segments(opts.topic, p) for p in parts}
            ranges = resolve_ranges(client, opts, parts, states)
        for p, (s, e) in ranges.items():
            hi = e if self.offset_hi is None else min(e, self.offset_hi)
            ranges[p] = (max(s, self.offset_lo), hi)
        splits = plan_splits(
            opts.topic,
            bucket_of(opts, states.values()),
            ranges,
            states,
            opts.min_partitions,
            self.ts_lo,
        )
        check_bucket(opts, splits, states)
        return splits

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return read_split(partition, self.opts, self.schema)


class _PlainReader(TieredLogReader):
    """The reader without filter pushdown (the default; see the module docstring)."""

    pushFilters = DataSourceReader.pushFilters  # type: ignore[assignment]


class TieredLogDataSource(DataSource):
    """The ``tiered_log`` data source; see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def _read_options(self) -> ReadOptions:
        return parse_read_options(self.options)

    def schema(self) -> StructType:
        """The rows' schema. Spark asks for it in ``load()`` (batch or streaming; never for a
        write), so the read options are checked here: bad ones fail ``load()`` itself."""
        return source_schema(self._read_options().include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = self._read_options()
        cls = TieredLogReader if opts.filter_pushdown else _PlainReader
        return cls(opts, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .stream import TieredLogStreamReader

        return TieredLogStreamReader(self._read_options(), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .write import TieredLogWriter

        return TieredLogWriter(parse_write_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .write import TieredLogStreamWriter

        return TieredLogStreamWriter(parse_write_options(self.options), schema)
