"""The log's batches are Kafka's record batch v2 (tiered_log.format.records).

(a) what encode_batch and rebased write is read field by field by an independent
decoder written from Kafka's protocol guide (spec_decoder: struct, its own varint
reader, crc32c); (b) batches built by kafka-python's DefaultRecordBatchBuilder, each
codec and none, go through receive_batches and decode_records/decode_columns unchanged;
(c) damage anywhere under the CRC, a wrong magic, a truncated batch and a batch of the
format before Kafka v2 are refused with errors that say so.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

import crc32c
import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from tiered_log.errors import CorruptRecordError, InvalidArgumentError, RecordTooLargeError
from tiered_log.format.records import (
    HEADER_SIZE,
    BatchInfo,
    Compression,
    LegacyFormatError,
    ProducerRecord,
    Record,
    batch_header,
    batch_table,
    check_batches,
    decode_columns,
    decode_records,
    encode_batch,
    first_timestamp,
    is_legacy_batch,
    rebatch,
    receive_batches,
    validate_value,
)

from . import spec_decoder as spec

CODECS = list(Compression)
T0 = 1_700_000_000_000
BIG = 1 << 30

# Null, empty and plain keys and values; headers with null, empty and plain values and a
# non-ASCII name; a timestamp before the first record's (a negative delta); a bare value;
# a value long enough for two-byte length varints and several snappy/lz4 blocks.
SAMPLE: list[ProducerRecord | bytes] = [
    ProducerRecord(b"v0", b"k0", (("h", b"x"), ("nul", None), ("empty", b"")), T0),
    ProducerRecord(None, b"tombstone-key", (), T0 + 5),
    ProducerRecord(b"", None, (), T0 - 3),
    ProducerRecord(b"", b"", (("ü-name", b"\x00\xff"),), T0 + 1),
    ProducerRecord(None, None, (), T0 + 2),
    b"bare value",
    ProducerRecord(bytes(range(256)) * 600, b"big", (), T0 + 9),
    ProducerRecord(b"x" * 200, b"k" * 70, (("h2", b"y" * 100),), None),
]
NOW = T0 + 50


def _want(records: Sequence[ProducerRecord | bytes], now: int) -> list[tuple[object, ...]]:
    out: list[tuple[object, ...]] = []
    for r in records:
        if isinstance(r, bytes):
            out.append((now, None, r, []))
        else:
            ts = now if r.timestamp is None else r.timestamp
            out.append((ts, r.key, r.value, [(k, v) for k, v in r.headers]))
    return out


def _spec_records(data: bytes) -> list[tuple[spec.SpecBatch, spec.SpecRecord]]:
    return [(b, r) for b in spec.read_all(data) for r in b.records]


# ---- (a) encode_batch's bytes, read by the independent decoder ------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_spec_decoder_reads_every_field(codec: Compression) -> None:
    eb = encode_batch(
        1000,
        SAMPLE,
        NOW,
        BIG,
        compression=codec,
        leader_epoch=7,
        producer_id=123456789012,
        producer_epoch=3,
        base_sequence=42,
    )
    data = bytes(eb.data)
    [batch] = spec.read_all(data)
    assert batch.base_offset == 1000
    assert batch.batch_length == len(data) - 12
    assert batch.partition_leader_epoch == 7
    assert batch.magic == 2
    assert batch.crc == batch.computed_crc
    assert batch.attributes == int(codec)  # CreateTime, not transactional, not control
    assert batch.last_offset_delta == len(SAMPLE) - 1 == batch.records_count - 1
    want = _want(SAMPLE, NOW)
    assert batch.base_timestamp == want[0][0]
    assert batch.max_timestamp == max(w[0] for w in want)  # type: ignore[type-var]
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (123456789012, 3, 42)
    got = [
        (batch.base_timestamp + r.timestamp_delta, r.key, r.value, r.headers) for r in batch.records
    ]
    assert got == want
    assert [r.offset_delta for r in batch.records] == list(range(len(SAMPLE)))
    assert all(r.attributes == 0 for r in batch.records)
    # what the log reads is what the spec decoder read, sizes included
    recs, end, used = decode_records(data)
    assert end == len(data)
    assert [(r.timestamp, r.key, r.value, list(r.headers)) for r in recs] == want
    assert [r.offset for r in recs] == list(range(1000, 1000 + len(SAMPLE)))
    assert {r.checksum for r in recs} == {batch.crc}
    if codec == Compression.NONE:
        sizes = [len(spec.write_zigzag(r.length)) + r.length for r in batch.records]
        assert [r.size for r in recs] == sizes and used == sum(sizes)
        assert used == len(data) - HEADER_SIZE
    # the batch's info is the header's
    [info] = eb.batches
    mx = max(range(len(want)), key=lambda i: (want[i][0], -i))
    assert info == BatchInfo(
        1000, len(SAMPLE), 0, len(data), batch.base_timestamp, batch.max_timestamp, 1000 + mx
    )


def test_bare_values_are_framed_as_the_spec_says() -> None:
    values = [b"", b"a", bytes(63), bytes(64), bytes(200), bytes(9000), bytes(70_000)]
    values += [bytes([i]) * (i % 7) for i in range(130)]  # offset deltas past 63
    data = bytes(encode_batch(5, values, NOW, BIG).data)
    [batch] = spec.read_all(data)
    assert batch.crc == batch.computed_crc
    assert batch.base_timestamp == batch.max_timestamp == NOW
    assert batch.attributes == 0 and batch.records_count == len(values)
    assert [
        (r.offset_delta, r.timestamp_delta, r.key, r.value, r.headers) for r in batch.records
    ] == [(i, 0, None, v, []) for i, v in enumerate(values)]


def test_batches_are_cut_and_each_is_a_kafka_batch() -> None:
    values = [bytes([i % 256]) * (50 + i) for i in range(300)]
    eb = encode_batch(0, values, NOW, BIG, max_batch_bytes=4000)
    data = bytes(eb.data)
    batches = spec.read_all(data)
    assert len(batches) == len(eb.batches) > 5
    assert all(b.crc == b.computed_crc for b in batches)
    assert all(b.batch_length + 12 <= 4000 for b in batches)
    assert [b.base_offset for b in batches] == [i.base_offset for i in eb.batches]
    assert [r.value for b in batches for r in b.records] == values
    assert all([r.offset_delta for r in b.records] == list(range(b.records_count)) for b in batches)
    # and the same through the general (validating) path
    prs = [ProducerRecord(v, key=b"k") for v in values]
    again = spec.read_all(bytes(encode_batch(0, prs, NOW, BIG, max_batch_bytes=4000).data))
    assert all(b.batch_length + 12 <= 4000 for b in again)
    assert [(r.key, r.value) for b in again for r in b.records] == [(b"k", v) for v in values]


def test_the_logs_clock_batches() -> None:
    """now_ms=-1: records without a timestamp go in batches of their own whose base and
    max timestamps are -1, which rebased fills in (the CRC recomputed)."""
    recs: list[ProducerRecord | bytes] = [
        b"a",
        ProducerRecord(b"b", timestamp=T0),
        ProducerRecord(b"c"),
        b"d",
    ]
    eb = encode_batch(0, recs, -1, BIG)
    first = spec.read_all(bytes(eb.data))
    assert [(b.base_timestamp, b.max_timestamp, b.records_count) for b in first] == [
        (-1, -1, 1),
        (T0, T0, 1),
        (-1, -1, 2),
    ]
    assert all(r.timestamp_delta == 0 for b in first for r in b.records)
    moved = eb.rebased(10, NOW, leader_epoch=4)
    after = spec.read_all(bytes(moved.data))
    assert all(b.crc == b.computed_crc for b in after)
    assert [(b.base_offset, b.partition_leader_epoch) for b in after] == [(10, 4), (11, 4), (12, 4)]
    assert [(b.base_timestamp, b.max_timestamp) for b in after] == [
        (NOW, NOW),
        (T0, T0),
        (NOW, NOW),
    ]
    assert [r.timestamp for r in decode_records(bytes(moved.data))[0]] == [NOW, T0, NOW, NOW]
    assert [b.max_timestamp_offset for b in moved.batches] == [10, 11, 12]


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_rebased_touches_only_what_it_should(codec: Compression) -> None:
    eb = encode_batch(0, SAMPLE, NOW, BIG, compression=codec)
    before = bytes(eb.data)
    moved = eb.rebased(1 << 40, NOW + 1, leader_epoch=9)
    after = bytes(moved.data)
    changed = {i for i in range(len(after)) if after[i] != before[i]}
    assert changed <= set(range(0, 8)) | set(range(12, 16))  # baseOffset, epoch: no CRC
    [b] = spec.read_all(after)
    assert (b.base_offset, b.partition_leader_epoch, b.crc) == (1 << 40, 9, b.computed_crc)
    assert moved.batches[0].max_timestamp_offset - (1 << 40) == (eb.batches[0].max_timestamp_offset)
    # LogAppendTime: attributes bit 3, maxTimestamp the log's clock, CRC recomputed
    lat = encode_batch(0, SAMPLE, NOW, BIG, compression=codec).rebased(
        3, NOW + 77, log_append_time=True
    )
    [b] = spec.read_all(bytes(lat.data))
    assert b.timestamp_type == 1 and b.attributes & 0x07 == codec
    assert b.max_timestamp == NOW + 77 and b.crc == b.computed_crc
    assert b.base_timestamp == T0  # the records keep their own (Kafka's readers ignore them)
    recs = decode_records(bytes(lat.data))[0]
    assert {r.timestamp for r in recs} == {NOW + 77}
    assert lat.batches[0].max_timestamp == NOW + 77 and lat.batches[0].max_timestamp_offset == 3
    kp = DefaultRecordBatch(bytes(lat.data))
    assert kp.validate_crc() and {r.timestamp for r in kp} == {NOW + 77}


def test_encode_with_log_append_time() -> None:
    eb = encode_batch(0, SAMPLE[:3], NOW, BIG, log_append_time=True)
    [b] = spec.read_all(bytes(eb.data))
    assert b.timestamp_type == 1 and b.max_timestamp == NOW and b.crc == b.computed_crc
    assert {r.timestamp for r in decode_records(bytes(eb.data))[0]} == {NOW}


def test_rebatch_keeps_the_cut_batchs_header() -> None:
    eb = encode_batch(
        50,
        SAMPLE,
        NOW,
        BIG,
        compression="lz4",
        leader_epoch=6,
        producer_id=77,
        producer_epoch=2,
        base_sequence=1000,
    )
    data = bytes(eb.data)
    recs = decode_records(data)[0][:4]
    again = rebatch(recs, like=data[:HEADER_SIZE])
    [b] = spec.read_all(again)
    assert (b.base_offset, b.partition_leader_epoch, b.codec) == (50, 6, 3)
    assert (b.producer_id, b.producer_epoch, b.base_sequence) == (77, 2, 1000)
    assert decode_records(again)[0] == [r._replace(checksum=b.crc) for r in recs]
    plain = spec.read_all(rebatch(recs))
    assert plain[0].codec == 0 and plain[0].partition_leader_epoch == -1


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    records=st.lists(
        st.builds(
            ProducerRecord,
            value=st.none() | st.binary(max_size=300),
            key=st.none() | st.binary(max_size=100),
            headers=st.lists(
                st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=20)), max_size=3
            ).map(tuple),
            timestamp=st.none() | st.integers(0, (1 << 62) - 1),
        )
        | st.binary(max_size=200),
        min_size=1,
        max_size=25,
    ),
    codec=st.sampled_from(CODECS),
    limit=st.integers(200, 5000),
)
def test_any_records_read_back_by_the_spec_decoder(
    records: list[ProducerRecord | bytes], codec: Compression, limit: int
) -> None:
    eb = encode_batch(9, records, NOW, BIG, compression=codec, max_batch_bytes=limit)
    data = bytes(eb.data)
    batches = spec.read_all(data)
    assert all(b.crc == b.computed_crc and b.magic == 2 for b in batches)
    assert [b.base_offset for b in batches] == [i.base_offset for i in eb.batches]
    got = [
        (b.base_timestamp + r.timestamp_delta, r.key, r.value, r.headers)
        for b, r in _spec_records(data)
    ]
    assert got == _want(records, NOW)
    recs = decode_records(data)[0]
    assert [(r.timestamp, r.key, r.value, list(r.headers)) for r in recs] == got
    cols = decode_columns(data)
    assert cols.end == len(data) and cols.keys == [r.key for r in recs]
    assert [None if v is None else bytes(v) for v in cols.values] == [r.value for r in recs]


# ---- (b) kafka-python's batches go through unchanged -----------------------------------------

KP_RECORDS = [
    (b"key-0", b"value-0" * 50, [("a", b"1"), ("nul", None)]),
    (None, b"value-1" * 50, []),
    (b"", None, []),
    (None, None, [("e", b"")]),
    (b"k" * 300, b"", []),
    (None, b"z" * 5000, []),
]


def _kafka_python_batch(codec: int, base_offset: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    builder.set_producer_state(9876, 4, 100, False)
    for i, (k, v, h) in enumerate(KP_RECORDS):
        assert builder.append(i, T0 + 10 * i - (25 if i == 2 else 0), k, v, h) is not None
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)
    return bytes(data)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_kafka_python_batches_go_through_unchanged(codec: Compression) -> None:
    sent = _kafka_python_batch(int(codec)) + _kafka_python_batch(int(codec), 6)
    assert sent[21 + 1] & 0x07 == codec  # kafka-python kept the codec (the values repeat)
    eb = receive_batches(sent, BIG)
    assert bytes(eb.data) == sent  # stored as sent: compression, producer fields
    assert eb.count == 2 * len(KP_RECORDS)
    assert [(b.base_offset, b.record_count, b.position) for b in eb.batches] == [
        (0, 6, 0),
        (6, 6, len(sent) // 2),
    ]
    assert {(b.first_timestamp, b.max_timestamp) for b in eb.batches} == {(T0, T0 + 50)}
    assert [b.max_timestamp_offset for b in eb.batches] == [5, 11]
    theirs = [
        r for m in (sent[: len(sent) // 2], sent[len(sent) // 2 :]) for r in DefaultRecordBatch(m)
    ]
    ours = decode_records(sent)[0]
    assert len(ours) == len(theirs) == 12
    for o, t in zip(ours, theirs, strict=True):
        assert (o.offset, o.timestamp, o.key, o.value) == (t.offset, t.timestamp, t.key, t.value)
        assert list(o.headers) == list(t.headers)
    cols = decode_columns(sent)
    assert cols.offsets == list(range(12)) and cols.keys == [r.key for r in ours]
    assert [None if v is None else bytes(v) for v in cols.values] == [r.value for r in ours]
    assert check_batches(sent, 0) == (2, 12)
    infos, end = batch_table(sent, 0)
    assert end == len(sent) and [i.base_offset for i in infos] == [0, 6]
    # the log moves them (offsets, its epoch: outside the CRC) and kafka-python still reads
    moved = bytes(eb.rebased(500, NOW, leader_epoch=3).data)
    mr = MemoryRecords(moved)
    got = []
    while mr.has_next():
        b = mr.next_batch()
        assert b.validate_crc() and b.leader_epoch == 3
        assert (b.producer_id, b.producer_epoch, b.base_sequence) == (9876, 4, 100)
        got += [(r.offset, r.key, r.value) for r in b]
    assert got == [(500 + i, r.key, r.value) for i, r in enumerate(ours)]


def test_kafka_python_reads_what_encode_batch_writes() -> None:
    for codec in CODECS:
        data = bytes(encode_batch(3, SAMPLE, NOW, BIG, compression=codec).data)
        kp = DefaultRecordBatch(data)
        assert kp.validate_crc()
        assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in kp] == [
            (3 + i, *w[:3], w[3]) for i, w in enumerate(_want(SAMPLE, NOW))
        ]


def test_receive_fixes_a_wrong_max_timestamp_as_kafka_does() -> None:
    sent = bytearray(_kafka_python_batch(0))
    struct.pack_into(">q", sent, 35, T0 + 1)  # maxTimestamp below the records' largest
    struct.pack_into(">I", sent, 17, crc32c.crc32c(bytes(sent[21:])))
    eb = receive_batches(bytes(sent), BIG)
    [b] = spec.read_all(bytes(eb.data))
    assert b.max_timestamp == T0 + 50 and b.crc == b.computed_crc
    assert eb.batches[0].max_timestamp == T0 + 50


# ---- (c) damage and the former format are refused ---------------------------------------------


def _refused_everywhere(damaged: bytes, match: str | None = None) -> None:
    with pytest.raises(CorruptRecordError, match=match):
        receive_batches(damaged, BIG)
    with pytest.raises(CorruptRecordError, match=match):
        check_batches(damaged, 0)
    with pytest.raises(CorruptRecordError, match=match):
        decode_records(damaged)
    with pytest.raises(CorruptRecordError, match=match):
        decode_columns(damaged)


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD], ids=["none", "zstd"])
def test_a_flipped_byte_anywhere_under_the_crc_is_refused(codec: Compression) -> None:
    data = bytes(encode_batch(0, SAMPLE[:6], NOW, BIG, compression=codec).data)
    for at in range(17, len(data)):  # the CRC itself and every byte it covers
        for bit in (0x01, 0x80):
            damaged = bytearray(data)
            damaged[at] ^= bit
            _refused_everywhere(bytes(damaged), "CRC")
            assert batch_table(bytes(damaged), 0) == ([], 0)


def test_the_fields_outside_the_crc_are_guarded_by_framing_and_sequence() -> None:
    data = bytes(encode_batch(0, [b"a", b"b"], NOW, BIG).data)
    two = data + bytes(encode_batch(2, [b"c"], NOW, BIG).data)
    wrong_base = bytearray(two)
    wrong_base[len(data) + 7] ^= 1  # the second batch's baseOffset
    with pytest.raises(CorruptRecordError, match="expected one at 2"):
        check_batches(bytes(wrong_base), 0)
    assert len(batch_table(bytes(wrong_base), 0)[0]) == 1
    # A reader of records from an offset: the same sequence, whichever byte of the base
    # offset is hit (a low one moves the offsets a little: records lost and repeated).
    for at, bit in ((7, 0x01), (4, 0x01), (0, 0x80)):
        damaged = bytearray(two)
        damaged[len(data) + at] ^= bit
        with pytest.raises(CorruptRecordError, match="expected one at 2"):
            decode_records(bytes(damaged), start_offset=0)
        with pytest.raises(CorruptRecordError, match="expected one at 2"):
            decode_columns(bytes(damaged))  # the Spark source's reader
    assert [r.offset for r in decode_records(two, start_offset=1)[0]] == [1, 2]
    bad_length = bytearray(data)
    struct.pack_into(">i", bad_length, 8, 10)
    _refused_everywhere(bytes(bad_length), "batchLength")


def test_a_wrong_magic_is_refused() -> None:
    data = bytearray(encode_batch(0, [b"a", b"b"], NOW, BIG).data)
    data[16] = 1
    _refused_everywhere(bytes(data), "magic 1, not 2")
    assert batch_table(bytes(data), 0) == ([], 0)


def test_a_truncated_batch() -> None:
    data = bytes(encode_batch(0, SAMPLE, NOW, BIG).data)
    for cut in (1, 20, HEADER_SIZE, HEADER_SIZE + 5, len(data) - 1):
        torn = data[:cut]
        with pytest.raises(CorruptRecordError, match="ends inside"):
            receive_batches(torn, BIG)
        with pytest.raises(CorruptRecordError, match=r"runs past|ends inside"):
            check_batches(torn, 0)
        # a reader stops before it (the log's torn tail): nothing read, nothing raised
        assert decode_records(torn) == ([], 0, 0)
        assert decode_columns(torn).end == 0
        assert batch_table(torn, 0) == ([], 0)
    whole = data + data[:100]
    assert decode_records(whole)[1] == len(data)
    assert batch_table(whole, 0)[1] == len(data)


def _tb_batch(base: int, values: list[bytes]) -> bytes:
    """A batch of tiered_log's format before Kafka v2 ("TB"), as it was laid out."""
    n = len(values)
    cols = struct.pack(f"<{n}q", *([T0] * n)) + struct.pack(f"<{n}i", *([-1] * n))
    cols += struct.pack(f"<{n}I", *map(len, values)) + struct.pack(f"<{n}I", *([0] * n))
    checked = struct.pack("<HHI", 0x5442, 0, n) + cols + b"".join(values)
    size = 20 + len(checked)
    return struct.pack("<QIQ", base, size, xxhash.xxh3_64_intdigest(checked, seed=base)) + checked


def test_the_former_format_is_named() -> None:
    old = _tb_batch(0, [b"hello", b"world"]) + _tb_batch(2, [b"again"])
    assert old[20:22] == b"BT" and is_legacy_batch(old)
    assert not is_legacy_batch(bytes(encode_batch(0, [b"x"], NOW, BIG).data))
    for fn in (
        lambda: receive_batches(old, BIG),
        lambda: check_batches(old, 0),
        lambda: decode_records(old),
        lambda: decode_columns(old),
        lambda: batch_table(old, 0),
    ):
        with pytest.raises(LegacyFormatError, match="migrate"):
            fn()
    # a short one too (a segment holding one tiny old batch), and one whose checksum
    # byte happens to lie where a v2 batch's magic does (bytes 20-21 are enough)
    with pytest.raises(LegacyFormatError, match="old batch format"):
        check_batches(_tb_batch(0, [b"x"]), 0)
    for n in (1, 40):
        odd = bytearray(_tb_batch(0, [b"v" * n]))
        odd[16] = 2
        assert is_legacy_batch(odd)
        with pytest.raises(LegacyFormatError):
            check_batches(bytes(odd), 0)
        with pytest.raises(LegacyFormatError):
            batch_table(bytes(odd), 0)


def test_what_receive_batches_refuses() -> None:
    def kp(transactional: bool = False, control: bool = False) -> bytes:
        data = bytearray(_kafka_python_batch(0))
        attrs = struct.unpack_from(">h", data, 21)[0] | (0x10 if transactional else 0)
        attrs |= 0x20 if control else 0
        struct.pack_into(">h", data, 21, attrs)
        struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
        return bytes(data)

    for bad in (kp(transactional=True), kp(control=True)):
        with pytest.raises(InvalidArgumentError, match="transactional or control"):
            receive_batches(bad, BIG)
        # what is stored already is still read (a later version may store them)
        assert len(decode_records(bad)[0]) == len(KP_RECORDS)
    with pytest.raises(RecordTooLargeError, match="5000 bytes"):
        receive_batches(_kafka_python_batch(0), 4999)
    receive_batches(_kafka_python_batch(0), 5000)
    with pytest.raises(InvalidArgumentError, match="more than 3 records"):
        receive_batches(_kafka_python_batch(0), BIG, max_records=3)
    with pytest.raises(InvalidArgumentError, match="no record batches"):
        receive_batches(b"", BIG)
    # records that do not fit their framing, though the CRC is right
    good = spec.record_bytes(0, 0, b"k", b"v")
    for section, count, why in [
        (good + b"\x00", 1, "left"),
        (good + good, 1, "left"),
        (good, 2, "ends inside|count"),
        (bytes([good[0] + 2]) + good[1:] + b"\x00", 1, "fields take"),
        (spec.record_bytes(1, 0, b"k", b"v"), 1, "offsetDelta 1"),
        (good + spec.record_bytes(0, 0, b"k", b"v"), 2, "offsetDelta 0, not 1"),
    ]:
        with pytest.raises(CorruptRecordError, match=why):
            receive_batches(spec.assemble(section, count), BIG)
    with pytest.raises(CorruptRecordError, match="count"):
        receive_batches(spec.assemble(good, 1, last_offset_delta=1), BIG)
    with pytest.raises(CorruptRecordError, match="delete horizon"):
        receive_batches(spec.assemble(good, 1, attributes=0x40), BIG)
    with pytest.raises(CorruptRecordError, match="codec"):
        receive_batches(spec.assemble(good, 1, attributes=6), BIG)
    with pytest.raises(InvalidArgumentError, match="out of range"):
        receive_batches(spec.assemble(good, 1, base_timestamp=1 << 62, max_timestamp=1 << 62), BIG)
    with pytest.raises(CorruptRecordError, match="does not decompress"):
        receive_batches(spec.assemble(b"\x1f\x8bnot gzip", 1, attributes=1), BIG)


def test_values_and_the_header_helpers() -> None:
    validate_value(None, 0)
    validate_value(b"", 0)
    with pytest.raises(RecordTooLargeError):
        validate_value(b"ab", 1)
    with pytest.raises(InvalidArgumentError):
        validate_value("text", 10)
    data = bytes(encode_batch(42, [b"a", b"b", b"c"], NOW, BIG).data)
    assert batch_header(data) == (42, len(data), 3)
    assert first_timestamp(data) == NOW
    r = Record(0, NOW, None, b"abc")
    assert r.size == 1 + 9  # as the first record of a batch: length, 6 one-byte fields, value
    assert r.size == decode_records(bytes(encode_batch(0, [b"abc"], NOW, BIG).data))[0][0].size
    with pytest.raises(InvalidArgumentError):
        encode_batch(0, [ProducerRecord(b"v", headers=(("n", "text"),))], NOW, BIG)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        encode_batch(0, [ProducerRecord("text")], NOW, BIG)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        encode_batch(0, [b"v"], NOW, BIG, compression="brotli")
