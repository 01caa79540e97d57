"""The OpenAPI document: the error answers each route documents and the document itself.

:func:`errs` gives a route's ``responses`` for its error statuses (all of them the
:class:`~tiered_log.service.wire.ErrorResponse` shape). :func:`build_openapi` makes the
document once per app: FastAPI's, with our error shape for 400 (its 422 removed, since
the server never answers 422), a 500 on every operation, the JSON produce body's schema
(the handler reads that body itself, so no route declares it), and every model's schema
exactly as pydantic writes it from the models the server validates with (FastAPI's own
pass turns integer bounds into floats: 2**63 - 1 became 9.223372036854776e+18, which is
not the server's bound).

Concurrency: :func:`build_openapi` caches the document on the app; a race builds it
twice, identically. Pure functions otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema

from .wire import JSON, ErrorResponse, ProduceRequest

_ERR = {"model": ErrorResponse}

_DESCRIPTIONS = {400: "Invalid request", 401: "Missing or invalid bearer token",
                 403: "The token lacks the grant", 404: "No such topic or partition",
                 409: "The topic exists", 410: "The data was removed", 413: "Too large",
                 415: "Unsupported content type", 416: "Offset out of range",
                 503: "Shutting down or remote tier unavailable"}


def errs(*codes: int) -> dict[int | str, dict[str, Any]]:
    """A route's ``responses`` entries for the error statuses ``codes``."""
    return {c: {**_ERR, "description": _DESCRIPTIONS.get(c, "Error")} for c in codes}


def _documented_models(routes: Iterable[object]) -> list[tuple[type[BaseModel], JsonSchemaMode]]:
    """Every model the routes take (validation) or answer (serialization), plus the JSON
    produce body (read by the handler itself, so no route declares it)."""
    out: dict[tuple[type[BaseModel], JsonSchemaMode], None] = {
        (ProduceRequest, "validation"): None, (ErrorResponse, "serialization"): None}

    def add(model: object, mode: JsonSchemaMode) -> None:
        if isinstance(model, type) and issubclass(model, BaseModel):
            out[(model, mode)] = None

    for route in routes:
        if not isinstance(route, APIRoute):
            continue
        if route.body_field is not None:
            add(route.body_field.field_info.annotation, "validation")
        add(route.response_model, "serialization")
        for extra in route.responses.values():
            add(extra.get("model"), "serialization")
    return list(out)


def build_openapi(app: FastAPI, routes: Iterable[object], *,
                  clustered: bool = False) -> dict[str, Any]:
    """The OpenAPI document of ``app`` (see the module docstring), whose API routes are
    ``routes`` (those of its routers: recent FastAPI versions keep an included router as
    one entry of ``app.routes``, older versions copy its routes there); set it as
    ``app.openapi``. A single node (``clustered`` False) documents the bound it checks
    on a topic's replication: ``replication_factor`` and ``min_insync_replicas`` at most
    1 (it is the only replica)."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, description=app.description,
                         routes=app.routes)
    comps = schema.setdefault("components", {}).setdefault("schemas", {})
    _, defs = models_json_schema(_documented_models(routes),
                                 ref_template="#/components/schemas/{model}")
    comps.update(defs.get("$defs", {}))
    for name in ("HTTPValidationError", "ValidationError"):
        comps.pop(name, None)
    err_ref = {"$ref": "#/components/schemas/ErrorResponse"}
    for path_item in schema.get("paths", {}).values():
        for op in path_item.values():
            if not isinstance(op, dict):
                continue
            responses = op.setdefault("responses", {})
            if responses.pop("422", None) is not None:
                responses.setdefault("400", {"description": "Invalid request",
                                             "content": {JSON: {"schema": err_ref}}})
            responses.setdefault("500", {"description": "Internal error",
                                         "content": {JSON: {"schema": err_ref}}})
    if not clustered:
        props = comps.get("CreateTopicRequest", {}).get("properties", {})
        for name in ("replication_factor", "min_insync_replicas"):
            for variant in props.get(name, {}).get("anyOf", [props.get(name, {})]):
                if variant.get("type") == "integer":
                    variant["maximum"] = 1
    app.openapi_schema = schema
    return schema


__all__ = ["build_openapi", "errs"]
