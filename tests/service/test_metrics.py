"""``GET /metrics``: Prometheus text with per-topic append/fetch counters and tier gauges."""

from __future__ import annotations

import re

import httpx

from .conftest import ServerProcess


def _samples(text: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_metrics_count_appends_and_fetches(admin: httpx.Client, topic_name: str) -> None:
    assert admin.post("/v1/topics", json={"name": topic_name, "partitions": 2}).status_code == 201
    admin.post(f"/v1/topics/{topic_name}/partitions/0/records",
               json={"records": [{"value": "abc"}, {"value": "defg", "key": "k"}]})
    admin.post(f"/v1/topics/{topic_name}/partitions/1/records", content=b"12345",
               headers={"Content-Type": "application/octet-stream"})
    admin.get(f"/v1/topics/{topic_name}/partitions/0/records", params={"offset": 0})
    r = admin.get(f"/v1/topics/{topic_name}/partitions/0/records", params={"offset": 0},
                  headers={"Accept": "application/octet-stream"})
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
    # The binary fetch sent the stored batch (one, 28 bytes of header); the JSON one counts
    # the records' sizes (their share of the batch).
    assert s[f"tiered_log_fetch_bytes_total{{{t}}}"] == frame_bytes + (frame_bytes - 28)
    for gauge in ("copy_lag_bytes", "copy_lag_segments", "remote_fetch_bytes_total",
                  "remote_fetch_errors_total", "remote_cache_hits_total", "remote_cache_misses_total"):
        assert f"tiered_log_{gauge}{{{t}}}" in s, gauge
    assert s[f"tiered_log_local_bytes{{{t}}}"] == frame_bytes + 48 + 5
    assert s[f'tiered_log_partition_next_offset{{{t},partition="0"}}'] == 2
    assert s[f'tiered_log_partition_next_offset{{{t},partition="1"}}'] == 1
    assert re.search(r'^tiered_log_http_requests_total\{method="POST",status="200"\} \d+$', text, re.M)
    # Every family is declared once, with HELP and TYPE.
    types = re.findall(r"^# TYPE (\S+) (counter|gauge)$", text, re.M)
    assert len(types) == len({name for name, _ in types})

    # A deleted topic's series go away.
    admin.delete(f"/v1/topics/{topic_name}")
    assert topic_name not in admin.get("/metrics").text


def test_healthz(server: ServerProcess) -> None:
    r = httpx.get(server.url + "/healthz")
    assert r.status_code == 200 and r.json()["status"] == "ok"
