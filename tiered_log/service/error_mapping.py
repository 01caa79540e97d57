"""Error mapping at the HTTP boundary: the status of every library error and the
exception handlers that turn any failure into the API's JSON error.

Every error answer is ``{"error": {"code", "message", "retriable", "details"?}}``
(:func:`tiered_log.service.wire.error_json`). A library error answers the status its
class carries next to its code (:func:`tiered_log.errors.status_of`; the tree with every
code and status is drawn in :mod:`tiered_log.errors`): invalid input 400,
unauthenticated 401 (with ``WWW-Authenticate: Bearer``), no grant 403, unknown topic or
partition 404, a cluster route on a node without a cluster 404 (``not_a_cluster``),
topic exists 409, data removed by retention 410, record too large 413,
unsupported content type 415, offset outside ``[log_start, next_offset]`` 416
(``details`` holds both bounds), remote object missing or damaged 502, shutting down or
remote tier unavailable 503, any other retriable error 503, anything else 500.
Starlette's own errors (404 no route, 405 with ``Allow``, 413 from the body bound) and
request validation (400, never FastAPI's 422) get the same shape; an unexpected
exception is 500 with a generic message (the details go to the server log, never to the
client). 5xx answers of library errors are logged (WARNING when retriable, else ERROR).

Concurrency: the handlers run on the event loop and only build responses (and log);
they keep no state. Safe from any task.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Iterable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from ..broker.topics import FIXED_SETTINGS
from ..errors import (
    FencedEpochError,
    NotLeaderError,
    OffsetOutOfRangeError,
    TieredLogError,
    status_of,
)
from ..topic_config import TopicConfig
from .wire import error_json

log = logging.getLogger("tiered_log.service")


def validation_message(errors: Iterable[Any]) -> str:
    """One line out of pydantic's errors (the first five): ``loc: msg; ...``."""
    parts = []
    for err in list(errors)[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ()))
        msg = str(err.get("msg", "invalid"))
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts) or "invalid request"


def error_response(
    status: int,
    code: str,
    message: str,
    *,
    retriable: bool = False,
    details: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    """The API's JSON error answer."""
    return JSONResponse(
        error_json(code, message, retriable=retriable, details=details),
        status_code=status,
        headers=headers,
    )


async def on_library_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, TieredLogError)
    status = status_of(exc)
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    details: dict[str, Any] | None = None
    if isinstance(exc, OffsetOutOfRangeError):
        details = {"log_start_offset": exc.log_start, "next_offset": exc.next_offset}
    elif isinstance(exc, NotLeaderError):
        details = {"leader_id": exc.leader_id, "leader_url": exc.leader_url}
    elif isinstance(exc, FencedEpochError):
        details = {"current_epoch": exc.current_epoch}
    message = exc.message if hasattr(exc, "message") else str(exc)
    if status >= 500:
        log.log(
            logging.WARNING if exc.retriable else logging.ERROR,
            "%s %s failed: %s: %s",
            request.method,
            request.url.path,
            type(exc).__name__,
            message,
        )
    return error_response(
        status, exc.code, message, retriable=exc.retriable, details=details, headers=headers
    )


def _unknown_key_message(loc: tuple[Any, ...], alter: bool = False) -> str | None:
    """For a key a body may not have: the keys it may, when they are a topic config's
    (``alter``: a change's, which says why a setting fixed at creation cannot change)."""
    if len(loc) >= 2 and loc[-2] == "config":
        if alter and loc[-1] in FIXED_SETTINGS:
            return f"cannot change {loc[-1]}: {FIXED_SETTINGS[loc[-1]]}"
        valid = sorted(TopicConfig.model_fields)
        near = difflib.get_close_matches(str(loc[-1]), valid, n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        return f"unknown topic setting{hint}; valid: {', '.join(valid)}"
    return None


async def on_validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = []
    for e in exc.errors():
        err = {k: v for k, v in e.items() if k in ("loc", "msg")}
        if e.get("type") == "extra_forbidden":
            loc = tuple(e.get("loc", ()))
            err["msg"] = _unknown_key_message(loc, request.method == "PATCH") or "unknown field"
        errors.append(err)
    return error_response(400, "invalid_request", validation_message(errors))


_HTTP_CODES = {
    400: "invalid_request",
    401: "unauthenticated",
    403: "permission_denied",
    404: "not_found",
    405: "method_not_allowed",
    413: "request_too_large",
}


async def on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    msg = exc.detail if isinstance(exc.detail, str) else "request failed"
    if exc.status_code == 404 and msg == "Not Found":
        msg = f"no such endpoint: {request.method} {request.url.path}"
        path = request.url.path
        if len(path) > 1 and path.endswith("/") and _routed(request, path.rstrip("/")):
            msg += f" (without the trailing slash: {path.rstrip('/')})"
    headers = dict(exc.headers) if exc.headers else None
    if exc.status_code == 405:
        headers = {**(headers or {}), "Allow": ", ".join(_allowed_methods(request))}
    if exc.status_code == 413:
        headers = {**(headers or {}), "Connection": "close"}
    return error_response(exc.status_code, code, msg, headers=headers)


async def on_unexpected(request: Request, exc: Exception) -> Response:
    log.error("%s %s failed unexpectedly", request.method, request.url.path, exc_info=exc)
    return error_response(500, "internal_error", "internal server error")


def install_error_handlers(app: FastAPI) -> None:
    """Register the handlers above on ``app``."""
    app.add_exception_handler(TieredLogError, on_library_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(Exception, on_unexpected)


def _routed(request: Request, path: str) -> bool:
    """Whether some route of the app takes ``path`` with the request's method."""
    scope = {**request.scope, "path": path}
    return any(route.matches(scope)[0] == Match.FULL for route in request.app.routes)


_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT", "TRACE")


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route takes at this path (Starlette lists one route's only).

    Asks every route of the app whether it fully matches the path with each method: an
    included router answers for its routes (FastAPI keeps it as one entry of
    ``app.routes``), a GET route for HEAD too."""
    methods: set[str] = set()
    for route in request.app.routes:
        for method in _METHODS:
            match, _ = route.matches({**request.scope, "method": method})
            if match == Match.FULL:
                methods.add(method)
    return sorted(methods)


__all__ = ["error_response", "install_error_handlers", "validation_message"]
