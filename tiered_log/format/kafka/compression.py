"""The codecs of a Kafka batch's records section, written and read as Kafka does.

A compressed batch keeps its 61-byte header in the clear (the records count too) and
compresses the records that follow as one block; the batch CRC covers the compressed
bytes. Each codec's framing is the one Kafka's Java client writes, so that every Kafka
reader (the Java client, librdkafka, kafka-python) reads what :func:`compress` makes:

- gzip (1): one gzip member (RFC 1952), as ``java.util.zip.GZIPOutputStream`` writes.
  :func:`decompress` also reads several concatenated members.
- snappy (2): xerial snappy-java's stream framing, as ``SnappyOutputStream`` writes::

      magic   0x82 'S' 'N' 'A' 'P' 'P' 'Y' 0x00   8 bytes
      version int32 BE (1), compatible int32 BE (1)
      blocks  [compressed length int32 BE, raw snappy block]...  (32 KiB of input each)

  :func:`decompress` also reads a bare raw snappy block (librdkafka produces those, and
  snappy-java's reader falls back to them too): a section not opening with the magic is
  taken as one raw block.
- lz4 (3): the LZ4 frame format with independent 64 KiB blocks, no block or content
  checksum and no content size, as Kafka's ``Lz4BlockOutputStream`` writes; any valid
  frame is read (dependent blocks included).
- zstd (4): zstandard frames; frames without a content size (Kafka's streaming writer)
  and several concatenated frames are read.

The snappy codec is cramjam's (Rust, wheels for every platform; the raw block functions
that xerial framing needs). Pure functions: safe from any thread.
"""

from __future__ import annotations

import struct
import zlib
from typing import Final

import cramjam
import lz4.frame
import zstandard

from ...errors import CorruptRecordError
from .layout import Compression

BytesLike = bytes | bytearray | memoryview
"""What the codecs read: any contiguous byte buffer."""

XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
"""The first 8 bytes of a xerial snappy stream."""
XERIAL_HEADER: Final = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
"""The 16-byte header snappy-java writes: magic, version 1, compatible version 1."""
XERIAL_BLOCK: Final = 32 * 1024
"""Input bytes per snappy block (snappy-java's default, which Kafka keeps)."""

GZIP_LEVEL: Final = 6
"""Kafka's default gzip level (Deflater's default)."""
ZSTD_LEVEL: Final = 3
"""Kafka's default zstd level (zstd's default)."""
LZ4_LEVEL: Final = 0
"""lz4's fast mode (Kafka's default level 9 picks its high-compression mode: slower)."""

_block = struct.Struct(">i")


def compress(codec: Compression, data: BytesLike, level: int | None = None) -> bytes:
    """The records section ``data`` compressed with ``codec`` in Kafka's framing
    (``level``: the codec's level, None for the default above)."""
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        c = zlib.compressobj(GZIP_LEVEL if level is None else level, zlib.DEFLATED, 31)
        return c.compress(data) + c.flush()
    if codec == Compression.SNAPPY:
        return _xerial_compress(data)
    if codec == Compression.LZ4:
        out: bytes = lz4.frame.compress(
            data,
            compression_level=LZ4_LEVEL if level is None else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB,
            block_linked=False,
            content_checksum=False,
            block_checksum=False,
            store_size=False,
        )
        return out
    if codec == Compression.ZSTD:
        return zstandard.ZstdCompressor(level=ZSTD_LEVEL if level is None else level).compress(data)
    raise ValueError(f"unknown compression codec {int(codec)}")


def decompress(codec: int, data: BytesLike) -> bytes:
    """The records section of a batch whose attributes name ``codec``, decompressed.

    Raises :class:`~tiered_log.errors.CorruptRecordError` if the bytes do not decode
    (or the codec number is not one of Kafka's)."""
    try:
        if codec == Compression.NONE:
            return bytes(data)
        if codec == Compression.GZIP:
            return _gzip_decompress(data)
        if codec == Compression.SNAPPY:
            return _snappy_decompress(data)
        if codec == Compression.LZ4:
            out: bytes = lz4.frame.decompress(data)
            return out
        if codec == Compression.ZSTD:
            return _zstd_decompress(data)
    except CorruptRecordError:
        raise
    except Exception as exc:  # each library raises its own error type
        name = Compression(codec).name.lower()
        raise CorruptRecordError(f"{name} records section does not decompress: {exc}") from exc
    raise CorruptRecordError(f"unknown compression codec {codec} in batch attributes")


def _gzip_decompress(data: BytesLike) -> bytes:
    parts = []
    rest: BytesLike = data
    while True:
        d = zlib.decompressobj(31)
        parts.append(d.decompress(rest))
        if not d.eof:
            raise CorruptRecordError("gzip records section is truncated")
        rest = d.unused_data
        if not rest:
            break
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _xerial_compress(data: BytesLike) -> bytes:
    view = memoryview(data)
    out = bytearray(XERIAL_HEADER)
    for start in range(0, len(view), XERIAL_BLOCK):
        block = cramjam.snappy.compress_raw(view[start : start + XERIAL_BLOCK])
        out += _block.pack(len(block))
        out += block
    return bytes(out)


def _snappy_decompress(data: BytesLike) -> bytes:
    view = memoryview(data)
    if len(view) <= 16 or view[:8].tobytes() != XERIAL_MAGIC:
        return bytes(cramjam.snappy.decompress_raw(view))
    # The version fields after the magic are not checked: some producers write them
    # little-endian, and every reader ignores them.
    parts = []
    pos, n = 16, len(view)
    while pos < n:
        if n - pos < 4:
            raise CorruptRecordError("xerial snappy block length is truncated")
        (size,) = _block.unpack_from(view, pos)
        pos += 4
        if size < 0 or pos + size > n:
            raise CorruptRecordError(f"xerial snappy block of {size} bytes overruns the section")
        parts.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + size])))
        pos += size
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _zstd_decompress(data: BytesLike) -> bytes:
    parts = []
    rest: BytesLike = data
    while rest:
        d = zstandard.ZstdDecompressor().decompressobj()
        parts.append(d.decompress(rest))
        if not d.eof:
            raise CorruptRecordError("zstd records section is truncated")
        rest = d.unused_data
    return parts[0] if len(parts) == 1 else b"".join(parts)


__all__ = ["XERIAL_HEADER", "XERIAL_MAGIC", "BytesLike", "compress", "decompress"]
