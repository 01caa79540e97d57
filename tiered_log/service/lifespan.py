"""What runs for the app's life: loading the topics, the maintenance loop, closing.

:func:`make_lifespan` gives the app's lifespan: on start-up it makes the shutdown event, starts the
event loop's watchdog (:mod:`~tiered_log.service.loop_watchdog`, exported in ``/metrics``),
loads the topics (unless the server loaded them before listening), joins the cluster
when the settings name one (:mod:`~tiered_log.service.clustering`) and starts
:func:`maintain_forever` (periodic time-based flush, roll and retention of every log)
and the node's scrubber (in the background when ``scrub_interval_s`` is set)
(:mod:`~tiered_log.service.scrubbing`);
on shutdown it marks the state stopping (waking long polls), stops the loop, leaves the
cluster (resigning every leadership) and closes every log (flushed).

Concurrency: both run on the event loop; loading, maintaining and closing the topics
block, so they run in worker threads.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI

from .loop_watchdog import LoopWatchdog
from .scrubbing import start_scrubber
from .state import ServiceState

log = logging.getLogger("tiered_log.service")


def make_lifespan(
    state: ServiceState, *, preloaded: bool
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The lifespan of an app serving ``state``; ``preloaded``: its topics are loaded."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.broker.start()
        watchdog = LoopWatchdog(asyncio.get_running_loop()).start()
        state.metrics.watch_loop(watchdog)
        if not preloaded:
            await asyncio.to_thread(state.topics.load)
        if state.settings.clustered:
            from ..kafka.listener import kafka_address
            from .clustering import start_node  # here: a single node never loads it

            node = await asyncio.to_thread(
                start_node, state.settings, state.topics, kafka_address(state.settings)
            )
            state.broker.join_cluster(node)
            state.metrics.watch_cluster(node)
            log.info(
                "node %s joined cluster %s (etcd %s)",
                state.settings.node_id,
                state.settings.cluster_name,
                state.settings.cluster_etcd,
            )
        task = asyncio.create_task(maintain_forever(state), name="tiered-log-maintenance")
        scrubber = start_scrubber(state)  # in the background only with scrub_interval_s
        try:
            yield
        finally:
            state.begin_shutdown()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await asyncio.to_thread(scrubber.stop)
            if state.cluster is not None:
                await asyncio.to_thread(state.cluster.close)
            await asyncio.to_thread(state.broker.close)
            await asyncio.to_thread(state.topics.close)
            watchdog.stop()
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
