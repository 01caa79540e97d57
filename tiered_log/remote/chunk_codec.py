"""A chunk as the bucket stores it: plain, or framed (compressed and/or encrypted).

A segment is shipped as its chunks (:func:`~tiered_log.remote.manifest.cut_chunks`)
laid end to end in its ``.log`` object; the remoteLogIndex entries give each chunk's
place and *stored* length, so a reader still fetches a chunk with one ranged GET.
A chunk is stored either *plain* (its batches, exactly as the local store holds them:
every archive written before compression existed, and a chunk that neither compression
nor encryption applies to) or *framed*. All integers of the frame little-endian (the
Kafka batches inside are big-endian, as Kafka's are)::

     0  4s   magic      b"TLCK"
     4  u8   version    1
     5  u8   codec      0 none, 1 zstd, 2 lz4, 3 gzip
     6  u8   flags      bit 0: the payload is encrypted
     7  u8   reserved   0
     8  u32  length     bytes of the chunk once decoded (its batches)
    12  u64  checksum   xxh3-64 of bytes [0, 12) and [20, end): everything stored but itself
    20  2s   marker     b"CF" (a plain chunk holds its first batch's CRC-32C's last byte
                        and its attributes' high byte, always 0, here)
    22  u16  reserved   0
    24  u32  stored     bytes of the payload (a frame's end is known from its head)
    28  12s  nonce      AES-GCM nonce (random per chunk); zeros when not encrypted
    40  ...  payload    the batches compressed with ``codec``; when encrypted, that
                        encrypted with the segment's data key (AES-256-GCM, the 16-byte
                        tag at the end, associated data: bytes [0, 12) and [20, 40))

A reader tells the two apart by bytes 20-21 (and the magic), so old and new chunks
read alike. Decoding (:func:`decode_chunk`) verifies what was stored first (the
checksum), then decrypts (GCM checks its tag), decompresses and checks the length; the
caller then verifies the batches' own checksums, as for a plain chunk.

A chunk is compressed only when that pays (:func:`encode_chunk`: at least
:data:`MIN_SAVING` of it); otherwise codec ``none`` is stored (framed only when
encrypted). Batches a producer already compressed therefore are not compressed twice:
the attempt is measured on the chunk and dropped.

Levels: zstd 1, lz4's default (fast), gzip 6 (the README's archive section has the
figures the default was chosen from). Pure functions; safe from any thread (each call
makes its own compressor).
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Final

import lz4.frame
import xxhash
import zstandard
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ..errors import InvalidArgumentError, RemoteCorruptionError
from ..format.remote_index import RemoteLogIndexEntry
from .crypto import NONCE_BYTES, KeyUnavailableError

CODECS: Final = ("none", "zstd", "lz4", "gzip")
"""The values of a topic's ``remote_compression``; a codec's id is its index."""
MAGIC: Final = b"TLCK"
VERSION: Final = 1
MARKER: Final = b"CF"
FLAG_ENCRYPTED: Final = 1
FRAME = struct.Struct("<4sBBBxIQ2s2xI12s")
"""magic, version, codec, flags, length, checksum, marker, stored, nonce (see the module
docstring)."""
FRAME_SIZE: Final = FRAME.size  # 40
MIN_SAVING: Final = 1 / 16
"""A chunk is stored compressed only when that saves at least this share of its bytes."""
ZSTD_LEVEL: Final = 1
GZIP_LEVEL: Final = 6


def check_codec(name: str) -> str:
    """``name`` if it is a codec (:data:`CODECS`); InvalidArgumentError otherwise."""
    if name not in CODECS:
        raise InvalidArgumentError(f"unknown compression {name!r}: one of {', '.join(CODECS)}")
    return name


def compress(codec: str, data: bytes | memoryview) -> bytes:
    """``data`` compressed with ``codec`` (not ``none``)."""
    if codec == "zstd":
        return zstandard.ZstdCompressor(level=ZSTD_LEVEL).compress(data)
    if codec == "lz4":
        return bytes(lz4.frame.compress(data))
    if codec == "gzip":
        return gzip.compress(bytes(data), compresslevel=GZIP_LEVEL, mtime=0)
    raise InvalidArgumentError(f"cannot compress with {codec!r}")


def decompress(codec: str, data: bytes | memoryview, length: int) -> bytes:
    """``data`` decompressed with ``codec`` (at most ``length`` bytes are made)."""
    if codec == "zstd":
        return bytes(zstandard.ZstdDecompressor().decompress(data, max_output_size=length))
    if codec == "lz4":
        return bytes(lz4.frame.decompress(data))
    if codec == "gzip":
        d = zlib.decompressobj(wbits=31)
        out = d.decompress(data, length)
        if not d.eof or d.unconsumed_tail:
            raise ValueError("the gzip stream does not end with the chunk")
        return out
    raise ValueError(f"unknown codec {codec!r}")


def is_framed(data: bytes | memoryview) -> bool:
    """Whether a stored chunk is framed (see the module docstring); else it is plain."""
    return len(data) >= FRAME_SIZE and data[20:22] == MARKER and data[0:4] == MAGIC


def _checksum(frame: bytes | bytearray | memoryview) -> int:
    h = xxhash.xxh3_64(frame[:12])
    h.update(frame[20:])
    return int(h.intdigest())


def encode_chunk(data: bytes | memoryview, codec: str, dek: bytes | None) -> bytes:
    """The stored form of the chunk ``data`` (its batches): plain when there is no
    data key and compression does not pay (or ``codec`` is ``none``), else framed."""
    codec_id, payload = 0, data
    if codec != "none":
        packed = compress(codec, data)
        if len(packed) <= len(data) - len(data) * MIN_SAVING:
            codec_id, payload = CODECS.index(codec), packed
    if dek is None and codec_id == 0:
        return bytes(data)
    flags, nonce = (FLAG_ENCRYPTED, os.urandom(NONCE_BYTES)) if dek is not None else (0, bytes(12))
    stored = len(payload) + (16 if dek is not None else 0)  # GCM's tag
    head = bytearray(
        FRAME.pack(MAGIC, VERSION, codec_id, flags, len(data), 0, MARKER, stored, nonce)
    )
    if dek is not None:
        payload = AESGCM(dek).encrypt(nonce, payload, bytes(head[:12]) + bytes(head[20:]))
    frame = head + payload
    struct.pack_into("<Q", frame, 12, _checksum(frame))
    return bytes(frame)


def frame_size(data: bytes | memoryview) -> int:
    """The stored bytes of the frame at the start of ``data`` (:func:`is_framed`)."""
    return FRAME_SIZE + int(FRAME.unpack_from(data)[7])


def frame_codec(data: bytes | memoryview) -> str:
    """The codec a framed chunk's payload is compressed with (``none`` for a plain
    chunk or an unknown codec id: :func:`decode_chunk` refuses the latter)."""
    if not is_framed(data) or data[5] >= len(CODECS):
        return "none"
    return CODECS[data[5]]


def chunk_is_encrypted(data: bytes | memoryview) -> bool:
    """Whether a stored chunk needs its segment's data key to be read."""
    return is_framed(data) and bool(data[6] & FLAG_ENCRYPTED)


def decode_chunk(data: bytes | memoryview, dek: bytes | None, where: str) -> bytes | memoryview:
    """The batches of the stored chunk ``data`` (``where`` names it in errors): a plain
    chunk as it is; a framed one verified (its checksum), decrypted with ``dek``,
    decompressed and checked for length. RemoteCorruptionError when any check fails;
    KeyUnavailableError when it is encrypted and ``dek`` is None. The batches' own
    checksums are the caller's to verify."""
    if not is_framed(data):
        return data
    _, version, codec_id, flags, length, checksum, _, stored, nonce = FRAME.unpack_from(data)
    if version != VERSION or codec_id >= len(CODECS) or flags & ~FLAG_ENCRYPTED:
        raise RemoteCorruptionError(
            f"{where}: unknown chunk frame (version {version}, codec {codec_id}, flags {flags})"
        )
    if FRAME_SIZE + stored != len(data):
        raise RemoteCorruptionError(
            f"{where}: the chunk is {len(data)} bytes, its frame says {FRAME_SIZE + stored}"
        )
    if _checksum(data) != checksum:
        raise RemoteCorruptionError(f"{where}: the stored chunk does not match its checksum")
    payload: bytes | memoryview = memoryview(data)[FRAME_SIZE:]
    if flags & FLAG_ENCRYPTED:
        if dek is None:
            raise KeyUnavailableError(f"{where} is encrypted and its data key is not at hand")
        aad = bytes(data[:12]) + bytes(data[20:FRAME_SIZE])  # as encode_chunk's
        try:
            payload = AESGCM(dek).decrypt(nonce, bytes(payload), aad)
        except InvalidTag:
            raise RemoteCorruptionError(
                f"{where}: the encrypted chunk does not decrypt with its segment's data key"
            ) from None
    try:
        out = payload if codec_id == 0 else decompress(CODECS[codec_id], payload, length)
    except (zstandard.ZstdError, RuntimeError, ValueError, zlib.error, OSError) as exc:
        raise RemoteCorruptionError(f"{where}: the chunk does not decompress: {exc}") from None
    if len(out) != length:
        raise RemoteCorruptionError(
            f"{where}: the chunk decodes to {len(out)} bytes, its frame says {length}"
        )
    return out


def encode_store(
    path: Path,
    entries: Sequence[RemoteLogIndexEntry],
    out: Path,
    codec: str,
    dek: bytes | None,
) -> list[RemoteLogIndexEntry]:
    """Write the stored form of a sealed store's chunks (``entries``, as
    :func:`~tiered_log.remote.manifest.cut_chunks` cut it; positions in ``path``) end to
    end into the file ``out``; the entries of the stored chunks (their places in
    ``out``). Reads one chunk at a time."""
    stored: list[RemoteLogIndexEntry] = []
    pos = 0
    with open(path, "rb") as src, open(out, "wb") as dst:
        fd = src.fileno()
        for e in entries:
            data = os.pread(fd, e.data_length, e.position)
            if len(data) != e.data_length:
                raise RemoteCorruptionError(f"{path} ended inside the chunk at byte {e.position}")
            blob = encode_chunk(data, codec, dek)
            dst.write(blob)
            stored.append(replace(e, position=pos, data_length=len(blob)))
            pos += len(blob)
    return stored


__all__ = [
    "CODECS",
    "FRAME_SIZE",
    "MIN_SAVING",
    "check_codec",
    "chunk_is_encrypted",
    "decode_chunk",
    "encode_chunk",
    "encode_store",
    "frame_size",
    "is_framed",
]
