"""Routes of the archive: ``POST /v1/archive/restore`` (a point-in-time restore of a
topic as a new topic, :mod:`tiered_log.service.restoring`).

Needs ``admin`` on every topic (it reads one topic whole and creates another). The
restore runs in a worker thread (bucket and disk I/O); the answer comes once the new
topic is made and served.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
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


__all__ = ["RestoreTopicRequest", "router"]
