"""The HTTP API of the service (FastAPI): :func:`create_app` assembles it.

Endpoints (all errors are JSON ``{"error": {"code", "message", "retriable", "details"?}}``)::

    GET    /healthz                                                200
    GET    /metrics                                                200 401
    POST   /v1/topics                                              201 400 401 403 409 413 415
    GET    /v1/topics                                              200 401
    GET    /v1/topics/{topic}                                      200 400 401 403 404
    DELETE /v1/topics/{topic}                                      204 400 401 403 404
    POST   /v1/topics/{topic}/partitions/{p}/records               200 400 401 403 404 413 415
    GET    /v1/topics/{topic}/partitions/{p}/records               200 400 401 403 404 410 416
    GET    /v1/topics/{topic}/partitions/{p}/offsets?timestamp=    200 400 401 403 404
    GET    /v1/topics/{topic}/partitions/{p}/bounds                200 400 401 403 404
    GET    /v1/topics/{topic}/partitions/{p}/remote-segments       200 400 401 403 404
    POST   /v1/topics/{topic}/partitions/{p}/truncate              200 400 401 403 404 415 416

Where each part lives:

- :mod:`.routes` (one router per resource: :mod:`~.routes.ops`, :mod:`~.routes.topics`,
  :mod:`~.routes.records` with the produce forms, :mod:`~.routes.partitions`);
- :mod:`.deps` (state, authentication and grants, body reading, worker-thread calls);
- :mod:`.middleware` (request body bound, response counting);
- :mod:`.error_mapping` (the exception handlers; statuses from :mod:`tiered_log.errors`);
- :mod:`.service_metrics` (the series), :mod:`.state` and :mod:`.longpoll` (shared state,
  long-poll wake-ups), :mod:`.lifespan` (load, maintenance loop, close);
- :mod:`.produce` (body to append), :mod:`.fetch` (batch reads), :mod:`.openapi`.

Concurrency: handlers run on the event loop and never block it; every log and topic
operation runs in a worker thread (``asyncio.to_thread``). The shared state
(:class:`~.state.ServiceState`) is touched from the loop (waiters, shutdown flag) or
through thread-safe objects (topic manager, logs, metrics). :func:`create_app` itself is
called once, before serving.
"""

from __future__ import annotations

from fastapi import FastAPI

from ..broker.mount import topic_manager_for
from ..broker.topics import TopicManager
from ..config import Settings
from .error_mapping import install_error_handlers
from .lifespan import make_lifespan
from .middleware import ServiceMiddleware
from .openapi import build_openapi
from .routes import ROUTERS
from .state import ServiceState


def create_app(settings: Settings, topics: TopicManager | None = None) -> FastAPI:
    """The ASGI app. ``topics`` may be loaded already (the server does it before
    listening, to fail early); otherwise the app's startup loads it."""
    manager = topics if topics is not None else topic_manager_for(settings)
    state = ServiceState(settings, manager)
    app = FastAPI(
        title="tiered-log",
        version="0.1.0",
        description="A segmented, append-only commit log with a tiered remote store. "
        'Errors are always JSON `{"error": {"code", "message", "retriable"}}`.',
        lifespan=make_lifespan(state, preloaded=topics is not None),
        # /v1/topics/ is a JSON 404 naming /v1/topics, not an empty 307 (curl without
        # -L printed nothing and a POST there created nothing).
        redirect_slashes=False,
    )
    app.state.service = state
    app.add_middleware(ServiceMiddleware, state=state)
    install_error_handlers(app)
    for router in ROUTERS:
        app.include_router(router)
    routes = [route for router in ROUTERS for route in router.routes]
    app.openapi = lambda: build_openapi(  # type: ignore[method-assign]
        app, routes, clustered=settings.clustered
    )
    return app


__all__ = ["create_app"]
