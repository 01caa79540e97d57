"""Null and empty values and keys, and compressed batches, through the HTTP API and the
Python clients against a real server.

- JSON: ``"value": null`` is a null value (a tombstone), ``""`` an empty one, and they
  come back so, told apart (also with ``value_b64``, and for keys); the binary form and
  the client read the same;
- the clients' ``produce(..., compression=codec)`` sends batches compressed with each
  codec, which the server stores as sent (the stored batch's codec bits say so) and every
  reader decodes (the client's records, the JSON form);
- a batch built here is stored byte for byte (only its base offset and leader epoch
  written), as the binary fetch shows.
"""

from __future__ import annotations

import asyncio
import struct

import httpx
import pytest

from tiered_log.client import AsyncClient, Client
from tiered_log.errors import InvalidArgumentError
from tiered_log.format.kafka import Compression, NewRecord, encode_batch
from tiered_log.format.records import ProducerRecord

from .conftest import ADMIN, ServerProcess

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
BIN = {"Accept": "application/octet-stream"}
FRAMES = {"Content-Type": "application/vnd.tiered-log.frames"}


def _url(topic: str) -> str:
    return f"/v1/topics/{topic}/partitions/0/records"


def test_json_null_and_empty_values_and_keys_round_trip(
    admin: httpx.Client, server: ServerProcess, topic_name: str
) -> None:
    r = admin.post("/v1/topics", json={"name": topic_name})
    assert r.status_code == 201, r.text
    sent = [
        {"key": "k", "value": None},  # a tombstone
        {"key": "k", "value": ""},  # an empty value
        {"key": "", "value": "v"},  # an empty key
        {"key": None, "value_b64": None},  # no key, a null value (base64 form)
        {"key_b64": "", "value_b64": ""},  # empty both, base64 form
        {"value": "x", "headers": {"h": None, "e": ""}},
    ]
    r = admin.post(_url(topic_name), json={"records": sent})
    assert r.status_code == 200, r.text
    assert r.json()["offsets"] == [0, 1, 2, 3, 4, 5]
    got = admin.get(_url(topic_name), params={"offset": 0}).json()["records"]
    assert [(g["key"], g["key_b64"], g["value"], g["value_b64"]) for g in got] == [
        ("k", None, None, None),
        ("k", None, "", None),
        ("", None, "v", None),
        (None, None, None, None),
        ("", None, "", None),
        (None, None, "x", None),
    ]
    assert got[5]["headers"] == [
        {"name": "h", "value": None, "value_b64": None},
        {"name": "e", "value": "", "value_b64": None},
    ]
    with Client(server.url, token=ADMIN) as c:
        recs = c.fetch(topic_name, 0, 0).records
    assert [(r.key, r.value) for r in recs] == [
        (b"k", None),
        (b"k", b""),
        (b"", b"v"),
        (None, None),
        (b"", b""),
        (None, b"x"),
    ]
    # Still refused: neither or both of value / value_b64.
    for bad in ({"key": "k"}, {"value": None, "value_b64": None}, {"value": "a", "value_b64": ""}):
        r = admin.post(_url(topic_name), json={"records": [bad]})
        assert r.status_code == 400, (bad, r.text)
    # A raw body may be empty: an empty value.
    r = admin.post(
        _url(topic_name), content=b"", headers={"Content-Type": "application/octet-stream"}
    )
    assert r.status_code == 200 and r.json()["offsets"] == [6], r.text
    got = admin.get(_url(topic_name), params={"offset": 6}).json()["records"]
    assert (got[0]["value"], got[0]["value_b64"]) == ("", None)


@pytest.mark.parametrize("codec", CODECS)
def test_client_compression_round_trip(server: ServerProcess, topic_name: str, codec: str) -> None:
    """``produce(..., compression=codec)``: the stored batches carry the codec (the server
    keeps them as sent) and read back as sent, null values included, through the
    client's binary fetch and the JSON form."""
    recs = [
        ProducerRecord(
            None if i % 9 == 4 else (b"value-%d " % i) * (1 + i % 13),
            key=None if i % 3 == 0 else b"key-%d" % i,
            headers=() if i % 4 else (("n", None), ("h", b"%d" % i)),
            timestamp=1_700_000_000_000 + i,
        )
        for i in range(200)
    ]
    with Client(server.url, token=ADMIN) as c:
        c.create_topic(topic_name)
        assert c.produce(topic_name, 0, recs, compression=codec) == list(range(200))
        assert c.produce(topic_name, 0, [b"plain", "text"], compression=codec) == [200, 201]
        got = [r for page in c.consume(topic_name, 0, 0) for r in page.records]
        fetched = c.fetch_batches(topic_name, 0, 0)
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in got[:200]] == [
        (i, p.key, p.value, p.headers, p.timestamp) for i, p in enumerate(recs)
    ]
    assert [r.value for r in got[200:]] == [b"plain", b"text"]
    data = bytes(fetched.data)
    assert fetched.next_offset == 202 and data[16] == 2
    pos, codecs = 0, set()
    while pos < len(data):
        (attributes,) = struct.unpack_from(">h", data, pos + 21)
        codecs.add(attributes & 7)
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    assert codecs == {int(Compression.parse(codec))}
    js = httpx.get(
        server.url + _url(topic_name),
        params={"offset": 0, "max_records": 10},
        headers={"Authorization": f"Bearer {ADMIN}"},
    ).json()["records"]
    assert js[4]["value"] is None and js[1]["value"] == "value-1 " * 2


def test_async_client_compression_and_nulls(server: ServerProcess, topic_name: str) -> None:
    async def run() -> list[tuple[bytes | None, bytes | None]]:
        async with AsyncClient(server.url, token=ADMIN) as c:
            await c.create_topic(topic_name)
            recs: list[ProducerRecord | bytes] = [
                ProducerRecord(None, key=b"gone"),
                ProducerRecord(b"", key=b"e"),
                b"v" * 500,
            ]
            assert await c.produce(topic_name, 0, recs, compression="zstd") == [0, 1, 2]
            assert await c.produce(topic_name, None, [b"w"], compression="lz4") == [3]
            page = await c.fetch(topic_name, 0, 0)
            return [(r.key, r.value) for r in page.records]

    assert asyncio.run(run()) == [(b"gone", None), (b"e", b""), (None, b"v" * 500), (None, b"w")]


def test_unknown_codec_is_refused_before_sending(server: ServerProcess, topic_name: str) -> None:
    with Client(server.url, token=ADMIN) as c:
        c.create_topic(topic_name)
        with pytest.raises(InvalidArgumentError, match="brotli"):
            c.produce(topic_name, 0, [b"x"], compression="brotli")
        assert c.bounds(topic_name, 0).next_offset == 0


@pytest.mark.parametrize("codec", CODECS)
def test_a_binary_produce_is_stored_byte_for_byte(
    admin: httpx.Client, topic_name: str, codec: str
) -> None:
    """A batch built by the Kafka codec (compressed or not, null and empty values) posted
    as a binary produce body is the batch a binary fetch returns: only its base offset
    and partition leader epoch (both outside the CRC) are the server's."""
    r = admin.post("/v1/topics", json={"name": topic_name})
    assert r.status_code == 201, r.text
    records = [
        NewRecord(None, b"k0", (), 1_700_000_000_000),
        NewRecord(b"", None, (("h", None),), 1_700_000_000_001),
        NewRecord(b"abc" * 100, b"", (), 1_700_000_000_002),
    ]
    sent = encode_batch(records, compression=codec, base_offset=12345)
    assert (
        admin.post(
            _url(topic_name), content=b"first", headers={"Content-Type": "application/octet-stream"}
        ).status_code
        == 200
    )
    r = admin.post(_url(topic_name), content=sent, headers=FRAMES)
    assert r.status_code == 200 and r.json()["offsets"] == [1, 2, 3], r.text
    r = admin.get(_url(topic_name), params={"offset": 1}, headers=BIN)
    assert r.status_code == 200
    got = r.content
    assert got[:8] == struct.pack(">q", 1) and got[8:12] == sent[8:12] and got[16:] == sent[16:]
    js = admin.get(_url(topic_name), params={"offset": 1}).json()["records"]
    assert [(j["key"], j["value"]) for j in js] == [("k0", None), (None, ""), ("", "abc" * 100)]
