"""The scrubber (``tiered-log archive scrub``): an archive read back as a reader would,
damage found and named (a flipped byte in a chunk, a truncated or missing data object, a
manifest wrapped with a key the ring lacks), a clean archive clean whether plain,
compressed or encrypted, and the command's output, exit codes and one-line errors. On
the directory store and on S3 through moto's server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tiered_log import LogConfig, ProducerRecord, TieredLog
from tiered_log.cli import main
from tiered_log.remote.crypto import KeyRing
from tiered_log.remote.fs import LocalDirStorage
from tiered_log.remote.manifest import decode_manifest
from tiered_log.remote.scrub import scrub_bucket, topic_of
from tiered_log.remote.storage import RemoteStorage
from tiered_log.remote.tier import TierConfig

from .test_archive_codec import K1, K2, write_ring

SMALL = LogConfig(segment_bytes=16 * 1024, index_interval_bytes=512)
LOG_ID = "orders-0123456789ab-0"


def value(o: int) -> bytes:
    return json.dumps({"order": o, "msg": f"order {o} shipped", "pad": "x" * 40}).encode()


def archive(
    path: Path, storage: RemoteStorage, n: int = 1200, ring: KeyRing | None = None, **tier: object
) -> None:
    """A log of ``n`` records, every segment shipped, closed."""
    cfg: dict[str, object] = {"chunk_bytes": 4096, "local_retention_bytes": 0, "key_ring": ring}
    cfg.update(tier)
    tlog = TieredLog(
        path,
        log_id=LOG_ID,
        storage=storage,
        config=SMALL,
        tier=TierConfig(**cfg),  # type: ignore[arg-type]
        start_shipper=False,
    )
    try:
        for s in range(0, n, 50):
            tlog.append_batch(
                [ProducerRecord(value(o), timestamp=1000 + o) for o in range(s, s + 50)]
            )
        tlog.flush()
        tlog.roll()
        tlog.tier_once()
        assert tlog.bounds().remote_end_offset == n
    finally:
        tlog.close()


def keys(storage: RemoteStorage, suffix: str) -> list[str]:
    return sorted(o.key for o in storage.list("") if o.key.endswith(suffix))


def rewrite(storage: RemoteStorage, key: str, data: bytes) -> None:
    """Put damaged bytes in place: in the file itself on the directory store (its stored
    digest then no longer matches, as with rot on disk), a new object on S3."""
    if isinstance(storage, LocalDirStorage):
        (storage.root / key).write_bytes(data)
    else:
        storage.put(key, data)


@pytest.mark.parametrize(
    "compression,encrypted",
    [
        pytest.param("none", False, id="plain"),
        pytest.param("zstd", False, id="zstd"),
        pytest.param("gzip", True, id="gzip-encrypted"),
        pytest.param("none", True, id="encrypted"),
    ],
)
def test_a_clean_archive_scrubs_clean(
    tmp_path: Path, storage: RemoteStorage, compression: str, encrypted: bool
) -> None:
    ring = None
    if encrypted:
        write_ring(tmp_path / "ring.json", "k1", {"k1": K1})
        ring = KeyRing(tmp_path / "ring.json")
    archive(tmp_path / "log", storage, ring=ring, compression=compression)
    n_seg = len(keys(storage, ".rli"))
    assert n_seg >= 3
    rep = scrub_bucket(storage, ring)
    assert rep.damaged == []
    assert rep.segments_total == rep.segments_done == rep.segments_clean == n_seg
    stored = sum(o.size for o in storage.list("") if o.key.endswith((".log", ".rli")))
    assert rep.bytes_read == stored  # every byte of every segment's objects was read
    assert rep.chunks_verified == sum(
        len(decode_manifest(storage.get(k), k)[1]) for k in keys(storage, ".rli")
    )
    # --topic picks the log's topic; another topic has nothing
    assert topic_of(LOG_ID) == ("orders", 0)
    assert scrub_bucket(storage, ring, topic="orders").segments_done == n_seg
    assert scrub_bucket(storage, ring, topic="other").segments_total == 0


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_a_flipped_byte_in_a_chunk_is_found_and_named(
    tmp_path: Path, storage: RemoteStorage, compression: str
) -> None:
    archive(tmp_path / "log", storage, compression=compression)
    key = keys(storage, ".log")[1]
    rli = key[: -len(".log")] + ".rli"
    rs, entries, _, _ = decode_manifest(storage.get(rli), rli)
    e = entries[len(entries) // 2]
    data = bytearray(storage.get(key))
    data[e.position + e.data_length - 7] ^= 0x40  # inside a batch's records: its CRC fails
    rewrite(storage, key, bytes(data))
    rep = scrub_bucket(storage)
    assert len(rep.damaged) == 1
    d = rep.damaged[0]
    assert (d.topic, d.partition, d.object_key) == ("orders", 0, key)
    assert (d.base_offset, d.next_offset) == (rs.base_offset, rs.next_offset)
    assert d.kinds == ["chunk"]
    assert f"chunk [{e.first_offset}, {e.last_offset}] at byte {e.position}" in d.problems[0]
    assert rep.segments_clean == rep.segments_total - 1


def test_a_truncated_data_object_is_found(tmp_path: Path, storage: RemoteStorage) -> None:
    archive(tmp_path / "log", storage)
    key = keys(storage, ".log")[0]
    data = storage.get(key)
    rewrite(storage, key, data[: len(data) - 100])
    rep = scrub_bucket(storage)
    assert [d.object_key for d in rep.damaged] == [key]
    d = rep.damaged[0]
    assert "data_size" in d.kinds and "chunk" in d.kinds
    assert f"{len(data) - 100} bytes, its manifest says {len(data)} (truncated)" in d.problems[0]


def test_a_missing_data_object_is_found(tmp_path: Path, storage: RemoteStorage) -> None:
    archive(tmp_path / "log", storage)
    key = keys(storage, ".log")[-1]
    storage.delete([key])
    # A young manifest alone may be a copy under way: not reported by default.
    young = scrub_bucket(storage)
    assert young.damaged == [] and young.segments_skipped == 1
    rep = scrub_bucket(storage, in_flight_grace_ms=0)
    assert [(d.object_key, d.kinds) for d in rep.damaged] == [(key, ["data_missing"])]
    assert f"data object {key} is missing" in rep.damaged[0].problems[0]


def test_a_damaged_manifest_is_found(tmp_path: Path, storage: RemoteStorage) -> None:
    archive(tmp_path / "log", storage)
    rli = keys(storage, ".rli")[0]
    blob = bytearray(storage.get(rli))
    blob[-3] ^= 1  # in its entries: its own checksum fails
    storage.put(rli, bytes(blob))
    rep = scrub_bucket(storage)
    assert [(d.object_key, d.kinds) for d in rep.damaged] == [(rli, ["manifest"])]
    assert "checksum" in rep.damaged[0].problems[0]


def test_a_manifest_naming_a_missing_key_is_named(tmp_path: Path, storage: RemoteStorage) -> None:
    write_ring(tmp_path / "ring.json", "k1", {"k1": K1})
    archive(tmp_path / "log", storage, ring=KeyRing(tmp_path / "ring.json"), compression="zstd")
    n_seg = len(keys(storage, ".rli"))
    write_ring(tmp_path / "other.json", "k2", {"k2": K2})
    for ring in (KeyRing(tmp_path / "other.json"), None):
        rep = scrub_bucket(storage, ring)
        assert len(rep.damaged) == n_seg
        assert {d.key_id for d in rep.damaged} == {"k1"}
        assert all(d.kinds == ["key_unavailable"] for d in rep.damaged)
        assert rep.missing_keys == {"k1": n_seg}
        assert "'k1'" in rep.damaged[0].problems[0]
        # without the key the chunks' stored checksums are still verified
        assert rep.chunks_verified > 0


def test_cli_scrub(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bucket = tmp_path / "bucket"
    storage = LocalDirStorage(bucket)
    archive(tmp_path / "log", storage)
    url = str(bucket)
    assert main(["archive", "scrub", "--remote", url, "--rate", "64"]) == 0
    clean = capsys.readouterr()
    assert "no damage found" in clean.out and "segments" in clean.err  # progress on stderr
    key = keys(storage, ".log")[0]
    data = bytearray(storage.get(key))
    data[len(data) // 2] ^= 0xFF
    (bucket / key).write_bytes(bytes(data))
    assert main(["archive", "scrub", "--remote", url, "--json", "--topic", "orders"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["segments_damaged"] == 1 and doc["damaged"][0]["object_key"] == key
    assert doc["damaged"][0]["topic"] == "orders" and doc["damaged"][0]["partition"] == 0
    assert main(["archive", "scrub", "--remote", url]) == 1
    out = capsys.readouterr().out
    assert out.startswith("DAMAGED orders/0 offsets [0, ") and key in out
    for argv, needle in [
        (["--remote", url, "--rate", "0"], "positive"),
        (["--remote", url, "--rate", "fast"], "MiB/s"),
        (["--remote", "ftp://x/y"], "unsupported remote storage URL scheme"),
        (["--remote", url, "--key-file", str(tmp_path / "none.json")], "key ring"),
        (["--remote", url, "--topic", "nope"], "topic 'nope' has no metadata"),
    ]:
        assert main(["archive", "scrub", *argv]) != 0
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def _scrub_metric(text: str, name: str, labels: str = "") -> float:
    for line in text.splitlines():
        if line.startswith(f"{name}{labels} "):
            return float(line.rsplit(" ", 1)[1])
    return -1.0


@pytest.mark.timeout(120)
def test_the_services_background_scrubber(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server with ``scrub_interval_s`` ships a topic (nothing kept locally), a byte of
    an archived segment is flipped while it runs: its scrubber counts the damaged segment
    in ``/metrics`` (no local copy mends it), lists it in ``GET /v1/archive/anomalies``,
    the partition's anomalies and describe; ``archive scrub --url`` runs a pass now and
    names it, and the command run beside it against the same bucket finds it too."""
    from service.conftest import ServerProcess  # tests/service/conftest.py
    from service.test_tiered_service import TINY, _bounds, _records, _wait

    bucket = tmp_path / "bucket"
    srv = ServerProcess(
        tmp_path / "data",
        tmp_path,
        {"remote_url": str(bucket), "ship_interval_ms": "50", "scrub_interval_s": "0.2"},
    )
    srv.start()
    try:
        with srv.client() as c:
            assert c.post("/v1/topics", json={"name": "t", "config": TINY}).status_code == 201
            for start in range(0, 400, 100):
                r = c.post(
                    "/v1/topics/t/partitions/0/records", json={"records": _records(100, start)}
                )
                assert r.status_code == 200, r.text
            _wait(lambda: _bounds(c, "t")["remote_end_offset"] > 200, "shipping")
            _wait(  # a pass that found the shipped segments (an earlier one may have not)
                lambda: _scrub_metric(c.get("/metrics").text, "tiered_log_scrub_bytes_total") > 0,
                "a scrub pass",
            )
            text = c.get("/metrics").text
            assert _scrub_metric(text, "tiered_log_scrub_passes_total") > 0
            assert _scrub_metric(text, "tiered_log_scrub_segments_checked_total") > 0
            assert "tiered_log_scrub_damaged_segments{" not in text
            data = sorted(p for p in bucket.rglob("*.log"))[0]
            blob = bytearray(data.read_bytes())
            blob[len(blob) - 10] ^= 0x01
            data.write_bytes(bytes(blob))
            _wait(
                lambda: (
                    _scrub_metric(
                        c.get("/metrics").text,
                        "tiered_log_scrub_damaged_segments",
                        '{topic="t",tier="remote"}',
                    )
                    == 1
                ),
                "the damage counted",
            )
            assert main(["archive", "scrub", "--remote", str(bucket), "--topic", "t"]) == 1
            capsys.readouterr()

            # What the scrubber found, over HTTP and through the command.
            doc = c.get("/v1/archive/anomalies").json()
            assert doc["enabled"] and doc["passes"] > 0 and doc["last_pass"] is not None
            [found] = doc["anomalies"]
            rel = str(data.relative_to(bucket))
            assert (found["topic"], found["partition"], found["object_key"]) == ("t", 0, rel)
            assert found["base_offset"] == 0 and found["next_offset"] > 0
            assert found["kinds"] and found["problems"] and found["found_ms"] > 0
            assert found["tier"] == "remote" and found["repaired"] is False
            assert "no longer on this node's disk" in found["repair"]
            other = c.get("/v1/archive/anomalies", params={"topic": "other"}).json()
            assert other["anomalies"] == [] and other["found_in_current_pass"] == []
            part = c.get("/v1/topics/t/partitions/0/anomalies").json()
            assert part["checked"] is True
            assert [a["object_key"] for a in part["anomalies"]] == [rel]
            described = c.get("/v1/topics/t").json()["partition_info"][0]
            assert [a["object_key"] for a in described["anomalies"]] == [rel]
            assert c.get("/v1/topics/nope/partitions/0/anomalies").status_code == 404
        assert main(["archive", "scrub", "--url", srv.url, "--topic", "t"]) == 1
        out = capsys.readouterr().out
        assert out.startswith(
            f"DAMAGED t/0 offsets [0, {found['next_offset']}) archived copy {rel}: "
        )
        assert "no longer on this node's disk" in out
        assert "1 damaged segment, 0 repaired" in out
        assert main(["archive", "scrub", "--url", srv.url, "--json", "--topic", "t"]) == 1
        [node] = json.loads(capsys.readouterr().out)
        assert [d["object_key"] for d in node["report"]["damaged"]] == [rel]
        for argv, needle in [
            (["--url", srv.url, "--remote", str(bucket)], "either --remote"),
            (["--url", srv.url, "--rate", "5"], "--rate goes with --remote"),
            (["--url", srv.url, "--topic", "other"], "other"),
            ([], "either --remote"),
        ]:
            assert main(["archive", "scrub", *argv]) != 0
            err = capsys.readouterr().err
            assert needle in err and len(err.strip().splitlines()) == 1
    finally:
        srv.stop(timeout=15)
    assert "damaged segment t/0 offsets [0, " in srv.log()


@pytest.mark.timeout(120)
def test_a_scrub_asked_of_a_service_repairs_both_tiers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server without background passes, keeping its shipped segments locally: a byte
    flipped in an archived copy and another in a local segment are both repaired by
    ``archive scrub --url`` (each from the other tier), which exits 0; the bytes are the
    originals again, every record reads back, and the repairs are counted."""
    from service.conftest import ServerProcess  # tests/service/conftest.py
    from service.test_tiered_service import _bounds, _records, _wait

    bucket = tmp_path / "bucket"
    srv = ServerProcess(
        tmp_path / "data", tmp_path, {"remote_url": str(bucket), "ship_interval_ms": "50"}
    )
    srv.start()
    try:
        with srv.client() as c:
            config = {"segment_bytes": 4096, "local_retention_bytes": 1 << 30}
            assert c.post("/v1/topics", json={"name": "t", "config": config}).status_code == 201
            for start in range(0, 400, 100):
                r = c.post(
                    "/v1/topics/t/partitions/0/records", json={"records": _records(100, start)}
                )
                assert r.status_code == 200, r.text
            _wait(lambda: _bounds(c, "t")["remote_end_offset"] > 200, "shipping")
            assert c.get("/v1/topics/t/partitions/0/anomalies").json() == {
                "topic": "t",
                "partition": 0,
                "checked": False,
                "anomalies": [],
            }
            archived = sorted(bucket.rglob("*.log"))[0]
            local = sorted((tmp_path / "data").rglob("*.log"))[1]
            good = {p: p.read_bytes() for p in (archived, local)}
            for p in (archived, local):
                blob = bytearray(good[p])
                blob[len(blob) // 2] ^= 0x20
                p.write_bytes(bytes(blob))

            assert main(["archive", "scrub", "--url", srv.url]) == 0
            out = capsys.readouterr().out
            assert "REPAIRED t/0 offsets [0, " in out and "archived copy" in out
            assert "local segment" in out and "(from the archived copy)" in out
            assert "(from the local log)" in out
            assert "2 damaged segments, 2 repaired" in out
            assert {p: p.read_bytes() for p in good} == good
            part = c.get("/v1/topics/t/partitions/0/anomalies").json()
            assert part["checked"] and all(a["repaired"] for a in part["anomalies"])
            assert {a["tier"] for a in part["anomalies"]} == {"local", "remote"}
            text = c.get("/metrics").text
            for tier in ("local", "remote"):
                assert (
                    _scrub_metric(
                        text, "tiered_log_scrub_repaired_segments_total", f'{{tier="{tier}"}}'
                    )
                    == 1
                )
            r = c.get("/v1/topics/t/partitions/0/records", params={"offset": 0, "max_records": 400})
            assert r.status_code == 200
            assert [x["offset"] for x in r.json()["records"]] == list(range(400))
            assert main(["archive", "scrub", "--url", srv.url]) == 0
            assert "no damage found" in capsys.readouterr().out
    finally:
        srv.stop(timeout=15)


@pytest.mark.timeout(120)
def test_the_async_client_lists_scrubs_and_reads_the_anomalies_of_a_service(
    tmp_path: Path,
) -> None:
    """``AsyncClient`` against a service keeping its shipped segments locally:
    ``archived_segments`` names the objects in the bucket (as the sync client does); a
    byte flipped in one of them is not found by ``archive_scrub`` of another topic, is
    found and repaired by a scrub of every topic (one report, of the single node), and
    the bytes are the originals again; ``archive_anomalies`` lists it for its topic only
    (as the sync client's answer)."""
    import asyncio

    from service.conftest import ServerProcess  # tests/service/conftest.py

    from tiered_log.client import AsyncClient, Client
    from tiered_log.errors import TopicNotFoundError

    bucket = tmp_path / "bucket"
    srv = ServerProcess(
        tmp_path / "data", tmp_path, {"remote_url": str(bucket), "ship_interval_ms": "50"}
    )
    config = {"segment_bytes": 4096, "local_retention_bytes": 1 << 30}

    async def main() -> None:
        async with AsyncClient(srv.url) as c:
            for name in ("t", "u"):
                await c.create_topic(name, config=config)
                for start in range(0, 400, 100):  # a batch a segment: 3 shipped, 1 active
                    await c.produce(name, 0, [value(o) for o in range(start, start + 100)])
            deadline = asyncio.get_running_loop().time() + 30
            for name in ("u", "t"):
                while (listed := await c.archived_segments(name, 0))["remote_end_offset"] < 300:
                    assert asyncio.get_running_loop().time() < deadline, "shipping"
                    await asyncio.sleep(0.05)
            assert listed["remote_end_offset"] == 300 and listed["next_offset"] == 400
            segs = [s["object_key"] for s in listed["segments"]]
            assert len(segs) == 3 and all((bucket / k).is_file() for k in segs)
            with Client(srv.url) as sync:
                assert sync.archived_segments("t", 0) == listed
            with pytest.raises(TopicNotFoundError):
                await c.archived_segments("nope", 0)

            doc = await c.archive_anomalies()
            assert doc["enabled"] is False and doc["last_pass"] is None
            key = segs[1]
            good = (bucket / key).read_bytes()
            blob = bytearray(good)
            blob[len(blob) // 2] ^= 0x20
            (bucket / key).write_bytes(bytes(blob))

            [other] = await c.archive_scrub("u")
            assert (other["node_id"], other["url"]) == (None, srv.url)
            assert other["report"]["damaged"] == [] and other["report"]["segments_checked"] > 0
            [node] = await c.archive_scrub()
            assert (node["node_id"], node["url"]) == (None, srv.url)
            [d] = node["report"]["damaged"]
            assert (d["topic"], d["partition"], d["object_key"]) == ("t", 0, key)
            assert d["tier"] == "remote" and d["repaired"] is True
            assert (bucket / key).read_bytes() == good
            [again] = await c.archive_scrub("t")
            assert again["report"]["damaged"] == []
            checked = [n["report"]["segments_checked"] for n in (node, other, again)]
            assert checked[0] == checked[1] + checked[2]  # every topic's: u's and t's
            with pytest.raises(TopicNotFoundError):
                await c.archive_scrub("nope")

            found = await c.archive_anomalies("t")  # the last full pass's
            assert found["passes"] == 3 and found["last_pass"]["segments_damaged"] == 1
            assert [(a["object_key"], a["repaired"]) for a in found["anomalies"]] == [(key, True)]
            assert (await c.archive_anomalies("u"))["anomalies"] == []
            with Client(srv.url) as sync:
                assert sync.archive_anomalies("t") == found

    srv.start()
    try:
        asyncio.run(main())
    finally:
        srv.stop(timeout=15)


@pytest.mark.timeout(60)
def test_a_scrub_asked_of_a_service_without_background_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from service.conftest import ServerProcess  # tests/service/conftest.py

    srv = ServerProcess(tmp_path / "data", tmp_path, {"remote_url": str(tmp_path / "bucket")})
    srv.start()
    try:
        with srv.client() as c:
            doc = c.get("/v1/archive/anomalies").json()
            assert doc["enabled"] is False and doc["anomalies"] == [] and doc["last_pass"] is None
        assert main(["archive", "scrub", "--url", srv.url]) == 0
        assert "no damage found" in capsys.readouterr().out
        with srv.client() as c:
            assert c.get("/v1/archive/anomalies").json()["last_pass"] is not None
    finally:
        srv.stop(timeout=15)
