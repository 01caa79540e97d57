"""Binary batch produce (``Content-Type: application/vnd.tiered-log.frames``) against a
real server process: round trips through binary produce and binary fetch, verification
of every frame (a bad frame is 400 and nothing is stored), the append threshold and the
request size bound (413, nothing stored), an empty body, auth, and the JSON form and
the client (which now sends frames) next to it."""

from __future__ import annotations

import base64
import os
import time
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiered_log.client import Client
from tiered_log.errors import CorruptRecordError, InvalidArgumentError, RecordTooLargeError
from tiered_log.format.records import (
    BODY_FIXED,
    HEADER,
    HEADER_SIZE,
    ProducerRecord,
    Record,
    checksum_of,
    decode_frames,
    encode_batch,
    frames_to_producer_records,
)

from .conftest import ADMIN, READER, WRITER, ServerProcess

FRAMES = "application/vnd.tiered-log.frames"
FRAMES_CT = {"Content-Type": FRAMES}
BIN = {"Accept": "application/octet-stream"}
BIG = 1 << 30  # an append threshold no test value reaches (the server applies the topic's)


def _create(c: httpx.Client, name: str, **config: Any) -> None:
    r = c.post("/v1/topics", json={"name": name, "partitions": 1, "config": config})
    assert r.status_code == 201, r.text


def _records_url(topic: str, partition: int = 0) -> str:
    return f"/v1/topics/{topic}/partitions/{partition}/records"


def _frames(records: list[ProducerRecord | bytes], base_offset: int = 0,
            now_ms: int = -1) -> bytes:
    """A frames body; ``now_ms=-1`` (the default) leaves timestamps to the server."""
    return encode_batch(base_offset, records, now_ms, BIG).data


def _post_frames(c: httpx.Client, topic: str, body: bytes, **kw: Any) -> httpx.Response:
    return c.post(_records_url(topic), content=body, headers=FRAMES_CT, **kw)


def _next_offset(c: httpx.Client, topic: str) -> int:
    r = c.get(f"/v1/topics/{topic}/partitions/0/bounds")
    assert r.status_code == 200, r.text
    return int(r.json()["next_offset"])


def _fetch_binary(c: httpx.Client, topic: str, offset: int = 0) -> list[Record]:
    r = c.get(_records_url(topic), params={"offset": offset, "max_records": 10_000,
                                           "max_bytes": 1 << 30}, headers=BIN)
    assert r.status_code == 200, r.text
    recs, pos, _ = decode_frames(r.content)
    assert pos == len(r.content)
    assert int(r.headers["x-record-count"]) == len(recs)
    return recs


def _error(r: httpx.Response, status: int, code: str) -> str:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert err["code"] == code, err
    message: str = err["message"]
    return message


# ---- round trips ----------------------------------------------------------------------------


def test_round_trip_binary_produce_and_fetch(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name)
    binary = bytes(range(256))
    sent: list[ProducerRecord | bytes] = [
        b"plain value",
        ProducerRecord(binary, key=b"\x00\xffkey", timestamp=42),
        ProducerRecord(b"\xfe\xfd", key=b"", headers=(("bin", b"\x00\x01"), ("null", None),
                                                       ("ünï", "text ✓".encode()))),
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

    # The next batch continues at the next offset, whatever offsets its frames carry.
    r = _post_frames(admin, topic_name, _frames([b"again", b"more"], base_offset=0))
    assert r.status_code == 200, r.text
    assert r.json()["offsets"] == [5, 6]
    assert [g.value for g in _fetch_binary(admin, topic_name, 5)] == [b"again", b"more"]

    # The same records read as JSON.
    recs = admin.get(_records_url(topic_name), params={"offset": 0}).json()["records"]
    assert recs[1]["value"] is None and base64.b64decode(recs[1]["value_b64"]) == binary
    assert recs[1]["timestamp"] == 42
    assert recs[4]["value"] == "text"


def test_fetched_frames_produce_as_they_are(admin: httpx.Client, topic_name: str) -> None:
    """A binary fetch's body is a valid binary produce body (mirroring a partition)."""
    src, dst = topic_name + "-src", topic_name + "-dst"
    _create(admin, src)
    _create(admin, dst)
    recs = [ProducerRecord(f"v{i}".encode(), key=f"k{i}".encode(), headers=(("i", bytes([i])),),
                           timestamp=1000 + i) for i in range(50)]
    assert _post_frames(admin, src, _frames(list(recs))).status_code == 200
    r = admin.get(_records_url(src), params={"offset": 10}, headers=BIN)
    assert r.status_code == 200 and int(r.headers["x-record-count"]) == 40
    r = _post_frames(admin, dst, r.content)
    assert r.status_code == 200, r.text
    assert r.json()["offsets"] == list(range(40))
    got = _fetch_binary(admin, dst)
    assert [(g.key, g.value, g.headers, g.timestamp) for g in got] == [
        (p.key, p.value, p.headers, p.timestamp) for p in recs[10:]]


def test_content_type_parameters_are_accepted(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name)
    r = admin.post(_records_url(topic_name), content=_frames([b"x"]),
                   headers={"Content-Type": f"{FRAMES}; version=1"})
    assert r.status_code == 200, r.text
    assert r.json()["offsets"] == [0]


def test_client_produce_uses_frames(server: ServerProcess, topic_name: str) -> None:
    """Client.produce (binary now) keeps its signature and behaviour: bytes, text and
    ProducerRecords, offsets back, server-side timestamps unless given."""
    with Client(server.url, token=ADMIN) as c:
        c.create_topic(topic_name, config={"append_threshold": 100})
        assert c.produce(topic_name, 0, [b"\x00bin", "tëxt", b"ba",
                                         ProducerRecord(b"v", key=b"k", timestamp=7)]) == [0, 1, 2, 3]
        got = c.fetch(topic_name, 0, 0).records
        assert [g.value for g in got] == [b"\x00bin", "tëxt".encode(), b"ba", b"v"]
        assert got[3].key == b"k" and got[3].timestamp == 7 and got[0].timestamp > 1 << 40
        with pytest.raises(RecordTooLargeError):
            c.produce(topic_name, 0, [b"ok", b"y" * 101])
        assert c.bounds(topic_name, 0).next_offset == 4


# ---- bad bodies: nothing stored -------------------------------------------------------------


def _corrupt(body: bytes, at: int) -> bytes:
    b = bytearray(body)
    b[at] ^= 0x01
    return bytes(b)


def test_corrupted_frame_is_400_naming_it_and_nothing_stored(admin: httpx.Client,
                                                              topic_name: str) -> None:
    _create(admin, topic_name)
    values = [bytes([65 + i]) * 100 for i in range(5)]
    body = _frames(list(values))
    frame = len(body) // 5  # every frame has the same size here
    # A flipped bit in the value of frame 2, in its timestamp, in its checksum.
    for at in (2 * frame + frame - 1, 2 * frame + HEADER_SIZE + 1, 2 * frame + 12):
        msg = _error(_post_frames(admin, topic_name, _corrupt(body, at)), 400, "invalid_request")
        assert "frame 2" in msg, msg
    # A frame carrying another offset than it was checksummed with fails its check too.
    moved = bytearray(body)
    moved[3 * frame] ^= 0x01  # offset field (u64 at the frame's start) of frame 3
    msg = _error(_post_frames(admin, topic_name, bytes(moved)), 400, "invalid_request")
    assert "frame 3" in msg and "checksum" in msg, msg
    # A body that ends inside a frame, and lengths that do not add up.
    msg = _error(_post_frames(admin, topic_name, body[:-7]), 400, "invalid_request")
    assert "frame 4" in msg, msg
    bad_len = bytearray(body)
    bad_len[frame + HEADER_SIZE + 12] ^= 0x40  # value_length of frame 1
    msg = _error(_post_frames(admin, topic_name, bytes(bad_len)), 400, "invalid_request")
    assert "frame 1" in msg, msg
    # Garbage.
    _error(_post_frames(admin, topic_name, b"not frames at all"), 400, "invalid_request")
    _error(_post_frames(admin, topic_name, os.urandom(4096)), 400, "invalid_request")
    assert _next_offset(admin, topic_name) == 0
    # The intact body is fine.
    r = _post_frames(admin, topic_name, body)
    assert r.status_code == 200 and r.json()["offsets"] == [0, 1, 2, 3, 4]
    assert [g.value for g in _fetch_binary(admin, topic_name)] == values


def test_oversize_value_is_413_and_nothing_stored(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name, append_threshold=100)
    body = _frames([b"a" * 100, b"fine", b"b" * 101, b"also fine"])
    msg = _error(_post_frames(admin, topic_name, body), 413, "record_too_large")
    assert "frame 2" in msg and "101" in msg, msg
    assert _next_offset(admin, topic_name) == 0
    r = _post_frames(admin, topic_name, _frames([b"a" * 100, b"fine"]))
    assert r.status_code == 200 and r.json()["offsets"] == [0, 1]


def test_body_over_max_request_bytes_is_413(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name)
    body = _frames([os.urandom(64 << 10) for _ in range(20)])  # > the server's 1 MiB bound
    r = _post_frames(admin, topic_name, body)
    assert r.status_code == 413, r.text
    assert r.json()["error"]["code"] == "request_too_large"

    def chunks() -> Any:  # streamed without a Content-Length
        for i in range(0, len(body), 1 << 16):
            yield body[i:i + (1 << 16)]

    r = admin.post(_records_url(topic_name), content=chunks(), headers=FRAMES_CT)
    assert r.status_code == 413, r.text
    assert _next_offset(admin, topic_name) == 0


def test_empty_body_is_400(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name)
    msg = _error(_post_frames(admin, topic_name, b""), 400, "invalid_request")
    assert "no record frames" in msg
    assert _next_offset(admin, topic_name) == 0


def test_more_frames_than_a_batch_holds_is_400(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name)
    msg = _error(_post_frames(admin, topic_name, _frames([b"x"] * 10_001)), 400,
                 "invalid_argument")
    assert "10000" in msg
    assert _next_offset(admin, topic_name) == 0
    r = _post_frames(admin, topic_name, _frames([b"x"] * 10_000))
    assert r.status_code == 200 and r.json()["last_offset"] == 9_999


def _hand_made_frame(timestamp: int, value: bytes, offset: int = 0) -> bytes:
    """A frame with a correct checksum that encode_batch would refuse to build."""
    fixed = BODY_FIXED.pack(timestamp, -1, len(value), 0)
    return HEADER.pack(offset, len(fixed) + len(value), checksum_of(offset, fixed, value)) + fixed + value


def test_timestamp_out_of_range_is_400(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name)
    msg = _error(_post_frames(admin, topic_name, _hand_made_frame(1 << 62, b"x")), 400,
                 "invalid_argument")
    assert "frame 0" in msg and "timestamp" in msg
    assert _next_offset(admin, topic_name) == 0


def test_empty_value_in_a_frame_is_400(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name)
    body = _frames([b"ok"]) + _hand_made_frame(5, b"", offset=1)
    msg = _error(_post_frames(admin, topic_name, body), 400, "invalid_argument")
    assert "frame 1" in msg and "empty" in msg
    assert _next_offset(admin, topic_name) == 0


def test_query_key_or_timestamp_with_frames_is_400(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name)
    for params in ({"key": "k"}, {"timestamp": 5}):
        r = _post_frames(admin, topic_name, _frames([b"x"]), params=params)
        _error(r, 400, "invalid_request")
    assert _next_offset(admin, topic_name) == 0


# ---- auth -----------------------------------------------------------------------------------


def test_auth_like_the_other_endpoints(server: ServerProcess, admin: httpx.Client,
                                       topic_name: str) -> None:
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
    r = admin.post(_records_url(topic_name), json={"records": [
        {"value": "hello", "key": "k"},
        {"value_b64": base64.b64encode(binary).decode(), "key_b64": base64.b64encode(b"\xff").decode(),
         "timestamp": 99, "headers": [{"name": "h", "value_b64": base64.b64encode(b"\x00").decode()}]},
    ]})
    assert r.status_code == 200, r.text
    assert r.json()["offsets"] == [0, 1]
    got = _fetch_binary(admin, topic_name)
    assert (got[0].value, got[0].key) == (b"hello", b"k")
    assert (got[1].value, got[1].key, got[1].timestamp) == (binary, b"\xff", 99)
    assert got[1].headers == (("h", b"\x00"),)
    for bad in ({"value_b64": "not base64!"}, {"value": "a", "key_b64": "***"}):
        msg = _error(admin.post(_records_url(topic_name), json={"records": [bad]}), 400,
                     "invalid_request")
        assert "base64" in msg
    assert _next_offset(admin, topic_name) == 2
    # A raw octet-stream body is still one record.
    r = admin.post(_records_url(topic_name), content=_frames([b"a", b"b"]),
                   headers={"Content-Type": "application/octet-stream"})
    assert r.status_code == 200 and r.json()["offsets"] == [2]
    assert _fetch_binary(admin, topic_name, 2)[0].value == _frames([b"a", b"b"])


def test_unknown_content_type_names_the_frames_form(admin: httpx.Client, topic_name: str) -> None:
    _create(admin, topic_name)
    msg = _error(admin.post(_records_url(topic_name), content=b"x",
                            headers={"Content-Type": "text/plain"}), 415, "unsupported_media_type")
    assert FRAMES in msg


def test_openapi_documents_the_frames_form(server: ServerProcess) -> None:
    doc = httpx.get(server.url + "/openapi.json").json()
    op = doc["paths"]["/v1/topics/{topic}/partitions/{partition}/records"]["post"]
    content = op["requestBody"]["content"]
    assert set(content) == {"application/json", "application/octet-stream", FRAMES}
    assert content[FRAMES]["schema"]["format"] == "binary"
    assert FRAMES in op["description"] and "checksum" in op["description"]


def test_frames_to_producer_records_in_process() -> None:
    """The decoding helper on its own: the library's errors, bare values for plain frames."""
    body = _frames([b"x" * 10, ProducerRecord(b"y", key=b"k", timestamp=3)])
    assert frames_to_producer_records(body, BIG) == [
        b"x" * 10, ProducerRecord(b"y", key=b"k", timestamp=3)]
    with pytest.raises(CorruptRecordError, match="frame 1"):
        frames_to_producer_records(_corrupt(body, len(body) - 1), BIG)
    with pytest.raises(RecordTooLargeError, match="frame 0"):
        frames_to_producer_records(body, 9)


def test_every_single_byte_flip_is_400_and_nothing_stored(admin: httpx.Client,
                                                          topic_name: str) -> None:
    """Whatever byte of a frame is damaged (offset, lengths, checksum, timestamp, key,
    value, headers), the batch is refused whole."""
    _create(admin, topic_name)
    body = _frames([ProducerRecord(b"val", key=b"ky", headers=(("h", b"x"), ("n", None))),
                    b"second"])
    for at in range(len(body)):
        r = _post_frames(admin, topic_name, _corrupt(body, at))
        assert r.status_code == 400, (at, r.text)
    assert _next_offset(admin, topic_name) == 0


_records = st.lists(st.builds(
    ProducerRecord,
    value=st.binary(min_size=1, max_size=64),
    key=st.none() | st.binary(max_size=16),
    headers=st.lists(st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=8)),
                     max_size=3).map(tuple),
    timestamp=st.none() | st.integers(0, (1 << 62) - 1),
), min_size=1, max_size=8)


@settings(max_examples=200, deadline=None)
@given(records=_records, base=st.integers(0, 1 << 40))
def test_decoding_inverts_encoding(records: list[ProducerRecord], base: int) -> None:
    got = frames_to_producer_records(_frames(list(records), base_offset=base), BIG)
    assert [g if isinstance(g, ProducerRecord) else ProducerRecord(g) for g in got] == records


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_the_documented_errors(data: bytes) -> None:
    try:
        got = frames_to_producer_records(data, 100, max_records=5)
    except (CorruptRecordError, RecordTooLargeError, InvalidArgumentError) as exc:
        assert str(exc)
        return
    assert 1 <= len(got) <= 5 and all(isinstance(g, bytes | ProducerRecord) for g in got)
