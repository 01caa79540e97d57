"""What runs for the app's life: loading the topics, the maintenance loop, closing.

:func:`make_lifespan` gives the app's lifespan: on start-up it makes the shutdown event,
loads the topics (unless the server loaded them before listening) and starts
:func:`maintain_forever` (periodic time-based flush, roll and retention of every log);
on shutdown it marks the state stopping (waking long polls), stops the loop and closes
every log (flushed).

Concurrency: both run on the event loop; loading, maintaining and closing the topics
block, so they run in worker threads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI

from .state import ServiceState

log = logging.getLogger("tiered_log.service")


def make_lifespan(state: ServiceState, *, preloaded: bool
                  ) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The lifespan of an app serving ``state``; ``preloaded``: its topics are loaded."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.stopping = asyncio.Event()
        if not preloaded:
            await asyncio.to_thread(state.topics.load)
        task = asyncio.create_task(maintain_forever(state), name="tiered-log-maintenance")
        try:
            yield
        finally:
            state.begin_shutdown()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await asyncio.to_thread(state.topics.close)
            log.info("all logs flushed and closed")

    return lifespan


async def maintain_forever(state: ServiceState) -> None:
    """Periodic time-based flush, roll and retention of every log (until cancelled)."""
    interval = state.settings.maintenance_interval_ms / 1000
    while True:
        await asyncio.sleep(interval)
        try:
            await asyncio.to_thread(state.topics.maintain)
        except Exception:
            log.exception("log maintenance failed")


__all__ = ["maintain_forever", "make_lifespan"]
