"""The tiered_log HTTP service: topics of partition logs behind a FastAPI app.

Modules: :mod:`.app` (``create_app``: assembles the parts below), :mod:`.routes` (one
``APIRouter`` module per resource: ops, topics, records, partitions), :mod:`.deps`
(shared dependencies: state, auth grants, body reading), :mod:`.middleware` (body bound,
response counting), :mod:`.error_mapping` (exception handlers), :mod:`.openapi` (the
document), :mod:`.state` and :mod:`.longpoll` (shared state, long-poll wake-ups),
:mod:`.lifespan` (load, maintenance loop, close), :mod:`.produce` (body to append),
:mod:`.service_metrics` (which series, from where), :mod:`.topics` (topic state and the
one place partition logs are opened), :mod:`.auth` (bearer tokens and grants),
:mod:`.wire` (JSON and binary forms), :mod:`.fetch` (zero-copy batch reads),
:mod:`.metrics` (Prometheus text), :mod:`.server` (running it), :mod:`.http_protocol`
(the hardened HTTP protocol under uvicorn). Its command-line commands (``serve``,
``topics``, ``produce``, ``consume``) are in :mod:`tiered_log.cli.service`.

Run it with ``python -m tiered_log.service [--config FILE] [--port N] ...``.

The package imports nothing heavy by itself (tools may import :mod:`.wire` without
pulling in FastAPI; the client imports nothing from here); ``create_app`` and
``serve_main`` load lazily.
"""

from __future__ import annotations

from typing import Any

__all__ = ["create_app", "run_server", "serve_main"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    if name in ("run_server", "serve_main"):
        from . import server

        return getattr(server, name)
    raise AttributeError(name)
