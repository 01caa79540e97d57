"""Zero-copy responses: record batches go from their files to the socket with ``sendfile``.

A binary fetch answers stored batches as they are (disk format == bucket format == wire
format), so the bytes never need to pass through the program: the log says *where* they
lie (:meth:`TieredLog.read_batch_ranges <tiered_log.partition.log.TieredLog.read_batch_ranges>`,
a :class:`~tiered_log.local.ranges.FetchRanges` of segment-file and chunk-cache-file
ranges, checked where they lie in the page cache) and the kernel copies them from the
page cache to the socket (``os.sendfile``). Two halves, joined by ASGI's own extension
for this, ``http.response.zerocopysend``:

- **The app side**, :class:`RangesResponse`: sends the response head, then one
  ``http.response.zerocopysend`` message per file range (``file``: the open
  :class:`~tiered_log.local.files.ReadFd`, ``offset``, ``count``) and an
  ``http.response.body`` message for a piece that only exists in memory. Where the
  server does not offer the extension (TLS, where the kernel cannot encrypt; an
  in-process test client) it reads the ranges (in a worker thread) and sends bytes.
- **The server side**, :func:`install` (called by
  :class:`~tiered_log.service.http_protocol.HardenedHttpProtocol` for every request of
  a plain TCP connection): offers the extension in the request's scope and answers its
  messages. For each range it first waits until the connection's write buffer is empty
  (the head and every earlier piece are on the wire: nothing may overtake them), then a
  thread of :data:`SENDERS` ``sendfile``\\ s the range on a duplicate of the socket's
  descriptor (the socket is non-blocking: between sends the thread waits for room with
  ``poll``; the event loop is never blocked, by a slow client or by a page not in the
  cache). Chunked answers get their chunk framing around the range.

Failure: a client that takes nothing for :data:`SEND_IDLE_TIMEOUT_S` seconds, a peer
gone (``EPIPE``/``ECONNRESET``) or a file shorter than the range (cut by a truncation
after the read checked it) ends the connection: its ``Content-Length`` can no longer be
honoured, so the client sees a short body, never a wrong one (and it verifies every
batch's checksum anyway).

Thread-safety: :class:`RangesResponse` and the send path run on the event loop; only
the ``sendfile`` loop runs in a :data:`SENDERS` thread, on its own duplicate descriptor,
while the loop writes nothing else to that connection (the response is in progress:
uvicorn starts a pipelined request's answer only after it completes, and the protocol
answers a rejection only where no response is under way).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import select
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from ..local.ranges import FetchRanges, FileRange

log = logging.getLogger(__name__)

EXTENSION = "http.response.zerocopysend"
"""The ASGI extension (and message type) for sending a file range as a response body."""
SEND_IDLE_TIMEOUT_S = 30.0
"""A client that accepts no byte for this long while a range is sent loses its connection."""
SENDER_THREADS = 32
"""Threads that may ``sendfile`` at once (each waits in ``poll`` while a client is slow)."""

_senders: ThreadPoolExecutor | None = None
_senders_lock = threading.Lock()


def senders() -> ThreadPoolExecutor:
    """The process-wide pool of ``sendfile`` threads (made on first use)."""
    global _senders
    with _senders_lock:
        if _senders is None:
            _senders = ThreadPoolExecutor(SENDER_THREADS, thread_name_prefix="tl-sendfile")
        return _senders


class SendError(Exception):
    """A range could not be sent whole (the connection must end)."""


def sendfile_all(
    sock_fd: int, file_fd: int, offset: int, count: int, idle_timeout_s: float = SEND_IDLE_TIMEOUT_S
) -> None:
    """Send ``count`` bytes of ``file_fd`` from ``offset`` to the non-blocking socket
    ``sock_fd``, waiting (``poll``) while its buffer is full. SendError when the peer is
    gone, takes nothing for ``idle_timeout_s``, or the file ends early. Blocks: call it
    from a thread."""
    poller = select.poll()
    poller.register(sock_fd, select.POLLOUT)
    sent = 0
    while sent < count:
        try:
            n = os.sendfile(sock_fd, file_fd, offset + sent, count - sent)
        except BlockingIOError:
            if not poller.poll(idle_timeout_s * 1000):
                raise SendError(f"the client took nothing for {idle_timeout_s:g} s") from None
            continue
        except InterruptedError:
            continue
        except OSError as exc:
            if exc.errno in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.EBADF):
                raise SendError(f"the client is gone ({exc.strerror})") from None
            raise SendError(f"sendfile failed: {exc}") from None
        if n == 0:
            raise SendError(f"the file ended {count - sent} bytes before the range did")
        sent += n


class RangesResponse(Response):
    """A 200 answer whose body is a :class:`~tiered_log.local.ranges.FetchRanges`,
    sent without copying where the server offers :data:`EXTENSION` (see the module
    docstring). Closes the ranges once sent (or on an error)."""

    def __init__(
        self, ranges: FetchRanges, media_type: str, headers: dict[str, str] | None = None
    ) -> None:
        self.ranges = ranges
        self.status_code = 200
        self.media_type = media_type
        self.background = None
        self.body = b""
        self.init_headers({**(headers or {}), "content-length": str(ranges.size)})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ranges = self.ranges
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": self.status_code,
                    "headers": self.raw_headers,
                }
            )
            zero = EXTENSION in scope.get("extensions", {})
            parts = ranges.parts
            last = len(parts) - 1
            for i, part in enumerate(parts):
                more = i < last
                if isinstance(part, FileRange):
                    if zero:
                        await send(
                            {
                                "type": EXTENSION,
                                "file": part.fd,
                                "offset": part.position,
                                "count": part.length,
                                "more_body": more,
                            }
                        )
                        continue
                    body: bytes | memoryview = await asyncio.to_thread(
                        part.fd.pread, part.length, part.position
                    )
                    if len(body) != part.length:
                        raise SendError(f"a file ended {part.length - len(body)} bytes early")
                else:
                    body = part
                await send({"type": "http.response.body", "body": bytes(body), "more_body": more})
            if not parts:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            ranges.close()


async def drained(transport: asyncio.WriteTransport) -> None:
    """Return once everything written to ``transport`` is on the wire (or it closes);
    SendError when the client takes nothing for :data:`SEND_IDLE_TIMEOUT_S`. Also the
    Kafka listener's, before it sends a fetch answer's file range."""
    if not transport.get_write_buffer_size():
        return
    # A bounded poll: the head (a few hundred bytes) usually leaves within one turn of
    # the loop; a client slow to read keeps us here, and then the idle timeout applies.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SEND_IDLE_TIMEOUT_S
    turns = 0
    while transport.get_write_buffer_size() and not transport.is_closing():
        if loop.time() > deadline:
            raise SendError(f"the client took nothing for {SEND_IDLE_TIMEOUT_S:g} s")
        await asyncio.sleep(0 if turns < 4 else 0.001)
        turns += 1


def offers_zerocopy(transport: asyncio.BaseTransport) -> bool:
    """Whether ranges can be sent on ``transport`` with ``sendfile``: a plain TCP socket
    (no TLS: the kernel would send the bytes unencrypted) on a system that has it."""
    if not hasattr(os, "sendfile") or transport.get_extra_info("sslcontext") is not None:
        return False
    sock = transport.get_extra_info("socket")
    return sock is not None and hasattr(sock, "fileno")


def install(scope: dict[str, Any], cycle: Any, transport: asyncio.WriteTransport) -> None:
    """Offer :data:`EXTENSION` in a request's ``scope`` and answer its messages in the
    uvicorn request/response ``cycle`` of that request, on ``transport`` (see the module
    docstring). The cycle's other messages go to its own ``send``."""
    scope.setdefault("extensions", {})[EXTENSION] = {}
    original: Callable[[Message], Awaitable[None]] = cycle.send

    async def send(message: Message) -> None:
        if message["type"] != EXTENSION:
            await original(message)
            return
        if cycle.disconnected:
            return
        if not cycle.response_started or cycle.response_complete:
            raise RuntimeError(f"unexpected ASGI message {EXTENSION!r} outside a response body")
        file = message["file"]
        file_fd = file if isinstance(file, int) else file.fileno()
        offset = int(message.get("offset", 0) or 0)
        count = message.get("count")
        if count is None:
            count = os.fstat(file_fd).st_size - offset
        more = bool(message.get("more_body", False))
        if count and scope["method"] != "HEAD":
            if cycle.chunked_encoding:
                transport.write(b"%x\r\n" % count)
            else:
                if count > cycle.expected_content_length:
                    raise RuntimeError("Response content longer than Content-Length")
                cycle.expected_content_length -= count
            try:
                await drained(transport)
                if transport.is_closing():
                    return
                sock_fd = os.dup(transport.get_extra_info("socket").fileno())
                try:
                    await asyncio.get_running_loop().run_in_executor(
                        senders(), sendfile_all, sock_fd, file_fd, offset, count
                    )
                finally:
                    os.close(sock_fd)
            except SendError as exc:
                log.info("%s: ending the connection: %s", scope.get("path", ""), exc)
                cycle.disconnected = True
                with contextlib.suppress(Exception):
                    transport.close()
                return
            if cycle.chunked_encoding:
                transport.write(b"\r\n")
        # The cycle's own completion (the chunked terminator, keep-alive, the next
        # pipelined request): an empty body piece.
        await original({"type": "http.response.body", "body": b"", "more_body": more})

    cycle.send = send


__all__ = [
    "EXTENSION",
    "SENDER_THREADS",
    "SEND_IDLE_TIMEOUT_S",
    "RangesResponse",
    "SendError",
    "drained",
    "install",
    "offers_zerocopy",
    "senders",
    "sendfile_all",
]
