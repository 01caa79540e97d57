"""Bearer tokens and per-topic grants: 401 without a valid token, 403 without the grant,
and never any data (nor whether a topic exists) in either answer."""

from __future__ import annotations

import base64

import httpx
import pytest

from .conftest import ADMIN, READER, WRITER, ServerProcess

SECRET = "top-secret-payload"


@pytest.fixture(scope="module")
def ro_topic(server: ServerProcess) -> str:
    """``ro.data`` holds one record; readers and writers have grants on ``ro.*`` only."""
    with server.client(ADMIN) as c:
        assert c.post("/v1/topics", json={"name": "ro.data"}).status_code == 201
        assert c.post("/v1/topics", json={"name": "other"}).status_code == 201
        for t in ("ro.data", "other"):
            r = c.post(
                f"/v1/topics/{t}/partitions/0/records", json={"records": [{"value": SECRET}]}
            )
            assert r.status_code == 200
    return "ro.data"


ENDPOINTS = [
    ("GET", "/v1/topics/{t}", None),
    ("DELETE", "/v1/topics/{t}", None),
    ("POST", "/v1/topics/{t}/partitions/0/records", {"records": [{"value": "x"}]}),
    ("GET", "/v1/topics/{t}/partitions/0/records?offset=0", None),
    ("GET", "/v1/topics/{t}/partitions/0/offsets?timestamp=0", None),
    ("GET", "/v1/topics/{t}/partitions/0/bounds", None),
    ("POST", "/v1/topics/{t}/partitions/0/truncate", {"offset": 0}),
]


def _no_data(r: httpx.Response) -> None:
    assert SECRET not in r.text
    assert base64.b64encode(SECRET.encode()).decode() not in r.text
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) <= {
        "code",
        "message",
        "retriable",
        "details",
    }


@pytest.mark.parametrize("method,path,body", ENDPOINTS)
@pytest.mark.parametrize(
    "auth", [None, "Bearer wrong-token", "Basic YWRtaW46YWRtaW4=", "Bearer", ADMIN]
)
def test_missing_or_invalid_token_is_401(
    server: ServerProcess, ro_topic: str, method: str, path: str, body: object, auth: str | None
) -> None:
    headers = {"Authorization": auth} if auth else {}
    for accept in ("application/json", "application/octet-stream"):
        r = httpx.request(
            method,
            server.url + path.format(t=ro_topic),
            json=body,
            headers={**headers, "Accept": accept},
        )
        assert r.status_code == 401, r.text
        assert r.headers["www-authenticate"] == "Bearer"
        assert r.json()["error"]["code"] == "unauthenticated"
        _no_data(r)


def test_401_for_topic_collection_and_metrics(server: ServerProcess) -> None:
    for method, path in [("GET", "/v1/topics"), ("POST", "/v1/topics"), ("GET", "/metrics")]:
        r = httpx.request(method, server.url + path, json={"name": "zz"})
        assert r.status_code == 401, (path, r.text)
    # Public: health and the API description.
    assert httpx.get(server.url + "/healthz").status_code == 200
    assert httpx.get(server.url + "/openapi.json").status_code == 200


def test_reader_grant(server: ServerProcess, ro_topic: str) -> None:
    with server.client(READER) as c:
        r = c.get(f"/v1/topics/{ro_topic}/partitions/0/records", params={"offset": 0})
        assert r.status_code == 200 and r.json()["records"][0]["value"] == SECRET
        r = c.get(
            f"/v1/topics/{ro_topic}/partitions/0/records",
            params={"offset": 0},
            headers={"Accept": "application/octet-stream"},
        )
        assert r.status_code == 200 and SECRET.encode() in r.content
        assert c.get(f"/v1/topics/{ro_topic}/partitions/0/bounds").status_code == 200
        assert c.get(f"/v1/topics/{ro_topic}/partitions/0/offsets?timestamp=0").status_code == 200
        assert c.get(f"/v1/topics/{ro_topic}").status_code == 200
        # No write, no admin.
        for method, path, body in [ENDPOINTS[1], ENDPOINTS[2], ENDPOINTS[6]]:
            r = c.request(method, path.format(t=ro_topic), json=body)
            assert r.status_code == 403, (method, path, r.text)
            assert r.json()["error"]["code"] == "permission_denied"
            _no_data(r)
        # Listing shows only topics the token has a grant on.
        assert [t["name"] for t in c.get("/v1/topics").json()["topics"]] == [ro_topic]
        r = c.post("/v1/topics", json={"name": "ro.new"})
        assert r.status_code == 403


def test_writer_grant(server: ServerProcess, ro_topic: str) -> None:
    with server.client(WRITER) as c:
        r = c.post(
            f"/v1/topics/{ro_topic}/partitions/0/records", json={"records": [{"value": "w"}]}
        )
        assert r.status_code == 200
        r = c.post(
            f"/v1/topics/{ro_topic}/partitions/0/records",
            content=b"raw",
            headers={"Content-Type": "application/octet-stream"},
        )
        assert r.status_code == 200
        for method, path, body in [ENDPOINTS[0], ENDPOINTS[3], ENDPOINTS[4], ENDPOINTS[5]]:
            for accept in ("application/json", "application/octet-stream"):
                r = c.request(
                    method, path.format(t=ro_topic), json=body, headers={"Accept": accept}
                )
                assert r.status_code == 403, (method, path, r.text)
                assert r.headers["content-type"].startswith("application/json")
                _no_data(r)


@pytest.mark.parametrize("token", [READER, WRITER])
@pytest.mark.parametrize("method,path,body", ENDPOINTS)
def test_no_grant_on_other_topics_is_403_never_404(
    server: ServerProcess, ro_topic: str, token: str, method: str, path: str, body: object
) -> None:
    with server.client(token) as c:
        for topic in ("other", "does-not-exist"):  # same answer: existence is not revealed
            r = c.request(
                method,
                path.format(t=topic),
                json=body,
                headers={"Accept": "application/octet-stream"},
            )
            assert r.status_code == 403, (topic, r.text)
            _no_data(r)
    with server.client(ADMIN) as c:  # the record in "other" is still there
        assert c.get("/v1/topics/other/partitions/0/bounds").json()["next_offset"] >= 1


def test_metrics_with_any_valid_token(server: ServerProcess) -> None:
    with server.client(READER) as c:
        r = c.get("/metrics")
        assert r.status_code == 200 and "tiered_log_append_records_total" in r.text


def test_tokens_never_logged(server: ServerProcess, ro_topic: str) -> None:
    with server.client(READER) as c:
        c.get(f"/v1/topics/{ro_topic}")
    httpx.get(server.url + "/v1/topics", headers={"Authorization": "Bearer guessed-token-xyz"})
    logs = server.all_logs()
    for secret in (ADMIN, READER, WRITER, "guessed-token-xyz"):
        assert secret not in logs
