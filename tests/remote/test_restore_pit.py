"""Point-in-time restore (``tiered-log archive restore``): a new topic holding exactly a
prefix of a topic's records (offsets, timestamps, keys, headers, null values kept; a
batch cut inside), made from the bucket alone or through a running service (its
unshipped tail too), then served, readable and writable after its end; plain and
compressed + encrypted archives; the source's objects never changed; bad input named.
On the directory store and on S3 through moto's server."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tiered_log import LogConfig, ProducerRecord, TieredLog
from tiered_log.broker.point_in_time import RestoreReport, restore_point_in_time
from tiered_log.broker.topics import TopicMeta
from tiered_log.cli import main
from tiered_log.config import TopicConfig
from tiered_log.format import naming
from tiered_log.format.batch_decode import batch_table, decode_records
from tiered_log.format.batch_encode import encode_batch
from tiered_log.format.kafka.layout import COMPRESSION_MASK, HEADER, Compression
from tiered_log.remote.crypto import KeyRing
from tiered_log.remote.fs import LocalDirStorage
from tiered_log.remote.storage import RemoteStorage
from tiered_log.remote.tier import TierConfig

from .test_archive_codec import K1, write_ring

SMALL = LogConfig(segment_bytes=16 * 1024, index_interval_bytes=512)
TOPIC_ID = "0123456789ab" + "0" * 20
LOG_ID = f"orders-{TOPIC_ID[:12]}-0"
N = 1200


def record(o: int) -> ProducerRecord:
    """Record ``o`` of the archive: a key on most, two headers (one null), a null value
    on every 13th."""
    return ProducerRecord(
        None if o % 13 == 0 else json.dumps({"order": o, "pad": "x" * 40}).encode(),
        None if o % 5 == 0 else f"k{o % 7}".encode(),
        (("h", f"v{o}".encode()), ("null", None)),
        1000 + o,
    )


def archive(path: Path, storage: RemoteStorage, ring: KeyRing | None, compression: str) -> None:
    """Topic ``orders`` (1 partition) in the bucket: ``N`` records in batches of 50,
    every segment shipped; its metadata as a service publishes it."""
    tlog = TieredLog(
        path,
        log_id=LOG_ID,
        storage=storage,
        config=SMALL,
        tier=TierConfig(
            chunk_bytes=4096, local_retention_bytes=0, key_ring=ring, compression=compression
        ),
        start_shipper=False,
    )
    try:
        for s in range(0, N, 50):
            tlog.append_batch([record(o) for o in range(s, s + 50)])
        tlog.flush()
        tlog.roll()
        tlog.tier_once()
        assert tlog.bounds().remote_end_offset == N
    finally:
        tlog.close()
    meta = TopicMeta("orders", 1, config=TopicConfig(), topic_id=TOPIC_ID, created_ms=1)
    storage.put(naming.topic_object_key("orders"), meta.to_json())


def objects(storage: RemoteStorage) -> dict[str, bytes]:
    return {o.key: storage.get(o.key) for o in storage.list("")}


def open_restored(
    path: Path, storage: RemoteStorage, name: str, ring: KeyRing | None = None, partition: int = 0
) -> TieredLog:
    """A restored topic's partition as a log rebuilt from the bucket alone."""
    meta = TopicMeta.from_json(storage.get(naming.topic_object_key(name)))
    return TieredLog(
        path / f"restored-{uuid.uuid4().hex[:6]}",
        log_id=f"{name}-{meta.topic_id[:12]}-{partition}",
        storage=storage,
        config=SMALL,
        tier=TierConfig(chunk_bytes=4096, key_ring=ring),
        start_shipper=False,
    )


def read_all(tlog: TieredLog, end: int) -> list[Any]:
    out: list[Any] = []
    o = tlog.log_start_offset
    while o < end:
        recs = tlog.read_range(o, 500, 1 << 20)
        assert recs and recs[0].offset == o
        out.extend(recs)
        o = recs[-1].offset + 1
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "compression,encrypted",
    [pytest.param("none", False, id="plain"), pytest.param("zstd", True, id="zstd-encrypted")],
)
def test_a_restore_to_a_time_inside_a_batch_holds_exactly_the_prefix(
    tmp_path: Path, storage: RemoteStorage, compression: str, encrypted: bool
) -> None:
    ring = None
    if encrypted:
        write_ring(tmp_path / "ring.json", "k1", {"k1": K1})
        ring = KeyRing(tmp_path / "ring.json")
    archive(tmp_path / "src", storage, ring, compression)
    before = objects(storage)
    seen: list[tuple[int, int]] = []

    def progress(rep: RestoreReport) -> None:
        seen.append((rep.segments_done, rep.segments_total))

    # 1525 is record 525's time, inside the batch [500, 550): the batch is cut after it
    report, meta = restore_point_in_time(
        storage, "orders", "orders-then", to_timestamp=1525, ring=ring, progress=progress
    )
    [part] = report.partitions
    assert (part.log_start_offset, part.end_offset, part.bucket_end) == (0, 526, N)
    assert part.segments_rewritten == 1 and part.segments_copied >= 2
    assert seen[-1][0] == seen[-1][1] == part.segments_copied + part.segments_rewritten
    assert report.to_json()["records"] == 526
    after = objects(storage)
    assert {k: v for k, v in after.items() if k in before} == before  # the source untouched
    new_keys = set(after) - set(before)
    assert naming.topic_object_key("orders-then") in new_keys
    prefix = naming.log_prefix(f"orders-then-{meta.topic_id[:12]}-0")
    assert all(k.startswith(prefix) for k in new_keys - {naming.topic_object_key("orders-then")})
    if encrypted:  # nothing the restore wrote holds a record in clear
        assert not any(b'"order": 5' in after[k] for k in new_keys if k.endswith(".log"))

    want = [(o, 1000 + o, r.key, r.value, r.headers) for o in range(526) for r in [record(o)]]
    tlog = open_restored(tmp_path, storage, "orders-then", ring)
    try:
        b = tlog.bounds()
        assert (b.log_start_offset, b.remote_end_offset, tlog.next_offset) == (0, 526, 526)
        got = read_all(tlog, 526)
        assert [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in got] == want
        assert tlog.offset_for_timestamp(1526) is None  # nothing after the restore point
        assert tlog.append(b"after the restore") == 526  # writable after its end
        assert tlog.read(526).value == b"after the restore"
    finally:
        tlog.close()


@pytest.mark.timeout(120)
def test_to_offset_and_the_smaller_of_both_bounds_from_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    storage = LocalDirStorage(tmp_path / "bucket")
    archive(tmp_path / "src", storage, None, "zstd")
    base = ["archive", "restore", "--remote", str(tmp_path / "bucket"), "--topic", "orders"]
    cases = [
        (["--to-offset", "333"], 333),
        (["--to-offset", "400", "--to-timestamp", "1600"], 400),
        (["--to-offset", "900", "--to-timestamp", "1970-01-01T00:00:01.300"], 301),
        (["--to-offset", str(N + 50)], N),  # past the end: everything
    ]
    for i, (flags, end) in enumerate(cases):
        assert main([*base, "--as", f"copy{i}", *flags, "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert [p["end_offset"] for p in doc["partitions"]] == [end]
        tlog = open_restored(tmp_path, storage, f"copy{i}")
        try:
            got = read_all(tlog, end)
            assert [r.offset for r in got] == list(range(end))
            assert [r.value for r in got] == [record(o).value for o in range(end)]
            assert tlog.next_offset == end
        finally:
            tlog.close()
    assert main([*base, "--as", "copy9", "--to-offset", "100"]) == 0
    out = capsys.readouterr()
    assert "copy9-0: offsets [0, 100)" in out.out
    assert "restored orders as copy9: 100 records" in out.out
    assert "segments" in out.err  # progress


@pytest.mark.timeout(120)
def test_bad_restores_are_refused_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_ring(tmp_path / "ring.json", "k1", {"k1": K1})
    storage = LocalDirStorage(tmp_path / "bucket")
    archive(tmp_path / "src", storage, KeyRing(tmp_path / "ring.json"), "lz4")
    before = objects(storage)
    base = ["archive", "restore", "--remote", str(tmp_path / "bucket"), "--topic", "orders"]
    key = ["--key-file", str(tmp_path / "ring.json")]

    def fails(argv: list[str], code: int, *words: str) -> None:
        assert main(argv) == code
        err = capsys.readouterr().err.strip().splitlines()
        assert err and "Traceback" not in "\n".join(err)
        for w in words:
            assert w in err[-1], err

    # a time before the first record: an error, nothing made
    fails([*base, "--as", "x", "--to-timestamp", "999", *key], 1, "no record before", "1000")
    fails([*base, "--as", "x", "--to-offset", "0", *key], 1, "nothing to restore")
    fails([*base, "--as", "orders", "--to-offset", "5", *key], 1, "orders")
    nope = ["archive", "restore", "--remote", str(tmp_path / "bucket"), "--topic", "nope"]
    fails([*nope, "--as", "x", "--to-offset", "5"], 1, "'nope'")
    # an encrypted segment to cut, and no key ring
    fails([*base, "--as", "x", "--to-timestamp", "1525"], 1, "k1", "--key-file")
    fails([*base, "--as", "x", "--to-offset", "5"], 1, "k1", "--key-file")
    fails([*base, "--as", "x", *key], 2, "--to-timestamp")
    fails(["archive", "restore", "--topic", "orders", "--as", "x", "--to-offset", "5"], 2)
    fails([*base, "--as", "bad name!", "--to-offset", "5", *key], 1, "bad name!")
    assert objects(storage) == before  # nothing written by any of them
    assert main([*base, "--as", "x", "--to-offset", "5", *key]) == 0
    capsys.readouterr()
    fails([*base, "--as", "x", "--to-offset", "5", *key], 1, "'x' exists already")


@pytest.mark.timeout(60)
def test_a_partition_with_nothing_before_the_point_is_restored_empty(tmp_path: Path) -> None:
    storage = LocalDirStorage(tmp_path / "bucket")
    archive(tmp_path / "p0", storage, None, "none")
    late = TieredLog(  # partition 1: its records all after the restore point
        tmp_path / "p1",
        log_id=f"orders-{TOPIC_ID[:12]}-1",
        storage=storage,
        config=SMALL,
        tier=TierConfig(chunk_bytes=4096, local_retention_bytes=0),
        start_shipper=False,
    )
    try:
        late.append_batch([ProducerRecord(b"late", timestamp=3000 + o) for o in range(100)])
        late.roll()
        late.tier_once()
    finally:
        late.close()
    meta = TopicMeta("orders", 2, config=TopicConfig(), topic_id=TOPIC_ID, created_ms=1)
    storage.put(naming.topic_object_key("orders"), meta.to_json())
    report, _ = restore_point_in_time(storage, "orders", "early", to_timestamp=1525)
    ends = [(p.partition, p.log_start_offset, p.end_offset) for p in report.partitions]
    assert ends == [(0, 0, 526), (1, 0, 0)]
    tlog = open_restored(tmp_path, storage, "early", partition=1)
    try:
        assert tlog.next_offset == 0 and tlog.read_range(0, 10, 1 << 20) == []
        assert tlog.append(b"first") == 0
    finally:
        tlog.close()


@pytest.mark.timeout(60)
def test_a_cut_batch_keeps_its_codec_and_producer_fields(tmp_path: Path) -> None:
    """An idempotent producer's gzip batches; the restore point cuts the second one:
    its head is written again with the same producer id, epoch, base sequence, leader
    epoch and codec, and the records after the point are gone."""
    storage = LocalDirStorage(tmp_path / "bucket")
    src = TieredLog(
        tmp_path / "src",
        log_id=LOG_ID,
        storage=storage,
        config=SMALL,
        tier=TierConfig(chunk_bytes=4096, local_retention_bytes=0, compression="none"),
        start_shipper=False,
    )
    try:
        for s in range(0, 150, 50):
            recs = [record(o) for o in range(s, s + 50)]
            src.append_batch(
                encode_batch(
                    0,
                    recs,
                    0,
                    1 << 30,
                    compression="gzip",
                    leader_epoch=4,
                    producer_id=77,
                    producer_epoch=3,
                    base_sequence=s,
                )
            )
        src.roll()
        src.tier_once()
    finally:
        src.close()
    meta = TopicMeta("orders", 1, config=TopicConfig(), topic_id=TOPIC_ID, created_ms=1)
    storage.put(naming.topic_object_key("orders"), meta.to_json())
    report, _ = restore_point_in_time(storage, "orders", "cut", to_offset=75)
    assert report.partitions[0].end_offset == 75
    tlog = open_restored(tmp_path, storage, "cut")
    try:
        data = bytes(tlog.read_batches(50, 500, 1 << 20).data)
    finally:
        tlog.close()
    [batch] = batch_table(data, 50)[0]
    f = HEADER.unpack_from(data, batch.position)
    assert (batch.base_offset, batch.record_count) == (50, 25)
    assert (f[9], f[10], f[11]) == (77, 3, 50)  # producer id, epoch, base sequence
    assert f[5] & COMPRESSION_MASK == Compression.GZIP
    source = open_restored(tmp_path, storage, "orders")  # the source, as archived
    try:
        whole = bytes(source.read_batches(50, 500, 1 << 20).data)
    finally:
        source.close()
    assert f[2] == HEADER.unpack_from(whole, 0)[2]  # the partition leader epoch it had
    decoded, _, _ = decode_records(data)
    assert [(r.offset, r.timestamp, r.key, r.value) for r in decoded] == [
        (o, 1000 + o, record(o).key, record(o).value) for o in range(50, 75)
    ]


def _records(n: int, start: int) -> list[dict[str, Any]]:
    return [
        {
            "value": None if i % 11 == 0 else f"value-{i:06d}-" + "x" * 100,
            "key": None if i % 5 == 0 else f"k{i % 7}",
            "headers": {"h": f"v{i}", "null": None},
            "timestamp": 1_000_000 + i,
        }
        for i in range(start, start + n)
    ]


def _fetch_all(c: httpx.Client, topic: str, end: int) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    while len(out) < end:
        r = c.get(f"/v1/topics/{topic}/partitions/0/records", params={"offset": len(out)})
        assert r.status_code == 200, r.text
        recs = r.json()["records"]
        assert recs
        out.extend(recs)
    return out[:end]


@pytest.mark.timeout(180)
def test_a_running_service_restores_with_its_tail_and_serves_the_new_topic(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Through ``--url``: the records not shipped yet (the active segment) come from the
    service; the new topic is served at once over HTTP and Kafka and takes new records
    after its end; it is still there after a restart."""
    from confluent_kafka import Consumer, TopicPartition
    from service.conftest import ServerProcess  # tests/service/conftest.py
    from service.test_tiered_service import TINY, _bounds, _wait

    srv = ServerProcess(
        tmp_path / "data",
        tmp_path,
        {"remote_url": str(tmp_path / "bucket"), "ship_interval_ms": "50"},
    )
    srv.start()
    try:
        with srv.client() as c:
            r = c.post("/v1/topics", json={"name": "t", "config": TINY})
            assert r.status_code == 201, r.text
            for start in range(0, 300, 100):  # one batch a request
                r = c.post(
                    "/v1/topics/t/partitions/0/records", json={"records": _records(100, start)}
                )
                assert r.status_code == 200, r.text
            _wait(lambda: _bounds(c, "t")["remote_end_offset"] >= 200, "shipping")
            assert _bounds(c, "t")["remote_end_offset"] < 300  # the active segment
            source = _fetch_all(c, "t", 300)
        url = ["--url", srv.url]
        argv = ["archive", "restore", *url, "--topic", "t", "--as", "t2", "--to-timestamp"]
        assert main([*argv, "1000250", "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        [part] = doc["partitions"]
        assert (part["end_offset"], part["tail_records"]) == (251, 251 - part["bucket_end"])
        assert part["tail_records"] > 0
        with srv.client() as c:
            got = _fetch_all(c, "t2", 251)
            assert got == source[:251]
            assert _bounds(c, "t2")["next_offset"] == 251
            r = c.post("/v1/topics/t2/partitions/0/records", json={"records": [{"value": "new"}]})
            assert r.status_code == 200, r.text
            assert r.json()["offsets"] == [251]
        consumer = Consumer(
            {
                "bootstrap.servers": srv.kafka_bootstrap,
                "group.id": "restore-test",
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.assign([TopicPartition("t2", 0, 0)])
            seen: list[tuple[int | None, bytes | None]] = []
            deadline = time.monotonic() + 30
            while len(seen) < 252 and time.monotonic() < deadline:
                m = consumer.poll(1.0)
                if m is not None and m.error() is None:
                    seen.append((m.offset(), m.value()))
        finally:
            consumer.close()
        assert [o for o, _ in seen] == list(range(252))
        assert seen[250][1] == source[250]["value"].encode() and seen[251][1] == b"new"
        assert seen[0][1] is None  # a null value stays null
        # the new topic exists now; the source must exist
        assert main([*argv, "1000250"]) == 1
        assert "exists already" in capsys.readouterr().err
        assert (
            main(["archive", "restore", *url, "--topic", "nope", "--as", "n", "--to-offset", "1"])
            == 1
        )
        assert "nope" in capsys.readouterr().err
        srv.stop(timeout=15)
        srv.start()
        with srv.client() as c:
            assert [r["value"] for r in _fetch_all(c, "t2", 252)[250:]] == [
                source[250]["value"],
                "new",
            ]
    finally:
        srv.stop(timeout=15)


@pytest.mark.timeout(120)
def test_the_async_client_restores_a_topic_of_a_running_service(tmp_path: Path) -> None:
    """``AsyncClient.restore_topic`` through a running service: ``to_timestamp`` keeps
    the records up to that time, from the bucket and the unshipped tail (the batch it
    falls in cut), ``to_offset`` those below it, both the smaller; each new topic is
    served at once (its records read back with offsets, keys and timestamps, a new
    record appended after its end); an existing new name or a missing source is refused."""
    import asyncio

    from service.conftest import ServerProcess  # tests/service/conftest.py
    from service.test_tiered_service import TINY

    from tiered_log.client import AsyncClient
    from tiered_log.errors import TopicExistsError, TopicNotFoundError

    srv = ServerProcess(
        tmp_path / "data",
        tmp_path,
        {"remote_url": str(tmp_path / "bucket"), "ship_interval_ms": "50"},
    )
    source = [
        ProducerRecord(
            f"value-{i:06d}-".encode() + b"x" * 100,
            key=f"k{i % 7}".encode(),
            timestamp=1_000_000 + i,
        )
        for i in range(300)
    ]

    def rows(recs: list[Any]) -> list[tuple[int, bytes | None, bytes | None, int]]:
        return [(r.offset, r.key, r.value, r.timestamp) for r in recs]

    want = [(i, r.key, r.value, r.timestamp) for i, r in enumerate(source)]

    async def main() -> None:
        async with AsyncClient(srv.url) as c:
            await c.create_topic("t", config=TINY)
            for start in range(0, 300, 100):  # one batch a request
                await c.produce("t", 0, source[start : start + 100])
            deadline = asyncio.get_running_loop().time() + 30
            while (await c.archived_segments("t", 0))["remote_end_offset"] < 200:
                assert asyncio.get_running_loop().time() < deadline, "shipping"
                await asyncio.sleep(0.05)

            report = await c.restore_topic("t", "t2", to_timestamp=1_000_250)
            [part] = report["partitions"]
            assert (part["end_offset"], part["tail_records"]) == (251, 251 - part["bucket_end"])
            assert part["tail_records"] > 0  # the active segment's, from the service
            got = [r async for page in c.consume("t2", 0, 0) for r in page.records]
            assert rows(got) == want[:251]
            assert await c.produce("t2", 0, [b"new"]) == [251]

            [part] = (await c.restore_topic("t", "t3", to_offset=150))["partitions"]
            assert part["end_offset"] == 150
            report = await c.restore_topic("t", "t4", to_timestamp=1_000_250, to_offset=120)
            assert [p["end_offset"] for p in report["partitions"]] == [120]
            got = [r async for page in c.consume("t4", 0, 0) for r in page.records]
            assert rows(got) == want[:120]

            with pytest.raises(TopicExistsError, match="t2"):
                await c.restore_topic("t", "t2", to_offset=10)
            with pytest.raises(TopicNotFoundError, match="nope"):
                await c.restore_topic("nope", "t5", to_offset=10)

    srv.start()
    try:
        asyncio.run(main())
    finally:
        srv.stop(timeout=15)


@pytest.mark.timeout(180)
def test_a_restore_from_the_bucket_alone_is_served_by_a_service_started_on_it(
    tmp_path: Path, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    """No service runs while the restore is made (S3 through moto); a service started
    on the bucket later finds the new topic and serves it."""
    from service.conftest import ServerProcess
    from service.test_tiered_service import TINY, _bounds, _remote_settings, _wait

    settings = _remote_settings("s3", request, tmp_path)
    srv = ServerProcess(tmp_path / "data", tmp_path, settings)
    srv.start()
    try:
        with srv.client() as c:
            r = c.post("/v1/topics", json={"name": "t", "config": TINY})
            assert r.status_code == 201, r.text
            for start in range(0, 300, 100):
                r = c.post(
                    "/v1/topics/t/partitions/0/records", json={"records": _records(100, start)}
                )
                assert r.status_code == 200, r.text
            _wait(lambda: _bounds(c, "t")["remote_end_offset"] >= 200, "shipping")
            source = _fetch_all(c, "t", 200)
    finally:
        srv.stop(timeout=15)
    bucket = ["--remote", settings["remote_url"], "--endpoint-url", settings["s3_endpoint_url"]]
    argv = ["archive", "restore", *bucket, "--topic", "t", "--as", "t-before", "--json"]
    assert main([*argv, "--to-timestamp", "1000150"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [p["end_offset"] for p in doc["partitions"]] == [151]
    srv.start()
    try:
        with srv.client() as c:
            assert _fetch_all(c, "t-before", 151) == source[:151]
            b = _bounds(c, "t-before")
            assert (b["log_start_offset"], b["next_offset"]) == (0, 151)
            r = c.post(
                "/v1/topics/t-before/partitions/0/records", json={"records": [{"value": "n"}]}
            )
            assert r.status_code == 200 and r.json()["offsets"] == [151], r.text
    finally:
        srv.stop(timeout=15)
