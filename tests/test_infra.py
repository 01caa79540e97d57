"""Static checks of infra/: the compose file, the Dockerfile and its ignore file.

There is no Docker engine here, so nothing is built or started. Instead: the compose file
parses and has the services, dependencies and healthchecks the local MinIO setup needs;
every ``TIERED_LOG_*`` variable it (or the Dockerfile) sets names a real setting, and the
whole set loads with :func:`tiered_log.config.load_settings` in a fresh process to the
values written; the bucket the one-shot ``mc`` job creates is the bucket of the remote
URL, with the same credentials and endpoint; the Dockerfile installs the package and
runs ``tiered-log serve`` on the port it exposes.

The cluster compose file (``docker-compose.cluster.yml``: etcd, MinIO and three nodes built
from the same Dockerfile) gets the same checks per node, and: each node's settings load
as a complete cluster node (distinct node ids, an advertised URL of its own service name
and port, published on that port and probed by its healthcheck), the etcd URL is the one
the etcd service advertises, and every node shares one remote tier in the bucket ``mc``
creates.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tiered_log.config import Settings, TopicConfig

ROOT = Path(__file__).resolve().parents[1]
INFRA = ROOT / "infra"
PREFIX = "TIERED_LOG_"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load((INFRA / "docker-compose.yml").read_text())
    assert isinstance(data, dict)
    return data


def service_env(service: dict[str, Any]) -> dict[str, str]:
    """A service's environment as a dict (compose allows a mapping or KEY=VALUE list)."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {str(k): "" if v is None else str(v) for k, v in env.items()}


def command_text(service: dict[str, Any]) -> str:
    """entrypoint + command of a service as one shell-ish string."""
    parts: list[str] = []
    for key in ("entrypoint", "command"):
        v = service.get(key)
        if isinstance(v, list):
            parts.extend(str(x) for x in v)
        elif v:
            parts.append(str(v))
    return " ".join(parts)


def dockerfile() -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (KEYWORD, arguments), continuations joined."""
    text = (INFRA / "Dockerfile").read_text()
    text = re.sub(r"\\\n", " ", text)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def dockerfile_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for word, rest in dockerfile():
        if word == "ENV":
            for item in shlex.split(rest):
                k, _, v = item.partition("=")
                env[k] = v
    return env


def setting_path(name: str) -> tuple[str, ...]:
    """The Settings field path a ``TIERED_LOG_*`` variable names; AssertionError if none."""
    assert name.startswith(PREFIX), name
    parts = tuple(p.lower() for p in name[len(PREFIX) :].split("__"))
    assert parts[0] in Settings.model_fields, f"{name}: no setting {parts[0]!r}"
    if len(parts) > 1:
        assert parts[0] == "topic_defaults" and len(parts) == 2, f"{name}: not a nested setting"
        assert parts[1] in TopicConfig.model_fields, f"{name}: no topic setting {parts[1]!r}"
    return parts


def load_in_subprocess(env: dict[str, str]) -> dict[str, Any]:
    """``load_settings()`` in a fresh process whose only TIERED_LOG_* variables are ``env``;
    returns the settings as JSON data (secrets revealed, for comparison)."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(PREFIX)}
    code = (
        "import json\n"
        "from tiered_log.config import load_settings\n"
        "s = load_settings()\n"
        "d = s.model_dump(mode='json')\n"
        "for k in ('s3_access_key', 's3_secret_key'):\n"
        "    v = getattr(s, k)\n"
        "    d[k] = v.get_secret_value() if v is not None else None\n"
        "print(json.dumps(d))\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    data: dict[str, Any] = json.loads(p.stdout)
    return data


def expected_value(raw: str, current: Any) -> Any:
    """``raw`` (an env string) in the type of the loaded value ``current``."""
    if isinstance(current, bool):
        return raw.strip().lower() in ("1", "true", "yes", "on")
    if isinstance(current, int):
        return int(raw)
    if isinstance(current, float):
        return float(raw)
    return raw


# ---- compose -----------------------------------------------------------------------------


def test_compose_has_the_three_services(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"minio", "create-bucket", "tiered-log"} <= set(services)
    assert services["minio"]["image"].startswith("minio/minio")
    assert services["create-bucket"]["image"].startswith("minio/mc")
    build = services["tiered-log"]["build"]
    assert (INFRA / build["context"] / build["dockerfile"]).resolve() == INFRA / "Dockerfile"


def test_compose_start_order_and_healthchecks(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in ("minio", "tiered-log"):
        hc = services[name]["healthcheck"]
        assert hc["test"][0] in ("CMD", "CMD-SHELL") and len(hc["test"]) > 1, name
        assert hc.get("retries", 0) >= 1, name
    assert services["create-bucket"]["depends_on"]["minio"]["condition"] == "service_healthy"
    deps = services["tiered-log"]["depends_on"]
    assert deps["minio"]["condition"] == "service_healthy"
    assert deps["create-bucket"]["condition"] == "service_completed_successfully"
    # The healthcheck probes the port the service listens on.
    env = service_env(services["tiered-log"])
    assert f":{env['TIERED_LOG_PORT']}/healthz" in " ".join(
        services["tiered-log"]["healthcheck"]["test"]
    )


def test_every_tiered_log_variable_is_a_setting(compose: dict[str, Any]) -> None:
    names = [
        k for s in compose["services"].values() for k in service_env(s) if k.startswith(PREFIX)
    ]
    names += [k for k in dockerfile_env() if k.startswith(PREFIX)]
    assert len(names) >= 8
    for name in names:
        setting_path(name)


def test_service_environment_loads_with_the_values_written(compose: dict[str, Any]) -> None:
    env = {
        k: v
        for k, v in service_env(compose["services"]["tiered-log"]).items()
        if k.startswith(PREFIX)
    }
    for required in (
        "TIERED_LOG_REMOTE_URL",
        "TIERED_LOG_S3_ENDPOINT_URL",
        "TIERED_LOG_S3_ACCESS_KEY",
        "TIERED_LOG_S3_SECRET_KEY",
        "TIERED_LOG_S3_REGION",
        "TIERED_LOG_HOST",
        "TIERED_LOG_PORT",
        "TIERED_LOG_DATA_DIR",
    ):
        assert required in env, required
    loaded = load_in_subprocess(env)
    for name, raw in env.items():
        path = setting_path(name)
        got: Any = loaded
        for p in path:
            got = got[p]
        assert got == expected_value(raw, got), (name, raw, got)
    assert loaded["remote_url"] == env["TIERED_LOG_REMOTE_URL"]
    assert loaded["topic_defaults"]["segment_bytes"] != TopicConfig.model_validate({}).segment_bytes


def test_dockerfile_environment_loads(compose: dict[str, Any]) -> None:
    env = {k: v for k, v in dockerfile_env().items() if k.startswith(PREFIX)}
    loaded = load_in_subprocess(env)
    assert loaded["host"] == "0.0.0.0"
    assert loaded["data_dir"] == "/data"
    assert str(loaded["port"]) == env["TIERED_LOG_PORT"]
    # Without a bucket the archive is a volume of its own, made and owned by the
    # service's user, not inside the data directory (and not the default beside it,
    # /data-remote, which that user could not create).
    assert loaded["remote_url"] == "/archive"
    volumes = [json.loads(rest) for w, rest in dockerfile() if w == "VOLUME"]
    assert volumes == [["/data", "/archive"]]
    runs = " ".join(rest for w, rest in dockerfile() if w == "RUN")
    assert re.search(r"mkdir -p /data /archive", runs) and "chown tiered /data /archive" in runs


def test_bucket_created_is_the_remote_tier_bucket(compose: dict[str, Any]) -> None:
    check_bucket(compose["services"], "tiered-log")


def check_bucket(services: dict[str, Any], node: str) -> None:
    """The one-shot ``mc`` job creates the bucket of ``node``'s remote URL, on the MinIO
    and with the credentials ``node`` uses."""
    env = service_env(services[node])
    url = urlsplit(env["TIERED_LOG_REMOTE_URL"])
    assert url.scheme == "s3" and url.netloc and url.path.strip("/")
    script = command_text(services["create-bucket"])
    made = re.findall(r"\bmc mb\b[^&;|]*?\s(\w+)/([a-z0-9][a-z0-9.-]+)", script)
    assert made, script
    aliases = {
        a: (u, k, s) for a, u, k, s in re.findall(r"\bmc alias set (\w+) (\S+) (\S+) (\S+)", script)
    }
    alias, bucket = made[0]
    assert bucket == url.netloc
    # mc talks to the same MinIO, with the same credentials, as the service.
    mc_url, mc_key, mc_secret = aliases[alias]
    assert mc_url == env["TIERED_LOG_S3_ENDPOINT_URL"]
    minio_env = service_env(services["minio"])
    assert mc_key == env["TIERED_LOG_S3_ACCESS_KEY"] == minio_env["MINIO_ROOT_USER"]
    assert mc_secret == env["TIERED_LOG_S3_SECRET_KEY"] == minio_env["MINIO_ROOT_PASSWORD"]
    assert len(minio_env["MINIO_ROOT_PASSWORD"]) >= 8  # MinIO refuses shorter ones
    # The endpoint is the minio service on its API port.
    ep = urlsplit(env["TIERED_LOG_S3_ENDPOINT_URL"])
    assert ep.hostname == "minio" and ep.port == 9000


def test_ports_agree(compose: dict[str, Any]) -> None:
    svc = compose["services"]["tiered-log"]
    port = service_env(svc)["TIERED_LOG_PORT"]
    published = [str(p).rsplit(":", 1)[-1] for p in svc["ports"]]
    assert port in published
    exposed = [rest.split()[0].split("/")[0] for word, rest in dockerfile() if word == "EXPOSE"]
    assert exposed == [port]


# ---- Dockerfile ----------------------------------------------------------------------------


def test_dockerfile_instructions() -> None:
    steps = dockerfile()
    words = [w for w, _ in steps]
    assert words[0] == "FROM" and steps[0][1].startswith("python:3.11-slim")
    assert "COPY" in words
    copies = " ".join(rest for w, rest in steps if w == "COPY")
    assert "pyproject.toml" in copies and "tiered_log" in copies
    runs = [rest for w, rest in steps if w == "RUN"]
    assert any(re.search(r"\bpip install\b.*\s\.(\s|$)", r) for r in runs), runs
    # pip install comes after the sources are copied.
    assert words.index("RUN") > max(i for i, w in enumerate(words) if w == "COPY")
    cmd = [rest for w, rest in steps if w == "CMD"]
    assert len(cmd) == 1
    assert json.loads(cmd[0]) == ["tiered-log", "serve"]
    # tiered-log is the package's console script.
    assert 'tiered-log = "tiered_log.cli:main"' in (ROOT / "pyproject.toml").read_text()


def test_dockerignore_keeps_the_sources() -> None:
    lines = [
        ln.strip()
        for ln in (INFRA / "Dockerfile.dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    for needed in ("pyproject.toml", "README.md", "tiered_log/**"):
        assert f"!{needed}" in lines


# ---- the cluster compose file --------------------------------------------------------------

NODES = ("node-1", "node-2", "node-3")


@pytest.fixture(scope="module")
def cluster_compose() -> dict[str, Any]:
    data = yaml.safe_load((INFRA / "docker-compose.cluster.yml").read_text())
    assert isinstance(data, dict)
    return data


def test_cluster_compose_services(cluster_compose: dict[str, Any]) -> None:
    services = cluster_compose["services"]
    assert {"etcd", "minio", "create-bucket", *NODES} <= set(services)
    assert services["etcd"]["image"].startswith(("quay.io/coreos/etcd:", "bitnami/etcd:"))
    assert services["minio"]["image"].startswith("minio/minio")
    assert services["create-bucket"]["image"].startswith("minio/mc")
    for name in NODES:
        build = services[name]["build"]
        assert (INFRA / build["context"] / build["dockerfile"]).resolve() == INFRA / "Dockerfile"
        assert services[name]["image"] == services[NODES[0]]["image"]
        deps = services[name]["depends_on"]
        assert deps["etcd"]["condition"] == "service_healthy", name
        assert deps["minio"]["condition"] == "service_healthy", name
        assert deps["create-bucket"]["condition"] == "service_completed_successfully", name
    assert services["create-bucket"]["depends_on"]["minio"]["condition"] == "service_healthy"
    for name in ("etcd", "minio", *NODES):
        hc = services[name]["healthcheck"]
        assert hc["test"][0] in ("CMD", "CMD-SHELL") and len(hc["test"]) > 1, name
        assert hc.get("retries", 0) >= 1, name


def test_cluster_every_tiered_log_variable_is_a_setting(cluster_compose: dict[str, Any]) -> None:
    names = [
        k
        for s in cluster_compose["services"].values()
        for k in service_env(s)
        if k.startswith(PREFIX)
    ]
    assert len(names) >= 3 * 10
    for name in names:
        setting_path(name)


def test_cluster_etcd_url_is_the_one_etcd_advertises(cluster_compose: dict[str, Any]) -> None:
    services = cluster_compose["services"]
    etcd_args = command_text(services["etcd"])
    advertised = re.findall(r"--advertise-client-urls[= ](\S+)", etcd_args)
    listen = re.findall(r"--listen-client-urls[= ](\S+)", etcd_args)
    assert advertised and listen, etcd_args
    for name in NODES:
        url = urlsplit(service_env(services[name])["TIERED_LOG_CLUSTER_ETCD"])
        assert url.hostname == "etcd", name
        assert f"http://etcd:{url.port}" in advertised[0].split(","), (name, advertised)
        assert f"http://0.0.0.0:{url.port}" in listen[0].split(","), (name, listen)


def test_cluster_nodes_load_as_cluster_nodes(cluster_compose: dict[str, Any]) -> None:
    services = cluster_compose["services"]
    ids, urls, remotes = set(), set(), set()
    for name in NODES:
        svc = services[name]
        env = {k: v for k, v in service_env(svc).items() if k.startswith(PREFIX)}
        for required in (
            "TIERED_LOG_NODE_ID",
            "TIERED_LOG_ADVERTISED_URL",
            "TIERED_LOG_CLUSTER_ETCD",
            "TIERED_LOG_REMOTE_URL",
            "TIERED_LOG_S3_ENDPOINT_URL",
            "TIERED_LOG_S3_ACCESS_KEY",
            "TIERED_LOG_S3_SECRET_KEY",
            "TIERED_LOG_S3_REGION",
            "TIERED_LOG_HOST",
            "TIERED_LOG_PORT",
            "TIERED_LOG_DATA_DIR",
        ):
            assert required in env, (name, required)
        loaded = load_in_subprocess(env)
        for var, raw in env.items():
            got: Any = loaded
            for p in setting_path(var):
                got = got[p]
            assert got == expected_value(raw, got), (name, var, raw, got)
        assert Settings.model_validate(loaded).clustered, name
        assert loaded["host"] == "0.0.0.0"
        # Advertised as its own service name and port, which it listens on, publishes
        # on the same host port and probes in its healthcheck.
        port = str(loaded["port"])
        adv = urlsplit(loaded["advertised_url"])
        assert adv.scheme == "http" and str(adv.port) == port, (name, adv)
        assert adv.hostname in (name, svc.get("hostname")), (name, adv)
        published = [str(p).split(":")[-2:] for p in svc["ports"]]
        assert [port, port] in published, (name, svc["ports"])
        assert f":{port}/healthz" in " ".join(svc["healthcheck"]["test"]), name
        ids.add(loaded["node_id"])
        urls.add(loaded["advertised_url"])
        remotes.add(loaded["remote_url"])
        assert any(v.split(":")[-1] == loaded["data_dir"] for v in svc["volumes"]), name
    assert len(ids) == len(urls) == len(NODES), (ids, urls)
    assert len(remotes) == 1, remotes  # one remote tier, shared
    volumes = {v.split(":")[0] for name in NODES for v in services[name]["volumes"]}
    assert len(volumes) == len(NODES), volumes  # a data volume each
    assert volumes <= set(cluster_compose["volumes"])


def test_cluster_bucket_created_is_the_remote_tier_bucket(cluster_compose: dict[str, Any]) -> None:
    for name in NODES:
        check_bucket(cluster_compose["services"], name)


@pytest.mark.parametrize("compose_file", ["docker-compose.yml", "docker-compose.cluster.yml"])
def test_pulled_images_are_pinned(compose_file: str) -> None:
    """Every image pulled from a registry names a release: no ``latest``, no bare name
    (``tiered-log:dev`` is built here, not pulled). MinIO's tags are its release names."""
    data = yaml.safe_load((INFRA / compose_file).read_text())
    for name, svc in data["services"].items():
        image = svc.get("image", "")
        if "build" in svc or not image:
            continue
        repo, sep, tag = image.rpartition(":")
        assert sep and "/" not in tag and tag != "latest", (name, image)
        if repo.endswith(("minio/minio", "minio/mc")):
            assert re.fullmatch(r"RELEASE\.\d{4}-\d\d-\d\dT\d\d-\d\d-\d\dZ", tag), (name, image)
