"""Round-trips of arbitrary records through the local log (hypothesis).

Whatever goes in (keys, values, headers, timestamps, batch shapes, segment and index
settings) comes out unchanged, before and after a reopen, through every read path.
"""

from __future__ import annotations

import itertools
import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tiered_log import Log, LogConfig, ProducerRecord, Record
from tiered_log.format import naming
from tiered_log.format.kafka.records import record_size

from .helpers import read_all, same_content

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

keys = st.none() | st.binary(max_size=40)
values = st.binary(max_size=600)  # b"" is a value; None (null) one too, below
header_values = st.none() | st.binary(max_size=30)
headers = st.lists(st.tuples(st.text(max_size=12), header_values), max_size=4).map(tuple)
timestamps = st.none() | st.integers(min_value=0, max_value=(1 << 62) - 1)

producer_records = st.builds(
    ProducerRecord, value=st.none() | values, key=keys, headers=headers, timestamp=timestamps
)
items = producer_records | values  # a bare bytes item is a value with no key or headers
batches = st.lists(st.lists(items, min_size=1, max_size=12), min_size=1, max_size=12)
configs = st.builds(
    LogConfig,
    segment_bytes=st.sampled_from([64, 200, 1000, 5000, 1 << 20]),
    index_interval_bytes=st.sampled_from([1, 64, 500, 4096]),
    num_index_cached_read_segments=st.sampled_from([1, 2, 64]),
)


def records_of(data: bytes, b: object) -> list[Record]:
    from tiered_log.format.records import BatchInfo, decode_records

    assert isinstance(b, BatchInfo)
    return decode_records(data, b.position, b.position + b.size)[0]


def as_producer(item: ProducerRecord | bytes) -> ProducerRecord:
    return item if isinstance(item, ProducerRecord) else ProducerRecord(item)


def check_matches(
    got: list[Record], want: list[ProducerRecord], start: int, t0: int, t1: int
) -> None:
    assert [r.offset for r in got] == list(range(start, start + len(want)))
    for rec, w in zip(got, want, strict=True):
        assert same_content(rec, w), (rec, w)
        if w.timestamp is None:
            assert t0 <= rec.timestamp <= t1
        # its bytes in the batch: as the first record of one, plus what its offset and
        # timestamp deltas take beyond one byte each
        alone = record_size(rec.key, rec.value, rec.headers)
        assert alone <= rec.size <= alone + 4 + 9 + 1


@SETTINGS
@given(batches=batches, config=configs)
def test_roundtrip_arbitrary_records(
    batches: list[list[ProducerRecord | bytes]], config: LogConfig
) -> None:
    with tempfile.TemporaryDirectory() as d:
        want: list[ProducerRecord] = []
        t0 = time.time_ns() // 1_000_000
        with Log.open(d, config) as log:
            for batch in batches:
                first, last = log.append_batch(batch)
                assert (first, last) == (len(want), len(want) + len(batch) - 1)
                want.extend(as_producer(x) for x in batch)
            t1 = time.time_ns() // 1_000_000
            assert log.next_offset == len(want)
            check_matches(read_all(log), want, 0, t0, t1)
            for off in range(0, len(want), max(1, len(want) // 7)):
                check_matches([log.read(off)], [want[off]], off, t0, t1)
            infos = log.segments()
            assert infos[0].base_offset == 0 and infos[-1].next_offset == len(want)
            for a, b in itertools.pairwise(infos):
                assert a.next_offset == b.base_offset and a.sealed and a.size > 0
                # a segment only exceeds segment_bytes if one batch alone did
                assert a.size <= config.segment_bytes or a.record_count <= max(map(len, batches))
            assert log.size_bytes == sum(i.size for i in infos)
        with Log.open(d, config) as log:
            assert log.recovery.truncated_bytes == 0
            assert log.next_offset == len(want)
            check_matches(read_all(log, max_records=3, max_bytes=700), want, 0, t0, t1)
            # appending after a reopen continues the sequence
            assert log.append(b"tail", key=b"k") == len(want)
            assert log.read(len(want)).key == b"k"


@SETTINGS
@given(
    ts_list=st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=60),
    config=configs,
    split=st.integers(min_value=1, max_value=7),
)
def test_timestamp_lookup_matches_brute_force(
    ts_list: list[int], config: LogConfig, split: int
) -> None:
    """offset_for_timestamp(t) is the first offset whose timestamp is >= t, even when
    timestamps go backwards; the same after a reopen and after the indexes are rebuilt."""

    def expected(t: int) -> int | None:
        return next((i for i, ts in enumerate(ts_list) if ts >= t), None)

    targets = sorted(
        {-1, 0, max(ts_list) + 1, *ts_list, *(t + 1 for t in ts_list), *(t - 1 for t in ts_list)}
    )
    recs = [
        ProducerRecord(bytes([i % 251]) * (1 + i % 50), timestamp=ts)
        for i, ts in enumerate(ts_list)
    ]
    with tempfile.TemporaryDirectory() as d:
        with Log.open(d, config) as log:
            for i in range(0, len(recs), split):
                log.append_batch(recs[i : i + split])
            for t in targets:
                assert log.offset_for_timestamp(t) == expected(t), t
        for p in Path(d).iterdir():  # force every index to be rebuilt from the stores
            if p.name.endswith((naming.INDEX_SUFFIX, naming.TIMEINDEX_SUFFIX)):
                p.unlink()
        with Log.open(d, config) as log:
            for t in targets:
                assert log.offset_for_timestamp(t) == expected(t), t
            assert [r.timestamp for r in read_all(log)] == ts_list


@SETTINGS
@given(
    sizes=st.lists(
        st.integers(min_value=1, max_value=400) | st.integers(min_value=4_000, max_value=30_000),
        min_size=1,
        max_size=40,
    ),
    segment_bytes=st.sampled_from([64, 300, 1000, 1 << 20]),
    interval=st.sampled_from([1, 100, 4096]),
    start=st.integers(min_value=0, max_value=39),
    max_records=st.integers(min_value=1, max_value=50),
    max_bytes=st.integers(min_value=1, max_value=5000)
    | st.integers(min_value=1, max_value=1 << 20),
    ascending=st.booleans(),
)
def test_read_range_limits_are_a_greedy_prefix(
    sizes: list[int],
    segment_bytes: int,
    interval: int,
    start: int,
    max_records: int,
    max_bytes: int,
    ascending: bool,
) -> None:
    """read_range returns the longest run from ``offset`` within both limits (record
    sizes summed), across segment boundaries, and always at least one record. (Ascending
    sizes: small records then big ones, where a guess from the mean size falls short.)"""
    if ascending:
        sizes = sorted(sizes)
    start = start % len(sizes)
    cfg = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=interval)
    with tempfile.TemporaryDirectory() as d, Log.open(d, cfg) as log:
        for i, n in enumerate(sizes):
            log.append(bytes([i]) * n)
        got = log.read_range(start, max_records=max_records, max_bytes=max_bytes)
        # each record is a batch of its own: its size is record_size's (deltas 0)
        rsize = [record_size(None, bytes([i]) * n) for i, n in enumerate(sizes)]
        assert [r.size for r in got] == [rsize[r.offset] for r in got]
        want = [start]
        used = rsize[start]
        for off in range(start + 1, len(sizes)):
            if len(want) >= max_records or used + rsize[off] > max_bytes:
                break
            want.append(off)
            used += rsize[off]
        assert [r.offset for r in got] == want
        assert all(r.value == bytes([r.offset]) * sizes[r.offset] for r in got)


@settings(max_examples=60, deadline=None)
@given(records=st.lists(items, min_size=1, max_size=30), cut=st.integers(min_value=0, max_value=60))
def test_decode_columns_matches_decode_records(
    records: list[ProducerRecord | bytes], cut: int
) -> None:
    """The columnar decoder (Spark's) sees exactly what the record decoder sees: the same
    fields, the same stop at a torn tail, the same refusal of a damaged batch."""
    from tiered_log import CorruptRecordError
    from tiered_log.format.records import decode_columns, decode_records, encode_batch

    data = encode_batch(5, records, 123, 1 << 20).data
    torn = data[: max(0, len(data) - cut)]
    recs, pos, _ = decode_records(torn)
    cols = decode_columns(torn)
    assert cols.end == pos
    assert cols.offsets == [r.offset for r in recs]
    assert cols.timestamps == [r.timestamp for r in recs]
    assert cols.keys == [r.key for r in recs]
    assert [None if v is None else bytes(v) for v in cols.values] == [r.value for r in recs]
    assert cols.headers == [r.headers for r in recs]
    damaged = bytearray(data)
    damaged[len(data) - 1] ^= 0x40  # the last byte of the last batch (under its CRC)
    with pytest.raises(CorruptRecordError):
        decode_records(bytes(damaged))
    with pytest.raises(CorruptRecordError):
        decode_columns(bytes(damaged))


@SETTINGS
@given(
    records=st.lists(items, min_size=1, max_size=40),
    limit=st.integers(min_value=1, max_value=3000),
    base=st.integers(0, 1 << 40),
)
def test_batches_are_cut_at_max_batch_bytes(
    records: list[ProducerRecord | bytes], limit: int, base: int
) -> None:
    """encode_batch cuts its input into batches of at most ``max_batch_bytes`` (a larger
    record alone), consecutive from ``base``, which decode back to the records; a batch
    moved to another offset (``rebased``) decodes at the new offsets."""
    from tiered_log.format.records import batch_table, decode_records, encode_batch

    eb = encode_batch(base, records, 7, 1 << 20, max_batch_bytes=limit)
    data = bytes(eb.data)
    infos, end = batch_table(data, base)
    assert end == len(data)
    # batch_table reads no record: the offset of a batch's max timestamp is its last
    assert [b._replace(max_timestamp_offset=0) for b in infos] == [
        b._replace(max_timestamp_offset=0) for b in eb.batches
    ]
    assert all(b.max_timestamp_offset == b.next_offset - 1 for b in infos)
    for b in eb.batches:
        ts = [r.timestamp for r in records_of(data, b)]
        assert b.max_timestamp == max(ts)
        assert b.max_timestamp_offset == b.base_offset + ts.index(max(ts))
    assert sum(b.record_count for b in infos) == eb.count == len(records)
    assert all(b.size <= limit or b.record_count == 1 for b in infos)
    recs, _, _ = decode_records(data)
    assert [r.offset for r in recs] == list(range(base, base + len(records)))
    for r, w in zip(recs, records, strict=True):
        assert same_content(r, as_producer(w))
    moved = eb.rebased(base + 1000, 7)
    again, _, _ = decode_records(bytes(moved.data))
    assert [r.offset for r in again] == [r.offset + 1000 for r in recs]
    assert [(r.value, r.key, r.headers, r.timestamp) for r in again] == [
        (r.value, r.key, r.headers, r.timestamp) for r in recs
    ]


@SETTINGS
@given(
    sizes=st.lists(st.integers(1, 12), min_size=1, max_size=8),
    cut=st.integers(min_value=0, max_value=60),
    reopen=st.booleans(),
)
def test_truncate_inside_a_batch_keeps_the_records_before_it(
    sizes: list[int], cut: int, reopen: bool
) -> None:
    """Truncating at an offset inside a batch keeps every record below it (the rest of
    that batch is written again as a batch of its own), and appends go on from there."""
    with tempfile.TemporaryDirectory() as d:
        want: list[ProducerRecord] = []
        cfg = LogConfig(segment_bytes=600, index_interval_bytes=64)
        log = Log.open(d, cfg)
        try:
            for k, n in enumerate(sizes):
                batch = [
                    ProducerRecord(
                        bytes([k, i]) * (i + 1),
                        key=b"k" if i % 2 else None,
                        headers=(("h", bytes([i])),) if i % 3 == 0 else (),
                        timestamp=1_000 + len(want) + i,
                    )
                    for i in range(n)
                ]
                log.append_batch(batch)
                want.extend(batch)
            cut = min(cut, len(want))
            log.truncate(cut)
            if reopen:
                log.close()
                log = Log.open(d, cfg)
            assert log.next_offset == cut
            log.append(b"after")
            got = read_all(log)
            assert [r.offset for r in got] == list(range(cut + 1))
            for r, w in zip(got, want[:cut], strict=False):
                assert same_content(r, w)
            assert got[-1].value == b"after"
        finally:
            log.close()
