"""Binary batch produce (``Content-Type: application/vnd.tiered-log.frames``: Kafka record
batches, magic 2) against a real server process: round trips through binary produce and
binary fetch (null and empty keys and values included), verification of every batch (a
bad batch is 400 naming it and nothing is stored), the append threshold and the request
size bound (413, nothing stored), an empty body, auth, base offsets in the body ignored
(the log assigns consecutive ones, written in place: the rest of a batch is stored as
sent), and the JSON form and the client (which sends batches) next to it. The parsing
function itself (:func:`receive_batches` + :meth:`EncodedBatch.rebased`) is tested in
process too. Batches that the encoder refuses to build are laid out here by hand, from
Kafka's protocol guide (struct, zigzag varints and crc32c: :func:`_hand_made_batch`)."""

from __future__ import annotations

import base64
import os
import struct
import time
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from tiered_log.client import Client
from tiered_log.errors import CorruptRecordError, InvalidArgumentError, RecordTooLargeError
from tiered_log.format.records import (
    HEADER_SIZE,
    BatchInfo,
    EncodedBatch,
    ProducerRecord,
    Record,
    batch_header,
    batch_table,
    decode_records,
    encode_batch,
    receive_batches,
)

from .conftest import ADMIN, READER, WRITER, ServerProcess

FRAMES = "application/vnd.tiered-log.frames"
FRAMES_CT = {"Content-Type": FRAMES}
BIN = {"Accept": "application/octet-stream"}
BIG = 1 << 30  # an append threshold no test value reaches (the server applies the topic's)
# Kafka's record batch v2: where its header fields lie (big-endian).
BASE_OFFSET_AT = 0
LENGTH_AT = 8
EPOCH_AT = 12
MAGIC_AT = 16
CRC_AT = 17
ATTRIBUTES_AT = 21  # the CRC covers the batch from here to its end
LAST_DELTA_AT = 23
BASE_TS_AT = 27
MAX_TS_AT = 35
PRODUCER_ID_AT = 43
COUNT_AT = 57
OUTSIDE_CRC = set(range(BASE_OFFSET_AT, LENGTH_AT)) | set(range(EPOCH_AT, MAGIC_AT))
"""Header bytes the broker writes in place and no check covers: a flip there is a
different base offset (reassigned anyway) or leader epoch (stamped anyway)."""


def _create(c: httpx.Client, name: str, **config: Any) -> None:
    r = c.post("/v1/topics", json={"name": name, "partitions": 1, "config": config})
    assert r.status_code == 201, r.text


def _records_url(topic: str, partition: int = 0) -> str:
    return f"/v1/topics/{topic}/partitions/{partition}/records"


def _encoded(
    records: Sequence[ProducerRecord | bytes],
    base_offset: int = 0,
    now_ms: int = -1,
    max_batch_bytes: int = 1 << 20,
    compression: str | None = None,
) -> EncodedBatch:
    return encode_batch(
        base_offset, records, now_ms, BIG, max_batch_bytes=max_batch_bytes, compression=compression
    )


def _frames(
    records: Sequence[ProducerRecord | bytes],
    base_offset: int = 0,
    now_ms: int = -1,
    max_batch_bytes: int = 1 << 20,
    compression: str | None = None,
) -> bytes:
    """A body of record batches; ``now_ms=-1`` (the default) leaves timestamps to the
    server; a small ``max_batch_bytes`` cuts the records into several batches."""
    return bytes(_encoded(records, base_offset, now_ms, max_batch_bytes, compression).data)


def _post_frames(c: httpx.Client, topic: str, body: bytes, **kw: Any) -> httpx.Response:
    return c.post(_records_url(topic), content=body, headers=FRAMES_CT, **kw)


def _next_offset(c: httpx.Client, topic: str) -> int:
    r = c.get(f"/v1/topics/{topic}/partitions/0/bounds")
    assert r.status_code == 200, r.text
    return int(r.json()["next_offset"])


def _fetch_binary(c: httpx.Client, topic: str, offset: int = 0) -> list[Record]:
    """Every record from ``offset`` on, through one binary fetch (whole batches: the first
    may begin before ``offset``)."""
    r = c.get(
        _records_url(topic),
        params={"offset": offset, "max_records": 10_000, "max_bytes": 1 << 30},
        headers=BIN,
    )
    assert r.status_code == 200, r.text
    recs, pos, _ = decode_records(r.content, start_offset=offset)
    assert pos == len(r.content)
    assert int(r.headers["x-record-count"]) == len(recs)
    assert [g.offset for g in recs] == list(range(offset, offset + len(recs)))
    assert int(r.headers["x-next-offset"]) == offset + len(recs)
    return recs


def _error(r: httpx.Response, status: int, code: str) -> str:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert err["code"] == code, err
    message: str = err["message"]
    return message


def _corrupt(body: bytes, at: int, bit: int = 0x01) -> bytes:
    b = bytearray(body)
    b[at] ^= bit
    return bytes(b)


def _batch_at(enc: EncodedBatch, at: int) -> int:
    """The index of the batch of ``enc`` holding byte ``at``."""
    return next(i for i, b in enumerate(enc.batches) if b.position <= at < b.position + b.size)


def _in_batch(enc: EncodedBatch, at: int) -> int:
    """Where byte ``at`` of ``enc`` lies within its batch."""
    return at - enc.batches[_batch_at(enc, at)].position


def _sans_mto(infos: Sequence[BatchInfo]) -> list[tuple[int, ...]]:
    """Batch infos without ``max_timestamp_offset`` (a walk that reads no record puts
    the batch's last offset there; a parse, the first record holding the maximum)."""
    return [tuple(b)[:6] for b in infos]


def _varint(n: int) -> bytes:
    """A zigzag base-128 varint (Kafka's varint/varlong)."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def _sized(b: bytes | None) -> bytes:
    return _varint(-1) if b is None else _varint(len(b)) + b


def _hand_made_record(
    offset_delta: int,
    ts_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] = (),
    *,
    length_adjust: int = 0,
    raw_key: bytes | None = None,
) -> bytes:
    """One record as Kafka's guide lays it out: length, attributes, timestampDelta,
    offsetDelta, key, value, headers (``raw_key``: the key field's bytes as given)."""
    body = (
        b"\x00"
        + _varint(ts_delta)
        + _varint(offset_delta)
        + (raw_key if raw_key is not None else _sized(key))
        + _sized(value)
        + _varint(len(headers))
        + b"".join(_sized(n.encode()) + _sized(v) for n, v in headers)
    )
    return _varint(len(body) + length_adjust) + body


def _hand_made_batch(
    values: Sequence[bytes | None],
    timestamps: Sequence[int] | None = None,
    *,
    base: int = 0,
    keys: Sequence[bytes | None] | None = None,
    headers: Sequence[Sequence[tuple[str, bytes | None]]] | None = None,
    magic: int = 2,
    count: int | None = None,
    last_offset_delta: int | None = None,
    attributes: int = 0,
    offset_deltas: Sequence[int] | None = None,
    max_timestamp: int | None = None,
    producer_id: int = -1,
    records: bytes | None = None,
) -> bytes:
    """One Kafka v2 batch laid out by hand from the protocol guide, its CRC-32C right: for
    batches that encode_batch refuses to build. The overrides make batches whose CRC is
    right but whose contents are not; ``records`` replaces the records section."""
    n = len(values)
    ts = list(timestamps) if timestamps is not None else [0] * n
    ks = list(keys) if keys is not None else [None] * n
    hs = list(headers) if headers is not None else [()] * n
    ds = list(offset_deltas) if offset_deltas is not None else list(range(n))
    base_ts = ts[0] if ts else 0
    if records is None:
        records = b"".join(
            _hand_made_record(ds[i], ts[i] - base_ts, ks[i], values[i], hs[i]) for i in range(n)
        )
    covered = (
        struct.pack(
            ">hiqqqhii",
            attributes,
            n - 1 if last_offset_delta is None else last_offset_delta,
            base_ts,
            max(ts, default=0) if max_timestamp is None else max_timestamp,
            producer_id,
            -1,
            -1,
            n if count is None else count,
        )
        + records
    )
    return struct.pack(">qiibI", base, 9 + len(covered), -1, magic, crc32c(covered)) + covered


def test_hand_made_batches_match_the_encoder() -> None:
    """The hand-made layout above is the one the library writes (so the tests that use it
    test the real format, and the encoder writes Kafka's)."""
    recs = [
        ProducerRecord(b"value", key=b"ky", headers=(("h", b"x"), ("n", None)), timestamp=5),
        ProducerRecord(None, key=b"", timestamp=9),
        ProducerRecord(b"", timestamp=6),
    ]
    enc = encode_batch(9, recs, 0, BIG)
    assert bytes(enc.data) == _hand_made_batch(
        [b"value", None, b""],
        [5, 9, 6],
        base=9,
        keys=[b"ky", b"", None],
        headers=[[("h", b"x"), ("n", None)], [], []],
    )


# ---- round trips ----------------------------------------------------------------------------


def test_round_trip_binary_produce_and_fetch(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name)
    binary = bytes(range(256))
    sent: list[ProducerRecord | bytes] = [
        b"plain value",
        ProducerRecord(binary, key=b"\x00\xffkey", timestamp=42),
        ProducerRecord(
            b"\xfe\xfd",
            key=b"",
            headers=(("bin", b"\x00\x01"), ("null", None), ("ünï", "text ✓".encode())),
        ),
        ProducerRecord(os.urandom(3000), key=b"k", headers=(("h", b""),), timestamp=1 << 40),
        ProducerRecord(b"text", timestamp=0),
        ProducerRecord(None, key=b"tombstone", timestamp=7),
        ProducerRecord(b"", key=None, timestamp=8),
        b"",
    ]
    before = int(time.time() * 1000)
    r = _post_frames(admin, topic_name, _frames(sent, base_offset=1000))  # offsets ignored
    after = int(time.time() * 1000)
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"offsets", "first_offset", "last_offset", "durable"}
    assert body["offsets"] == list(range(8))
    assert (body["first_offset"], body["last_offset"]) == (0, 7)
    assert isinstance(body["durable"], bool)

    got = _fetch_binary(admin, topic_name)
    assert [g.offset for g in got] == list(range(8))
    for g, s in zip(got, sent, strict=True):
        want = s if isinstance(s, ProducerRecord) else ProducerRecord(s)
        assert g.value == want.value
        assert g.key == want.key
        assert g.headers == want.headers
        if want.timestamp is None:  # the server's clock
            assert before - 1000 <= g.timestamp <= after + 1000
        else:
            assert g.timestamp == want.timestamp

    # The next request continues at the next offset, whatever offsets its batches carry.
    r = _post_frames(admin, topic_name, _frames([b"again", b"more"], base_offset=0))
    assert r.status_code == 200, r.text
    assert r.json()["offsets"] == [8, 9]
    assert [g.value for g in _fetch_binary(admin, topic_name, 8)] == [b"again", b"more"]
    assert [g.value for g in _fetch_binary(admin, topic_name, 9)] == [b"more"]

    # The same records read as JSON: null and empty told apart.
    recs = admin.get(_records_url(topic_name), params={"offset": 0}).json()["records"]
    assert recs[1]["value"] is None and base64.b64decode(recs[1]["value_b64"]) == binary
    assert recs[1]["timestamp"] == 42
    assert recs[4]["value"] == "text"
    assert (recs[5]["value"], recs[5]["value_b64"], recs[5]["key"]) == (None, None, "tombstone")
    assert (recs[6]["value"], recs[6]["key"]) == ("", None)


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_a_compressed_body_is_stored_compressed(
    admin: httpx.Client, topic_name: str, codec: str
) -> None:
    """A compressed batch is verified (decompressed to check its records) and stored as
    sent: the binary fetch returns the sent bytes, only the base offset the server's."""
    _create(admin, topic_name)
    recs: list[ProducerRecord | bytes] = [
        ProducerRecord(b"v%d" % i * 40, key=b"k%d" % (i % 4), timestamp=1000 + i) for i in range(50)
    ]
    body = _frames(recs, base_offset=77, compression=codec)
    assert _post_frames(admin, topic_name, _frames([b"first"])).status_code == 200
    r = _post_frames(admin, topic_name, body)
    assert r.status_code == 200 and r.json()["offsets"] == list(range(1, 51)), r.text
    page = admin.get(_records_url(topic_name), params={"offset": 1}, headers=BIN).content
    assert page[:8] == struct.pack(">q", 1)
    assert page[LENGTH_AT:EPOCH_AT] == body[LENGTH_AT:EPOCH_AT]
    assert page[MAGIC_AT:] == body[MAGIC_AT:]  # the CRC, the codec and the records as sent
    got = _fetch_binary(admin, topic_name, 1)
    assert [(g.key, g.value, g.timestamp) for g in got] == [
        (r.key, r.value, r.timestamp) for r in recs if isinstance(r, ProducerRecord)
    ]


def test_batches_with_any_base_offsets_are_appended_consecutively(
    admin: httpx.Client, topic_name: str
) -> None:
    """Several batches whose base offsets are not consecutive (repeated, far ahead, the
    largest int64, negative) are stored as sent at consecutive offsets after the log's
    end, each batch given its new base offset in place (outside its CRC)."""
    _create(admin, topic_name)
    assert _post_frames(admin, topic_name, _frames([b"first"])).json()["offsets"] == [0]
    parts = [
        _frames([b"a0", b"a1"], base_offset=0),
        _frames([b"b0"], base_offset=0),
        _frames([ProducerRecord(b"c0", key=b"k"), b"c1", b"c2"], base_offset=1 << 40),
        _frames([b"d0"], base_offset=2),
        _frames([b"e0"], base_offset=(1 << 63) - 1) + _frames([b"e1"], base_offset=-5),
    ]
    r = _post_frames(admin, topic_name, b"".join(parts))
    assert r.status_code == 200, r.text
    assert r.json()["offsets"] == list(range(1, 10))
    got = _fetch_binary(admin, topic_name)
    assert [g.value for g in got] == [
        b"first",
        b"a0",
        b"a1",
        b"b0",
        b"c0",
        b"c1",
        b"c2",
        b"d0",
        b"e0",
        b"e1",
    ]
    assert got[4].key == b"k"

    page = admin.get(_records_url(topic_name), params={"offset": 0}, headers=BIN).content
    table, end = batch_table(page, 0)  # verifies the CRCs and the offset sequence
    assert end == len(page)
    assert [(b.base_offset, b.record_count) for b in table] == [
        (0, 1),
        (1, 2),
        (3, 1),
        (4, 3),
        (7, 1),
        (8, 1),
        (9, 1),
    ]

    # A fetch from inside a batch gets the whole batch; the records before are skipped.
    r = admin.get(_records_url(topic_name), params={"offset": 5}, headers=BIN)
    assert batch_header(r.content)[0] == 4
    assert [g.value for g in _fetch_binary(admin, topic_name, 5)] == [
        b"c1",
        b"c2",
        b"d0",
        b"e0",
        b"e1",
    ]

    # The next request continues after them.
    r = _post_frames(admin, topic_name, _frames([b"f0"], base_offset=3) + _frames([b"f1"]))
    assert r.status_code == 200 and r.json()["offsets"] == [10, 11]


def test_fetched_batches_produce_as_they_are(admin: httpx.Client, topic_name: str) -> None:
    """A binary fetch's body is a valid binary produce body (mirroring a partition): it
    is whole batches, so a page that starts at a batch boundary copies exactly the
    records from there, and following X-Next-Offset page by page copies the partition."""
    src, dst, mid, mirror = (topic_name + s for s in ("-src", "-dst", "-mid", "-mirror"))
    for t in (src, dst, mid, mirror):
        _create(admin, t)
    recs = [
        ProducerRecord(
            f"v{i}".encode(), key=f"k{i}".encode(), headers=(("i", bytes([i])),), timestamp=1000 + i
        )
        for i in range(50)
    ]
    enc = _encoded(recs, max_batch_bytes=200)
    assert len(enc.batches) >= 5
    assert _post_frames(admin, src, bytes(enc.data)).status_code == 200
    want = [(p.key, p.value, p.headers, p.timestamp) for p in recs]

    def stored(topic: str) -> list[tuple[bytes | None, bytes | None, Any, int]]:
        return [(g.key, g.value, g.headers, g.timestamp) for g in _fetch_binary(admin, topic)]

    k = enc.batches[2].base_offset  # a batch boundary
    r = admin.get(_records_url(src), params={"offset": k}, headers=BIN)
    assert r.status_code == 200 and int(r.headers["x-record-count"]) == 50 - k
    r = _post_frames(admin, dst, r.content)
    assert r.status_code == 200, r.text
    assert r.json()["offsets"] == list(range(50 - k))
    assert stored(dst) == want[k:]

    # From inside a batch: the body holds that whole batch, and so does its copy.
    r = admin.get(_records_url(src), params={"offset": k + 1}, headers=BIN)
    assert r.status_code == 200 and int(r.headers["x-record-count"]) == 50 - k - 1
    assert batch_header(r.content)[0] == k
    r = _post_frames(admin, mid, r.content)
    assert r.status_code == 200 and r.json()["offsets"] == list(range(50 - k))
    assert stored(mid) == want[k:]

    # Page by page (small pages end at batch boundaries: X-Next-Offset is one).
    off = 0
    while off < 50:
        r = admin.get(_records_url(src), params={"offset": off, "max_records": 7}, headers=BIN)
        assert r.status_code == 200, r.text
        nxt = int(r.headers["x-next-offset"])
        assert nxt > off
        r = _post_frames(admin, mirror, r.content)
        assert r.status_code == 200 and r.json()["last_offset"] == nxt - 1, r.text
        off = nxt
    assert stored(mirror) == want


def test_content_type_parameters_are_accepted(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name)
    r = admin.post(
        _records_url(topic_name),
        content=_frames([b"x"]),
        headers={"Content-Type": f"{FRAMES}; version=1"},
    )
    assert r.status_code == 200, r.text
    assert r.json()["offsets"] == [0]


def test_client_produce_uses_batches(server: ServerProcess, topic_name: str) -> None:
    """Client.produce (binary) keeps its signature and behaviour: bytes, text and
    ProducerRecords, offsets back, server-side timestamps unless given."""
    with Client(server.url, token=ADMIN) as c:
        c.create_topic(topic_name, config={"append_threshold": 100})
        assert c.produce(
            topic_name, 0, [b"\x00bin", "tëxt", b"ba", ProducerRecord(b"v", key=b"k", timestamp=7)]
        ) == [0, 1, 2, 3]
        got = c.fetch(topic_name, 0, 0).records
        assert [g.value for g in got] == [b"\x00bin", "tëxt".encode(), b"ba", b"v"]
        assert got[3].key == b"k" and got[3].timestamp == 7 and got[0].timestamp > 1 << 40
        with pytest.raises(RecordTooLargeError):
            c.produce(topic_name, 0, [b"ok", b"y" * 101])
        assert c.bounds(topic_name, 0).next_offset == 4


def test_clockless_batches_take_the_servers_clock(admin: httpx.Client, topic_name: str) -> None:
    """A batch whose baseTimestamp and maxTimestamp are -1 (what the client sends for
    records without a timestamp) gets the server's clock, written into its header (the
    CRC recomputed); a batch with timestamps keeps them."""
    _create(admin, topic_name)
    before = int(time.time() * 1000)
    body = (
        _hand_made_batch([b"a", b"b"], [-1, -1])
        + _frames([b"c"], now_ms=-1)
        + _frames([ProducerRecord(b"d", timestamp=5), ProducerRecord(b"e", timestamp=6)])
    )
    r = _post_frames(admin, topic_name, body)
    after = int(time.time() * 1000)
    assert r.status_code == 200 and r.json()["offsets"] == [0, 1, 2, 3, 4], r.text
    got = _fetch_binary(admin, topic_name)
    assert [g.value for g in got] == [b"a", b"b", b"c", b"d", b"e"]
    for i in (0, 1, 2):
        assert before - 1000 <= got[i].timestamp <= after + 1000, got[i]
    assert (got[3].timestamp, got[4].timestamp) == (5, 6)
    page = admin.get(_records_url(topic_name), params={"offset": 0}, headers=BIN).content
    base_ts, max_ts = struct.unpack_from(">qq", page, BASE_TS_AT)
    assert base_ts == max_ts == got[0].timestamp  # in the stored header, not -1


# ---- bad bodies: nothing stored -------------------------------------------------------------


def test_corrupted_batch_is_400_naming_it_and_nothing_stored(
    admin: httpx.Client, topic_name: str
) -> None:
    _create(admin, topic_name)
    values = [bytes([65 + i]) * 100 for i in range(10)]
    enc = _encoded(values, now_ms=1000, max_batch_bytes=HEADER_SIZE + 2 * 110)
    body = bytes(enc.data)
    assert [b.record_count for b in enc.batches] == [2] * 5
    b1, b2, b3, b4 = enc.batches[1:]
    p = b2.position
    # A flipped bit of batch 2 in: a value, the records' framing, and each header field
    # the CRC covers or the framing checks.
    spots = {
        "value": p + b2.size - 1,
        "record framing": p + HEADER_SIZE,
        "batchLength": p + LENGTH_AT + 3,
        "magic": p + MAGIC_AT,
        "crc": p + CRC_AT + 2,
        "attributes": p + ATTRIBUTES_AT + 1,
        "lastOffsetDelta": p + LAST_DELTA_AT + 3,
        "baseTimestamp": p + BASE_TS_AT + 7,
        "maxTimestamp": p + MAX_TS_AT + 7,
        "producerId": p + PRODUCER_ID_AT + 7,
        "records count": p + COUNT_AT + 3,
    }
    for what, at in spots.items():
        msg = _error(_post_frames(admin, topic_name, _corrupt(body, at)), 400, "invalid_request")
        assert msg.startswith("bad record batch: "), (what, msg)
        assert f"batch 2 (at byte {p}" in msg, (what, msg)
    # A batchLength that cannot be.
    small = bytearray(body)
    struct.pack_into(">i", small, b1.position + LENGTH_AT, 10)
    msg = _error(_post_frames(admin, topic_name, bytes(small)), 400, "invalid_request")
    assert f"batch 1 (at byte {b1.position}" in msg and "batchLength" in msg, msg
    # A body that ends inside a batch: in its records, in its header, or past the last one.
    for cut, index in ((body[:-7], 4), (body[: b4.position + 10], 4), (body + b"\0" * 5, 5)):
        msg = _error(_post_frames(admin, topic_name, cut), 400, "invalid_request")
        assert f"batch {index} (at byte" in msg and "ends inside" in msg, msg
    # Garbage, and a batch of the format before Kafka's (its magic "TB" at bytes 20-21).
    _error(_post_frames(admin, topic_name, b"not batches at all"), 400, "invalid_request")
    _error(_post_frames(admin, topic_name, os.urandom(4096)), 400, "invalid_request")
    old = bytes(28) + bytes(8)
    old = old[:20] + b"BT" + old[22:]
    msg = _error(_post_frames(admin, topic_name, old), 400, "invalid_request")
    assert "migrate" in msg, msg
    assert _next_offset(admin, topic_name) == 0
    # The intact body is fine.
    r = _post_frames(admin, topic_name, body)
    assert r.status_code == 200 and r.json()["offsets"] == list(range(10))
    assert [g.value for g in _fetch_binary(admin, topic_name)] == values
    assert b3.position > p


_MALFORMED = {
    "record-length-long": _hand_made_batch(
        [b"abcd"], records=_hand_made_record(0, 0, None, b"abcd", length_adjust=1)
    ),
    "record-length-short": _hand_made_batch(
        [b"abcd"], records=_hand_made_record(0, 0, None, b"abcd", length_adjust=-1)
    ),
    "key-length": _hand_made_batch(
        [b"abcd"], records=_hand_made_record(0, 0, None, b"abcd", raw_key=b"\x0ak")
    ),
    "record-attributes": _hand_made_batch(
        [b"abcd"], records=_hand_made_record(0, 0, None, b"abcd").replace(b"\x00", b"\x80", 1)
    ),
    "trailing-byte": _hand_made_batch(
        [b"abcd"], records=_hand_made_record(0, 0, None, b"abcd") + b"\x00"
    ),
    "magic": _hand_made_batch([b"abcd"], magic=1),
    "no-records": _hand_made_batch([], count=0, last_offset_delta=-1),
    "count": _hand_made_batch([b"abcd"], count=2),
    "last-offset-delta": _hand_made_batch([b"abcd"], last_offset_delta=1),
    "offset-deltas": _hand_made_batch([b"a", b"b"], offset_deltas=[0, 2]),
    "codec-5": _hand_made_batch([b"abcd"], attributes=5),
    "gzip-garbage": _hand_made_batch([b"abcd"], attributes=1, records=b"not gzip at all"),
    "delete-horizon": _hand_made_batch([b"abcd"], attributes=0x40),
    "undefined-bit": _hand_made_batch([b"abcd"], attributes=0x80),
}


_EXPECT = {
    "record-length-long": "record length",
    "record-length-short": "fields take",
    "key-length": "ends inside record 0",
    "record-attributes": "attributes 0x80",
    "trailing-byte": "left",
    "magic": "magic 1",
    "no-records": "records count 0",
    "count": "records count 2",
    "last-offset-delta": "lastOffsetDelta 1",
    "offset-deltas": "offsetDelta 2",
    "codec-5": "codec 5",
    "gzip-garbage": "decompress",
    "delete-horizon": "0x0040",
    "undefined-bit": "0x0080",
}


@pytest.mark.parametrize(("what", "expect"), list(_EXPECT.items()))
def test_crc_checked_but_malformed_batch_is_400(
    admin: httpx.Client, topic_name: str, what: str, expect: str
) -> None:
    """A batch whose CRC-32C is right but whose framing or records are not is refused
    too, naming it."""
    _create(admin, topic_name)
    body = _frames([b"ok"]) + _MALFORMED[what]
    msg = _error(_post_frames(admin, topic_name, body), 400, "invalid_request")
    assert "batch 1 (at byte" in msg and expect in msg, msg
    assert _next_offset(admin, topic_name) == 0


def test_a_negative_key_or_value_length_reads_as_null(admin: httpx.Client, topic_name: str) -> None:
    """A key or value length below -1 is null, as Kafka's broker and clients read it:
    the batch is stored as sent and every reader gives a null key and value."""
    _create(admin, topic_name)
    rec = _hand_made_record(0, 0, None, None, raw_key=b"\x05")  # key length -3
    assert rec.endswith(b"\x05\x01\x00")  # the null value (-1), no header
    rec = rec[:-2] + b"\x07\x00"  # value length -4
    batch = _hand_made_batch([b""], records=rec)
    r = _post_frames(admin, topic_name, batch)
    assert r.status_code == 200 and r.json()["offsets"] == [0], r.text
    (got,) = _fetch_binary(admin, topic_name)
    assert (got.key, got.value) == (None, None)
    r = admin.get(_records_url(topic_name), params={"offset": 0})
    assert r.status_code == 200, r.text
    (j,) = r.json()["records"]
    assert (j["key"], j["value"]) == (None, None), j


@pytest.mark.parametrize(
    ("batch", "expect"),
    [
        pytest.param(_hand_made_batch([b"t"], attributes=0x10), "transaction", id="transactional"),
        pytest.param(_hand_made_batch([b"c"], attributes=0x20), "transaction", id="control"),
        pytest.param(_hand_made_batch([b"x", b"y"], [5, 1 << 62]), "timestamp", id="timestamp"),
    ],
)
def test_batches_the_log_does_not_take_are_400(
    admin: httpx.Client, topic_name: str, batch: bytes, expect: str
) -> None:
    """Well-formed batches the log does not take: transactional and control batches (no
    transactions here), a timestamp past the 2**62 ms range."""
    _create(admin, topic_name)
    msg = _error(_post_frames(admin, topic_name, _frames([b"ok"]) + batch), 400, "invalid_argument")
    assert "batch 1 (at byte" in msg and expect in msg, msg
    assert _next_offset(admin, topic_name) == 0


def test_oversize_value_is_413_and_nothing_stored(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name, append_threshold=100)
    values = [b"a" * 100, b"fine", b"b" * 101, b"also fine"]
    msg = _error(_post_frames(admin, topic_name, _frames(values)), 413, "record_too_large")
    assert "batch 0 (at byte 0, offset 0)" in msg and "101" in msg, msg
    enc = _encoded(values, base_offset=1000, max_batch_bytes=1)  # a batch per record
    assert len(enc.batches) == 4
    msg = _error(_post_frames(admin, topic_name, bytes(enc.data)), 413, "record_too_large")
    assert f"batch 2 (at byte {enc.batches[2].position}, offset 1002)" in msg and "101" in msg, msg
    assert _next_offset(admin, topic_name) == 0
    r = _post_frames(admin, topic_name, _frames([b"a" * 100, b"fine"]))
    assert r.status_code == 200 and r.json()["offsets"] == [0, 1]


def test_body_over_max_request_bytes_is_413(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name)
    body = _frames([os.urandom(64 << 10) for _ in range(20)])  # > the server's 1 MiB bound
    r = _post_frames(admin, topic_name, body)
    assert r.status_code == 413, r.text
    assert r.json()["error"]["code"] == "request_too_large"

    def chunks() -> Iterator[bytes]:  # streamed without a Content-Length
        for i in range(0, len(body), 1 << 16):
            yield body[i : i + (1 << 16)]

    r = admin.post(_records_url(topic_name), content=chunks(), headers=FRAMES_CT)
    assert r.status_code == 413, r.text
    assert _next_offset(admin, topic_name) == 0


def test_empty_body_is_400(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name)
    msg = _error(_post_frames(admin, topic_name, b""), 400, "invalid_request")
    assert "no record batches" in msg
    assert _next_offset(admin, topic_name) == 0


def test_more_records_than_a_request_holds_is_400(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name)
    for body in (_frames([b"x"] * 10_001), _frames([b"x"] * 10_001, max_batch_bytes=4096)):
        msg = _error(_post_frames(admin, topic_name, body), 400, "invalid_argument")
        assert "10000" in msg
    assert _next_offset(admin, topic_name) == 0
    r = _post_frames(admin, topic_name, _frames([b"x"] * 10_000, max_batch_bytes=4096))
    assert r.status_code == 200 and r.json()["last_offset"] == 9_999


def test_timestamp_out_of_range_is_400(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name)
    for ts in (1 << 62, (1 << 63) - 1):
        body = _frames([b"ok"]) + _hand_made_batch([b"x", b"y"], [5, ts], base=1)
        msg = _error(_post_frames(admin, topic_name, body), 400, "invalid_argument")
        assert "batch 1 (at byte" in msg and "timestamp" in msg, msg
    assert _next_offset(admin, topic_name) == 0


def test_null_and_empty_values_in_a_hand_made_batch_are_stored(
    admin: httpx.Client, topic_name: str
) -> None:
    _create(admin, topic_name)
    body = _frames([b"ok"]) + _hand_made_batch(
        [b"fine", b"", None], [5, 6, 7], base=1, keys=[None, b"", b"k"]
    )
    r = _post_frames(admin, topic_name, body)
    assert r.status_code == 200 and r.json()["offsets"] == [0, 1, 2, 3], r.text
    got = _fetch_binary(admin, topic_name, 1)
    assert [(g.key, g.value, g.timestamp) for g in got] == [
        (None, b"fine", 5),
        (b"", b"", 6),
        (b"k", None, 7),
    ]


def test_query_key_or_timestamp_with_frames_is_400(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name)
    for params in ({"key": "k"}, {"timestamp": 5}):
        r = _post_frames(admin, topic_name, _frames([b"x"]), params=params)
        _error(r, 400, "invalid_request")
    assert _next_offset(admin, topic_name) == 0


def test_every_single_byte_flip_is_400_and_nothing_stored(
    admin: httpx.Client, topic_name: str
) -> None:
    """Whatever byte of a batch that a check covers is damaged (batchLength, magic, CRC,
    every byte under the CRC: attributes to the last record byte), the request is refused
    whole, naming that batch; a flip in the base offset or the partition leader epoch,
    which the broker writes itself, is no error."""
    _create(admin, topic_name)
    enc = _encoded(
        [
            ProducerRecord(b"val", key=b"ky", headers=(("h", b"x"), ("n", None))),
            b"second",
            ProducerRecord(b"third", key=b""),
        ],
        max_batch_bytes=100,
    )
    assert len(enc.batches) == 2
    body = bytes(enc.data)
    for at in range(len(body)):
        if _in_batch(enc, at) in OUTSIDE_CRC:
            continue
        msg = _error(_post_frames(admin, topic_name, _corrupt(body, at)), 400, "invalid_request")
        assert f"batch {_batch_at(enc, at)} (at byte" in msg, (at, msg)
    assert _next_offset(admin, topic_name) == 0
    for at in (3, EPOCH_AT + 1):
        r = _post_frames(admin, topic_name, _corrupt(body, at, 0x10))
        assert r.status_code == 200, r.text
    assert [g.value for g in _fetch_binary(admin, topic_name)] == [b"val", b"second", b"third"] * 2


# ---- auth -----------------------------------------------------------------------------------


def test_auth_like_the_other_endpoints(
    server: ServerProcess, admin: httpx.Client, topic_name: str
) -> None:
    ro = "ro.bin-" + topic_name[:60]
    _create(admin, ro)
    _create(admin, topic_name)
    body = _frames([b"secret-ish"])
    for auth in (None, "Bearer wrong-token"):
        headers = {**FRAMES_CT, **({"Authorization": auth} if auth else {})}
        r = httpx.post(server.url + _records_url(ro), content=body, headers=headers)
        assert r.status_code == 401, r.text
        assert r.headers["www-authenticate"] == "Bearer"
        assert r.json()["error"]["code"] == "unauthenticated"
    with server.client(READER) as c:  # read grant only
        _error(_post_frames(c, ro, body), 403, "permission_denied")
    with server.client(WRITER) as c:  # write on ro.* only
        _error(_post_frames(c, topic_name, body), 403, "permission_denied")
        # Auth is checked before the body: a bad body without the grant is still 403.
        _error(_post_frames(c, topic_name, b"garbage"), 403, "permission_denied")
        r = _post_frames(c, ro, body)
        assert r.status_code == 200 and r.json()["offsets"] == [0]
    assert _next_offset(admin, topic_name) == 0
    assert [g.value for g in _fetch_binary(admin, ro)] == [b"secret-ish"]


# ---- the other forms ------------------------------------------------------------------------


def test_json_form_still_works(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name)
    binary = bytes(range(255, -1, -1))
    r = admin.post(
        _records_url(topic_name),
        json={
            "records": [
                {"value": "hello", "key": "k"},
                {
                    "value_b64": base64.b64encode(binary).decode(),
                    "key_b64": base64.b64encode(b"\xff").decode(),
                    "timestamp": 99,
                    "headers": [{"name": "h", "value_b64": base64.b64encode(b"\x00").decode()}],
                },
            ]
        },
    )
    assert r.status_code == 200, r.text
    assert r.json()["offsets"] == [0, 1]
    got = _fetch_binary(admin, topic_name)
    assert (got[0].value, got[0].key) == (b"hello", b"k")
    assert (got[1].value, got[1].key, got[1].timestamp) == (binary, b"\xff", 99)
    assert got[1].headers == (("h", b"\x00"),)
    for bad in ({"value_b64": "not base64!"}, {"value": "a", "key_b64": "***"}):
        msg = _error(
            admin.post(_records_url(topic_name), json={"records": [bad]}), 400, "invalid_request"
        )
        assert "base64" in msg
    assert _next_offset(admin, topic_name) == 2
    # A raw octet-stream body is still one record.
    r = admin.post(
        _records_url(topic_name),
        content=_frames([b"a", b"b"]),
        headers={"Content-Type": "application/octet-stream"},
    )
    assert r.status_code == 200 and r.json()["offsets"] == [2]
    assert _fetch_binary(admin, topic_name, 2)[0].value == _frames([b"a", b"b"])


def test_unknown_content_type_names_the_frames_form(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name)
    msg = _error(
        admin.post(_records_url(topic_name), content=b"x", headers={"Content-Type": "text/plain"}),
        415,
        "unsupported_media_type",
    )
    assert FRAMES in msg


def test_openapi_documents_the_frames_form(server: ServerProcess) -> None:
    doc = httpx.get(server.url + "/openapi.json").json()
    op = doc["paths"]["/v1/topics/{topic}/partitions/{partition}/records"]["post"]
    content = op["requestBody"]["content"]
    assert set(content) == {"application/json", "application/octet-stream", FRAMES}
    assert content[FRAMES]["schema"]["format"] == "binary"
    assert FRAMES in op["description"] and "CRC-32C" in op["description"]


# ---- receive_batches + rebased in process ---------------------------------------------------


def test_receive_batches_in_process() -> None:
    """The parsing function on its own: the client's bytes kept as they are (copied), its
    batches described, the library's errors naming the bad batch."""
    recs: list[ProducerRecord | bytes] = [
        b"x" * 10,
        ProducerRecord(b"y", key=b"k", timestamp=3),
        ProducerRecord(None, headers=(("h", None),)),
    ]
    enc = _encoded(recs, base_offset=7, max_batch_bytes=60)
    assert len(enc.batches) == 3
    body = bytes(enc.data)
    got = receive_batches(body, BIG)
    assert bytes(got.data) == body
    assert (got.base_offset, got.count, got.batches) == (7, 3, enc.batches)
    assert got.payload_bytes == len(body) - 3 * HEADER_SIZE

    with pytest.raises(CorruptRecordError, match=f"batch 2 \\(at byte {enc.batches[2].position}"):
        receive_batches(_corrupt(body, len(body) - 1), BIG)
    with pytest.raises(CorruptRecordError, match=r"batch 2 .*ends inside"):
        receive_batches(body[:-1], BIG)
    with pytest.raises(RecordTooLargeError, match=r"batch 0 \(at byte 0, offset 7\)"):
        receive_batches(body, 9)
    with pytest.raises(InvalidArgumentError, match="more than 2 records"):
        receive_batches(body, BIG, max_records=2)
    with pytest.raises(InvalidArgumentError):
        receive_batches(b"", BIG)
    with pytest.raises(CorruptRecordError, match=r"batch 3 .*attributes 0x0040"):
        receive_batches(body + _hand_made_batch([b"a"], attributes=0x40), BIG)
    with pytest.raises(InvalidArgumentError, match=r"batch 3 .*transaction"):
        receive_batches(body + _hand_made_batch([b"a"], attributes=0x10), BIG)
    assert receive_batches(body, BIG, max_records=3).count == 3
    # An idempotent producer's fields are kept as sent.
    pid = _hand_made_batch([b"p"], producer_id=99)
    assert bytes(receive_batches(pid, BIG).data) == pid


def test_rebased_writes_base_offsets_and_clockless_timestamps_only() -> None:
    recs: list[ProducerRecord | bytes] = [
        b"a",
        ProducerRecord(b"b", key=b"k", timestamp=3),
        ProducerRecord(b"c", headers=(("h", b"v"),)),
        b"d",
    ]
    enc = _encoded(recs, base_offset=0, max_batch_bytes=70)  # every batch at base 0 below
    assert len(enc.batches) >= 2
    zeroed = b"".join(_encoded([r], base_offset=0).data for r in recs)
    for body in (bytes(enc.data), zeroed):
        buf = bytearray(body)
        got = receive_batches(buf, BIG)
        moved = got.rebased(500, now_ms=77)
        assert buf == body  # the caller's buffer is not touched
        assert (moved.base_offset, moved.count, moved.next_offset) == (500, 4, 504)
        table, end = batch_table(bytes(moved.data), 500)
        assert end == len(moved.data) and _sans_mto(table) == _sans_mto(moved.batches)
        out, pos, _ = decode_records(bytes(moved.data))
        assert pos == len(moved.data)
        assert [(r.offset, r.timestamp, r.key, r.value) for r in out] == [
            (500, 77, None, b"a"),
            (501, 3, b"k", b"b"),
            (502, 77, None, b"c"),
            (503, 77, None, b"d"),
        ]
        assert out[2].headers == (("h", b"v"),)
        # Nothing but the base offsets and, in a clock-less batch, its two timestamps
        # (and so its CRC) changed.
        new = bytes(moved.data)
        assert len(new) == len(body)
        for b in moved.batches:
            p, q = b.position, b.position + b.size
            old_ts = struct.unpack_from(">qq", body, p + BASE_TS_AT)
            assert new[p + LENGTH_AT : p + CRC_AT] == body[p + LENGTH_AT : p + CRC_AT]
            assert (
                new[p + ATTRIBUTES_AT : p + BASE_TS_AT] == body[p + ATTRIBUTES_AT : p + BASE_TS_AT]
            )
            assert new[p + PRODUCER_ID_AT : q] == body[p + PRODUCER_ID_AT : q]
            if old_ts == (-1, -1):
                assert struct.unpack_from(">qq", new, p + BASE_TS_AT) == (77, 77)
            else:
                assert new[p + CRC_AT : q] == body[p + CRC_AT : q]

    # Already at its place with no clock-less timestamp: the very same bytes.
    fixed = _encoded(recs, base_offset=9, now_ms=1234, max_batch_bytes=70)
    assert bytes(receive_batches(fixed.data, BIG).rebased(9, now_ms=1).data) == bytes(fixed.data)


def test_every_bit_flip_is_refused_in_process() -> None:
    enc = _encoded(
        [
            ProducerRecord(b"val", key=b"ky", headers=(("h", b"x"), ("n", None))),
            b"second",
            ProducerRecord(b"third", key=b"", timestamp=9),
        ],
        base_offset=3,
        max_batch_bytes=100,
        compression="zstd",
    )
    body = bytes(enc.data)
    for at in range(len(body)):
        if _in_batch(enc, at) in OUTSIDE_CRC:
            continue
        for bit in (0x01, 0x80):
            with pytest.raises(CorruptRecordError, match=f"batch {_batch_at(enc, at)} "):
                receive_batches(_corrupt(body, at, bit), BIG)


_records = st.lists(
    st.builds(
        ProducerRecord,
        value=st.none() | st.binary(max_size=64),
        key=st.none() | st.binary(max_size=16),
        headers=st.lists(
            st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)), max_size=3
        ).map(tuple),
        timestamp=st.none() | st.integers(0, (1 << 62) - 1),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=200, deadline=None)
@given(
    records=_records,
    base=st.integers(0, 1 << 40),
    new_base=st.integers(0, 1 << 40),
    max_batch=st.integers(1, 400),
    now=st.integers(0, (1 << 62) - 1),
    codec=st.sampled_from([None, "gzip", "snappy", "lz4", "zstd"]),
)
def test_receiving_and_rebasing_inverts_encoding(
    records: list[ProducerRecord],
    base: int,
    new_base: int,
    max_batch: int,
    now: int,
    codec: str | None,
) -> None:
    enc = _encoded(records, base_offset=base, max_batch_bytes=max_batch, compression=codec)
    got = receive_batches(enc.data, BIG)
    assert (got.count, got.batches) == (len(records), enc.batches)
    moved = got.rebased(new_base, now)
    data = bytes(moved.data)
    table, end = batch_table(data, new_base)
    assert end == len(data) and _sans_mto(table) == _sans_mto(moved.batches)
    out, pos, _ = decode_records(data)
    assert pos == len(data)
    assert [r.offset for r in out] == list(range(new_base, new_base + len(records)))
    assert [ProducerRecord(r.value, r.key, r.headers, r.timestamp) for r in out] == [
        ProducerRecord(p.value, p.key, p.headers, now if p.timestamp is None else p.timestamp)
        for p in records
    ]


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_the_documented_errors(data: bytes) -> None:
    try:
        got = receive_batches(data, 100, max_records=5)
    except (CorruptRecordError, RecordTooLargeError, InvalidArgumentError) as exc:
        assert str(exc)
        return
    assert 1 <= got.count <= 5 and got.batches
