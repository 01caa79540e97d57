"""The Kafka listener's part in the server's life: named in the start-up line, on the
port ``--kafka-port`` gives; a taken port stops the start with one line; a SIGTERM
answers a waiting fetch and exits 0 (with ``auth_tokens``: test_sasl.py)."""

from __future__ import annotations

import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

from kio.schema.errors import ErrorCode
from service.conftest import ServerProcess, free_port, service_env

from tiered_log.kafka.messages import FETCH, PRODUCE

from .conftest import KafkaWire, create_topic
from .test_protocol import batch, fetch_body, produce_body


def test_serve_kafka_port_flag_and_startup_line(tmp_path: Path) -> None:
    port, kafka_port = free_port(), free_port()
    env = service_env(port=str(port), access_log="false")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tiered_log.cli",
            "serve",
            "--data-dir",
            str(tmp_path / "d"),
            "--kafka-port",
            str(kafka_port),
        ],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = ""
        deadline = time.monotonic() + 30
        while not line.startswith("tiered-log: listening on") and time.monotonic() < deadline:
            line = proc.stderr.readline()
        assert line.strip() == (
            f"tiered-log: listening on http://127.0.0.1:{port} (kafka 127.0.0.1:{kafka_port})"
        )
        with KafkaWire(f"127.0.0.1:{kafka_port}") as w:
            assert w.call(18, 3, {"client_software_name": "t", "client_software_version": "1"})
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


def test_a_taken_kafka_port_stops_the_start_with_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        kafka_port = taken.getsockname()[1]
        env = service_env(
            data_dir=str(tmp_path / "d"), port=str(free_port()), kafka_port=str(kafka_port)
        )
        p = subprocess.run(
            [sys.executable, "-m", "tiered_log.service"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert p.returncode == 1
    assert p.stderr.strip().splitlines()[-1] == (
        f"tiered-log: cannot listen for Kafka clients on 127.0.0.1:{kafka_port}: "
        "Address already in use (another port: --kafka-port or TIERED_LOG_KAFKA_PORT; 0 for "
        "no Kafka listener)"
    )
    assert "Traceback" not in p.stderr


def test_sigterm_answers_a_waiting_fetch_and_exits_0(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data", tmp_path, {"log_level": "info"}).start()
    try:
        create_topic(srv, "stopping")
        with KafkaWire(srv.kafka_bootstrap) as w:
            w.call(PRODUCE, 9, produce_body("stopping", batch(b"kept")))
            got: list[object] = []

            def fetch() -> None:  # waits at the end of the log for up to 20 s
                got.append(w.call(FETCH, 12, fetch_body("stopping", 1, max_wait_ms=20_000)))

            t = threading.Thread(target=fetch)
            t.start()
            time.sleep(0.5)
            began = time.monotonic()
            assert srv.stop(signal.SIGTERM, timeout=15) == 0
            t.join(15)
            assert time.monotonic() - began < 15
        (resp,) = got
        part = resp.responses[0].partitions[0]  # type: ignore[attr-defined]
        assert part.error_code == ErrorCode.none and part.high_watermark == 1
        assert "kafka listener closed" in srv.log()
    finally:
        srv.kill()
    srv.start()  # the record is there after the restart
    try:
        with KafkaWire(srv.kafka_bootstrap) as w:
            part = w.call(FETCH, 12, fetch_body("stopping", 0)).responses[0].partitions[0]
            assert part.high_watermark == 1
    finally:
        srv.stop()


def test_a_half_sent_request_closes_its_connection(tmp_path: Path) -> None:
    """A frame whose bytes stop coming for body_timeout_s (1 s here) closes that
    connection with a log line; a connection that sent a whole request is answered."""
    srv = ServerProcess(tmp_path / "data", tmp_path, {"body_timeout_s": "1"}).start()
    try:
        with KafkaWire(srv.kafka_bootstrap) as stuck, KafkaWire(srv.kafka_bootstrap) as ok:
            stuck.sock.sendall(struct.pack(">i", 100) + b"\x00\x12\x00\x03")  # 4 of 100
            assert stuck.closed_by_server()
            assert ok.call(18, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert "a request half-sent: no byte for 1 s" in srv.log()
    finally:
        srv.stop()
