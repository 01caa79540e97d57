"""HTTP clients of the tiered_log service: :class:`Client` (sync) and :class:`AsyncClient`.

Both speak the service's API (see :mod:`tiered_log.service.app`): small JSON requests
through httpx, record bodies (binary fetch and produce) through ``http.client`` with a
pool of kept-alive connections (in a worker thread for :class:`AsyncClient`), which is
2-3x cheaper per MiB. Fetches use the binary form: the body is the Kafka record batches
(magic 2) exactly as stored, decoded here with
:func:`tiered_log.format.records.decode_records`, which verifies every batch's CRC-32C
and decompresses compressed batches (a damaged record raises :class:`~tiered_log.errors.CorruptRecordError`, never returns);
records of the first batch below the asked offset are skipped, and records past
``max_records`` (a page is whole batches) are dropped by :meth:`Client.fetch`.
:meth:`Client.fetch_batches` returns the batches themselves, received into a buffer the
caller may reuse and checked by their CRCs alone, building no record (what a
follower, a rebuild or a columnar reader takes: :class:`FetchedBatches`).
Produce sends binary batches (``Content-Type: application/vnd.tiered-log.frames``): the
records encoded here as Kafka record batches with
:func:`tiered_log.format.records.encode_batch` (no JSON, no base64; timestamps left to
the server's clock unless a record gives one; compressed with ``compression="zstd"``
(or gzip, snappy, lz4), which the server stores as sent; a ``ProducerRecord`` whose
value is None is a null value, a tombstone), or one raw streamed body with
:meth:`Client.produce_raw`. A produce with ``partition=None`` (or :meth:`Client.send`)
places records as Kafka's default partitioner does (:mod:`.partitioner`: the murmur2 hash
of the key, so a key lands on the partition a Kafka client would choose; keyless records
one partition per batch, in turn).

Clusters: a client takes one URL or several (a sequence or a comma-separated string).
A partition's produce, fetch, consume, bounds, offsets and truncate go to the
partition's leader, learnt from ``GET /v1/cluster`` (a single node answers 404 there
and gets everything, exactly as before clusters); topic admin goes to any node. On
``not_leader`` or a connection that could not be made, a request is sent again to the
new leader with a short back-off, for up to ``retry_timeout_s`` (30 s); a produce whose
request may have reached the server (a connection broken after sending, a leader that
lost its leadership after appending, "appended but are not acknowledged") is never
sent again: its ConnectionFailedError or error is raised and the caller decides. A
consume continues across a leader change from the next offset it has not handed out.
The rules are in :mod:`.routing`.

Errors: the service's JSON errors are raised as the matching
:class:`~tiered_log.errors.TieredLogError` subclass, found by the error's ``code``
(``topic_not_found`` -> TopicNotFoundError, ``offset_out_of_range`` ->
OffsetOutOfRangeError with ``log_start``/``next_offset``, ...); an unreachable server
raises :class:`ConnectionFailedError` (retriable).

Modules: :mod:`.sync` (:class:`Client`), :mod:`.aio` (:class:`AsyncClient`),
:mod:`.traffic` (the kept-alive ``http.client`` pool of record traffic both use),
:mod:`.messages` (paths, produce bodies, fetch answers, error answers, result types),
:mod:`.paging` (how ``consume`` sizes its requests and pages), :mod:`.routing` (which
node a partition's requests go to, and the retry rules), :mod:`.partitioner` (which
partition a record goes to when none is named). Error classes are in
:mod:`tiered_log.errors`; this package imports nothing of the service.

Thread-safety: a :class:`Client` may be shared between threads (httpx.Client, the record
pools and the leader map are); an
:class:`AsyncClient` belongs to the event loop it is first used on.

Example::

    with Client("http://127.0.0.1:8080", token="s3cret") as c:  # or "http://n1:8080,http://n2:8080"
        c.create_topic("orders", partitions=3)
        offsets = c.produce("orders", 0, [b"one", "two", ProducerRecord(b"3", key=b"k")])
        batch = c.fetch("orders", 0, offsets[0])
        for rec in batch.records:
            print(rec.offset, rec.value)
        for page in c.consume("orders", 0, 0):  # every page to the end, pipelined
            print(page.next_offset, len(page.records))
"""

from __future__ import annotations

from ..errors import ConnectionFailedError, ServiceError
from ..partitioner import DefaultPartitioner, RecordMetadata, murmur2, partition_for_key
from .aio import AsyncClient
from .messages import (
    FetchedBatches,
    FetchResult,
    PartitionBounds,
    RequestNotSentError,
    encode_produce_body,
    error_from_response,
)
from .paging import FETCH_RECORDS
from .sync import Client

__all__ = [
    "FETCH_RECORDS",
    "AsyncClient",
    "Client",
    "ConnectionFailedError",
    "DefaultPartitioner",
    "FetchResult",
    "FetchedBatches",
    "PartitionBounds",
    "RecordMetadata",
    "RequestNotSentError",
    "ServiceError",
    "encode_produce_body",
    "error_from_response",
    "murmur2",
    "partition_for_key",
]
