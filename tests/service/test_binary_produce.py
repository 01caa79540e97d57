"""Binary batch produce (``Content-Type: application/vnd.tiered-log.frames``) against a
real server process: round trips through binary produce and binary fetch, verification
of every record batch (a bad batch is 400 naming it and nothing is stored), the append
threshold and the request size bound (413, nothing stored), an empty body, auth, base
offsets in the body ignored (the log assigns consecutive ones), and the JSON form and the
client (which sends batches) next to it. The parsing function itself
(:func:`receive_batches` + :meth:`EncodedBatch.rebased`) is tested in process too."""

from __future__ import annotations

import base64
import os
import struct
import time
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from tiered_log.client import Client
from tiered_log.errors import CorruptRecordError, InvalidArgumentError, RecordTooLargeError
from tiered_log.format.records import (
    HEADER,
    HEADER_SIZE,
    RECORD_OVERHEAD,
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
MAGIC = 0x5442  # the documented batch magic ("TB")
CHECKED_FROM = 20  # the checksum covers a batch from this byte on
CHECKSUM_AT = 12
SIZE_AT = 8
MAGIC_AT = 20
COUNT_AT = 24


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
) -> EncodedBatch:
    return encode_batch(base_offset, records, now_ms, BIG, max_batch_bytes=max_batch_bytes)


def _frames(
    records: Sequence[ProducerRecord | bytes],
    base_offset: int = 0,
    now_ms: int = -1,
    max_batch_bytes: int = 1 << 20,
) -> bytes:
    """A body of record batches; ``now_ms=-1`` (the default) leaves timestamps to the
    server; a small ``max_batch_bytes`` cuts the records into several batches."""
    return bytes(_encoded(records, base_offset, now_ms, max_batch_bytes).data)


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


def _hand_made_batch(
    values: Sequence[bytes],
    timestamps: Sequence[int] | None = None,
    *,
    base: int = 0,
    keys: Sequence[bytes | None] | None = None,
    header_blocks: Sequence[bytes] | None = None,
    key_lengths: Sequence[int] | None = None,
    value_lengths: Sequence[int] | None = None,
    magic: int = MAGIC,
    count: int | None = None,
    attributes: int = 0,
) -> bytes:
    """One batch laid out by hand as the format documents it, with a correct checksum:
    for batches that encode_batch refuses to build. The ``*_lengths``, ``magic``,
    ``count`` and ``attributes`` overrides make batches whose checksum is right but whose
    contents are not."""
    n = len(values)
    ts = list(timestamps) if timestamps is not None else [0] * n
    ks = list(keys) if keys is not None else [None] * n
    hs = list(header_blocks) if header_blocks is not None else [b""] * n
    kl = list(key_lengths) if key_lengths is not None else [-1 if k is None else len(k) for k in ks]
    vl = list(value_lengths) if value_lengths is not None else [len(v) for v in values]
    body = (
        struct.pack(f"<{n}q", *ts)
        + struct.pack(f"<{n}i", *kl)
        + struct.pack(f"<{n}I", *vl)
        + struct.pack(f"<{n}I", *map(len, hs))
        + b"".join(k for k in ks if k is not None)
        + b"".join(values)
        + b"".join(hs)
    )
    size = HEADER_SIZE + len(body)
    cnt = n if count is None else count
    unsigned = HEADER.pack(base, size, 0, magic, attributes, cnt) + body
    checksum = xxhash.xxh3_64_intdigest(unsigned[CHECKED_FROM:], seed=base)
    return HEADER.pack(base, size, checksum, magic, attributes, cnt) + body


def test_hand_made_batches_match_the_encoder() -> None:
    """The hand-made layout above is the one the library writes (so the tests that use it
    test the real format)."""
    recs = [
        ProducerRecord(b"value", key=b"ky", headers=(("h", b"x"),), timestamp=5),
        ProducerRecord(b"v2", timestamp=6),
    ]
    enc = encode_batch(9, recs, 0, BIG)
    hdr = b"\x01\x00h\x01\x00\x00\x00x"
    assert bytes(enc.data) == _hand_made_batch(
        [b"value", b"v2"], [5, 6], base=9, keys=[b"ky", None], header_blocks=[hdr, b""]
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
    ]
    before = int(time.time() * 1000)
    r = _post_frames(admin, topic_name, _frames(sent, base_offset=1000))  # offsets ignored
    after = int(time.time() * 1000)
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {"offsets", "first_offset", "last_offset", "durable"}
    assert body["offsets"] == [0, 1, 2, 3, 4]
    assert (body["first_offset"], body["last_offset"]) == (0, 4)
    assert isinstance(body["durable"], bool)

    got = _fetch_binary(admin, topic_name)
    assert [g.offset for g in got] == [0, 1, 2, 3, 4]
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
    assert r.json()["offsets"] == [5, 6]
    assert [g.value for g in _fetch_binary(admin, topic_name, 5)] == [b"again", b"more"]
    assert [g.value for g in _fetch_binary(admin, topic_name, 6)] == [b"more"]

    # The same records read as JSON.
    recs = admin.get(_records_url(topic_name), params={"offset": 0}).json()["records"]
    assert recs[1]["value"] is None and base64.b64decode(recs[1]["value_b64"]) == binary
    assert recs[1]["timestamp"] == 42
    assert recs[4]["value"] == "text"


def test_batches_with_any_base_offsets_are_appended_consecutively(
    admin: httpx.Client, topic_name: str
) -> None:
    """Several batches whose base offsets are not consecutive (repeated, far ahead, even
    the largest u64) are stored as sent at consecutive offsets after the log's end, each
    batch rewritten with its new base offset and a checksum that matches it."""
    _create(admin, topic_name)
    assert _post_frames(admin, topic_name, _frames([b"first"])).json()["offsets"] == [0]
    parts = [
        _frames([b"a0", b"a1"], base_offset=0),
        _frames([b"b0"], base_offset=0),
        _frames([ProducerRecord(b"c0", key=b"k"), b"c1", b"c2"], base_offset=1 << 40),
        _frames([b"d0"], base_offset=2),
        _frames([b"e0"], base_offset=(1 << 64) - 1),
    ]
    r = _post_frames(admin, topic_name, b"".join(parts))
    assert r.status_code == 200, r.text
    assert r.json()["offsets"] == list(range(1, 9))
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
    ]
    assert got[4].key == b"k"

    page = admin.get(_records_url(topic_name), params={"offset": 0}, headers=BIN).content
    table, end = batch_table(page, 0)  # verifies checksums and the offset sequence
    assert end == len(page)
    assert [(b.base_offset, b.record_count) for b in table] == [
        (0, 1),
        (1, 2),
        (3, 1),
        (4, 3),
        (7, 1),
        (8, 1),
    ]

    # A fetch from inside a batch gets the whole batch; the records before are skipped.
    r = admin.get(_records_url(topic_name), params={"offset": 5}, headers=BIN)
    assert batch_header(r.content)[0] == 4
    assert [g.value for g in _fetch_binary(admin, topic_name, 5)] == [b"c1", b"c2", b"d0", b"e0"]

    # The next request continues after them.
    r = _post_frames(admin, topic_name, _frames([b"f0"], base_offset=3) + _frames([b"f1"]))
    assert r.status_code == 200 and r.json()["offsets"] == [9, 10]


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

    def stored(topic: str) -> list[tuple[bytes | None, bytes, Any, int]]:
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


def test_negative_timestamps_take_the_servers_clock(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name)
    before = int(time.time() * 1000)
    body = _hand_made_batch([b"a", b"b", b"c"], [-1, 5, -(1 << 63)]) + _frames(
        [b"d", ProducerRecord(b"e", timestamp=6)], now_ms=-12345
    )
    r = _post_frames(admin, topic_name, body)
    after = int(time.time() * 1000)
    assert r.status_code == 200 and r.json()["offsets"] == [0, 1, 2, 3, 4], r.text
    got = _fetch_binary(admin, topic_name)
    assert [g.value for g in got] == [b"a", b"b", b"c", b"d", b"e"]
    for i in (0, 2, 3):
        assert before - 1000 <= got[i].timestamp <= after + 1000, got[i]
    assert (got[1].timestamp, got[4].timestamp) == (5, 6)


# ---- bad bodies: nothing stored -------------------------------------------------------------


def test_corrupted_batch_is_400_naming_it_and_nothing_stored(
    admin: httpx.Client, topic_name: str
) -> None:
    _create(admin, topic_name)
    values = [bytes([65 + i]) * 100 for i in range(10)]
    enc = _encoded(values, max_batch_bytes=HEADER_SIZE + 2 * (RECORD_OVERHEAD + 100))
    body = bytes(enc.data)
    assert [b.record_count for b in enc.batches] == [2] * 5
    b1, b2, b3, b4 = enc.batches[1:]
    n = 2
    cols = b2.position + HEADER_SIZE
    # A flipped bit of batch 2 in: a value, a timestamp, each length column, and each
    # header field (size, checksum, magic, attributes, count).
    spots = {
        "value": b2.position + b2.size - 1,
        "timestamp": cols + 1,
        "key length": cols + 8 * n + 1,
        "value length": cols + 12 * n,
        "header-block length": cols + 16 * n + 4,
        "size": b2.position + SIZE_AT,
        "checksum": b2.position + CHECKSUM_AT,
        "magic": b2.position + MAGIC_AT,
        "attributes": b2.position + MAGIC_AT + 2,
        "count": b2.position + COUNT_AT,
    }
    for what, at in spots.items():
        msg = _error(_post_frames(admin, topic_name, _corrupt(body, at)), 400, "invalid_request")
        assert msg.startswith("bad record batch: "), (what, msg)
        assert f"batch 2 (at byte {b2.position}" in msg, (what, msg)
    # A batch carrying another base offset than it was checksummed with fails its check.
    msg = _error(
        _post_frames(admin, topic_name, _corrupt(body, b3.position)), 400, "invalid_request"
    )
    assert f"batch 3 (at byte {b3.position}" in msg and "checksum" in msg, msg
    # A size that cannot be.
    small = bytearray(body)
    struct.pack_into("<I", small, b1.position + SIZE_AT, 10)
    msg = _error(_post_frames(admin, topic_name, bytes(small)), 400, "invalid_request")
    assert f"batch 1 (at byte {b1.position}" in msg and "size" in msg, msg
    # A body that ends inside a batch: in its data, in its header, or past the last one.
    for cut, index in ((body[:-7], 4), (body[: b4.position + 10], 4), (body + b"\0" * 5, 5)):
        msg = _error(_post_frames(admin, topic_name, cut), 400, "invalid_request")
        assert f"batch {index} (at byte" in msg and "ends inside" in msg, msg
    # Garbage.
    _error(_post_frames(admin, topic_name, b"not batches at all"), 400, "invalid_request")
    _error(_post_frames(admin, topic_name, os.urandom(4096)), 400, "invalid_request")
    assert _next_offset(admin, topic_name) == 0
    # The intact body is fine.
    r = _post_frames(admin, topic_name, body)
    assert r.status_code == 200 and r.json()["offsets"] == list(range(10))
    assert [g.value for g in _fetch_binary(admin, topic_name)] == values


@pytest.mark.parametrize(
    ("batch", "expect"),
    [
        pytest.param(
            _hand_made_batch([b"abcd"], value_lengths=[3]), "do not add up", id="value-lengths"
        ),
        pytest.param(
            _hand_made_batch([b"abcd"], keys=[b"k"], key_lengths=[2]),
            "do not add up",
            id="key-lengths",
        ),
        pytest.param(_hand_made_batch([b"abcd"], key_lengths=[-2]), "key length", id="key-length"),
        pytest.param(_hand_made_batch([b"abcd"], magic=0x4254), "bad header", id="magic"),
        pytest.param(_hand_made_batch([b"abcd"], count=0), "bad header", id="no-records"),
        pytest.param(_hand_made_batch([b"abcd"], count=2), "bad header", id="count"),
        pytest.param(
            _hand_made_batch([b"abcd"], header_blocks=[b"\x05\x00ab"]), "header", id="header-block"
        ),
        # The format defines no attribute (the field is 0): any bit set is refused.
        pytest.param(
            _hand_made_batch([b"abcd"], attributes=0xFFFF), "attributes 0xffff", id="attributes-all"
        ),
        pytest.param(
            _hand_made_batch([b"abcd"], attributes=1), "attributes 0x0001", id="attributes-low-bit"
        ),
        pytest.param(
            _hand_made_batch([b"abcd"], attributes=0x8000),
            "attributes 0x8000",
            id="attributes-high-bit",
        ),
    ],
)
def test_checksummed_but_malformed_batch_is_400(
    admin: httpx.Client, topic_name: str, batch: bytes, expect: str
) -> None:
    """A batch whose checksum is right but whose layout is not is refused too."""
    _create(admin, topic_name)
    body = _frames([b"ok"]) + batch
    msg = _error(_post_frames(admin, topic_name, body), 400, "invalid_request")
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


def test_empty_value_in_a_batch_is_400(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name)
    body = _frames([b"ok"]) + _hand_made_batch([b"fine", b""], [5, 6], base=1)
    msg = _error(_post_frames(admin, topic_name, body), 400, "invalid_argument")
    assert "batch 1 (at byte" in msg and "empty" in msg, msg
    assert _next_offset(admin, topic_name) == 0


def test_query_key_or_timestamp_with_frames_is_400(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name)
    for params in ({"key": "k"}, {"timestamp": 5}):
        r = _post_frames(admin, topic_name, _frames([b"x"]), params=params)
        _error(r, 400, "invalid_request")
    assert _next_offset(admin, topic_name) == 0


def test_every_single_byte_flip_is_400_and_nothing_stored(
    admin: httpx.Client, topic_name: str
) -> None:
    """Whatever byte of a batch is damaged (base offset, size, checksum, magic, count,
    columns, key, value, headers), the request is refused whole, naming that batch."""
    _create(admin, topic_name)
    enc = _encoded(
        [
            ProducerRecord(b"val", key=b"ky", headers=(("h", b"x"), ("n", None))),
            b"second",
            ProducerRecord(b"third", key=b""),
        ],
        max_batch_bytes=80,
    )
    assert len(enc.batches) == 2
    body = bytes(enc.data)
    for at in range(len(body)):
        msg = _error(_post_frames(admin, topic_name, _corrupt(body, at)), 400, "invalid_request")
        assert f"batch {_batch_at(enc, at)} (at byte" in msg, (at, msg)
    assert _next_offset(admin, topic_name) == 0


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
    assert FRAMES in op["description"] and "checksum" in op["description"]


# ---- receive_batches + rebased in process ---------------------------------------------------


def test_receive_batches_in_process() -> None:
    """The parsing function on its own: the client's bytes kept as they are (copied), its
    batches described, the library's errors naming the bad batch."""
    recs: list[ProducerRecord | bytes] = [
        b"x" * 10,
        ProducerRecord(b"y", key=b"k", timestamp=3),
        ProducerRecord(b"zz", headers=(("h", None),)),
    ]
    enc = _encoded(recs, base_offset=7, max_batch_bytes=60)
    assert len(enc.batches) == 3
    body = bytes(enc.data)
    got = receive_batches(body, BIG)
    assert bytes(got.data) == body
    assert (got.base_offset, got.count, got.batches) == (7, 3, enc.batches)
    assert got.payload_bytes == 10 + 2 + 2 + len(b"\x01\x00h\xff\xff\xff\xff")

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
    with pytest.raises(CorruptRecordError, match=r"batch 3 .*attributes 0x0002"):
        receive_batches(body + _hand_made_batch([b"a"], attributes=2), BIG)
    assert receive_batches(body, BIG, max_records=3).count == 3


def test_rebased_rewrites_offsets_checksums_and_clockless_timestamps_only() -> None:
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
        assert end == len(moved.data) and table == moved.batches
        out, pos, _ = decode_records(bytes(moved.data))
        assert pos == len(moved.data)
        assert [(r.offset, r.timestamp, r.key, r.value) for r in out] == [
            (500, 77, None, b"a"),
            (501, 3, b"k", b"b"),
            (502, 77, None, b"c"),
            (503, 77, None, b"d"),
        ]
        assert out[2].headers == (("h", b"v"),)
        # Nothing but the base offsets, checksums and the -1 timestamps changed.
        new = bytes(moved.data)
        assert len(new) == len(body)
        for b in moved.batches:
            p, q = b.position, b.position + b.size
            ts_end = p + HEADER_SIZE + 8 * b.record_count
            assert new[p + SIZE_AT : p + CHECKSUM_AT] == body[p + SIZE_AT : p + CHECKSUM_AT]
            assert (
                new[p + CHECKED_FROM : p + HEADER_SIZE] == body[p + CHECKED_FROM : p + HEADER_SIZE]
            )
            assert new[ts_end:q] == body[ts_end:q]

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
        max_batch_bytes=80,
    )
    body = bytes(enc.data)
    for at in range(len(body)):
        for bit in (0x01, 0x80):
            with pytest.raises(CorruptRecordError, match=f"batch {_batch_at(enc, at)} "):
                receive_batches(_corrupt(body, at, bit), BIG)


_records = st.lists(
    st.builds(
        ProducerRecord,
        value=st.binary(min_size=1, max_size=64),
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
)
def test_receiving_and_rebasing_inverts_encoding(
    records: list[ProducerRecord], base: int, new_base: int, max_batch: int, now: int
) -> None:
    enc = _encoded(records, base_offset=base, max_batch_bytes=max_batch)
    got = receive_batches(enc.data, BIG)
    assert (got.count, got.batches) == (len(records), enc.batches)
    moved = got.rebased(new_base, now)
    data = bytes(moved.data)
    table, end = batch_table(data, new_base)
    assert end == len(data) and table == moved.batches
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
