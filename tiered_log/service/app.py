"""The HTTP API of the service (FastAPI): topics, records, offsets, bounds, health, metrics.

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
    POST   /v1/topics/{topic}/partitions/{p}/truncate              200 400 401 403 404 415 416

Produce takes three bodies (see ``_PRODUCE_DOC``): a JSON batch, one raw
``application/octet-stream`` record streamed in, or a binary batch of record frames
(``application/vnd.tiered-log.frames``, the stored frame layout: checksums verified,
offsets reassigned, appended as one batch; the fast form the Python client uses; see
:mod:`tiered_log.service.wire`). A JSON body (produce, create, truncate) must say so:
``application/json`` or ``application/*+json``; any other type, or none, is 415 (a
missing type is never read as JSON: a web page could send that cross-origin without a
CORS preflight).

Status mapping of library errors: invalid input 400, unauthenticated 401 (with
``WWW-Authenticate: Bearer``), no grant 403, unknown topic or partition 404, topic exists
409, data removed by retention 410, record or request too large 413, unsupported
content type 415, offset outside ``[log_start, next_offset]`` 416 (``details`` holds
both bounds), shutting down or remote tier unavailable 503, anything else 500 with a
generic message (the details go to the server log, never to the client).

Concurrency: handlers run on the event loop and never block it; every log and topic
operation runs in a worker thread (``asyncio.to_thread``). The shared state
(:class:`ServiceState`) is touched from the loop (waiters, shutdown flag) or through
thread-safe objects (topic manager, logs, metrics).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from fastapi import Depends, FastAPI, HTTPException, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPBearer
from pydantic import BaseModel, ValidationError
from pydantic.json_schema import JsonSchemaMode, models_json_schema
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..config import MAX_INT, Grant, Settings
from ..errors import (
    CorruptIndexError,
    CorruptRecordError,
    DataLossError,
    InvalidArgumentError,
    InvalidOffsetError,
    InvalidTopicNameError,
    LogClosedError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    RemoteCorruptionError,
    RemoteObjectNotFoundError,
    RemoteStorageError,
    TieredLogError,
    TopicExistsError,
    TopicNotFoundError,
    TopicUnavailableError,
)
from ..format.records import EncodedBatch, ProducerRecord, receive_batches
from .auth import AuthenticationError, Authenticator, PermissionDeniedError, Principal
from .fetch import fetch_frames, fetch_records
from .metrics import CONTENT_TYPE, Family, Registry
from .topics import (
    MAX_PARTITIONS,
    PartitionLog,
    Topic,
    TopicManager,
    partition_bounds,
    partition_stats,
    validate_topic_name,
)
from .wire import (
    BINARY,
    FRAMES,
    H_HIGH_WATERMARK,
    H_LOG_START,
    H_NEXT_OFFSET,
    H_RECORD_COUNT,
    JSON,
    MAX_BATCH_RECORDS,
    MAX_OFFSET,
    TOPIC_NAME_PATTERN,
    Bounds,
    CreateTopicRequest,
    ErrorResponse,
    FetchResponse,
    Health,
    InvalidRequestError,
    OffsetForTimestamp,
    ProduceRequest,
    ProduceResponse,
    ShuttingDownError,
    TopicDescription,
    TopicList,
    TruncateRequest,
    UnsupportedMediaTypeError,
    error_json,
    record_to_json,
)

log = logging.getLogger("tiered_log.service")
T = TypeVar("T")


_STATUS: dict[type[BaseException], int] = {
    AuthenticationError: 401,
    PermissionDeniedError: 403,
    InvalidTopicNameError: 400,
    TopicNotFoundError: 404,
    TopicExistsError: 409,
    TopicUnavailableError: 503,
    RecordTooLargeError: 413,
    UnsupportedMediaTypeError: 415,
    InvalidRequestError: 400,
    InvalidOffsetError: 400,
    InvalidArgumentError: 400,
    OffsetOutOfRangeError: 416,
    DataLossError: 410,
    LogClosedError: 503,
    RemoteObjectNotFoundError: 502,
    RemoteCorruptionError: 502,
    RemoteStorageError: 503,
    CorruptRecordError: 500,
    CorruptIndexError: 500,
}


def status_of(exc: TieredLogError) -> int:
    """The HTTP status of a library error (see the module docstring)."""
    for cls in type(exc).__mro__:
        if cls in _STATUS:
            return _STATUS[cls]
    return 503 if exc.retriable else 500


# ---- shared state ---------------------------------------------------------------------------


class Waiters:
    """Per-partition wake-ups for long-polling fetches. Event-loop thread only."""

    def __init__(self) -> None:
        self._events: dict[tuple[str, int], asyncio.Event] = {}

    def event(self, key: tuple[str, int]) -> asyncio.Event:
        ev = self._events.get(key)
        if ev is None:
            ev = self._events[key] = asyncio.Event()
        return ev

    def notify(self, key: tuple[str, int]) -> None:
        ev = self._events.pop(key, None)
        if ev is not None:
            ev.set()

    def notify_all(self) -> None:
        for key in list(self._events):
            self.notify(key)


class ServiceMetrics:
    """The service's metrics; per-topic counters plus log stats read at scrape time."""

    _STATS: tuple[tuple[str, str, str, str], ...] = (
        ("copy_lag_bytes", "tiered_log_copy_lag_bytes", "gauge",
         "Bytes of sealed segments not yet copied to the remote tier."),
        ("copy_lag_segments", "tiered_log_copy_lag_segments", "gauge",
         "Sealed segments not yet copied to the remote tier."),
        ("local_bytes", "tiered_log_local_bytes", "gauge", "Bytes of segments on local disk."),
        ("remote_bytes", "tiered_log_remote_bytes", "gauge", "Bytes of segments in the remote tier."),
        ("uploaded_bytes", "tiered_log_remote_copy_bytes_total", "counter",
         "Bytes copied to the remote tier."),
        ("uploaded_segments", "tiered_log_remote_copy_segments_total", "counter",
         "Segments copied to the remote tier."),
        ("copy_failures", "tiered_log_remote_copy_errors_total", "counter",
         "Failed segment copies."),
        ("remote_fetch_bytes", "tiered_log_remote_fetch_bytes_total", "counter",
         "Bytes read from the remote tier."),
        ("remote_fetch_requests", "tiered_log_remote_fetch_requests_total", "counter",
         "Ranged reads from the remote tier."),
        ("remote_fetch_errors", "tiered_log_remote_fetch_errors_total", "counter",
         "Failed reads from the remote tier."),
        ("remote_fetch_throttled_ms", "tiered_log_remote_fetch_throttled_ms_total", "counter",
         "Milliseconds remote reads waited for the fetch quota (remote_fetch_bytes_per_sec)."),
        ("cache_hits", "tiered_log_remote_cache_hits_total", "counter",
         "Remote reads served by the chunk cache."),
        ("cache_misses", "tiered_log_remote_cache_misses_total", "counter",
         "Remote reads that missed the chunk cache."),
    )

    def __init__(self, topics: TopicManager) -> None:
        self.topics = topics
        r = self.registry = Registry()
        self.append_requests = r.counter("tiered_log_append_requests_total",
                                         "Append requests that stored records.", ["topic"])
        self.append_records = r.counter("tiered_log_append_records_total",
                                        "Records appended.", ["topic"])
        self.append_bytes = r.counter("tiered_log_append_bytes_total",
                                      "Bytes of record values and keys appended.", ["topic"])
        self.fetch_requests = r.counter("tiered_log_fetch_requests_total",
                                        "Fetch requests answered, by form.", ["topic", "format"])
        self.fetch_records = r.counter("tiered_log_fetch_records_total",
                                       "Records returned by fetches.", ["topic"])
        self.fetch_bytes = r.counter("tiered_log_fetch_bytes_total",
                                     "Bytes of record frames returned by fetches.", ["topic"])
        self.http_requests = r.counter("tiered_log_http_requests_total",
                                       "HTTP requests answered, by method and status.",
                                       ["method", "status"])
        r.add_collector(self._collect_logs)

    def _collect_logs(self) -> Iterable[Family]:
        per_topic: dict[str, dict[str, float]] = {}
        starts: list[tuple[tuple[str, ...], float]] = []
        nexts: list[tuple[tuple[str, ...], float]] = []
        for topic in self.topics.list():
            sums = dict.fromkeys((k for k, *_ in self._STATS), 0.0)
            for i, plog in enumerate(topic.logs):
                if plog.closed:
                    continue
                try:
                    st = partition_stats(plog)
                    b = partition_bounds(plog)
                except TieredLogError:
                    continue
                for k in sums:
                    sums[k] += st.get(k, 0.0)
                starts.append(((topic.name, str(i)), float(b.log_start_offset)))
                nexts.append(((topic.name, str(i)), float(b.next_offset)))
            per_topic[topic.name] = sums
        out = [
            Family(name, kind, help, ("topic",),
                   tuple(((t,), sums[key]) for t, sums in sorted(per_topic.items())))
            for key, name, kind, help in self._STATS
        ]
        out.append(Family("tiered_log_partition_log_start_offset", "gauge",
                          "First offset of the partition (either tier).", ("topic", "partition"),
                          tuple(starts)))
        out.append(Family("tiered_log_partition_next_offset", "gauge",
                          "Offset the next append to the partition gets.", ("topic", "partition"),
                          tuple(nexts)))
        return out

    def forget_topic(self, name: str) -> None:
        self.registry.remove_label_value("topic", name)


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


# ---- middleware -----------------------------------------------------------------------------


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
                    code, status = ("request_too_large", 413) if n > limit else ("invalid_request", 400)
                    msg = (f"request body exceeds the limit of {limit} bytes" if status == 413
                           else "invalid Content-Length")
                    resp = JSONResponse(error_json(code, msg), status_code=status,
                                        headers={"Connection": "close"})
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


# ---- helpers --------------------------------------------------------------------------------

bearer = HTTPBearer(auto_error=False, description="A token from the server's auth_tokens.")


def _state(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.service
    return state


async def authenticated(
    request: Request, _: Annotated[Any, Depends(bearer)] = None
) -> Principal:
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


async def _run(state: ServiceState, topic: str, fn: Callable[..., T], *args: Any) -> T:
    """Run a blocking log call in a thread; a log closed under us becomes 404 or 503."""
    try:
        return await asyncio.to_thread(fn, *args)
    except LogClosedError:
        if state.is_stopping or state.topics.closed:
            raise ShuttingDownError("the service is shutting down") from None
        if not state.topics.exists(topic):
            raise TopicNotFoundError(f"topic {topic!r} does not exist") from None
        raise


def _describe(topic: Topic) -> dict[str, Any]:
    infos = []
    for i, plog in enumerate(topic.logs):
        try:
            b = partition_bounds(plog)
        except LogClosedError:
            continue
        infos.append({"partition": i, **b.as_dict(), "remote_damage": plog.remote_damage()})
    return {**topic.meta.as_dict(), "partition_info": infos}


def _validation_message(errors: Iterable[Any]) -> str:
    parts = []
    for err in list(errors)[:5]:
        loc = ".".join(str(p) for p in err.get("loc", ()))
        msg = str(err.get("msg", "invalid"))
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, "):]
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts) or "invalid request"


def wants_binary(accept: str | None) -> bool:
    """Whether ``Accept`` prefers the binary (record batches) form over JSON."""
    if not accept:
        return False
    q_bin = 0.0
    q_json = 0.0
    for part in accept.split(","):
        fields = [f.strip() for f in part.split(";")]
        media = fields[0].lower()
        q = 1.0
        for f in fields[1:]:
            if f.lower().startswith("q="):
                try:
                    q = float(f[2:])
                except ValueError:
                    q = 0.0
        if media == BINARY:
            q_bin = max(q_bin, q)
        elif media == JSON:
            q_json = max(q_json, q)
    return q_bin > 0 and q_bin >= q_json


async def _read_value(request: Request, limit: int) -> bytes:
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


async def _read_body(request: Request) -> bytes:
    """The whole request body (bounded by the middleware: 413 past ``max_request_bytes``)."""
    try:
        return await request.body()
    except ClientDisconnect:
        raise InvalidRequestError("the client went away before the body was complete") from None


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


def _is_json(media: str) -> bool:
    """Whether a media type (lower case, no parameters) is JSON: ``application/json`` or
    ``application/<anything>+json``. A missing type is not: a body is only taken for
    JSON when it says so (a web page can send a body without a type, or as
    ``text/plain`` or a form, cross-origin with no CORS preflight)."""
    return media == JSON or (media.startswith("application/") and media.endswith("+json"))


async def json_content(request: Request) -> None:
    """Dependency of the routes whose body is JSON: 415 unless the Content-Type is JSON
    (see :func:`_is_json`). Declared after the grant, so 401/403 come first."""
    media = _media_type(request)
    if not _is_json(media):
        raise UnsupportedMediaTypeError(
            f"Content-Type must be {JSON}, not {media or 'missing'!r}")


JsonContent = Annotated[None, Depends(json_content)]


# ---- the app --------------------------------------------------------------------------------

_ERR = {"model": ErrorResponse}


def _errs(*codes: int) -> dict[int | str, dict[str, Any]]:
    desc = {400: "Invalid request", 401: "Missing or invalid bearer token",
            403: "The token lacks the grant", 404: "No such topic or partition",
            409: "The topic exists", 410: "The data was removed", 413: "Too large",
            415: "Unsupported content type", 416: "Offset out of range",
            503: "Shutting down or remote tier unavailable"}
    return {c: {**_ERR, "description": desc.get(c, "Error")} for c in codes}


TopicPath = Annotated[str, Path(
    description="Topic name: 1-200 of A-Z a-z 0-9 . _ - (others are 400 invalid_topic_name).",
    json_schema_extra={"pattern": TOPIC_NAME_PATTERN},
)]
PartitionPath = Annotated[int, Path(ge=0, le=MAX_PARTITIONS - 1, description="Partition index.")]

_PRODUCE_DOC = """Append records to a partition.

Three forms:

* `Content-Type: application/vnd.tiered-log.frames` (the fast binary form): the body is
  record batches in the stored layout, the same a binary fetch returns (see
  `tiered_log/format/records.py`: u64 base offset, u32 size, u64 xxh3 checksum, u16 magic, u16 attributes, u32 count, then columns (i64 timestamps, i32 key lengths, u32 value lengths, u32 header-block lengths) and the keys, values and header blocks; little-endian). The base offsets in the body are
  ignored (the log assigns consecutive ones) but every batch's checksum is verified
  against the base offset it carries, and its attributes must be 0 (the format defines
  no attribute bit): a bad or truncated batch is 400 naming it, and nothing is stored.
  A negative timestamp means the server's clock. At most 10,000 records; each value
  bounded by the topic's `append_threshold` (413, nothing stored); an empty body is 400.
  Appended all-or-nothing, as sent (offsets and checksums rewritten, nothing else
  re-encoded).
* `Content-Type: application/json` (or `application/*+json`; a body without a
  Content-Type is 415, never read as JSON): a batch
  `{"records": [{"value": "text"} | {"value_b64": "..."}, ...]}`; each record may also
  have `key` (text) or `key_b64`, `headers` (`{"name": "text"}` or
  `[{"name": "n", "value_b64": "..."}]`) and `timestamp` (ms). The batch is appended
  all-or-nothing at consecutive offsets.
* `Content-Type: application/octet-stream`: the body, streamed, is the value of ONE
  record (key and timestamp from the query). Bounded by the topic's `append_threshold`:
  past it the answer is 413 and nothing is stored.

The answer comes once the records are durable per the topic's flush policy
(`flush_messages=1`, the default: fsynced); `durable` says whether they were fsynced.
"""

_FETCH_DOC = """Read records from `offset` on (from either tier), at most `max_records` and
about `max_bytes` (at least one record when there is one).

JSON by default: record bytes as text when valid UTF-8 (`value`, `key`, header `value`),
else base64 (`value_b64`, ...). With `Accept: application/octet-stream` the body is the
record batches exactly as stored (see `tiered_log/format/records.py`: u64 base offset, u32 size, u64 xxh3 checksum, u16 magic, u16 attributes, u32 count, then columns (i64 timestamps, i32 key lengths, u32 value lengths, u32 header-block lengths) and the keys, values and header blocks; little-endian)
and the headers X-Next-Offset, X-High-Watermark, X-Log-Start-Offset, X-Record-Count
carry the offsets. As in Kafka the body is whole batches: the first may hold records
below `offset` (skip them) and the last may run past `max_records`; X-Record-Count
counts the records from `offset` to X-Next-Offset.

At exactly the next offset the answer is empty; `wait_ms` > 0 then waits up to that long
for new records. An offset below the log start or past the next offset is 416 with
both bounds in `error.details`.
"""


def create_app(settings: Settings, topics: TopicManager | None = None) -> FastAPI:
    """The ASGI app. ``topics`` may be loaded already (the server does it before
    listening, to fail early); otherwise the app's startup loads it."""
    manager = topics if topics is not None else TopicManager(settings)
    preloaded = topics is not None
    state = ServiceState(settings, manager)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.stopping = asyncio.Event()
        if not preloaded:
            await asyncio.to_thread(manager.load)
        task = asyncio.create_task(_maintenance(state), name="tiered-log-maintenance")
        try:
            yield
        finally:
            state.begin_shutdown()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await asyncio.to_thread(manager.close)
            log.info("all logs flushed and closed")

    app = FastAPI(
        title="tiered-log",
        version="0.1.0",
        description="A segmented, append-only commit log with a tiered remote store. "
        "Errors are always JSON `{\"error\": {\"code\", \"message\", \"retriable\"}}`.",
        lifespan=lifespan,
    )
    app.state.service = state
    app.add_middleware(ServiceMiddleware, state=state)
    _install_error_handlers(app)

    @app.get("/healthz", response_model=Health, tags=["service"])
    async def healthz() -> dict[str, Any]:
        """Liveness: 200 while the server runs (``status`` is ``stopping`` on shutdown).
        Needs no token, so it says nothing else (no topic count, no data)."""
        return {"status": "stopping" if state.is_stopping else "ok"}

    @app.get("/metrics", response_class=Response, tags=["service"],
             responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}},
                              "description": "Prometheus text format"}, **_errs(401)})
    async def metrics(principal: Authenticated) -> Response:
        """Prometheus metrics: appends and fetches (records, bytes) per topic, copy lag,
        remote fetch bytes and errors, remote cache hits/misses, partition offsets.

        The per-topic series are those of the topics the token has a grant on (the
        topics ``GET /v1/topics`` lists it); the service-wide series (HTTP requests by
        method and status) are there for every token."""
        only = None if principal.grants is None else ("topic", principal.allows_any)
        text = await asyncio.to_thread(state.metrics.registry.render, only=only)
        return Response(text, media_type=CONTENT_TYPE)

    # ---- topics ----

    @app.post("/v1/topics", status_code=201, response_model=TopicDescription, tags=["topics"],
              responses=_errs(400, 401, 403, 409, 413, 415))
    async def create_topic(body: CreateTopicRequest, principal: Authenticated,
                           _json: JsonContent) -> dict[str, Any]:
        """Create a topic (needs ``admin`` on its name). Per-topic config overrides the
        server's topic defaults."""
        validate_topic_name(body.name)
        state.auth.authorize(principal, body.name, "admin")
        overrides = body.config.model_dump(exclude_unset=True)
        topic = await asyncio.to_thread(manager.create, body.name, body.partitions, overrides)
        return await asyncio.to_thread(_describe, topic)

    @app.get("/v1/topics", response_model=TopicList, tags=["topics"], responses=_errs(401))
    async def list_topics(principal: Authenticated) -> dict[str, Any]:
        """Every topic the token has any grant on."""
        return {"topics": [t.meta.as_dict() for t in manager.list() if principal.allows_any(t.name)]}

    @app.get("/v1/topics/{topic}", response_model=TopicDescription, tags=["topics"],
             responses=_errs(400, 401, 403, 404))
    async def describe_topic(topic: TopicPath,
                             _: ReadGrant) -> dict[str, Any]:
        """A topic's config and the bounds of each partition."""
        t = manager.get(topic)
        return await asyncio.to_thread(_describe, t)

    @app.delete("/v1/topics/{topic}", status_code=204, response_class=Response, tags=["topics"],
                responses=_errs(400, 401, 403, 404))
    async def delete_topic(topic: TopicPath, _: AdminGrant) -> Response:
        """Delete a topic and all of its records."""
        partitions = manager.get(topic).meta.partitions
        await asyncio.to_thread(manager.delete, topic)
        state.metrics.forget_topic(topic)
        for p in range(partitions):  # long polls on it end (and then answer 404)
            state.waiters.notify((topic, p))
        return Response(status_code=204)

    # ---- records ----

    @app.post(
        "/v1/topics/{topic}/partitions/{partition}/records",
        response_model=ProduceResponse,
        tags=["records"],
        description=_PRODUCE_DOC,
        responses=_errs(400, 401, 403, 404, 413, 415, 503),
        openapi_extra={"requestBody": {"required": True, "content": {
            JSON: {"schema": {"$ref": "#/components/schemas/ProduceRequest"}},
            BINARY: {"schema": {"type": "string", "format": "binary"}},
            FRAMES: {"schema": {"type": "string", "format": "binary",
                                "description": "Record frames (see the description)."}},
        }}},
    )
    async def produce(
        request: Request,
        topic: TopicPath,
        partition: PartitionPath,
        _: WriteGrant,
        key: Annotated[str | None, Query(description="Key (text) of a raw-body record.")] = None,
        timestamp: Annotated[int | None, Query(ge=0, le=MAX_INT,
                                               description="Timestamp (ms) of a raw-body record.")] = None,
    ) -> Response:
        plog = manager.partition(topic, partition)
        media = _media_type(request)
        # Each form ends in a parse step that runs with the append in ONE worker-thread
        # call (_parse_and_append): decoding costs CPU, and one thread hop is cheaper.
        parse: Callable[..., list[ProducerRecord | bytes] | EncodedBatch]
        args: tuple[Any, ...]
        if media == BINARY:
            limit = manager.get(topic).meta.config.append_threshold
            value = await _read_value(request, limit)
            kb = None
            if key is not None:
                try:
                    kb = key.encode("utf-8")
                except UnicodeEncodeError:
                    raise InvalidRequestError("key is not valid text") from None
            parse, args = _one_record, (ProducerRecord(value, kb, (), timestamp),)
        elif media == FRAMES:
            if key is not None or timestamp is not None:
                raise InvalidRequestError("key and timestamp query parameters are for raw bodies; "
                                          "a batch carries its own")
            limit = manager.get(topic).meta.config.append_threshold
            body = await _read_body(request)
            if not body:
                raise InvalidRequestError("the body holds no record batches")
            parse, args = _parse_frames, (body, limit)
        elif _is_json(media):
            if key is not None or timestamp is not None:
                raise InvalidRequestError("key and timestamp query parameters are for raw bodies; "
                                          "give them per record in a JSON batch")
            body = await _read_body(request)
            parse, args = _parse_batch, (body,)
        else:
            raise UnsupportedMediaTypeError(
                f"Content-Type must be {JSON}, {FRAMES} or {BINARY}, not {media or 'missing'!r}")
        done = await _run(state, topic, _parse_and_append, plog, parse, *args)
        m = state.metrics
        m.append_requests.inc(topic)
        m.append_records.inc(topic, amount=done.count)
        m.append_bytes.inc(topic, amount=done.payload_bytes)
        state.waiters.notify((topic, partition))
        first, last = done.first, done.last
        # Built here rather than validated against ProduceResponse (the documented model):
        # the offsets list of a big batch made that validation a visible cost.
        return Response(json.dumps(
            {"offsets": list(range(first, last + 1)), "first_offset": first,
             "last_offset": last, "durable": done.durable},
            separators=(",", ":")).encode(), media_type=JSON)

    @app.get(
        "/v1/topics/{topic}/partitions/{partition}/records",
        tags=["records"],
        description=_FETCH_DOC,
        response_model=None,
        responses={
            200: {"model": FetchResponse, "description": "Records (JSON or raw frames)",
                  "content": {BINARY: {"schema": {"type": "string", "format": "binary"}}},
                  "headers": {h: {"schema": {"type": "integer"},
                                  "description": "Binary form only"}
                              for h in (H_NEXT_OFFSET, H_HIGH_WATERMARK, H_LOG_START,
                                        H_RECORD_COUNT)}},
            **_errs(400, 401, 403, 404, 410, 416, 503),
        },
    )
    async def fetch(
        request: Request,
        topic: TopicPath,
        partition: PartitionPath,
        _: ReadGrant,
        offset: Annotated[int, Query(ge=0, le=MAX_OFFSET, description="First offset to read.")],
        max_records: Annotated[int, Query(ge=1, le=10_000)] = 500,
        max_bytes: Annotated[int, Query(ge=1, le=(1 << 31) - 1,
                                        description="Capped by the server's max_fetch_bytes.")] = 1 << 20,
        wait_ms: Annotated[int, Query(ge=0, le=30_000,
                                      description="At the end of the log, wait this long for records.")] = 0,
    ) -> Response:
        plog = manager.partition(topic, partition)
        max_bytes = min(max_bytes, state.settings.max_fetch_bytes)
        key = (topic, partition)
        m = state.metrics
        if wants_binary(request.headers.get("accept")):
            fb = await _poll(state, key, wait_ms,
                             lambda: _run(state, topic, fetch_frames, plog, offset, max_records,
                                          max_bytes),
                             lambda r: r.count == 0)
            m.fetch_requests.inc(topic, "binary")
            m.fetch_records.inc(topic, amount=fb.count)
            m.fetch_bytes.inc(topic, amount=len(fb.data))
            b = fb.bounds
            return Response(fb.data, media_type=BINARY, headers={
                H_NEXT_OFFSET: str(fb.next_offset), H_HIGH_WATERMARK: str(b.high_watermark),
                H_LOG_START: str(b.log_start_offset), H_RECORD_COUNT: str(fb.count)})
        body, count, size = await _poll(
            state, key, wait_ms,
            lambda: _run(state, topic, _json_fetch, plog, offset, max_records, max_bytes),
            lambda r: r[1] == 0)
        m.fetch_requests.inc(topic, "json")
        m.fetch_records.inc(topic, amount=count)
        m.fetch_bytes.inc(topic, amount=size)
        return Response(body, media_type=JSON)

    @app.get("/v1/topics/{topic}/partitions/{partition}/offsets", response_model=OffsetForTimestamp,
             tags=["records"], responses=_errs(400, 401, 403, 404, 503))
    async def offset_for_timestamp(
        topic: TopicPath,
        partition: PartitionPath,
        timestamp: Annotated[int, Query(ge=-(1 << 62), le=1 << 62, description="Milliseconds.")],
        _: ReadGrant,
    ) -> dict[str, Any]:
        """The first offset whose record timestamp is at or after ``timestamp`` (null if
        none: then consume from ``next_offset``)."""
        plog = manager.partition(topic, partition)
        found = await _run(state, topic, plog.offset_for_timestamp, timestamp)
        b = await _run(state, topic, partition_bounds, plog)
        return {"timestamp": timestamp, "offset": found, "next_offset": b.next_offset}

    @app.get("/v1/topics/{topic}/partitions/{partition}/bounds", response_model=Bounds,
             tags=["records"], responses=_errs(400, 401, 403, 404, 503))
    async def bounds(topic: TopicPath, partition: PartitionPath,
                     _: ReadGrant) -> dict[str, Any]:
        """Log start, local start, high watermark, next and flushed offsets."""
        plog = manager.partition(topic, partition)
        b = await _run(state, topic, partition_bounds, plog)
        return b.as_dict()

    # ---- remote segments (for readers that fetch archived segments from the bucket) ----

    def _remote_segments(plog: PartitionLog) -> dict[str, Any]:
        """The body of ``GET .../remote-segments`` (in a worker thread: reads index files).

        Segments are a snapshot of the finished copies, clipped to ``[log_start_offset,
        remote_end_offset)``; a log without a remote tier has none.
        """
        b = partition_bounds(plog)
        remote = plog.remote
        out: dict[str, Any] = {
            "log_id": plog.log_id,
            "remote_url": remote.storage.url if remote is not None else None,
            "log_start_offset": b.log_start_offset,
            "local_start_offset": b.local_start_offset,
            "remote_end_offset": remote.remote_end if remote is not None else b.log_start_offset,
            "high_watermark": b.high_watermark,
            "next_offset": b.next_offset,
            "segments": [],
        }
        if remote is None:
            return out
        out["segments"] = remote.archived_segments(b.log_start_offset)
        return out

    @app.get("/v1/topics/{topic}/partitions/{partition}/remote-segments", tags=["records"],
             responses=_errs(400, 401, 403, 404, 503))
    async def remote_segments(topic: TopicPath, partition: PartitionPath,
                              _: ReadGrant) -> dict[str, Any]:
        """The partition's bounds and its finished remote segments, each with its ``.log``
        object key and its remoteLogIndex chunks ``[first_offset, last_offset,
        first_timestamp, last_timestamp, position, length]``: what a reader (the Spark
        source) needs to fetch archived records from the bucket itself with ranged GETs,
        without listing it. Object keys are relative to ``remote_url``."""
        plog = manager.partition(topic, partition)
        return await _run(state, topic, _remote_segments, plog)

    @app.post("/v1/topics/{topic}/partitions/{partition}/truncate", response_model=Bounds,
              tags=["records"], responses=_errs(400, 401, 403, 404, 415, 416, 503))
    async def truncate(body: TruncateRequest, topic: TopicPath, partition: PartitionPath,
                       _: AdminGrant, _json: JsonContent) -> dict[str, Any]:
        """Remove every record at and after ``offset`` (needs ``admin``); returns the new
        bounds. ``offset`` must be within ``[log_start_offset, next_offset]``."""
        plog = manager.partition(topic, partition)
        await _run(state, topic, plog.truncate, body.offset)
        b = await _run(state, topic, partition_bounds, plog)
        return b.as_dict()

    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _parse_batch(body: bytes) -> list[ProducerRecord | bytes]:
    """The records of a JSON produce body (in a worker thread: parsing and base64 cost
    CPU); InvalidRequestError / InvalidArgumentError when malformed."""
    try:
        batch = ProduceRequest.model_validate_json(body)
    except ValidationError as exc:
        raise InvalidRequestError(_validation_message(
            exc.errors(include_url=False, include_input=False))) from None
    out: list[ProducerRecord | bytes] = []
    for i, rec in enumerate(batch.records):
        try:
            out.append(rec.to_producer_record())
        except InvalidArgumentError as exc:
            raise InvalidRequestError(f"records.{i}: {exc.message}") from None
    return out


@dataclass(frozen=True, slots=True)
class _Appended:
    """What :func:`_parse_and_append` did: the offsets, for the answer and the metrics."""

    first: int
    last: int
    count: int
    payload_bytes: int
    durable: bool


def _parse_and_append(plog: PartitionLog,
                      parse: Callable[..., list[ProducerRecord | bytes] | EncodedBatch],
                      *args: Any) -> _Appended:
    """``parse(*args)`` then append the records in one write (in a worker thread)."""
    records = parse(*args)
    first, last = plog.append_batch(records)
    if isinstance(records, EncodedBatch):
        return _Appended(first, last, records.count, records.payload_bytes,
                         plog.flushed_offset > last)
    return _Appended(first, last, len(records), _payload_bytes(records),
                     plog.flushed_offset > last)


def _one_record(record: ProducerRecord) -> list[ProducerRecord | bytes]:
    """The "parse" step of a raw body: its one record."""
    return [record]


def _parse_frames(body: bytes, append_threshold: int) -> EncodedBatch:
    """The batches of a binary produce body, every one verified, values bounded by
    ``append_threshold`` (RecordTooLargeError); a bad batch is InvalidRequestError naming
    it (the client sent it: 400, not a storage fault)."""
    try:
        return receive_batches(body, append_threshold, max_records=MAX_BATCH_RECORDS)
    except CorruptRecordError as exc:
        raise InvalidRequestError(f"bad record batch: {exc}") from None


def _payload_bytes(records: Iterable[ProducerRecord | bytes]) -> int:
    """Bytes of values and keys in ``records`` (the append_bytes metric)."""
    n = 0
    for r in records:
        if r.__class__ is bytes:
            n += len(r)
        elif isinstance(r, ProducerRecord):
            n += len(r.value) + len(r.key or b"")
    return n


def _json_fetch(plog: PartitionLog, offset: int, max_records: int,
                max_bytes: int) -> tuple[bytes, int, int]:
    """The JSON fetch body (built in a worker thread: base64 and JSON cost CPU), the
    record count and the records' frame bytes."""
    recs, b = fetch_records(plog, offset, max_records, max_bytes)
    body = json.dumps({
        "records": [record_to_json(r) for r in recs],
        "next_offset": recs[-1].offset + 1 if recs else offset,
        "high_watermark": b.high_watermark,
        "log_start_offset": b.log_start_offset,
    }, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return body, len(recs), sum(r.size for r in recs)


async def _poll(state: ServiceState, key: tuple[str, int], wait_ms: int,
                read: Callable[[], Awaitable[T]], empty: Callable[[T], bool]) -> T:
    """``read()``; when it comes back empty and ``wait_ms`` > 0, wait for an append to
    the partition (or shutdown, or the time) and read once more."""
    ev = state.waiters.event(key)  # taken before reading: no append can slip between
    result = await read()
    if wait_ms and empty(result) and not state.is_stopping:
        await _wait_for(ev, state.stopping, wait_ms / 1000)
        result = await read()
    return result


async def _wait_for(ev: asyncio.Event, stopping: asyncio.Event | None, timeout: float) -> None:
    waits = [asyncio.ensure_future(ev.wait())]
    if stopping is not None:
        waits.append(asyncio.ensure_future(stopping.wait()))
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


async def _maintenance(state: ServiceState) -> None:
    """Periodic time-based flush, roll and retention of every log."""
    interval = state.settings.maintenance_interval_ms / 1000
    while True:
        await asyncio.sleep(interval)
        try:
            await asyncio.to_thread(state.topics.maintain)
        except Exception:
            log.exception("log maintenance failed")


def _error_response(status: int, code: str, message: str, *, retriable: bool = False,
                    details: dict[str, Any] | None = None,
                    headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_json(code, message, retriable=retriable, details=details),
                        status_code=status, headers=headers)


def _install_error_handlers(app: FastAPI) -> None:
    async def on_library_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, TieredLogError)
        status = status_of(exc)
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        details = None
        if isinstance(exc, OffsetOutOfRangeError):
            details = {"log_start_offset": exc.log_start, "next_offset": exc.next_offset}
        message = exc.message if hasattr(exc, "message") else str(exc)
        if status >= 500:
            log.log(logging.WARNING if exc.retriable else logging.ERROR, "%s %s failed: %s: %s",
                    request.method, request.url.path, type(exc).__name__, message)
        return _error_response(status, exc.code, message, retriable=exc.retriable,
                               details=details, headers=headers)

    async def on_validation_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        errors = [{k: v for k, v in e.items() if k in ("loc", "msg")} for e in exc.errors()]
        return _error_response(400, "invalid_request", _validation_message(errors))

    async def on_http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        codes = {400: "invalid_request", 401: "unauthenticated", 403: "permission_denied",
                 404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}
        code = codes.get(exc.status_code, "http_error")
        msg = exc.detail if isinstance(exc.detail, str) else "request failed"
        if exc.status_code == 404 and msg == "Not Found":
            msg = f"no such endpoint: {request.method} {request.url.path}"
        headers = dict(exc.headers) if exc.headers else None
        if exc.status_code == 405:
            headers = {**(headers or {}), "Allow": ", ".join(_allowed_methods(request))}
        if exc.status_code == 413:
            headers = {**(headers or {}), "Connection": "close"}
        return _error_response(exc.status_code, code, msg, headers=headers)

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        log.error("%s %s failed unexpectedly", request.method, request.url.path, exc_info=exc)
        return _error_response(500, "internal_error", "internal server error")

    app.add_exception_handler(TieredLogError, on_library_error)
    app.add_exception_handler(RequestValidationError, on_validation_error)
    app.add_exception_handler(StarletteHTTPException, on_http_error)
    app.add_exception_handler(Exception, on_unexpected)


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route takes at this path (Starlette lists one route's only)."""
    from starlette.routing import Match, Route

    methods: set[str] = set()
    for route in request.app.routes:
        if isinstance(route, Route) and route.methods:
            match, _ = route.matches({**request.scope, "method": next(iter(route.methods))})
            if match != Match.NONE:
                methods |= route.methods
    return sorted(methods)


def _documented_models(app: FastAPI) -> list[tuple[type[BaseModel], JsonSchemaMode]]:
    """Every model the routes take (validation) or answer (serialization), plus the JSON
    produce body (read by the handler itself, so no route declares it)."""
    out: dict[tuple[type[BaseModel], JsonSchemaMode], None] = {
        (ProduceRequest, "validation"): None, (ErrorResponse, "serialization"): None}

    def add(model: object, mode: JsonSchemaMode) -> None:
        if isinstance(model, type) and issubclass(model, BaseModel):
            out[(model, mode)] = None

    for route in app.routes:
        if not isinstance(route, APIRoute):
            continue
        if route.body_field is not None:
            add(route.body_field.field_info.annotation, "validation")
        add(route.response_model, "serialization")
        for extra in route.responses.values():
            add(extra.get("model"), "serialization")
    return list(out)


def _openapi(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI document: our error shape for 400 (FastAPI's 422 removed), the JSON
    produce body's schema, and every model's schema exactly as pydantic writes it from
    the models the server validates with (FastAPI's own pass turns integer bounds into
    floats: 2**63 - 1 became 9.223372036854776e+18, which is not the server's bound)."""
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, description=app.description,
                         routes=app.routes)
    comps = schema.setdefault("components", {}).setdefault("schemas", {})
    _, defs = models_json_schema(_documented_models(app),
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
    app.openapi_schema = schema
    return schema


__all__ = ["ServiceState", "create_app", "status_of", "wants_binary"]
