"""The state the service's handlers share: :class:`ServiceState`, one per app.

It holds the settings, the topic manager, the cluster node (when clustered), the
authenticator, the metrics, the long-poll wake-ups and the shutdown flag. :func:`tiered_log.service.app.create_app` makes it and
puts it on ``app.state.service``; handlers reach it through
:data:`tiered_log.service.deps.State`.

Concurrency: the waiters and the shutdown event are touched from the event loop only;
everything else is immutable or thread-safe (topic manager, logs, authenticator,
metrics), so worker threads may use it.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ..config import Settings
from .auth import Authenticator
from .longpoll import Waiters
from .service_metrics import ServiceMetrics
from .topics import TopicManager

if TYPE_CHECKING:  # a single node never loads the cluster package (nor its etcd client)
    from ..cluster.node import ClusterNode


class ServiceState:
    """Everything the handlers share. Created once per app."""

    def __init__(self, settings: Settings, topics: TopicManager) -> None:
        self.settings = settings
        self.topics = topics
        self.auth = Authenticator.from_settings(settings)
        self.metrics = ServiceMetrics(topics)
        self.waiters = Waiters()
        """Consumers' long polls (woken by appends; in a cluster by high watermark moves,
        which also wake ``acks=all`` produces)."""
        self.appends = Waiters()
        """A cluster's followers' long polls at their leader's log end (woken by appends)."""
        self.stopping: asyncio.Event | None = None
        self.cluster: ClusterNode | None = None
        """This node's part in a cluster (None: a single node, the embedded default)."""

    @property
    def is_stopping(self) -> bool:
        return self.stopping is not None and self.stopping.is_set()

    def begin_shutdown(self) -> None:
        """Mark the shutdown and wake long polls (event-loop thread). In-flight requests
        still finish; uvicorn has stopped accepting new ones."""
        if self.stopping is not None:
            self.stopping.set()
        self.waiters.notify_all()
        self.appends.notify_all()


__all__ = ["ServiceState"]
