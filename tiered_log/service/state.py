"""The state the service's handlers share: :class:`ServiceState`, one per app.

It holds the settings, the topic manager, the authenticator, the metrics, the long-poll
wake-ups and the shutdown flag. :func:`tiered_log.service.app.create_app` makes it and
puts it on ``app.state.service``; handlers reach it through
:data:`tiered_log.service.deps.State`.

Concurrency: the waiters and the shutdown event are touched from the event loop only;
everything else is immutable or thread-safe (topic manager, logs, authenticator,
metrics), so worker threads may use it.
"""

from __future__ import annotations

import asyncio

from ..config import Settings
from .auth import Authenticator
from .longpoll import Waiters
from .service_metrics import ServiceMetrics
from .topics import TopicManager


class ServiceState:
    """Everything the handlers share. Created once per app."""

    def __init__(self, settings: Settings, topics: TopicManager) -> None:
        self.settings = settings
        self.topics = topics
        self.auth = Authenticator.from_settings(settings)
        self.metrics = ServiceMetrics(topics)
        self.waiters = Waiters()
        self.stopping: asyncio.Event | None = None

    @property
    def is_stopping(self) -> bool:
        return self.stopping is not None and self.stopping.is_set()

    def begin_shutdown(self) -> None:
        """Mark the shutdown and wake long polls (event-loop thread). In-flight requests
        still finish; uvicorn has stopped accepting new ones."""
        if self.stopping is not None:
            self.stopping.set()
        self.waiters.notify_all()


__all__ = ["ServiceState"]
