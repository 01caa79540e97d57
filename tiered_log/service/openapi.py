"""The OpenAPI document: the error answers each route documents and the document itself.

:func:`errs` gives a route's ``responses`` for the error statuses its handler answers
(all of them the :class:`~tiered_log.service.wire.ErrorResponse` shape).
:func:`build_openapi` makes the document once per app: FastAPI's, with our error shape
for 400 (its 422 removed, since the server never answers 422), the JSON produce body's
schema (the handler reads that body itself, so no route declares it), every model's
schema exactly as pydantic writes it from the models the server validates with
(FastAPI's own pass turns integer bounds into floats: 2**63 - 1 became
9.223372036854776e+18, which is not the server's bound), and the statuses that come
from the layers every route shares rather than from its handler, so that no route can
leave them out (:func:`shared_statuses`):

- every operation: 400 and 413 (the middleware refuses a malformed or too large
  ``Content-Length`` before any route runs), 500;
- a route that authenticates (``Authenticated``): 401; one that checks a grant on the
  path's topic (``ReadGrant``, ...): 400 (the name), 401 and 403;
- a route that takes a JSON body (``JsonContent``): 415;
- a route on a named topic (``{topic}`` in the path): 404 (no such topic) and 503 (it
  did not open, or the server is stopping);
- in a cluster, a route on a partition (``{partition}``) or a consumer group
  (``{group}``, answered by its coordinator only): 421 (``not_leader``).

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

from .deps import authenticated, json_content, require
from .wire import JSON, ErrorResponse, ProduceRequest, TopicProduceRequest

_ERR = {"model": ErrorResponse}

_DESCRIPTIONS = {
    400: "Invalid request",
    401: "Missing or invalid bearer token",
    403: "The token lacks the grant",
    404: "No such topic or partition",
    409: "The topic exists",
    410: "The data was removed",
    413: "Request body or record too large",
    415: "Unsupported content type",
    416: "Offset out of range",
    421: "Not the partition's leader (see error.details.leader_url)",
    500: "Internal error",
    503: "Shutting down or remote tier unavailable",
}

_GRANT_CODE = require("read").__code__
"""The code of every grant dependency (``require`` makes one closure per grant)."""


def errs(*codes: int, described: dict[int, str] | None = None) -> dict[int | str, dict[str, Any]]:
    """A route's ``responses`` entries for the error statuses ``codes`` its handler
    answers; ``described`` overrides the generic description of a status where the route
    means something else by it."""
    text = {**_DESCRIPTIONS, **(described or {})}
    return {c: {**_ERR, "description": text.get(c, "Error")} for c in codes}


def _calls(route: APIRoute) -> set[object]:
    """Every dependency callable of ``route``, however deep."""
    found: set[object] = set()
    todo = list(route.dependant.dependencies)
    while todo:
        dep = todo.pop()
        found.add(dep.call)
        todo.extend(dep.dependencies)
    return found


def shared_statuses(route: APIRoute, *, clustered: bool) -> set[int]:
    """The error statuses ``route`` answers through the layers every route shares (see
    the module docstring), whatever its handler does."""
    out = {400, 413, 500}
    calls = _calls(route)
    if authenticated in calls:
        out.add(401)
    if any(getattr(c, "__code__", None) is _GRANT_CODE for c in calls):
        out |= {400, 401, 403}
    if json_content in calls:
        out.add(415)
    params = set(route.param_convertors)
    if "topic" in params:
        out |= {404, 503}
    if clustered and ("partition" in params or "group" in params):
        out.add(421)
    return out


def _documented_models(routes: Iterable[object]) -> list[tuple[type[BaseModel], JsonSchemaMode]]:
    """Every model the routes take (validation) or answer (serialization), plus the JSON
    produce bodies (read by the handlers themselves, so no route declares them)."""
    out: dict[tuple[type[BaseModel], JsonSchemaMode], None] = {
        (ProduceRequest, "validation"): None,
        (TopicProduceRequest, "validation"): None,
        (ErrorResponse, "serialization"): None,
    }

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


def build_openapi(
    app: FastAPI, routes: Iterable[object], *, clustered: bool = False
) -> dict[str, Any]:
    """The OpenAPI document of ``app`` (see the module docstring), whose API routes are
    ``routes`` (those of its routers: recent FastAPI versions keep an included router as
    one entry of ``app.routes``, older versions copy its routes there); set it as
    ``app.openapi``. A single node (``clustered`` False) documents the bound it checks
    on a topic's replication: ``replication_factor`` and ``min_insync_replicas`` at most
    1 (it is the only replica)."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    comps = schema.setdefault("components", {}).setdefault("schemas", {})
    _, defs = models_json_schema(
        _documented_models(routes), ref_template="#/components/schemas/{model}"
    )
    comps.update(defs.get("$defs", {}))
    for name in ("HTTPValidationError", "ValidationError"):
        comps.pop(name, None)
    err_ref = {"$ref": "#/components/schemas/ErrorResponse"}
    paths = schema.get("paths", {})
    shared: dict[tuple[str, str], set[int]] = {}
    for route in routes:
        if isinstance(route, APIRoute) and route.include_in_schema:
            for method in route.methods or ():
                shared[(route.path_format, method.lower())] = shared_statuses(
                    route, clustered=clustered
                )
    for path, path_item in paths.items():
        for method, op in path_item.items():
            if not isinstance(op, dict):
                continue
            responses = op.setdefault("responses", {})
            responses.pop("422", None)
            for status in sorted(shared.get((path, method), {400, 413, 500})):
                responses.setdefault(
                    str(status),
                    {
                        "description": _DESCRIPTIONS.get(status, "Error"),
                        "content": {JSON: {"schema": err_ref}},
                    },
                )
            op["responses"] = dict(sorted(responses.items()))
    if not clustered:
        props = comps.get("CreateTopicRequest", {}).get("properties", {})
        for name in ("replication_factor", "min_insync_replicas"):
            for variant in props.get(name, {}).get("anyOf", [props.get(name, {})]):
                if variant.get("type") == "integer":
                    variant["maximum"] = 1
    app.openapi_schema = schema
    return schema


__all__ = ["build_openapi", "errs", "shared_statuses"]
