"""One Kafka client connection: a raw asyncio :class:`asyncio.BufferedProtocol` (no
ASGI, no streams; the socket reads into the connection's buffers) that cuts the bytes
into size-prefixed frames, answers each request in the
order it came, and closes the connection on what Kafka's broker closes it on.

Frames (see :mod:`tiered_log.kafka.messages`): int32 size, then the request. A client
may pipeline (send requests before the answers to earlier ones came): frames queue here
and one task per connection answers them one after another, as Kafka's broker handles
one request of a connection at a time, so two produces to a partition on a connection
are appended in the order sent and every answer goes out in request order.

Refusals, as Kafka's broker makes them:

- ApiVersions at a version not served: answered at v0 with UNSUPPORTED_VERSION and the
  served ranges (the client then retries at a version it finds there);
- any other API or version not served, a size below 8 or above ``max_frame_bytes``, a
  header or body that does not decode: one log line, the connection closed (the
  server and every other connection go on);
- an error inside a handler that is not a Kafka error code: logged with its traceback,
  the connection closed.

Timeouts: a request half-sent (bytes of a frame received, then none for ``stall_s``,
the service's ``body_timeout_s``) closes the connection with a log line; so does a
connection idle for :data:`IDLE_S` (nothing sent, no request in flight).

A client that closes its end: the produces it sent before are still appended (an
``acks=0`` producer may close right after sending), its other requests are dropped.

Receive buffers: the socket reads into the connection's own buffers (asyncio's
buffered protocol). A frame of at least :data:`_DIRECT_BYTES` is read straight into a
buffer of its own, which is kept for a later large frame once its request is answered
and nothing refers to it any more (:data:`_SPARES` of them at most,
:data:`_SPARE_MAX_BYTES` in all, none once the connection goes quiet: a producer
pipelines its requests), so a producer's stream of large Produce requests does not
allocate (and zero-fill) fresh memory for each; smaller frames are cut from one shared
buffer.

Back-pressure: reading pauses while :data:`MAX_QUEUED` requests wait or the transport's
write buffer is over its high-water mark, and resumes as they go out.

Zero copy: a Fetch answer's stored batches are file ranges
(:func:`~tiered_log.kafka.messages.encode_fetch_response`); once the bytes before a range
are on the wire, a thread of the service's ``sendfile`` pool
(:func:`tiered_log.service.zerocopy.senders`) sends it from the file to a duplicate of
the socket's descriptor, as the HTTP binary fetch does, while the answer loop waits
(nothing else writes to the connection meanwhile). A range that cannot be sent whole
(the client gone or silent for
:data:`~tiered_log.service.zerocopy.SEND_IDLE_TIMEOUT_S`, a file cut short) ends the
connection: the frame's size can no longer be honoured. Where the transport has no
socket to send on, the ranges are read (in a worker thread) and written.

Authentication: with a ``guard`` whose service has tokens, the connection must
authenticate with SASL/PLAIN first and its requests are authorized by the token's
grants (:mod:`tiered_log.kafka.auth`); a refused authentication is answered, then the
connection is closed.

Concurrency: every method runs on the listener's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import struct
import sys
from collections import deque
from typing import cast

from kio.schema.errors import ErrorCode

from ..local.ranges import FileRange
from ..service.zerocopy import SendError, drained, offers_zerocopy, senders, sendfile_all
from .auth import KafkaGuard
from .handlers import Handlers, api_versions_body
from .messages import (
    API_VERSIONS,
    APIS,
    FETCH,
    PRODUCE,
    BadFrame,
    Piece,
    encode_body,
    encode_fetch_response,
    encode_response,
    frame_response,
    is_supported,
    parse_request,
    peek_header,
)

log = logging.getLogger("tiered_log.kafka")

MAX_QUEUED = 64
"""Requests read ahead of their answers before reading pauses."""

IDLE_S = 600.0
"""A connection that sends nothing and waits for no answer this long is closed (Kafka's
``connections.max.idle.ms`` default)."""

_DIRECT_BYTES = 64 * 1024
"""A frame at least this big is received straight into a buffer of its own size (the
socket reads into it: no copy of its bytes in this program) instead of through the
connection's shared buffer."""
_SPARES = 4
"""Buffers of answered large frames a connection keeps for the next ones."""
_SPARE_MAX_BYTES = 16 << 20
"""The most a connection keeps in spare buffers (a larger frame's is not kept); a
connection quiet for a timeout check's tick keeps none."""
_RECV_BYTES = 256 * 1024
"""The connection's shared receive buffer: smaller frames are cut from it (a copy each)."""
_RECV_MIN = 16 * 1024
"""Free bytes at the shared buffer's end below which a read first moves the incomplete
frame at its start to the front."""

_SIZE = struct.Struct(">i")
_PRODUCE_KEY = struct.pack(">h", PRODUCE)


class KafkaConnection(asyncio.BufferedProtocol):
    """One client connection (see the module docstring). ``connections``: the
    listener's set of open ones, which this adds itself to and removes itself from."""

    def __init__(
        self,
        handlers: Handlers,
        max_frame_bytes: int,
        connections: set[KafkaConnection],
        *,
        stall_s: float = 20.0,
        idle_s: float = IDLE_S,
        guard: KafkaGuard | None = None,
    ) -> None:
        self.handlers = handlers
        self.sasl = guard.session() if guard is not None else None
        self.max_frame_bytes = max_frame_bytes
        self.connections = connections
        self.stall_s = stall_s
        self.idle_s = idle_s
        self._last_rx = 0.0
        self._last_active = 0.0
        self._busy = False
        self._timer: asyncio.TimerHandle | None = None
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.client_host = ""
        self._rbuf = bytearray(_RECV_BYTES)  # small frames: [_start, _end) not yet cut
        self._start = self._end = 0
        self._big: memoryview | None = None  # a large frame being received, and how much of it
        self._big_at = 0
        self._spares: list[bytearray] = []  # large frames' buffers, free to take the next
        self._queue: deque[bytes | memoryview] = deque()
        self._ready = asyncio.Event()
        self._can_write = asyncio.Event()
        self._can_write.set()
        self._paused = False
        self._closing = False
        self._draining = False
        self._lost = False
        self._task: asyncio.Task[None] | None = None
        self._zerocopy = False

    # ---- asyncio.Protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.client_host = f"/{peer[0]}" if isinstance(peer, tuple) else ""
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._zerocopy = offers_zerocopy(transport)
        self.connections.add(self)
        loop = asyncio.get_running_loop()
        self._last_rx = self._last_active = loop.time()
        self._task = loop.create_task(self._answer_loop())
        self._tick = min(5.0, max(0.05, min(self.stall_s, self.idle_s) / 4))
        self._timer = loop.call_later(self._tick, self._check_timeouts)

    def _check_timeouts(self) -> None:
        """Close a connection whose request stopped half-sent for ``stall_s``, or that
        has sent nothing and waited for nothing for ``idle_s``; else look again later."""
        if self._closing or self._lost or self._draining:
            return
        loop = asyncio.get_running_loop()
        now = loop.time()
        half_sent = self._end > self._start or self._big is not None
        if half_sent and now - self._last_rx >= self.stall_s:
            self._drop(f"a request half-sent: no byte for {self.stall_s:g} s")
            return
        quiet = not half_sent and not self._queue and not self._busy
        if quiet and now - self._last_active >= self._tick:
            self._spares.clear()  # no stream of large requests under way: free them
        if quiet and now - self._last_active >= self.idle_s:
            log.info("kafka connection from %s closed: idle for %g s", self.peer, self.idle_s)
            self._close()
            return
        self._timer = loop.call_later(self._tick, self._check_timeouts)

    def get_buffer(self, sizehint: int) -> memoryview:
        big = self._big
        if big is not None:  # a large frame under way: the socket reads straight into it
            return big[self._big_at :]
        buf = self._rbuf
        if self._end == len(buf) or (self._start and len(buf) - self._end < _RECV_MIN):
            # Move the incomplete frame at the buffer's start to make room after it.
            n = self._end - self._start
            with memoryview(buf) as view:
                view[:n] = bytes(view[self._start : self._end])  # regions may overlap
            self._start, self._end = 0, n
        return memoryview(buf)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        if self._closing or self._draining or self._lost:
            return
        self._last_rx = self._last_active = asyncio.get_running_loop().time()
        big = self._big
        if big is not None:
            self._big_at += nbytes
            if self._big_at == len(big):
                self._big = None
                self._queue.append(big)
                self._ready.set()
                if len(self._queue) >= MAX_QUEUED:
                    self._pause()
            return
        self._end += nbytes
        self._cut_frames()

    def _cut_frames(self) -> None:
        """Queue every whole frame of the shared buffer (a copy each), and start a large
        frame's own buffer when one begins in it."""
        buf = self._rbuf
        pos, end = self._start, self._end
        low, high = 8, self.max_frame_bytes
        if self.sasl is not None:
            low, high = self.sasl.frame_bounds(high)
        queued = False
        view = memoryview(buf)
        while end - pos >= 4:
            (size,) = _SIZE.unpack_from(buf, pos)
            if size < low or size > high:
                view.release()
                self._drop(f"a frame of {size} bytes (allowed: {low} to {high})")
                return
            if end - pos - 4 < size:
                if size >= _DIRECT_BYTES:  # the rest of it goes straight into its own buffer
                    frame = self._frame_buffer(size)
                    got = end - pos - 4
                    frame[:got] = view[pos + 4 : end]
                    self._big, self._big_at = frame, got
                    pos = end
                break
            self._queue.append(bytes(view[pos + 4 : pos + 4 + size]))
            queued = True
            pos += 4 + size
        view.release()
        if pos == end:
            pos = end = 0
        self._start, self._end = pos, end
        if queued:
            self._ready.set()
        if len(self._queue) >= MAX_QUEUED:
            self._pause()

    def _frame_buffer(self, size: int) -> memoryview:
        """A buffer for a large frame of ``size`` bytes: a spare one that fits (at most
        twice the size), else a new one."""
        spares = self._spares
        for i, buf in enumerate(spares):
            if size <= len(buf) <= 2 * size:
                del spares[i]
                return memoryview(buf)[:size]
        return memoryview(bytearray(size))

    def _recycle(self, frame: memoryview) -> None:
        """Keep a large frame's buffer for a later one (up to :data:`_SPARES` of them and
        :data:`_SPARE_MAX_BYTES` in all: a client pipelines) once its request is
        answered, if nothing refers to it any more (no view of it alive: a request's
        records are views of its frame until the append copied them); else it is left
        to the garbage collector. A buffer is never reused while any of its bytes can be
        read."""
        buf = frame.obj
        try:
            frame.release()
        except BufferError:  # a view of it is in use
            return
        del frame
        # Our reference and the call's: no other object, no live view (each holds one).
        alone = sys.getrefcount(buf) == 2
        if alone and isinstance(buf, bytearray) and len(buf) <= _SPARE_MAX_BYTES:
            spares = self._spares
            spares.append(buf)
            while len(spares) > _SPARES or sum(map(len, spares)) > _SPARE_MAX_BYTES:
                spares.remove(min(spares, key=len))

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        # The produces the client sent before it closed are still appended (an acks=0
        # producer closes right after sending), as Kafka's broker handles a request it
        # has read; other requests are dropped, and no answer is written.
        self._lost = True
        self.connections.discard(self)
        self._ready.set()
        self._can_write.set()

    def pause_writing(self) -> None:
        self._can_write.clear()

    def resume_writing(self) -> None:
        self._can_write.set()

    # ---- answering -----------------------------------------------------------------------

    async def _answer_loop(self) -> None:
        try:
            while not self._closing:
                if not self._queue:
                    if self._draining or self._lost:
                        return
                    self._ready.clear()
                    if self._paused:
                        self._resume()
                    await self._ready.wait()
                    continue
                frame = self._queue.popleft()
                if self._lost and frame[:2] != _PRODUCE_KEY:
                    continue
                self._busy = True
                try:
                    answer = await self._answer(frame)
                finally:
                    self._busy = False
                    self._last_active = asyncio.get_running_loop().time()
                if isinstance(frame, memoryview):
                    self._recycle(frame)
                del frame
                if self._closing or self._lost or self.transport is None:
                    continue
                if isinstance(answer, bytes):
                    self.transport.write(answer)
                    await self._can_write.wait()
                elif answer is not None:
                    await self._write_pieces(answer)
                if self.sasl is not None and self.sasl.closing:
                    self._drop(self.sasl.closing)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("kafka connection from %s failed; closing it", self.peer)
            self._close()

    async def _write_pieces(self, pieces: list[Piece]) -> None:
        """Write a response frame of pieces (see the module docstring: file ranges with
        ``sendfile``); a range that cannot be sent whole ends the connection."""
        transport = self.transport
        assert transport is not None
        try:
            for piece in pieces:
                if self._closing or self._lost:
                    return
                if isinstance(piece, bytes):
                    transport.write(piece)
                elif self._zerocopy:
                    await drained(transport)
                    if transport.is_closing():
                        return
                    sock_fd = os.dup(transport.get_extra_info("socket").fileno())
                    try:
                        await asyncio.get_running_loop().run_in_executor(
                            senders(),
                            sendfile_all,
                            sock_fd,
                            piece.fd.fileno(),
                            piece.position,
                            piece.length,
                        )
                    finally:
                        os.close(sock_fd)
                else:
                    transport.write(await asyncio.to_thread(_read_range, piece))
                await self._can_write.wait()
        except SendError as exc:
            self._drop(f"a fetch answer not sent whole: {exc}")

    async def _answer(self, frame: bytes | memoryview) -> bytes | list[Piece] | None:
        """The response frame to ``frame`` (None: none due, or the connection closed);
        a Fetch answer as pieces (its stored batches as file ranges)."""
        sasl = self.sasl
        if sasl is not None and sasl.raw_expected:
            return sasl.raw_token(frame)
        try:
            key, version, correlation = peek_header(frame)
            if sasl is not None:
                sasl.admit(key)
            if not is_supported(key, version):
                if key == API_VERSIONS:
                    body = encode_body(
                        API_VERSIONS, 0, api_versions_body(ErrorCode.unsupported_version)
                    )
                    return frame_response(API_VERSIONS, 0, correlation, body)
                spec = APIS.get(key)
                what = f"{spec.name} v{version}" if spec else f"API key {key} (v{version})"
                raise BadFrame(f"{what} is not served")
            req = parse_request(frame, self.client_host)
        except BadFrame as exc:
            self._drop(str(exc))
            return None
        if sasl is not None:
            try:
                answer = await sasl.handle(req)
            except BadFrame as exc:  # an API its token may not use
                self._drop(str(exc))
                return None
        else:
            answer = await self.handlers.handle(req)
        if answer is None:
            return None
        if key == FETCH:
            return encode_fetch_response(version, correlation, answer)
        return encode_response(key, version, correlation, answer)

    # ---- closing -------------------------------------------------------------------------

    def _drop(self, why: str) -> None:
        log.warning("kafka connection from %s closed: %s", self.peer, why)
        self._close()

    def _close(self) -> None:
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
        self._queue.clear()
        self._ready.set()
        if self.transport is not None:
            self.transport.close()

    def _pause(self) -> None:
        if not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def _resume(self) -> None:
        if self._paused and self.transport is not None and not self._closing:
            self._paused = False
            self.transport.resume_reading()

    async def close(self, grace_s: float) -> None:
        """Stop reading, let the request being answered finish (up to ``grace_s``),
        then close (the listener's shutdown)."""
        self._queue.clear()
        self._draining = True
        self._ready.set()
        if self.transport is not None and not self._closing:
            self.transport.pause_reading()
        if self._task is not None:
            done, _ = await asyncio.wait([self._task], timeout=grace_s)
            if not done:
                self._task.cancel()
        if self.transport is not None:
            self.transport.close()


def _read_range(piece: FileRange) -> bytes:
    """A file range's bytes (where ``sendfile`` cannot be used); SendError when the file
    ends before the range does."""
    data = piece.fd.pread(piece.length, piece.position)
    if len(data) != piece.length:
        raise SendError(f"a file ended {piece.length - len(data)} bytes before its range")
    return data


__all__ = ["MAX_QUEUED", "KafkaConnection"]
