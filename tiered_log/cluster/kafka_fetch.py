"""A follower's fetches over its leader's Kafka listener: one blocking connection per
fetcher that sends Kafka's Fetch v12 with ``replica_id`` set and decodes the answer by
hand, straight from one of two receive buffers it takes turns with (the batches are
handed on as a view of it: no copy between the socket and the follower's log; an answer
stays valid while the next fetch is received into the other buffer, so the fetcher can
append one while the next is in flight). A buffer grows to the largest answer and goes
back to its first size once answers are small again (a follower at its leader's end). The
mapping of the fields is :mod:`tiered_log.cluster.protocol`'s.

Request (Kafka's layout; request header v2, all integers big-endian)::

    size int32 | api_key=1 int16 | api_version=12 int16 | correlation_id int32
    | client_id int16 length + bytes | header tags: 0
    | replica_id int32 | max_wait_ms int32 | min_bytes=1 int32 | max_bytes int32
    | isolation_level=0 int8 | session_id=0 int32 | session_epoch=-1 int32
    | topics: uvarint 2 | topic: uvarint len+1 + bytes
    |   partitions: uvarint 2 | partition int32 | current_leader_epoch int32
    |     | fetch_offset int64 | last_fetched_epoch int32 | log_start_offset int64
    |     | partition_max_bytes int32 | tags: 0
    |   topic tags: 0
    | forgotten_topics: uvarint 1 | rack_id: uvarint 1 ("") | tags: 0

Answer (response header v1)::

    size int32 | correlation_id int32 | header tags
    | throttle_time_ms int32 | error_code int16 | session_id int32
    | topics: uvarint n+1 | topic: uvarint len+1 + bytes
    |   partitions: uvarint n+1 | partition int32 | error_code int16
    |     | high_watermark int64 | last_stable_offset int64 | log_start_offset int64
    |     | aborted_transactions: uvarint n+1 (0: null) of (int64, int64, tags)
    |     | preferred_read_replica int32 | records: uvarint len+1 (0: null) + bytes
    |     | tags: uvarint count, then (uvarint tag | uvarint size | bytes) each
    |   topic tags
    | body tags

Authentication: with the cluster token, SASL/PLAIN first (SaslHandshake v1 then
SaslAuthenticate v1, the token as the password), as the HTTP transport sends it as its
bearer token; TLS when the leader's HTTP address is ``https`` (the listener serves TLS
with the same certificate), verified as the HTTP transport verifies.

Errors: a dropped connection, a timeout or an answer that does not decode closes the
connection and raises a retriable TieredLogError (the fetcher backs off and the next
fetch connects again); nothing of such an answer is applied. The batches themselves are
verified by the log before anything is appended.

Thread-safety: one fetch at a time calls :meth:`KafkaTransport.fetch` (the fetcher's
thread, or the thread it sends its next fetch from, never both at once); :meth:`close`
may be called from another thread (it shuts the socket down, which ends a blocked
receive).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import struct
import threading

from ..errors import FencedEpochError, NotLeaderError, TieredLogError
from ..kafka.fields import uvarint
from .protocol import ReplicaAnswer, ReplicaFetch

FETCH_KEY = 1
FETCH_VERSION = 12
SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36

NOT_LEADER_OR_FOLLOWER = 6
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
OFFSET_MOVED_TO_TIERED_STORAGE = 109
_NOT_LEADER = {NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH}

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEADER = struct.Struct(">ihhi")  # size, api_key, api_version, correlation_id
_BODY_HEAD = struct.Struct(">iiiibii")
_PARTITION = struct.Struct(">iiqiqi")
_PART_HEAD = struct.Struct(">ihqqq")  # partition, error, hw, lso, log start

_FIRST_BUFFER = 64 * 1024


class MalformedAnswer(Exception):
    """An answer that does not decode (message: what was wrong)."""


class _Reader:
    """Reads a received answer's fields in order (MalformedAnswer past its end)."""

    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: memoryview, end: int) -> None:
        self.buf = buf
        self.pos = 0
        self.end = end

    def take(self, s: struct.Struct) -> tuple[int, ...]:
        at = self.pos
        if at + s.size > self.end:
            raise MalformedAnswer("the answer ends inside a field")
        self.pos = at + s.size
        return s.unpack_from(self.buf, at)

    def uvarint(self) -> int:
        n = shift = 0
        buf, pos, end = self.buf, self.pos, self.end
        while True:
            if pos >= end or shift > 28:
                raise MalformedAnswer("a varint runs past the answer")
            b = buf[pos]
            pos += 1
            n |= (b & 0x7F) << shift
            if b < 0x80:
                self.pos = pos
                return n
            shift += 7

    def span(self, n: int) -> memoryview:
        at = self.pos
        if n < 0 or at + n > self.end:
            raise MalformedAnswer(f"a field of {n} bytes runs past the answer")
        self.pos = at + n
        return self.buf[at : at + n]

    def tags(self) -> dict[int, memoryview]:
        out = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = self.span(self.uvarint())
        return out


class KafkaTransport:
    """A follower's fetches to ``address`` (``host:port`` of the leader's Kafka
    listener) as node ``replica_id``; see the module docstring. ``token``: the cluster
    token (SASL/PLAIN); ``tls``: the client context when the listener serves TLS."""

    name = "kafka"

    def __init__(
        self,
        address: str,
        *,
        replica_id: int,
        token: str | None = None,
        tls: ssl.SSLContext | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"a Kafka address is host:port, not {address!r}")
        self.address = address
        self._host, self._port = host.strip("[]"), int(port)
        self.replica_id = replica_id
        self._token = token
        self._tls = tls
        self._timeout_s = timeout_s
        self._client_id = f"tiered-log-replica-{replica_id}".encode()
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()  # guards _sock against close() from another thread
        self._closed = False
        self._correlation = 0
        self._bufs = [bytearray(_FIRST_BUFFER), bytearray(_FIRST_BUFFER)]
        self._turn = 0  # the buffer the last answer went into

    # ---- the connection -----------------------------------------------------------------

    def _connect(self, wait_s: float) -> socket.socket:
        sock = socket.create_connection((self._host, self._port), timeout=self._timeout_s)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._tls is not None:
                sock = self._tls.wrap_socket(sock, server_hostname=self._host)
            with self._lock:
                if self._closed:
                    raise OSError("the transport is closed")
                self._sock = sock
            sock.settimeout(self._timeout_s + wait_s)
            if self._token is not None:
                self._authenticate(sock)
        except BaseException:
            self._drop()
            sock.close()
            raise
        return sock

    def _authenticate(self, sock: socket.socket) -> None:
        """SASL/PLAIN: the handshake (v1) then the token (SaslAuthenticate v1)."""
        assert self._token is not None
        mech = b"PLAIN"
        r = self._call(
            sock, SASL_HANDSHAKE_KEY, 1, _I16.pack(len(mech)) + mech, flexible=False, own=True
        )
        (err,) = r.take(_I16)
        if err:
            raise TieredLogError(f"the leader refused SASL/PLAIN (error {err})", retriable=True)
        plain = b"\0" + b"replica-" + str(self.replica_id).encode() + b"\0" + self._token.encode()
        r = self._call(
            sock, SASL_AUTHENTICATE_KEY, 1, _I32.pack(len(plain)) + plain, flexible=False, own=True
        )
        (err,) = r.take(_I16)
        if err:
            (n,) = r.take(_I16)
            why = bytes(r.span(n)).decode("utf-8", "replace") if n >= 0 else ""
            raise TieredLogError(
                f"the leader refused the cluster token (error {err}): {why}", retriable=True
            )

    def _drop(self) -> None:
        with self._lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()

    def close(self) -> None:
        """Shut the connection (ends a blocked receive; later fetches refuse)."""
        with self._lock:
            self._closed = True
            sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()

    # ---- one exchange -----------------------------------------------------------------

    def _call(
        self,
        sock: socket.socket,
        key: int,
        version: int,
        body: bytes,
        *,
        flexible: bool,
        own: bool = False,
    ) -> _Reader:
        """Send one request and receive its answer into the receive buffer whose turn
        it is (``own``: into a buffer of its own, leaving the turns as they are: the
        authentication a fetch may start with); a reader positioned after the answer's
        header."""
        self._correlation = correlation = (self._correlation + 1) & 0x7FFFFFFF
        cid = self._client_id
        head_tail = b"\x00" if flexible else b""
        size = _HEADER.size - 4 + 2 + len(cid) + len(head_tail) + len(body)
        sock.sendall(
            b"".join(
                (_HEADER.pack(size, key, version, correlation), _I16.pack(len(cid)), cid),
            )
            + head_tail
            + body
        )
        n, buf = self._receive(sock, own=own)
        r = _Reader(memoryview(buf), n)
        (got,) = r.take(_I32)
        if got != correlation:
            raise MalformedAnswer(f"answer to request {got}, expected {correlation}")
        if flexible:
            r.tags()
        return r

    def _receive(self, sock: socket.socket, *, own: bool = False) -> tuple[int, bytearray]:
        """One answer frame into the buffer whose turn it is, not the one the previous
        answer is in (``own``: a new one), its size prefix dropped; its length and the
        buffer."""
        head = bytearray(4)
        self._read_into(sock, memoryview(head))
        (size,) = _I32.unpack(head)
        if size < 4 or size > (1 << 30):
            raise MalformedAnswer(f"an answer of {size} bytes")
        if own:
            mine = bytearray(size)
            self._read_into(sock, memoryview(mine))
            return int(size), mine
        self._turn = turn = 1 - self._turn
        buf = self._bufs[turn]
        if size > len(buf) or (size <= _FIRST_BUFFER < len(buf)):
            # A new buffer rather than a resize: a view of the old one handed out with
            # an earlier answer stays valid (and a resize would refuse while it lives).
            buf = self._bufs[turn] = bytearray(
                _FIRST_BUFFER if size <= _FIRST_BUFFER else max(size, 2 * len(buf))
            )
        self._read_into(sock, memoryview(buf)[:size])
        return int(size), buf

    @staticmethod
    def _read_into(sock: socket.socket, view: memoryview) -> None:
        got = 0
        while got < len(view):
            n = sock.recv_into(view[got:])
            if n == 0:
                raise ConnectionError("the leader closed the connection")
            got += n

    # ---- the fetch ----------------------------------------------------------------------

    def fetch(self, topic: str, partition: int, req: ReplicaFetch) -> ReplicaAnswer:
        """One replica fetch (see :class:`~tiered_log.cluster.protocol.ReplicaTransport`).
        The answer's batches are a view of a receive buffer, valid until the fetch after
        the next one."""
        try:
            sock = self._sock
            if sock is None:
                if self._closed:
                    raise TieredLogError("the transport is closed", retriable=True)
                sock = self._connect(req.wait_ms / 1000)
            name = topic.encode()
            body = b"".join(
                (
                    _BODY_HEAD.pack(self.replica_id, req.wait_ms, 1, req.max_bytes, 0, 0, -1),
                    b"\x02",
                    uvarint(len(name) + 1),
                    name,
                    b"\x02",
                    _PARTITION.pack(
                        partition,
                        req.leader_epoch,
                        req.offset,
                        req.last_fetched_epoch,
                        req.offset if req.empty else -1,
                        req.max_bytes,
                    ),
                    b"\x00\x00\x01\x01\x00",  # partition, topic tags; forgotten; rack; tags
                )
            )
            r = self._call(sock, FETCH_KEY, FETCH_VERSION, body, flexible=True)
            return self._decode(r, topic, partition)
        except (OSError, MalformedAnswer) as exc:
            self._drop()
            raise TieredLogError(
                f"Kafka fetch from {self.address}: {exc or type(exc).__name__}", retriable=True
            ) from None
        except TieredLogError:
            self._drop()
            raise

    def _decode(self, r: _Reader, topic: str, partition: int) -> ReplicaAnswer:
        _throttle, err, _session = r.take(_FETCH_TOP)
        if err:
            raise TieredLogError(f"the leader refused the fetch (error {err})", retriable=True)
        found: ReplicaAnswer | None = None
        for _ in range(r.uvarint() - 1):
            name = bytes(r.span(r.uvarint() - 1)).decode("utf-8", "replace")
            for _ in range(r.uvarint() - 1):
                index, code, hw, _lso, log_start = r.take(_PART_HEAD)
                aborted = r.uvarint()
                for _ in range(max(0, aborted - 1)):
                    r.span(16)
                    r.tags()
                r.take(_I32)  # preferred read replica
                n = r.uvarint()
                data = r.span(n - 1) if n else r.buf[0:0]
                tags = r.tags()
                if name != topic or index != partition:
                    continue
                if code in _NOT_LEADER:
                    raise NotLeaderError(
                        f"node at {self.address} does not lead {topic}-{partition} (error {code})"
                    )
                if code == FENCED_LEADER_EPOCH:
                    raise FencedEpochError(
                        f"node at {self.address} leads a newer epoch of {topic}-{partition}"
                    )
                if code and code != OFFSET_MOVED_TO_TIERED_STORAGE:
                    raise TieredLogError(
                        f"the leader answered error {code} for {topic}-{partition}",
                        retriable=True,
                    )
                try:
                    found = ReplicaAnswer.from_kafka(data, hw, log_start, tags)
                except TieredLogError as exc:
                    raise MalformedAnswer(exc.message) from None
                if code == OFFSET_MOVED_TO_TIERED_STORAGE and found.reset_to is None:
                    raise MalformedAnswer("OFFSET_MOVED_TO_TIERED_STORAGE without its offset")
            r.tags()
        r.tags()
        if found is None:
            raise MalformedAnswer(f"the answer holds no {topic}-{partition}")
        return found


_FETCH_TOP = struct.Struct(">ihi")


def client_tls(leader_url: str) -> ssl.SSLContext | None:
    """The TLS context for a leader whose HTTP address is ``leader_url``: verified as
    the HTTP transport verifies (httpx's defaults), None for ``http``."""
    if not leader_url.startswith("https:"):
        return None
    import httpx

    return httpx.create_ssl_context()


__all__ = ["KafkaTransport", "MalformedAnswer", "client_tls"]
