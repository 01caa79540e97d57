"""The remote tier against a bucket that fails on purpose (the in-memory fake store):
torn and refused uploads are cleaned up and copied again, a cleanup that fails is
finished on the next round (partial uploads included), a missing object reads as
RemoteObjectNotFoundError, a slow bucket as RemoteTimeoutError until it answers."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import pytest

from tiered_log import (
    LogConfig,
    ProducerRecord,
    Record,
    RemoteObjectNotFoundError,
    RemoteStorageError,
    TierConfig,
    TieredLog,
)
from tiered_log.errors import RemoteTimeoutError
from tiered_log.format import naming

from .fake_store import MemoryStorage

SMALL = LogConfig(segment_bytes=16 * 1024, index_interval_bytes=512)
N = 600  # records: six sealed segments of 100 and an empty active one after roll()


def value_for(offset: int) -> bytes:
    return hashlib.sha256(str(offset).encode()).digest() * 4  # 128 bytes: 100 a segment


def open_log(path: Path, store: MemoryStorage, **tier: int) -> TieredLog:
    cfg: dict[str, Any] = {
        "chunk_bytes": 2048,
        "fetch_bytes": 8192,
        "prefetch_bytes": 8192,
        "local_retention_bytes": 0,
        **tier,
    }
    return TieredLog(
        path,
        log_id="orders-0",
        storage=store,
        config=SMALL,
        tier=TierConfig(**cfg),
        start_shipper=False,
    )


def produce(tlog: TieredLog, n: int) -> None:
    start = tlog.next_offset
    for lo in range(start, start + n, 50):
        tlog.append_batch(
            [
                ProducerRecord(value_for(o), timestamp=1_000 + o)
                for o in range(lo, min(lo + 50, start + n))
            ]
        )
    tlog.flush()


def read_all(tlog: TieredLog, start: int, end: int) -> list[Record]:
    out: list[Record] = []
    o = start
    while o < end:
        got = tlog.read_range(o, max_records=77, max_bytes=64 * 1024)
        assert got and got[0].offset == o
        out.extend(got)
        o = got[-1].offset + 1
    return out


def check_everything_reads(tlog: TieredLog, end: int) -> None:
    recs = read_all(tlog, 0, end)
    assert [r.offset for r in recs] == list(range(end))
    assert all(r.value == value_for(r.offset) for r in recs)


def written_keys(store: MemoryStorage) -> set[str]:
    return {k for op, k in store.calls if op in ("put", "put_file") and "/segments/" in k}


@pytest.fixture
def store() -> MemoryStorage:
    return MemoryStorage()


@pytest.fixture
def tlog(tmp_path: Path, store: MemoryStorage) -> TieredLog:
    t = open_log(tmp_path / "log", store)
    produce(t, N)
    t.roll()
    return t


def segment_keys(store: MemoryStorage) -> list[str]:
    """The stored keys of segment copies (not the log's metadata, which holds the
    offsets reserved before the appends)."""
    return [k for k in store.stored_keys() if "/segments/" in k]


def test_a_torn_data_upload_is_cleaned_up_and_copied_again(
    store: MemoryStorage, tlog: TieredLog
) -> None:
    # The first segment's upload: two copies are in flight, and a tear of the other one
    # would let the first finish (its objects then rightly stay).
    store.inject("put_file", naming.segment_object_key("orders-0", 0, "", ""), torn_at=4096)
    with pytest.raises(RemoteStorageError):
        tlog.tier_once()
    failed = written_keys(store)
    assert failed  # the torn copy and any started beside it
    assert segment_keys(store) == []  # every object they put was deleted
    assert store.partial_keys() == []  # and the torn upload's leftover discarded at once
    b = tlog.bounds()
    assert b.remote_end_offset == 0 and b.local_start_offset == 0  # nothing dropped locally

    assert tlog.tier_once() == 6
    segment_objects = [k for k in store.stored_keys() if "/segments/" in k]
    assert len(segment_objects) == 12  # one .log and one .rli per segment
    assert not failed & set(segment_objects)  # copied again under new ids
    b = tlog.bounds()
    assert b.remote_end_offset == b.local_start_offset == N
    check_everything_reads(tlog, N)
    tlog.close()


def test_a_refused_manifest_put_is_cleaned_up_and_copied_again(
    store: MemoryStorage, tlog: TieredLog
) -> None:
    refused: list[str] = []

    def refuse_first_manifest(op: str, key: str) -> None:
        # The first segment's: two copies are in flight, and the other one's manifest
        # may be put first (that copy would then finish, and its objects stay).
        if op == "put" and key.endswith(".rli") and "/00000000000000000000-" in key and not refused:
            refused.append(key)
            raise RemoteStorageError("503 Slow Down (injected)", retriable=True)

    store.before = refuse_first_manifest
    with pytest.raises(RemoteStorageError, match="Slow Down"):
        tlog.tier_once()
    assert segment_keys(store) == []
    assert tlog.tier_once() == 6
    assert refused[0] not in store.stored_keys()
    check_everything_reads(tlog, N)
    tlog.close()


def test_a_failed_cleanup_is_finished_next_round_partial_uploads_included(
    store: MemoryStorage, tlog: TieredLog
) -> None:
    store.inject("put_file", torn_at=4096)
    store.inject("delete", error=RemoteStorageError("delete refused", retriable=True), times=None)
    with pytest.raises(RemoteStorageError):
        tlog.tier_once()
    assert store.partial_keys() == []  # the torn upload's leftovers: discarded at once
    assert store.stored_keys()  # objects the refused cleanup could not delete
    # Copies run side by side: one that finished before the torn one failed stays.
    _, _, finished = tlog.remote_segments(0)
    stems = {s["object_key"].rsplit(".", 1)[0] for s in finished}
    kept = {k for k in store.stored_keys() if k.rsplit(".", 1)[0] in stems}
    failed = written_keys(store) - kept
    store.plan.clear()

    assert tlog.tier_once() == 6 - len(finished)
    assert store.partial_keys() == []
    assert not failed & set(store.stored_keys())
    assert len([k for k in store.stored_keys() if "/segments/" in k]) == 12
    check_everything_reads(tlog, N)
    tlog.close()


def test_a_missing_object_reads_as_not_found(store: MemoryStorage, tlog: TieredLog) -> None:
    assert tlog.tier_once() == 6
    produce(tlog, 10)  # local records after the archived ones
    first = next(
        k for k in store.stored_keys() if "/00000000000000000000-" in k and k.endswith(".log")
    )
    store.lose(first)
    with pytest.raises(RemoteObjectNotFoundError) as exc_info:
        tlog.read_range(0, max_records=10)
    assert exc_info.value.retriable is False
    # The other archived segments and the local records still serve.
    assert [r.offset for r in read_all(tlog, 100, N + 10)] == list(range(100, N + 10))
    tlog.close()


def test_an_injected_miss_is_not_remembered(store: MemoryStorage, tlog: TieredLog) -> None:
    assert tlog.tier_once() == 6
    store.inject("get", "", missing=True, times=None)
    with pytest.raises(RemoteObjectNotFoundError):
        tlog.read_range(250, max_records=10)
    store.plan.clear()
    check_everything_reads(tlog, N)
    tlog.close()


def test_a_slow_bucket_times_out_the_reader_then_serves(
    tmp_path: Path, store: MemoryStorage
) -> None:
    tlog = open_log(tmp_path / "log", store, fetch_max_wait_ms=200)
    produce(tlog, N)
    tlog.roll()
    assert tlog.tier_once() == 6
    store.inject("get", "", delay=2.0, times=None)
    t0 = time.monotonic()
    with pytest.raises(RemoteTimeoutError) as exc_info:
        tlog.read_range(0, max_records=10)
    # It gave up at its 200 ms wait rather than waiting out the 2 s get (the margin is
    # for a loaded machine: this is not a speed check).
    assert time.monotonic() - t0 < 1.8
    assert exc_info.value.retriable is True
    store.plan.clear()
    time.sleep(2.2)  # the fetch that timed out goes on and lands
    check_everything_reads(tlog, N)
    tlog.close()


def test_an_encoded_copy_is_built_in_the_remote_directory_and_a_crashs_is_removed(
    tmp_path: Path, store: MemoryStorage
) -> None:
    """A compressed copy is built in the log's remote directory, never beside the
    segments (the local log's open removes temp files there, and a check of a live
    directory took it for a leftover); one a crash left there goes at the next open."""
    log_dir = tmp_path / "log"
    seen: list[tuple[list[str], list[str]]] = []

    def look(op: str, key: str) -> None:
        if op == "put_file":
            seen.append(
                (
                    [p.name for p in log_dir.iterdir() if p.name.endswith(".tmp")],
                    [p.name for p in (log_dir / "remote").glob("*.archive.tmp")],
                )
            )

    store.before = look
    t = open_log(log_dir, store, compression="zstd")  # type: ignore[arg-type]
    produce(t, 200)
    t.roll()
    assert t.tier_once() == 2
    assert seen and all(beside == [] and built for beside, built in seen)  # two in flight
    assert list((log_dir / "remote").glob("*.archive.tmp")) == []
    t.close()
    leftover = log_dir / "remote" / "00000000000000000000.log.0123.archive.tmp"
    leftover.write_bytes(b"half an encoded copy")
    t = open_log(log_dir, store, compression="zstd")  # type: ignore[arg-type]
    assert not leftover.exists()
    check_everything_reads(t, 200)
    t.close()
