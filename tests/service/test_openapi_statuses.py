"""Every status an operation answers is in the OpenAPI document for that operation.

A walk over the server's own ``/openapi.json``: each operation is sent the requests the
layers in front of its handler judge (no token, a bad one, a token without the grant, no
body, a body of the wrong type, malformed JSON, a body over ``max_request_bytes``, a
missing topic, a bad topic name, a partition that does not exist or is out of range, a
bad query value) and every answer's status must be one the document lists for it, in
the JSON error shape. Also: a single node answers the cluster routes with
``not_a_cluster``, whatever the body.
"""

from __future__ import annotations

import itertools
import json
import tempfile
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from tiered_log.config import load_settings
from tiered_log.service.app import create_app

from .conftest import ADMIN, READER, TOKENS, WRITER, ServerProcess

LIMIT = 64 << 10
"""The server's max_request_bytes here."""
TOPIC = "ro.docs"
"""A topic READER may read and WRITER may write (``ro.*``)."""

_AUTH: dict[str, dict[str, str]] = {
    "none": {},
    "bad token": {"Authorization": "Bearer not-a-token"},
    "reader": {"Authorization": f"Bearer {READER}"},
    "writer": {"Authorization": f"Bearer {WRITER}"},
    "admin": {"Authorization": f"Bearer {ADMIN}"},
}
_BODIES: dict[str, tuple[dict[str, str], bytes | None]] = {
    "no body": ({}, None),
    "text body": ({"Content-Type": "text/plain"}, b"x"),
    "empty JSON": ({"Content-Type": "application/json"}, b"{}"),
    "malformed JSON": ({"Content-Type": "application/json"}, b"{"),
    "too large": ({"Content-Type": "application/json"}, b" " * (LIMIT + 1)),
}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A single node with authentication on and a small request bound."""
    base = tmp_path_factory.mktemp("openapi")
    srv = ServerProcess(
        base / "data", base, {"auth_tokens": json.dumps(TOKENS), "max_request_bytes": str(LIMIT)}
    )
    srv.start()
    with srv.client(ADMIN) as c:
        assert c.post("/v1/topics", json={"name": TOPIC, "partitions": 2}).status_code == 201
        r = c.post(
            f"/v1/topics/{TOPIC}/partitions/0/records",
            json={"records": [{"value": f"r{i}"} for i in range(10)]},
        )
        assert r.status_code == 200, r.text
    yield srv
    srv.stop(timeout=15)
    srv.kill()


def _paths(template: str) -> list[str]:
    """``template`` filled with a present topic and partition, and with each kind of bad
    one."""
    topics = [TOPIC, "missing-topic", quote("bad name!")]
    partitions = ["0", "7", "99999999"]
    out = []
    for topic, partition in itertools.product(topics, partitions):
        path = template.replace("{topic}", topic).replace("{partition}", partition)
        if path not in out:
            out.append(path)
    return out


def _queries(op: dict[str, Any]) -> list[dict[str, str]]:
    """The operation's required query parameters valid (0), and each one not a number."""
    required = [
        p["name"] for p in op.get("parameters", []) if p.get("in") == "query" and p.get("required")
    ]
    valid = {name: "0" for name in required}
    return [valid, *({**valid, name: "x"} for name in required)]


@pytest.mark.timeout(180)
def test_every_answered_status_is_documented(node: ServerProcess) -> None:
    doc = httpx.get(node.url + "/openapi.json", timeout=10).json()
    ops = [(path, method, op) for path, item in doc["paths"].items() for method, op in item.items()]
    ops.sort(key=lambda o: o[1] == "delete")  # deleting the topic comes last
    undocumented: list[str] = []
    statuses: set[tuple[str, str, int]] = set()
    sent = 0
    with httpx.Client(base_url=node.url, timeout=30) as http:
        for template, method, op in ops:
            documented = set(op["responses"])
            for path, query, (auth, headers), (body_name, (ctype, content)) in itertools.product(
                _paths(template), _queries(op), _AUTH.items(), _BODIES.items()
            ):
                if method in ("get", "delete") and body_name not in ("no body", "too large"):
                    continue
                r = http.request(
                    method.upper(),
                    path,
                    params=query,
                    headers={**headers, **ctype},
                    content=content,
                )
                sent += 1
                statuses.add((template, method, r.status_code))
                what = f"{method.upper()} {path} {query} ({auth}, {body_name})"
                if str(r.status_code) not in documented:
                    undocumented.append(
                        f"{what}: {r.status_code} {r.text[:160]} (documented: "
                        f"{' '.join(sorted(documented))})"
                    )
                if r.status_code >= 400:
                    err = r.json()["error"]
                    assert err["code"] and err["message"], what
    assert not undocumented, f"{len(undocumented)} of {sent} answers undocumented:\n" + "\n".join(
        undocumented[:40]
    )
    # The walk reached each layer: the statuses below were answered somewhere.
    seen = {s for _, _, s in statuses}
    assert {400, 401, 403, 404, 413, 415}.issubset(seen), seen
    cluster = {s for t, m, s in statuses if t.startswith("/v1/cluster")}
    assert 404 in cluster


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("method", "path", "ctype", "body"),
    [
        ("GET", "/v1/cluster", None, None),
        ("POST", "/v1/cluster/restore", None, None),
        ("POST", "/v1/cluster/reassign", None, None),
        ("POST", "/v1/cluster/restore", "application/json", b"{}"),
        ("POST", "/v1/cluster/reassign", "application/json", b'{"from_node": 1, "to_node": 2}'),
        ("POST", "/v1/cluster/restore", "text/plain", b"x"),
    ],
)
def test_a_single_node_says_it_is_not_a_cluster(
    node: ServerProcess, method: str, path: str, ctype: str | None, body: bytes | None
) -> None:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    if ctype:
        headers["Content-Type"] = ctype
    r = httpx.request(method, node.url + path, headers=headers, content=body, timeout=10)
    assert r.status_code == 404, r.text
    err = r.json()["error"]
    assert err["code"] == "not_a_cluster", err
    assert err["message"].startswith("this node is not part of a cluster"), err
    assert "cluster_etcd" in err["message"]
    # Without a token the caller learns nothing: 401 first.
    r = httpx.request(
        method,
        node.url + path,
        content=body,
        timeout=10,
        headers={"Content-Type": ctype} if ctype else {},
    )
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthenticated"


def test_a_cluster_documents_not_leader_on_partition_routes() -> None:
    """In a cluster the partition routes (and a consumer group's, answered by its
    coordinator) answer 421 ``not_leader``; a single node never does, and documents it
    nowhere."""
    with tempfile.TemporaryDirectory() as d:
        single = create_app(load_settings(data_dir=d)).openapi()
        clustered = create_app(
            load_settings(
                data_dir=d,
                node_id=1,
                advertised_url="http://127.0.0.1:1",
                cluster_etcd="http://127.0.0.1:2",
            )
        ).openapi()
    for doc, expect in ((single, False), (clustered, True)):
        for path, item in doc["paths"].items():
            for op in item.values():
                if "{partition}" in path or "{group}" in path:
                    assert ("421" in op["responses"]) is expect, (path, expect)
                else:
                    assert "421" not in op["responses"], path
