"""A read-only mount of another cluster's archive: a real owner service ships to a
directory bucket, a second real service started with ``read_only_remote=true`` on the
same bucket serves every shipped record over HTTP and the Kafka listener (fetch, list
offsets, offsets for times), follows what the owner ships after it started (new records,
a new topic, a deleted topic), refuses every write with a clear error (HTTP 403
``read_only``; Kafka POLICY_VIOLATION) and leaves every object of the bucket as it was:
the listing, with sizes and modification times, is the same before and after it served.

The tests share one owner and one mount (module scope) and run in file order: the last
stops the owner so that the bucket is quiet while it compares the listings.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from confluent_kafka import KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]
from kafka_listener.clients import Rec, confluent_consume, confluent_consumer, confluent_produce
from service.conftest import ServerProcess, service_env

pytestmark = pytest.mark.timeout(240)

SMALL = {"segment_bytes": 2048, "segment_ms": 300, "local_retention_bytes": 0}
"""Small segments, rolled within 300 ms: everything an owner is sent is shipped soon."""
POLL_MS = 200
BASE_TS = 1_700_000_000_000


def _wait(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _json_records(n: int, start: int) -> list[dict[str, Any]]:
    return [
        {"value": f"event-{i:05d}-" + "y" * 60, "key": f"k{i % 5}", "timestamp": BASE_TS + i}
        for i in range(start, start + n)
    ]


def _bounds(c: httpx.Client, topic: str, partition: int = 0) -> dict[str, Any]:
    r = c.get(f"/v1/topics/{topic}/partitions/{partition}/bounds")
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def _shipped_all(c: httpx.Client, topic: str, partitions: int) -> bool:
    for p in range(partitions):
        b = _bounds(c, topic, p)
        if b["remote_end_offset"] != b["next_offset"] or b["next_offset"] == 0:
            return False
    return True


def _read_all(c: httpx.Client, topic: str, partition: int, end: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    offset = 0
    while offset < end:
        r = c.get(
            f"/v1/topics/{topic}/partitions/{partition}/records",
            params={"offset": offset, "max_records": 100},
        )
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["records"], body
        out.extend(body["records"])
        offset = body["next_offset"]
    return out


def _listing(root: Path) -> dict[str, tuple[int, int]]:
    """Every file and directory under ``root`` (hidden ones too: sidecars, temp files),
    with its size and modification time in nanoseconds."""
    out: dict[str, tuple[int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath) / name
            st = p.stat()
            out[str(p.relative_to(root))] = (st.st_size if p.is_file() else -1, st.st_mtime_ns)
    return out


class Pair:
    """The owner, its bucket and the mount."""

    def __init__(self, base: Path) -> None:
        self.bucket = base / "bucket"
        (base / "owner").mkdir()
        (base / "mount").mkdir()
        self.owner = ServerProcess(
            base / "owner" / "data",
            base / "owner",
            {
                "remote_url": str(self.bucket),
                "ship_interval_ms": "50",
                "maintenance_interval_ms": "100",
            },
        )
        self.mount = ServerProcess(
            base / "mount" / "data",
            base / "mount",
            {
                "remote_url": str(self.bucket),
                "read_only_remote": "true",
                "remote_poll_interval_ms": str(POLL_MS),
            },
        )
        self.orders = 0
        """Records produced to each of the two partitions of ``orders``."""
        self.events = 0
        """Records produced to ``events``."""

    def owner_client(self) -> httpx.Client:
        return self.owner.client(None)

    def mount_client(self) -> httpx.Client:
        return self.mount.client(None)


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    pr = Pair(tmp_path_factory.mktemp("mount"))
    pr.owner.start()
    try:
        with pr.owner_client() as c:
            for name, parts in (("orders", 2), ("events", 1)):
                r = c.post("/v1/topics", json={"name": name, "partitions": parts, "config": SMALL})
                assert r.status_code == 201, r.text
            for start in range(0, 300, 100):
                r = c.post(
                    "/v1/topics/events/partitions/0/records",
                    json={"records": _json_records(100, start)},
                )
                assert r.status_code == 200, r.text
            pr.events = 300
        recs: list[Rec] = [
            (i % 2, f"key-{i}".encode(), f"order-{i}-".encode() * 8, [("n", str(i).encode())])
            for i in range(400)
        ]
        errors = confluent_produce(pr.owner.kafka_bootstrap, "orders", recs)
        assert errors == [None] * len(recs)
        pr.orders = 200
        with pr.owner_client() as c:
            _wait(lambda: _shipped_all(c, "orders", 2) and _shipped_all(c, "events", 1), "shipping")
        pr.mount.start()
        yield pr
    finally:
        for srv in (pr.mount, pr.owner):
            with contextlib.suppress(Exception):
                srv.stop(timeout=15)
            srv.kill()


def test_serves_every_shipped_record_over_http(pair: Pair) -> None:
    with pair.owner_client() as o, pair.mount_client() as m:
        r = m.get("/v1/topics")
        assert r.status_code == 200, r.text
        assert {"orders", "events"} <= {t["name"] for t in r.json()["topics"]}, r.text
        for topic, parts in (("orders", 2), ("events", 1)):
            for p in range(parts):
                ob, mb = _bounds(o, topic, p), _bounds(m, topic, p)
                assert mb["next_offset"] == ob["next_offset"] > 0
                assert mb["high_watermark"] == ob["next_offset"]
                assert mb["log_start_offset"] == ob["log_start_offset"]
                assert _read_all(m, topic, p, mb["next_offset"]) == _read_all(
                    o, topic, p, ob["next_offset"]
                )
        r = m.get("/v1/topics/events/partitions/0/offsets", params={"timestamp": BASE_TS + 123})
        assert r.status_code == 200 and r.json()["offset"] == 123, r.text
    # The mount keeps no local copy of the archive: its partitions' local logs are empty.
    logs = [p for p in pair.mount.data_dir.rglob("*.log") if p.stat().st_size]
    assert logs == []


def test_serves_every_shipped_record_over_kafka(pair: Pair) -> None:
    owner_rows = confluent_consume(pair.owner.kafka_bootstrap, "orders", 2, 2 * pair.orders)
    rows = confluent_consume(pair.mount.kafka_bootstrap, "orders", 2, 2 * pair.orders)
    assert len(rows) == 2 * pair.orders
    assert rows == owner_rows
    c = confluent_consumer(pair.mount.kafka_bootstrap)
    try:
        assert c.get_watermark_offsets(TopicPartition("events", 0), timeout=10) == (0, 300)
        got = c.offsets_for_times([TopicPartition("events", 0, BASE_TS + 250)], timeout=10)
        assert got[0].offset == 250
    finally:
        c.close()


def test_refuses_writes_with_a_clear_error(pair: Pair) -> None:
    with pair.mount_client() as m:
        answers = [
            m.post("/v1/topics", json={"name": "new", "partitions": 1}),
            m.patch("/v1/topics/orders", json={"config": {"retention_ms": 1000}}),
            m.delete("/v1/topics/orders"),
            m.post("/v1/topics/orders/partitions/0/records", json={"records": [{"value": "x"}]}),
            m.post("/v1/topics/orders/records", json={"records": [{"value": "x"}]}),
            m.post("/v1/topics/orders/partitions/0/truncate", json={"offset": 0}),
        ]
        for r in answers:
            assert r.status_code == 403, (r.request.method, r.request.url, r.text)
            err = r.json()["error"]
            assert err["code"] == "read_only" and "read-only" in err["message"], err
            assert err["retriable"] is False
        assert "orders" in {t["name"] for t in m.get("/v1/topics").json()["topics"]}
    # Kafka: produce, CreateTopics, DeleteTopics; Metadata does not create a topic.
    errors = confluent_produce(
        pair.mount.kafka_bootstrap, "orders", [(0, None, b"x", [])], **{"retries": 0}
    )
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == KafkaError.POLICY_VIOLATION, errors[0]
    admin = AdminClient({"bootstrap.servers": pair.mount.kafka_bootstrap})
    fut = admin.create_topics([NewTopic("fresh", 1)], request_timeout=10)["fresh"]
    with pytest.raises(KafkaException) as exc:
        fut.result(timeout=15)
    assert exc.value.args[0].code() == KafkaError.POLICY_VIOLATION
    assert "read-only" in exc.value.args[0].str()
    fut = admin.delete_topics(["events"], request_timeout=10)["events"]
    with pytest.raises(KafkaException) as exc:
        fut.result(timeout=15)
    assert exc.value.args[0].code() == KafkaError.POLICY_VIOLATION
    md = admin.list_topics("not-there", timeout=10)
    assert md.topics["not-there"].error is not None
    assert "not-there" not in admin.list_topics(timeout=10).topics
    with pair.mount_client() as m:
        assert m.get("/v1/topics/fresh").status_code == 404


def test_follows_a_live_owner(pair: Pair) -> None:
    with pair.owner_client() as o, pair.mount_client() as m:
        r = o.post(
            "/v1/topics/events/partitions/0/records",
            json={"records": _json_records(150, pair.events)},
        )
        assert r.status_code == 200, r.text
        pair.events += 150
        r = o.post("/v1/topics", json={"name": "later", "partitions": 1, "config": SMALL})
        assert r.status_code == 201, r.text
        r = o.post("/v1/topics/later/partitions/0/records", json={"records": _json_records(40, 0)})
        assert r.status_code == 200, r.text
        _wait(lambda: _shipped_all(o, "events", 1) and _shipped_all(o, "later", 1), "shipping")
        # Within the poll interval after shipping: a bounded wait, never a fixed sleep.
        _wait(lambda: _bounds(m, "events")["next_offset"] == pair.events, "the mount to follow")
        got = _read_all(m, "events", 0, pair.events)
        assert [g["value"] for g in got] == [r["value"] for r in _json_records(pair.events, 0)]

        def later_served() -> bool:
            r = m.get("/v1/topics/later/partitions/0/bounds")
            return r.status_code == 200 and r.json()["next_offset"] == 40

        _wait(later_served, "the new topic on the mount")
        assert len(_read_all(m, "later", 0, 40)) == 40
        # Kafka sees the new records too.
        c = confluent_consumer(pair.mount.kafka_bootstrap)
        try:
            wm = c.get_watermark_offsets(TopicPartition("events", 0), timeout=10)
            assert wm == (0, pair.events)
        finally:
            c.close()
        # A topic its owner deletes is no longer served.
        assert o.delete("/v1/topics/later").status_code == 204
        _wait(lambda: m.get("/v1/topics/later").status_code == 404, "the deleted topic to go")


def test_follows_the_owners_retention(pair: Pair) -> None:
    with pair.owner_client() as o, pair.mount_client() as m:
        config = {**SMALL, "retention_bytes": 4096}
        r = o.post("/v1/topics", json={"name": "aging", "partitions": 1, "config": config})
        assert r.status_code == 201, r.text
        for start in range(0, 200, 50):
            r = o.post(
                "/v1/topics/aging/partitions/0/records", json={"records": _json_records(50, start)}
            )
            assert r.status_code == 200, r.text
        _wait(
            lambda: _shipped_all(o, "aging", 1) and _bounds(o, "aging")["log_start_offset"] > 0,
            "the owner's retention",
        )
        owner = _bounds(o, "aging")

        def followed() -> bool:
            r = m.get("/v1/topics/aging/partitions/0/bounds")
            if r.status_code != 200:
                return False
            b = r.json()
            return bool(
                b["next_offset"] == owner["next_offset"]
                and b["log_start_offset"] == _bounds(o, "aging")["log_start_offset"]
            )

        _wait(followed, "the mount to follow the retention")
        start = _bounds(m, "aging")["log_start_offset"]
        assert start > 0
        r = m.get("/v1/topics/aging/partitions/0/records", params={"offset": 0})
        assert r.status_code == 416, r.text
        r = m.get("/v1/topics/aging/partitions/0/records", params={"offset": start})
        assert r.status_code == 200 and r.json()["records"][0]["offset"] == start, r.text


def test_the_bucket_is_never_written(pair: Pair) -> None:
    pair.owner.stop()  # the owner is quiet from now on: only the mount could change the bucket
    before = _listing(pair.bucket)
    assert any(k.endswith(".rli") for k in before)
    pair.mount.restart()  # its view and chunk cache are rebuilt from the bucket
    with pair.mount_client() as m:
        _wait(lambda: m.get("/v1/topics/orders").status_code == 200, "the mount to open")
        for p in range(2):
            assert len(_read_all(m, "orders", p, pair.orders)) == pair.orders
        assert len(_read_all(m, "events", 0, pair.events)) == pair.events
        r = m.post("/v1/topics/events/partitions/0/records", json={"records": [{"value": "x"}]})
        assert r.status_code == 403
    rows = confluent_consume(pair.mount.kafka_bootstrap, "orders", 2, 2 * pair.orders)
    assert len(rows) == 2 * pair.orders
    time.sleep(3 * POLL_MS / 1000)  # a few polls go by
    pair.mount.stop()
    assert _listing(pair.bucket) == before


def _s3_listing(s3_client: Any, bucket: str, prefix: str) -> dict[str, tuple[int, Any, str]]:
    out: dict[str, tuple[int, Any, str]] = {}
    for page in s3_client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for o in page.get("Contents", []):
            out[o["Key"]] = (o["Size"], o["LastModified"], o["ETag"])
    return out


def test_a_mount_on_s3_serves_and_writes_nothing(
    tmp_path: Path, s3_target: Any, s3_location: Any, s3_client: Any
) -> None:
    loc = s3_location
    url = f"s3://{loc.bucket}/{loc.prefix}" if loc.prefix else f"s3://{loc.bucket}"
    common = {
        "remote_url": url,
        "s3_endpoint_url": s3_target.endpoint,
        "s3_region": s3_target.region,
    }
    for d in ("owner", "mount"):
        (tmp_path / d).mkdir()
    owner = ServerProcess(
        tmp_path / "owner" / "data",
        tmp_path / "owner",
        {**common, "ship_interval_ms": "50", "maintenance_interval_ms": "100"},
    )
    mount = ServerProcess(
        tmp_path / "mount" / "data",
        tmp_path / "mount",
        {**common, "read_only_remote": "true", "remote_poll_interval_ms": str(POLL_MS)},
    )
    try:
        owner.start()
        with owner.client(None) as o:
            r = o.post("/v1/topics", json={"name": "s3t", "partitions": 1, "config": SMALL})
            assert r.status_code == 201, r.text
            r = o.post(
                "/v1/topics/s3t/partitions/0/records", json={"records": _json_records(200, 0)}
            )
            assert r.status_code == 200, r.text
            _wait(lambda: _shipped_all(o, "s3t", 1), "shipping")
        owner.stop()
        before = _s3_listing(s3_client, loc.bucket, loc.prefix)
        assert before
        mount.start()
        with mount.client(None) as m:
            got = _read_all(m, "s3t", 0, 200)
            assert [g["value"] for g in got] == [r["value"] for r in _json_records(200, 0)]
            r = m.post("/v1/topics/s3t/partitions/0/records", json={"records": [{"value": "x"}]})
            assert r.status_code == 403 and r.json()["error"]["code"] == "read_only", r.text
        rows = confluent_consume(mount.kafka_bootstrap, "s3t", 1, 200)
        assert [r[1] for r in rows] == list(range(200))
        time.sleep(3 * POLL_MS / 1000)  # a few polls go by
        mount.stop()
        assert _s3_listing(s3_client, loc.bucket, loc.prefix) == before
    finally:
        for srv in (mount, owner):
            with contextlib.suppress(Exception):
                srv.stop(timeout=15)
            srv.kill()


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        pytest.param({}, "read_only_remote: a read-only mount needs remote_url", id="no-url"),
        pytest.param(
            {"remote_url": "missing-bucket"}, "missing-bucket does not exist", id="no-bucket"
        ),
    ],
)
def test_a_mount_without_a_bucket_does_not_start(
    tmp_path: Path, settings: dict[str, str], expected: str
) -> None:
    env = service_env(read_only_remote="true", port="0", **settings)
    r = subprocess.run(
        [str(Path(sys.executable).parent / "tiered-log"), "serve", "--data-dir", "data"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], r.stderr
    assert not (tmp_path / "missing-bucket").exists()  # nothing created where it points
