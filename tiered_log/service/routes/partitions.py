"""Routes of a partition's offsets and bounds: ``offsets`` (offset for a timestamp),
``bounds``, ``remote-segments`` (what a reader needs to fetch archived segments from the
bucket itself) and ``truncate`` (needs ``admin``), all under
``/v1/topics/{topic}/partitions/{partition}/``.

Concurrency: handlers run on the event loop; every log call (index lookups, reading
remote-index files, truncation) runs in a worker thread
(:func:`~tiered_log.service.deps.run_log_call`).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from ...bounds import PartitionBounds
from ...broker.topics import PartitionLog, partition_bounds
from ...errors import InvalidArgumentError
from ..deps import (
    AdminGrant,
    JsonContent,
    PartitionPath,
    ReadGrant,
    State,
    TopicPath,
    partition_log,
    run_log_call,
)
from ..openapi import errs
from ..state import ServiceState
from ..wire import Bounds, BoundsDetail, DeleteRecordsRequest, OffsetForTimestamp, TruncateRequest

router = APIRouter(tags=["records"])


@router.get(
    "/v1/topics/{topic}/partitions/{partition}/offsets",
    response_model=OffsetForTimestamp,
    responses=errs(400, 401, 403, 404, 503),
)
async def offset_for_timestamp(
    topic: TopicPath,
    partition: PartitionPath,
    timestamp: Annotated[int, Query(ge=-(1 << 62), le=1 << 62, description="Milliseconds.")],
    _: ReadGrant,
    state: State,
) -> dict[str, Any]:
    """The first offset whose record timestamp is at or after ``timestamp`` (null if
    none: then consume from ``next_offset``)."""
    plog = await _leader_log(state, topic, partition)
    found = await run_log_call(state, topic, plog.offset_for_timestamp, timestamp)
    b = await run_log_call(state, topic, partition_bounds, plog)
    if state.cluster is not None:  # a consumer sees committed records only
        if found is not None and found >= b.high_watermark:
            found = None
        return {"timestamp": timestamp, "offset": found, "next_offset": b.high_watermark}
    return {"timestamp": timestamp, "offset": found, "next_offset": b.next_offset}


def tiering_fields(plog: PartitionLog, b: PartitionBounds) -> dict[str, int]:
    """The remote tier's end and the copy lag of a partition (:class:`TieringFields
    <tiered_log.service.wire.TieringFields>`; in a worker thread: one pass over the local
    segments)."""
    st = plog.stats()
    end = b.remote_end_offset
    return {
        "remote_end_offset": b.local_start_offset if end is None else end,
        "copy_lag_bytes": int(st["copy_lag_bytes"]),
        "copy_lag_segments": int(st["copy_lag_segments"]),
    }


def _bounds_detail(plog: PartitionLog) -> dict[str, Any]:
    b = partition_bounds(plog)
    return {**b.as_dict(), **tiering_fields(plog, b), "lost_offsets": plog.lost_offsets()}


@router.get(
    "/v1/topics/{topic}/partitions/{partition}/bounds",
    response_model=BoundsDetail,
    responses=errs(400, 401, 403, 404, 503),
)
async def bounds(
    topic: TopicPath, partition: PartitionPath, _: ReadGrant, state: State
) -> dict[str, Any]:
    """Log start, local start, high watermark, next and flushed offsets; then the remote
    tier's end, the copy lag (sealed segments not shipped yet) and the lost ranges."""
    plog = await _leader_log(state, topic, partition)
    return await run_log_call(state, topic, _bounds_detail, plog)


@router.get(
    "/v1/topics/{topic}/partitions/{partition}/anomalies",
    responses=errs(400, 401, 403, 404),
)
async def anomalies(
    topic: TopicPath, partition: PartitionPath, _: ReadGrant, state: State
) -> dict[str, Any]:
    """What this node's scrubber found in the partition the last time a pass covered it
    (its local segments; its archived copies when this node leads it), each damaged
    segment with its tier, offsets, object or file, problems, when it was found and
    whether it was repaired (``repair``: from where, or why not). ``checked`` false: no
    pass has covered it yet (run one: ``POST /v1/archive/scrub``)."""
    await partition_log(state, topic, partition)  # 404 for an unknown topic or partition
    scrubber = state.scrubber
    found = scrubber.found if scrubber is not None else {}
    return {
        "topic": topic,
        "partition": partition,
        "checked": (topic, partition) in found,
        "anomalies": scrubber.partition_anomalies(topic, partition) if scrubber else [],
    }


async def _leader_log(state: ServiceState, topic: str, partition: int) -> PartitionLog:
    """The partition's log; in a cluster only on its leader (421 ``not_leader`` naming
    it elsewhere): a follower's bounds and remote view lag the leader's."""
    plog = await partition_log(state, topic, partition)
    if state.cluster is not None:
        state.cluster.leader_of(topic, partition)
    return plog


def _remote_segments(plog: PartitionLog) -> dict[str, Any]:
    """The body of ``GET .../remote-segments`` (in a worker thread: reads index files).

    Segments are a snapshot of the finished copies, clipped to ``[log_start_offset,
    remote_end_offset)``; a log without a remote tier has none.
    """
    b = partition_bounds(plog)
    url, end, segments = plog.remote_segments(b.log_start_offset)
    return {
        "log_id": plog.log_id,
        "remote_url": url,
        "log_start_offset": b.log_start_offset,
        "local_start_offset": b.local_start_offset,
        "remote_end_offset": b.log_start_offset if end is None else end,
        "high_watermark": b.high_watermark,
        "next_offset": b.next_offset,
        "segments": segments,
    }


@router.get(
    "/v1/topics/{topic}/partitions/{partition}/remote-segments",
    responses=errs(400, 401, 403, 404, 503),
)
async def remote_segments(
    topic: TopicPath, partition: PartitionPath, _: ReadGrant, state: State
) -> dict[str, Any]:
    """The partition's bounds and its finished remote segments, each with its ``.log``
    object key and its remoteLogIndex chunks ``[first_offset, last_offset,
    first_timestamp, last_timestamp, position, length]``: what a reader (the Spark
    source) needs to fetch archived records from the bucket itself with ranged GETs,
    without listing it. Object keys are relative to ``remote_url``."""
    plog = await _leader_log(state, topic, partition)
    return await run_log_call(state, topic, _remote_segments, plog)


@router.post(
    "/v1/topics/{topic}/partitions/{partition}/truncate",
    response_model=Bounds,
    responses=errs(400, 401, 403, 404, 415, 416, 503),
)
async def truncate(
    body: TruncateRequest,
    topic: TopicPath,
    partition: PartitionPath,
    _: AdminGrant,
    _json: JsonContent,
    state: State,
) -> dict[str, Any]:
    """Remove every record at and after ``offset`` (needs ``admin``); returns the new
    bounds. ``offset`` must be within ``[log_start_offset, next_offset]``."""
    plog = await partition_log(state, topic, partition)
    state.topics.check_writable(f"cannot truncate {topic}/{partition}")
    if state.cluster is not None:
        raise InvalidArgumentError(
            "truncate is not offered in a cluster yet: the replicas would have to truncate together"
        )
    await run_log_call(state, topic, plog.truncate, body.offset)
    b = await run_log_call(state, topic, partition_bounds, plog)
    return b.as_dict()


@router.post(
    "/v1/topics/{topic}/partitions/{partition}/delete-records",
    response_model=Bounds,
    responses=errs(400, 401, 403, 404, 415, 416, 503),
)
async def delete_records(
    body: DeleteRecordsRequest,
    topic: TopicPath,
    partition: PartitionPath,
    _: AdminGrant,
    _json: JsonContent,
    state: State,
) -> dict[str, Any]:
    """Delete every record below ``before_offset`` (Kafka's DeleteRecords; needs
    ``admin``): the partition's log start moves up to it (-1: the high watermark), reads
    below answer 416, and the segments and archived copies wholly below are deleted; in a
    cluster at the leader only (421 elsewhere), answered once the in-sync followers have
    the new start. Returns the new bounds; 416 above the high watermark."""
    await state.broker.delete_records(topic, partition, body.before_offset)  # leader checked
    plog = await partition_log(state, topic, partition)
    b = await run_log_call(state, topic, partition_bounds, plog)
    return b.as_dict()


__all__ = ["router", "tiering_fields"]
