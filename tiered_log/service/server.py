"""Running the service: ``tiered-log serve`` / ``python -m tiered_log.service``.

Start-up order, each step failing with one line on stderr and a non-zero exit:
settings (exit 2: ``tiered-log: invalid setting <name>: <why>``), the listening socket
and the Kafka listener's (``kafka_port``; none when 0; SASL/PLAIN with ``auth_tokens``,
TLS with ``tls_certfile``) (exit 1), the data directory (locked against a second server,
every topic opened and recovered; exit 1), then uvicorn serves the app on the socket
and, once the app has started, :class:`~tiered_log.kafka.KafkaListener` serves Kafka's
protocol on the same event loop.

Shutdown on SIGTERM or SIGINT (graceful): wake long polls, stop accepting Kafka
connections and answer each one's request in flight, stop accepting HTTP connections,
let in-flight requests finish (up to ``shutdown_timeout_s``), then flush and close every
log (which stops the tiered log's shipper after its current step). Exit status 0.
Every record acknowledged before the signal is on disk afterwards.

Secrets: the settings are logged redacted (:meth:`Settings.redacted`); tokens and keys
never reach the log.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import socket
import sys
from types import FrameType

from ..allocator import tune_malloc
from ..config import ConfigError, Settings, load_settings
from ..errors import TieredLogError

log = logging.getLogger("tiered_log.service")


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``serve`` (shared by ``python -m tiered_log.service`` and the CLI)."""
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="settings file (TOML or JSON); default $TIERED_LOG_CONFIG_FILE",
    )
    parser.add_argument("--data-dir", metavar="DIR", help="data directory (TIERED_LOG_DATA_DIR)")
    parser.add_argument("--host", help="listen address (TIERED_LOG_HOST)")
    parser.add_argument("--port", type=int, help="listen port, 0 = any free one (TIERED_LOG_PORT)")
    parser.add_argument(
        "--kafka-port",
        type=int,
        help="Kafka-protocol listener port, 0 = none (TIERED_LOG_KAFKA_PORT; default 9092)",
    )
    parser.add_argument(
        "--log-level",
        choices=["critical", "error", "warning", "info", "debug"],
        help="log level (TIERED_LOG_LOG_LEVEL)",
    )
    parser.add_argument(
        "--node-id", type=int, help="this node's id in a cluster (TIERED_LOG_NODE_ID)"
    )
    parser.add_argument(
        "--advertised-url",
        metavar="URL",
        help="URL other nodes and clients reach this node at (TIERED_LOG_ADVERTISED_URL)",
    )
    parser.add_argument(
        "--cluster-etcd",
        metavar="URL",
        help="etcd client URL of the cluster's metadata; unset: a single node "
        "(TIERED_LOG_CLUSTER_ETCD)",
    )


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Settings from parsed ``serve`` arguments, the environment and the config file."""
    return load_settings(
        config_file=args.config,
        data_dir=args.data_dir,
        host=args.host,
        port=args.port,
        kafka_port=getattr(args, "kafka_port", None),
        log_level=args.log_level,
        node_id=getattr(args, "node_id", None),
        advertised_url=getattr(args, "advertised_url", None),
        cluster_etcd=getattr(args, "cluster_etcd", None),
    )


def _bind(host: str, port: int) -> socket.socket:
    from ..kafka.listener import bind_kafka  # the one listening-socket recipe

    return bind_kafka(host, port, backlog=2048)


def _bind_kafka(settings: Settings) -> socket.socket | None:
    """The Kafka listener's socket (None when ``kafka_port`` is 0). OSError when the
    port cannot be bound."""
    if not settings.kafka_port:
        return None
    from ..kafka.listener import bind_kafka

    return bind_kafka(settings.host, settings.kafka_port)


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
        force=True,
    )
    # httpx logs every request at INFO: the replica fetchers' long polls would flood it.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))


def run_server(settings: Settings) -> int:
    """Serve until SIGTERM/SIGINT; returns the exit status (see the module docstring).

    Must run in the main thread (signal handlers).
    """
    import uvicorn

    from ..broker.mount import topic_manager_for
    from ..kafka.listener import KafkaListener
    from .app import create_app
    from .http_protocol import HttpLimits, protocol_class
    from .state import ServiceState

    pending: list[int] = []

    def on_early_signal(sig: int, frame: FrameType | None) -> None:
        pending.append(sig)  # before serving: stop right after start-up; after: ignored

    old = {s: signal.signal(s, on_early_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    _setup_logging(settings.log_level)
    tune_malloc()
    try:
        try:
            sock = _bind(settings.host, settings.port)
        except OSError as exc:
            print(
                f"tiered-log: cannot listen on {settings.host}:{settings.port}: "
                f"{exc.strerror or exc}",
                file=sys.stderr,
            )
            return 1
        try:
            kafka_sock = _bind_kafka(settings)
        except OSError as exc:
            sock.close()
            print(
                f"tiered-log: cannot listen for Kafka clients on {settings.host}:"
                f"{settings.kafka_port}: {exc.strerror or exc} (another port: --kafka-port "
                "or TIERED_LOG_KAFKA_PORT; 0 for no Kafka listener)",
                file=sys.stderr,
            )
            return 1
        topics = topic_manager_for(settings)
        try:
            topics.load()
        except (TieredLogError, OSError) as exc:
            sock.close()
            if kafka_sock is not None:
                kafka_sock.close()
            topics.close()
            msg = exc.message if isinstance(exc, TieredLogError) else str(exc)
            print(f"tiered-log: cannot open the data directory: {msg}", file=sys.stderr)
            return 1
        try:
            app = create_app(settings, topics)
            state: ServiceState = app.state.service
            kafka = KafkaListener(state, kafka_sock) if kafka_sock is not None else None
            config = uvicorn.Config(
                app,
                log_config=None,
                log_level=settings.log_level,
                access_log=settings.access_log,
                ssl_certfile=str(settings.tls_certfile) if settings.tls_certfile else None,
                ssl_keyfile=str(settings.tls_keyfile) if settings.tls_keyfile else None,
                timeout_graceful_shutdown=int(max(1, settings.shutdown_timeout_s)),
                server_header=False,
                proxy_headers=False,
                lifespan="on",
                # Capped request heads, header and body timeouts, 501 for transfer
                # codings other than chunked, JSON for the parser's rejections.
                http=protocol_class(
                    HttpLimits(
                        max_head_bytes=settings.max_request_head_bytes,
                        header_timeout_s=settings.header_timeout_s,
                        body_timeout_s=settings.body_timeout_s,
                        body_min_bytes_per_s=settings.body_min_bytes_per_s,
                    )
                ),
            )

            class _Server(uvicorn.Server):
                def handle_exit(self, sig: int, frame: FrameType | None) -> None:
                    super().handle_exit(sig, frame)
                    state.begin_shutdown()

                async def startup(self, sockets: list[socket.socket] | None = None) -> None:
                    await super().startup(sockets)
                    if kafka is not None and self.started:
                        await kafka.start()
                    if pending:
                        self.should_exit = True

                async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
                    if kafka is not None:  # before the logs close (the lifespan's end)
                        state.begin_shutdown()
                        await kafka.stop(settings.shutdown_timeout_s)
                    await super().shutdown(sockets)

            server = _Server(config)
            host, port = sock.getsockname()[:2]
            scheme = "https" if settings.tls_enabled else "http"
            shown = f"[{host}]" if ":" in host else host
            log.info("settings: %s", json.dumps(settings.redacted(), sort_keys=True))
            kafka_shown = (
                f" (kafka {kafka.address[0]}:{kafka.address[1]})" if kafka is not None else ""
            )
            log.info(
                "listening on %s://%s:%d%s (auth %s)",
                scheme,
                shown,
                port,
                kafka_shown,
                "on" if settings.auth_enabled else "off",
            )
            print(
                f"tiered-log: listening on {scheme}://{shown}:{port}{kafka_shown}",
                file=sys.stderr,
                flush=True,
            )
            server.run(sockets=[sock])
        finally:
            topics.close()
            sock.close()
            if kafka_sock is not None:
                kafka_sock.close()
        return 0
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def serve_main(argv: list[str] | None = None) -> int:
    """``tiered-log serve [--config FILE] [--data-dir DIR] [--host H] [--port P]``."""
    parser = argparse.ArgumentParser(
        prog="tiered-log serve",
        description="Run the tiered-log service: the HTTP API and the Kafka listener.",
    )
    add_serve_arguments(parser)
    args = parser.parse_args(argv)
    return serve_from_args(args)


def serve_from_args(args: argparse.Namespace) -> int:
    """Run the server from parsed ``serve`` arguments (for the CLI's subcommand)."""
    try:
        settings = settings_from_args(args)
    except ConfigError as exc:
        print(f"tiered-log: {exc}", file=sys.stderr)
        return 2
    return run_server(settings)


__all__ = [
    "add_serve_arguments",
    "run_server",
    "serve_from_args",
    "serve_main",
    "settings_from_args",
]

if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(serve_main(sys.argv[1:]))
