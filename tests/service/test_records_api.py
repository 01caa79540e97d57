"""Record endpoints against a real server: produce, fetch (JSON and binary), offsets,
bounds, truncate, the streaming append limit and request size bounds."""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tiered_log.format.records import decode_records

from .conftest import ServerProcess

BIN = {"Accept": "application/octet-stream"}


def _create(c: httpx.Client, name: str, partitions: int = 1, **config: Any) -> None:
    r = c.post("/v1/topics", json={"name": name, "partitions": partitions, "config": config})
    assert r.status_code == 201, r.text


def _produce(
    c: httpx.Client, topic: str, records: list[dict[str, Any]], partition: int = 0
) -> list[int]:
    r = c.post(f"/v1/topics/{topic}/partitions/{partition}/records", json={"records": records})
    assert r.status_code == 200, r.text
    offsets: list[int] = r.json()["offsets"]
    return offsets


def _bounds(c: httpx.Client, topic: str, partition: int = 0) -> dict[str, int]:
    r = c.get(f"/v1/topics/{topic}/partitions/{partition}/bounds")
    assert r.status_code == 200, r.text
    b: dict[str, int] = r.json()
    return b


def test_json_round_trip_text_and_binary(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name)
    binary = bytes(range(256))
    r = admin.post(
        f"/v1/topics/{topic_name}/partitions/0/records",
        json={
            "records": [
                {"value": "hello"},
                {"value_b64": base64.b64encode(binary).decode(), "key": "k1", "timestamp": 1234},
                {
                    "value": "ünïcode ✓",
                    "key_b64": base64.b64encode(b"\xff\x00").decode(),
                    "headers": {"h1": "v1", "h2": None},
                },
                {
                    "value": "x",
                    "headers": [
                        {"name": "bin", "value_b64": base64.b64encode(b"\xfe").decode()},
                        {"name": "txt", "value": "t"},
                        {"name": "null"},
                    ],
                },
            ]
        },
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["offsets"] == [0, 1, 2, 3]
    assert body["first_offset"] == 0 and body["last_offset"] == 3
    assert body["durable"] is True  # the default flush policy fsyncs before the ack

    r = admin.get(f"/v1/topics/{topic_name}/partitions/0/records", params={"offset": 0})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    f = r.json()
    assert f["next_offset"] == 4 and f["high_watermark"] == 4 and f["log_start_offset"] == 0
    recs = f["records"]
    assert [x["offset"] for x in recs] == [0, 1, 2, 3]
    assert recs[0]["value"] == "hello" and recs[0]["value_b64"] is None
    assert recs[0]["key"] is None and recs[0]["key_b64"] is None and recs[0]["headers"] == []
    assert recs[1]["value"] is None and base64.b64decode(recs[1]["value_b64"]) == binary
    assert recs[1]["key"] == "k1" and recs[1]["timestamp"] == 1234
    assert recs[2]["value"] == "ünïcode ✓"
    assert recs[2]["key"] is None and base64.b64decode(recs[2]["key_b64"]) == b"\xff\x00"
    assert recs[2]["headers"] == [
        {"name": "h1", "value": "v1", "value_b64": None},
        {"name": "h2", "value": None, "value_b64": None},
    ]
    assert recs[3]["headers"] == [
        {"name": "bin", "value": None, "value_b64": "/g=="},
        {"name": "txt", "value": "t", "value_b64": None},
        {"name": "null", "value": None, "value_b64": None},
    ]
    now_ms = time.time() * 1000
    assert abs(recs[0]["timestamp"] - now_ms) < 600_000


def test_binary_fetch_is_the_stored_bytes(
    admin: httpx.Client, topic_name: str, server: ServerProcess
) -> None:
    _create(admin, topic_name)
    values = [f"value-{i}".encode() * (i + 1) for i in range(50)]
    _produce(
        admin,
        topic_name,
        [
            {"value_b64": base64.b64encode(v).decode(), "key": str(i), "headers": {"i": str(i)}}
            for i, v in enumerate(values)
        ],
    )
    r = admin.get(
        f"/v1/topics/{topic_name}/partitions/0/records", params={"offset": 0}, headers=BIN
    )
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/octet-stream"
    assert r.headers["x-next-offset"] == "50"
    assert r.headers["x-high-watermark"] == "50"
    assert r.headers["x-log-start-offset"] == "0"
    assert r.headers["x-record-count"] == "50"
    # Disk format == wire format: the body is the segment's store file, byte for byte.
    store = server.data_dir / "topics" / topic_name / "0" / f"{0:020d}.log"
    assert r.content == store.read_bytes()
    recs, pos, _ = decode_records(r.content)  # verifies every checksum
    assert pos == len(r.content)
    assert [x.value for x in recs] == values
    assert [x.key for x in recs] == [str(i).encode() for i in range(50)]
    assert recs[7].headers == (("i", b"7"),)

    # Accept negotiation: JSON wins when preferred, binary when asked first.
    r = admin.get(
        f"/v1/topics/{topic_name}/partitions/0/records",
        params={"offset": 0},
        headers={"Accept": "application/json, application/octet-stream;q=0.5"},
    )
    assert r.headers["content-type"].startswith("application/json")
    r = admin.get(
        f"/v1/topics/{topic_name}/partitions/0/records",
        params={"offset": 0},
        headers={"Accept": "application/octet-stream, application/json"},
    )
    assert r.headers["content-type"] == "application/octet-stream"


def test_fetch_limits_both_forms(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name)
    for i in range(20):  # one batch each, 100-byte values
        _produce(admin, topic_name, [{"value": f"{i:04d}" * 25}])
    base = f"/v1/topics/{topic_name}/partitions/0/records"
    r = admin.get(base, params={"offset": 3, "max_records": 4})
    assert [x["offset"] for x in r.json()["records"]] == [3, 4, 5, 6]
    assert r.json()["next_offset"] == 7
    r = admin.get(base, params={"offset": 3, "max_records": 4}, headers=BIN)
    recs, _, _ = decode_records(r.content)
    assert [x.offset for x in recs] == [3, 4, 5, 6] and r.headers["x-next-offset"] == "7"
    # max_bytes: each one-record Kafka batch is 170 bytes (the 61-byte header and the
    # record's 109); 350 bytes hold two of them. (The JSON form counts record sizes.)
    r = admin.get(base, params={"offset": 0, "max_bytes": 350}, headers=BIN)
    assert r.headers["x-record-count"] == "2" and len(r.content) == 340
    r = admin.get(base, params={"offset": 0, "max_bytes": 300})
    assert len(r.json()["records"]) == 2
    # A first record larger than max_bytes still comes back, alone.
    r = admin.get(base, params={"offset": 5, "max_bytes": 1}, headers=BIN)
    assert r.headers["x-record-count"] == "1" and decode_records(r.content)[0][0].offset == 5
    r = admin.get(base, params={"offset": 5, "max_bytes": 1})
    assert [x["offset"] for x in r.json()["records"]] == [5]
    # At the end of the log: empty, not an error.
    for headers in ({}, BIN):
        r = admin.get(base, params={"offset": 20}, headers=headers)
        assert r.status_code == 200
    assert (
        r.content == b""
        and r.headers["x-record-count"] == "0"
        and r.headers["x-next-offset"] == "20"
    )
    assert admin.get(base, params={"offset": 20}).json()["records"] == []


def test_binary_fetch_across_segments(
    admin: httpx.Client, topic_name: str, server: ServerProcess
) -> None:
    _create(admin, topic_name, segment_bytes=1024)
    for i in range(10):
        _produce(admin, topic_name, [{"value": f"r{i}-{j}-" + "z" * 80} for j in range(5)])
    tdir = server.data_dir / "topics" / topic_name / "0"
    stores = sorted(tdir.glob("*.log"))
    assert len(stores) > 3  # the log rolled several times
    base = f"/v1/topics/{topic_name}/partitions/0/records"
    r = admin.get(
        base, params={"offset": 0, "max_records": 10_000, "max_bytes": 1 << 20}, headers=BIN
    )
    assert r.content == b"".join(p.read_bytes() for p in stores)
    recs, _, _ = decode_records(r.content)
    assert [x.offset for x in recs] == list(range(50))
    # Starting mid-batch and mid-segment, crossing a boundary, limited by count: whole
    # batches (of five records here) from the one holding offset 7 until 20 records from
    # 7 are in, as in Kafka; the body's records below 7 are skipped by the reader.
    r = admin.get(base, params={"offset": 7, "max_records": 20}, headers=BIN)
    assert r.headers["x-record-count"] == "23" and r.headers["x-next-offset"] == "30"
    recs, _, _ = decode_records(r.content, start_offset=7)
    assert [x.offset for x in recs] == list(range(7, 30))
    assert decode_records(r.content)[0][0].offset == 5
    j = admin.get(base, params={"offset": 7, "max_records": 20}).json()
    assert [x["offset"] for x in j["records"]] == list(range(7, 27))
    assert [x["value"].encode() for x in j["records"]] == [x.value for x in recs[:20]]


def test_offset_out_of_range_is_416_with_bounds(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name)
    _produce(admin, topic_name, [{"value": "a"}, {"value": "b"}])
    for headers in ({}, BIN):
        r = admin.get(
            f"/v1/topics/{topic_name}/partitions/0/records", params={"offset": 3}, headers=headers
        )
        assert r.status_code == 416
        err = r.json()["error"]
        assert err["code"] == "offset_out_of_range"
        assert err["details"] == {"log_start_offset": 0, "next_offset": 2}
    r = admin.get(f"/v1/topics/{topic_name}/partitions/0/records", params={"offset": -1})
    assert r.status_code == 400
    r = admin.get(f"/v1/topics/{topic_name}/partitions/0/records")
    assert r.status_code == 400 and "offset" in r.json()["error"]["message"]


def test_offsets_for_timestamp(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name)
    _produce(admin, topic_name, [{"value": str(i), "timestamp": 1000 * (i + 1)} for i in range(5)])
    url = f"/v1/topics/{topic_name}/partitions/0/offsets"
    assert admin.get(url, params={"timestamp": 0}).json()["offset"] == 0
    assert admin.get(url, params={"timestamp": 2500}).json()["offset"] == 2
    assert admin.get(url, params={"timestamp": 3000}).json()["offset"] == 2
    d = admin.get(url, params={"timestamp": 99_999}).json()
    assert d == {"timestamp": 99_999, "offset": None, "next_offset": 5}
    assert admin.get(url).status_code == 400
    assert admin.get(url, params={"timestamp": "soon"}).status_code == 400


def test_bounds_and_truncate(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name)
    _produce(admin, topic_name, [{"value": str(i)} for i in range(10)])
    b = _bounds(admin, topic_name)
    assert b == {
        "log_start_offset": 0,
        "local_start_offset": 0,
        "high_watermark": 10,
        "next_offset": 10,
        "flushed_offset": 10,
        "remote_end_offset": 0,
        "copy_lag_bytes": 0,
        "copy_lag_segments": 0,
        "lost_offsets": [],
    }
    url = f"/v1/topics/{topic_name}/partitions/0/truncate"
    r = admin.post(url, json={"offset": 6})
    assert r.status_code == 200 and r.json()["next_offset"] == 6
    assert _bounds(admin, topic_name)["next_offset"] == 6
    r = admin.post(url, json={"offset": 7})
    assert r.status_code == 416 and r.json()["error"]["details"]["next_offset"] == 6
    assert admin.post(url, json={"offset": -1}).status_code == 400
    assert admin.post(url, json={}).status_code == 400
    # Appends continue at the truncation point with new values.
    assert _produce(admin, topic_name, [{"value": "new"}]) == [6]
    recs = admin.get(f"/v1/topics/{topic_name}/partitions/0/records", params={"offset": 4}).json()
    assert [x["value"] for x in recs["records"]] == ["4", "5", "new"]


def test_raw_append_streaming(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name, append_threshold=64 * 1024)
    url = f"/v1/topics/{topic_name}/partitions/0/records"
    value = bytes(range(256)) * 200  # 51200 bytes, under the threshold
    r = admin.post(
        url,
        content=value,
        headers={"Content-Type": "application/octet-stream"},
        params={"key": "kk", "timestamp": 777},
    )
    assert r.status_code == 200, r.text
    assert r.json()["offsets"] == [0]

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked transfer
        for i in range(16):
            yield bytes([i]) * 4096

    r = admin.post(url, content=chunks(), headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 200, r.text
    assert r.json()["offsets"] == [1]
    f = admin.get(url, params={"offset": 0}, headers=BIN)
    recs, _, _ = decode_records(f.content)
    assert recs[0].value == value and recs[0].key == b"kk" and recs[0].timestamp == 777
    assert recs[1].value == b"".join(bytes([i]) * 4096 for i in range(16))


@pytest.mark.parametrize("chunked", [False, True])
def test_raw_append_over_threshold_is_413_and_stores_nothing(
    admin: httpx.Client, topic_name: str, chunked: bool
) -> None:
    _create(admin, topic_name, append_threshold=32 * 1024)
    url = f"/v1/topics/{topic_name}/partitions/0/records"
    _produce(admin, topic_name, [{"value": "before"}])
    before = _bounds(admin, topic_name)

    def chunks() -> Iterator[bytes]:
        for _ in range(40):
            yield b"x" * 1024  # 40 KiB > 32 KiB

    body: Any = chunks() if chunked else b"x" * (40 * 1024)
    r = admin.post(url, content=body, headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 413, r.text
    assert r.json()["error"]["code"] == "record_too_large"
    after = _bounds(admin, topic_name)
    assert after["next_offset"] == before["next_offset"] == 1
    # Exactly at the threshold is accepted; the connection stays usable.
    r = admin.post(
        url, content=b"y" * (32 * 1024), headers={"Content-Type": "application/octet-stream"}
    )
    assert r.status_code == 200 and r.json()["offsets"] == [1]


def test_request_size_bound(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name)  # the module's server has max_request_bytes = 1 MiB
    url = f"/v1/topics/{topic_name}/partitions/0/records"
    big = {"records": [{"value": "v" * (600 * 1024)}, {"value": "w" * (600 * 1024)}]}
    r = admin.post(url, json=big)
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"

    def chunks() -> Iterator[bytes]:
        yield b'{"records": [{"value": "'
        for _ in range(2048):
            yield b"z" * 1024
        yield b'"}]}'

    r = admin.post(url, content=chunks(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["code"] == "request_too_large"
    r = admin.post(
        "/v1/topics",
        content=b'{"name": "' + b"q" * (2 << 20) + b'"}',
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 413
    assert _bounds(admin, topic_name)["next_offset"] == 0


@pytest.mark.parametrize(
    "body",
    [
        {"records": []},
        {"records": [{}]},
        {"records": [{"value": "a", "value_b64": "YQ=="}]},
        {"records": [{"value_b64": "not base64!"}]},
        {"records": [{"key": "k"}]},
        {"records": [{"value": None, "value_b64": None}]},
        {"records": [{"value": "a", "key": "k", "key_b64": "aw=="}]},
        {"records": [{"value": "a", "timestamp": -5}]},
        {
            "records": [
                {"value": "a", "headers": [{"name": "h", "value": "x", "value_b64": "eA=="}]}
            ]
        },
        {"records": [{"value": "a", "bogus": 1}]},
        {"records": "nope"},
        {"recs": [{"value": "a"}]},
    ],
)
def test_bad_produce_bodies_are_400(admin: httpx.Client, topic_name: str, body: Any) -> None:
    _create(admin, topic_name)
    r = admin.post(f"/v1/topics/{topic_name}/partitions/0/records", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] in ("invalid_request", "invalid_argument")
    assert _bounds(admin, topic_name)["next_offset"] == 0


def test_batch_is_all_or_nothing(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name, append_threshold=10)
    r = admin.post(
        f"/v1/topics/{topic_name}/partitions/0/records",
        json={"records": [{"value": "ok"}, {"value": "far too long for it"}]},
    )
    assert r.status_code == 413 and r.json()["error"]["code"] == "record_too_large"
    assert _bounds(admin, topic_name)["next_offset"] == 0


def test_unsupported_content_type_is_415(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name)
    r = admin.post(
        f"/v1/topics/{topic_name}/partitions/0/records",
        content=b"a=b",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media_type"


def test_long_poll_wakes_on_append(
    admin: httpx.Client, topic_name: str, server: ServerProcess
) -> None:
    _create(admin, topic_name)
    url = f"/v1/topics/{topic_name}/partitions/0/records"
    result: dict[str, Any] = {}

    def poll() -> None:
        with server.client() as c:
            result["r"] = c.get(url, params={"offset": 0, "wait_ms": 20_000})

    t = threading.Thread(target=poll)
    t.start()
    time.sleep(0.3)
    assert t.is_alive()  # waiting: nothing to return yet
    _produce(admin, topic_name, [{"value": "wake"}])
    t.join(15)
    assert not t.is_alive()
    assert [x["value"] for x in result["r"].json()["records"]] == ["wake"]
    # Without records the wait ends empty.
    r = admin.get(url, params={"offset": 1, "wait_ms": 50})
    assert r.status_code == 200 and r.json()["records"] == []


def test_partitions_are_independent(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name, partitions=3)
    assert _produce(admin, topic_name, [{"value": "p1"}], partition=1) == [0]
    assert _produce(admin, topic_name, [{"value": "p2a"}, {"value": "p2b"}], partition=2) == [0, 1]
    assert _bounds(admin, topic_name, 0)["next_offset"] == 0
    assert _bounds(admin, topic_name, 1)["next_offset"] == 1
    assert _bounds(admin, topic_name, 2)["next_offset"] == 2
