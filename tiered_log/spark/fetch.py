"""Executor side of a read: fetch a split's records and turn them into Arrow record batches.

An :class:`~tiered_log.spark.planning.ArchiveSplit` is read straight from the bucket:
its chunks are coalesced into ranged GETs of up to ``fetch_bytes`` (the next GET runs in
a background thread while the current one is decoded), and every frame is decoded with
:func:`~tiered_log.format.records.decode_frames`, which verifies its xxh3 checksum; a
range whose bytes do not hold exactly the chunks the index promised raises
RemoteCorruptionError. A :class:`~tiered_log.spark.planning.TailSplit` is read through
the service's binary fetch (:class:`~tiered_log.client.Client`, checksums verified too).

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

import pyarrow as pa

from ..client import Client
from ..errors import (
    DataLossError,
    OffsetOutOfRangeError,
    RemoteCorruptionError,
    RemoteObjectNotFoundError,
)
from ..format.records import Record, decode_frames
from ..remote.storage import RemoteStorage, open_storage
from .options import ReadOptions
from .planning import ArchiveSplit, Chunk, TailSplit

log = logging.getLogger("tiered_log.spark")

HEADER_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))

_stores: dict[tuple[str, tuple[tuple[str, Any], ...]], RemoteStorage] = {}
_stores_lock = threading.Lock()


def store_for(url: str, s3: tuple[tuple[str, Any], ...]) -> RemoteStorage:
    """The process-wide store for ``url`` and its S3 options (opened on first use)."""
    key = (url, s3)
    with _stores_lock:
        st = _stores.get(key)
        if st is None:
            st = _stores[key] = open_storage(url, **dict(s3))
        return st


def records_to_batch(records: Sequence[Record], topic: str, partition: int,
                     schema: pa.Schema, include_headers: bool) -> pa.RecordBatch:
    """One Arrow batch in the source's schema (see :mod:`tiered_log.spark.source`)."""
    n = len(records)
    keys = [r.key for r in records]
    dense = n > 0 and records[-1].offset - records[0].offset + 1 == n
    cols: list[pa.Array] = [
        pa.array(keys, pa.binary()) if any(k is not None for k in keys) else pa.nulls(n, pa.binary()),
        pa.array([r.value for r in records], pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(range(records[0].offset, records[0].offset + n), pa.int64()) if dense
        else pa.array([r.offset for r in records], pa.int64()),
        pa.array([r.timestamp * 1000 for r in records], pa.int64()).cast(schema.field("timestamp").type),
    ]
    if include_headers:
        cols.append(pa.array([[{"key": k, "value": v} for k, v in r.headers] for r in records],
                             HEADER_TYPE))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


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
    start, end = group[0][4], group[-1][4] + group[-1][5]
    blob = store.get(key, start, end)
    if len(blob) != end - start:
        raise RemoteCorruptionError(f"{key}: asked for {end - start} bytes at {start}, got {len(blob)}")
    return blob


def _decode_group(key: str, group: list[Chunk], blob: bytes, start: int, end: int) -> list[Record]:
    recs, pos, _ = decode_frames(blob)
    if pos != len(blob) or not recs or recs[0].offset != group[0][0] or (
            recs[-1].offset != group[-1][1]) or recs[-1].offset - recs[0].offset + 1 != len(recs):
        raise RemoteCorruptionError(
            f"{key}: bytes [{group[0][4]}, {group[0][4] + len(blob)}) do not hold offsets "
            f"{group[0][0]}..{group[-1][1]} as the remote index says")
    if recs[0].offset < start or recs[-1].offset >= end:
        recs = [r for r in recs if start <= r.offset < end]
    return recs


def read_archive(split: ArchiveSplit, opts: ReadOptions,
                 schema: pa.Schema) -> Iterator[pa.RecordBatch]:
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
                msg = (f"{split.topic}-{split.partition} offsets [{split.start}, {split.end}): "
                       f"segment object {split.object_key} is gone from {bucket_url} "
                       "(removed by retention after the query was planned?)")
                if opts.fail_on_data_loss:
                    raise DataLossError(msg + "; set failOnDataLoss=false to skip it") from exc
                log.warning("%s; skipped (failOnDataLoss=false)", msg)
                return
            if i + 1 < len(groups):
                pending = pool.submit(_get, store, split.object_key, groups[i + 1])
            recs = _decode_group(split.object_key, group, blob, split.start, split.end)
            if recs:
                yield records_to_batch(recs, split.topic, split.partition, schema,
                                       opts.include_headers)


def read_tail(split: TailSplit, opts: ReadOptions, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Record batches of ``[start, end)`` of one partition, through the service."""
    offset = split.start
    with Client(opts.service_url, opts.token) as client:
        while offset < split.end:
            try:
                res = client.fetch(split.topic, split.partition, offset, max_records=10_000,
                                   max_bytes=opts.fetch_bytes)
            except (OffsetOutOfRangeError, DataLossError) as exc:
                start = getattr(exc, "log_start", None)
                if isinstance(exc, OffsetOutOfRangeError) and (start is None or offset >= start):
                    raise  # past the end: truncated since planning
                msg = (f"{split.topic}-{split.partition}: offset {offset} was removed by "
                       "retention before it was read")
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
