"""Routes of the service itself: ``GET /healthz`` (liveness) and ``GET /metrics``.

Concurrency: handlers run on the event loop; rendering the metrics (which reads every
log's stats) runs in a worker thread.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response

from ..deps import Authenticated, State
from ..metrics import CONTENT_TYPE
from ..openapi import errs
from ..wire import Health

router = APIRouter(tags=["service"])


@router.get("/healthz", response_model=Health)
async def healthz(state: State) -> dict[str, Any]:
    """Liveness: 200 while the server runs (``status`` is ``stopping`` on shutdown).
    Needs no token, so it says nothing else (no topic count, no data)."""
    return {"status": "stopping" if state.is_stopping else "ok"}


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {
            "content": {"text/plain": {"schema": {"type": "string"}}},
            "description": "Prometheus text format",
        },
        **errs(401),
    },
)
async def metrics(principal: Authenticated, state: State) -> Response:
    """Prometheus metrics: appends and fetches (records, bytes) per topic, copy lag,
    remote fetch bytes and errors, remote cache hits/misses, partition offsets.

    The per-topic series are those of the topics the token has a grant on (the
    topics ``GET /v1/topics`` lists it); the service-wide series (HTTP requests by
    method and status) are there for every token."""
    only = None if principal.grants is None else ("topic", principal.allows_any)
    text = await asyncio.to_thread(state.metrics.registry.render, only=only)
    return Response(text, media_type=CONTENT_TYPE)


__all__ = ["router"]
