"""The follower's Kafka transport against a scripted leader on a loopback socket: its
hand-written Fetch v12 decodes with kio as the listener decodes it, the answer the
listener's encoder writes (Kafka's fields, ``diverging_epoch`` and this service's tagged
fields) comes back as the same :class:`ReplicaAnswer`, and a truncated answer, a wrong
correlation id or a closed connection is a retriable TieredLogError after which the
next fetch connects again."""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tiered_log.cluster.kafka_fetch import KafkaTransport
from tiered_log.cluster.protocol import ReplicaAnswer, ReplicaFetch
from tiered_log.errors import FencedEpochError, TieredLogError
from tiered_log.kafka.messages import EXTRA_TAGS, FETCH, encode_fetch_response, parse_request
from tiered_log.local.ranges import FetchRanges

pytestmark = pytest.mark.timeout(30)

Reply = Callable[[Any, int], bytes | None]
"""From a decoded request and its correlation id: the answer frame (None: close)."""


class ScriptedLeader:
    """Accepts connections one after another and answers each request with the next
    reply of ``replies``; records the requests and the connections seen."""

    def __init__(self, replies: list[Reply]) -> None:
        self.replies = list(replies)
        self.requests: list[Any] = []
        self.connections = 0
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(10)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while self.replies:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                conn.settimeout(10)
                while self.replies:
                    head = _recv(conn, 4)
                    if head is None:
                        break
                    frame = _recv(conn, struct.unpack(">i", head)[0])
                    assert frame is not None
                    req = parse_request(frame)
                    self.requests.append(req)
                    out = self.replies.pop(0)(req.body, req.correlation_id)
                    if out is None:
                        break
                    conn.sendall(out)

    def close(self) -> None:
        self.sock.close()
        self.thread.join(5)


def _recv(conn: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        got = conn.recv(n - len(buf))
        if not got:
            return None
        buf += got
    return buf


def answer_of(ans: ReplicaAnswer, error: int = 0) -> Reply:
    """The listener's encoding of ``ans`` for the request's partition."""

    def reply(body: Any, correlation: int) -> bytes:
        t = body.topics[0]
        part: dict[str, Any] = {
            "partition_index": int(t.partitions[0].partition),
            "error_code": error,
            "high_watermark": ans.high_watermark,
            "last_stable_offset": ans.high_watermark,
            "log_start_offset": ans.log_start_offset,
            "aborted_transactions": None,
            "preferred_read_replica": -1,
            "records": bytes(ans.data),  # type: ignore[arg-type]
            EXTRA_TAGS: ans.kafka_tags(),
        }
        if ans.diverging is not None:
            part["diverging_epoch"] = {"epoch": ans.diverging[0], "end_offset": ans.diverging[1]}
        frame = {
            "throttle_time": 0,
            "error_code": 0,
            "session_id": 0,
            "responses": [
                {"topic": "other", "partitions": [dict(part, partition_index=9)]},
                {"topic": t.topic, "partitions": [part]},
            ],
        }
        pieces = encode_fetch_response(12, correlation, frame)
        assert all(isinstance(p, bytes) for p in pieces)
        return b"".join(pieces)  # type: ignore[arg-type]

    return reply


def cut(reply: Reply, keep: int) -> Reply:
    """``reply`` cut to ``keep`` bytes of its body, its size prefix saying so."""

    def short(body: Any, correlation: int) -> bytes:
        frame = reply(body, correlation)
        assert frame is not None
        return struct.pack(">i", keep) + frame[4 : 4 + keep]

    return short


@pytest.fixture
def leader() -> Iterator[Callable[[list[Reply]], ScriptedLeader]]:
    made: list[ScriptedLeader] = []

    def make(replies: list[Reply]) -> ScriptedLeader:
        made.append(ScriptedLeader(replies))
        return made[-1]

    yield make
    for s in made:
        s.close()


RECORDS = ReplicaAnswer(
    b"\x00" * 100 + b"batches",
    high_watermark=40,
    log_start_offset=3,
    remote_end_offset=20,
    epochs=((2, 3), (5, 30)),
    rolls=(30, 35),
)
REQ = ReplicaFetch(7, 5, 30, 5, 1 << 20, 250, empty=True)


def test_a_records_answer_round_trips_and_the_request_decodes(leader: Any) -> None:
    diverging = ReplicaAnswer(b"", 40, 3, 20, ((5, 30),), diverging=(-1, -1))
    reset = ReplicaAnswer(b"", 40, 3, 20, ((5, 30),), reset_to=20)
    s = leader([answer_of(RECORDS), answer_of(diverging), answer_of(reset, error=109)])
    t = KafkaTransport(s.address, replica_id=7, timeout_s=5)
    try:
        got = t.fetch("tp", 4, REQ)
        assert isinstance(got.data, memoryview) and bytes(got.data) == RECORDS.data
        assert got == ReplicaAnswer(got.data, 40, 3, 20, ((2, 3), (5, 30)), rolls=(30, 35))
        got = t.fetch("tp", 4, REQ)
        assert not isinstance(got.data, FetchRanges)  # a follower's answer: its bytes
        assert got.diverging == (-1, -1) and not bytes(got.data)
        got = t.fetch("tp", 4, REQ)
        assert got.reset_to == 20
    finally:
        t.close()
    assert s.connections == 1
    body = s.requests[0].body
    assert s.requests[0].api_key == FETCH and s.requests[0].api_version == 12
    assert int(body.replica_id) == 7 and int(body.max_bytes) == 1 << 20
    p = body.topics[0].partitions[0]
    assert body.topics[0].topic == "tp" and int(p.partition) == 4
    assert (int(p.current_leader_epoch), int(p.fetch_offset), int(p.last_fetched_epoch)) == (
        5,
        30,
        5,
    )
    assert int(p.log_start_offset) == 30  # empty: the follower's local start is its end


def test_bad_answers_are_retriable_errors_then_it_connects_again(leader: Any) -> None:
    def wrong_id(body: Any, correlation: int) -> bytes:
        frame = answer_of(RECORDS)(body, correlation + 1)
        assert frame is not None
        return frame

    s = leader(
        [
            cut(answer_of(RECORDS), 40),
            wrong_id,
            lambda _b, _c: None,  # the leader closes the connection
            answer_of(RECORDS, error=74),
            answer_of(RECORDS),
        ]
    )
    t = KafkaTransport(s.address, replica_id=7, timeout_s=5)
    try:
        for why in ("ends inside a field", "answer to request", "closed the connection"):
            with pytest.raises(TieredLogError, match=why) as info:
                t.fetch("tp", 4, REQ)
            assert info.value.retriable
        with pytest.raises(FencedEpochError):
            t.fetch("tp", 4, REQ)
        ans = t.fetch("tp", 4, REQ)
        assert not isinstance(ans.data, FetchRanges)  # a follower's answer: its bytes
        assert bytes(ans.data) == RECORDS.data
    finally:
        t.close()
    assert s.connections == 5
    with pytest.raises(TieredLogError, match="closed"):
        t.fetch("tp", 4, REQ)
