"""An independent reader (and raw assembler) of Kafka's record batch v2, for the tests.

Written from the layout in Kafka's protocol documentation ("Record Batch"), sharing no
code with :mod:`tiered_log.format.kafka`: plain ``struct`` reads field by field, its own
zigzag varint, the CRC-32C from the ``crc32c`` package, and each codec through a library
other than the one the codec under test uses where one exists (stdlib gzip, the
``snappy`` module with its own xerial parsing, ``lz4.frame``, zstandard's stream reader).
"""

from __future__ import annotations

import gzip
import io
import struct
from dataclasses import dataclass, field

import crc32c
import lz4.frame
import snappy
import zstandard


@dataclass
class SpecRecord:
    length: int
    attributes: int
    timestamp_delta: int
    offset_delta: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


@dataclass
class SpecBatch:
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    computed_crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int
    raw_records: bytes
    records: list[SpecRecord] = field(default_factory=list)

    @property
    def codec(self) -> int:
        return self.attributes & 0x07

    @property
    def timestamp_type(self) -> int:
        return (self.attributes >> 3) & 1

    @property
    def transactional(self) -> bool:
        return bool(self.attributes & 0x10)

    @property
    def control(self) -> bool:
        return bool(self.attributes & 0x20)


def read_zigzag(buf: bytes, pos: int) -> tuple[int, int]:
    """Base-128 little-endian groups, then zigzag: (n >>> 1) ^ -(n & 1)."""
    result = 0
    shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result += (byte & 0x7F) * (1 << shift)
        shift += 7
        if not byte & 0x80:
            break
        assert shift < 70, "varint too long"
    if result % 2:
        return -(result + 1) // 2, pos
    return result // 2, pos


def write_zigzag(n: int) -> bytes:
    u = 2 * n if n >= 0 else -2 * n - 1
    out = bytearray()
    while True:
        if u < 128:
            out.append(u)
            return bytes(out)
        out.append(128 + u % 128)
        u //= 128


def _unxerial(data: bytes) -> bytes:
    if len(data) > 16 and data[:8] == b"\x82SNAPPY\x00":
        out = io.BytesIO()
        pos = 16
        while pos < len(data):
            (size,) = struct.unpack(">i", data[pos : pos + 4])
            pos += 4
            out.write(snappy.decompress(data[pos : pos + size]))
            pos += size
        return out.getvalue()
    return bytes(snappy.decompress(data))


def decompress(codec: int, data: bytes) -> bytes:
    if codec == 0:
        return data
    if codec == 1:
        return gzip.decompress(data)
    if codec == 2:
        return _unxerial(data)
    if codec == 3:
        return bytes(lz4.frame.decompress(data))
    if codec == 4:
        reader = zstandard.ZstdDecompressor().stream_reader(
            io.BytesIO(data), read_across_frames=True
        )
        return bytes(reader.read())
    raise AssertionError(f"unknown codec {codec}")


def _read_bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    n, pos = read_zigzag(buf, pos)
    if n == -1:
        return None, pos
    assert n >= 0
    return buf[pos : pos + n], pos + n


def read_batch(buf: bytes, pos: int = 0) -> tuple[SpecBatch, int]:
    """One batch at ``pos``, fully decoded; returns it and the position after it."""
    (base_offset,) = struct.unpack_from(">q", buf, pos)
    (batch_length,) = struct.unpack_from(">i", buf, pos + 8)
    (leader_epoch,) = struct.unpack_from(">i", buf, pos + 12)
    (magic,) = struct.unpack_from(">b", buf, pos + 16)
    (crc,) = struct.unpack_from(">I", buf, pos + 17)
    end = pos + 12 + batch_length
    computed = crc32c.crc32c(buf[pos + 21 : end])
    (attributes,) = struct.unpack_from(">h", buf, pos + 21)
    (last_offset_delta,) = struct.unpack_from(">i", buf, pos + 23)
    (base_ts,) = struct.unpack_from(">q", buf, pos + 27)
    (max_ts,) = struct.unpack_from(">q", buf, pos + 35)
    (producer_id,) = struct.unpack_from(">q", buf, pos + 43)
    (producer_epoch,) = struct.unpack_from(">h", buf, pos + 51)
    (base_sequence,) = struct.unpack_from(">i", buf, pos + 53)
    (count,) = struct.unpack_from(">i", buf, pos + 57)
    raw = bytes(buf[pos + 61 : end])
    batch = SpecBatch(
        base_offset, batch_length, leader_epoch, magic, crc, computed, attributes,
        last_offset_delta, base_ts, max_ts, producer_id, producer_epoch, base_sequence,
        count, raw,
    )  # fmt: skip
    data = decompress(batch.codec, raw)
    p = 0
    for _ in range(count):
        length, p = read_zigzag(data, p)
        start = p
        attrs = data[p]
        p += 1
        ts_delta, p = read_zigzag(data, p)
        off_delta, p = read_zigzag(data, p)
        key, p = _read_bytes(data, p)
        value, p = _read_bytes(data, p)
        nheaders, p = read_zigzag(data, p)
        headers: list[tuple[str, bytes | None]] = []
        for _ in range(nheaders):
            hk, p = _read_bytes(data, p)
            assert hk is not None, "header key is never null"
            hv, p = _read_bytes(data, p)
            headers.append((hk.decode("utf-8"), hv))
        assert p - start == length, f"record length {length} but fields take {p - start}"
        batch.records.append(SpecRecord(length, attrs, ts_delta, off_delta, key, value, headers))
    assert p == len(data), "bytes left after the last record"
    return batch, end


def read_all(buf: bytes) -> list[SpecBatch]:
    out = []
    pos = 0
    while pos < len(buf):
        b, pos = read_batch(buf, pos)
        out.append(b)
    return out


def record_bytes(
    offset_delta: int,
    timestamp_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes | None]] = [],  # noqa: B006
) -> bytes:
    """One record, length prefix included, as the spec lays it out."""

    def b(x: bytes | None) -> bytes:
        return write_zigzag(-1) if x is None else write_zigzag(len(x)) + x

    body = b"\x00" + write_zigzag(timestamp_delta) + write_zigzag(offset_delta) + b(key) + b(value)
    body += write_zigzag(len(headers))
    for hk, hv in headers:
        body += b(hk.encode()) + b(hv)
    return write_zigzag(len(body)) + body


def assemble(
    section: bytes,
    count: int,
    *,
    attributes: int = 0,
    base_offset: int = 0,
    last_offset_delta: int | None = None,
    base_timestamp: int = 0,
    max_timestamp: int = 0,
    magic: int = 2,
) -> bytes:
    """A batch around an already encoded (and maybe compressed) records section."""
    lod = count - 1 if last_offset_delta is None else last_offset_delta
    after_crc = (
        struct.pack(">hiqqqhii", attributes, lod, base_timestamp, max_timestamp, -1, -1, -1, count)
        + section
    )
    crc = crc32c.crc32c(after_crc)
    return struct.pack(">qiibI", base_offset, 9 + len(after_crc), -1, magic, crc) + after_crc
