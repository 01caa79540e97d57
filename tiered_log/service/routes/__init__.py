"""The service's routes: one :class:`fastapi.APIRouter` per resource, handlers at module level.

- :mod:`.ops`: ``/healthz`` and ``/metrics`` (the service itself).
- :mod:`.topics`: ``/v1/topics`` and ``/v1/topics/{topic}`` (create, list, describe, delete).
- :mod:`.records`: ``/v1/topics/{topic}/partitions/{p}/records`` (produce, fetch).
- :mod:`.topic_records`: ``/v1/topics/{topic}/records`` (produce, partitioned by the
  service).
- :mod:`.partitions`: a partition's ``offsets``, ``bounds``, ``remote-segments`` and
  ``truncate``.
- :mod:`.groups`: ``/v1/groups`` and ``/v1/groups/{group}`` (the Kafka listener's
  consumer groups: members, committed offsets, lag).
- :mod:`.cluster`: ``/v1/cluster`` and the followers' replication fetch (a clustered
  node only).
- :mod:`.archive`: ``/v1/archive/restore`` (a topic restored to a point in time as a
  new topic).

:data:`ROUTERS` lists them in the order the app includes them (the order of the OpenAPI
document's paths). Handlers reach the shared state, the caller and the grants through
:mod:`tiered_log.service.deps`; errors they raise are mapped by
:mod:`tiered_log.service.error_mapping`.

Concurrency: handlers run on the event loop and never block it; every log and topic
operation runs in a worker thread.
"""

from __future__ import annotations

from fastapi import APIRouter

from .archive import router as archive_router
from .cluster import router as cluster_router
from .groups import router as groups_router
from .ops import router as ops_router
from .partitions import router as partitions_router
from .records import router as records_router
from .topic_records import router as topic_records_router
from .topics import router as topics_router

ROUTERS: tuple[APIRouter, ...] = (
    ops_router,
    topics_router,
    records_router,
    topic_records_router,
    partitions_router,
    groups_router,
    cluster_router,
    archive_router,
)

__all__ = ["ROUTERS"]
