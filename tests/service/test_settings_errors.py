"""Settings and errors as a user meets them: each names what the user wrote.

A ``TIERED_LOG_*`` typo is refused as a config-file typo is, naming the variable and the
closest valid one; a bad value names the variable (or file, or flag) it came from; a bad
bucket name says why. Against a real server with auth on: a bare ``host:port`` URL
works, auth errors say how the CLI sends a token, ``permission_denied`` names the topic,
an unknown topic setting lists the valid ones, ``/v1/topics/`` is a JSON 404."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tiered_log.cli import main

from .conftest import ADMIN, READER, ServerProcess, service_env

pytestmark = pytest.mark.timeout(120)


def serve(tmp_path: Path, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    """``tiered-log serve`` with ``settings`` as TIERED_LOG_* variables (it should fail)."""
    env = service_env(data_dir=str(tmp_path / "d"), port="0", **settings)
    return subprocess.run(
        [sys.executable, "-m", "tiered_log.cli", "serve", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def one_line(p: subprocess.CompletedProcess[str]) -> str:
    assert p.returncode == 2, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    return lines[0]


@pytest.mark.parametrize(
    "settings,expected",
    [
        pytest.param(
            {"remote_cach_bytes": "5"},
            "invalid setting TIERED_LOG_REMOTE_CACH_BYTES: unknown setting "
            "(did you mean TIERED_LOG_REMOTE_CACHE_BYTES?)",
            id="typo",
        ),
        pytest.param(
            {"topic_defaults__segmnt_bytes": "4096"},
            "invalid setting TIERED_LOG_TOPIC_DEFAULTS__SEGMNT_BYTES: unknown key of "
            "topic_defaults (did you mean TIERED_LOG_TOPIC_DEFAULTS__SEGMENT_BYTES?)",
            id="nested-typo",
        ),
        pytest.param(
            {"remote_cache_bytes": "lots"},
            "invalid setting remote_cache_bytes (TIERED_LOG_REMOTE_CACHE_BYTES): ",
            id="value-names-variable",
        ),
        pytest.param(
            {"topic_defaults__segment_bytes": "10"},
            "invalid setting topic_defaults.segment_bytes "
            "(TIERED_LOG_TOPIC_DEFAULTS__SEGMENT_BYTES): ",
            id="nested-value-names-variable",
        ),
        pytest.param(
            {"remote_url": "s3://My_Bucket/x"},
            "invalid setting remote_url (TIERED_LOG_REMOTE_URL): s3://bucket/prefix: bucket "
            "name 'My_Bucket' has upper-case letters; S3 bucket names are 3-63 characters",
            id="bucket-name",
        ),
    ],
)
def test_environment_problems_name_the_variable(
    tmp_path: Path, settings: dict[str, str], expected: str
) -> None:
    line = one_line(serve(tmp_path, **settings))
    assert line.startswith("tiered-log: " + expected), line
    assert not (tmp_path / "d").exists()


def test_file_and_flag_problems_name_their_source(tmp_path: Path) -> None:
    cfg = tmp_path / "tiered.toml"
    cfg.write_text("remote_cach_bytes = 5\n")
    line = one_line(serve(tmp_path, "--config", str(cfg)))
    assert f"invalid setting remote_cach_bytes: unknown setting in {cfg}" in line
    assert "(did you mean remote_cache_bytes?)" in line
    cfg.write_text('remote_cache_bytes = "lots"\n')
    line = one_line(serve(tmp_path, "--config", str(cfg)))
    assert line.startswith(f"tiered-log: invalid setting remote_cache_bytes (in {cfg}): "), line
    line = one_line(serve(tmp_path, "--port", "-5"))
    assert line.startswith("tiered-log: invalid setting port (--port): "), line


def test_client_variables_do_not_stop_the_server(
    server_factory: Callable[..., ServerProcess],
) -> None:
    """TIERED_LOG_TOKEN and TIERED_LOG_URL are the CLI's, not settings: a server started
    in a shell that exported them runs."""
    srv = server_factory(token="x", url="http://127.0.0.1:1")
    assert httpx.get(srv.url + "/healthz", timeout=5).status_code == 200


def test_service_errors_say_what_to_do(
    server: ServerProcess, topic_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    bare = f"127.0.0.1:{server.port}"  # no http://
    assert main(["topics", "create", topic_name, "--url", bare, "--token", ADMIN]) == 0
    assert main(["topics", "list", "--url", bare, "--token", ADMIN]) == 0
    assert topic_name in capsys.readouterr().out
    # No token: the message says how the CLI sends one.
    assert main(["topics", "list", "--url", bare, "--token", ""]) != 0
    err = capsys.readouterr().err
    assert "--token" in err and "$TIERED_LOG_TOKEN" in err, err
    # A token without the grant: the topic is named.
    assert main(["topics", "delete", topic_name, "--url", bare, "--token", READER]) != 0
    err = capsys.readouterr().err
    assert f"'admin' grant on topic '{topic_name}'" in err, err
    # An unknown topic setting lists the valid ones.
    headers = {"Authorization": f"Bearer {ADMIN}"}
    r = httpx.post(
        server.url + "/v1/topics",
        json={"name": topic_name + "-x", "partitions": 1, "config": {"segmnt_bytes": 4096}},
        headers=headers,
    )
    assert r.status_code == 400
    msg = r.json()["error"]["message"]
    assert "body.config.segmnt_bytes: unknown topic setting (did you mean segment_bytes?)" in msg
    assert "valid: " in msg and "local_retention_bytes" in msg and "retention_ms" in msg
    # A trailing slash: a JSON 404 naming the path that works, nothing created.
    for method, body in (("GET", None), ("POST", {"name": topic_name + "-y", "partitions": 1})):
        r = httpx.request(method, server.url + "/v1/topics/", json=body, headers=headers)
        assert r.status_code == 404, (method, r.status_code, r.text)
        err_json = r.json()["error"]
        assert err_json["code"] == "not_found"
        assert "without the trailing slash: /v1/topics" in err_json["message"]
    r = httpx.get(server.url + f"/v1/topics/{topic_name}-y", headers=headers)
    assert r.status_code == 404
    # A URL whose scheme is not http(s) is one line, not httpx's 'unsupported protocol'.
    assert main(["topics", "list", "--url", "ftp://127.0.0.1:1", "--token", ADMIN]) != 0
    err = capsys.readouterr().err
    assert "must be http:// or https://" in err and len(err.strip().splitlines()) == 1, err


def test_bad_bucket_name_in_the_library_says_why() -> None:
    from tiered_log.errors import InvalidArgumentError
    from tiered_log.remote.storage import open_storage

    with pytest.raises(InvalidArgumentError, match="bucket names are 3-255 letters, digits"):
        open_storage("s3://a_/x")
