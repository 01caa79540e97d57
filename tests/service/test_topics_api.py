"""Topic endpoints against a real server process: create, list, describe, delete."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from .conftest import ServerProcess


def _error(r: httpx.Response) -> dict[str, Any]:
    body = r.json()
    assert set(body) == {"error"}, body
    assert isinstance(body["error"]["code"], str) and isinstance(body["error"]["message"], str)
    err: dict[str, Any] = body["error"]
    return err


def test_create_describe_list_delete(
    admin: httpx.Client, topic_name: str, server: ServerProcess
) -> None:
    r = admin.post(
        "/v1/topics",
        json={
            "name": topic_name,
            "partitions": 3,
            "config": {
                "segment_bytes": 4096,
                "retention_ms": -1,
                "flush_messages": 10,
                "remote_enabled": False,
            },
        },
    )
    assert r.status_code == 201, r.text
    d = r.json()
    assert d["name"] == topic_name and d["partitions"] == 3
    assert d["config"]["segment_bytes"] == 4096
    assert d["config"]["retention_ms"] is None
    assert d["config"]["flush_messages"] == 10
    assert d["config"]["remote_enabled"] is False
    assert d["config"]["append_threshold"] == 8 << 20  # a default
    assert [p["partition"] for p in d["partition_info"]] == [0, 1, 2]
    assert all(p["next_offset"] == 0 for p in d["partition_info"])

    r = admin.get(f"/v1/topics/{topic_name}")
    assert r.status_code == 200
    assert r.json()["topic_id"] == d["topic_id"]

    names = [t["name"] for t in admin.get("/v1/topics").json()["topics"]]
    assert topic_name in names

    # On disk: topic.json plus one directory per partition.
    tdir = server.data_dir / "topics" / topic_name
    assert (tdir / "topic.json").is_file()
    assert sorted(p.name for p in tdir.iterdir() if p.is_dir()) == ["0", "1", "2"]

    r = admin.delete(f"/v1/topics/{topic_name}")
    assert r.status_code == 204 and r.content == b""
    assert not tdir.exists()
    assert _error(admin.get(f"/v1/topics/{topic_name}"))["code"] == "topic_not_found"
    assert admin.get(f"/v1/topics/{topic_name}").status_code == 404
    assert topic_name not in [t["name"] for t in admin.get("/v1/topics").json()["topics"]]


def test_duplicate_topic_is_409(admin: httpx.Client, topic_name: str) -> None:
    assert admin.post("/v1/topics", json={"name": topic_name}).status_code == 201
    r = admin.post("/v1/topics", json={"name": topic_name, "partitions": 2})
    assert r.status_code == 409
    assert _error(r)["code"] == "topic_exists"
    assert admin.get(f"/v1/topics/{topic_name}").json()["partitions"] == 1


def test_recreated_topic_starts_empty(admin: httpx.Client, topic_name: str) -> None:
    admin.post("/v1/topics", json={"name": topic_name})
    admin.post(f"/v1/topics/{topic_name}/partitions/0/records", json={"records": [{"value": "x"}]})
    assert admin.delete(f"/v1/topics/{topic_name}").status_code == 204
    assert admin.post("/v1/topics", json={"name": topic_name}).status_code == 201
    b = admin.get(f"/v1/topics/{topic_name}/partitions/0/bounds").json()
    assert b["next_offset"] == 0


def test_unknown_topic_is_404(admin: httpx.Client) -> None:
    for method, path in [
        ("GET", "/v1/topics/nope"),
        ("DELETE", "/v1/topics/nope"),
        ("GET", "/v1/topics/nope/partitions/0/bounds"),
        ("GET", "/v1/topics/nope/partitions/0/records?offset=0"),
        ("GET", "/v1/topics/nope/partitions/0/offsets?timestamp=0"),
    ]:
        r = admin.request(method, path)
        assert r.status_code == 404, (method, path, r.text)
        assert _error(r)["code"] == "topic_not_found"


@pytest.mark.parametrize(
    "name",
    ["../x", "a/b", "", "x" * 300, ".", "..", "a b", "a\\b", "ä", "a\x00b", "/etc"],
)
def test_topic_name_validation(admin: httpx.Client, server: ServerProcess, name: str) -> None:
    r = admin.post("/v1/topics", json={"name": name})
    assert r.status_code == 400, r.text
    assert _error(r)["code"] == "invalid_topic_name"
    # Nothing was created anywhere under (or beside) the topics directory.
    assert not (server.data_dir / "x").exists()
    assert not any(p.name.startswith("x" * 10) for p in (server.data_dir / "topics").iterdir())


def test_topic_name_limits_accepted(admin: httpx.Client) -> None:
    name = "A.b_c-" + "z" * 194  # exactly 200 characters
    assert len(name) == 200
    assert admin.post("/v1/topics", json={"name": name}).status_code == 201
    assert admin.get(f"/v1/topics/{name}").status_code == 200
    assert admin.delete(f"/v1/topics/{name}").status_code == 204


def test_invalid_topic_name_in_path_is_400(admin: httpx.Client) -> None:
    r = admin.get("/v1/topics/" + "y" * 201)
    assert r.status_code == 400 and _error(r)["code"] == "invalid_topic_name"
    r = admin.get("/v1/topics/a%20b/partitions/0/bounds")
    assert r.status_code == 400 and _error(r)["code"] == "invalid_topic_name"


@pytest.mark.parametrize("partitions", [0, -1, 1001, "two", None])
def test_partition_count_validation(
    admin: httpx.Client, topic_name: str, partitions: object
) -> None:
    r = admin.post("/v1/topics", json={"name": topic_name, "partitions": partitions})
    assert r.status_code == 400, r.text
    assert _error(r)["code"] in ("invalid_request", "invalid_argument")
    assert admin.get(f"/v1/topics/{topic_name}").status_code == 404


@pytest.mark.parametrize(
    "config",
    [
        {"segment_bytes": 10},
        {"flush_messages": 0},
        {"append_threshold": 0},
        {"no_such_setting": 1},
        {"segment_bytes": None},
        {"retention_ms": "soon"},
    ],
)
def test_bad_topic_config_is_400(
    admin: httpx.Client, topic_name: str, config: dict[str, Any]
) -> None:
    r = admin.post("/v1/topics", json={"name": topic_name, "config": config})
    assert r.status_code == 400, r.text
    assert admin.get(f"/v1/topics/{topic_name}").status_code == 404


def test_malformed_bodies(admin: httpx.Client) -> None:
    r = admin.post("/v1/topics", content=b"{not json", headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and _error(r)["code"] == "invalid_request"
    r = admin.post("/v1/topics", json=[1, 2])
    assert r.status_code == 400 and _error(r)["code"] == "invalid_request"
    r = admin.post("/v1/topics", json={"name": "ok", "extra": 1})
    assert r.status_code == 400


def test_partition_out_of_range_is_404(admin: httpx.Client, topic_name: str) -> None:
    admin.post("/v1/topics", json={"name": topic_name, "partitions": 2})
    r = admin.get(f"/v1/topics/{topic_name}/partitions/2/bounds")
    assert r.status_code == 404 and _error(r)["code"] == "topic_not_found"
    r = admin.get(f"/v1/topics/{topic_name}/partitions/-1/bounds")
    assert r.status_code == 400


def test_unknown_route_and_method(admin: httpx.Client) -> None:
    r = admin.get("/v2/nothing")
    assert r.status_code == 404 and _error(r)["code"] == "not_found"
    r = admin.put("/v1/topics")
    assert r.status_code == 405 and _error(r)["code"] == "method_not_allowed"


def test_openapi_document(server: ServerProcess) -> None:
    doc = httpx.get(server.url + "/openapi.json").json()
    paths = doc["paths"]
    for p in [
        "/v1/topics",
        "/v1/topics/{topic}",
        "/v1/topics/{topic}/partitions/{partition}/records",
        "/v1/topics/{topic}/partitions/{partition}/offsets",
        "/v1/topics/{topic}/partitions/{partition}/bounds",
        "/v1/topics/{topic}/partitions/{partition}/truncate",
        "/healthz",
        "/metrics",
    ]:
        assert p in paths, p
    produce = paths["/v1/topics/{topic}/partitions/{partition}/records"]["post"]
    content = produce["requestBody"]["content"]
    assert set(content) == {
        "application/json",
        "application/octet-stream",
        "application/vnd.tiered-log.frames",
    }
    assert "ProduceRequest" in doc["components"]["schemas"]
    assert "value_b64" in doc["components"]["schemas"]["RecordIn"]["properties"]
    fetch = paths["/v1/topics/{topic}/partitions/{partition}/records"]["get"]
    assert "application/octet-stream" in fetch["responses"]["200"]["content"]
    assert "416" in fetch["responses"]
    # Validation errors are documented in our shape, not FastAPI's 422.
    for item in paths.values():
        for op in item.values():
            assert "422" not in op["responses"]
