"""The kept-alive connection pool of record traffic (binary fetches and produces).

:class:`_RecordTraffic` sends record bodies over ``http.client`` (2-3x cheaper per MiB
than httpx); :class:`~tiered_log.client.Client` uses it directly,
:class:`~tiered_log.client.AsyncClient` from a worker thread. Small JSON requests stay on
httpx. Thread-safe: see :class:`_RecordTraffic`.
"""

from __future__ import annotations

import http.client
import select
import socket
import ssl
import threading
from collections.abc import Mapping
from urllib.parse import urlencode, urlsplit

import httpx

from ..errors import ConnectionFailedError
from .messages import RequestNotSentError, _check


def _readable(sock: socket.socket) -> bool:
    """Whether ``sock`` has something to read (or EOF) right now. ``poll``, not
    ``select``: a descriptor above FD_SETSIZE (1024) is fine."""
    if not hasattr(select, "poll"):  # Windows
        return bool(select.select([sock], [], [], 0)[0])
    p = select.poll()
    p.register(sock, select.POLLIN)
    return bool(p.poll(0))


class _HTTPConnection(http.client.HTTPConnection):
    """``http.client`` sends a request's headers and body in separate writes: with
    Nagle's algorithm on, the body's tail could wait for the server's delayed ACK."""

    def connect(self) -> None:
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _HTTPSConnection(http.client.HTTPSConnection):
    """:class:`_HTTPConnection` over TLS."""

    def connect(self) -> None:
        super().connect()
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _RecordTraffic:
    """The sync client's record traffic (binary fetch GETs, binary produce POSTs) over
    ``http.client``, with a small pool of kept-alive connections.

    Why not httpx: it moves a body through h11 in Python; nor urllib3: its response
    machinery. Measured on the project's 2-core VM against the service over loopback, one
    request at a time: a 1 MiB fetch took 6.4 ms through urllib3 and ~3 ms here; an 8 MiB
    one 17 and ~10 ms; a bare 1 MiB POST 3.1-3.5 ms through httpx and 1.8-2.3 ms through
    ``http.client``. Small JSON requests stay on httpx. Answers are wrapped as
    ``httpx.Response`` so errors map the same way.

    An idle connection the server has closed is noticed before reuse (its socket reads
    as ready) and dropped; a GET that still fails on a connection error (not a timeout)
    is tried twice more on new connections (GETs are idempotent); a POST is never
    retried (it may have been appended). A new connection that cannot be made (refused,
    unreachable, timed out; not a TLS failure) raises
    :class:`~tiered_log.client.messages.RequestNotSentError`: nothing was sent, which
    the routing (:mod:`tiered_log.client.routing`) may retry on another node; a failure
    after that raises a plain :class:`~tiered_log.errors.ConnectionFailedError`.
    Thread-safe: a connection serves one request at a time, taken from and returned to
    the pool under a lock. One pool serves one node (:class:`RecordPools`).
    """

    def __init__(
        self,
        base_url: str,
        headers: dict[str, str],
        timeout: float,
        verify: bool | str | ssl.SSLContext,
    ) -> None:
        u = urlsplit(base_url)
        self.base_url = base_url
        self.headers = headers
        self.timeout = timeout
        self.host = u.hostname or "localhost"
        self.prefix = u.path.rstrip("/")
        self.ctx: ssl.SSLContext | None = None
        if u.scheme == "https":
            if verify is False:
                self.ctx = ssl.create_default_context()
                self.ctx.check_hostname = False
                self.ctx.verify_mode = ssl.CERT_NONE
            elif isinstance(verify, ssl.SSLContext):
                self.ctx = verify
            else:
                self.ctx = ssl.create_default_context(
                    cafile=verify if isinstance(verify, str) else None
                )
        self.port = u.port or (443 if self.ctx is not None else 80)
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def _new(self) -> http.client.HTTPConnection:
        if self.ctx is not None:
            return _HTTPSConnection(self.host, self.port, timeout=self.timeout, context=self.ctx)
        return _HTTPConnection(self.host, self.port, timeout=self.timeout)

    def _take(self) -> http.client.HTTPConnection:
        """An idle connection still open, else a new one (connected on first use)."""
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._new()
            if conn.sock is not None and not _readable(conn.sock):
                return conn
            conn.close()  # readable while idle: the server closed it (or sent junk)

    def _connect(self, conn: http.client.HTTPConnection) -> None:
        """Connect a new connection; RequestNotSentError when it cannot be made."""
        try:
            conn.connect()
        except ssl.SSLError as exc:  # a certificate refused: no other node will do better
            conn.close()
            raise ConnectionFailedError(f"cannot reach {self.base_url}: {exc}") from exc
        except OSError as exc:
            conn.close()
            raise RequestNotSentError(f"cannot reach {self.base_url}: {exc}") from exc

    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, int | str] | None = None,
        body: bytes | None = None,
        headers: dict[str, str],
    ) -> httpx.Response:
        status, hdrs, data = self._exchange(method, path, params, body, headers, None)
        return _check(httpx.Response(status, headers=hdrs, content=bytes(data)))  # no copy: bytes

    def receive_into(
        self,
        path: str,
        *,
        params: Mapping[str, int | str],
        headers: dict[str, str],
        buffer: bytearray | None,
    ) -> tuple[httpx.Headers, memoryview]:
        """A GET whose successful answer's body is received into ``buffer`` when it fits
        (else into a new buffer), with ``recv_into`` and no other copy: the answer's
        headers and a view of its body. Errors as :meth:`request`."""
        status, hdrs, data = self._exchange(
            "GET", path, params, None, headers, buffer if buffer is not None else bytearray()
        )
        if status >= 400:
            _check(httpx.Response(status, headers=hdrs, content=bytes(data)))
        return httpx.Headers(hdrs), memoryview(data)

    def _exchange(
        self,
        method: str,
        path: str,
        params: Mapping[str, int | str] | None,
        body: bytes | bytearray | None,
        headers: dict[str, str],
        into: bytearray | None,
    ) -> tuple[int, list[tuple[str, str]], bytes | memoryview]:
        """One request on a pooled connection (retried as the class says): the answer's
        status, headers and body (a 2xx body with a length received into ``into`` when
        given, see :func:`_read_into`)."""
        url = self.prefix + path + ("?" + urlencode(params) if params else "")
        hdrs = {**self.headers, **headers}
        tries = 3 if method == "GET" else 1
        for attempt in range(tries):
            conn = self._take()
            if conn.sock is None:
                self._connect(conn)
            try:
                conn.request(method, url, body=body, headers=hdrs)
                r = conn.getresponse()
                data = r.read() if into is None or r.status >= 300 else _read_into(r, into)
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                if attempt + 1 < tries and not isinstance(exc, TimeoutError):
                    continue  # a broken connection, not a slow server: try a new one
                raise ConnectionFailedError(f"cannot reach {self.base_url}: {exc}") from exc
            if r.will_close:
                conn.close()
            else:
                with self._lock:
                    self._idle.append(conn)
            return r.status, r.getheaders(), data
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _read_into(r: http.client.HTTPResponse, buffer: bytearray) -> memoryview:
    """The body of ``r`` received into ``buffer`` when its length is known and it fits,
    else into a new buffer of that length (``recv_into`` on the socket for all but what
    the response's reader had buffered already); without a length, read whole."""
    n = r.length
    if n is None:
        return memoryview(r.read())
    view = memoryview(buffer if len(buffer) >= n else bytearray(n))[:n]
    got = 0
    while got < n:
        k = r.readinto(view[got:])
        if not k:
            raise http.client.IncompleteRead(bytes(view[:got]), n - got)
        got += k
    return view


class RecordPools:
    """One :class:`_RecordTraffic` pool per node URL, made on first use (a client that
    follows leaders talks to several nodes). Thread-safe."""

    def __init__(
        self, headers: dict[str, str], timeout: float, verify: bool | str | ssl.SSLContext
    ) -> None:
        self.headers = headers
        self.timeout = timeout
        self.verify = verify
        self._pools: dict[str, _RecordTraffic] = {}
        self._lock = threading.Lock()

    def get(self, url: str) -> _RecordTraffic:
        with self._lock:
            pool = self._pools.get(url)
            if pool is None:
                pool = self._pools[url] = _RecordTraffic(
                    url, self.headers, self.timeout, self.verify
                )
            return pool

    def close(self) -> None:
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            pool.close()
