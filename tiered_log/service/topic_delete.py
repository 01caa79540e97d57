"""Deleting a topic, the one path the HTTP API (``DELETE /v1/topics/{t}``) and the Kafka
listener (DeleteTopics) share.

A single node deletes the topic in its :class:`~tiered_log.broker.topics.TopicManager`
(its directory moved to the trash, its bucket objects deleted in the background). A
cluster deletes it from the metadata store (etcd) first; every node then deletes its
logs at its next metadata read (this one at once), so no node keeps serving a topic the
cluster no longer has. Either way the topic's metrics are dropped and the long polls
parked on its partitions are woken (they then answer that the topic is gone).

Concurrency: a coroutine of the service's event loop; the deletion itself (disk, etcd)
runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

from ..errors import TopicNotFoundError

if TYPE_CHECKING:
    from .state import ServiceState


async def delete_topic(state: ServiceState, name: str) -> None:
    """Delete topic ``name`` and every record of it. TopicNotFoundError when this node
    holds no such topic; InvalidTopicNameError for a bad name."""
    partitions = state.topics.get(name).meta.partitions
    cluster = state.cluster
    if cluster is not None:  # every node deletes its logs once etcd has no topic
        await asyncio.to_thread(cluster.delete_topic, name)
        with contextlib.suppress(TopicNotFoundError):  # this node's refresh did it
            await asyncio.to_thread(state.topics.delete, name)
    else:
        await asyncio.to_thread(state.topics.delete, name)
    state.metrics.forget_topic(name)
    for p in range(partitions):  # long polls on it end (and then answer it is gone)
        state.broker.parking.hw.notify((name, p))


__all__ = ["delete_topic"]
