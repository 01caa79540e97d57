"""What the route handlers share: FastAPI dependencies and request helpers.

- :data:`State`: the app's :class:`~tiered_log.service.state.ServiceState`.
- :data:`Authenticated`, :data:`ReadGrant`, :data:`WriteGrant`, :data:`AdminGrant`: the
  caller, authenticated (401) and, for the grants, authorized on the path's topic (its
  name validated first: 400), before any topic is looked up (403 never tells whether a
  topic exists).
- :data:`JsonContent`: 415 unless a JSON body says it is JSON; declare it after the
  grant, so 401/403 come first.
- :data:`TopicPath`, :data:`PartitionPath`: the path parameters as documented.
- Body reading: :func:`read_value` (a raw record streamed in, bounded by the topic's
  ``append_threshold``) and :func:`read_body` (the whole body, bounded by the
  middleware); a client that goes away mid-body is 400.
- :func:`run_log_call`: a blocking log call on the broker's read executor, with a log
  closed under the request mapped to 404 (topic deleted) or 503 (shutting down).

Concurrency: everything here runs on the event loop and never blocks it; log calls go
to worker threads through :func:`run_log_call`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Path, Request
from fastapi.security import HTTPBearer
from starlette.requests import ClientDisconnect

from ..broker.topics import MAX_PARTITIONS, PartitionLog, validate_topic_name
from ..config import Grant
from ..errors import (
    InvalidRequestError,
    RecordTooLargeError,
    UnsupportedMediaTypeError,
)
from .auth import Principal
from .middleware import BodyTooLarge
from .state import ServiceState
from .wire import JSON, TOPIC_NAME_PATTERN

T = TypeVar("T")


def _state(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.service
    return state


async def service_state(request: Request) -> ServiceState:
    """Dependency: the app's shared state (async, so FastAPI calls it on the loop, not
    in a worker thread)."""
    return _state(request)


State = Annotated[ServiceState, Depends(service_state)]

bearer = HTTPBearer(auto_error=False, description="A token from the server's auth_tokens.")


async def authenticated(request: Request, _: Annotated[Any, Depends(bearer)] = None) -> Principal:
    """Dependency: the caller (401 without a valid token when auth is on)."""
    return _state(request).auth.authenticate(request.headers.get("authorization"))


Authenticated = Annotated[Principal, Depends(authenticated)]


def require(grant: Grant) -> Callable[..., Awaitable[Principal]]:
    """Dependency: authenticate, validate the path's topic name, check ``grant`` on it."""

    async def dep(request: Request, principal: Authenticated) -> Principal:
        topic = request.path_params.get("topic")
        if topic is not None:
            validate_topic_name(topic)
            _state(request).auth.authorize(principal, topic, grant)
        return principal

    return dep


ReadGrant = Annotated[Principal, Depends(require("read"))]
WriteGrant = Annotated[Principal, Depends(require("write"))]
AdminGrant = Annotated[Principal, Depends(require("admin"))]

TopicPath = Annotated[
    str,
    Path(
        description="Topic name: 1-200 of A-Z a-z 0-9 . _ - (others are 400 invalid_topic_name).",
        json_schema_extra={"pattern": TOPIC_NAME_PATTERN},
    ),
]
PartitionPath = Annotated[int, Path(ge=0, le=MAX_PARTITIONS - 1, description="Partition index.")]


def media_type(request: Request) -> str:
    """The request's Content-Type, lower case, without parameters ("" when missing)."""
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


def is_json(media: str) -> bool:
    """Whether a media type (lower case, no parameters) is JSON: ``application/json`` or
    ``application/<anything>+json``. A missing type is not: a body is only taken for
    JSON when it says so (a web page can send a body without a type, or as
    ``text/plain`` or a form, cross-origin with no CORS preflight)."""
    return media == JSON or (media.startswith("application/") and media.endswith("+json"))


async def json_content(request: Request) -> None:
    """Dependency of the routes whose body is JSON: 415 unless the Content-Type is JSON
    (see :func:`is_json`). Declared after the grant, so 401/403 come first."""
    media = media_type(request)
    if not is_json(media):
        raise UnsupportedMediaTypeError(f"Content-Type must be {JSON}, not {media or 'missing'!r}")


JsonContent = Annotated[None, Depends(json_content)]


async def read_value(request: Request, limit: int) -> bytes:
    """The raw body as one record value, at most ``limit`` bytes (RecordTooLargeError).

    Past the limit the rest of the body (up to ``max_request_bytes``) is read and dropped
    so the client gets the 413 instead of a reset connection; nothing is stored.
    """
    over = False
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        over = True
    buf = bytearray()
    try:
        async for chunk in request.stream():
            if over:
                continue
            if len(buf) + len(chunk) > limit:
                over = True
                buf = bytearray()
                continue
            buf += chunk
    except BodyTooLarge:
        if not over:
            raise
    except ClientDisconnect:
        raise InvalidRequestError("the client went away before the body was complete") from None
    if over:
        raise RecordTooLargeError(
            f"the streamed value exceeds the topic's append threshold of {limit} bytes"
        )
    return bytes(buf)


async def read_body(request: Request) -> bytes:
    """The whole request body (bounded by the middleware: 413 past ``max_request_bytes``)."""
    try:
        return await request.body()
    except ClientDisconnect:
        raise InvalidRequestError("the client went away before the body was complete") from None


async def partition_log(state: ServiceState, topic: str, partition: int) -> PartitionLog:
    """The open log of a partition (TopicNotFoundError if there is none); see
    :meth:`Broker.partition <tiered_log.broker.Broker.partition>`."""
    return await state.broker.partition(topic, partition)


async def run_log_call(state: ServiceState, topic: str, fn: Callable[..., T], *args: Any) -> T:
    """A blocking log call on the broker's read executor (an archived chunk not fetched
    yet parks the request, holding no thread); a log closed under us is 404 or 503."""
    return await state.broker.read(topic, fn, *args)


__all__ = [
    "AdminGrant",
    "Authenticated",
    "JsonContent",
    "PartitionPath",
    "ReadGrant",
    "State",
    "TopicPath",
    "WriteGrant",
    "authenticated",
    "is_json",
    "media_type",
    "partition_log",
    "read_body",
    "read_value",
    "require",
    "run_log_call",
    "service_state",
]
