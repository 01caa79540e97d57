"""The remote tier on Kafka record batches (v2): null and empty values and keys, and
batches a client compressed, shipped to the bucket, read back from it after the local
copies are gone (records and stored batches, byte for byte), rebuilt from the bucket on
an empty disk; the manifests name the batch format, and a bucket of tiered_log's former
format is refused with one line, never misread.

Runs against both backends: the local-directory store and S3 through moto's server.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path

import pytest
import xxhash

from tiered_log import LogConfig, ProducerRecord
from tiered_log.cli import main
from tiered_log.errors import CorruptRecordError
from tiered_log.format import kafka, naming
from tiered_log.format.kafka import Compression, NewRecord
from tiered_log.format.legacy import LegacyRecord, encode_legacy_batch
from tiered_log.format.records import receive_batches
from tiered_log.partition import TieredLog
from tiered_log.remote.fs import LocalDirStorage
from tiered_log.remote.manifest import BATCH_FORMAT, _with_checksum, decode_manifest
from tiered_log.remote.snapshot import MAGIC, read_snapshot, snapshot_key
from tiered_log.remote.storage import RemoteStorage
from tiered_log.remote.tier import TierConfig

SMALL = LogConfig(segment_bytes=16 * 1024, index_interval_bytes=512)
THRESHOLD = 1 << 20
TS0 = 1_700_000_000_000


def open_log(path: Path, storage: RemoteStorage, **tier: object) -> TieredLog:
    cfg = {"chunk_bytes": 2048, "fetch_bytes": 8192, "prefetch_bytes": 8192, **tier}
    return TieredLog(
        path,
        log_id="events-0",
        storage=storage,
        config=SMALL,
        tier=TierConfig(**cfg),  # type: ignore[arg-type]
        start_shipper=False,
    )


def expected(o: int) -> tuple[bytes | None, bytes | None]:
    """``(key, value)`` of offset ``o``: every fourth value null (a tombstone), every
    fourth empty; keys null, empty or text in turn."""
    value = None if o % 4 == 0 else b"" if o % 4 == 1 else f"value-{o}-".encode() * 8
    key = None if o % 3 == 0 else b"" if o % 3 == 1 else f"k{o}".encode()
    return key, value


def fill(tlog: TieredLog, n: int) -> list[bytes]:
    """``n`` records in batches of 20: even batches through ``append_batch`` (encoded
    here), odd ones as a client's zstd-compressed Kafka batches. Returns the compressed
    batches as sent."""
    sent: list[bytes] = []
    for lo in range(0, n, 20):
        offs = range(lo, min(lo + 20, n))
        if (lo // 20) % 2 == 0:
            tlog.append_batch(
                [
                    ProducerRecord(expected(o)[1], key=expected(o)[0], timestamp=TS0 + o)
                    for o in offs
                ]
            )
            continue
        raw = kafka.encode_batch(
            [
                NewRecord(
                    expected(o)[1],
                    expected(o)[0],
                    (("h", None), ("o", str(o).encode())),
                    TS0 + o,
                )
                for o in offs
            ],
            compression=Compression.ZSTD,
        )
        sent.append(raw)
        assert tlog.append_batch(receive_batches(raw, THRESHOLD)) == (offs[0], offs[-1])
    tlog.flush()
    return sent


def check_all(tlog: TieredLog, n: int) -> None:
    o = 0
    while o < n:
        recs = tlog.read_range(o, max_records=37, max_bytes=1 << 20)
        assert recs and recs[0].offset == o
        for r in recs:
            assert (r.key, r.value, r.timestamp) == (*expected(r.offset), TS0 + r.offset)
            if (r.offset // 20) % 2:
                assert r.headers == (("h", None), ("o", str(r.offset).encode()))
            else:
                assert r.headers == ()
        o = recs[-1].offset + 1


def test_null_values_and_zstd_batches_read_back_from_the_bucket(
    tmp_path: Path, storage: RemoteStorage
) -> None:
    n = 600
    tlog = open_log(tmp_path / "log", storage, local_retention_bytes=0)
    sent = fill(tlog, n)
    tlog.roll()
    assert tlog.tier_once() >= 2
    b = tlog.bounds()
    assert b.local_start_offset == b.remote_end_offset == n  # nothing left on local disk
    check_all(tlog, n)
    for o in (0, 1, 2, 21, 599):  # random access (a null value, an empty one, compressed)
        r = tlog.read(o)
        assert (r.key, r.value) == expected(o)

    # The stored batches come back as the client sent them: the CRC-covered bytes (from
    # attributes on: codec, timestamps, producer fields, compressed records) unchanged,
    # only baseOffset and partitionLeaderEpoch stamped by the log.
    got: list[kafka.KafkaBatch] = []
    o = 0
    while o < n:
        page = tlog.read_remote_batches(o, 10_000, 1 << 20)
        batches = list(kafka.iter_batches(page.data))
        assert batches
        got.extend(batches)
        o = page.next_offset
    compressed = [bt for bt in got if bt.header.compression == Compression.ZSTD]
    assert [bytes(bt.data[kafka.layout.ATTRIBUTES_AT :]) for bt in compressed] == [
        raw[kafka.layout.ATTRIBUTES_AT :] for raw in sent
    ]
    assert [bt.header.base_offset for bt in compressed] == list(range(20, n, 40))
    assert all(bt.header.compression == Compression.NONE for bt in got if bt not in compressed)
    tlog.close()

    # An empty disk: everything rebuilt from the bucket alone, read back the same.
    again = open_log(tmp_path / "fresh", storage)
    assert again.bounds().remote_end_offset == n
    check_all(again, n)
    again.close()


def manifests(storage: RemoteStorage) -> list[str]:
    return sorted(
        i.key
        for i in storage.list(naming.segment_objects_prefix("events-0"))
        if i.key.endswith(naming.RLI_SUFFIX)
    )


def test_manifests_name_the_batch_format(tmp_path: Path, storage: RemoteStorage) -> None:
    tlog = open_log(tmp_path / "log", storage, local_retention_bytes=0)
    fill(tlog, 200)
    tlog.roll()
    tlog.tier_once()
    tlog.close()
    keys = manifests(storage)
    assert keys
    for key in keys:
        blob = storage.get(key)
        assert json.loads(blob.partition(b"\n")[0])["batch_format"] == BATCH_FORMAT == "kafka-v2"
        decode_manifest(blob, key)  # checks out


def _as_old_manifest(blob: bytes) -> bytes:
    """The manifest as the former format's code wrote it: no ``batch_format`` (its
    checksum made again, so that only the format tells it apart)."""
    head, _, rest = blob.partition(b"\n")
    fields = json.loads(head)
    del fields["batch_format"]
    return _with_checksum(fields, rest)


def test_a_bucket_of_the_former_format_is_refused_not_misread(tmp_path: Path) -> None:
    """Manifests without ``batch_format`` (the bucket of an earlier version): a rebuild
    from the bucket refuses it in one line naming the format and what to do, and
    deletes, repairs or journals nothing because of it."""
    storage = LocalDirStorage(tmp_path / "bucket")
    tlog = open_log(tmp_path / "log", storage, local_retention_bytes=0)
    fill(tlog, 200)
    tlog.roll()
    tlog.tier_once()
    tlog.close()
    storage.delete([snapshot_key("events-0")])
    for key in manifests(storage):
        storage.put(key, _as_old_manifest(storage.get(key)))
    before = {i.key: storage.get(i.key) for i in storage.list("")}

    with pytest.raises(CorruptRecordError) as err:
        open_log(tmp_path / "fresh", storage)
    message = err.value.message
    assert "\n" not in message
    assert "former 'TB' record batch format" in message
    assert "re-import" in message and "Kafka record batches (v2)" in message
    assert {i.key: storage.get(i.key) for i in storage.list("")} == before


def test_a_snapshot_of_the_former_format_is_refused(tmp_path: Path) -> None:
    storage = LocalDirStorage(tmp_path / "bucket")
    tlog = open_log(tmp_path / "log", storage, local_retention_bytes=0)
    fill(tlog, 200)
    tlog.roll()
    tlog.tier_once()
    tlog.close()
    assert read_snapshot(storage, "events-0") is not None  # the round wrote one
    data = storage.get(snapshot_key("events-0"))
    body = json.loads(zlib.decompress(data[len(MAGIC) + 17 :]))
    assert body["batch_format"] == BATCH_FORMAT
    del body["batch_format"]
    packed = zlib.compress(json.dumps(body).encode())
    storage.put(
        snapshot_key("events-0"),
        MAGIC + xxhash.xxh3_64_hexdigest(packed).encode() + b"\n" + packed,
    )
    with pytest.raises(CorruptRecordError, match=r"partition snapshot .* former 'TB'"):
        open_log(tmp_path / "fresh", storage)


def test_a_chunk_of_the_former_format_is_refused_by_the_reader(tmp_path: Path) -> None:
    """A data object whose bytes are the former format's (its manifest and the local
    remote index as they were): a read of it says so, in one line, and returns nothing."""
    storage = LocalDirStorage(tmp_path / "bucket")
    tlog = open_log(tmp_path / "log", storage, local_retention_bytes=0, chunk_bytes=1 << 20)
    fill(tlog, 40)
    tlog.roll()
    tlog.tier_once()
    assert tlog.bounds().local_start_offset == 40
    _, _, segments = tlog.remote_segments(0)
    assert len(segments) == 1
    data_key = segments[0]["object_key"]
    old = encode_legacy_batch(0, [LegacyRecord(o, TS0 + o, None, b"v" * 30) for o in range(40)])
    stored = storage.get(data_key)
    storage.put(data_key, old + b"\0" * max(0, len(stored) - len(old)))
    with pytest.raises(CorruptRecordError) as err:
        tlog.read_range(0, 10, 1 << 20)
    assert "former 'TB' record batch format" in err.value.message
    assert "\n" not in err.value.message
    tlog.close()


def test_dump_reads_a_data_object_and_a_cached_chunk(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``tiered-log dump`` of a segment's data object as the bucket stores it (chunks
    compressed into frames: decoded first) and of a cached chunk (``--type log``): the
    Kafka batches, their records, nulls as ``null``."""
    storage = LocalDirStorage(tmp_path / "bucket")
    tlog = open_log(tmp_path / "log", storage, local_retention_bytes=0, compression="zstd")
    fill(tlog, 120)
    tlog.roll()
    tlog.tier_once()
    check_all(tlog, 120)  # fills the chunk cache
    tlog.close()
    (data_object, *_) = sorted((tmp_path / "bucket").rglob("00000000000000000000-*.log"))
    assert main(["dump", str(data_object), "--print-data"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "(remote data object, " in out[0] and "framed chunk" in out[0]
    assert out[0].endswith("segment base offset 0)")
    assert out[1] == "Log starting offset: 0"
    assert out[2].startswith("baseOffset: 0 lastOffset: 19 count: 20 ")
    assert " compresscodec: none " in out[2] and out[2].endswith("isvalid: true")
    assert out[3].startswith(f"| offset: 0 CreateTime: {TS0} keySize: -1 valueSize: -1 ")
    assert out[3].endswith("key: null payload: null")
    zstd = [line for line in out if line.startswith("baseOffset: 20 ")]
    assert zstd and " compresscodec: zstd " in zstd[0]
    assert out[-1].endswith("; all batches verify")

    cache = tmp_path / "log" / naming.REMOTE_DIR / naming.CHUNK_CACHE_DIR
    chunk = next(p for p in sorted(cache.iterdir()) if p.read_bytes()[:8] == bytes(8))
    assert main(["dump", str(chunk), "--type", "log"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "(store, " in out[0]
    assert out[1].startswith("baseOffset: 0 lastOffset: 19 count: 20 ")
