"""Batches longer than the C reader's conversion chunk read back exactly as sent: every
record's offset, timestamp, key, value (null and empty too), headers and size, whether
headers appear in every chunk, in one chunk only or in none, compressed and not, and
the same as the Python reader gives."""

from __future__ import annotations

import pytest

from tiered_log.format.kafka import native
from tiered_log.format.records import (
    Compression,
    ProducerRecord,
    decode_columns,
    decode_records,
    encode_batch,
)

T0 = 1_700_000_000_000
N = 3 * native._CHUNK + 7  # chunks of the C reader: full, full, full and a short one


def _records(headers_at: set[int]) -> list[ProducerRecord]:
    out = []
    for i in range(N):
        key = None if i % 5 == 0 else (b"" if i % 5 == 1 else f"k{i}".encode())
        value = None if i % 7 == 0 else (b"" if i % 7 == 1 else bytes([i % 256]) * (i % 300))
        hs = ((f"h{i}", None if i % 2 else f"v{i}".encode()),) if i in headers_at else ()
        out.append(ProducerRecord(value=value, key=key, headers=hs, timestamp=T0 + i))
    return out


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD], ids=["plain", "zstd"])
@pytest.mark.parametrize(
    "headers_at",
    [set(), {native._CHUNK + 3}, set(range(N))],
    ids=["no-headers", "headers-in-one-chunk", "headers-everywhere"],
)
def test_long_batches_read_back_as_sent(
    monkeypatch: pytest.MonkeyPatch, codec: Compression, headers_at: set[int]
) -> None:
    sent = _records(headers_at)
    data = bytes(encode_batch(40, sent, T0, 1 << 20, compression=codec).data)
    got: dict[bool, list[object]] = {}
    for use_c in (False, True):
        monkeypatch.setattr(native, "ENABLED", use_c and native.AVAILABLE)
        recs, end, used = decode_records(data)
        assert end == len(data)
        assert [r.offset for r in recs] == list(range(40, 40 + N))
        assert [(r.timestamp, r.key, r.value, r.headers) for r in recs] == [
            (p.timestamp, p.key, p.value, tuple(p.headers)) for p in sent
        ]
        assert used == sum(r.size for r in recs)
        cols = decode_columns(data)
        assert cols.offsets == [r.offset for r in recs]
        assert [None if v is None else bytes(v) for v in cols.values] == [r.value for r in recs]
        assert cols.headers == [r.headers for r in recs]
        got[use_c] = [recs, cols.keys, cols.timestamps]
    assert got[False] == got[True]
