"""Routes of the archive: ``POST /v1/archive/restore`` (a point-in-time restore of a
topic as a new topic, :mod:`tiered_log.service.restoring`), ``POST /v1/archive/scrub``
(one scrub pass of this node now, :mod:`tiered_log.service.scrubbing`) and ``GET
/v1/archive/anomalies`` (what the scrubber found,
:meth:`~tiered_log.remote.scrub.Scrubber.anomalies`).

A restore needs ``admin`` on every topic (it reads one topic whole and creates
another), a scrub ``admin`` on the topic (it may repair); both run in a worker thread
(bucket and disk I/O) and answer once done. The anomalies are those of the topics the
token has any grant on, read from the scrubber's last reports (no I/O).
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from ..deps import Authenticated, JsonContent, State
from ..openapi import errs

router = APIRouter(tags=["archive"])


class RestoreTopicRequest(BaseModel):
    """``POST /v1/archive/restore``."""

    model_config = ConfigDict(extra="forbid")

    topic: str = Field(description="The topic restored from (in the bucket, or this service's).")
    as_topic: str = Field(description="The new topic; must not exist.")
    to_timestamp: int | None = Field(
        default=None,
        ge=0,
        description="Keep the records up to the first one later than this (ms since the epoch).",
    )
    to_offset: int | None = Field(
        default=None, ge=0, description="Keep the records below this offset (each partition)."
    )


@router.post("/v1/archive/restore", responses=errs(400, 401, 403, 404, 409, 502, 503))
async def restore_topic(
    body: RestoreTopicRequest,
    principal: Authenticated,
    _json: JsonContent,
    state: State,
) -> dict[str, Any]:
    """Point-in-time restore: make ``as_topic`` holding exactly ``topic``'s records up
    to the restore point (offsets, timestamps and producer fields kept; a batch cut
    inside is written again), from the bucket and this node's unshipped tail, then
    serve it (readable, and writable after its restored end). Answers the report:
    per partition the log start, the restore end and how each copy was made."""
    state.auth.authorize(principal, "*", "admin")
    from ..restoring import restore_topic as run  # loads the restore code on first use

    return await asyncio.to_thread(
        run,
        state.settings,
        state.topics,
        state.cluster,
        body.topic,
        body.as_topic,
        body.to_timestamp,
        body.to_offset,
    )


class ScrubRequest(BaseModel):
    """``POST /v1/archive/scrub``."""

    model_config = ConfigDict(extra="forbid")

    topic: str | None = Field(default=None, description="Only this topic (default: every one).")


@router.post("/v1/archive/scrub", responses=errs(400, 401, 403, 404, 502, 503))
async def scrub_now(
    body: ScrubRequest, principal: Authenticated, _json: JsonContent, state: State
) -> dict[str, Any]:
    """Run one scrub pass of this node now (both tiers of every partition it holds, or
    of ``topic``'s; archived copies of the partitions it leads), repairing damage from a
    good copy, and answer its report: counts, bytes read and each damaged segment with
    its tier, problems and repair (``repaired``; ``repair`` says from where or why not).
    Waits for a background pass under way first. ``admin`` on the topic (every topic
    without one)."""
    state.auth.authorize(principal, body.topic if body.topic is not None else "*", "admin")
    scrubber = state.scrubber
    assert scrubber is not None  # the lifespan makes it before the app serves
    rep = await asyncio.to_thread(scrubber.run_now, body.topic)
    return rep.to_json()


class ScrubPass(BaseModel):
    """One scrub pass: when, and what it checked and found."""

    started_ms: int = Field(description="When the pass began (ms since the epoch).")
    finished_ms: int | None = Field(description="When it ended (null: under way).")
    segments_total: int = Field(description="Segments (either tier) the pass has to check.")
    segments_checked: int
    segments_damaged: int
    segments_repaired: int
    bytes_read: int


class Anomaly(BaseModel):
    """A damaged segment the scrubber found: an archived copy, or a local segment."""

    topic: str
    partition: int = Field(description="-1 for a log that is no topic's partition.")
    log_id: str
    base_offset: int
    next_offset: int | None = Field(description="null when its manifest does not read.")
    object_key: str = Field(
        description="The segment's object, relative to remote_url (a local segment: its file)."
    )
    kinds: list[str] = Field(
        description="What is wrong: manifest, data_missing, data_size, chunk, "
        "key_unavailable, format; local for a local segment."
    )
    problems: list[str] = Field(description="Each problem, in words.")
    found_ms: int = Field(description="When the scrubber found it (ms since the epoch).")
    key_id: str | None = Field(None, description="The key id the key ring lacks, if that.")
    tier: str = Field(description="remote (an archived copy) or local.")
    repaired: bool = Field(description="Whether the scrubber repaired it from a good copy.")
    repair: str | None = Field(description="From where it was repaired, or why it was not.")


class AnomaliesAnswer(BaseModel):
    """``GET /v1/archive/anomalies``."""

    enabled: bool = Field(description="Whether this node scrubs in the background.")
    interval_s: float | None = Field(description="Its scrub_interval_s (null: off).")
    passes: int = Field(description="Passes finished since the service started.")
    failures: int = Field(description="Passes the bucket failed.")
    last_pass: ScrubPass | None = Field(description="The last finished pass (null: none yet).")
    current_pass: ScrubPass | None = Field(description="The pass under way, if any.")
    anomalies: list[Anomaly] = Field(description="What the last finished pass found.")
    found_in_current_pass: list[Anomaly] = Field(
        description="What the pass under way found so far."
    )


@router.get(
    "/v1/archive/anomalies",
    response_model=AnomaliesAnswer,
    responses=errs(400, 401),
)
async def archive_anomalies(
    principal: Authenticated,
    state: State,
    topic: Annotated[
        str | None, Query(description="Only this topic's segments (default: every topic).")
    ] = None,
) -> dict[str, Any]:
    """What this node's scrubber found: the damaged segments of its last full pass (in
    the background with ``scrub_interval_s``, or asked for), and of the pass under way so
    far, each with its tier, segment, offsets, what is wrong, when it was found and
    whether it was repaired; of the topics this token has any grant on. ``enabled``
    false: no background passes (``last_pass`` still shows a pass that was asked for)."""
    scrubber = state.scrubber
    if scrubber is None:
        return {
            "enabled": False,
            "interval_s": None,
            "passes": 0,
            "failures": 0,
            "last_pass": None,
            "current_pass": None,
            "anomalies": [],
            "found_in_current_pass": [],
        }

    def allowed(name: str) -> bool:
        return (topic is None or name == topic) and principal.allows_any(name)

    return {"enabled": scrubber.background, **scrubber.anomalies(allowed)}


__all__ = [
    "AnomaliesAnswer",
    "Anomaly",
    "RestoreTopicRequest",
    "ScrubPass",
    "ScrubRequest",
    "router",
]
