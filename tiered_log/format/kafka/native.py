"""An optional C reader of a batch's records: aiokafka's, when it is installed.

Decoding records is a varint walk per record; in Python (:mod:`.records`) that is one
interpreted loop iteration per record, the dominant cost of reading records. aiokafka
(an asyncio Kafka client) ships a Cython reader of Kafka v2 batches
(``aiokafka.record._crecords.DefaultRecordBatch``) that does the same walk in C, several
times faster. tiered_log does not depend on aiokafka: when it is importable, the
decoders of :mod:`tiered_log.format.batch_decode` hand it whole (decompressed,
CRC-verified) batches and convert what it yields with C-level ``map`` calls; when it is
not, they use :mod:`.records` alone, which reads the same records (the tests run both).

Only the reading is delegated: CRCs, framing, decompression and the checks of a client's
batches stay ours. A record aiokafka cannot parse raises
:class:`~tiered_log.errors.CorruptRecordError`.

:data:`ENABLED` may be set False (tests, or to compare the two readers). Safe from any
thread: the functions keep no state.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice, repeat
from operator import attrgetter
from typing import Any

from ...errors import CorruptRecordError
from .layout import ATTRIBUTES_AT, BATCH_LENGTH_AT, COMPRESSION_MASK, HEADER_SIZE, LOG_OVERHEAD
from .records import Headers, Record

try:  # pragma: no branch
    from aiokafka.record._crecords import DefaultRecordBatch as _CBatch
except ImportError:  # pragma: no cover - aiokafka is optional
    _CBatch = None

AVAILABLE = _CBatch is not None
"""Whether aiokafka's C reader could be imported."""
ENABLED = AVAILABLE
"""Whether the decoders use it (only when :data:`AVAILABLE`)."""

_offset = attrgetter("offset")
_timestamp = attrgetter("timestamp")
_key = attrgetter("key")
_value = attrgetter("value")
_headers = attrgetter("headers")
_new = tuple.__new__


def plain_batch(batch: bytes | memoryview, section: bytes | None) -> bytes | memoryview:
    """The batch to hand the reader: ``batch`` itself when its records are not
    compressed (``section`` None), else its header with the codec bits cleared and
    batchLength set, followed by the decompressed ``section`` (not CRC-correct: the
    reader does not check it, ours did)."""
    if section is None:
        return batch
    head = bytearray(batch[:HEADER_SIZE])
    head[ATTRIBUTES_AT + 1] &= ~COMPRESSION_MASK & 0xFF
    head[BATCH_LENGTH_AT : BATCH_LENGTH_AT + 4] = (
        HEADER_SIZE - LOG_OVERHEAD + len(section)
    ).to_bytes(4, "big")
    return bytes(head) + section


def _read(batch: bytes | memoryview, stop: int | None) -> list[Any]:
    assert _CBatch is not None
    try:
        return list(islice(_CBatch(batch), stop))
    except CorruptRecordError:
        raise
    except Exception as exc:  # aiokafka's CorruptRecordException, or a struct error
        raise CorruptRecordError(f"records do not parse: {exc}") from None


def records(batch: bytes | memoryview, lo: int, sizes: list[int], checksum: int) -> list[Record]:
    """Records ``lo`` to ``lo + len(sizes) - 1`` of ``batch`` (see :func:`plain_batch`),
    ``sizes`` being their sizes (the reader does not report them)."""
    got = _read(batch, lo + len(sizes))[lo:]
    if len(got) != len(sizes):
        raise CorruptRecordError(f"a batch holds {len(got)} records where {len(sizes)} were read")
    n = len(got)
    hdrs: Iterable[Headers] = map(tuple, map(_headers, got))
    return list(
        map(
            _new,
            repeat(Record, n),
            zip(
                map(_offset, got),
                map(_timestamp, got),
                map(_key, got),
                map(_value, got),
                hdrs,
                repeat(checksum, n),
                sizes,
                strict=True,
            ),
        )
    )


def columns(
    batch: bytes | memoryview,
    count: int,
    offsets: list[int],
    timestamps: list[int],
    keys: list[bytes | None],
    values: list[bytes | memoryview | None],
    headers: list[Headers],
) -> None:
    """Append every record's fields of ``batch`` (see :func:`plain_batch`), which must
    hold ``count`` records, to the column lists (values as ``bytes``)."""
    got = _read(batch, None)
    if len(got) != count:
        raise CorruptRecordError(f"a batch holds {len(got)} records, its header says {count}")
    offsets.extend(map(_offset, got))
    timestamps.extend(map(_timestamp, got))
    keys.extend(map(_key, got))
    values.extend(map(_value, got))
    headers.extend(map(tuple, map(_headers, got)))


__all__ = ["AVAILABLE", "ENABLED", "columns", "plain_batch", "records"]
