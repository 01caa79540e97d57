"""The service's ASGI middleware: bounds request bodies and counts responses.

:class:`ServiceMiddleware` wraps the whole app (so it sees every request, routed or
not): a declared ``Content-Length`` over ``max_request_bytes`` is refused (413, or 400
when the header is not a number) before the body is read; a body that grows past the
limit while streaming makes the wrapped ``receive`` raise :class:`BodyTooLarge`, which
the handlers (:func:`tiered_log.service.deps.read_value`) and the error mapping answer
with 413 too. Every answer is counted in ``tiered_log_http_requests_total`` by method
and status (``none`` when no answer started).

Concurrency: one middleware instance serves every request on the event loop; each call
keeps its own counters in locals, the metric it bumps is thread-safe.
"""

from __future__ import annotations

from fastapi import HTTPException
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .state import ServiceState
from .wire import error_json


class BodyTooLarge(HTTPException):
    """The request body passed ``max_request_bytes`` (raised from the wrapped receive)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"request body exceeds the limit of {limit} bytes")


class ServiceMiddleware:
    """Bounds request bodies and counts responses; a plain ASGI middleware.

    A declared ``Content-Length`` over ``max_request_bytes`` is refused (413) before the
    body is read; a body that grows past it while streaming makes ``receive`` raise, which
    the handlers answer with 413 too.
    """

    def __init__(self, app: ASGIApp, state: ServiceState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.state.settings.max_request_bytes
        method = str(scope.get("method", "GET"))
        status_seen: list[int] = []

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status_seen.append(int(message["status"]))
            await send(message)

        try:
            declared = None
            for name, value in scope.get("headers", ()):
                if name == b"content-length":
                    declared = value
            if declared is not None:
                try:
                    n = int(declared)
                except ValueError:
                    n = -1
                if n < 0 or n > limit:
                    code, status = (
                        ("request_too_large", 413) if n > limit else ("invalid_request", 400)
                    )
                    msg = (
                        f"request body exceeds the limit of {limit} bytes"
                        if status == 413
                        else "invalid Content-Length"
                    )
                    resp = JSONResponse(
                        error_json(code, msg), status_code=status, headers={"Connection": "close"}
                    )
                    await resp(scope, receive, counting_send)
                    return
            seen = 0

            async def bounded_receive() -> Message:
                nonlocal seen
                message = await receive()
                if message["type"] == "http.request":
                    seen += len(message.get("body", b""))
                    if seen > limit:
                        raise BodyTooLarge(limit)
                return message

            await self.app(scope, bounded_receive, counting_send)
        finally:
            shown = str(status_seen[0]) if status_seen else "none"
            self.state.metrics.http_requests.inc(method, shown)


__all__ = ["BodyTooLarge", "ServiceMiddleware"]
