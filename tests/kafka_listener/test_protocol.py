"""The Kafka listener at the protocol level, over raw sockets against a real server:
framing, pipelining, refusals and the exact error codes a client library would hide."""

from __future__ import annotations

import struct
import threading
import time
from typing import Any

import httpx
from kio.schema.errors import ErrorCode
from service.conftest import ServerProcess

from tiered_log.format.kafka import NewRecord, decode_batches, encode_batch
from tiered_log.kafka.messages import API_VERSIONS, APIS, FETCH, LIST_OFFSETS, METADATA, PRODUCE

from .conftest import KafkaWire, bounds, create_topic

ALL_TOPICS: Any = None


def produce_body(topic: str, records: bytes, acks: int = 1, partition: int = 0) -> dict[str, Any]:
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout": 10_000,
        "topic_data": [
            {"name": topic, "partition_data": [{"index": partition, "records": records}]}
        ],
    }


def fetch_body(
    topic: str, offset: int, *, max_wait_ms: int = 0, min_bytes: int = 1, partition: int = 0
) -> dict[str, Any]:
    return {
        "replica_id": -1,
        "max_wait": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": 1 << 20,
        "isolation_level": 1,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": partition,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def metadata_body(*topics: str, auto: bool = True) -> dict[str, Any]:
    return {
        "topics": [{"name": t, "topic_id": None} for t in topics],
        "allow_auto_topic_creation": auto,
        "include_topic_authorized_operations": False,
    }


def batch(*values: bytes | None, key: bytes | None = b"k") -> bytes:
    return encode_batch(
        [NewRecord(v, key, (("h", b"1"),), 1_700_000_000_000 + i) for i, v in enumerate(values)]
    )


def test_api_versions_lists_the_served_ranges(server: ServerProcess) -> None:
    with KafkaWire(server.kafka_bootstrap) as w:
        resp = w.call(
            API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
        )
    assert resp.error_code == ErrorCode.none
    got = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    assert got == {s.key: (s.advertised_min, s.max_version) for s in APIS.values()}
    assert got[PRODUCE] == (0, 9) and got[FETCH] == (4, 12) and got[METADATA] == (1, 12)


def test_unsupported_api_versions_version_answers_v0_with_the_ranges(server: ServerProcess) -> None:
    """A client sending ApiVersions v9 gets a v0 answer (header v0) naming the error and
    the ranges, and the connection stays open."""
    with KafkaWire(server.kafka_bootstrap) as w:
        frame = struct.pack(">hhih", API_VERSIONS, 9, 77, 1) + b"c" + b"\x00\x00\x00"
        w.sock.sendall(struct.pack(">i", len(frame)) + frame)
        cid, resp = w.receive(API_VERSIONS, 0)
        assert cid == 77
        assert resp.error_code == ErrorCode.unsupported_version
        assert {k.api_key for k in resp.api_keys} == set(APIS)
        assert w.call(API_VERSIONS, 0, {}).error_code == ErrorCode.none  # still open


def test_pipelined_requests_are_answered_in_order(server: ServerProcess) -> None:
    """Ten requests of three APIs sent in one write come back in request order, and the
    produces among them are appended in the order sent."""
    topic = "pipelined"
    create_topic(server, topic)
    plan = []
    for i in range(10):
        if i % 3 == 0:
            plan.append((PRODUCE, 9, produce_body(topic, batch(b"v%d" % i))))
        elif i % 3 == 1:
            plan.append((METADATA, 12, metadata_body(topic)))
        else:
            plan.append(
                (API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
            )
    with KafkaWire(server.kafka_bootstrap) as w:
        from .conftest import encode_request

        frames = b"".join(encode_request(k, v, 100 + i, b) for i, (k, v, b) in enumerate(plan))
        w.sock.sendall(frames)
        offsets = answers_in_order(w, plan, 100)
    assert offsets == [0, 1, 2, 3]


def answers_in_order(
    w: KafkaWire, plan: list[tuple[int, int, dict[str, Any]]], first: int
) -> list[int]:
    """Read the answers to ``plan`` (sent with correlation ids ``first``, +1, ...) and
    check they come in request order; the base offsets of its produces, in order."""
    offsets = []
    for i, (k, v, _) in enumerate(plan):
        cid, resp = w.receive(k, v)
        assert cid == first + i
        if k == PRODUCE:
            part = resp.responses[0].partition_responses[0]
            assert part.error_code == ErrorCode.none
            offsets.append(part.base_offset)
    return offsets


def test_frames_cut_anywhere_are_received_whole(server: ServerProcess) -> None:
    """Small and large requests (a large one is read straight into a buffer of its own)
    sent pipelined, in pieces cut at random places (a frame's size split, a large frame
    begun in the same read as small ones, more small frames than the connection's
    shared buffer holds): every one is answered in order, and the produced values are
    stored byte for byte."""
    import random

    from .conftest import encode_request

    topic = "cut-anywhere"
    create_topic(server, topic)
    rng = random.Random(7)
    plan: list[tuple[int, int, dict[str, Any]]] = []
    values: list[bytes] = []
    for i in range(100):
        if i % 4 == 0:
            value = rng.randbytes(rng.choice([10, 70_000, 300_000]))
            values.append(value)
            plan.append((PRODUCE, 9, produce_body(topic, batch(value))))
        elif i % 4 == 1:
            plan.append((METADATA, 12, metadata_body(topic)))
        else:
            body = {"client_software_name": "t" * 8000, "client_software_version": "1"}
            plan.append((API_VERSIONS, 3, body))
    wire = b"".join(encode_request(k, v, 500 + i, b) for i, (k, v, b) in enumerate(plan))
    with KafkaWire(server.kafka_bootstrap) as w:

        def send() -> None:
            at = 0
            while at < len(wire):
                n = rng.choice([1, 3, 4, 5, 100, 4096, 70_000, 400_000])
                w.sock.sendall(wire[at : at + n])
                at += n

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        offsets = answers_in_order(w, plan, 500)
        sender.join(timeout=30)
        assert offsets == list(range(len(values)))
        got: list[bytes | None] = []
        while len(got) < len(values):
            (t,) = w.call(FETCH, 12, fetch_body(topic, len(got))).responses
            (p,) = t.partitions
            assert p.error_code == ErrorCode.none
            got.extend(r.value for _, rs in decode_batches(p.records) for r in rs)
    assert got == values


def test_garbage_frames_close_only_their_connection(server: ServerProcess) -> None:
    with KafkaWire(server.kafka_bootstrap) as ok:
        for garbage in (
            struct.pack(">i", 3) + b"abc",  # shorter than any header
            struct.pack(">i", 1 << 30),  # larger than max_request_bytes
            struct.pack(">i", 12)
            + struct.pack(">hhih", 999, 0, 1, -1)
            + b"\x00\x00",  # no such API
            struct.pack(">i", 10) + struct.pack(">hhih", PRODUCE, 2, 1, -1),  # Produce v2: refused
            struct.pack(">i", 12)
            + struct.pack(">hhih", METADATA, 12, 1, -1)
            + b"\xff\xff",  # bad body
        ):
            with KafkaWire(server.kafka_bootstrap) as bad:
                bad.sock.sendall(garbage)
                assert bad.closed_by_server(), garbage
            resp = ok.call(
                API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
            )
            assert resp.error_code == ErrorCode.none
    assert "closed:" in server.log() and "Traceback" not in server.log()


def test_metadata_auto_creates_and_names_this_broker(server: ServerProcess) -> None:
    with KafkaWire(server.kafka_bootstrap) as w:
        resp = w.call(METADATA, 12, metadata_body("made-by-metadata"))
        (t,) = resp.topics
        assert t.error_code == ErrorCode.none and t.name == "made-by-metadata"
        assert t.topic_id is not None and t.topic_id.int != 0
        (p,) = t.partitions
        (b,) = resp.brokers
        assert f"{b.host}:{b.port}" == server.kafka_bootstrap
        assert p.leader_id == b.node_id and list(p.replica_nodes) == [b.node_id] == list(
            p.isr_nodes
        )
        # not asked to create: an unknown topic is an error, and nothing is created
        resp = w.call(METADATA, 12, metadata_body("never-made", auto=False))
        assert resp.topics[0].error_code == ErrorCode.unknown_topic_or_partition
        assert resp.topics[0].partitions == ()
        bad = w.call(METADATA, 12, metadata_body("bad/name"))
        assert bad.topics[0].error_code == ErrorCode.invalid_topic_exception
        every = w.call(METADATA, 1, {"topics": ALL_TOPICS})
        assert "made-by-metadata" in {t.name for t in every.topics}
        assert "never-made" not in {t.name for t in every.topics}


def test_refused_records_get_codes_and_nothing_is_appended(server: ServerProcess) -> None:
    """What the log does not take (transactions, an unknown idempotent producer's batch
    not at sequence 0, a damaged batch, nothing, a value over the threshold) is refused with its code and a
    message, nothing of the partition's data appended; null and empty values are taken."""
    topic = "refusals"
    create_topic(server, topic)
    damaged = bytearray(batch(b"x", b"y"))
    damaged[-1] ^= 0xFF  # under the CRC
    cases = [
        (
            encode_batch(
                [NewRecord(b"t")],
                transactional=True,
                producer_id=5,
                producer_epoch=0,
                base_sequence=0,
            ),
            ErrorCode.invalid_record,
            "transaction",
        ),
        (
            encode_batch([NewRecord(b"i")], producer_id=5, producer_epoch=0, base_sequence=3),
            ErrorCode.unknown_producer_id,
            "unknown",
        ),
        (bytes(damaged), ErrorCode.corrupt_message, "CRC"),
        (b"", ErrorCode.invalid_record, "no records"),
        (batch(b"z" * ((8 << 20) + 1)), ErrorCode.message_too_large, "append threshold"),
    ]
    with KafkaWire(server.kafka_bootstrap) as w:
        for records, code, words in cases:
            resp = w.call(PRODUCE, 9, produce_body(topic, records))
            part = resp.responses[0].partition_responses[0]
            assert part.error_code == code, (words, part)
            assert words in (part.error_message or ""), part.error_message
        assert bounds(server, topic)["next_offset"] == 0
        resp = w.call(PRODUCE, 9, produce_body(topic, batch(b"ok", None, b"")))
        assert resp.responses[0].partition_responses[0].error_code == ErrorCode.none
        assert bounds(server, topic)["next_offset"] == 3
        resp = w.call(PRODUCE, 9, produce_body("no-such-partition", batch(b"a"), partition=5))
        part = resp.responses[0].partition_responses[0]
        assert part.error_code == ErrorCode.unknown_topic_or_partition


def test_fetch_inside_a_batch_returns_the_whole_batch(server: ServerProcess) -> None:
    topic = "whole-batches"
    create_topic(server, topic)
    with KafkaWire(server.kafka_bootstrap) as w:
        w.call(PRODUCE, 9, produce_body(topic, batch(*(b"v%d" % i for i in range(10)))))
        w.call(PRODUCE, 3, produce_body(topic, batch(b"v10", b"v11")))
        resp = w.call(FETCH, 12, fetch_body(topic, 5))
        part = resp.responses[0].partitions[0]
        assert part.error_code == ErrorCode.none
        assert (part.high_watermark, part.log_start_offset) == (12, 0)
        got = decode_batches(part.records)
        assert [h.base_offset for h, _ in got] == [0, 10]
        recs = [r for _, rs in got for r in rs]
        assert [r.value for r in recs] == [b"v%d" % i for i in range(12)]
        assert all(r.key == b"k" and r.headers == (("h", b"1"),) for r in recs)
        assert recs[3].timestamp == 1_700_000_000_003
        # older versions answer the same records
        old = w.call(FETCH, 4, fetch_body(topic, 11)).responses[0].partitions[0]
        assert [r.value for _, rs in decode_batches(old.records) for r in rs] == [b"v10", b"v11"]


def test_fetch_out_of_range_and_unknown_topic(server: ServerProcess) -> None:
    topic = "ranges"
    create_topic(server, topic)
    with KafkaWire(server.kafka_bootstrap) as w:
        w.call(PRODUCE, 9, produce_body(topic, batch(b"a")))
        part = w.call(FETCH, 12, fetch_body(topic, 5)).responses[0].partitions[0]
        assert part.error_code == ErrorCode.offset_out_of_range
        assert part.log_start_offset == 0
        part = w.call(FETCH, 12, fetch_body(topic, 1)).responses[0].partitions[0]
        assert part.error_code == ErrorCode.none and part.records in (b"", None)
        part = w.call(FETCH, 12, fetch_body("nope-never", 0)).responses[0].partitions[0]
        assert part.error_code == ErrorCode.unknown_topic_or_partition


def test_fetch_long_poll_answers_when_records_arrive(server: ServerProcess) -> None:
    """A fetch at the end with max_wait 8 s and min_bytes 1 is answered with the record
    another connection produces while it waits."""
    topic = "long-poll"
    create_topic(server, topic)

    def produce_later() -> None:
        time.sleep(0.5)
        with KafkaWire(server.kafka_bootstrap) as p:
            p.call(PRODUCE, 9, produce_body(topic, batch(b"late")))

    t = threading.Thread(target=produce_later)
    with KafkaWire(server.kafka_bootstrap) as w:
        t.start()
        part = w.call(FETCH, 12, fetch_body(topic, 0, max_wait_ms=8000)).responses[0].partitions[0]
    t.join(10)
    assert [r.value for _, rs in decode_batches(part.records) for r in rs] == [b"late"]


def test_fetch_of_two_partitions_waits_for_min_bytes_over_both(server: ServerProcess) -> None:
    """A fetch of two partitions whose ``min_bytes`` one batch does not reach is not
    answered when the first batch lands on one partition: it waits on, and is answered
    with both once a second batch lands on the other."""
    topic = "min-bytes-two"
    create_topic(server, topic, partitions=2)
    first, second = batch(b"a" * 300), batch(b"b" * 300)
    body = fetch_body(topic, 0, max_wait_ms=20_000, min_bytes=len(first) + 1)
    body["topics"][0]["partitions"].append(dict(body["topics"][0]["partitions"][0], partition=1))
    sent: list[int] = []

    def produce_later() -> None:
        with KafkaWire(server.kafka_bootstrap) as p:
            for partition, records in ((0, first), (1, second)):
                time.sleep(0.5)
                p.call(PRODUCE, 9, produce_body(topic, records, partition=partition))
                sent.append(partition)

    t = threading.Thread(target=produce_later)
    with KafkaWire(server.kafka_bootstrap) as w:
        t.start()
        parts = w.call(FETCH, 12, body).responses[0].partitions
    t.join(10)
    assert sent == [0, 1]
    got = {
        int(p.partition_index): [r.value for _, rs in decode_batches(p.records) for r in rs]
        for p in parts
    }
    assert got == {0: [b"a" * 300], 1: [b"b" * 300]}


def test_list_offsets(server: ServerProcess) -> None:
    topic = "list-offsets"
    create_topic(server, topic)

    def ask(w: KafkaWire, ts: int, version: int = 7) -> tuple[int, int, int]:
        body = {
            "replica_id": -1,
            "isolation_level": 0,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": 0, "current_leader_epoch": -1, "timestamp": ts}
                    ],
                }
            ],
            "timeout": 10_000,  # v10+
        }
        p = w.call(LIST_OFFSETS, version, body).topics[0].partitions[0]
        return p.error_code, p.offset, p.timestamp

    with KafkaWire(server.kafka_bootstrap) as w:
        assert ask(w, -1) == (ErrorCode.none, 0, -1)
        w.call(PRODUCE, 9, produce_body(topic, batch(b"a", b"b", b"c")))
        assert ask(w, -1)[:2] == (ErrorCode.none, 3)
        assert ask(w, -2)[:2] == (ErrorCode.none, 0)
        assert ask(w, 1_700_000_000_001) == (ErrorCode.none, 1, 1_700_000_000_001)
        assert ask(w, 1_700_000_000_001, version=1) == (ErrorCode.none, 1, 1_700_000_000_001)
        assert ask(w, 1_800_000_000_000)[:2] == (ErrorCode.none, -1)
        assert ask(w, -3) == (ErrorCode.none, 2, 1_700_000_000_002)  # max timestamp
        assert ask(w, -3, version=6)[0] == ErrorCode.unsupported_version  # v7+
        assert ask(w, -6, version=10)[0] == ErrorCode.unsupported_version  # not served


def test_metrics_count_kafka_produces_and_fetches(server: ServerProcess) -> None:
    """A long-polled fetch counts once, with its records, as the HTTP fetches do."""
    topic = "metered"
    create_topic(server, topic)
    with KafkaWire(server.kafka_bootstrap) as w:
        w.call(PRODUCE, 9, produce_body(topic, batch(b"a", b"b", b"c")))
        w.call(FETCH, 12, fetch_body(topic, 0))
        w.call(FETCH, 12, fetch_body(topic, 3, max_wait_ms=300))  # waits, reads twice
    text = httpx.get(f"{server.url}/metrics", timeout=10).text
    assert f'tiered_log_append_records_total{{topic="{topic}"}} 3' in text
    assert f'tiered_log_fetch_requests_total{{topic="{topic}",format="kafka"}} 2' in text
    assert f'tiered_log_fetch_records_total{{topic="{topic}"}} 3' in text


def test_odd_values_and_random_bodies_never_break_the_server(server: ServerProcess) -> None:
    """Well-formed requests with odd values get error codes; random bytes after a valid
    header get an answer or a closed connection; the server keeps answering and logs no
    traceback."""
    import random

    topic = "odd-values"
    create_topic(server, topic)
    with KafkaWire(server.kafka_bootstrap) as w:
        w.call(PRODUCE, 9, produce_body(topic, batch(b"a")))
        for partition, offset in ((-1, 0), (0, -5), (2**31 - 1, 0), (0, 2**62)):
            part = w.call(FETCH, 12, fetch_body(topic, offset, partition=partition))
            code = part.responses[0].partitions[0].error_code
            assert code != ErrorCode.none, (partition, offset)
        for ts in (-7, 2**62):
            body = {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {"partition_index": -3, "current_leader_epoch": -1, "timestamp": ts}
                        ],
                    }
                ],
            }
            got = w.call(LIST_OFFSETS, 7, body).topics[0].partitions[0]
            assert got.error_code != ErrorCode.none
        resp = w.call(PRODUCE, 9, produce_body(topic, batch(b"b"), acks=7))
        assert resp.responses[0].partition_responses[0].error_code == (
            ErrorCode.invalid_required_acks
        )
    rnd = random.Random(27)
    for _ in range(60):
        key = rnd.choice([PRODUCE, FETCH, LIST_OFFSETS, METADATA, API_VERSIONS])
        spec = APIS[key]
        version = rnd.randint(spec.min_version, spec.max_version)
        head = struct.pack(">hhih", key, version, 5, -1)
        if version >= {PRODUCE: 9, FETCH: 12, LIST_OFFSETS: 6, METADATA: 9, API_VERSIONS: 3}[key]:
            head += b"\x00"  # flexible: header v2's empty tagged fields
        frame = head + rnd.randbytes(rnd.randint(0, 64))
        with KafkaWire(server.kafka_bootstrap) as w:
            w.sock.sendall(struct.pack(">i", len(frame)) + frame)
            w.read_frame()  # an answer, or b"" when the server closed
    with KafkaWire(server.kafka_bootstrap) as w:
        assert w.call(
            API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"}
        )
    assert "Traceback" not in server.log()
