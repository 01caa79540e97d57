"""``POST /v1/topics/{topic}/records`` against a real server: the service partitions the
records as Kafka's default partitioner does (keys by murmur2, keyless records sticky per
request), honours a record's own partition, validates every record before appending any,
and answers each record's partition and offset."""

from __future__ import annotations

import base64

import httpx

from tiered_log.partitioner import partition_for_key

from .conftest import READER, ServerProcess


def _create(c: httpx.Client, name: str, partitions: int) -> None:
    r = c.post("/v1/topics", json={"name": name, "partitions": partitions})
    assert r.status_code == 201, r.text


def _read(c: httpx.Client, topic: str, partition: int) -> list[dict[str, object]]:
    r = c.get(f"/v1/topics/{topic}/partitions/{partition}/records", params={"offset": 0})
    assert r.status_code == 200, r.text
    recs: list[dict[str, object]] = r.json()["records"]
    return recs


def test_keyed_records_land_where_a_kafka_client_puts_them(
    admin: httpx.Client, topic_name: str
) -> None:
    _create(admin, topic_name, 3)
    keys = [f"user-{i}" for i in range(12)]
    r = admin.post(
        f"/v1/topics/{topic_name}/records",
        json={"records": [{"key": k, "value": f"v{i}"} for i, k in enumerate(keys)]},
    )
    assert r.status_code == 200, r.text
    places = r.json()["offsets"]
    assert [p["partition"] for p in places] == [partition_for_key(k, 3) for k in keys]
    assert len({p["partition"] for p in places}) > 1
    for p in range(3):
        mine = [(i, pl["offset"]) for i, pl in enumerate(places) if pl["partition"] == p]
        got = _read(admin, topic_name, p)
        assert [(g["offset"], g["key"], g["value"]) for g in got] == [
            (off, keys[i], f"v{i}") for i, off in mine
        ]


def test_keyless_records_of_one_request_stay_together_and_the_next_moves_on(
    admin: httpx.Client, topic_name: str
) -> None:
    _create(admin, topic_name, 3)
    seen = []
    for n in range(2):
        r = admin.post(
            f"/v1/topics/{topic_name}/records",
            json={"records": [{"value": f"r{n}-{i}"} for i in range(5)]},
        )
        assert r.status_code == 200, r.text
        parts = {p["partition"] for p in r.json()["offsets"]}
        assert len(parts) == 1
        seen.append(parts.pop())
    assert seen[1] == (seen[0] + 1) % 3


def test_a_record_names_its_partition(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name, 2)
    r = admin.post(
        f"/v1/topics/{topic_name}/records",
        json={"records": [{"value": "a", "partition": 1}, {"value": None, "partition": 1}]},
    )
    assert r.status_code == 200, r.text
    assert r.json()["offsets"] == [{"partition": 1, "offset": 0}, {"partition": 1, "offset": 1}]
    assert r.json()["durable"] is True
    assert [g["value"] for g in _read(admin, topic_name, 1)] == ["a", None]


def test_bad_records_are_refused_before_anything_is_appended(
    admin: httpx.Client, topic_name: str
) -> None:
    _create(admin, topic_name, 2)
    url = f"/v1/topics/{topic_name}/records"
    good = {"key": "k", "value": "ok"}
    cases = [
        ({"records": [good, {"value": "x", "partition": 2}]}, "records.1.partition"),
        ({"records": [good, {"value_b64": "%%%"}]}, "records.1"),
        ({"records": [good, {"value": "x", "partition": -1}]}, "partition"),
        ({"records": []}, "records"),
        ({"records": [{"value": "x", "colour": "red"}]}, "colour"),
    ]
    for body, named in cases:
        r = admin.post(url, json=body)
        assert r.status_code == 400, (body, r.text)
        assert named in r.json()["error"]["message"], r.text
    for p in range(2):
        assert _read(admin, topic_name, p) == []
    r = admin.post(url, content=b'{"records":[]}', headers={"Content-Type": "text/plain"})
    assert r.status_code == 415 and r.json()["error"]["code"]
    r = admin.post("/v1/topics/no-such-topic/records", json={"records": [good]})
    assert r.status_code == 404 and r.json()["error"]["code"] == "topic_not_found"


def test_a_reader_may_not_produce(
    server: ServerProcess, admin: httpx.Client, topic_name: str
) -> None:
    _create(admin, topic_name, 1)
    with server.client(READER) as c:
        r = c.post(f"/v1/topics/{topic_name}/records", json={"records": [{"value": "x"}]})
    assert r.status_code == 403, r.text
    assert _read(admin, topic_name, 0) == []


def test_binary_values_and_headers_pass_through(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name, 1)
    raw = bytes(range(256))
    r = admin.post(
        f"/v1/topics/{topic_name}/records",
        json={
            "records": [
                {
                    "key_b64": base64.b64encode(b"\xff").decode(),
                    "value_b64": base64.b64encode(raw).decode(),
                    "headers": {"h": "1"},
                }
            ]
        },
    )
    assert r.status_code == 200, r.text
    (got,) = _read(admin, topic_name, 0)
    assert base64.b64decode(str(got["value_b64"])) == raw
    assert got["headers"] == [{"name": "h", "value": "1", "value_b64": None}]
