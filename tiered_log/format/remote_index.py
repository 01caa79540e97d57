"""Remote index entries: the remoteLogIndex entry and the remote offset/time index entries.

A copied segment is described by one remoteLogIndex entry per *chunk*: a run of whole
record frames of about ``chunk_bytes`` (1 MiB by default), so a reader fetches only the
bytes it needs with one ranged GET. Integers are big-endian (as in KIP-405)::

    remoteLogIndex entry
     0  int16  magic           1
     2  int16  length          bytes of the entry after this field (34 + rdiLength + 8)
     4  int32  crc             CRC-32 of every byte after this field
     8  int64  firstOffset     first record offset in the chunk
    16  int64  lastOffset      last record offset in the chunk
    24  int64  firstTimestamp  timestamp of the first record in the chunk
    32  int64  lastTimestamp   the *largest* record timestamp in the chunk
    40  int32  dataLength      bytes of the chunk
    44  int16  rdiLength       bytes of the remote data identifier
    46  ...    rdi             remote data identifier (below)

    rdi:  int64 byte position of the chunk in the object, then the object key (UTF-8)

The entry length is capped by int16, so an object key may be at most ~32 KiB.

remoteOffsetIndex entry (12 bytes): int64 firstOffset, int32 position of the entry in the
remoteLogIndex file of the same base name. One per remoteLogIndex entry, so a reader
binary-searches it for the floor offset.

remoteTimeIndex entry (12 bytes): int64 maxTimestamp (the largest lastTimestamp up to
and including this entry), int32 position. Added when that running maximum grows, so
the first entry with maxTimestamp >= t points at the first chunk that can hold a
record at or after ``t``.

Pure functions; safe from any thread.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from ..errors import CorruptIndexError, InvalidArgumentError

MAGIC = 1
_PREFIX = struct.Struct(">hhi")  # magic, length, crc
_BODY = struct.Struct(">qqqqih")  # first, last, first_ts, last_ts, data_len, rdi_len
_RDI_POS = struct.Struct(">q")
ENTRY_FIXED = _PREFIX.size + _BODY.size  # 46
OFFSET_ENTRY = struct.Struct(">qi")
TIME_ENTRY = struct.Struct(">qi")
OFFSET_ENTRY_SIZE = OFFSET_ENTRY.size  # 12
TIME_ENTRY_SIZE = TIME_ENTRY.size  # 12


@dataclass(frozen=True, slots=True)
class RemoteLogIndexEntry:
    """One chunk of a copied segment: its offsets, times and where its bytes are."""

    first_offset: int
    last_offset: int
    first_timestamp: int
    last_timestamp: int
    data_length: int
    object_key: str
    position: int

    def encode(self) -> bytes:
        rdi = _RDI_POS.pack(self.position) + self.object_key.encode("utf-8")
        if len(rdi) > 0x7FFF - _BODY.size - 4:
            raise InvalidArgumentError("remote data identifier too long for a remoteLogIndex entry")
        body = (
            _BODY.pack(
                self.first_offset,
                self.last_offset,
                self.first_timestamp,
                self.last_timestamp,
                self.data_length,
                len(rdi),
            )
            + rdi
        )
        crc = zlib.crc32(body)
        return _PREFIX.pack(MAGIC, len(body) + 4, crc - (1 << 32) if crc >= 1 << 31 else crc) + body

    @classmethod
    def decode_from(cls, buf: bytes | memoryview, pos: int = 0) -> tuple[RemoteLogIndexEntry, int]:
        """Decode the entry at ``pos``; return it and the position after it.

        CorruptIndexError on a bad magic, length or CRC, or a truncated entry.
        """
        if pos + _PREFIX.size > len(buf):
            raise CorruptIndexError(f"truncated remoteLogIndex entry at byte {pos}")
        magic, length, crc = _PREFIX.unpack_from(buf, pos)
        end = pos + 4 + length
        if magic != MAGIC or length < _BODY.size + 4 or end > len(buf):
            raise CorruptIndexError(f"bad remoteLogIndex entry at byte {pos}")
        body = bytes(buf[pos + _PREFIX.size : end])
        if zlib.crc32(body) != crc & 0xFFFFFFFF:
            raise CorruptIndexError(f"remoteLogIndex entry at byte {pos} fails its CRC")
        first, last, fts, lts, dlen, rlen = _BODY.unpack_from(body, 0)
        rdi = body[_BODY.size :]
        if len(rdi) != rlen or rlen < 8 or last < first:
            raise CorruptIndexError(f"bad remoteLogIndex entry at byte {pos}")
        (position,) = _RDI_POS.unpack_from(rdi, 0)
        try:
            key = rdi[8:].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CorruptIndexError(f"bad object key in remoteLogIndex entry at {pos}") from exc
        return cls(first, last, fts, lts, dlen, key, position), end


def decode_entries(buf: bytes | memoryview) -> Iterator[tuple[int, RemoteLogIndexEntry]]:
    """Yield ``(position, entry)`` for every entry of a remoteLogIndex buffer."""
    pos = 0
    while pos < len(buf):
        entry, nxt = RemoteLogIndexEntry.decode_from(buf, pos)
        yield pos, entry
        pos = nxt
