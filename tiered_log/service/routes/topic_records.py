"""Produce to a topic without naming a partition (``POST /v1/topics/{topic}/records``):
the service partitions the records as a Kafka producer would, so a keyed record lands
where a Kafka client would put it and ``curl`` users need not know the partition count.

Each record goes to its ``partition`` when it names one, else by Kafka's default
partitioner (:mod:`tiered_log.partitioner`: murmur2 of the key; keyless records of
one request all to one sticky partition, the next request to the next). Each partition's
records are appended as one batch, all-or-nothing, the partitions side by side. In a
cluster, a partition this node does not lead is forwarded to its leader's partition
route with the node's own credentials (as Kafka's REST proxies forward to leaders), the
caller's grant having been checked here.

The answer lists each record's partition and offset in request order. As in Kafka,
partitions succeed or fail on their own: a record whose partition failed carries its
``error`` instead of an offset; when every partition failed the answer is the first
partition's error itself (status and JSON as the partition route's).

Concurrency: the handler runs on the event loop; JSON parsing and the appends run on the
broker's executors; forwarding uses an async HTTP client.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field, ValidationError

from ...errors import (
    InvalidArgumentError,
    InvalidRequestError,
    NotLeaderError,
    TieredLogError,
    status_of,
)
from ...format.records import ProducerRecord
from ...partitioner import DefaultPartitioner
from ..deps import JsonContent, State, TopicPath, WriteGrant, read_body
from ..error_mapping import error_response, validation_message
from ..openapi import errs
from ..wire import JSON, TopicProduceRequest, TopicRecordIn

router = APIRouter(tags=["records"])

_PARTITIONER = DefaultPartitioner()
"""The service's partitioner: its sticky partition per topic is shared by every request."""

_FORWARD_TIMEOUT_S = 60.0


class RecordError(BaseModel):
    code: str
    message: str
    retriable: bool


class RecordPlace(BaseModel):
    partition: int
    offset: int | None = Field(description="The record's offset; null when its partition failed.")
    error: RecordError | None = Field(None, description="Why the record's partition failed.")


class TopicProduceResponse(BaseModel):
    offsets: list[RecordPlace] = Field(description="Each record's place, in request order.")
    durable: bool = Field(
        description="Whether every appended record was fsynced before this answer."
    )


def _parse(body: bytes) -> tuple[list[TopicRecordIn], list[ProducerRecord]]:
    """The records of the body, as given and as they will be appended (in a worker
    thread: parsing and base64 cost CPU); InvalidRequestError naming the first bad one,
    before anything is appended."""
    try:
        given = TopicProduceRequest.model_validate_json(body).records
    except ValidationError as exc:
        raise InvalidRequestError(
            validation_message(exc.errors(include_url=False, include_input=False))
        ) from None
    out = []
    for i, rec in enumerate(given):
        try:
            out.append(rec.to_producer_record())
        except InvalidArgumentError as exc:
            raise InvalidRequestError(f"records.{i}: {exc.message}") from None
    return given, out


def _given(records: list[ProducerRecord]) -> list[ProducerRecord]:
    """The parse step of records already parsed."""
    return records


class _Failed(Exception):
    """A partition's produce failed: the error JSON and status to report."""

    def __init__(self, status: int, error: dict[str, Any], details: dict[str, Any] | None) -> None:
        super().__init__(error.get("message", ""))
        self.status = status
        self.error = error
        self.details = details


async def _forward(
    state: Any,
    leader_url: str,
    topic: str,
    partition: int,
    recs: list[TopicRecordIn],
    acks: str | None,
) -> tuple[int, int, bool]:
    """Send ``recs`` to the partition's leader; its first/last offsets and durability."""
    import httpx  # a cluster's only: a single node's server does not load it

    node = state.broker.cluster
    headers = dict(node.config.fetch_headers) if node is not None else {}
    body = {"records": [r.model_dump(exclude={"partition"}, exclude_unset=True) for r in recs]}
    url = f"{leader_url.rstrip('/')}/v1/topics/{topic}/partitions/{partition}/records"
    try:
        async with httpx.AsyncClient(timeout=_FORWARD_TIMEOUT_S, headers=headers) as c:
            r = await c.post(url, json=body, params={"acks": acks} if acks else None)
    except httpx.HTTPError as exc:
        raise _Failed(
            503,
            {
                "code": "unavailable",
                "message": f"partition {partition}'s leader at {leader_url} did not answer: {exc}",
                "retriable": True,
            },
            None,
        ) from None
    try:
        answer = r.json()
    except ValueError:
        answer = {}
    if r.status_code != 200:
        err = answer.get("error") if isinstance(answer, dict) else None
        if not isinstance(err, dict):
            err = {"code": "http_error", "message": f"HTTP {r.status_code}", "retriable": False}
        raise _Failed(r.status_code, err, err.get("details"))
    return int(answer["first_offset"]), int(answer["last_offset"]), bool(answer["durable"])


async def _produce_partition(
    state: Any,
    topic: str,
    partition: int,
    given: list[TopicRecordIn],
    records: list[ProducerRecord],
    acks: Literal["all", "1"] | None,
) -> tuple[int, int, bool]:
    """Append one partition's records here, or forward them to its leader."""
    broker = state.broker
    try:
        target = await broker.produce_target(topic, partition, acks)
    except NotLeaderError as exc:
        if exc.leader_url is None or broker.cluster is None:
            raise
        return await _forward(state, exc.leader_url, topic, partition, given, acks)
    done = await broker.append(target, _given, records)
    return done.first, done.last, done.durable


def _error_of(exc: BaseException) -> _Failed:
    if isinstance(exc, _Failed):
        return exc
    if isinstance(exc, TieredLogError):
        details: dict[str, Any] | None = None
        status = status_of(exc)
        if isinstance(exc, NotLeaderError):
            # No leader to forward to (an election is under way): the caller cannot
            # redirect a topic's produce, only try again.
            details = {"leader_id": exc.leader_id, "leader_url": exc.leader_url}
            status = 503
        return _Failed(
            status,
            {"code": exc.code, "message": exc.message, "retriable": exc.retriable},
            details,
        )
    raise exc  # not ours: the app's handler answers 500 and logs it


@router.post(
    "/v1/topics/{topic}/records",
    response_model=TopicProduceResponse,
    responses=errs(400, 401, 403, 404, 413, 415, 503),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {JSON: {"schema": {"$ref": "#/components/schemas/TopicProduceRequest"}}},
        }
    },
)
async def produce_to_topic(
    request: Request,
    topic: TopicPath,
    _: WriteGrant,
    _json: JsonContent,
    state: State,
    acks: Annotated[
        Literal["all", "1"] | None,
        Query(description="As for a partition's produce: `all` or `1` (cluster only)."),
    ] = None,
) -> Response:
    """Append JSON records to a topic, partitioned by the service (see the module
    docstring): `{"records": [{"key": "k", "value": "v", "partition"?: p}, ...]}` with
    each record as a partition's produce takes it. The answer lists each record's
    partition and offset, or its partition's error."""
    body = await read_body(request)
    recs, records = await asyncio.to_thread(_parse, body)
    await state.broker.partition(topic, 0)  # the topic exists (a cluster: applied here)
    count = state.topics.get(topic).meta.partitions
    for i, rec in enumerate(recs):
        if rec.partition is not None and rec.partition >= count:
            raise InvalidRequestError(
                f"records.{i}.partition: topic {topic!r} has {count} partition(s), 0 to {count - 1}"
            )
    placed: list[int] = [0] * len(recs)
    free = [i for i, r in enumerate(recs) if r.partition is None]
    for p, idxs in _PARTITIONER.assign(topic, [records[i] for i in free], count).items():
        for j in idxs:
            placed[free[j]] = p
    for i, rec in enumerate(recs):
        if rec.partition is not None:
            placed[i] = rec.partition
    by_partition: dict[int, list[int]] = {}
    for i, p in enumerate(placed):
        by_partition.setdefault(p, []).append(i)
    parts = sorted(by_partition)
    results = await asyncio.gather(
        *(
            _produce_partition(
                state,
                topic,
                p,
                [recs[i] for i in by_partition[p]],
                [records[i] for i in by_partition[p]],
                acks,
            )
            for p in parts
        ),
        return_exceptions=True,
    )
    offsets: list[dict[str, Any]] = [{} for _ in recs]
    durable = True
    failures: list[_Failed] = []
    for p, res in zip(parts, results, strict=True):
        if isinstance(res, BaseException):
            fail = _error_of(res)
            failures.append(fail)
            for i in by_partition[p]:
                offsets[i] = {"partition": p, "offset": None, "error": fail.error}
            continue
        first, _last, was_durable = res
        durable = durable and was_durable
        for n, i in enumerate(by_partition[p]):
            offsets[i] = {"partition": p, "offset": first + n}
    if len(failures) == len(parts):
        f = failures[0]
        return error_response(
            f.status,
            str(f.error.get("code", "error")),
            str(f.error.get("message", "")),
            retriable=bool(f.error.get("retriable", False)),
            details=f.details,
        )
    return Response(
        json.dumps({"offsets": offsets, "durable": durable}, separators=(",", ":")).encode(),
        media_type=JSON,
    )


__all__ = ["TopicProduceRequest", "TopicProduceResponse", "router"]
