"""The public surface of the local log: exports, config validation, bad input, closing.

Bad input must raise the library's own errors (subclasses of TieredLogError), never a
bare ValueError/TypeError/OSError, and must leave the log exactly as it was.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import tiered_log
from tiered_log import (
    CorruptRecordError,
    InvalidArgumentError,
    InvalidOffsetError,
    Log,
    LogClosedError,
    LogConfig,
    OffsetOutOfRangeError,
    ProducerRecord,
    RecordTooLargeError,
    TieredLogError,
)
from tiered_log.format import naming

from .helpers import fixed_record, read_all

# ---- exports ---------------------------------------------------------------------------

EXPECTED_ALL = [
    "AsyncLog",
    "CorruptIndexError",
    "CorruptRecordError",
    "DataLossError",
    "Headers",
    "InvalidArgumentError",
    "InvalidOffsetError",
    "InvalidTopicNameError",
    "Log",
    "LogBounds",
    "LogClosedError",
    "LogConfig",
    "LogInUseError",
    "OffsetOutOfRangeError",
    "ProducerRecord",
    "Record",
    "RecordTooLargeError",
    "RecoveryReport",
    "RemoteCorruptionError",
    "RemoteObjectNotFoundError",
    "RemoteStorage",
    "RemoteStorageError",
    "SegmentInfo",
    "TierConfig",
    "TierLimits",
    "TieredBounds",
    "TieredLog",
    "TieredLogError",
    "TopicError",
    "TopicExistsError",
    "TopicNotFoundError",
    "__version__",
    "open_storage",
]


def test_public_all_is_pinned() -> None:
    assert sorted(tiered_log.__all__) == EXPECTED_ALL
    for name in tiered_log.__all__:
        assert hasattr(tiered_log, name), name


def test_every_exported_error_derives_from_the_root() -> None:
    for name in tiered_log.__all__:
        obj = getattr(tiered_log, name)
        if isinstance(obj, type) and issubclass(obj, BaseException):
            assert issubclass(obj, TieredLogError), name


# ---- config validation -----------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"segment_bytes": 0}, id="segment_bytes-zero"),
        pytest.param({"segment_bytes": 63}, id="segment_bytes-below-64"),
        pytest.param({"segment_bytes": 1 << 31}, id="segment_bytes-too-large"),
        pytest.param({"segment_bytes": "64"}, id="segment_bytes-str"),
        pytest.param({"segment_bytes": True}, id="segment_bytes-bool"),
        pytest.param({"segment_bytes": 1024.0}, id="segment_bytes-float"),
        pytest.param({"segment_ms": 0}, id="segment_ms-zero"),
        pytest.param({"segment_ms": -2}, id="segment_ms-negative"),
        pytest.param({"index_interval_bytes": 0}, id="index_interval-zero"),
        pytest.param({"append_threshold": 0}, id="append_threshold-zero"),
        pytest.param({"append_threshold": None}, id="append_threshold-none"),
        pytest.param({"flush_messages": 0}, id="flush_messages-zero"),
        pytest.param({"flush_ms": -5}, id="flush_ms-negative"),
        pytest.param({"retention_ms": -2}, id="retention_ms-negative"),
        pytest.param({"retention_bytes": -7}, id="retention_bytes-negative"),
        pytest.param({"num_index_cached_read_segments": 0}, id="cache-zero"),
    ],
)
def test_config_rejects_bad_values(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        LogConfig(**kwargs)


def test_config_minus_one_means_no_limit() -> None:
    cfg = LogConfig(
        segment_ms=-1, flush_messages=-1, flush_ms=-1, retention_ms=-1, retention_bytes=-1
    )
    assert (
        cfg.segment_ms,
        cfg.flush_messages,
        cfg.flush_ms,
        cfg.retention_ms,
        cfg.retention_bytes,
    ) == (None, None, None, None, None)


def test_config_accepts_boundaries() -> None:
    cfg = LogConfig(
        segment_bytes=64,
        segment_ms=1,
        index_interval_bytes=1,
        append_threshold=1,
        flush_messages=1,
        flush_ms=0,
        retention_ms=0,
        retention_bytes=0,
        num_index_cached_read_segments=1,
    )
    assert cfg.segment_bytes == 64


def test_directory_that_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_bytes(b"x")
    with pytest.raises(InvalidArgumentError):
        Log.open(f)


# ---- bad appends -----------------------------------------------------------------------

THRESHOLD = 1024
# Deliberately ill-typed records (the validation under test): hence the type: ignores.
BAD_BATCHES = [
    pytest.param([], InvalidArgumentError, id="empty-batch"),
    pytest.param([b"x" * (THRESHOLD + 1)], RecordTooLargeError, id="oversized-bytes"),
    pytest.param(
        [ProducerRecord(b"x" * (THRESHOLD + 1))], RecordTooLargeError, id="oversized-record"
    ),
    pytest.param([ProducerRecord("text")], InvalidArgumentError, id="str-value"),  # type: ignore[arg-type]
    pytest.param([ProducerRecord(b"v", key="k")], InvalidArgumentError, id="str-key"),  # type: ignore[arg-type]
    pytest.param([ProducerRecord(b"v", key=5)], InvalidArgumentError, id="int-key"),  # type: ignore[arg-type]
    pytest.param(
        [ProducerRecord(b"v", headers=((b"n", b"v"),))],  # type: ignore[arg-type]
        InvalidArgumentError,
        id="bytes-header-name",
    ),
    pytest.param(
        [ProducerRecord(b"v", headers=(("n", "v"),))],  # type: ignore[arg-type]
        InvalidArgumentError,
        id="str-header-value",
    ),
    pytest.param(
        [ProducerRecord(b"v", headers=(("\ud800", b"v"),))],
        InvalidArgumentError,
        id="surrogate-header-name",
    ),
    pytest.param(
        [ProducerRecord(b"v", headers=(("n", b"v", b"extra"),))],  # type: ignore[arg-type]
        InvalidArgumentError,
        id="header-triple",
    ),
    pytest.param(
        [ProducerRecord(b"v", headers=(("n",),))],  # type: ignore[arg-type]
        InvalidArgumentError,
        id="header-single",
    ),
    pytest.param(
        [ProducerRecord(b"v", headers=("ab",))],  # type: ignore[arg-type]
        InvalidArgumentError,
        id="header-not-a-pair",
    ),
    pytest.param([ProducerRecord(b"v", headers=(5,))], InvalidArgumentError, id="header-int"),  # type: ignore[arg-type]
    pytest.param(
        [ProducerRecord(b"v", headers=tuple(("h", None) for _ in range(65536)))],
        InvalidArgumentError,
        id="too-many-headers",
    ),
    pytest.param([ProducerRecord(b"v", timestamp=-1)], InvalidArgumentError, id="negative-ts"),
    pytest.param([ProducerRecord(b"v", timestamp=1.5)], InvalidArgumentError, id="float-ts"),  # type: ignore[arg-type]
    pytest.param([ProducerRecord(b"v", timestamp=True)], InvalidArgumentError, id="bool-ts"),
    pytest.param([ProducerRecord(b"v", timestamp=1 << 62)], InvalidArgumentError, id="huge-ts"),
    pytest.param([1], InvalidArgumentError, id="int-item"),
    pytest.param(["text"], InvalidArgumentError, id="str-item"),
    pytest.param([bytearray(b"x")], InvalidArgumentError, id="bytearray-item"),
    pytest.param([b"ok", "text"], InvalidArgumentError, id="bad-record-after-good-one"),
    pytest.param([None], InvalidArgumentError, id="none-item"),
]


@pytest.mark.parametrize(("batch", "error"), BAD_BATCHES)
def test_bad_append_raises_own_error_and_changes_nothing(
    tmp_path: Path, batch: list[Any], error: type[Exception]
) -> None:
    with Log.open(tmp_path, LogConfig(append_threshold=THRESHOLD)) as log:
        log.append_batch([b"first", b"second"])
        before = (log.bounds(), log.size_bytes, [s.size for s in log.segments()])
        with pytest.raises(error):
            log.append_batch(batch)
        assert (log.bounds(), log.size_bytes, [s.size for s in log.segments()]) == before
        assert [r.value for r in read_all(log)] == [b"first", b"second"]
        assert log.append(b"third") == 2


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"value": b"x" * (THRESHOLD + 1)}, id="oversized"),
        pytest.param({"value": b"v", "key": "k"}, id="str-key"),
        pytest.param({"value": b"v", "headers": [("n", 1)]}, id="int-header-value"),
        pytest.param({"value": b"v", "headers": 5}, id="headers-int"),
        pytest.param({"value": b"v", "timestamp": "now"}, id="str-ts"),
    ],
)
def test_bad_single_append(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    with Log.open(tmp_path, LogConfig(append_threshold=THRESHOLD)) as log:
        with pytest.raises(InvalidArgumentError):
            log.append(**kwargs)
        assert log.next_offset == 0 and log.size_bytes == 0


def test_value_exactly_at_threshold_is_accepted(tmp_path: Path) -> None:
    with Log.open(tmp_path, LogConfig(append_threshold=THRESHOLD)) as log:
        off = log.append(b"x" * THRESHOLD)
        assert log.read(off).value == b"x" * THRESHOLD


# ---- bad reads -------------------------------------------------------------------------


@pytest.fixture
def ten_records(tmp_path: Path) -> Log:
    log = Log.open(tmp_path, LogConfig(segment_bytes=300))  # three records per segment
    for i in range(13):
        log.append_batch([fixed_record(i)])
    assert len(log.segments()) == 5
    return log


@pytest.mark.parametrize(
    ("call", "error"),
    [
        pytest.param(lambda log: log.read(-1), InvalidOffsetError, id="read-negative"),
        pytest.param(lambda log: log.read("3"), InvalidOffsetError, id="read-str"),
        pytest.param(lambda log: log.read(3.0), InvalidOffsetError, id="read-float"),
        pytest.param(lambda log: log.read(None), InvalidOffsetError, id="read-none"),
        pytest.param(lambda log: log.read(13), OffsetOutOfRangeError, id="read-next"),
        pytest.param(lambda log: log.read(14), OffsetOutOfRangeError, id="read-past-next"),
        pytest.param(lambda log: log.read(1 << 70), OffsetOutOfRangeError, id="read-huge"),
        pytest.param(lambda log: log.read_range(-5), InvalidOffsetError, id="range-negative"),
        pytest.param(lambda log: log.read_range(20), OffsetOutOfRangeError, id="range-past"),
        pytest.param(
            lambda log: log.read_range(0, max_records=0),
            InvalidArgumentError,
            id="range-zero-records",
        ),
        pytest.param(
            lambda log: log.read_range(0, max_bytes=0), InvalidArgumentError, id="range-zero-bytes"
        ),
        pytest.param(
            lambda log: log.read_range(0, max_records=-1),
            InvalidArgumentError,
            id="range-negative-records",
        ),
        pytest.param(
            lambda log: log.read_range(0, max_records="10"),
            InvalidArgumentError,
            id="range-str-records",
        ),
        pytest.param(
            lambda log: log.read_range(0, max_bytes=None),
            InvalidArgumentError,
            id="range-none-bytes",
        ),
        pytest.param(lambda log: log.truncate(-1), InvalidOffsetError, id="truncate-negative"),
        pytest.param(lambda log: log.truncate(14), OffsetOutOfRangeError, id="truncate-past"),
        pytest.param(lambda log: log.truncate("1"), InvalidOffsetError, id="truncate-str"),
        pytest.param(lambda log: log.segment_for(-1), InvalidOffsetError, id="segment-negative"),
        pytest.param(lambda log: log.segment_for(13), OffsetOutOfRangeError, id="segment-next"),
        pytest.param(
            lambda log: log.offset_for_timestamp("x"), InvalidArgumentError, id="timestamp-str"
        ),
        pytest.param(
            lambda log: log.offset_for_timestamp(None), InvalidArgumentError, id="timestamp-none"
        ),
        pytest.param(lambda log: log.reset(-3), InvalidOffsetError, id="reset-negative"),
    ],
)
def test_bad_read_arguments(ten_records: Log, call: Any, error: type[Exception]) -> None:
    log = ten_records
    before = (log.bounds(), log.size_bytes)
    with pytest.raises(error):
        call(log)
    assert (log.bounds(), log.size_bytes) == before
    assert len(read_all(log)) == 13
    log.close()


def test_out_of_range_error_carries_bounds(ten_records: Log) -> None:
    log = ten_records
    log.delete_segments_before(6)
    assert log.log_start_offset == 6
    for bad in (0, 5, 13, 99):
        with pytest.raises(OffsetOutOfRangeError) as info:
            log.read(bad)
        assert (info.value.log_start, info.value.next_offset) == (6, 13)
    with pytest.raises(OffsetOutOfRangeError):
        log.read_range(5)
    with pytest.raises(OffsetOutOfRangeError):
        log.truncate(5)
    with pytest.raises(OffsetOutOfRangeError):
        log.segment_for(2)
    assert log.read(6).value == fixed_record(6).value
    assert log.read_range(13) == []
    log.close()


# ---- empty or garbage segment files ----------------------------------------------------


def store(directory: Path, base: int) -> Path:
    return naming.segment_path(directory, base, naming.LOG_SUFFIX)


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"\x00" * 4096, id="zeros"),
        pytest.param(bytes(range(256)) * 3, id="garbage"),
        pytest.param(b"\xff" * 19, id="shorter-than-a-header"),
    ],
)
def test_only_segment_empty_or_garbage_recovers_empty(tmp_path: Path, content: bytes) -> None:
    store(tmp_path, 7).write_bytes(content)
    with Log.open(tmp_path) as log:
        assert log.recovery.truncated_bytes == len(content)
        assert (log.log_start_offset, log.next_offset) == (7, 7)
        assert log.read_range(7) == []
        with pytest.raises(OffsetOutOfRangeError):
            log.read(7)
        assert log.append(b"after") == 7
    assert store(tmp_path, 7).stat().st_size > 0
    with Log.open(tmp_path) as log:
        assert log.read(7).value == b"after"


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"\x00" * 300, id="zeros"),
        pytest.param(bytes(range(256)), id="garbage"),
    ],
)
def test_sealed_segment_empty_or_garbage_raises_own_error(tmp_path: Path, content: bytes) -> None:
    """A damaged sealed segment without index files can't be trusted: opening says so."""
    store(tmp_path, 0).write_bytes(content)
    store(tmp_path, 3).write_bytes(b"")
    with pytest.raises(CorruptRecordError):
        Log.open(tmp_path)


def test_sealed_store_overwritten_with_garbage_never_returns_data(tmp_path: Path) -> None:
    """Index files intact, store replaced by garbage of the same size: reads raise."""
    with Log.open(tmp_path, LogConfig(segment_bytes=300)) as log:
        for i in range(7):
            log.append_batch([fixed_record(i, ts=1000 + i)])
    sealed = store(tmp_path, 3)
    sealed.write_bytes(bytes((i * 7 + 3) % 251 for i in range(sealed.stat().st_size)))
    with Log.open(tmp_path, LogConfig(segment_bytes=300)) as log:
        for off in (3, 4, 5):
            with pytest.raises(CorruptRecordError):
                log.read(off)
        with pytest.raises(CorruptRecordError):
            read_all(log)
        with pytest.raises(TieredLogError):
            log.offset_for_timestamp(1003)
        assert log.offset_for_timestamp(1001) == 1
        assert [r.offset for r in log.read_range(0, max_records=3)] == [0, 1, 2]
        assert log.read(6).value == fixed_record(6).value


def test_foreign_files_are_ignored(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path / "123.log").write_bytes(b"not a segment name")
    (tmp_path / "subdir").mkdir()
    with Log.open(tmp_path) as log:
        assert log.next_offset == 0
        log.append(b"x")
    assert (tmp_path / "notes.txt").read_text() == "hello"
    assert (tmp_path / "123.log").exists()


# ---- closing ---------------------------------------------------------------------------

AFTER_CLOSE = [
    pytest.param(lambda log: log.append(b"x"), id="append"),
    pytest.param(lambda log: log.append_batch([b"x"]), id="append_batch"),
    pytest.param(lambda log: log.read(0), id="read"),
    pytest.param(lambda log: log.read_range(0), id="read_range"),
    pytest.param(lambda log: log.flush(), id="flush"),
    pytest.param(lambda log: log.roll(), id="roll"),
    pytest.param(lambda log: log.maybe_roll_by_age(), id="maybe_roll_by_age"),
    pytest.param(lambda log: log.truncate(0), id="truncate"),
    pytest.param(lambda log: log.reset(0), id="reset"),
    pytest.param(lambda log: log.offset_for_timestamp(0), id="offset_for_timestamp"),
    pytest.param(lambda log: log.delete_segments_before(100), id="delete_segments_before"),
]


@pytest.mark.parametrize("call", AFTER_CLOSE)
def test_log_closed_error_after_close(tmp_path: Path, call: Any) -> None:
    log = Log.open(tmp_path, LogConfig(segment_bytes=300))
    log.append_batch([fixed_record(i) for i in range(5)])
    log.roll()
    log.close()
    assert log.closed
    with pytest.raises(LogClosedError):
        call(log)
    log.close()  # idempotent
    with Log.open(tmp_path) as again:
        assert again.next_offset == 5


def test_async_log_closed(tmp_path: Path) -> None:
    from tiered_log import AsyncLog

    async def main() -> None:
        alog = AsyncLog(Log.open(tmp_path))
        await alog.append(b"x")
        await alog.close()
        with pytest.raises(LogClosedError):
            await alog.append(b"y")
        with pytest.raises(LogClosedError):
            await alog.read(0)

    asyncio.run(main())


def test_context_manager_closes(tmp_path: Path) -> None:
    with Log.open(tmp_path) as log:
        log.append(b"x")
    assert log.closed
    with pytest.raises(LogClosedError):
        log.append(b"y")


def test_one_open_log_per_directory(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tiered_log import LogInUseError

    log = Log.open(tmp_path / "l")
    log.append(b"x")
    with pytest.raises(LogInUseError):
        Log.open(tmp_path / "l")
    # Another process is refused too, with the library's error.
    code = (
        "import sys\nfrom tiered_log import Log, LogInUseError\n"
        "try:\n    Log.open(sys.argv[1])\nexcept LogInUseError:\n    sys.exit(3)\n"
    )
    p = subprocess.run([sys.executable, "-c", code, str(tmp_path / "l")], timeout=60)
    assert p.returncode == 3
    log.close()
    with Log.open(tmp_path / "l") as again:
        assert again.read(0).value == b"x"
