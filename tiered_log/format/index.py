"""Offset-index and time-index entries of a local segment.

Both files are flat arrays of fixed-size little-endian entries, with no header; they are
*sparse*: an entry is added for the first record of a segment and then whenever at least
``index_interval_bytes`` of batches were written since the last entry (entries are
added at batch starts only). A lookup finds the
floor entry by binary search and scans the store forward from its position.

Offset index entry (8 bytes)::

    0  u32  relative_offset   offset - segment base offset
    4  u32  position          byte position in the store file of the batch whose base
                              offset that is

Time index entry (12 bytes)::

    0  i64  max_timestamp     the largest record timestamp in the segment up to here
    8  u32  relative_offset   the record at which that maximum was first reached

Time entries are strictly increasing in both fields. For a target time ``t``: every
record at or before the relative offset of the last entry with ``max_timestamp < t`` is
older than ``t``, so the first record with ``timestamp >= t`` is found by scanning
forward from there.

Index files are written whole when a segment is sealed (tmp, fsync, rename); the active
segment's entries live in memory and are rebuilt from the store after a crash. Pure
functions here; safe from any thread.
"""

from __future__ import annotations

import struct
from array import array

from ..errors import CorruptIndexError

OFFSET_ENTRY = struct.Struct("<II")
TIME_ENTRY = struct.Struct("<qI")
OFFSET_ENTRY_SIZE = OFFSET_ENTRY.size  # 8
TIME_ENTRY_SIZE = TIME_ENTRY.size  # 12


class SegmentIndex:
    """In-memory sparse indexes of one segment, as parallel ``array`` columns.

    Appends (by the single writer) and lookups (by any reader) may interleave: each
    array operation is atomic under the GIL, and readers only look at entries whose
    position is below the segment's committed size.
    """

    __slots__ = ("positions", "rel_offsets", "time_max", "time_rel")

    def __init__(self) -> None:
        self.rel_offsets = array("I")
        self.positions = array("I")
        self.time_max = array("q")
        self.time_rel = array("I")

    def add_offset(self, rel: int, pos: int) -> None:
        self.rel_offsets.append(rel)
        self.positions.append(pos)

    def add_time(self, max_ts: int, rel: int) -> None:
        self.time_max.append(max_ts)
        self.time_rel.append(rel)

    def truncate_to(self, rel: int) -> None:
        """Drop every entry at or after relative offset ``rel``."""
        from bisect import bisect_left

        i = bisect_left(self.rel_offsets, rel)
        del self.rel_offsets[i:]
        del self.positions[i:]
        j = bisect_left(self.time_rel, rel)
        del self.time_max[j:]
        del self.time_rel[j:]

    def floor_position(self, rel: int) -> tuple[int, int]:
        """``(relative_offset, position)`` of the last entry at or before ``rel``."""
        from bisect import bisect_right

        i = bisect_right(self.rel_offsets, rel) - 1
        if i < 0:
            return 0, 0
        return self.rel_offsets[i], self.positions[i]

    def time_floor_rel(self, ts: int) -> int | None:
        """Relative offset of the last time entry whose max timestamp is < ``ts``."""
        from bisect import bisect_left

        i = bisect_left(self.time_max, ts) - 1
        return None if i < 0 else self.time_rel[i]

    @property
    def max_timestamp(self) -> int:
        return self.time_max[-1] if self.time_max else -1

    def encode_offsets(self) -> bytes:
        pairs = array("I", bytes(len(self.rel_offsets) * 8))
        pairs[0::2] = self.rel_offsets
        pairs[1::2] = self.positions
        return _le(pairs).tobytes()

    def encode_times(self) -> bytes:
        return b"".join(
            TIME_ENTRY.pack(t, r) for t, r in zip(self.time_max, self.time_rel, strict=True)
        )

    @classmethod
    def decode(cls, offset_bytes: bytes, time_bytes: bytes, store_size: int) -> SegmentIndex:
        """Parse both files, checking every invariant; CorruptIndexError if one fails."""
        if len(offset_bytes) % OFFSET_ENTRY_SIZE or len(time_bytes) % TIME_ENTRY_SIZE:
            raise CorruptIndexError("index file size is not a whole number of entries")
        idx = cls()
        pairs = array("I")
        pairs.frombytes(offset_bytes)
        pairs = _le(pairs)
        idx.rel_offsets = pairs[0::2]
        idx.positions = pairs[1::2]
        for name, col in (("offset", idx.rel_offsets), ("position", idx.positions)):
            if any(col[i] >= col[i + 1] for i in range(len(col) - 1)):
                raise CorruptIndexError(f"offset index {name}s are not increasing")
        if idx.positions and (idx.positions[0] != 0 or idx.rel_offsets[0] != 0):
            raise CorruptIndexError("offset index does not start at the segment's first record")
        if idx.positions and idx.positions[-1] >= store_size:
            raise CorruptIndexError("offset index points past the end of the store")
        for t, r in TIME_ENTRY.iter_unpack(time_bytes):
            if idx.time_max and (t <= idx.time_max[-1] or r <= idx.time_rel[-1]):
                raise CorruptIndexError("time index entries are not increasing")
            idx.add_time(t, r)
        if idx.time_rel and (idx.time_rel[0] != 0 or idx.time_max[0] < 0):
            raise CorruptIndexError("time index does not start at the segment's first record")
        return idx


def _le(a: array) -> array:  # type: ignore[type-arg]
    """Return ``a`` in little-endian byte order (a no-op on little-endian machines)."""
    import sys

    if sys.byteorder != "little":
        a = array(a.typecode, a)
        a.byteswap()
    return a
