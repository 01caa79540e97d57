"""Routes of a partition's records: produce (``POST .../records``) and fetch (``GET``).

Produce takes three bodies (see :data:`_PRODUCE_DOC`): a JSON batch, one raw
``application/octet-stream`` record streamed in, or Kafka record batches
(``application/vnd.tiered-log.frames``, the stored layout: each batch verified and
stored as sent, its base offset written in place; the fast form the Python client uses; see
:mod:`tiered_log.service.wire`; its body is read into one buffer that is verified,
rebased and written as it is: :func:`~tiered_log.service.produce.receive_body`). A JSON
body must say so: ``application/json`` or
``application/*+json``; any other type, or none, is 415 (a missing type is never read as
JSON: a web page could send that cross-origin without a CORS preflight). The body is
parsed and appended in one call on the broker's append executor
(:meth:`Broker.append <tiered_log.broker.Broker.append>`), which then wakes the
partition's long polls.

Fetch answers JSON, or the stored record batches as they are when ``Accept`` prefers
``application/octet-stream`` (:func:`wants_binary`); the batches come from
:mod:`tiered_log.broker.reads` as places in files, sent from there with ``sendfile``
(:class:`~tiered_log.service.zerocopy.RangesResponse`), read through
:meth:`Broker.fetch <tiered_log.broker.Broker.fetch>`, which parks a long poll at the
end of the log.

Concurrency: handlers run on the event loop; reading bodies is async; parsing,
appending and reading the log run on the broker's executors.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from ...broker.append import Parse
from ...broker.reads import FrameBatch, fetch_frames, fetch_records
from ...broker.topics import PartitionLog
from ...config import MAX_INT
from ...errors import InvalidRequestError, UnsupportedMediaTypeError
from ...format.records import ProducerRecord
from ..deps import (
    PartitionPath,
    ReadGrant,
    State,
    TopicPath,
    WriteGrant,
    is_json,
    media_type,
    read_body,
    read_value,
)
from ..openapi import errs
from ..produce import (
    one_record,
    parse_batch,
    parse_frames,
    receive_body,
)
from ..wire import (
    BINARY,
    FRAMES,
    H_HIGH_WATERMARK,
    H_LOG_START,
    H_NEXT_OFFSET,
    H_RECORD_COUNT,
    JSON,
    MAX_OFFSET,
    FetchResponse,
    ProduceResponse,
    record_to_json,
)
from ..zerocopy import RangesResponse

router = APIRouter(tags=["records"])

_PRODUCE_DOC = """Append records to a partition.

Three forms:

* `Content-Type: application/vnd.tiered-log.frames` (the fast binary form): the body is
  Kafka record batches (magic 2, exactly as Kafka's protocol defines them: i64 base
  offset, i32 batch length, i32 partition leader epoch, i8 magic, u32 CRC-32C,
  attributes, ..., then the varint-encoded records, compressed with gzip, snappy, lz4 or
  zstd or not; big-endian), the same a binary fetch returns. Every batch is verified
  (framing, CRC-32C, its records parse after decompression) and stored as sent,
  compression included: the log writes only each batch's base offset (and partition
  leader epoch) in place; the base offsets sent are ignored. Transactional and control
  batches are refused. A bad or truncated batch is 400 naming it, and nothing is
  stored. A timestamp of -1 means the server's clock. At most 10,000 records; each
  value bounded by the topic's `append_threshold` (413, nothing stored); an empty body
  is 400. Appended all-or-nothing, as sent.
* `Content-Type: application/json` (or `application/*+json`; a body without a
  Content-Type is 415, never read as JSON): a batch
  `{"records": [{"value": "text"} | {"value_b64": "..."}, ...]}` (a value may be `null`,
  a tombstone, or empty `""`: both are kept as given); each record may also have `key`
  (text; `null`: no key; `""`: an empty key) or `key_b64`, `headers` (`{"name": "text"}` or
  `[{"name": "n", "value_b64": "..."}]`) and `timestamp` (ms). The batch is appended
  all-or-nothing at consecutive offsets.
* `Content-Type: application/octet-stream`: the body, streamed, is the value of ONE
  record (key and timestamp from the query). Bounded by the topic's `append_threshold`:
  past it the answer is 413 and nothing is stored.

The answer comes once the records are durable per the topic's flush policy
(`flush_messages=1`, the default: fsynced); `durable` says whether they were fsynced.
"""

_FETCH_DOC = """Read records from `offset` on (from either tier), at most `max_records` and
about `max_bytes` (at least one record when there is one).

JSON by default: record bytes as text when valid UTF-8 (`value`, `key`, header `value`),
else base64 (`value_b64`, ...); `value` and `value_b64` both null is a null value (a
tombstone), `"value": ""` an empty one. With `Accept: application/octet-stream` the body
is the Kafka record batches (magic 2) exactly as stored, compressed ones as their
producer sent them, and the headers X-Next-Offset, X-High-Watermark, X-Log-Start-Offset, X-Record-Count
carry the offsets. As in Kafka the body is whole batches: the first may hold records
below `offset` (skip them) and the last may run past `max_records`; X-Record-Count
counts the records from `offset` to X-Next-Offset.

At exactly the next offset the answer is empty; `wait_ms` > 0 then waits up to that long
for new records. An offset below the log start or past the next offset is 416 with
both bounds in `error.details`.
"""


@router.post(
    "/v1/topics/{topic}/partitions/{partition}/records",
    response_model=ProduceResponse,
    description=_PRODUCE_DOC,
    responses=errs(400, 401, 403, 404, 413, 415, 503),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                JSON: {"schema": {"$ref": "#/components/schemas/ProduceRequest"}},
                BINARY: {"schema": {"type": "string", "format": "binary"}},
                FRAMES: {
                    "schema": {
                        "type": "string",
                        "format": "binary",
                        "description": "Kafka record batches, magic 2 (see the description).",
                    }
                },
            },
        }
    },
)
async def produce(
    request: Request,
    topic: TopicPath,
    partition: PartitionPath,
    _: WriteGrant,
    state: State,
    key: Annotated[str | None, Query(description="Key (text) of a raw-body record.")] = None,
    timestamp: Annotated[
        int | None, Query(ge=0, le=MAX_INT, description="Timestamp (ms) of a raw-body record.")
    ] = None,
    acks: Annotated[
        Literal["all", "1"] | None,
        Query(
            description="In a cluster: `all` answers once every in-sync replica has the "
            "records (the default when the topic has replicas), `1` once the leader has them. "
            "A single node has only itself: both mean the local log."
        ),
    ] = None,
) -> Response:
    manager = state.topics
    broker = state.broker
    target = await broker.produce_target(topic, partition, acks)
    media = media_type(request)
    # Each form ends in a parse step that runs with the append in ONE worker-thread
    # call (parse_and_append): decoding costs CPU, and one thread hop is cheaper.
    parse: Parse
    args: tuple[Any, ...]
    if media == BINARY:
        limit = manager.get(topic).meta.config.append_threshold
        value = await read_value(request, limit)
        kb = None
        if key is not None:
            try:
                kb = key.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidRequestError("key is not valid text") from None
        parse, args = one_record, (ProducerRecord(value, kb, (), timestamp),)
    elif media == FRAMES:
        if key is not None or timestamp is not None:
            raise InvalidRequestError(
                "key and timestamp query parameters are for raw bodies; a batch carries its own"
            )
        limit = manager.get(topic).meta.config.append_threshold
        frames = await receive_body(request)  # one buffer, verified and rebased in place
        if not frames:
            raise InvalidRequestError("the body holds no record batches")
        parse, args = parse_frames, (frames, limit)
    elif is_json(media):
        if key is not None or timestamp is not None:
            raise InvalidRequestError(
                "key and timestamp query parameters are for raw bodies; "
                "give them per record in a JSON batch"
            )
        body = await read_body(request)
        parse, args = parse_batch, (body,)
    else:
        raise UnsupportedMediaTypeError(
            f"Content-Type must be {JSON}, {FRAMES} or {BINARY}, not {media or 'missing'!r}"
        )
    done = await broker.append(target, parse, *args)
    first, last = done.first, done.last
    # Built here rather than validated against ProduceResponse (the documented model):
    # the offsets list of a big batch made that validation a visible cost.
    return Response(
        json.dumps(
            {
                "offsets": list(range(first, last + 1)),
                "first_offset": first,
                "last_offset": last,
                "durable": done.durable,
            },
            separators=(",", ":"),
        ).encode(),
        media_type=JSON,
    )


def wants_binary(accept: str | None) -> bool:
    """Whether ``Accept`` prefers the binary (record batches) form over JSON."""
    if not accept:
        return False
    q_bin = 0.0
    q_json = 0.0
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        media = fields[0].lower()
        q = 1.0
        for f in fields[1:]:
            if f.lower().startswith("q="):
                try:
                    q = float(f[2:])
                except ValueError:
                    q = 0.0
        if media == BINARY:
            q_bin = max(q_bin, q)
        elif media == JSON:
            q_json = max(q_json, q)
    return q_bin > 0 and q_bin >= q_json


def _json_fetch(
    plog: PartitionLog, offset: int, max_records: int, max_bytes: int, upto: int | None
) -> tuple[bytes, int, int]:
    """The JSON fetch body (built in a worker thread: base64 and JSON cost CPU), the
    record count and the records' frame bytes."""
    recs, b = fetch_records(plog, offset, max_records, max_bytes, upto)
    body = json.dumps(
        {
            "records": [record_to_json(r) for r in recs],
            "next_offset": recs[-1].offset + 1 if recs else offset,
            "high_watermark": b.high_watermark,
            "log_start_offset": b.log_start_offset,
        },
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode("utf-8")
    return body, len(recs), sum(r.size for r in recs)


@router.get(
    "/v1/topics/{topic}/partitions/{partition}/records",
    description=_FETCH_DOC,
    response_model=None,
    responses={
        200: {
            "model": FetchResponse,
            "description": "Records (JSON, or Kafka record batches as stored)",
            "content": {BINARY: {"schema": {"type": "string", "format": "binary"}}},
            "headers": {
                h: {"schema": {"type": "integer"}, "description": "Binary form only"}
                for h in (H_NEXT_OFFSET, H_HIGH_WATERMARK, H_LOG_START, H_RECORD_COUNT)
            },
        },
        **errs(400, 401, 403, 404, 410, 416, 503),
    },
)
async def fetch(
    request: Request,
    topic: TopicPath,
    partition: PartitionPath,
    _: ReadGrant,
    state: State,
    offset: Annotated[int, Query(ge=0, le=MAX_OFFSET, description="First offset to read.")],
    max_records: Annotated[int, Query(ge=1, le=10_000)] = 500,
    max_bytes: Annotated[
        int, Query(ge=1, le=(1 << 31) - 1, description="Capped by the server's max_fetch_bytes.")
    ] = 1 << 20,
    wait_ms: Annotated[
        int,
        Query(ge=0, le=30_000, description="At the end of the log, wait this long for records."),
    ] = 0,
) -> Response:
    max_bytes = min(max_bytes, state.settings.max_fetch_bytes)
    m = state.metrics
    broker = state.broker
    if wants_binary(request.headers.get("accept")):

        def frames(plog: PartitionLog, upto: int | None) -> FrameBatch:
            return fetch_frames(plog, offset, max_records, max_bytes, upto)

        fb = await broker.fetch(topic, partition, frames, lambda r: r.fetched.count == 0, wait_ms)
        m.fetch_requests.inc(topic, "binary")
        page, b = fb.fetched, fb.bounds
        m.fetch_records.inc(topic, amount=page.count)
        m.fetch_bytes.inc(topic, amount=page.size)
        return RangesResponse(
            page,
            media_type=BINARY,
            headers={
                H_NEXT_OFFSET: str(page.next_offset),
                H_HIGH_WATERMARK: str(b.high_watermark),
                H_LOG_START: str(b.log_start_offset),
                H_RECORD_COUNT: str(page.count),
            },
        )

    def records(plog: PartitionLog, upto: int | None) -> tuple[bytes, int, int]:
        return _json_fetch(plog, offset, max_records, max_bytes, upto)

    body, count, size = await broker.fetch(topic, partition, records, lambda r: r[1] == 0, wait_ms)
    m.fetch_requests.inc(topic, "json")
    m.fetch_records.inc(topic, amount=count)
    m.fetch_bytes.inc(topic, amount=size)
    return Response(body, media_type=JSON)


__all__ = ["router", "wants_binary"]
