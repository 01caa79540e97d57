"""Executor side of a read: fetch a split's records and turn them into Arrow record batches.

An :class:`~tiered_log.spark.planning.ArchiveSplit` is read straight from the bucket:
its chunks are coalesced into ranged GETs of up to ``fetch_bytes`` (the next GET runs in
a background thread while the current one is decoded). Each chunk of a GET is then
decompressed (if it was shipped compressed) and its Kafka record batches decoded, one
chunk at a time, by :func:`~tiered_log.spark.columns.chunk_columns` (every batch's CRC-32C
verified, compressed batches decompressed, keys and values copied once, into Arrow
buffers) into one Arrow batch: a chunk is ~1 MiB, so its bytes are still in the CPU's
cache when they are copied. A range whose bytes do not hold exactly the chunks the index
promised raises RemoteCorruptionError, and one of tiered_log's former batch format (a
bucket written before Kafka's) CorruptRecordError saying so.

A :class:`~tiered_log.spark.planning.TailSplit` is read through the service's binary
fetch (:class:`~tiered_log.client.Client`, checksums verified too).

Data loss: an object deleted by retention after planning (or an offset below the log
start in a tail) raises :class:`~tiered_log.errors.DataLossError` when
``failOnDataLoss`` is true and is skipped (with a warning) when false.

Stores are opened once per executor process and shared between its tasks (a
:class:`~tiered_log.remote.storage.RemoteStorage` is thread-safe). Everything else is
per call.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa

from ..client import Client
from ..errors import (
    DataLossError,
    OffsetOutOfRangeError,
    RemoteCorruptionError,
    RemoteObjectNotFoundError,
)
from ..format.records import Record
from ..remote.chunk_codec import decode_chunk, is_framed
from ..remote.manifest import check_batch_format
from ..remote.storage import RemoteStorage
from .bucket import open_reader_store
from .columns import ChunkColumns, binary_array, chunk_columns
from .options import ReadOptions
from .planning import ArchiveSplit, Chunk, TailSplit

log = logging.getLogger("tiered_log.spark")

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))

_stores: dict[tuple[str, tuple[tuple[str, Any], ...]], RemoteStorage] = {}
_stores_lock = threading.Lock()


def store_for(url: str, s3: tuple[tuple[str, Any], ...]) -> RemoteStorage:
    """The process-wide store for ``url`` and its S3 options (opened on first use,
    read-only: a reader creates and writes nothing)."""
    key = (url, s3)
    with _stores_lock:
        st = _stores.get(key)
        if st is None:
            st = _stores[key] = open_reader_store(url, s3)
        return st


def _int64s(values: np.ndarray[Any, Any], type_: pa.DataType | None = None) -> pa.Array:
    """An int64 (or ``type_``, of int64 values) Arrow array over ``values`` (no copy)."""
    buf = np.ascontiguousarray(values, np.int64)
    return pa.Array.from_buffers(type_ or pa.int64(), len(buf), [None, pa.py_buffer(buf)])


def _no_headers(n: int) -> pa.Array:
    """``n`` empty header lists."""
    return pa.ListArray.from_arrays(
        pa.array(np.zeros(n + 1, np.int32)), pa.array([], HEADER_TYPE.value_type), type=HEADER_TYPE
    )


def columns_to_batch(
    cols: ChunkColumns,
    lo: int,
    hi: int,
    topic: str,
    partition: int,
    schema: pa.Schema,
    include_headers: bool,
) -> pa.RecordBatch:
    """Rows ``lo:hi`` of ``cols`` as one Arrow batch in the source's schema (see
    :mod:`tiered_log.spark.source`)."""
    n = hi - lo
    ts = cols.timestamps[lo:hi] * 1000  # ms -> us (wraps as Arrow's multiply did)
    arrays: list[pa.Array] = [
        cols.keys.slice(lo, n),
        cols.values.slice(lo, n),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        _int64s(cols.offsets[lo:hi]),
        _int64s(ts, schema.field("timestamp").type),
    ]
    if include_headers:
        if cols.headers is None:
            arrays.append(_no_headers(n))
        else:
            arrays.append(
                pa.array(
                    [[{"key": k, "value": v} for k, v in h] for h in cols.headers[lo:hi]],
                    HEADER_TYPE,
                )
            )
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def records_to_batch(
    records: Sequence[Record], topic: str, partition: int, schema: pa.Schema, include_headers: bool
) -> pa.RecordBatch:
    """Decoded records (a tail read through the service) as one Arrow batch."""
    headers = [r.headers for r in records]
    cols = ChunkColumns(
        np.array([r.offset for r in records], np.int64),
        np.array([r.timestamp for r in records], np.int64),
        binary_array([r.key for r in records]),
        binary_array([r.value for r in records]),
        headers if any(headers) else None,
        0,
    )
    return columns_to_batch(cols, 0, len(records), topic, partition, schema, include_headers)


def _groups(chunks: Sequence[Chunk], fetch_bytes: int) -> list[list[Chunk]]:
    """Consecutive chunks coalesced into GETs of at most ``fetch_bytes`` (at least one)."""
    out: list[list[Chunk]] = []
    cur: list[Chunk] = []
    size = 0
    for c in chunks:
        contiguous = cur and cur[-1][4] + cur[-1][5] == c[4]
        if cur and (not contiguous or size + c[5] > fetch_bytes):
            out.append(cur)
            cur, size = [], 0
        cur.append(c)
        size += c[5]
    if cur:
        out.append(cur)
    return out


def _get(store: RemoteStorage, key: str, group: list[Chunk]) -> bytes:
    """The stored bytes of the chunks of ``group`` (one ranged GET)."""
    start, end = group[0][4], group[-1][4] + group[-1][5]
    blob = store.get(key, start, end)
    if len(blob) != end - start:
        raise RemoteCorruptionError(
            f"{key}: asked for {end - start} bytes at {start}, got {len(blob)}"
        )
    return blob


def _decode_group(
    key: str, group: list[Chunk], blob: bytes, start: int, end: int
) -> Iterator[tuple[ChunkColumns, int, int]]:
    """The verified batches of one GET, a chunk at a time, with the row range ``lo:hi``
    of each in ``[start, end)``.

    Chunks shipped compressed are decoded here, one at a time, just before their
    records (an encrypted one raises: executors hold no key ring), so each chunk's bytes
    are still in the CPU's cache while they are decoded and copied into Arrow; plain
    chunks are read where they lie. The chunks must hold consecutive offsets from the
    first chunk's first one to at least the last chunk's last one (a chunk clipped by
    a truncation holds records above its index entry's last offset), each ending where
    its last batch does: else RemoteCorruptionError.
    """
    view = memoryview(blob)
    base = group[0][4]
    expect = group[0][0]
    for c in group:
        part: bytes | memoryview = view[c[4] - base : c[4] - base + c[5]]
        where = f"{key} bytes [{c[4]}, {c[4] + c[5]})"
        if is_framed(part):
            part = decode_chunk(part, None, f"{key} byte {c[4]}")
        check_batch_format(part, where)
        cols = chunk_columns(part)
        offs = cols.offsets
        n = len(offs)
        if cols.end != len(part) or not n or offs[0] != expect or offs[-1] - offs[0] + 1 != n:
            raise RemoteCorruptionError(
                f"{key}: bytes [{base}, {base + len(blob)}) do not hold offsets "
                f"{group[0][0]}..{group[-1][1]} as the remote index says"
            )
        first = int(offs[0])  # offsets are dense (checked above): row i holds first + i
        expect = first + n
        lo = min(max(start - first, 0), n)
        hi = max(min(end - first, n), lo)
        yield cols, lo, hi
    if expect - 1 < group[-1][1]:
        raise RemoteCorruptionError(
            f"{key}: bytes [{base}, {base + len(blob)}) do not hold offsets "
            f"{group[0][0]}..{group[-1][1]} as the remote index says"
        )


def read_archive(
    split: ArchiveSplit, opts: ReadOptions, schema: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """Record batches of one archive split, read from the bucket (see the module doc)."""
    bucket_url = split.bucket_url
    store = store_for(bucket_url, opts.s3)
    groups = _groups(split.chunks, opts.fetch_bytes)
    if not groups:
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tiered-log-get") as pool:
        pending: Future[bytes] = pool.submit(_get, store, split.object_key, groups[0])
        for i, group in enumerate(groups):
            try:
                blob = pending.result()
            except RemoteObjectNotFoundError as exc:
                msg = (
                    f"{split.topic}-{split.partition} offsets [{split.start}, {split.end}): "
                    f"segment object {split.object_key} is gone from {bucket_url} "
                    "(removed by retention after the query was planned?)"
                )
                if opts.fail_on_data_loss:
                    raise DataLossError(msg + "; set failOnDataLoss=false to skip it") from exc
                log.warning("%s; skipped (failOnDataLoss=false)", msg)
                return
            if i + 1 < len(groups):
                pending = pool.submit(_get, store, split.object_key, groups[i + 1])
            for cols, lo, hi in _decode_group(
                split.object_key, group, blob, split.start, split.end
            ):
                if hi > lo:
                    yield columns_to_batch(
                        cols, lo, hi, split.topic, split.partition, schema, opts.include_headers
                    )


def read_tail(split: TailSplit, opts: ReadOptions, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Record batches of ``[start, end)`` of one partition, through the service."""
    offset = split.start
    with Client(opts.service_url, opts.token) as client:
        while offset < split.end:
            try:
                res = client.fetch(
                    split.topic,
                    split.partition,
                    offset,
                    max_records=10_000,
                    max_bytes=opts.fetch_bytes,
                )
            except (OffsetOutOfRangeError, DataLossError) as exc:
                start = getattr(exc, "log_start", None)
                if isinstance(exc, OffsetOutOfRangeError) and (start is None or offset >= start):
                    raise  # past the end: truncated since planning
                msg = (
                    f"{split.topic}-{split.partition}: offset {offset} was removed by "
                    "retention before it was read"
                )
                if opts.fail_on_data_loss:
                    raise DataLossError(msg + "; set failOnDataLoss=false to skip it") from exc
                log.warning("%s; skipped (failOnDataLoss=false)", msg)
                if start is None or start <= offset:
                    return
                offset = start
                continue
            recs = [r for r in res.records if r.offset < split.end]
            if not recs:
                return  # the log ends before `end` (truncated since planning)
            yield records_to_batch(recs, split.topic, split.partition, schema, opts.include_headers)
            offset = recs[-1].offset + 1
