"""The Kafka listener of ``tiered-log serve``: a socket bound before the service starts
(:func:`bind_kafka`, so a taken port fails the start-up with one line, as HTTP's does),
served on the service's event loop once the service has started
(:meth:`KafkaListener.start`) and closed before the logs are
(:meth:`KafkaListener.stop`: no new connection, each connection's request in flight
answered, then closed).

Security, from the service's settings: with ``auth_tokens`` every connection
authenticates with SASL/PLAIN (a token as the password) and is held to the token's
grants (:mod:`tiered_log.kafka.auth`); with ``tls_certfile``/``tls_keyfile`` the
listener speaks TLS with the HTTP server's certificate. Kafka's names for the four:
PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL.

Concurrency: :class:`KafkaListener`'s coroutines run on the service's event loop; the
connections share it (see :mod:`tiered_log.kafka.connection`).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl

from ..config import Settings
from ..service.state import ServiceState
from .auth import KafkaGuard
from .backend import Backend
from .connection import KafkaConnection
from .handlers import Handlers

log = logging.getLogger("tiered_log.kafka")


def bind_kafka(host: str, port: int, backlog: int = 1024) -> socket.socket:
    """A listening, non-blocking socket on ``host:port`` (OSError when it cannot): the
    Kafka listener's, and the HTTP server's with its own ``backlog``."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, kind, proto, _, addr = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind(addr)
        sock.listen(backlog)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def advertised_host(settings: Settings) -> str:
    """The host Metadata gives clients: ``kafka_advertised_host``, else the listen
    address (127.0.0.1 for a wildcard one)."""
    shown = settings.kafka_advertised_host or settings.host
    return "127.0.0.1" if shown in ("0.0.0.0", "::", "") else shown


def kafka_address(settings: Settings) -> str | None:
    """``host:port`` this node's Kafka listener is reached at (what a cluster node
    registers), None when it has none (``kafka_port`` 0)."""
    if not settings.kafka_port:
        return None
    return f"{advertised_host(settings)}:{settings.kafka_port}"


def server_tls(settings: Settings) -> ssl.SSLContext | None:
    """The listener's TLS context (the HTTP server's certificate and key), None without
    ``tls_certfile``."""
    if settings.tls_certfile is None or settings.tls_keyfile is None:
        return None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(str(settings.tls_certfile), str(settings.tls_keyfile))
    return ctx


class KafkaListener:
    """Serves Kafka's protocol on ``sock`` over the service's partitions (``state``)."""

    def __init__(self, state: ServiceState, sock: socket.socket) -> None:
        self.state = state
        self.sock = sock
        self.address = (advertised_host(state.settings), int(sock.getsockname()[1]))
        self.handlers = Handlers(Backend(state, self.address))
        self.guard = KafkaGuard(state.auth, self.handlers)  # no tokens: serves everything
        self.connections: set[KafkaConnection] = set()
        self._server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        """Accept connections (on the running loop)."""
        loop = asyncio.get_running_loop()
        settings = self.state.settings
        max_frame, stall_s = settings.max_request_bytes, settings.body_timeout_s
        self._server = await loop.create_server(
            lambda: KafkaConnection(
                self.handlers, max_frame, self.connections, stall_s=stall_s, guard=self.guard
            ),
            sock=self.sock,
            ssl=server_tls(settings),
            start_serving=True,
        )

    async def stop(self, grace_s: float) -> None:
        """Stop accepting, answer each connection's request in flight (up to
        ``grace_s``; the service's shutdown has woken long polls), close them all."""
        if self._server is not None:
            self._server.close()
        conns = list(self.connections)
        if conns:
            await asyncio.gather(*(c.close(grace_s) for c in conns), return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        log.info("kafka listener closed")


__all__ = ["KafkaListener", "advertised_host", "bind_kafka", "kafka_address", "server_tls"]
