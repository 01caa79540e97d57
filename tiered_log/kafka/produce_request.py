"""The body of a Produce request (versions 3-9) read without copying its records.

kio decodes a ``records`` field into a ``bytes`` copy; for a Produce of a few MiB that
copy (and the fresh memory it takes) is paid on the event loop for every request, and
the parse step copies the batches once more into the buffer it rewrites. Here the
records stay where the socket put them: each partition's ``records`` is a read-only
``memoryview`` of the request frame, copied once, by the parse step, on the broker's
append executor. The other fields are read as kio reads them and the result is kio's
own ``ProduceRequest`` dataclass of the version, so the handlers see what kio would give.

Layout (Kafka's message spec ``ProduceRequest``; big-endian)::

    v3-v8: transactional_id nullable string (int16 length, -1: null) | acks int16
           | timeout_ms int32 | topic_data array (int32 count) of
             ( name string (int16 length) | partition_data array (int32 count) of
               ( index int32 | records nullable bytes (int32 length, -1: null) ) )
    v9 (flexible): the same fields with compact strings, arrays and bytes (uvarint
           length + 1, 0: null), and a tagged-field section (uvarint count, then
           tag uvarint | size uvarint | bytes, each) after each partition, each topic
           and the body. Tagged fields are skipped: Produce names none.

Bytes after the body are ignored, as Kafka's broker ignores them. Pure functions over a
frame: safe from any thread.
"""

from __future__ import annotations

import datetime
import struct
import sys
from typing import Any

from .fields import read_uvarint

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")


class _Reader:
    """A position in a frame, with the reads the Produce body needs (IndexError or
    struct.error past the end, ValueError for a length that cannot be)."""

    def __init__(self, view: memoryview, pos: int, flexible: bool) -> None:
        self.view = view
        self.pos = pos
        self.flexible = flexible

    def _size(self, legacy: struct.Struct) -> int:
        """A length or count: -1 for null."""
        if self.flexible:
            n, self.pos = read_uvarint(self.view, self.pos)
            return n - 1
        (n,) = legacy.unpack_from(self.view, self.pos)
        self.pos += legacy.size
        return int(n)

    def _take(self, n: int) -> memoryview:
        if n > len(self.view) - self.pos:
            raise ValueError(f"a field of {n} bytes runs past the request's end")
        out = self.view[self.pos : self.pos + n]
        self.pos += n
        return out

    def string(self, nullable: bool = False) -> str | None:
        n = self._size(_I16)
        if n < 0:
            if nullable and n == -1:
                return None
            raise ValueError(f"a string of length {n}")
        return str(self._take(n), "utf-8")

    def records(self) -> memoryview | None:
        n = self._size(_I32)
        if n < 0:
            if n == -1:
                return None
            raise ValueError(f"records of length {n}")
        return self._take(n)

    def count(self) -> int:
        n = self._size(_I32)
        if n < 0:
            raise ValueError(f"an array of length {n} where one is required")
        return n

    def int32(self) -> int:
        (n,) = _I32.unpack_from(self.view, self.pos)
        self.pos += 4
        return int(n)

    def acks_timeout(self) -> tuple[int, int]:
        acks, timeout = _ACKS_TIMEOUT.unpack_from(self.view, self.pos)
        self.pos += _ACKS_TIMEOUT.size
        return int(acks), int(timeout)

    def skip_tags(self) -> None:
        if not self.flexible:
            return
        n, self.pos = read_uvarint(self.view, self.pos)
        for _ in range(n):
            _, self.pos = read_uvarint(self.view, self.pos)
            size, self.pos = read_uvarint(self.view, self.pos)
            self._take(size)


_NESTED: dict[str, tuple[type[Any], type[Any]]] = {}


def _nested(cls: type[Any]) -> tuple[type[Any], type[Any]]:
    """The topic and partition classes of kio's ``ProduceRequest`` ``cls`` (looked up
    once per version; a lost race only looks them up twice)."""
    got = _NESTED.get(cls.__module__)
    if got is None:
        module = sys.modules[cls.__module__]
        got = _NESTED[cls.__module__] = (module.TopicProduceData, module.PartitionProduceData)
    return got


def read_produce(cls: type[Any], frame: bytes | bytearray | memoryview, at: int) -> Any:
    """kio's ``ProduceRequest`` ``cls`` (its version's class) read from ``frame`` at
    byte ``at`` (after the request header), each ``records`` a read-only view of
    ``frame``. Raises ValueError, IndexError or struct.error when the body does not
    decode."""
    topic_cls, part_cls = _nested(cls)
    r = _Reader(memoryview(frame).toreadonly(), at, bool(cls.__flexible__))
    transactional_id = r.string(nullable=True)
    acks, timeout_ms = r.acks_timeout()
    topics = []
    for _ in range(r.count()):
        name = r.string()
        parts = []
        for _ in range(r.count()):
            index = r.int32()
            parts.append(part_cls(index=index, records=r.records()))
            r.skip_tags()
        r.skip_tags()
        topics.append(topic_cls(name=name, partition_data=tuple(parts)))
    r.skip_tags()
    return cls(
        transactional_id=transactional_id,
        acks=acks,
        timeout=datetime.timedelta(milliseconds=timeout_ms),
        topic_data=tuple(topics),
    )


__all__ = ["read_produce"]
