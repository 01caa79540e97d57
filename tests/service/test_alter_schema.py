"""``PATCH /v1/topics/{t}``'s body in the OpenAPI document is typed as ``POST
/v1/topics``'s config is (every topic setting with its type, bounds and description,
no other key), and a value of the wrong type answers 400 naming the setting; only the
settings given change."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx

from tiered_log.topic_config import TopicConfig

from .conftest import ServerProcess

Factory = Callable[..., ServerProcess]


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with a ``$ref`` (alone or as the one item of ``allOf``) followed."""
    if "allOf" in schema and len(schema["allOf"]) == 1:
        schema = schema["allOf"][0]
    ref = schema.get("$ref")
    if ref is None:
        return schema
    out: dict[str, Any] = doc["components"]["schemas"][ref.rsplit("/", 1)[1]]
    return out


def test_patch_body_is_typed_as_the_topic_config(server_factory: Factory) -> None:
    srv = server_factory()
    doc = httpx.get(srv.url + "/openapi.json", timeout=10).json()
    op = doc["paths"]["/v1/topics/{topic}"]["patch"]
    body = _resolve(doc, op["requestBody"]["content"]["application/json"]["schema"])
    config = _resolve(doc, body["properties"]["config"])
    create = _resolve(
        doc,
        doc["paths"]["/v1/topics"]["post"]["requestBody"]["content"]["application/json"]["schema"],
    )
    assert config == _resolve(doc, create["properties"]["config"])  # the same schema
    assert set(config["properties"]) == set(TopicConfig.model_fields)
    assert config.get("additionalProperties") is False
    seg = config["properties"]["segment_bytes"]
    assert seg["type"] == "integer" and seg["minimum"] == 64
    assert set(config["properties"]["remote_compression"]["enum"]) == {
        "none",
        "zstd",
        "lz4",
        "gzip",
    }

    r = httpx.post(srv.url + "/v1/topics", json={"name": "typed", "config": {}}, timeout=10)
    assert r.status_code == 201, r.text
    url = srv.url + "/v1/topics/typed"
    for change, name in [
        ({"retention_ms": "soon"}, "retention_ms"),
        ({"segment_bytes": [1]}, "segment_bytes"),
        ({"remote_enabled": "perhaps"}, "remote_enabled"),
        ({"max_message_bytes": 1.5}, "max_message_bytes"),
    ]:
        r = httpx.patch(url, json={"config": change}, timeout=10)
        assert r.status_code in (400, 422), r.text
        assert name in r.json()["error"]["message"]
    r = httpx.patch(url, json={"config": {"partitions": 2}}, timeout=10)
    assert r.status_code == 400 and "cannot" in r.json()["error"]["message"]
    r = httpx.patch(url, json={"config": {"retention_ms": -1, "segment_ms": 60000}}, timeout=10)
    assert r.status_code == 200, r.text
    got = r.json()["config"]
    assert got["retention_ms"] is None and got["segment_ms"] == 60000
    assert got["segment_bytes"] == 64 << 20  # not given: unchanged
