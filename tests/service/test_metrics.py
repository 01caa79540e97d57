"""``GET /metrics``: Prometheus text with per-topic append/fetch counters and tier gauges."""

from __future__ import annotations

import re

import httpx
import pytest

from .conftest import ADMIN, READER, WRITER, ServerProcess


def _samples(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_metrics_count_appends_and_fetches(admin: httpx.Client, topic_name: str) -> None:
    assert admin.post("/v1/topics", json={"name": topic_name, "partitions": 2}).status_code == 201
    admin.post(
        f"/v1/topics/{topic_name}/partitions/0/records",
        json={"records": [{"value": "abc"}, {"value": "defg", "key": "k"}]},
    )
    admin.post(
        f"/v1/topics/{topic_name}/partitions/1/records",
        content=b"12345",
        headers={"Content-Type": "application/octet-stream"},
    )
    admin.get(f"/v1/topics/{topic_name}/partitions/0/records", params={"offset": 0})
    r = admin.get(
        f"/v1/topics/{topic_name}/partitions/0/records",
        params={"offset": 0},
        headers={"Accept": "application/octet-stream"},
    )
    frame_bytes = len(r.content)

    resp = admin.get("/metrics")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain; version=0.0.4")
    text = resp.text
    s = _samples(text)
    t = f'topic="{topic_name}"'
    assert s[f"tiered_log_append_requests_total{{{t}}}"] == 2
    assert s[f"tiered_log_append_records_total{{{t}}}"] == 3
    assert s[f"tiered_log_append_bytes_total{{{t}}}"] == 3 + 4 + 1 + 5
    assert s[f'tiered_log_fetch_requests_total{{{t},format="json"}}'] == 1
    assert s[f'tiered_log_fetch_requests_total{{{t},format="binary"}}'] == 1
    assert s[f"tiered_log_fetch_records_total{{{t}}}"] == 4
    # The binary fetch sent the stored batch (one Kafka batch, 61 bytes of header); the
    # JSON one counts the records' sizes (their share of the batch).
    assert s[f"tiered_log_fetch_bytes_total{{{t}}}"] == frame_bytes + (frame_bytes - 61)
    for gauge in (
        "copy_lag_bytes",
        "copy_lag_segments",
        "remote_fetch_bytes_total",
        "remote_fetch_errors_total",
        "remote_cache_hits_total",
        "remote_cache_misses_total",
    ):
        assert f"tiered_log_{gauge}{{{t}}}" in s, gauge
    # partition 1: one Kafka batch (61 bytes) of one 12-byte record (a 5-byte value)
    assert s[f"tiered_log_local_bytes{{{t}}}"] == frame_bytes + 61 + 12
    assert s[f'tiered_log_partition_next_offset{{{t},partition="0"}}'] == 2
    assert s[f'tiered_log_partition_next_offset{{{t},partition="1"}}'] == 1
    assert re.search(
        r'^tiered_log_http_requests_total\{method="POST",status="200"\} \d+$', text, re.M
    )
    # Every family is declared once, with HELP and TYPE.
    types = re.findall(r"^# TYPE (\S+) (counter|gauge)$", text, re.M)
    assert len(types) == len({name for name, _ in types})

    # A deleted topic's series go away.
    admin.delete(f"/v1/topics/{topic_name}")
    assert topic_name not in admin.get("/metrics").text


@pytest.mark.timeout(60)
def test_healthz_is_liveness_only(server: ServerProcess) -> None:
    """``/healthz`` answers anyone, and tells nothing about the data (no topic count)."""
    with server.client(ADMIN) as c:
        assert c.post("/v1/topics", json={"name": "health-probe"}).status_code in (201, 409)
    r = httpx.get(server.url + "/healthz", timeout=10)
    assert r.status_code == 200 and r.json() == {"status": "ok"}


@pytest.mark.timeout(60)
def test_metrics_show_a_token_only_its_topics(server: ServerProcess, topic_name: str) -> None:
    """The per-topic series of ``/metrics`` are filtered to the topics the token has a
    grant on (as ``/v1/topics`` lists them); the service-wide series stay."""
    mine, other = f"ro.{topic_name}", f"hidden-{topic_name}"
    with server.client(ADMIN) as c:
        for t in (mine, other):
            assert c.post("/v1/topics", json={"name": t}).status_code == 201
            r = c.post(f"/v1/topics/{t}/partitions/0/records", json={"records": [{"value": "x"}]})
            assert r.status_code == 200
        full = c.get("/metrics").text
    assert f'topic="{mine}"' in full and f'topic="{other}"' in full
    for token in (READER, WRITER):
        with server.client(token) as c:
            assert [
                t["name"]
                for t in c.get("/v1/topics").json()["topics"]
                if t["name"] in (mine, other)
            ] == [mine]
            r = c.get("/metrics")
            assert r.status_code == 200
            text = r.text
        topics = set(re.findall(r'topic="([^"]*)"', text))
        assert other not in text
        assert mine in topics and all(t.startswith("ro.") for t in topics), topics
        s = _samples(text)
        assert s[f'tiered_log_append_records_total{{topic="{mine}"}}'] == 1
        assert s[f'tiered_log_partition_next_offset{{topic="{mine}",partition="0"}}'] == 1
        assert re.search(
            r'^tiered_log_http_requests_total\{method="GET",status="200"\} \d+$', text, re.M
        )


def test_forgetting_a_topic_drops_only_topic_series() -> None:
    """Deleting a topic named like an HTTP method drops its series, not the request
    counters of that method (they are labelled by method, not topic)."""
    from tiered_log.service.metrics import Registry

    r = Registry()
    http = r.counter("http_requests_total", "h", ["method", "status"])
    appends = r.counter("append_total", "a", ["topic"])
    http.inc("GET", "200")
    appends.inc("GET")
    appends.inc("other")
    r.remove_label_value("topic", "GET")
    assert http.get("GET", "200") == 1
    assert (appends.get("GET"), appends.get("other")) == (0, 1)
