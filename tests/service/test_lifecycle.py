"""Server process lifecycle: restart with state intact, SIGTERM with records in flight,
invalid settings, a data directory in use, a port in use, TLS."""

from __future__ import annotations

import datetime
import json
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from .conftest import ServerProcess, free_port, service_env


def test_restart_keeps_topics_records_and_offsets(server_factory: Any) -> None:
    srv: ServerProcess = server_factory()
    with srv.client(None) as c:
        r = c.post(
            "/v1/topics",
            json={
                "name": "keep",
                "partitions": 2,
                "config": {"segment_bytes": 512, "flush_messages": 100},
            },
        )
        assert r.status_code == 201
        topic_id = r.json()["topic_id"]
        c.post("/v1/topics", json={"name": "gone"})
        for i in range(20):
            c.post(
                "/v1/topics/keep/partitions/1/records",
                json={"records": [{"value": f"v{i}", "key": "k"}]},
            )
        c.post(
            "/v1/topics/keep/partitions/0/records",
            content=b"\x00\xffraw",
            headers={"Content-Type": "application/octet-stream"},
        )
        c.delete("/v1/topics/gone")
        before = c.get(
            "/v1/topics/keep/partitions/1/records",
            params={"offset": 0},
            headers={"Accept": "application/octet-stream"},
        ).content

    assert srv.stop() == 0
    srv.start()
    with srv.client(None) as c:
        assert [t["name"] for t in c.get("/v1/topics").json()["topics"]] == ["keep"]
        d = c.get("/v1/topics/keep").json()
        assert d["topic_id"] == topic_id and d["partitions"] == 2
        assert d["config"]["segment_bytes"] == 512 and d["config"]["flush_messages"] == 100
        assert [p["next_offset"] for p in d["partition_info"]] == [1, 20]
        after = c.get(
            "/v1/topics/keep/partitions/1/records",
            params={"offset": 0},
            headers={"Accept": "application/octet-stream"},
        ).content
        assert after == before
        recs = c.get("/v1/topics/keep/partitions/0/records", params={"offset": 0}).json()["records"]
        assert recs[0]["value_b64"] == "AP9yYXc="
        # Offsets continue where they were.
        r = c.post("/v1/topics/keep/partitions/1/records", json={"records": [{"value": "next"}]})
        assert r.json()["offsets"] == [20]
        assert c.get("/v1/topics/gone").status_code == 404


def test_sigterm_with_records_in_flight_keeps_every_acknowledged_record(
    server_factory: Any,
) -> None:
    srv: ServerProcess = server_factory()
    with srv.client(None) as c:
        assert c.post("/v1/topics", json={"name": "inflight", "partitions": 2}).status_code == 201

    acked: list[tuple[int, int, str]] = []  # (partition, offset, value)
    lock = threading.Lock()
    stop = threading.Event()
    errors: list[str] = []

    def producer(tid: int) -> None:
        part = tid % 2
        i = 0
        with httpx.Client(base_url=srv.url, timeout=20) as c:
            while not stop.is_set():
                values = [f"t{tid}-{i}-{j}" for j in range(1 + i % 4)]
                i += 1
                try:
                    r = c.post(
                        f"/v1/topics/inflight/partitions/{part}/records",
                        json={"records": [{"value": v} for v in values]},
                    )
                except httpx.TransportError:
                    return  # the server is gone: nothing more is acknowledged
                if r.status_code == 200:
                    with lock:
                        acked.extend(
                            (part, o, v) for o, v in zip(r.json()["offsets"], values, strict=True)
                        )
                elif r.status_code == 503:
                    return  # shutting down
                else:
                    errors.append(r.text)
                    return

    threads = [threading.Thread(target=producer, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while len(acked) < 300 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert srv.stop(signal.SIGTERM) == 0  # SIGTERM while producers are mid-request
    stop.set()
    for t in threads:
        t.join(30)
    assert not errors, errors[:3]
    assert len(acked) >= 300
    assert "all logs flushed and closed" in srv.log()

    srv.start()
    by_part: dict[int, dict[int, str]] = {0: {}, 1: {}}
    with srv.client(None) as c:
        for part in (0, 1):
            offset = 0
            while True:
                r = c.get(
                    f"/v1/topics/inflight/partitions/{part}/records",
                    params={"offset": offset, "max_records": 10_000},
                )
                recs = r.json()["records"]
                if not recs:
                    break
                by_part[part].update((x["offset"], x["value"]) for x in recs)
                offset = r.json()["next_offset"]
    missing = [(p, o, v) for p, o, v in acked if by_part[p].get(o) != v]
    assert not missing, missing[:5]


def _run_server(
    env: dict[str, str], *args: str, timeout: float = 30
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tiered_log.service", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize(
    "settings,name",
    [
        ({"port": "not-a-port"}, "port"),
        ({"port": "70000"}, "port"),
        ({"auth_tokens": "{not json"}, "auth_tokens"),
        (
            {"auth_tokens": json.dumps({"very-secret-token": {"orders": ["superuser"]}})},
            "auth_tokens",
        ),
        ({"auth_tokens": json.dumps({"very-secret-token": {"../x": ["read"]}})}, "auth_tokens"),
        ({"topic_defaults__segment_bytes": "10"}, "topic_defaults.segment_bytes"),
        ({"topic_defaults__flush_messages": "0"}, "topic_defaults.flush_messages"),
        ({"remote_url": "ftp://host/x"}, "remote_url"),
        ({"remote_url": "s3://"}, "remote_url"),
        ({"tls_certfile": "/nonexistent/cert.pem"}, "tls_keyfile"),
        ({"s3_secret_key": "very-secret-token", "max_request_bytes": "12"}, "max_request_bytes"),
        ({"config_file": "/nonexistent/tiered.toml"}, "config_file"),
        ({"replica_fetch_wait_max_ms": "10000"}, "replica_fetch_wait_max_ms"),  # >= the lag time
    ],
)
def test_invalid_settings_exit_2_with_one_line(
    tmp_path: Path, settings: dict[str, str], name: str
) -> None:
    env = service_env(data_dir=str(tmp_path / "d"), **settings)
    p = _run_server(env)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith(f"tiered-log: invalid setting {name}"), lines[0]
    assert "very-secret-token" not in p.stderr and "Traceback" not in p.stderr
    assert not (tmp_path / "d").exists()  # nothing was started


def test_invalid_config_file_and_cli_overrides(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("port = [\n")
    p = _run_server(service_env(), "--config", str(bad))
    assert p.returncode == 2 and p.stderr.startswith("tiered-log: invalid setting config_file:")
    assert len(p.stderr.strip().splitlines()) == 1
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"prot": 1}))
    p = _run_server(service_env(), "--config", str(unknown))
    assert p.returncode == 2 and "invalid setting prot: unknown setting" in p.stderr
    p = _run_server(service_env(), "--port", "-5")
    assert p.returncode == 2 and p.stderr.startswith("tiered-log: invalid setting port (--port):")


def test_config_file_settings_and_priority(tmp_path: Path) -> None:
    """TOML file < environment < command line; checked through a running server."""
    port = free_port()
    cfg = tmp_path / "tiered.toml"
    cfg.write_text(
        f'data_dir = "{tmp_path / "from-file"}"\nport = 1\n[topic_defaults]\nflush_messages = 7\n'
    )
    env = service_env(port=str(port), access_log="false")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tiered_log.service",
            "--config",
            str(cfg),
            "--data-dir",
            str(tmp_path / "from-cli"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                if httpx.get(url + "/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.05)
        r = httpx.post(url + "/v1/topics", json={"name": "t"})
        assert r.json()["config"]["flush_messages"] == 7  # from the file
        assert (tmp_path / "from-cli" / "topics" / "t").is_dir()  # CLI beats the file
        assert not (tmp_path / "from-file").exists()
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


def test_data_dir_in_use_and_port_in_use(server_factory: Any) -> None:
    srv: ServerProcess = server_factory()
    env = service_env(data_dir=str(srv.data_dir), port=str(free_port()))
    p = _run_server(env)
    assert p.returncode == 1
    assert "in use by another process" in p.stderr and "Traceback" not in p.stderr
    env = service_env(data_dir=str(srv.data_dir.parent / "other"), port=str(srv.port))
    p = _run_server(env)
    assert p.returncode == 1
    assert p.stderr.startswith(f"tiered-log: cannot listen on 127.0.0.1:{srv.port}")


def test_half_created_topic_is_cleaned_up_on_start(server_factory: Any) -> None:
    srv: ServerProcess = server_factory(start=False)
    leftover = srv.data_dir / "topics" / "half"
    (leftover / "0").mkdir(parents=True)  # a creation that crashed before topic.json
    srv.start()
    with srv.client(None) as c:
        assert c.get("/v1/topics").json()["topics"] == []
        assert not leftover.exists()
        assert c.post("/v1/topics", json={"name": "half"}).status_code == 201


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    import ipaddress

    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def test_tls(server_factory: Any, tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    cert, key = _self_signed(tmp_path)
    srv: ServerProcess = server_factory(start=False, tls_certfile=str(cert), tls_keyfile=str(key))
    srv.scheme = "https"
    srv.start(verify=str(cert))
    from tiered_log.client import Client, ConnectionFailedError

    with Client(srv.url, verify=str(cert)) as c:
        c.create_topic("secure")
        assert c.produce("secure", 0, [b"over tls"]) == [0]
        assert c.fetch("secure", 0, 0).records[0].value == b"over tls"
    with pytest.raises(httpx.HTTPError):
        httpx.get(f"http://127.0.0.1:{srv.port}/healthz", timeout=5)
    with Client(srv.url) as c, pytest.raises(ConnectionFailedError):  # untrusted certificate
        c.health()
    with Client(srv.url) as c, pytest.raises(ConnectionFailedError):  # the records path too
        c.fetch("secure", 0, 0)
    with Client(srv.url, verify=False) as c:  # asked for: no verification
        assert [r.value for p in c.consume("secure", 0, 0) for r in p.records] == [b"over tls"]


def test_malloc_tuning_applies_on_glibc() -> None:
    """The glibc tuning of the server and its tier workers is accepted by glibc (each
    mallopt value in its range); elsewhere it is skipped, never an error."""
    import platform

    from tiered_log.allocator import tune_malloc

    applied = tune_malloc()
    if sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc":
        assert applied
    else:
        assert applied is False


def test_a_first_start_whose_port_was_taken_starts_on_new_ports(tmp_path: Path) -> None:
    """The suite's server harness: a port picked free can be taken before the server binds
    it (another process's connection); a first start then goes on new ports."""
    srv = ServerProcess(tmp_path / "data", tmp_path, {})
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", srv.kafka_port))
        taken.listen(1)
        srv.start()
        try:
            assert srv.kafka_port != taken.getsockname()[1]
            assert "Address already in use" in (tmp_path / "server-0.log").read_text()
            assert httpx.get(srv.url + "/healthz", timeout=10).status_code == 200
        finally:
            srv.stop()
