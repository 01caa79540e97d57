"""Kafka record batch v2 codec (tiered_log.format.kafka): against an independent decoder
written from the specification (spec_decoder), against kafka-python's own batch builder
and reader, the checked walk's refusals, and the in-place broker edits."""

from __future__ import annotations

import gzip
import struct

import crc32c
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from tiered_log.errors import CorruptRecordError, InvalidArgumentError
from tiered_log.format.kafka import (
    Compression,
    KafkaBatch,
    NewRecord,
    TimestampType,
    assign_offsets,
    compress,
    decode_batches,
    encode_batch,
    iter_batches,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    verify_batches,
)

from . import spec_decoder as spec

CODECS = list(Compression)
T0 = 1_700_000_000_000

# Null, empty and plain keys and values; headers with null, empty and plain values; a
# timestamp before the first record's (a negative delta); a value long enough to span
# several snappy and lz4 blocks.
SAMPLE = [
    NewRecord(b"v0", b"k0", (("h", b"x"), ("nul", None), ("empty", b"")), T0),
    NewRecord(None, b"tombstone-key", (), T0 + 5),
    NewRecord(b"", None, (), T0 - 3),
    NewRecord(b"", b"", (("ü-key", b"\x00\xff"),), T0 + 1),
    NewRecord(None, None, (), T0 + 2),
    NewRecord(bytes(range(256)) * 600, b"big", (), T0 + 9),
]


def _expected(records: list[NewRecord], base_offset: int) -> list[tuple[object, ...]]:
    return [
        (
            base_offset + i,
            r.timestamp,
            None if r.key is None else bytes(r.key),
            None if r.value is None else bytes(r.value),
            [(k, None if v is None else bytes(v)) for k, v in r.headers],
        )
        for i, r in enumerate(records)
    ]


# ---- (a) our batches, read by the independent decoder ---------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_spec_decoder_reads_every_field(codec: Compression) -> None:
    data = encode_batch(
        SAMPLE,
        base_offset=1000,
        partition_leader_epoch=7,
        compression=codec,
        producer_id=123456789012,
        producer_epoch=3,
        base_sequence=42,
    )
    batch, end = spec.read_batch(data)
    assert end == len(data)
    assert batch.base_offset == 1000
    assert batch.batch_length == len(data) - 12
    assert batch.partition_leader_epoch == 7
    assert batch.magic == 2
    assert batch.crc == batch.computed_crc
    assert batch.codec == int(codec)
    assert batch.timestamp_type == 0
    assert not batch.transactional and not batch.control
    assert batch.last_offset_delta == len(SAMPLE) - 1
    assert batch.base_timestamp == SAMPLE[0].timestamp
    assert batch.max_timestamp == max(r.timestamp or 0 for r in SAMPLE)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (123456789012, 3, 42)
    assert batch.records_count == len(SAMPLE)
    got = [
        (
            batch.base_offset + r.offset_delta,
            batch.base_timestamp + r.timestamp_delta,
            r.key,
            r.value,
            r.headers,
        )
        for r in batch.records
    ]
    assert got == _expected(SAMPLE, 1000)
    assert all(r.attributes == 0 for r in batch.records)
    assert [r.offset_delta for r in batch.records] == list(range(len(SAMPLE)))


def test_defaults_are_a_plain_producers() -> None:
    batch, _ = spec.read_batch(encode_batch([NewRecord(b"x", timestamp=5)]))
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
    assert batch.partition_leader_epoch == -1
    assert batch.base_offset == 0
    assert batch.attributes == 0


def test_framing_of_each_codec_is_kafkas() -> None:
    section = spec.record_bytes(0, 0, b"k", b"v" * 100_000)
    # snappy: xerial stream header, then 32 KiB blocks
    snap = compress(Compression.SNAPPY, section)
    assert snap[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    (first_block,) = struct.unpack(">i", snap[16:20])
    assert first_block < 32 * 1024
    # lz4: frame magic, FLG version 01 + independent blocks, no checksums or size; BD 64 KiB
    lz = compress(Compression.LZ4, section)
    assert lz[:4] == b"\x04\x22\x4d\x18"
    assert lz[4] == 0b0110_0000
    assert lz[5] == 4 << 4
    # gzip: one member
    gz = compress(Compression.GZIP, section)
    assert gz[:2] == b"\x1f\x8b" and gzip.decompress(gz) == section


def test_log_append_time_at_build() -> None:
    data = encode_batch(
        SAMPLE[:2], timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=T0 + 99
    )
    batch, _ = spec.read_batch(data)
    assert batch.timestamp_type == 1 and batch.max_timestamp == T0 + 99
    assert [r.timestamp for _, rs in decode_batches(data) for r in rs] == [T0 + 99, T0 + 99]
    with pytest.raises(InvalidArgumentError):
        encode_batch(SAMPLE[:1], timestamp_type=TimestampType.LOG_APPEND_TIME)


def test_encode_refuses() -> None:
    with pytest.raises(InvalidArgumentError):
        encode_batch([])
    with pytest.raises(InvalidArgumentError):
        encode_batch(SAMPLE[:1], compression="brotli")
    with pytest.raises(InvalidArgumentError):
        encode_batch(SAMPLE[:1], producer_epoch=1 << 20)


# ---- (b) kafka-python's builder and reader --------------------------------------------------

KP_RECORDS = [
    (b"key-0", b"value-0" * 50, [("a", b"1"), ("nul", None)]),
    (None, b"value-1" * 50, []),
    (b"", None, []),
    (None, None, [("e", b"")]),
    (b"k" * 300, b"", []),
]


def _kafka_python_batch(codec: int, *, transactional: bool = False) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    builder.set_producer_state(9876, 4, 100, transactional)
    for i, (k, v, h) in enumerate(KP_RECORDS):
        assert builder.append(i, T0 + 10 * i - (25 if i == 2 else 0), k, v, h) is not None
    return bytes(builder.build())


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_reads_kafka_python_batches(codec: Compression) -> None:
    data = _kafka_python_batch(int(codec))
    [h] = verify_batches(data)
    # The values repeat: kafka-python keeps the codec only when it shrinks the records.
    assert h.compression == codec
    assert h.size == len(data) and h.position == 0
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (9876, 4, 100)
    assert h.base_offset == 0 and h.last_offset_delta == len(KP_RECORDS) - 1
    assert h.records_count == len(KP_RECORDS)
    assert h.max_timestamp == T0 + 40
    assert h.base_timestamp == T0
    records = KafkaBatch(h, memoryview(data)).records()
    theirs = list(DefaultRecordBatch(data))
    assert len(records) == len(theirs) == len(KP_RECORDS)
    for ours, kp, (k, v, hd) in zip(records, theirs, KP_RECORDS, strict=True):
        assert (ours.offset, ours.timestamp) == (kp.offset, kp.timestamp)
        assert (ours.key, ours.value) == (k, v) == (kp.key, kp.value)
        assert list(ours.headers) == hd == list(kp.headers)


def test_reads_kafka_python_transactional_flag() -> None:
    [h] = verify_batches(_kafka_python_batch(0, transactional=True))
    assert h.is_transactional and not h.is_control


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_kafka_python_reads_our_batches(codec: Compression) -> None:
    data = encode_batch(
        SAMPLE, base_offset=77, compression=codec, producer_id=5, producer_epoch=6,
        base_sequence=7, partition_leader_epoch=3,
    )  # fmt: skip
    kb = DefaultRecordBatch(data)
    assert kb.validate_crc()
    assert kb.magic == 2 and kb.compression_type == int(codec)
    assert kb.base_offset == 77 and kb.last_offset == 77 + len(SAMPLE) - 1
    assert kb.leader_epoch == 3
    assert (kb.producer_id, kb.producer_epoch, kb.base_sequence) == (5, 6, 7)
    assert kb.first_timestamp == T0 and kb.max_timestamp == T0 + 9
    assert kb.records_count == len(SAMPLE)
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in kb]
    assert got == _expected(SAMPLE, 77)


def test_kafka_python_reads_our_concatenation() -> None:
    parts = [
        encode_batch(SAMPLE[:3], base_offset=0, compression=Compression.ZSTD),
        encode_batch(SAMPLE[3:], base_offset=3, compression=Compression.LZ4),
        encode_batch(SAMPLE[:1], base_offset=6),
    ]
    mr = MemoryRecords(b"".join(parts))
    offsets = []
    while mr.has_next():
        batch = mr.next_batch()
        assert batch.validate_crc()
        offsets += [r.offset for r in batch]
    assert offsets == list(range(7))


# ---- other framings Kafka's readers accept --------------------------------------------------


def test_reads_raw_snappy_and_multi_frame_sections() -> None:
    import snappy

    recs = spec.record_bytes(0, 0, b"a", b"x" * 5000) + spec.record_bytes(1, 2, None, b"y")
    for codec, section in [
        (2, snappy.compress(recs)),  # raw snappy, no xerial header (librdkafka)
        (1, gzip.compress(recs[:10]) + gzip.compress(recs[10:])),  # two gzip members
        (4, zstandard.ZstdCompressor().compressobj().compress(recs) + b""),
    ]:
        if codec == 4:  # a streamed frame: no content size in its header
            c = zstandard.ZstdCompressor().compressobj()
            section = c.compress(recs[:7]) + c.flush()
            c2 = zstandard.ZstdCompressor().compressobj()
            section += c2.compress(recs[7:]) + c2.flush()
        data = spec.assemble(section, 2, attributes=codec, base_offset=10, base_timestamp=T0)
        [(h, records)] = decode_batches(data)
        assert h.compression == codec
        assert [(r.offset, r.timestamp, r.key, r.value) for r in records] == [
            (10, T0, b"a", b"x" * 5000),
            (11, T0 + 2, None, b"y"),
        ]


def test_record_framing_errors_are_caught_on_decode() -> None:
    good = spec.record_bytes(0, 0, b"k", b"v")
    bad_len = bytes([good[0] + 2]) + good[1:]  # length says 1 more than the fields take
    for section, count in [
        (good + b"\x00", 1),  # a byte after the last record
        (good, 2),  # fewer records than the count
        (bad_len + b"\x00", 1),
        (spec.record_bytes(0, 0, b"k", b"v")[:-1], 1),  # cut inside the record
    ]:
        data = spec.assemble(section, count)
        [batch] = iter_batches(data)  # framing and CRC are fine
        with pytest.raises(CorruptRecordError):
            batch.records()
    # a header key that is null, and one that is not UTF-8
    body = b"\x00\x00\x00\x01\x01" + spec.write_zigzag(1) + spec.write_zigzag(-1) + b"\x01"
    with pytest.raises(CorruptRecordError):
        next(iter_batches(spec.assemble(spec.write_zigzag(len(body)) + body, 1))).records()
    rec = spec.record_bytes(0, 0, None, None, [("k", None)]).replace(b"k", b"\xff")
    with pytest.raises(CorruptRecordError):
        next(iter_batches(spec.assemble(rec, 1))).records()
    # a compressed section that does not decompress
    with pytest.raises(CorruptRecordError):
        next(iter_batches(spec.assemble(b"\x1f\x8bnot gzip", 1, attributes=1))).records()


# ---- (c) the checked walk ---------------------------------------------------------------------


def _three() -> tuple[bytes, list[bytes]]:
    parts = [
        encode_batch(SAMPLE[:2], base_offset=100),
        encode_batch(SAMPLE[2:5], base_offset=102, compression=Compression.GZIP),
        encode_batch(SAMPLE[5:], base_offset=105, compression=Compression.SNAPPY),
    ]
    return b"".join(parts), parts


def test_walk_reports_boundaries_offsets_counts_timestamps() -> None:
    buf, parts = _three()
    hs = verify_batches(buf)
    starts = [0, len(parts[0]), len(parts[0]) + len(parts[1])]
    assert [h.position for h in hs] == starts
    assert [h.end for h in hs] == [*starts[1:], len(buf)]
    assert [(h.base_offset, h.last_offset) for h in hs] == [(100, 101), (102, 104), (105, 105)]
    assert [h.records_count for h in hs] == [2, 3, 1]
    assert [h.max_timestamp for h in hs] == [T0 + 5, T0 + 2, T0 + 9]
    assert [h.compression for h in hs] == [Compression.NONE, Compression.GZIP, Compression.SNAPPY]
    assert hs[-1].next_offset == 106
    assert verify_batches(b"") == []
    # the same walk over a memoryview slice and a bytearray
    assert verify_batches(memoryview(buf)[: hs[1].end]) == hs[:2]
    assert verify_batches(bytearray(buf)) == hs
    # and iter_batches hands out views of exactly those bytes
    views = [bytes(b.data) for b in iter_batches(buf)]
    assert views == parts


def test_walk_refuses_any_flipped_byte_under_the_crc() -> None:
    buf, parts = _three()
    n0 = len(parts[0])
    for at in range(21, len(parts[0])):  # every byte of the first batch under its CRC
        damaged = bytearray(buf)
        damaged[at] ^= 0x01
        with pytest.raises(CorruptRecordError):
            verify_batches(damaged)
    for at in [n0 + 21, n0 + 40, n0 + 61, len(buf) - 1, n0 + 17]:  # and a few elsewhere
        damaged = bytearray(buf)
        damaged[at] ^= 0x80
        with pytest.raises(CorruptRecordError, match="CRC"):
            verify_batches(damaged)


def test_walk_leaves_the_uncovered_fields_to_others() -> None:
    buf, _ = _three()
    damaged = bytearray(buf)
    damaged[3] ^= 0xFF  # baseOffset: not under the CRC, framing still fine
    damaged[13] ^= 0xFF  # partitionLeaderEpoch: likewise
    hs = verify_batches(damaged)
    assert hs[0].base_offset != 100 and hs[1:] == verify_batches(buf)[1:]


def test_walk_refuses_bad_framing() -> None:
    buf, parts = _three()
    n0 = len(parts[0])
    with pytest.raises(CorruptRecordError, match="runs past"):
        verify_batches(buf[:-1])  # the last batch truncated
    with pytest.raises(CorruptRecordError, match="header"):
        verify_batches(buf + buf[:30])  # a partial header after whole batches
    wrong_magic = bytearray(buf)
    wrong_magic[n0 + 16] = 1
    with pytest.raises(CorruptRecordError, match="magic 1"):
        verify_batches(wrong_magic)
    too_long = bytearray(buf)
    struct.pack_into(">i", too_long, n0 + 8, len(buf))  # batchLength past the buffer
    with pytest.raises(CorruptRecordError, match="runs past"):
        verify_batches(too_long)
    too_short = bytearray(buf)
    struct.pack_into(">i", too_short, 8, 20)
    with pytest.raises(CorruptRecordError, match="minimum"):
        verify_batches(too_short)
    # a legacy (magic 0/1) message set is refused by its magic, also when short
    legacy = struct.pack(">qiIbb", 0, 14, 0, 1, 0) + b"\xff\xff\xff\xff" + b"\x00\x00\x00\x00"
    with pytest.raises(CorruptRecordError, match="magic 1"):
        verify_batches(legacy)
    # the error names the batch's position
    with pytest.raises(CorruptRecordError, match=f"at byte {n0}:"):
        verify_batches(wrong_magic)


def test_walk_refuses_unknown_codec_and_negative_counts() -> None:
    for kwargs in [{"attributes": 5}, {"last_offset_delta": -2}]:
        data = spec.assemble(spec.record_bytes(0, 0, None, b"v"), 1, **kwargs)  # type: ignore[arg-type]
        with pytest.raises(CorruptRecordError):
            verify_batches(data)


def test_walk_may_stop_at_a_truncated_tail() -> None:
    buf, parts = _three()
    whole = len(parts[0]) + len(parts[1])
    for cut in [whole + 5, whole + 61, len(buf) - 1]:
        hs = verify_batches(buf[:cut], allow_truncated_tail=True)
        assert len(hs) == 2 and hs[-1].end == whole
    assert len(verify_batches(buf, allow_truncated_tail=True)) == 3
    damaged = bytearray(buf)
    damaged[30] ^= 1
    with pytest.raises(CorruptRecordError):  # a damaged whole batch is still refused
        verify_batches(damaged, allow_truncated_tail=True)


def test_iter_batches_checks_before_yielding() -> None:
    buf, _ = _three()
    damaged = bytearray(buf)
    damaged[-1] ^= 1
    it = iter_batches(damaged)
    with pytest.raises(CorruptRecordError):
        next(it)


# ---- (d) in-place broker edits --------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_log_append_time_edit(codec: Compression) -> None:
    data = bytearray(encode_batch(SAMPLE, base_offset=5, compression=codec))
    before = bytes(data)
    crc = set_log_append_time(data, 0, T0 + 1_000_000)
    assert crc == crc32c.crc32c(bytes(data[21:]))
    # only attributes bit 3, maxTimestamp and the CRC changed
    changed = {i for i in range(len(data)) if data[i] != before[i]}
    assert changed <= set(range(17, 21)) | {22} | set(range(35, 43))
    kb = DefaultRecordBatch(bytes(data))
    assert kb.validate_crc()
    assert kb.timestamp_type == 1 and kb.max_timestamp == T0 + 1_000_000
    assert [r.timestamp for r in kb] == [T0 + 1_000_000] * len(SAMPLE)
    [h] = verify_batches(data)
    assert h.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert h.max_timestamp == T0 + 1_000_000 and h.base_timestamp == T0
    records = KafkaBatch(h, memoryview(data)).records()
    assert [r.timestamp for r in records] == [T0 + 1_000_000] * len(SAMPLE)
    assert [r.value for r in records] == [r.value for r in SAMPLE]


def test_offset_and_epoch_edits_need_no_crc() -> None:
    buf, _ = _three()
    data = bytearray(buf)
    hs = verify_batches(data)
    assert assign_offsets(data, hs, 5000, partition_leader_epoch=12) == 5006
    after = verify_batches(data)
    assert [(h.base_offset, h.last_offset) for h in after] == [
        (5000, 5001), (5002, 5004), (5005, 5005),
    ]  # fmt: skip
    assert {h.partition_leader_epoch for h in after} == {12}
    assert [h.crc for h in after] == [h.crc for h in hs]
    set_base_offset(data, after[1].position, 1 << 40)
    set_partition_leader_epoch(data, after[1].position, -1)
    mr = MemoryRecords(bytes(data))
    firsts = []
    while mr.has_next():
        b = mr.next_batch()
        assert b.validate_crc()
        firsts.append((b.base_offset, b.leader_epoch))
    assert firsts == [(5000, 12), (1 << 40, -1), (5005, 12)]
    with pytest.raises(TypeError):
        set_base_offset(memoryview(buf), 0, 1)


# ---- (e) round trips --------------------------------------------------------------------------

_bytes = st.one_of(st.none(), st.binary(max_size=300))
_record = st.builds(
    NewRecord,
    value=_bytes,
    key=_bytes,
    headers=st.lists(st.tuples(st.text(max_size=8), _bytes), max_size=3),
    timestamp=st.integers(min_value=-(1 << 40), max_value=1 << 45),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(_record, min_size=1, max_size=20),
    codec=st.sampled_from(CODECS),
    base_offset=st.integers(min_value=0, max_value=(1 << 62)),
)
def test_round_trip(records: list[NewRecord], codec: Compression, base_offset: int) -> None:
    data = encode_batch(records, base_offset=base_offset, compression=codec)
    [(h, decoded)] = decode_batches(data)
    assert h.records_count == len(records)
    assert h.max_timestamp == max(r.timestamp or 0 for r in records)
    want = _expected(records, base_offset)
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in decoded] == want
    batch, _ = spec.read_batch(data)
    assert batch.crc == batch.computed_crc
    assert [
        (base_offset + r.offset_delta, batch.base_timestamp + r.timestamp_delta, r.key,
         r.value, r.headers)
        for r in batch.records
    ] == want  # fmt: skip


@given(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1))
def test_varint_matches_spec(n: int) -> None:
    from tiered_log.format.kafka.records import put_varint, read_varint, varint_size

    out = bytearray()
    put_varint(out, n)
    assert bytes(out) == spec.write_zigzag(n)
    assert varint_size(n) == len(out)
    assert read_varint(bytes(out), 0) == (n, len(out))
