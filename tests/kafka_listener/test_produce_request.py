"""The Produce body reader that leaves records in the frame reads what kio reads: the
same ``ProduceRequest`` for every served version (null transactional id and records,
several topics and partitions, v9's tagged fields skipped), records as views of the
frame, and a clear refusal for a body that does not decode."""

from __future__ import annotations

import io
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.serial import entity_reader, entity_writer

from tiered_log.kafka.fields import uvarint
from tiered_log.kafka.messages import PRODUCE, BadFrame, build, parse_request, request_class

from .conftest import encode_request

partitions = st.lists(
    st.fixed_dictionaries(
        {
            "index": st.integers(-(1 << 31), (1 << 31) - 1),
            "records": st.none() | st.binary(max_size=300),
        }
    ),
    max_size=3,
)
bodies = st.fixed_dictionaries(
    {
        "transactional_id": st.none() | st.text(max_size=10),
        "acks": st.sampled_from([-1, 0, 1]),
        "timeout": st.integers(0, (1 << 31) - 1),
        "topic_data": st.lists(
            st.fixed_dictionaries({"name": st.text(max_size=20), "partition_data": partitions}),
            max_size=3,
        ),
    }
)


@settings(max_examples=150, deadline=None)
@given(body=bodies, version=st.integers(3, 9))
def test_the_reader_gives_what_kio_gives(body: dict[str, Any], version: int) -> None:
    frame = encode_request(PRODUCE, version, 7, body)
    got = parse_request(frame[4:]).body
    cls = request_class(PRODUCE, version)
    head_at = len(frame) - len(_encoded_body(cls, body))
    want, _ = entity_reader(cls)(memoryview(frame).toreadonly(), head_at)
    assert got == want
    for t in got.topic_data:
        for p in t.partition_data:
            assert p.records is None or isinstance(p.records, memoryview)


def _encoded_body(cls: type[Any], body: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    entity_writer(cls)(buf, build(cls, body))
    return buf.getvalue()


def test_v9_tagged_fields_are_skipped() -> None:
    """Unknown tagged fields after a partition, a topic and the body (a newer client's)
    are skipped, as Kafka's broker skips them."""
    cls = request_class(PRODUCE, 9)
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout": 1000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 3, "records": b"abc"}]}],
    }
    plain = _encoded_body(cls, body)
    assert plain.endswith(b"abc\x00\x00\x00")  # partition, topic, body: no tag each
    tag = uvarint(1) + uvarint(77) + uvarint(2) + b"zz"  # one field: tag 77, 2 bytes
    tagged = plain[:-3] + tag + tag + tag
    frame = encode_request(PRODUCE, 9, 7, body)
    frame = frame[4 : len(frame) - len(plain)] + tagged
    req = parse_request(frame)
    (t,) = req.body.topic_data
    (p,) = t.partition_data
    assert (t.name, p.index, bytes(p.records)) == ("t", 3, b"abc")


@pytest.mark.parametrize("version", [3, 9])
def test_a_body_cut_short_or_with_a_bad_length_is_refused(version: int) -> None:
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout": 1000,
        "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": b"x" * 50}]}],
    }
    frame = encode_request(PRODUCE, version, 7, body)[4:]
    for cut in (1, 10, 51):
        with pytest.raises(BadFrame, match="undecodable"):
            parse_request(frame[:-cut])
    at = frame.index(b"x" * 50)
    bad = bytearray(frame)
    if version == 9:
        bad[at - 1] = 0x7F  # records length 126: past the end
    else:
        bad[at - 4 : at] = (1 << 20).to_bytes(4, "big")
    with pytest.raises(BadFrame, match="undecodable"):
        parse_request(bad)
