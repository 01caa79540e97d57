"""The Kafka listener's data path is a pass-through: a Produce's batches are stored as
sent (compression kept, only the base offset and the partition leader epoch written, both
outside the CRC) and a Fetch answers the stored bytes, sent from the segment files.

Checked byte for byte over raw sockets (:class:`~.conftest.KafkaWire`): the batch fetched
is the batch produced, for every codec and for null and empty keys and values; a fetch
over several segments and partitions, in a flexible and an older version, is exactly the
concatenation of what was produced; the HTTP binary fetch serves the same bytes.
"""

from __future__ import annotations

import random
import struct
import time
from typing import Any

import httpx
import pytest
from kio.schema.errors import ErrorCode
from service.conftest import ServerProcess

from tiered_log.format.kafka import Compression, Headers, NewRecord, decode_batches, encode_batch
from tiered_log.kafka.messages import FETCH, PRODUCE

from .conftest import KafkaWire, bounds, create_topic
from .test_protocol import produce_body

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
TS = 1_700_000_000_000
LAST_DELTA_AT = 23  # lastOffsetDelta, then baseTimestamp up to byte 35
BASE_TS_END = 35
PRODUCER_AT = 43  # producerId, epoch, base sequence, records count, the records


def fetch_body(wanted: list[tuple[str, int, int]], max_bytes: int = 64 << 20) -> dict[str, Any]:
    """A Fetch of ``(topic, partition, offset)`` each, every partition up to ``max_bytes``."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, partition, offset in wanted:
        topics.setdefault(topic, []).append(
            {
                "partition": partition,
                "current_leader_epoch": -1,
                "fetch_offset": offset,
                "last_fetched_epoch": -1,
                "log_start_offset": -1,
                "partition_max_bytes": max_bytes,
            }
        )
    return {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": max_bytes,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def odd_records(tag: str, n: int = 12) -> list[NewRecord]:
    """Records with every kind of key and value: null (a tombstone), empty, bytes; headers
    with null values; explicit timestamps."""
    out = []
    for i in range(n):
        key = (None, b"", f"k{i}".encode())[i % 3]
        value = (None, b"", f"{tag}-{i}".encode() * (1 + i % 5))[(i // 3) % 3] if i else None
        headers: Headers = () if i % 4 == 0 else (("h", None), ("tag", tag.encode()))
        out.append(NewRecord(value, key, headers, TS + i))
    return out


def with_base_offset(batch: bytes, base: int) -> bytes:
    return struct.pack(">q", base) + batch[8:]


def epochs(buf: bytes) -> tuple[bytes, set[bytes]]:
    """``buf``'s batches with their partition leader epoch (bytes 12..16, which the
    broker stamps) zeroed, and the epochs found."""
    out = bytearray(buf)
    found = set()
    pos = 0
    while pos < len(out):
        found.add(bytes(out[pos + 12 : pos + 16]))
        out[pos + 12 : pos + 16] = bytes(4)
        pos += 12 + struct.unpack_from(">i", out, pos + 8)[0]
    return bytes(out), found


def produce(w: KafkaWire, topic: str, records: bytes, partition: int = 0) -> int:
    resp = w.call(PRODUCE, 9, produce_body(topic, records, partition=partition))
    part = resp.responses[0].partition_responses[0]
    assert part.error_code == ErrorCode.none, part
    return int(part.base_offset)


def fetch(w: KafkaWire, version: int, wanted: list[tuple[str, int, int]]) -> list[Any]:
    resp = w.call(FETCH, version, fetch_body(wanted))
    parts = [p for t in resp.responses for p in t.partitions]
    assert all(p.error_code == ErrorCode.none for p in parts), parts
    return parts


@pytest.mark.parametrize("codec", CODECS)
def test_a_produced_batch_is_fetched_byte_for_byte(server: ServerProcess, codec: str) -> None:
    """The stored batch is the sent batch: compressed as sent, its CRC as sent, only its
    base offset (and partition leader epoch) written by the broker; null and empty keys
    and values and null header values read back as sent."""
    topic = f"passthrough-{codec}"
    create_topic(server, topic)
    first = encode_batch([NewRecord(b"before", None, (), TS)])
    sent = encode_batch(odd_records(codec), compression=codec, base_offset=77)
    assert sent[21:23] == struct.pack(">h", Compression.parse(codec))  # the codec bits
    with KafkaWire(server.kafka_bootstrap) as w:
        assert produce(w, topic, first) == 0
        assert produce(w, topic, sent) == 1
        for version in (12, 11, 4):
            (part,) = fetch(w, version, [(topic, 0, 1)])
            got = bytes(part.records)
            assert got[:8] == struct.pack(">q", 1)  # the offset the broker assigned
            assert got[8:12] == sent[8:12]  # batchLength
            assert got[16:] == sent[16:]  # magic, CRC, attributes ... the records, as sent
    ((header, recs),) = decode_batches(got)
    assert header.compression == Compression.parse(codec)
    want = odd_records(codec)
    assert [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in recs] == [
        (1 + i, w.key, w.value, tuple(w.headers), w.timestamp) for i, w in enumerate(want)
    ]
    assert recs[0].value is None and any(r.value == b"" for r in recs)
    # The HTTP binary fetch serves the same stored bytes.
    r = httpx.get(
        f"{server.url}/v1/topics/{topic}/partitions/0/records",
        params={"offset": 1},
        headers={"Accept": "application/octet-stream"},
        timeout=10,
    )
    assert r.status_code == 200 and r.content == got
    # and the JSON form shows null as null, empty as "".
    js = httpx.get(
        f"{server.url}/v1/topics/{topic}/partitions/0/records", params={"offset": 1}, timeout=10
    ).json()["records"]
    assert (js[0]["value"], js[0]["value_b64"], js[0]["key"]) == (None, None, None)
    assert [j["value"] for j in js] == [None if w.value is None else w.value.decode() for w in want]
    assert [j["key"] for j in js] == [None if w.key is None else w.key.decode() for w in want]


def test_a_fetch_over_segments_and_partitions_is_the_produced_bytes(
    server: ServerProcess,
) -> None:
    """Batches spread over several small segments of two partitions come back in one
    Fetch (each partition's answer several file ranges sent from the files), in a
    flexible and an older version, exactly as produced, and the answer frames around
    them decode: every offset, count and byte is where the protocol puts it."""
    topic = "passthrough-segments"
    create_topic(server, topic, partitions=2, segment_bytes=64 << 10)
    sent: dict[int, list[bytes]] = {0: [], 1: []}
    rnd = random.Random(5)  # incompressible values: ~360 KB a partition, several segments
    with KafkaWire(server.kafka_bootstrap) as w:
        for i in range(40):
            p = i % 2
            codec = CODECS[i % len(CODECS)]
            recs = [NewRecord(rnd.randbytes(3000), b"k", (), TS + j) for j in range(6)]
            batch = encode_batch(recs, compression=codec)
            base = produce(w, topic, batch, partition=p)
            sent[p].append(with_base_offset(batch, base))
        want = {p: b"".join(bs) for p, bs in sent.items()}
        for version in (12, 10, 4):
            parts = fetch(w, version, [(topic, 0, 0), (topic, 1, 0)])
            for p in parts:
                got, stamped = epochs(bytes(p.records))
                assert got == epochs(want[p.partition_index])[0]
                assert len(stamped) == 1  # one leader epoch stamped on every batch
                assert len(decode_batches(got)) == 20
    assert bounds(server, topic, 0)["next_offset"] == 120


def test_a_log_append_time_topic_answers_the_time_it_stamped(server: ServerProcess) -> None:
    """On a LogAppendTime topic the broker writes its clock into the batch (attributes
    bit 3, maxTimestamp; the CRC recomputed) and answers it as the Produce's
    log_append_time, as Kafka's broker does; a CreateTime topic answers -1."""
    topic = "passthrough-lat"
    create_topic(server, topic, message_timestamp_type="LogAppendTime")
    create_topic(server, "passthrough-ct")
    sent = encode_batch([NewRecord(b"v%d" % i, None, (), TS + i) for i in range(3)])
    with KafkaWire(server.kafka_bootstrap) as w:
        before = int(time.time() * 1000)
        resp = w.call(PRODUCE, 9, produce_body(topic, sent))
        after = int(time.time() * 1000)
        part = resp.responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.none
        stamped = part.log_append_time
        assert stamped is not None
        stamped_ms = int(stamped.timestamp() * 1000)
        assert before - 1000 <= stamped_ms <= after + 1000
        (got,) = fetch(w, 12, [(topic, 0, 0)])
        data = bytes(got.records)
        ((header, recs),) = decode_batches(data)
        assert header.attributes & 0x08 and header.max_timestamp == stamped_ms
        assert [r.timestamp for r in recs] == [stamped_ms] * 3
        assert data[LAST_DELTA_AT:BASE_TS_END] == sent[LAST_DELTA_AT:BASE_TS_END]
        assert data[PRODUCER_AT:] == sent[PRODUCER_AT:]  # the records as sent
        resp = w.call(PRODUCE, 9, produce_body("passthrough-ct", sent))
        assert resp.responses[0].partition_responses[0].log_append_time is None
