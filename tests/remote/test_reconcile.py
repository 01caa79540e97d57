"""Reconcile (``tiered-log archive reconcile``): orphans found (a torn copy's data object,
a deleted topic's leftovers) and deleted only with --delete and only past the grace
period, never a referenced copy nor a copy under way; a manifest whose data object is
missing reported and never deleted; the command's output and one-line errors. On the
directory store (whose objects' times a test can set) and on S3 through moto's server."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from pathlib import Path

import pytest

from tiered_log import LogConfig, ProducerRecord, TieredLog
from tiered_log.cli import main
from tiered_log.format import naming
from tiered_log.remote.fs import LocalDirStorage
from tiered_log.remote.reconcile import delete_deleted_log, mark_log_deleted, reconcile_bucket
from tiered_log.remote.snapshot import SPILLS_DIR, spill_key
from tiered_log.remote.storage import RemoteStorage
from tiered_log.remote.tier import TierConfig

from .test_scrub import LOG_ID, archive, keys, value

TOPIC_ID = "0123456789ab" + "0" * 20
HOUR_AGO = time.time() - 7200


def publish_topic(storage: RemoteStorage) -> None:
    """The topic metadata a service keeps in the bucket, for the log :data:`LOG_ID`."""
    doc = {"name": "orders", "topic_id": TOPIC_ID, "partitions": 1, "config": {}}
    storage.put(naming.topic_object_key("orders"), json.dumps(doc).encode())


def torn_copy(storage: RemoteStorage, log_id: str = LOG_ID, base: int = 10**6) -> str:
    """A crashed copy's leftover: a data object without its manifest."""
    key = naming.segment_object_key(log_id, base, uuid.uuid4().hex, naming.LOG_SUFFIX)
    storage.put(key, b"\0" * 300)
    return key


def age(storage: RemoteStorage, key: str) -> None:
    assert isinstance(storage, LocalDirStorage)
    os.utime(storage.root / key, (HOUR_AGO, HOUR_AGO))


def everything(storage: RemoteStorage) -> set[str]:
    return {o.key for o in storage.list("")}


def reads_back(tmp_path: Path, storage: RemoteStorage, n: int) -> None:
    """A log rebuilt from the bucket alone serves all ``n`` records."""
    tlog = TieredLog(
        tmp_path / f"rebuilt-{uuid.uuid4().hex[:6]}",
        log_id=LOG_ID,
        storage=storage,
        config=LogConfig(segment_bytes=16 * 1024),
        tier=TierConfig(chunk_bytes=4096),
        start_shipper=False,
    )
    try:  # a new directory: the log rebuilds its view from the bucket as it opens
        assert tlog.bounds().remote_end_offset == n
        o = 0
        while o < n:
            recs = tlog.read_range(o, 500, 1 << 20)
            assert recs and recs[0].offset == o
            assert all(r.value == value(r.offset) for r in recs)
            o = recs[-1].offset + 1
    finally:
        tlog.close()


def test_a_torn_copy_is_deleted_only_with_delete_and_past_the_grace(
    tmp_path: Path, storage: RemoteStorage
) -> None:
    archive(tmp_path / "log", storage)
    publish_topic(storage)
    live = everything(storage)
    torn = torn_copy(storage)
    clean = reconcile_bucket(storage, min_age_s=3600)  # dry run, and torn is young
    assert [(f.kind, f.keys, f.action) for f in clean.findings] == [("torn_copy", [torn], "young")]
    assert clean.referenced == len(live)
    assert reconcile_bucket(storage, delete=True, min_age_s=3600).count("young") == (1, 300)
    assert torn in everything(storage)  # younger than the grace: kept
    dry = reconcile_bucket(storage, min_age_s=0)
    assert [(f.kind, f.action) for f in dry.findings] == [("torn_copy", "delete")]
    assert torn in everything(storage)  # a dry run deletes nothing
    done = reconcile_bucket(storage, delete=True, min_age_s=0)
    assert done.count("deleted") == (1, 300)
    assert everything(storage) == live  # every referenced object is still there
    reads_back(tmp_path, storage, 1200)


def test_the_grace_period_goes_by_the_objects_time(tmp_path: Path) -> None:
    storage = LocalDirStorage(tmp_path / "bucket")
    archive(tmp_path / "log", storage)
    publish_topic(storage)
    for k in everything(storage):  # the whole archive is old: still referenced
        age(storage, k)
    old, young = torn_copy(storage, base=5000), torn_copy(storage, base=6000)
    age(storage, old)
    rep = reconcile_bucket(storage, delete=True)  # the default grace: an hour
    assert {(f.keys[0], f.action) for f in rep.findings} == {(old, "deleted"), (young, "young")}
    assert young in everything(storage) and old not in everything(storage)
    reads_back(tmp_path, storage, 1200)


def test_spills_the_snapshot_names_are_referenced_and_an_unnamed_one_is_an_orphan(
    tmp_path: Path,
) -> None:
    storage = LocalDirStorage(tmp_path / "bucket")
    archive(tmp_path / "log", storage, snapshot_interval_segments=2, snapshot_spill_segments=1)
    publish_topic(storage)
    named = [k for k in everything(storage) if f"/{SPILLS_DIR}/" in k]
    assert len(named) >= 2  # the snapshot spilled, and merged spills were deleted
    for k in everything(storage):  # old, yet referenced
        age(storage, k)
    unnamed = spill_key(LOG_ID, 0, 50)  # a write that did not finish, or a merged one
    storage.put(unnamed, b"spill")
    age(storage, unnamed)
    live = everything(storage) - {unnamed}
    rep = reconcile_bucket(storage, delete=True, min_age_s=60)
    assert [(f.kind, f.keys, f.action) for f in rep.findings] == [
        ("unnamed_spill", [unnamed], "deleted")
    ]
    assert rep.referenced == len(live)
    assert everything(storage) == live
    reads_back(tmp_path, storage, 1200)


def test_a_deleted_topics_leftovers_and_a_dangling_manifest(
    tmp_path: Path, storage: RemoteStorage
) -> None:
    archive(tmp_path / "log", storage)
    publish_topic(storage)
    gone, limbo = "gone-aaaaaaaaaaaa-0", "limbo-bbbbbbbbbbbb-0"
    left = [
        naming.meta_object_key(gone),
        naming.segment_object_key(gone, 0, "x" * 32, naming.LOG_SUFFIX),
        naming.segment_object_key(gone, 0, "x" * 32, naming.RLI_SUFFIX),
    ]
    for k in left:
        storage.put(k, b"{}")
    # A log no topic metadata names and no deletion marker: a live topic's whose
    # metadata has not reached the bucket, for all reconcile can tell.
    unnamed = [
        naming.meta_object_key(limbo),
        *(naming.segment_object_key(limbo, 0, "y" * 32, sfx) for sfx in (".log", ".rli")),
    ]
    for k in unnamed:
        storage.put(k, b"{}")
    assert {f.kind for f in reconcile_bucket(storage, delete=True, min_age_s=0).findings} == {
        "unreferenced_log",
        "damaged",  # the manifests of b"{}" do not decode: reported only
    }
    assert set(left + unnamed) <= everything(storage)  # no evidence of a delete: kept
    mark_log_deleted(storage, gone, "gone", "a" * 32)  # as the service's delete does
    left.append(naming.deletion_marker_key(gone))
    data = keys(storage, ".log")[-1]
    storage.delete([data])  # its manifest now names a missing data object
    rli = data[: -len(".log")] + ".rli"
    rep = reconcile_bucket(storage, delete=True, min_age_s=0)
    found = {f.kind: f for f in rep.findings}
    assert set(found) == {"deleted_topic", "dangling_manifest", "unreferenced_log", "damaged"}
    assert sorted(found["deleted_topic"].keys) == sorted(left)
    assert found["deleted_topic"].action == "deleted"
    assert found["unreferenced_log"].log_id == limbo
    assert found["unreferenced_log"].action == "report"
    assert found["dangling_manifest"].keys == [rli]
    assert found["dangling_manifest"].action == "report"
    assert rli in everything(storage)  # reported, never deleted
    assert not any(k in everything(storage) for k in left)
    assert set(unnamed) <= everything(storage)
    # A bucket with no topic metadata at all: no log is taken for a deleted topic's
    # without its marker.
    storage.delete([naming.topic_object_key("orders")])
    rep = reconcile_bucket(storage, delete=True, min_age_s=0)
    assert not any(f.kind == "deleted_topic" for f in rep.findings)
    assert {f.log_id for f in rep.findings if f.kind == "unreferenced_log"} == {LOG_ID, limbo}


def test_a_delete_cut_short_leaves_its_marker(tmp_path: Path) -> None:
    """The bucket fails while a deleted topic's log is deleted: its marker stays (it is
    deleted last), so reconcile knows the rest for a deleted topic's; a lone marker (a
    node's late delete) is one too."""
    from tiered_log.errors import RemoteStorageError

    from .fake_store import MemoryStorage

    mem = MemoryStorage()
    archive(tmp_path / "log", mem)
    publish_topic(mem)
    other = "other-cccccccccccc-0"
    mem.put(naming.meta_object_key(other), b"{}")
    left = [naming.meta_object_key(other), torn_copy(mem, other)]
    mem.inject("delete", naming.log_prefix(other), error=RemoteStorageError("down"))
    with pytest.raises(RemoteStorageError):
        delete_deleted_log(mem, other, "other", "c" * 32)
    marker = naming.deletion_marker_key(other)
    rep = reconcile_bucket(mem, delete=True, min_age_s=0)
    assert [(f.kind, sorted(f.keys)) for f in rep.findings] == [
        ("deleted_topic", sorted([*left, marker]))
    ]
    assert rep.findings[0].action == "young"  # this store lists no times: never deleted
    assert delete_deleted_log(mem, other, "other", "c" * 32) == 2  # the bucket is back
    assert not any(naming.log_prefix(other) in k for k in everything(mem))

    storage = LocalDirStorage(tmp_path / "bucket")
    publish_topic(storage)
    mark_log_deleted(storage, other, "other", "c" * 32)
    rep = reconcile_bucket(storage, delete=True, min_age_s=0)
    assert [(f.kind, f.keys, f.action) for f in rep.findings] == [
        ("deleted_topic", [marker], "deleted")
    ]
    assert everything(storage) == {naming.topic_object_key("orders")}


def test_reconcile_while_shipping_deletes_nothing_referenced(tmp_path: Path) -> None:
    """A log ships segment after segment while reconcile --delete runs again and again
    (with a grace of a minute): only the old torn copy goes, every record reads back."""
    storage = LocalDirStorage(tmp_path / "bucket")
    publish_topic(storage)
    tlog = TieredLog(
        tmp_path / "log",
        log_id=LOG_ID,
        storage=storage,
        config=LogConfig(segment_bytes=8 * 1024),
        tier=TierConfig(chunk_bytes=2048, local_retention_bytes=0),
        start_shipper=False,
    )
    torn = torn_copy(storage)  # after the log's open, whose rebuild would delete it
    age(storage, torn)
    stop = threading.Event()
    deleted: list[list[str]] = []
    errors: list[BaseException] = []

    def reconciler() -> None:
        try:
            while not stop.is_set():
                rep = reconcile_bucket(storage, delete=True, min_age_s=60)
                deleted.extend(f.keys for f in rep.findings if f.action == "deleted")
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=reconciler)
    t.start()
    try:
        for s in range(0, 1500, 50):
            tlog.append_batch([ProducerRecord(value(o)) for o in range(s, s + 50)])
            tlog.roll()
            tlog.tier_once()
    finally:
        stop.set()
        t.join(30)
        tlog.close()
    assert not errors and deleted == [[torn]]
    reads_back(tmp_path, storage, 1500)


def test_cli_reconcile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    storage = LocalDirStorage(tmp_path / "bucket")
    archive(tmp_path / "log", storage)
    publish_topic(storage)
    torn = torn_copy(storage)
    url = str(storage.root)
    assert main(["archive", "reconcile", "--remote", url, "--min-age-s", "0"]) == 0
    out = capsys.readouterr().out
    assert f"would delete: {torn} (300 bytes)" in out and "dry run" in out
    assert torn in everything(storage)
    argv = ["archive", "reconcile", "--remote", url, "--delete", "--json", "--topic", "orders"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["deleted_objects"] == 0 and doc["findings"][0]["keys"] == [torn]
    assert doc["findings"][0]["action"] == "young"  # the default grace: an hour
    assert main([*argv, "--min-age-s", "0"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["deleted_objects"] == 1 and torn not in everything(storage)
    storage.delete([keys(storage, ".log")[0]])
    assert main(["archive", "reconcile", "--remote", url]) == 1  # a dangling manifest
    assert "DANGLING MANIFEST" in capsys.readouterr().out
    for args, needle in [
        (["--min-age-s", "-1"], ">= 0"),
        (["--min-age-s", "soon"], "seconds"),
        (["--topic", "nope"], "topic 'nope' has no metadata"),
    ]:
        assert main(["archive", "reconcile", "--remote", url, *args]) != 0
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert main(["archive", "reconcile", "--remote", "s3://"]) == 1
    err = capsys.readouterr().err
    assert "S3 URL" in err and len(err.strip().splitlines()) == 1


def _second_copy(storage: RemoteStorage, data_key: str, epoch: int | None) -> tuple[str, str]:
    """A second complete copy of the segment ``data_key`` under a new id (the same bytes,
    its manifest naming ``epoch``), as a replica's copy of the same offsets."""
    from dataclasses import replace

    from tiered_log.remote.manifest import decode_manifest, encode_manifest

    rli = data_key[: -len(".log")] + ".rli"
    blob = storage.get(rli)
    rs, entries, index, timeindex = decode_manifest(blob, rli)
    head = json.loads(blob.partition(b"\n")[0])  # a compressed segment's stored size
    base, _, _ = naming.parse_segment_object_key(data_key) or (0, "", "")
    new_id = uuid.uuid4().hex
    new_data = naming.segment_object_key(LOG_ID, base, new_id, naming.LOG_SUFFIX)
    new_rli = naming.segment_object_key(LOG_ID, base, new_id, naming.RLI_SUFFIX)
    storage.put(new_data, storage.get(data_key))
    storage.put(
        new_rli,
        encode_manifest(
            replace(rs, id=new_id, leader_epoch=epoch),
            [replace(e, object_key=new_data) for e in entries],
            index,
            timeindex,
            stored_size=head.get("stored_size"),
            compression=head.get("compression"),
        ),
    )
    return new_data, new_rli


def test_a_deposed_leaders_copy_goes_the_new_leaders_stays(tmp_path: Path) -> None:
    storage = LocalDirStorage(tmp_path / "bucket")
    archive(tmp_path / "log", storage)
    publish_topic(storage)
    old_data = keys(storage, ".log")[1]
    old_rli = old_data[: -len(".log")] + ".rli"
    new_data, new_rli = _second_copy(storage, old_data, epoch=2)  # the later leader's
    # The partition snapshot the deposed leader wrote lists its copy: a rebuild from it
    # would serve that copy, so it stays while the snapshot lists it.
    snap = naming.snapshot_object_key(LOG_ID)
    assert snap in everything(storage)
    rep = reconcile_bucket(storage, delete=True, min_age_s=0)
    assert [(f.kind, sorted(f.keys), f.action) for f in rep.findings] == [
        ("listed_duplicate", sorted([old_data, old_rli]), "report")
    ]
    assert old_data in everything(storage)
    storage.delete([snap])  # as the new leader's next snapshot would no longer list it
    rep = reconcile_bucket(storage, delete=True, min_age_s=0)
    assert [(f.kind, sorted(f.keys), f.action) for f in rep.findings] == [
        ("duplicate", sorted([old_data, old_rli]), "deleted")
    ]
    assert "deposed leader" in rep.findings[0].reason
    assert {new_data, new_rli} <= everything(storage)
    assert old_data not in everything(storage)
    assert reconcile_bucket(storage).findings == []  # nothing left to find
    reads_back(tmp_path, storage, 1200)  # served by the new leader's copy


@pytest.mark.timeout(120)
def test_reconcile_with_the_live_view_of_a_running_service(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server ships a topic whose metadata is missing from the bucket (as when its
    publication failed or is late): reconcile --delete from the bucket alone never takes
    its log for a deleted topic's (no deletion marker says so) and deletes only the torn
    copy; with the running service's view it is known as live; once the topic is
    deleted on the service, nothing of it is left."""
    from service.conftest import ServerProcess  # tests/service/conftest.py
    from service.test_tiered_service import TINY, _bounds, _records, _wait

    bucket = tmp_path / "bucket"
    srv = ServerProcess(
        tmp_path / "data", tmp_path, {"remote_url": str(bucket), "ship_interval_ms": "50"}
    )
    srv.start()
    try:
        with srv.client() as c:
            r = c.post("/v1/topics", json={"name": "t", "config": TINY})
            assert r.status_code == 201, r.text
            log_id = f"t-{r.json()['topic_id'][:12]}-0"
            for start in range(0, 300, 100):
                r = c.post(
                    "/v1/topics/t/partitions/0/records", json={"records": _records(100, start)}
                )
                assert r.status_code == 200, r.text
            _wait(lambda: _bounds(c, "t")["remote_end_offset"] > 100, "shipping")
        storage = LocalDirStorage(bucket)
        storage.put(
            naming.topic_object_key("other"),
            json.dumps({"name": "other", "topic_id": "f" * 32, "partitions": 1}).encode(),
        )
        storage.delete([naming.topic_object_key("t")])
        shipped = {k for k in everything(storage) if log_id in k}
        torn = torn_copy(storage, log_id)
        argv = ["archive", "reconcile", "--remote", str(bucket), "--min-age-s", "0", "--json"]
        assert main([*argv, "--delete"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert [(f["kind"], f["keys"], f["action"]) for f in doc["findings"]] == [
            ("unreferenced_log", [], "report"),
            ("torn_copy", [torn], "deleted"),
        ]
        assert shipped <= everything(storage)  # the live topic's data: all kept
        torn = torn_copy(storage, log_id)
        assert main([*argv, "--url", srv.url, "--delete"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert [(f["kind"], f["keys"], f["action"]) for f in doc["findings"]] == [
            ("torn_copy", [torn], "deleted")
        ]
        with srv.client() as c:
            got = c.get("/v1/topics/t/partitions/0/records", params={"offset": 0})
            assert got.status_code == 200 and got.json()["records"][0]["offset"] == 0
            assert len(got.json()["records"]) > 0
            assert c.delete("/v1/topics/t").status_code == 204
            _wait(lambda: not any(log_id in k for k in everything(storage)), "remote deletion")
    finally:
        srv.stop(timeout=15)
