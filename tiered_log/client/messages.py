"""What the clients send and read: paths, produce bodies, fetch answers, error answers.

Shared by :class:`~tiered_log.client.Client` and :class:`~tiered_log.client.AsyncClient`:

- requests: the paths of a topic and a partition, the query parameters of a fetch and of
  a raw produce, the binary produce body (:func:`encode_produce_body`: records as Kafka
  record batches, compressed or not, see :mod:`tiered_log.format.records`), the paths
  and bodies of the cluster and archive requests (reassign, restore, a topic's restore,
  scrub, anomalies, delete-records, remote segments) and which nodes a scrub asks, the
  auth header, httpx's ``verify``;
- answers: a binary fetch's records and offset headers (:func:`_parse_fetch`, every
  batch's CRC-32C verified, compressed batches decompressed), its batches as received
  (:func:`_checked_batches`, CRCs verified, nothing decoded: :class:`FetchedBatches`), :class:`FetchResult`,
  :class:`PartitionBounds`, and an error
  answer raised as its :class:`~tiered_log.errors.TieredLogError` subclass
  (:func:`error_from_response`, by the tree's :func:`~tiered_log.errors.error_class`),
  and a transport failure as ConnectionFailedError or, when nothing was sent,
  :class:`RequestNotSentError` (:func:`_transport_error`).

Everything here is pure (no I/O, no state): safe from any thread.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import quote

import httpx

from .. import errors as E
from ..bounds import PartitionBounds
from ..errors import ServiceError
from ..format.kafka import Compression
from ..format.records import (
    MAX_BODY_BYTES,
    ProducerRecord,
    Record,
    check_batches,
    decode_records,
    encode_batch,
)

_BINARY = "application/octet-stream"
_JSON = "application/json"
_FRAMES = "application/vnd.tiered-log.frames"
_FRAMES_HEADERS = {"Content-Type": _FRAMES}
_ACCEPT_BINARY = {"Accept": _BINARY}
_SERVER_CLOCK = -1
"""A record timestamp the server replaces with its own clock."""


def error_from_response(status: int, body: bytes) -> E.TieredLogError:
    """The library error for an HTTP error response (by its JSON ``code``)."""
    try:
        err = json.loads(body)["error"]
        code = str(err["code"])
        message = str(err.get("message", ""))
        retriable = bool(err.get("retriable", False))
        details = err.get("details") or {}
    except (ValueError, KeyError, TypeError):
        return ServiceError(f"HTTP {status} from the service", status=status, code="http_error")
    cls = E.error_class(code)
    exc: E.TieredLogError
    if cls is E.OffsetOutOfRangeError:
        exc = E.OffsetOutOfRangeError(
            message,
            log_start=int(details.get("log_start_offset", 0)),
            next_offset=int(details.get("next_offset", 0)),
        )
    elif cls is E.NotLeaderError:
        lid, url = details.get("leader_id"), details.get("leader_url")
        exc = E.NotLeaderError(
            message,
            leader_id=int(lid) if isinstance(lid, int) else None,
            leader_url=str(url) if url else None,
        )
    elif cls is E.FencedEpochError:
        exc = E.FencedEpochError(message, current_epoch=int(details.get("current_epoch", -1)))
    elif cls is None:
        exc = ServiceError(message, status=status, code=code)
    else:
        exc = cls(message)
    exc.retriable = retriable
    return exc


class RequestNotSentError(E.ConnectionFailedError):
    """A :class:`~tiered_log.errors.ConnectionFailedError` raised before any byte of the
    request was sent: the connection was refused, or could not be made in time. Nothing
    reached the server, so sending the request again (to this node or another) cannot
    repeat its effect; the clients' routing retries it (:mod:`tiered_log.client.routing`).
    A connection that broke later raises a plain ConnectionFailedError."""


def _transport_error(url: str, exc: httpx.TransportError) -> E.ConnectionFailedError:
    """The error for an httpx transport failure talking to ``url``: RequestNotSentError
    when the connection could not be made (not for a TLS failure: a certificate another
    try would refuse again)."""
    msg = f"cannot reach {url}: {exc}"
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout) and not _tls_failure(exc):
        return RequestNotSentError(msg)
    return E.ConnectionFailedError(msg)


def _tls_failure(exc: BaseException) -> bool:
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return False
        if isinstance(seen, ssl.SSLError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _check(resp: httpx.Response) -> httpx.Response:
    if resp.status_code >= 400:
        raise error_from_response(resp.status_code, resp.content)
    return resp


@dataclass(frozen=True, slots=True)
class FetchResult:
    """Records of one fetch and where to continue."""

    records: list[Record]
    next_offset: int
    high_watermark: int
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class FetchedBatches:
    """One binary fetch's Kafka record batches as the server stores and sends them, each
    batch's CRC-32C verified, nothing decoded (no :class:`Record` built): what a
    follower, a rebuild or a columnar reader passes on or decodes itself.

    ``data`` holds whole batches; the first may begin below ``first_offset`` (skip its
    records below it). It is a view of the buffer the answer was received into: the
    caller's ``buffer`` when it was given and large enough (then valid until that
    buffer is reused), else a buffer of its own."""

    data: memoryview
    first_offset: int
    """The offset asked for."""
    next_offset: int
    """Where the next fetch continues (``first_offset`` when the page is empty)."""
    batch_count: int
    high_watermark: int
    log_start_offset: int

    @property
    def record_count(self) -> int:
        """Records from ``first_offset`` up to ``next_offset``."""
        return self.next_offset - self.first_offset


def _topic_path(topic: str) -> str:
    return f"/v1/topics/{quote(topic, safe='')}"


def _part_path(topic: str, partition: int) -> str:
    return f"{_topic_path(topic)}/partitions/{int(partition)}"


Codec = Compression | str | None
"""A produce's compression: ``none``, ``gzip``, ``snappy``, ``lz4``, ``zstd`` (a name or a
:class:`~tiered_log.format.kafka.Compression`); None: none."""


def compression_of(codec: Codec) -> Compression:
    """The :class:`~tiered_log.format.kafka.Compression` ``codec`` names
    (InvalidArgumentError for an unknown one)."""
    try:
        return Compression.parse(codec)
    except ValueError as exc:
        raise E.InvalidArgumentError(str(exc)) from None


def encode_produce_body(
    records: Iterable[ProducerRecord | bytes | str], compression: Codec = None
) -> bytes:
    """The body of a binary produce request: ``records`` as Kafka record batches, their
    records compressed with ``compression`` (see :data:`Codec`; the server stores the
    batches as they are sent, compressed).

    ``str`` values are UTF-8 encoded; a record without a timestamp gets the server's
    clock; a :class:`ProducerRecord` whose value is None is a null value (a tombstone).
    The offsets in the batches are 0, 1, ... (the server assigns the real ones); value
    sizes are checked by the server (against the topic's append threshold).
    InvalidArgumentError for records no log accepts (wrong types) or an unknown codec.

    The encoder's own ``bytes``, not a copy: a second 1 MiB buffer a batch (and the
    fresh pages the kernel faulted in for it every time) cost the client ~1 ms a batch.
    """
    codec = compression_of(compression)
    items: list[ProducerRecord | bytes]
    if isinstance(records, list) and records and set(map(type, records)) == {bytes}:
        items = cast("list[ProducerRecord | bytes]", records)  # bare values: as they are
    else:
        items = []
        for r in records:
            if isinstance(r, bytes | ProducerRecord):
                items.append(r)
            elif isinstance(r, str):
                try:
                    items.append(r.encode("utf-8"))
                except UnicodeEncodeError:
                    raise E.InvalidArgumentError("a text value is not encodable as UTF-8") from None
            elif isinstance(r, bytearray | memoryview):
                items.append(bytes(r))
            else:
                raise E.InvalidArgumentError(
                    f"records must be ProducerRecord, bytes or str, not {type(r).__name__}"
                )
    if not items:
        raise E.InvalidArgumentError("a batch needs at least one record")
    encoded = encode_batch(0, items, _SERVER_CLOCK, MAX_BODY_BYTES, compression=codec)
    return bytes(encoded.data)  # a bytearray when uncompressed: the body is bytes


def _fetch_headers(resp: httpx.Response) -> tuple[int, int, int, int]:
    """``(record count, next offset, high watermark, log start)`` of a binary fetch response."""
    return _offset_headers(resp.headers, resp.status_code)


def _offset_headers(h: httpx.Headers, status: int) -> tuple[int, int, int, int]:
    """``(record count, next offset, high watermark, log start)`` from a binary fetch
    answer's headers."""
    try:
        return (
            int(h["x-record-count"]),
            int(h["x-next-offset"]),
            int(h["x-high-watermark"]),
            int(h["x-log-start-offset"]),
        )
    except (KeyError, ValueError):
        raise ServiceError(
            "fetch response lacks its offset headers", status=status, code="bad_response"
        ) from None


def _checked_batches(headers: httpx.Headers, data: memoryview, offset: int) -> FetchedBatches:
    """A binary fetch answer's batches, checked (:func:`check_batches`: each checksum,
    the offsets following on from ``offset``) and against its headers."""
    count, nxt, hw, start = _offset_headers(headers, 200)
    batches, end = check_batches(data, offset)
    if end != nxt or count != nxt - offset:
        raise E.CorruptRecordError(
            f"fetch response holds batches from offset {offset} up to {end}, its headers say "
            f"{count} records up to {nxt}"
        )
    return FetchedBatches(data, offset, nxt, batches, hw, start)


def _parse_fetch(resp: httpx.Response, offset: int, limit: int | None) -> FetchResult:
    """The records at and after ``offset`` of a binary fetch response, at most ``limit``
    of them (then ``next_offset`` follows the last one kept)."""
    count, nxt, hw, start = _fetch_headers(resp)
    body = resp.content
    recs, pos, _ = decode_records(body, start_offset=offset)
    if pos != len(body):
        raise E.CorruptRecordError(
            f"fetch response ends inside a batch (byte {pos} of {len(body)})"
        )
    if count != len(recs) or (recs and (recs[0].offset != offset or recs[-1].offset + 1 != nxt)):
        raise E.CorruptRecordError(
            f"fetch response holds {len(recs)} records from offset {offset}, not {count} up to {nxt}"
        )
    if limit is not None and len(recs) > limit:
        del recs[limit:]
        nxt = offset + limit
    return FetchResult(recs, nxt, hw, start)


def _topic_body(
    name: str,
    partitions: int,
    config: dict[str, Any] | None,
    replication_factor: int | None,
    min_insync_replicas: int | None,
) -> dict[str, Any]:
    """The body of ``POST /v1/topics`` (the cluster fields only when given)."""
    body: dict[str, Any] = {"name": name, "partitions": partitions, "config": config or {}}
    if replication_factor is not None:
        body["replication_factor"] = replication_factor
    if min_insync_replicas is not None:
        body["min_insync_replicas"] = min_insync_replicas
    return body


REASSIGN_PATH = "/v1/cluster/reassign"
RESTORE_PATH = "/v1/cluster/restore"
TOPIC_RESTORE_PATH = "/v1/archive/restore"
ANOMALIES_PATH = "/v1/archive/anomalies"
SCRUB_PATH = "/v1/archive/scrub"


def _alter_body(
    config: dict[str, Any] | None,
    delete_config: list[str] | None,
    remote_disable_policy: str | None,
    partitions: int | None,
) -> dict[str, Any]:
    """The body of ``PATCH /v1/topics/{name}`` (see ``Client.alter_topic``)."""
    body: dict[str, Any] = {"config": config or {}, "delete_config": delete_config or []}
    if remote_disable_policy is not None:
        body["remote_disable_policy"] = remote_disable_policy
    if partitions is not None:
        body["partitions"] = partitions
    return body


def _segments_path(topic: str, partition: int) -> str:
    """A partition's finished remote segments (``GET``)."""
    return f"{_part_path(topic, partition)}/remote-segments"


def _delete_records_path(topic: str, partition: int) -> str:
    """A partition's DeleteRecords (``POST``)."""
    return f"{_part_path(topic, partition)}/delete-records"


def _reassign_body(from_node: int, to_node: int) -> dict[str, int]:
    """The body of ``POST /v1/cluster/reassign``."""
    return {"from_node": from_node, "to_node": to_node}


def _restore_body(
    topics: list[str] | None,
    replication_factor: int | None,
    min_insync_replicas: int | None,
    to_timestamp: int | None,
) -> dict[str, Any]:
    """The body of ``POST /v1/cluster/restore`` (the fields given only)."""
    body: dict[str, Any] = {
        "topics": topics,
        "replication_factor": replication_factor,
        "min_insync_replicas": min_insync_replicas,
        "to_timestamp": to_timestamp,
    }
    return {k: v for k, v in body.items() if v is not None}


def _restore_topic_body(
    topic: str, as_topic: str, to_timestamp: int | None, to_offset: int | None
) -> dict[str, Any]:
    """The body of ``POST /v1/archive/restore`` (the limits given only)."""
    body: dict[str, Any] = {"topic": topic, "as_topic": as_topic}
    if to_timestamp is not None:
        body["to_timestamp"] = to_timestamp
    if to_offset is not None:
        body["to_offset"] = to_offset
    return body


def _topic_filter(topic: str | None) -> dict[str, str]:
    """``{"topic": topic}``, or nothing for every topic: the anomalies' query, a scrub's body."""
    return {} if topic is None else {"topic": topic}


def _json_object(resp: httpx.Response) -> dict[str, Any]:
    """A JSON answer's object."""
    return dict(resp.json())


def _scrub_targets(cluster: dict[str, Any]) -> list[tuple[int, str]]:
    """``(node_id, url)`` of each live node of a ``GET /v1/cluster`` answer: the nodes a
    scrub asks."""
    return [
        (int(n["node_id"]), str(n["url"]))
        for n in cluster["nodes"]
        if n["alive"] and n["url"] is not None
    ]


def _scrub_report(node_id: int | None, url: str | None, resp: httpx.Response) -> dict[str, Any]:
    """One node's entry of a scrub's answer, ``{"node_id", "url", "report"}`` (a single
    node: ``node_id`` None, ``url`` the one that answered)."""
    if url is None:
        url = str(resp.url).removesuffix(SCRUB_PATH)
    return {"node_id": node_id, "url": url, "report": resp.json()}


def _fetch_params(offset: int, max_records: int, max_bytes: int, wait_ms: int) -> dict[str, int]:
    return {
        "offset": offset,
        "max_records": max_records,
        "max_bytes": max_bytes,
        "wait_ms": wait_ms,
    }


def _acks_params(acks: str | None) -> dict[str, int | str] | None:
    """The ``acks`` query parameter of a produce (``all`` or ``1``), when given."""
    if acks is None:
        return None
    if acks not in ("all", "1"):
        raise E.InvalidArgumentError(f"acks must be 'all' or '1', not {acks!r}")
    return {"acks": acks}


def _raw_params(
    key: bytes | str | None, timestamp: int | None, acks: str | None = None
) -> dict[str, str | int]:
    params: dict[str, str | int] = dict(_acks_params(acks) or {})
    if key is not None:
        params["key"] = key.decode("utf-8") if isinstance(key, bytes) else key
    if timestamp is not None:
        params["timestamp"] = timestamp
    return params


def _verify(verify: bool | str | ssl.SSLContext) -> bool | ssl.SSLContext:
    """httpx's ``verify``: a CA bundle path becomes an SSL context."""
    if isinstance(verify, str):
        return ssl.create_default_context(cafile=verify)
    return verify


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


__all__ = [
    "Codec",
    "FetchResult",
    "FetchedBatches",
    "PartitionBounds",
    "RequestNotSentError",
    "compression_of",
    "encode_produce_body",
    "error_from_response",
]
