"""The state the service's handlers share: :class:`ServiceState`, one per app.

It holds the settings, the topic manager, the broker (:class:`~tiered_log.broker.Broker`:
produce, fetch, the cluster node when clustered, where requests park, the shutdown
flag), the authenticator and the metrics. :func:`tiered_log.service.app.create_app`
makes it and puts it on ``app.state.service``; handlers reach it through
:data:`tiered_log.service.deps.State`.

Concurrency: the broker's parking and the shutdown event are touched from the event
loop only; everything else is immutable or thread-safe (topic manager, logs,
authenticator, metrics), so worker threads may use it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ..broker import Broker
from ..broker.topics import TopicManager
from ..config import Settings
from .auth import Authenticator
from .service_metrics import ServiceMetrics

if TYPE_CHECKING:  # a single node never loads the cluster package (nor its etcd client)
    from ..cluster.node import ClusterNode
    from ..remote.scrub import Scrubber


class ServiceState:
    """Everything the handlers share. Created once per app."""

    def __init__(self, settings: Settings, topics: TopicManager) -> None:
        self.settings = settings
        self.topics = topics
        self.auth = Authenticator.from_settings(settings)
        self.metrics = ServiceMetrics(topics)
        self.broker = Broker(settings, topics, self.metrics)
        self.scrubber: Scrubber | None = None
        """The node's scrubber (:mod:`~tiered_log.service.scrubbing` sets it at start):
        passes on demand and in the background, and their findings."""

    @property
    def cluster(self) -> ClusterNode | None:
        """This node's part in a cluster (None: a single node, the embedded default)."""
        return self.broker.cluster

    @property
    def stopping(self) -> asyncio.Event | None:
        return self.broker.stopping

    @property
    def is_stopping(self) -> bool:
        return self.broker.is_stopping

    def begin_shutdown(self) -> None:
        """Mark the shutdown and wake parked requests (event-loop thread). In-flight
        requests still finish; uvicorn has stopped accepting new ones."""
        self.broker.begin_shutdown()


__all__ = ["ServiceState"]
