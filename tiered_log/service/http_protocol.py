"""The HTTP/1.1 connection protocol the service runs on: uvicorn's httptools protocol with
the limits a server exposed to untrusted clients needs, and JSON answers for what it
refuses below the app.

:class:`HardenedHttpProtocol` (one instance per connection, built by uvicorn from the
class that :func:`protocol_class` binds to an :class:`HttpLimits`) adds:

- **A cap on the request head** (request line and header fields, ``max_head_bytes``) and
  the same cap on a chunked body's trailer section. The parser is fed at most the bytes
  left under the cap while a head is unfinished, so no more than the cap is ever
  buffered for it; one byte over answers ``431`` and the connection is closed. (A head
  that starts inside the same read as the end of the request before it, i.e. a
  pipelined one, is counted from the next read on: it may reach the cap plus one read.)
- **A header timeout** (``header_timeout_s``): a connection that has not sent a whole
  request head this long after it opened, or after the first byte of a following
  request, is closed (``408`` when part of a head came, silently when nothing did).
  Between requests, uvicorn's keep-alive timeout applies as before; while a request is
  being answered no timeout runs.
- **A body timeout** (``body_timeout_s``, ``body_min_bytes_per_s``): a request body that
  brings no bytes for ``body_timeout_s``, or arrives slower on average than
  ``body_min_bytes_per_s`` after a grace of ``body_timeout_s`` (a byte a second), is
  answered ``408`` and the connection closed; the app sees a disconnect, so nothing of
  it is stored. Time during which the server itself is not reading (back-pressure, a
  pipelined request waiting its turn, ``Expect: 100-continue`` not yet answered) does
  not count.
- **Server stalls do not count against a client**: the header, body and keep-alive
  timeouts run on :class:`StallClock`, a clock of the event loop that stops while the
  loop does not run (the process stopped by ``SIGSTOP``, suspended, starved of CPU, or
  a callback blocking the loop), and a timeout that comes due while the client's bytes
  are waiting unread in the socket is put off until they are read: the bytes were
  there, the server was not reading them. A client that really sends nothing, or
  trickles, is still cut off.
- **Transfer codings**: a request whose ``Transfer-Encoding`` holds any coding other than
  ``chunked`` is answered ``501`` (RFC 9112, 6.1) before the app sees it.
- **Zero-copy bodies**: on a plain TCP connection every request's scope offers ASGI's
  ``http.response.zerocopysend`` extension, answered with ``sendfile``
  (:mod:`~tiered_log.service.zerocopy`): a binary fetch's batches go from their files
  to the socket without passing through the program.
- **JSON rejections**: what the parser refuses (bad chunk sizes, ``Content-Length`` with
  ``Transfer-Encoding``, two ``Content-Length``s, control characters in a header, ...) is
  answered ``400`` with the API's error body, ``{"error": {"code": "invalid_request",
  "message", "retriable": false}}``, instead of uvicorn's plain-text one.

Every rejection is answered only where no earlier response on the connection could be
interleaved with it (else the connection is just closed), carries ``Connection: close``,
marks every request of the connection still being answered as disconnected (its app
sees ``http.disconnect`` and what it sends is dropped; uvicorn never finds an app that
returned without completing its response),
and is followed by a short lingering close: the write side is shut, what the client
still sends is read and dropped for up to :data:`LINGER_S` seconds or
:data:`LINGER_BYTES` bytes, then the connection is closed. Closing at once with unread
data would reset the connection and often destroy the answer before the client reads it.

Async-safety: a protocol instance is driven by uvicorn's event loop only (its callbacks
and timers all run on that loop's thread); nothing here is thread-safe or needs to be.
"""

from __future__ import annotations

import asyncio
import json
import logging
import select
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import httptools
from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import (
    STATUS_LINE,
    HttpToolsProtocol,
    RequestResponseCycle,
)
from uvicorn.server import ServerState

from . import zerocopy

log = logging.getLogger("tiered_log.service.http")

LINGER_S = 2.0
"""After a rejection, how long the client's further bytes are read and dropped at most."""
LINGER_BYTES = 4 << 20
"""After a rejection, how many of the client's further bytes are read and dropped at most."""
STALL_TICK_S = 0.1
"""How often :class:`StallClock` looks whether its loop runs."""
STALL_SLACK_S = 0.25
"""How late a :class:`StallClock` tick may come before the rest of the gap is a stall."""
MAX_DEFERRALS = 8
"""How many times in a row a due timeout is put off because the client's bytes wait
unread in the socket (each time until the loop's next turn has read them)."""


class StallClock:
    """A clock of one event loop that stops while the loop does not run: the time a
    client's timeouts are measured in.

    A tick every :data:`STALL_TICK_S` notes the loop's time; a gap between ticks longer
    than :data:`STALL_TICK_S` + :data:`STALL_SLACK_S` is a stall (the process was
    stopped, suspended or starved, or a callback blocked the loop), and the part of it
    past that allowance does not count. :meth:`now` counts a stall still in progress
    too, so a timer that runs before the first tick after a stall already sees it.
    Get the clock of a loop with :meth:`of`.

    Async-safety: one instance per event loop, used from that loop's thread only.
    """

    _clocks: ClassVar[weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, StallClock]] = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._last = loop.time()
        self._stalled = 0.0
        loop.call_later(STALL_TICK_S, self._tick)

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop) -> StallClock:
        """The clock of ``loop`` (started on first use). Call it on ``loop``'s thread."""
        clock = cls._clocks.get(loop)
        if clock is None:
            clock = cls._clocks[loop] = cls(loop)
        return clock

    def _pending(self, t: float) -> float:
        return max(0.0, t - self._last - STALL_TICK_S - STALL_SLACK_S)

    def _tick(self) -> None:
        t = self.loop.time()
        self._stalled += self._pending(t)
        self._last = t
        self.loop.call_later(STALL_TICK_S, self._tick)

    def now(self) -> float:
        """The loop's time less every stall so far (never decreases)."""
        t = self.loop.time()
        return t - self._stalled - self._pending(t)


@dataclass(frozen=True)
class HttpLimits:
    """The connection limits of :class:`HardenedHttpProtocol`. Immutable; shared by all
    connections of a server."""

    max_head_bytes: int = 64 << 10
    """Largest request head (request line and header fields, with their line ends);
    also the largest trailer section of a chunked body."""
    header_timeout_s: float = 10.0
    """How long a request head may take to arrive, from its first byte (or the opening
    of the connection)."""
    body_timeout_s: float = 20.0
    """How long a request body may bring no bytes; also the grace before
    ``body_min_bytes_per_s`` applies."""
    body_min_bytes_per_s: int = 500
    """Slowest average body rate accepted once ``body_timeout_s`` has passed; 0: none."""


class _Rejection(Exception):
    """Raised inside a parser callback to stop parsing and answer with an error."""

    def __init__(self, status: int, code: str, message: str, retriable: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.retriable = retriable


class HardenedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools HTTP/1.1 protocol with a capped head, header and body timeouts,
    501 for transfer codings other than chunked and JSON error answers (see the module
    docstring). One instance per connection; runs on the event loop only."""

    limits: ClassVar[HttpLimits] = HttpLimits()

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        # True from the connection's start, or the end of a request, until the next
        # request's head is complete: bytes read then are head bytes.
        self._in_head = True
        self._head_bytes = 0
        self._transfer_codings: list[bytes] = []
        # After a chunk header, until a body byte: if what follows is not chunk data it
        # is the trailer section, capped like a head.
        self._maybe_trailer = False
        self._trailer_bytes = 0
        self._body_start = 0.0
        self._body_last = 0.0
        self._body_bytes = 0
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._linger_timer: asyncio.TimerHandle | None = None
        self._rejection: _Rejection | None = None
        self._lingering = False
        self._linger_bytes = 0
        self._zerocopy = False  # the connection can send file ranges (zerocopy.py)
        self._clock: StallClock | None = None
        self._head_since = 0.0  # stall-clock time the head timer counts from
        self._keepalive_since = 0.0  # stall-clock time the keep-alive timer counts from
        self._deferrals = 0  # timeouts put off in a row for unread bytes
        # The cycle whose app runs (self.cycle is the newest; with pipelining, an older
        # one may still be answered).
        self._running: RequestResponseCycle | None = None

    # ---- connection events ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._clock = StallClock.of(self.loop)
        self._zerocopy = zerocopy.offers_zerocopy(transport)
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        self._disconnect_cycles()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        self._deferrals = 0
        if self._lingering:
            self._linger_bytes += len(data)
            if self._linger_bytes > LINGER_BYTES:
                self.transport.close()
            return
        self._unset_keepalive_if_required()
        view = memoryview(data)
        cap = self.limits.max_head_bytes
        while len(view):
            if self._in_head:
                if self._head_timer is None and not self._request_in_flight():
                    self._arm_head_timer()
                room = cap - self._head_bytes
                if room <= 0:
                    self._reject(
                        431,
                        "request_header_too_large",
                        f"the request head is larger than {cap} bytes",
                    )
                    return
                piece, view = view[:room], view[room:]
                self._head_bytes += len(piece)
            elif self._maybe_trailer:
                room = cap - self._trailer_bytes
                if room <= 0:
                    self._reject(
                        431,
                        "request_header_too_large",
                        f"the request's trailer section is larger than {cap} bytes",
                    )
                    return
                piece, view = view[:room], view[room:]
                self._trailer_bytes += len(piece)
            else:
                piece, view = view, view[len(view) :]
            if not self._feed(piece):
                return
        if not self._in_head and self._body_timer is None and not self.transport.is_closing():
            self._body_timer = self.loop.call_later(self.limits.body_timeout_s, self._on_body_timer)

    def _feed(self, piece: memoryview) -> bool:
        """Parse ``piece``; False when the connection is done with (rejected or upgraded)."""
        try:
            self.parser.feed_data(piece)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self._cancel_timers()
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
            return False
        except httptools.HttpParserError as exc:
            rejection = self._rejection
            if rejection is None:
                reason = str(exc) or "malformed request"
                if isinstance(exc.__context__, httptools.HttpParserInvalidURLError):
                    # Raised by uvicorn's own URL parsing inside a callback.
                    reason = "the request target is not a valid or parseable URL path"
                rejection = _Rejection(400, "invalid_request", f"invalid HTTP request: {reason}")
            self._reject(rejection.status, rejection.code, rejection.message, rejection.retriable)
            return False
        return True

    # ---- parser callbacks ----------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._transfer_codings = []
        super().on_message_begin()

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._in_head and name.lower() == b"transfer-encoding":
            self._transfer_codings.extend(
                c for c in (t.strip().lower() for t in value.split(b",")) if c
            )
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._cancel_head_timer()
        bad = [c for c in self._transfer_codings if c != b"chunked"]
        if bad:
            self._rejection = _Rejection(
                501,
                "not_implemented",
                f"transfer coding {bad[0].decode('latin-1')!r} is not supported; "
                "send the body as is or chunked",
            )
            raise self._rejection
        super().on_headers_complete()  # on an exception, still in the head (answerable)
        cycle = self.cycle
        if cycle is not None and cycle.scope is self.scope:
            if self._zerocopy:
                zerocopy.install(self.scope, cycle, self.transport)  # type: ignore[arg-type]
            cycle.send = self._guarded_send(  # type: ignore[method-assign,assignment]
                cycle, cycle.send
            )
        self._in_head = False
        self._maybe_trailer = False
        self._body_start = self._body_last = self._now()
        self._body_bytes = 0

    def on_chunk_header(self) -> None:
        self._maybe_trailer = True
        self._trailer_bytes = 0

    def on_body(self, body: bytes) -> None:
        self._maybe_trailer = False
        self._body_bytes += len(body)
        self._body_last = self._now()
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._in_head = True
        self._head_bytes = 0
        self._maybe_trailer = False
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        super().on_message_complete()

    # ---- the app's side -------------------------------------------------------------------

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: Any) -> None:
        self._running = cycle
        super()._start_asgi_task(cycle, app)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._keepalive_since = self._now()

    def _guarded_send(
        self, cycle: RequestResponseCycle, send: Callable[[Any], Awaitable[None]]
    ) -> Callable[[Any], Awaitable[None]]:
        """``send`` of ``cycle``, marking the cycle disconnected when its response can no
        longer complete because the connection is closing (a send that returned without
        writing, e.g. a zero-copy range on a connection that closed meanwhile): the app
        then sees a disconnect, and uvicorn does not take its return for an app that
        left its response unfinished."""
        transport = self.transport

        async def guarded(message: Any) -> None:
            await send(message)
            if not cycle.response_complete and transport.is_closing():
                cycle.disconnected = True
                cycle.message_event.set()

        return guarded

    def _disconnect_cycles(self) -> None:
        """Mark every request of the connection not yet answered as disconnected (the
        running one, the newest and the pipelined ones waiting) and wake their apps."""
        cycles = [self._running, self.cycle, *(c for c, _ in self.pipeline)]
        for cycle in cycles:
            if cycle is not None and not cycle.response_complete:
                cycle.disconnected = True
                cycle.message_event.set()

    # ---- timeouts ------------------------------------------------------------------------

    def _now(self) -> float:
        """The connection's clock: the loop's time less its stalls (:class:`StallClock`)."""
        clock = self._clock
        return clock.now() if clock is not None else self.loop.time()

    def _unread_bytes_wait(self) -> bool:
        """Whether a due timeout must wait because the client's bytes (or its close) sit
        unread in the socket while reading is on: True at most :data:`MAX_DEFERRALS` times
        in a row (until data is received), so a socket the loop does not drain cannot
        hold a timeout off for ever."""
        if self._deferrals >= MAX_DEFERRALS or self.flow.read_paused:
            return False
        sock = self.transport.get_extra_info("socket")
        try:
            fd = sock.fileno() if sock is not None else -1
            if fd < 0:
                return False
            poller = select.poll()
            poller.register(fd, select.POLLIN | select.POLLPRI)
            ready = bool(poller.poll(0))
        except (OSError, ValueError):
            return False
        if ready:
            self._deferrals += 1
        return ready

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_since = self._now()
        self._head_timer = self.loop.call_later(self.limits.header_timeout_s, self._on_head_timer)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _on_head_timer(self) -> None:
        self._head_timer = None
        if not self._in_head or self._lingering or self.transport.is_closing():
            return
        if self._request_in_flight():
            # The head came pipelined behind a request still being answered: its own
            # time starts again from here.
            self._arm_head_timer()
            return
        left = self._head_since + self.limits.header_timeout_s - self._now()
        if left > 1e-3:  # the loop stalled meanwhile: that time was not the client's
            self._head_timer = self.loop.call_later(left, self._on_head_timer)
            return
        if self._unread_bytes_wait():  # read them first (the loop's next turn)
            self._head_timer = self.loop.call_later(0, self._on_head_timer)
            return
        if self._head_bytes == 0:
            self.transport.close()  # asked nothing: nothing to answer
            return
        t = self.limits.header_timeout_s
        self._reject(
            408,
            "request_timeout",
            f"the request head was not complete within {t:g} s",
            retriable=True,
        )

    def _on_body_timer(self) -> None:
        self._body_timer = None
        if self._in_head or self._lingering or self.transport.is_closing():
            return
        lim = self.limits
        now = self._now()
        cycle = self.cycle
        if self.flow.read_paused or (cycle is not None and cycle.waiting_for_100_continue):
            # Not the client's fault: the server does not read (yet). Start over.
            self._body_start = self._body_last = now
            self._body_bytes = 0
            self._body_timer = self.loop.call_later(lim.body_timeout_s, self._on_body_timer)
            return
        deadline = self._body_last + lim.body_timeout_s
        if lim.body_min_bytes_per_s:
            deadline = min(
                deadline,
                self._body_start + lim.body_timeout_s + self._body_bytes / lim.body_min_bytes_per_s,
            )
        if now + 1e-3 < deadline:
            self._body_timer = self.loop.call_later(deadline - now, self._on_body_timer)
            return
        if self._unread_bytes_wait():  # read them first (the loop's next turn)
            self._body_timer = self.loop.call_later(0, self._on_body_timer)
            return
        log.info(
            "%srequest body stalled: %d bytes in %.1f s",
            self._peer(),
            self._body_bytes,
            now - self._body_start,
        )
        self._reject(
            408, "request_timeout", "the request body stopped or arrived too slowly", retriable=True
        )

    def timeout_keep_alive_handler(self) -> None:
        """uvicorn's keep-alive timeout between requests, on the stall clock, and never
        while the next request's bytes wait unread in the socket."""
        self.timeout_keep_alive_task = None
        if self.transport.is_closing():
            return
        left = self._keepalive_since + self.timeout_keep_alive - self._now()
        if left > 1e-3:
            self.timeout_keep_alive_task = self.loop.call_later(
                left, self.timeout_keep_alive_handler
            )
            return
        if self._unread_bytes_wait():
            self.timeout_keep_alive_task = self.loop.call_later(0, self.timeout_keep_alive_handler)
            return
        super().timeout_keep_alive_handler()

    def _cancel_timers(self) -> None:
        for timer in (self._head_timer, self._body_timer, self._linger_timer):
            if timer is not None:
                timer.cancel()
        self._head_timer = self._body_timer = self._linger_timer = None

    # ---- rejections ----------------------------------------------------------------------

    def send_400_response(self, msg: str) -> None:
        """uvicorn's plain-text 400, answered as the API's JSON error instead."""
        self._reject(400, "invalid_request", f"invalid HTTP request: {msg}")

    def _request_in_flight(self) -> bool:
        """Whether an earlier request on this connection is still being answered."""
        return bool(self.pipeline) or (self.cycle is not None and not self.cycle.response_complete)

    def _can_answer(self) -> bool:
        """Whether an error response now would be the next response on the connection."""
        if self._in_head:
            return not self._request_in_flight()
        # Within the body of the request whose cycle is self.cycle.
        return not self.pipeline and self.cycle is not None and not self.cycle.response_started

    def _reject(self, status: int, code: str, message: str, retriable: bool = False) -> None:
        """Answer ``status`` with a JSON error (where it can be answered), stop reading
        requests from the connection and close it after a short lingering close."""
        answer = self._can_answer()
        log.log(
            logging.WARNING if status == 400 else logging.INFO,
            "%s%d %s: %s%s",
            self._peer(),
            status,
            code,
            message,
            "" if answer else " (closed unanswered)",
        )
        self._cancel_timers()
        self._unset_keepalive_if_required()
        self._lingering = True
        # The apps of the requests not yet answered see a disconnect; what they send is
        # dropped (this answer, if any, is the connection's last).
        self._disconnect_cycles()
        if not answer or self.transport.is_closing():
            self.transport.close()
            return
        body = json.dumps(
            {"error": {"code": code, "message": message, "retriable": retriable}},
            separators=(",", ":"),
        ).encode()
        content = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend(
            [
                b"content-type: application/json\r\n",
                b"content-length: %d\r\n" % len(body),
                b"connection: close\r\n\r\n",
                body,
            ]
        )
        self.transport.write(b"".join(content))
        self.flow.resume_reading()
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self._linger_timer = self.loop.call_later(LINGER_S, self.transport.close)

    def _peer(self) -> str:
        return f"{self.client[0]}:{self.client[1]} - " if self.client else ""


def protocol_class(limits: HttpLimits) -> type[HardenedHttpProtocol]:
    """A :class:`HardenedHttpProtocol` class bound to ``limits``, for uvicorn's
    ``Config(http=...)`` (uvicorn builds each connection's protocol from a class)."""

    class BoundHttpProtocol(HardenedHttpProtocol):
        pass

    BoundHttpProtocol.limits = limits
    return BoundHttpProtocol


__all__ = [
    "LINGER_BYTES",
    "LINGER_S",
    "MAX_DEFERRALS",
    "STALL_SLACK_S",
    "STALL_TICK_S",
    "HardenedHttpProtocol",
    "HttpLimits",
    "StallClock",
    "protocol_class",
]
