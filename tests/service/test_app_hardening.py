"""Hardening of the app layer against a real server: every JSON body needs a JSON
Content-Type (415 otherwise, also when it is missing), and the OpenAPI document is exactly
as strict as the server (a request built from the document is never refused as invalid).
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from tiered_log.broker.topics import validate_topic_name

from .conftest import ServerProcess

pytestmark = pytest.mark.timeout(180)

_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf")


def _create(c: httpx.Client, name: str, **config: Any) -> None:
    r = c.post("/v1/topics", json={"name": name, "partitions": 1, "config": config})
    assert r.status_code == 201, r.text


def _error_code(r: httpx.Response) -> str:
    code: str = r.json()["error"]["code"]
    return code


def _next_offset(c: httpx.Client, topic: str) -> int:
    r = c.get(f"/v1/topics/{topic}/partitions/0/bounds")
    assert r.status_code == 200, r.text
    n: int = r.json()["next_offset"]
    return n


# ---- JSON bodies need a JSON Content-Type ------------------------------------------------------

# Bodies a web page can send cross-origin without a preflight: no Content-Type at all, or
# one of the CORS-safelisted types. None of them may be taken for JSON.
_NOT_JSON: list[dict[str, str]] = [
    {},
    {"Content-Type": ""},
    {"Content-Type": "text/plain"},
    {"Content-Type": "text/plain;charset=UTF-8"},
    {"Content-Type": "application/x-www-form-urlencoded"},
    {"Content-Type": "multipart/form-data; boundary=x"},
]


@pytest.mark.parametrize(
    "headers", _NOT_JSON, ids=lambda h: h.get("Content-Type", "missing") or "empty"
)
def test_json_bodies_without_a_json_content_type_are_415(
    admin: httpx.Client, topic_name: str, headers: dict[str, str]
) -> None:
    """Produce, create and truncate (every route that takes a JSON body) answer 415 and
    change nothing when the body is JSON but not declared as such."""
    _create(admin, topic_name)
    records = json.dumps({"records": [{"value": "cross-origin"}]}).encode()
    r = admin.post(
        f"/v1/topics/{topic_name}/partitions/0/records", content=records, headers=headers
    )
    assert r.status_code == 415 and _error_code(r) == "unsupported_media_type", r.text
    assert r.request.headers.get("content-type", "") == headers.get("Content-Type", "")
    assert _next_offset(admin, topic_name) == 0

    other = topic_name + "-x"
    r = admin.post("/v1/topics", content=json.dumps({"name": other}).encode(), headers=headers)
    assert r.status_code == 415 and _error_code(r) == "unsupported_media_type", r.text
    assert admin.get(f"/v1/topics/{other}").status_code == 404

    assert (
        admin.post(
            f"/v1/topics/{topic_name}/partitions/0/records",
            json={"records": [{"value": "a"}, {"value": "b"}]},
        ).status_code
        == 200
    )
    r = admin.post(
        f"/v1/topics/{topic_name}/partitions/0/truncate",
        content=json.dumps({"offset": 0}).encode(),
        headers=headers,
    )
    assert r.status_code == 415 and _error_code(r) == "unsupported_media_type", r.text
    assert _next_offset(admin, topic_name) == 2


def test_json_content_types_are_accepted(admin: httpx.Client, topic_name: str) -> None:
    """``application/json`` with parameters and ``application/*+json`` still work on
    every JSON route (the check is not stricter than the documented types)."""
    for ct in ("application/json; charset=utf-8", "Application/JSON", "application/x.batch+json"):
        name = f"{topic_name}-{len(ct)}"
        r = admin.post(
            "/v1/topics", content=json.dumps({"name": name}).encode(), headers={"Content-Type": ct}
        )
        assert r.status_code == 201, (ct, r.text)
        r = admin.post(
            f"/v1/topics/{name}/partitions/0/records",
            content=b'{"records": [{"value": "v"}]}',
            headers={"Content-Type": ct},
        )
        assert r.status_code == 200, (ct, r.text)
        r = admin.post(
            f"/v1/topics/{name}/partitions/0/truncate",
            content=b'{"offset": 0}',
            headers={"Content-Type": ct},
        )
        assert r.status_code == 200, (ct, r.text)
        assert admin.delete(f"/v1/topics/{name}").status_code == 204


# ---- the OpenAPI document is as strict as the server --------------------------------------------


def _document(server: ServerProcess) -> dict[str, Any]:
    """The served document, numbers parsed exactly (floats as Decimal, to be spotted)."""
    r = httpx.get(server.url + "/openapi.json", timeout=30)
    assert r.status_code == 200
    doc: dict[str, Any] = json.loads(r.text, parse_float=Decimal)
    return doc


def _walk(node: Any, path: str = "") -> Any:
    if isinstance(node, dict):
        for k, v in node.items():
            yield path + "/" + k, k, v
            yield from _walk(v, path + "/" + k)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{path}/{i}")


def test_openapi_bounds_are_exact_integers(server: ServerProcess) -> None:
    """Every numeric bound in the document is an exact integer (a float loses the last
    digits of 2**63 - 1), and the truncate offset's maximum is the server's."""
    doc = _document(server)
    floats = [p for p, k, v in _walk(doc) if k in _BOUNDS and not isinstance(v, int)]
    assert floats == []
    comps = doc["components"]["schemas"]
    refs = {v for _, k, v in _walk(doc) if k == "$ref"}
    assert refs and {r.rsplit("/", 1)[1] for r in refs} <= set(comps), refs
    assert comps["TruncateRequest"]["properties"]["offset"]["maximum"] == (1 << 63) - 1
    assert comps["TruncateRequest"]["properties"]["offset"]["minimum"] == 0


def test_openapi_topic_config_overrides_carry_the_servers_bounds(server: ServerProcess) -> None:
    """The overrides' bounds are the topic config's, the one the server validates with."""
    from tiered_log.config import TopicConfig

    doc = _document(server)
    props = doc["components"]["schemas"]["TopicConfigOverrides"]["properties"]
    full = TopicConfig.model_json_schema()["properties"]
    assert set(props) == set(full)
    for name, schema in props.items():
        assert _int_schemas(schema) == _int_schemas(full[name]), name


def _int_schemas(schema: dict[str, Any]) -> list[tuple[str, Any]]:
    """The bounds of the integer branch of ``schema`` (``anyOf`` or plain)."""
    branches = schema.get("anyOf", [schema])
    out: list[tuple[str, Any]] = []
    for b in branches:
        if b.get("type") == "integer" and "const" not in b:
            out.extend((k, b[k]) for k in _BOUNDS if k in b)
    return sorted(out)


def test_openapi_topic_name_pattern_matches_the_server(server: ServerProcess) -> None:
    """The documented topic-name pattern refuses what the server refuses ('.', '..')."""
    import re

    doc = _document(server)
    pattern = doc["components"]["schemas"]["CreateTopicRequest"]["properties"]["name"]["pattern"]
    for name in (".", "..", "a/b", "", "x" * 201, "ok", "a.b", "...", "_-.", "x" * 200):
        try:
            validate_topic_name(name)
            valid = True
        except Exception:
            valid = False
        assert bool(re.search(pattern, name)) == valid, name


_SETTINGS = settings(
    max_examples=60,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=list(HealthCheck),
)


def test_bodies_built_from_the_document_are_accepted(
    server: ServerProcess, admin: httpx.Client, topic_name: str
) -> None:
    """Bodies generated from the document (schemathesis, positive mode) for create,
    produce and truncate are never refused as invalid: the document states every bound
    the server checks (config overrides, key or key_b64, integer offsets).

    Only the topic name and the partition count are chosen here (the server's
    ``max_total_partitions`` is a runtime limit the document cannot state)."""
    schema = schemathesis.openapi.from_dict(
        json.loads(json.dumps(_document(server), default=float))
    )
    _create(admin, topic_name, append_threshold=1 << 30)
    created = [0]
    tried: dict[str, list[str]] = {"create": [], "produce": [], "truncate": []}

    def json_cases(path: str) -> Any:
        op = schema[path]["POST"]
        return op.as_strategy(media_type="application/json").filter(
            lambda c: c.media_type == "application/json"
        )

    @_SETTINGS
    @given(json_cases("/v1/topics"))
    def create(case: Any) -> None:
        created[0] += 1
        name = f"{topic_name}-c{created[0]}"
        body = {**case.body, "name": name, "partitions": 1}
        tried["create"].append(json.dumps(case.body, sort_keys=True))
        r = admin.post("/v1/topics", json=body)
        assert r.status_code == 201, (body, r.text)
        assert admin.delete(f"/v1/topics/{name}").status_code == 204

    @_SETTINGS
    @given(json_cases("/v1/topics/{topic}/partitions/{partition}/records"))
    def produce(case: Any) -> None:
        tried["produce"].append(json.dumps(case.body, sort_keys=True))
        r = admin.post(f"/v1/topics/{topic_name}/partitions/0/records", json=case.body)
        assert r.status_code == 200, (case.body, r.text)

    @_SETTINGS
    @given(json_cases("/v1/topics/{topic}/partitions/{partition}/truncate"))
    def truncate(case: Any) -> None:
        tried["truncate"].append(json.dumps(case.body, sort_keys=True))
        r = admin.post(f"/v1/topics/{topic_name}/partitions/0/truncate", json=case.body)
        assert r.status_code in (200, 416), (case.body, r.text)

    create()
    produce()
    truncate()
    for form, bodies in tried.items():  # the run did try many different bodies
        assert len(set(bodies)) >= 15, (form, bodies)


def test_truncate_offset_takes_integral_numbers_only() -> None:
    """A JSON number with a zero fraction is an integer (as JSON Schema counts them, so a
    document-built ``5.0`` is accepted) only where it names one offset exactly; strings,
    booleans, fractions and floats past 2**53 stay 400 (a truncation never rounds)."""
    from pydantic import ValidationError

    from tiered_log.service.wire import TruncateRequest

    for text, want in (
        ("5", 5),
        ("5.0", 5),
        ("0.0", 0),
        (str(1 << 53) + ".0", 1 << 53),
        (str((1 << 63) - 1), (1 << 63) - 1),
    ):
        assert TruncateRequest.model_validate_json(f'{{"offset": {text}}}').offset == want
    for text in ('"5"', "true", "5.5", "-1", "1e19", str((1 << 53) + 2) + ".0", str(1 << 63)):
        with pytest.raises(ValidationError):
            TruncateRequest.model_validate_json(f'{{"offset": {text}}}')
