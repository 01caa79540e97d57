"""Writing a DataFrame into a topic through the service, batch and streaming.

Columns: ``value`` (binary or string, required; a null value is written as a null
value, a tombstone, and an empty one as an empty value), and optionally ``key`` (binary
or string; null: no key), ``headers`` (array<struct<key string, value binary>>),
``partition`` (int) and ``timestamp`` (timestamp). ``topic`` and ``offset`` columns (a DataFrame read from a
topic) are ignored; any other column is an error. A row with a null ``partition`` goes
to ``xxh3(key) % partitions`` when it has a key, else round-robin. Option
``compression`` (``gzip``, ``snappy``, ``lz4``, ``zstd``; default ``none``) compresses
each Kafka batch produced; the topic stores it as sent.

**Guarantee: at least once.** Each task produces its rows in batches (``batchRecords``,
``batchBytes``) with the service's all-or-nothing append; a batch is acknowledged only
once durable per the topic's flush policy. Spark retries a failed task and a streaming
query re-runs an unfinished micro-batch after a restart: batches that were acknowledged
before the failure are then appended again, so records may be duplicated, never lost.
Readers that need exactly-once dedupe on a key of their own (e.g. a unique id header).
``abort`` cannot take back records already appended.

Thread-safety: Spark uses a writer from one thread; each task opens its own client.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import xxhash
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from ..client import Client
from ..format.records import ProducerRecord
from .options import WriteOptions

log = logging.getLogger("tiered_log.spark")

_USED = ("value", "key", "headers", "partition", "timestamp")
_IGNORED = ("topic", "offset")


@dataclass
class WriteCommit(WriterCommitMessage):
    """What one task appended."""

    records: int
    requests: int


def check_columns(schema: StructType) -> None:
    """ValueError unless the DataFrame can be written (see the module docstring)."""
    names = [f.name.lower() for f in schema.fields]
    if "value" not in names:
        raise ValueError("a DataFrame written to tiered_log needs a 'value' column")
    other = [n for n in names if n not in _USED and n not in _IGNORED]
    if other:
        raise ValueError(
            f"tiered_log cannot write column(s) {other}; it takes value, key, "
            "headers, partition, timestamp (topic and offset are ignored)"
        )


def _bytes(v: Any, what: str) -> bytes | None:
    if v is None:
        return None
    if isinstance(v, str):
        return v.encode("utf-8")
    if isinstance(v, bytes | bytearray | memoryview):
        return bytes(v)
    raise ValueError(f"column {what} must be binary or string, not {type(v).__name__}")


def _record(row: Any) -> ProducerRecord:
    d = row.asDict() if hasattr(row, "asDict") else dict(row)
    value = _bytes(d.get("value"), "value")  # None: a null value (a tombstone)
    headers = tuple(
        (str(h["key"]), _bytes(h["value"], "headers.value")) for h in (d.get("headers") or ())
    )
    ts = d.get("timestamp")
    ms = None
    if isinstance(ts, dt.datetime):
        aware = ts if ts.tzinfo is not None else ts.astimezone()
        ms = int(aware.timestamp() * 1000)
    return ProducerRecord(value, _bytes(d.get("key"), "key"), headers, ms)


def produce_rows(opts: WriteOptions, partitions: int, rows: Iterator[Any]) -> WriteCommit:
    """Produce every row (see the module docstring); returns the counts."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    rr = ctx.partitionId() if ctx is not None else 0
    pending: dict[int, list[ProducerRecord]] = {}
    sizes: dict[int, int] = {}
    done = requests = 0
    with Client(opts.service_url, opts.token) as client:

        def flush(p: int) -> None:
            nonlocal done, requests
            batch = pending.pop(p, [])
            sizes.pop(p, None)
            if batch:
                client.produce(opts.topic, p, batch, compression=opts.compression)
                done += len(batch)
                requests += 1

        for row in rows:
            rec = _record(row)
            part = row["partition"] if "partition" in row.__fields__ else None
            if part is None:
                if rec.key is not None:
                    part = xxhash.xxh3_64_intdigest(rec.key) % partitions
                else:
                    part = rr % partitions
                    rr += 1
            elif not 0 <= int(part) < partitions:
                raise ValueError(
                    f"row for partition {part}: topic {opts.topic!r} has {partitions} partition(s)"
                )
            p = int(part)
            pending.setdefault(p, []).append(rec)
            sizes[p] = sizes.get(p, 0) + len(rec.value or b"") + len(rec.key or b"")
            if len(pending[p]) >= opts.batch_records or sizes[p] >= opts.batch_bytes:
                flush(p)
        for p in list(pending):
            flush(p)
    return WriteCommit(done, requests)


class _RowProducer:
    """What the batch and the streaming writer share: the topic's partition count, looked
    up once on the driver, and a task's rows produced through the service."""

    def __init__(self, opts: WriteOptions, schema: StructType) -> None:
        check_columns(schema)
        self.opts = opts
        with Client(opts.service_url, opts.token) as client:
            self.partitions = int(client.describe_topic(opts.topic)["partitions"])

    def write(self, iterator: Iterator[Any]) -> WriteCommit:
        return produce_rows(self.opts, self.partitions, iterator)


def _written(messages: list[WriterCommitMessage | None]) -> int:
    return sum(m.records for m in messages if isinstance(m, WriteCommit))


class TieredLogWriter(_RowProducer, DataSourceWriter):
    """Batch writer: each task produces its rows (at least once; see the module doc)."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        log.info("wrote %d record(s) to topic %s", _written(messages), self.opts.topic)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning(
            "write to topic %s aborted; %d record(s) already appended stay",
            self.opts.topic,
            _written(messages),
        )


class TieredLogStreamWriter(_RowProducer, DataSourceStreamWriter):
    """Streaming writer: each micro-batch's tasks produce their rows (at least once)."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.info(
            "micro-batch %d: wrote %d record(s) to topic %s",
            batchId,
            _written(messages),
            self.opts.topic,
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning(
            "micro-batch %d to topic %s aborted; records already appended stay "
            "(they will be appended again when the batch is re-run)",
            batchId,
            self.opts.topic,
        )
