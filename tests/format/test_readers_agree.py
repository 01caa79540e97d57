"""The two record readers agree: the C reader (aiokafka's, used when it is installed:
tiered_log.format.kafka.native) and the Python one (tiered_log.format.kafka.records) give
the same records, sizes, positions and byte counts for any batches, start offset and
limits; and without aiokafka the Python one serves alone."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tiered_log.format.kafka import native
from tiered_log.format.records import (
    Compression,
    ProducerRecord,
    decode_columns,
    decode_records,
    encode_batch,
)

T0 = 1_700_000_000_000

records = st.lists(
    st.builds(
        ProducerRecord,
        value=st.none() | st.binary(max_size=300),
        key=st.none() | st.binary(max_size=80),
        headers=st.lists(
            st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=10)), max_size=2
        ).map(tuple),
        timestamp=st.none() | st.integers(0, 1 << 45),
    )
    | st.binary(max_size=150),
    min_size=1,
    max_size=60,
)


def _both(fn: object, monkeypatch: pytest.MonkeyPatch) -> tuple[object, object]:
    assert callable(fn)
    with monkeypatch.context() as m:
        m.setattr(native, "ENABLED", False)
        python = fn()
    with monkeypatch.context() as m:
        m.setattr(native, "ENABLED", native.AVAILABLE)
        c = fn()
    return python, c


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    recs=records,
    codec=st.sampled_from(list(Compression)),
    limit=st.integers(100, 4000),
    start=st.integers(0, 70),
    max_records=st.none() | st.integers(1, 70),
    max_bytes=st.none() | st.integers(1, 6000),
    at_least_one=st.booleans(),
    lat=st.booleans(),
)
def test_readers_agree(
    monkeypatch: pytest.MonkeyPatch,
    recs: list[ProducerRecord | bytes],
    codec: Compression,
    limit: int,
    start: int,
    max_records: int | None,
    max_bytes: int | None,
    at_least_one: bool,
    lat: bool,
) -> None:
    eb = encode_batch(100, recs, T0, 1 << 20, compression=codec, max_batch_bytes=limit)
    if lat:
        eb = eb.rebased(100, T0 + 5, log_append_time=True)
    data = bytes(eb.data)

    def read() -> object:
        return decode_records(
            memoryview(data),
            start_offset=100 + start,
            max_records=max_records,
            max_bytes=max_bytes,
            at_least_one=at_least_one,
        )

    python, c = _both(read, monkeypatch)
    assert python == c

    def cols() -> object:
        got = decode_columns(data)
        return got._replace(values=[None if v is None else bytes(v) for v in got.values])

    python, c = _both(cols, monkeypatch)
    assert python == c
    whole = decode_records(data)[0]
    assert python.offsets == [r.offset for r in whole]  # type: ignore[attr-defined]
    assert python.values == [r.value for r in whole]  # type: ignore[attr-defined]


def test_the_c_reader_is_there_in_the_dev_setup() -> None:
    """aiokafka is a dev dependency, so the tests above compare two readers."""
    assert native.AVAILABLE


@pytest.mark.parametrize("use_c", [False, True], ids=["python", "c"])
def test_records_that_do_not_fit_their_framing_are_refused_by_both(
    monkeypatch: pytest.MonkeyPatch, use_c: bool
) -> None:
    from tiered_log.errors import CorruptRecordError

    from . import spec_decoder as spec

    monkeypatch.setattr(native, "ENABLED", use_c and native.AVAILABLE)
    good = [spec.record_bytes(i, 0, b"k", b"v" * i) for i in range(12)]
    long_by_two = bytes([good[5][0] + 4]) + good[5][1:]  # its length says 2 more
    for section, count in [
        (b"".join(good) + b"\x00", 12),  # a byte after the last record
        (b"".join(good[:11]), 12),  # a record fewer than the count
        (b"".join(good[:5]) + long_by_two + b"\x00\x00" + b"".join(good[6:]), 12),
    ]:
        data = spec.assemble(section, count)
        with pytest.raises(CorruptRecordError):
            decode_records(data)
        with pytest.raises(CorruptRecordError):
            decode_records(data, max_records=20, max_bytes=1 << 20)
        with pytest.raises(CorruptRecordError):
            decode_columns(data)
