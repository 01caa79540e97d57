"""The Spark source's column decoding: the numpy fast path against the general path.

:func:`tiered_log.spark.columns.chunk_columns` takes a fast path (vectorised varint
reads, Arrow arrays built from views into the decoded bytes) when every record of a
buffer is one it handles, and the general path (``decode_columns``, which uses
aiokafka's C reader when it imports, and the Python walk when not) otherwise. Both
must give the same columns for the same bytes, and damage must raise what the general
path raises. No SparkSession here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence

import pyarrow as pa
import pytest

from tiered_log.errors import CorruptRecordError
from tiered_log.format.batch import LegacyFormatError
from tiered_log.format.batch_encode import encode_batch
from tiered_log.format.kafka import native
from tiered_log.format.records import ProducerRecord, batch_table, decode_columns
from tiered_log.spark import columns as C
from tiered_log.spark.columns import ChunkColumns, chunk_columns

NOW = 1_700_000_000_000


@pytest.fixture(params=[True, False], ids=["c-reader", "python-reader"])
def reader(request: pytest.FixtureRequest) -> Iterator[None]:
    """The general path with aiokafka's C reader and with the Python walk."""
    if request.param and not native.AVAILABLE:
        pytest.skip("aiokafka's C reader is not importable")
    was = native.ENABLED
    native.ENABLED = request.param
    try:
        yield
    finally:
        native.ENABLED = was


def _batches(
    records: Sequence[ProducerRecord],
    *,
    base: int = 0,
    compression: str | None = None,
    log_append_time: bool = False,
    per_batch: int = 50,
) -> bytes:
    out = bytearray()
    for i in range(0, len(records), per_batch):
        enc = encode_batch(
            base + i,
            records[i : i + per_batch],
            NOW,
            1 << 30,
            compression=compression,
            log_append_time=log_append_time,
        )
        out += enc.data
    return bytes(out)


def _as_lists(c: ChunkColumns) -> tuple[object, ...]:
    return (
        c.offsets.tolist(),
        c.timestamps.tolist(),
        c.keys.to_pylist(),
        c.values.to_pylist(),
        c.headers,
        c.end,
        c.keys.type,
        c.values.type,
    )


def _expected(data: bytes) -> tuple[object, ...]:
    """What decode_columns gives, in the same shape."""
    cols = decode_columns(data)
    return (
        cols.offsets,
        cols.timestamps,
        [None if k is None else bytes(k) for k in cols.keys],
        [None if v is None else bytes(v) for v in cols.values],
        cols.headers if any(cols.headers) else None,
        cols.end,
        pa.binary(),
        pa.binary(),
    )


def _took_fast(data: bytes) -> bool:
    return C._fast(data) is not None


def _mixed(n: int, seed: int) -> list[ProducerRecord]:
    """Values and keys of 0..20,000 bytes (one-, two- and three-byte varint lengths,
    inline and out-of-line views), null and empty ones, timestamps far apart."""
    rnd = __import__("random").Random(seed)
    out = []
    for i in range(n):
        size = rnd.choice([0, 1, 5, 12, 13, 60, 63, 64, 65, 200, 1024, 8191, 8192, 20_000])
        value = None if i % 11 == 3 else os.urandom(size)
        ksize = rnd.choice([0, 3, 12, 13, 70, 300])
        key = None if i % 3 == 0 else os.urandom(ksize)
        ts = NOW + rnd.choice([0, 1, -5, 63, 64, 10_000, 3_000_000_000, -(10**9)])
        out.append(ProducerRecord(value, key=key, timestamp=ts))
    return out


@pytest.mark.parametrize("compression", [None, "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("log_append_time", [False, True])
def test_fast_path_matches_the_general_path(
    reader: None, compression: str | None, log_append_time: bool
) -> None:
    data = _batches(
        _mixed(400, 7), base=12_345, compression=compression, log_append_time=log_append_time
    )
    assert _took_fast(data)
    fast = chunk_columns(data)
    general = chunk_columns(data, fast=False)
    assert _as_lists(fast) == _as_lists(general) == _expected(data)


def test_fast_path_of_the_benchmark_shape(reader: None) -> None:
    """1 KiB values, no keys: the shape perf spark-scan reads."""
    pool = os.urandom(4096)
    recs = [
        ProducerRecord(pool[i % 3000 : i % 3000 + 1024], timestamp=NOW + i) for i in range(3000)
    ]
    data = _batches(recs, per_batch=1000)
    assert _took_fast(data)
    assert _as_lists(chunk_columns(data)) == _expected(data)


def test_mixed_plain_and_compressed_batches(reader: None) -> None:
    recs = _mixed(300, 11)
    data = (
        _batches(recs[:100])
        + _batches(recs[100:200], base=100, compression="zstd")
        + _batches(recs[200:], base=200)
    )
    assert _took_fast(data)
    assert _as_lists(chunk_columns(data)) == _expected(data)


def test_headers_take_the_general_path(reader: None) -> None:
    recs = _mixed(120, 3)
    recs[40] = ProducerRecord(b"v", key=b"k", headers=(("h", b"x"), ("e", None)), timestamp=NOW)
    data = _batches(recs)
    assert not _took_fast(data)
    got = chunk_columns(data)
    assert got.headers is not None and got.headers[40] == (("h", b"x"), ("e", None))
    assert _as_lists(got) == _expected(data)


def test_torn_tail_and_empty_buffer(reader: None) -> None:
    data = _batches(_mixed(100, 5))
    torn = data[:-10]
    got = chunk_columns(torn)
    assert _as_lists(got) == _expected(torn)
    assert got.end < len(torn)
    empty = chunk_columns(b"")
    assert empty.rows == 0 and empty.end == 0


def test_all_null_values_and_keys(reader: None) -> None:
    data = _batches([ProducerRecord(None, timestamp=NOW + i) for i in range(70)])
    assert _took_fast(data)
    got = chunk_columns(data)
    assert got.values.null_count == 70 and got.keys.null_count == 70
    assert _as_lists(got) == _expected(data)


def _general_error(data: bytes) -> tuple[type[BaseException], str]:
    with pytest.raises(CorruptRecordError) as info:
        decode_columns(data)
    return type(info.value), str(info.value)


def test_a_damaged_batch_raises_what_the_general_path_raises(reader: None) -> None:
    data = bytearray(_batches(_mixed(200, 9)))
    data[len(data) // 2] ^= 0x40  # inside some batch: its CRC no longer matches
    want = _general_error(bytes(data))
    with pytest.raises(CorruptRecordError) as info:
        chunk_columns(bytes(data))
    assert (type(info.value), str(info.value)) == want
    assert "CRC" in want[1]


def test_batches_out_of_sequence_raise_what_the_general_path_raises(reader: None) -> None:
    """A damaged base offset (outside the CRC): every CRC holds, the sequence does not."""
    two = _batches([ProducerRecord(value=b"v%d" % i) for i in range(40)], per_batch=20)
    data = bytearray(two)
    second = batch_table(two, 0)[0][1].position
    data[second + 7] ^= 0x01  # the second batch's baseOffset: 20 -> 21
    want = _general_error(bytes(data))
    with pytest.raises(CorruptRecordError) as info:
        chunk_columns(bytes(data))
    assert (type(info.value), str(info.value)) == want
    assert "expected one at 20" in want[1]
    assert list(chunk_columns(two).offsets) == list(range(40))


def test_records_that_do_not_parse_raise_what_the_general_path_raises(reader: None) -> None:
    """A batch whose CRC is right but whose records are malformed (written so by a
    broken producer): the fast path declines it and the general path names the fault."""
    from crc32c import crc32c

    from tiered_log.format.batch import ATTRIBUTES_AT, CRC_AT, HEADER_SIZE

    data = bytearray(_batches([ProducerRecord(b"abcdef", timestamp=NOW)] * 3))
    data[HEADER_SIZE] = 0x7E  # the first record's length: 63, past the section's end
    data[CRC_AT : CRC_AT + 4] = crc32c(bytes(data[ATTRIBUTES_AT:])).to_bytes(4, "big")
    assert not _took_fast(bytes(data))
    want = _general_error(bytes(data))
    with pytest.raises(CorruptRecordError) as info:
        chunk_columns(bytes(data))
    assert (type(info.value), str(info.value)) == want


def test_legacy_format_is_refused_as_before() -> None:
    from tiered_log.format.legacy import LegacyRecord, encode_legacy_batch

    old = encode_legacy_batch(0, [LegacyRecord(i, NOW, None, b"x") for i in range(3)])
    with pytest.raises(LegacyFormatError):
        decode_columns(old)
    with pytest.raises(LegacyFormatError):
        chunk_columns(old)


def test_the_heap_is_frozen_only_in_a_reused_spark_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside a reused Spark worker (here: a test process) reading a split leaves the
    garbage collector alone."""
    import gc

    from tiered_log.spark import reading

    monkeypatch.delenv("SPARK_REUSE_WORKER", raising=False)
    monkeypatch.setattr(reading, "_frozen", False)
    before = gc.get_freeze_count()
    assert list(reading._then_freeze(iter([1, 2]))) == [1, 2]
    assert gc.get_freeze_count() == before and not reading._frozen
