"""The archive compressed and encrypted: chunks compressed where that pays, envelope
encryption with the operator's key ring, key rotation (``archive rewrap``) while reads go
on, a missing key named, damage found, old plain archives still read, and the rebuild
from the bucket. Runs on the directory store and on S3 through moto's server."""

from __future__ import annotations

import base64
import json
import os
import shutil
import struct
import threading
from pathlib import Path
from typing import Any

import pytest

from tiered_log import LogConfig, ProducerRecord, RemoteCorruptionError, TieredLog, TieredLogError
from tiered_log.cli import main
from tiered_log.format import naming
from tiered_log.format.records import batch_header
from tiered_log.remote.chunk_codec import FRAME_SIZE, is_framed
from tiered_log.remote.crypto import KeyRing, KeyUnavailableError, parse_key_ring
from tiered_log.remote.fs import LocalDirStorage
from tiered_log.remote.manifest import decode_manifest, manifest_encryption
from tiered_log.remote.snapshot import snapshot_key
from tiered_log.remote.storage import RemoteStorage
from tiered_log.remote.tier import TierConfig

from .test_tiered_log import remote_end

SMALL = LogConfig(segment_bytes=32 * 1024, index_interval_bytes=512)
MARKER = b"MARKER-4c1d-secret-value"


def json_value(o: int) -> bytes:
    return json.dumps(
        {
            "ts": f"2026-11-28T12:{o % 60:02d}:00Z",
            "level": "INFO" if o % 7 else "WARN",
            "service": "orders",
            "msg": f"order {o} shipped to warehouse {o % 13}",
            "secret": MARKER.decode(),
        }
    ).encode()


def write_ring(path: Path, active: str, keys: dict[str, bytes]) -> None:
    doc = {"active": active, "keys": {k: base64.b64encode(v).decode() for k, v in keys.items()}}
    tmp = path.with_name(path.name + ".new")
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, path)


K1, K2 = os.urandom(32), os.urandom(32)


def open_log(
    path: Path, storage: RemoteStorage, ring: KeyRing | None = None, **tier: Any
) -> TieredLog:
    cfg: dict[str, Any] = {
        "chunk_bytes": 4096,
        "fetch_bytes": 16384,
        "prefetch_bytes": 16384,
        "local_retention_bytes": 0,
        "key_ring": ring,
        **tier,
    }
    return TieredLog(
        path,
        log_id="orders-0",
        storage=storage,
        config=SMALL,
        tier=TierConfig(**cfg),
        start_shipper=False,
    )


def produce(tlog: TieredLog, n: int, value=json_value) -> None:  # type: ignore[no-untyped-def]
    start = tlog.next_offset
    for s in range(start, start + n, 50):
        tlog.append_batch(
            [ProducerRecord(value(o), timestamp=1000 + o) for o in range(s, min(s + 50, start + n))]
        )
    tlog.flush()
    tlog.roll()
    tlog.tier_once()


def read_all(tlog: TieredLog, end: int, value=json_value) -> None:  # type: ignore[no-untyped-def]
    o = 0
    while o < end:
        recs = tlog.read_range(o, 200, 1 << 20)
        assert recs and recs[0].offset == o
        for r in recs:
            assert r.value == value(r.offset)
        o = recs[-1].offset + 1
    page = tlog.read_batches(0, 10**6, 1 << 30)
    assert page.next_offset >= min(end, remote_end(tlog))


def objects(storage: RemoteStorage, suffix: str) -> list[str]:
    return sorted(o.key for o in storage.list("") if o.key.endswith(suffix))


def manifests(storage: RemoteStorage) -> list[dict[str, object]]:
    return [json.loads(storage.get(k).partition(b"\n")[0]) for k in objects(storage, ".rli")]


@pytest.mark.parametrize("workers", [0, 1], ids=["threads", "worker"])
def test_compressed_chunks_read_back(tmp_path: Path, storage: RemoteStorage, workers: int) -> None:
    tlog = open_log(tmp_path / "log", storage, compression="zstd", worker_processes=workers)
    try:
        produce(tlog, 3000)
        assert tlog.bounds().remote_end_offset == 3000
        heads = manifests(storage)
        assert heads and all(h["compression"] == "zstd" for h in heads)
        stored = sum(int(h["stored_size"]) for h in heads)  # type: ignore[call-overload]
        logged = sum(int(h["size"]) for h in heads)  # type: ignore[call-overload]
        assert stored == sum(o.size for o in storage.list("") if o.key.endswith(".log"))
        assert stored < logged * 0.5
        key = objects(storage, ".log")[0]
        assert is_framed(storage.get(key, 0, FRAME_SIZE))
        read_all(tlog, 3000)
    finally:
        tlog.close()


def test_incompressible_chunks_are_stored_as_they_are(
    tmp_path: Path, storage: RemoteStorage
) -> None:
    values = {o: os.urandom(1000) for o in range(600)}
    tlog = open_log(tmp_path / "log", storage, compression="zstd")
    try:
        produce(tlog, 600, values.__getitem__)
        for key in objects(storage, ".rli"):
            rs, entries, _, _ = decode_manifest(storage.get(key), key)
            data = storage.get(entries[0].object_key)
            assert len(data) == rs.size  # nothing framed: the store's own bytes
            assert not any(
                is_framed(data[e.position : e.position + e.data_length]) for e in entries
            )
        read_all(tlog, 600, values.__getitem__)
    finally:
        tlog.close()


def test_plain_archive_written_before_still_reads(tmp_path: Path, storage: RemoteStorage) -> None:
    """Segments shipped plain (no codec fields in their manifests, as every archive
    before compression) are read by a log now compressing and encrypting, beside its
    new segments."""
    tlog = open_log(tmp_path / "log", storage, compression="none")
    produce(tlog, 1000)
    tlog.close()
    assert all("stored_size" not in h and "encryption" not in h for h in manifests(storage))
    ring_file = tmp_path / "ring.json"
    write_ring(ring_file, "k1", {"k1": K1})
    tlog = open_log(tmp_path / "log", storage, KeyRing(ring_file), compression="lz4")
    try:
        produce(tlog, 1000)
        heads = manifests(storage)
        assert sum("encryption" in h for h in heads) == len(heads) - sum(
            "encryption" not in h for h in heads
        )
        assert any("encryption" in h for h in heads) and any("encryption" not in h for h in heads)
        read_all(tlog, 2000)
    finally:
        tlog.close()


def test_nothing_in_the_bucket_reveals_a_record(tmp_path: Path, storage: RemoteStorage) -> None:
    ring_file = tmp_path / "ring.json"
    write_ring(ring_file, "k1", {"k1": K1})
    for name, ring in (("plain", None), ("encrypted", KeyRing(ring_file))):
        tlog = open_log(tmp_path / name, storage, ring, compression="none")
        tlog_id = name
        try:
            produce(tlog, 600)
            read_all(tlog, 600)
        finally:
            tlog.close()
        found = [k for k in objects(storage, "") if MARKER in storage.get(k)]
        if tlog_id == "plain":  # the check can fail: unencrypted, the value is there
            assert found
            for k in objects(storage, ""):
                storage.delete([k])
        else:
            assert found == []
            assert all(h["encryption"]["key_id"] == "k1" for h in manifests(storage))  # type: ignore[index]


def test_a_missing_key_is_named(tmp_path: Path, storage: RemoteStorage) -> None:
    ring_file = tmp_path / "ring.json"
    write_ring(ring_file, "k1", {"k1": K1})
    tlog = open_log(tmp_path / "log", storage, KeyRing(ring_file))
    produce(tlog, 600)
    tlog.close()
    shutil.rmtree(tmp_path / "log" / naming.REMOTE_DIR / naming.CHUNK_CACHE_DIR)
    other = tmp_path / "other.json"
    write_ring(other, "k2", {"k2": K2})
    for ring, words in ((KeyRing(other), ["'k1'", str(other)]), (None, ["'k1'", "no key ring"])):
        tlog = open_log(tmp_path / "log", storage, ring)
        try:
            with pytest.raises(KeyUnavailableError) as info:
                tlog.read_range(0, 10, 1 << 20)
            assert all(w in info.value.message for w in words), info.value.message
            assert not info.value.retriable
        finally:
            tlog.close()


@pytest.mark.parametrize("fix_checksum", [False, True], ids=["stored-checksum", "gcm-tag"])
def test_a_flipped_byte_in_an_encrypted_chunk_is_found(
    tmp_path: Path, storage: RemoteStorage, fix_checksum: bool
) -> None:
    ring_file = tmp_path / "ring.json"
    write_ring(ring_file, "k1", {"k1": K1})
    tlog = open_log(tmp_path / "log", storage, KeyRing(ring_file))
    produce(tlog, 600)
    tlog.close()
    shutil.rmtree(tmp_path / "log" / naming.REMOTE_DIR / naming.CHUNK_CACHE_DIR)
    key = objects(storage, ".log")[0]
    data = bytearray(storage.get(key))
    data[FRAME_SIZE + 5] ^= 0x01  # inside the first chunk's ciphertext
    if fix_checksum:  # only the GCM tag can tell now
        import xxhash

        h = xxhash.xxh3_64(bytes(data[:12]))
        end = FRAME_SIZE + struct.unpack_from("<I", data, 24)[0]
        h.update(bytes(data[20:end]))
        struct.pack_into("<Q", data, 12, h.intdigest())
    storage.put(key, bytes(data))
    tlog = open_log(tmp_path / "log", storage, KeyRing(ring_file))
    try:
        with pytest.raises(RemoteCorruptionError) as info:
            tlog.read_range(0, 10, 1 << 20)
        assert ("decrypt" if fix_checksum else "checksum") in info.value.message
    finally:
        tlog.close()


def test_rewrap_while_a_reader_reads(tmp_path: Path, storage: RemoteStorage) -> None:
    """k2 is added and made active, ``archive rewrap`` runs while a reader reads every
    segment, k1 is removed: the reader never fails, every manifest names k2, and a log
    opened afresh (no cached chunks or keys) reads everything with k2 alone."""
    ring_file = tmp_path / "ring.json"
    write_ring(ring_file, "k1", {"k1": K1})
    tlog = open_log(tmp_path / "log", storage, KeyRing(ring_file), cache_bytes=16384)
    errors: list[BaseException] = []
    stop = threading.Event()
    try:
        produce(tlog, 4000)

        def reader() -> None:
            try:
                while not stop.is_set():
                    read_all(tlog, 4000)
            except BaseException as exc:
                errors.append(exc)

        t = threading.Thread(target=reader)
        t.start()
        write_ring(ring_file, "k2", {"k1": K1, "k2": K2})
        url = str(storage.root) if isinstance(storage, LocalDirStorage) else None
        if url is not None:
            assert main(["archive", "rewrap", "--remote", url, "--key-file", str(ring_file)]) == 0
        else:
            from tiered_log.remote.rewrap import rewrap_bucket

            report = rewrap_bucket(storage, KeyRing(ring_file))
            assert report.rewrapped > 0 and not report.problems
        write_ring(ring_file, "k2", {"k2": K2})
        produce(tlog, 500)  # shipped after the change: wrapped with k2
        stop.set()
        t.join(60)
        assert not t.is_alive() and errors == []
    finally:
        stop.set()
        tlog.close()
    assert {manifest_encryption(storage.get(k), k)[0] for k in objects(storage, ".rli")} == {"k2"}  # type: ignore[index]
    shutil.rmtree(tmp_path / "log" / naming.REMOTE_DIR / naming.CHUNK_CACHE_DIR)
    tlog = open_log(tmp_path / "log", storage, KeyRing(ring_file))
    try:
        read_all(tlog, 4500)
    finally:
        tlog.close()


def test_rebuild_from_the_bucket_alone(tmp_path: Path, storage: RemoteStorage) -> None:
    """A new data directory rebuilds the remote view of a compressed, encrypted archive
    (snapshot and manifests) and reads it; a damaged manifest of a compressed segment is
    made again from its data object."""
    tlog = open_log(tmp_path / "log", storage, compression="gzip", snapshot_interval_segments=2)
    produce(tlog, 3000)
    tlog.close()
    rli = objects(storage, ".rli")
    assert len(rli) >= 3 and storage.size(snapshot_key("orders-0")) > 0
    tlog = open_log(tmp_path / "fresh", storage, compression="gzip")  # from the snapshot
    try:
        assert tlog.bounds().remote_end_offset == 3000
        read_all(tlog, 3000)
    finally:
        tlog.close()
    storage.delete([snapshot_key("orders-0")])
    damaged = rli[-1]
    storage.put(damaged, b"not a manifest")
    tlog = open_log(tmp_path / "fresh2", storage, compression="gzip")  # every manifest
    try:
        assert tlog.bounds().remote_end_offset == 3000
        read_all(tlog, 3000)
    finally:
        tlog.close()
    rs, entries, _, _ = decode_manifest(
        storage.get(damaged), damaged, storage.size(damaged[:-4] + ".log")
    )
    assert entries and rs.next_offset == 3000


def test_key_ring_file_checks() -> None:
    good = {"active": "k1", "keys": {"k1": base64.b64encode(K1).decode()}}
    assert parse_key_ring(json.dumps(good).encode(), "f").active == "k1"
    for bad, why in (
        (b"{", "not JSON"),
        (json.dumps({"active": "k9", "keys": good["keys"]}).encode(), '"active" must name'),
        (json.dumps({"active": "k1", "keys": {"k1": "c2hvcnQ="}}).encode(), "32 bytes"),
        (json.dumps({"keys": {}}).encode(), "expected"),
    ):
        with pytest.raises(Exception) as info:
            parse_key_ring(bad, "ring.json")
        msg = str(info.value)
        assert why in msg and "ring.json" in msg and "\n" not in msg


def test_a_decoded_chunk_cut_at_a_batch_boundary_in_the_cache_is_refused(tmp_path: Path) -> None:
    """The cache holds decoded chunks, with no stored length to check a file against: a
    cache file cut after its first batch (every batch still verifies) is refused at the
    read (RemoteCorruptionError), dropped, and the next read fetches the chunk again."""
    storage = LocalDirStorage(tmp_path / "bucket")
    big: dict[str, Any] = {"compression": "zstd", "chunk_bytes": 20_000}  # chunks of a few batches
    tlog = open_log(tmp_path / "log", storage, **big)
    produce(tlog, 600)
    read_all(tlog, 600)
    tlog.close()
    cache = tmp_path / "log" / naming.REMOTE_DIR / naming.CHUNK_CACHE_DIR
    files = sorted(cache.iterdir())
    assert files
    cut = 0
    for f in files:  # the cached chunk of offset 0 (several batches) cut after its first
        data = f.read_bytes()
        base, first, _ = batch_header(data)
        if base == 0:
            assert first < len(data)
            f.write_bytes(data[:first])
            cut += 1
    assert cut == 1
    tlog = open_log(tmp_path / "log", storage, **big)
    try:
        with pytest.raises(RemoteCorruptionError) as info:
            tlog.read_range(0, 600, 1 << 20)
        assert "before" in info.value.message
        read_all(tlog, 600)  # fetched again, whole
    finally:
        tlog.close()


def test_a_node_reads_its_own_encrypted_copies_without_their_manifests(
    tmp_path: Path, storage: RemoteStorage
) -> None:
    """The node that copied encrypted segments keeps their wrapped data keys
    (``remote/data-keys``): a log opened afresh (no cached chunk, no key in memory)
    reads every archived record with the manifests gone from the bucket; without that
    file it needs them, and says which object it could not read."""
    ring_file = tmp_path / "ring.json"
    write_ring(ring_file, "k1", {"k1": K1})
    tlog = open_log(tmp_path / "log", storage, KeyRing(ring_file))
    try:
        produce(tlog, 3000)
    finally:
        tlog.close()
    keys_file = tmp_path / "log" / naming.REMOTE_DIR / "data-keys"
    kept = [json.loads(line) for line in keys_file.read_text().splitlines()]
    data_objects = objects(storage, naming.LOG_SUFFIX)
    assert sorted(k["object"] for k in kept) == data_objects and len(data_objects) > 2
    assert {k["key_id"] for k in kept} == {"k1"}
    storage.delete(objects(storage, ".rli"))  # the manifests, gone
    cache = tmp_path / "log" / naming.REMOTE_DIR / naming.CHUNK_CACHE_DIR
    shutil.rmtree(cache)
    tlog = open_log(tmp_path / "log", storage, KeyRing(ring_file))
    try:
        read_all(tlog, 3000)
    finally:
        tlog.close()
    shutil.rmtree(cache)
    keys_file.unlink()
    tlog = open_log(tmp_path / "log", storage, KeyRing(ring_file))
    try:
        with pytest.raises(TieredLogError, match=r"\.rli"):
            tlog.read_range(0, 10, 1 << 20)
    finally:
        tlog.close()
