"""``remote_storage_class`` on a running server whose remote tier is moto's S3 server: a
topic created with STANDARD_IA ships its data objects in that class (HeadObject shows
it; manifests stay STANDARD) and reads back whole; an alter changes the class of the
segments shipped from then on; GLACIER and DEEP_ARCHIVE are refused at creation, by
PATCH and by ``tiered-log topics alter``, each with one message saying why."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tiered_log.format import naming
from tiered_log.remote.scrub import log_id_of_key, topic_of

from .conftest import ServerProcess, service_env
from .test_tiered_service import TINY, _bounds, _read_all_json, _records, _remote_settings, _wait

pytestmark = pytest.mark.timeout(180)

ALTER = ("topics", "alter", "ia", "--config")


def data_classes(client: Any, loc: Any, topic: str) -> dict[int, tuple[str, str]]:
    """Base offset -> (the data object's storage class, its manifest's) of every
    archived segment of ``topic``'s partition 0 (S3 leaves STANDARD out of HeadObject)."""
    prefix = f"{loc.prefix}/" if loc.prefix else ""
    found: dict[int, dict[str, str]] = {}
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=loc.bucket, Prefix=prefix)
    for page in pages:
        for obj in page.get("Contents", []):
            key = obj["Key"][len(prefix) :]
            owner = log_id_of_key(key)
            parsed = naming.parse_segment_object_key(key)
            if owner is None or parsed is None or topic_of(owner[0]) != (topic, 0):
                continue
            head = client.head_object(Bucket=loc.bucket, Key=obj["Key"])
            found.setdefault(parsed[0], {})[parsed[2]] = head.get("StorageClass", "STANDARD")
    return {
        base: (objs[naming.LOG_SUFFIX], objs[naming.RLI_SUFFIX])
        for base, objs in found.items()
        if naming.LOG_SUFFIX in objs and naming.RLI_SUFFIX in objs
    }


def _produce(c: httpx.Client, topic: str, start: int, n: int) -> None:
    for s in range(start, start + n, 100):
        r = c.post(f"/v1/topics/{topic}/partitions/0/records", json={"records": _records(100, s)})
        assert r.status_code == 200, r.text


def _shipped(c: httpx.Client, topic: str, above: int) -> Callable[[], bool]:
    """Whether ``topic``'s partition 0 has shipped (and dropped) past offset ``above``."""
    return lambda: _bounds(c, topic)["local_start_offset"] > above


def _message(r: httpx.Response) -> str:
    assert r.status_code == 400, r.text
    msg: str = r.json()["error"]["message"]
    return msg


def test_topic_storage_class_on_s3(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    server_factory: Callable[..., ServerProcess],
    s3_client: Any,
    s3_location: Any,
) -> None:
    srv = server_factory(**_remote_settings("s3", request, tmp_path))
    with srv.client() as c:
        for refused in ("GLACIER", "DEEP_ARCHIVE"):
            r = c.post(
                "/v1/topics",
                json={
                    "name": "cold",
                    "partitions": 1,
                    "config": {**TINY, "remote_storage_class": refused},
                },
            )
            msg = _message(r)
            assert "remote_storage_class" in msg and refused in msg and "restored" in msg
        assert c.get("/v1/topics/cold").status_code == 404

        for name, config in (("ia", {"remote_storage_class": "STANDARD_IA"}), ("std", {})):
            r = c.post(
                "/v1/topics", json={"name": name, "partitions": 1, "config": {**TINY, **config}}
            )
            assert r.status_code == 201, r.text
        assert c.get("/v1/topics/ia").json()["config"]["remote_storage_class"] == "STANDARD_IA"
        for name in ("ia", "std"):
            _produce(c, name, 0, 400)
        for name in ("ia", "std"):
            _wait(_shipped(c, name, 200), f"{name} shipping")
        ia = data_classes(s3_client, s3_location, "ia")
        assert len(ia) >= 3 and set(ia.values()) == {("STANDARD_IA", "STANDARD")}
        std = data_classes(s3_client, s3_location, "std")
        assert len(std) >= 3 and set(std.values()) == {("STANDARD", "STANDARD")}

        # Refused by PATCH and by the command line; nothing changed.
        msg = _message(
            c.patch("/v1/topics/ia", json={"config": {"remote_storage_class": "GLACIER"}})
        )
        assert "GLACIER" in msg and "restored" in msg
        env = service_env()
        env["TIERED_LOG_URL"] = srv.url
        p = subprocess.run(
            [sys.executable, "-m", "tiered_log.cli", *ALTER, "remote_storage_class=DEEP_ARCHIVE"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 1 and len(lines) == 1, p.stderr
        assert "DEEP_ARCHIVE" in lines[0] and "restored" in lines[0]
        assert c.get("/v1/topics/ia").json()["config"]["remote_storage_class"] == "STANDARD_IA"

        # An alter applies to the segments shipped from then on.
        shipped = _bounds(c, "ia")["local_start_offset"]
        r = c.patch("/v1/topics/ia", json={"config": {"remote_storage_class": "onezone_ia"}})
        assert r.status_code == 200, r.text
        assert r.json()["config"]["remote_storage_class"] == "ONEZONE_IA"
        _produce(c, "ia", 400, 400)
        _wait(_shipped(c, "ia", 600), "ia shipping after the alter")
        ia = data_classes(s3_client, s3_location, "ia")
        old = {b: k for b, k in ia.items() if b < shipped}
        new = {b: k for b, k in ia.items() if b >= 400}
        assert old and set(old.values()) == {("STANDARD_IA", "STANDARD")}
        assert new and set(new.values()) == {("ONEZONE_IA", "STANDARD")}

        recs = _read_all_json(c, "ia", 0, 800)
        assert [x["offset"] for x in recs] == list(range(800))
        assert all(x["value"] == _records(1, x["offset"])[0]["value"] for x in recs)
    assert srv.stop() == 0
