"""An optional C reader of a batch's records: aiokafka's, when it is installed.

Decoding records is a varint walk per record; in Python (:mod:`.records`) that is one
interpreted loop iteration per record, the dominant cost of reading records. aiokafka
(an asyncio Kafka client) ships a Cython reader of Kafka v2 batches
(``aiokafka.record._crecords.DefaultRecordBatch``) that does the same walk in C, several
times faster. aiokafka is a dependency of the package for this reader alone: when it
is importable, the decoders of :mod:`tiered_log.format.batch_decode` hand it whole
(decompressed, CRC-verified) batches and convert what it yields with C-level ``map``
calls; when it is not (a platform without its wheels, or an aiokafka whose private reader
moved), they use :mod:`.records` alone, which reads the same records (the tests run both).

Only the reading is delegated: CRCs, framing, decompression and the checks of a client's
batches stay ours. A record aiokafka cannot parse raises
:class:`~tiered_log.errors.CorruptRecordError`.

:data:`ENABLED` may be set False (tests, or to compare the two readers). Safe from any
thread: the functions keep no state.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from functools import partial
from itertools import repeat
from operator import attrgetter, is_not
from typing import Any

from ...errors import CorruptRecordError
from .layout import ATTRIBUTES_AT, BATCH_LENGTH_AT, COMPRESSION_MASK, HEADER_SIZE, LOG_OVERHEAD
from .records import Headers, Record, SectionFacts

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
_not_null = partial(is_not, None)


def plain_batch(batch: bytes | memoryview, section: bytes | bytearray | None) -> bytes | memoryview:
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


_CHUNK = 128
"""Records converted at a time: the reader's own record objects die young (a whole
batch of them alive at once would be promoted by the garbage collector, which then
traverses them again and again). Each record the reader yields is two objects the
collector tracks (the record and its headers list), and the records built from them a
third; at 128 a chunk's objects stay below the collector's first threshold (700 new
tracked objects), so a chunk by itself does not set off a collection (one of 256
did, at every chunk)."""


def _chunks(
    batch: bytes | memoryview, skip: int, count: int, whole: bool = False
) -> Iterator[list[Any]]:
    """The reader's records ``skip`` .. ``count - 1`` of ``batch``, in lists of at most
    :data:`_CHUNK` (``map(next, ...)``: no Python frame per record). ``whole``: the
    batch must hold no more records and no byte after them (the reader checks that when
    asked for one more)."""
    assert _CBatch is not None
    try:
        it = _CBatch(batch)
        i = 0
        while i < count:
            k = min(_CHUNK, count - i)
            got = list(map(next, repeat(it, k)))
            if len(got) != k:
                raise CorruptRecordError(f"a batch holds {i + len(got)} records, not {count}")
            if i + k > skip:
                yield got[skip - i :] if i < skip else got
            i += k
        if whole and next(it, None) is not None:
            raise CorruptRecordError(f"a batch holds more than its {count} records")
    except CorruptRecordError:
        raise
    except Exception as exc:  # aiokafka's CorruptRecordException, or a struct error
        raise CorruptRecordError(f"records do not parse: {exc}") from None


def records(batch: bytes | memoryview, lo: int, sizes: list[int], checksum: int) -> list[Record]:
    """Records ``lo`` to ``lo + len(sizes) - 1`` of ``batch`` (see :func:`plain_batch`),
    ``sizes`` being their sizes (the reader does not report them)."""
    out: list[Record] = []
    at = 0
    for got in _chunks(batch, lo, lo + len(sizes)):
        n = len(got)
        hdrs: Iterable[Headers] = (
            map(tuple, map(_headers, got)) if any(map(_headers, got)) else repeat((), n)
        )
        out.extend(
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
                    sizes[at : at + n],
                    strict=True,
                ),
            )
        )
        at += n
    return out


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
    hold ``count`` records and nothing after them, to the column lists (values as
    ``bytes``)."""
    for got in _chunks(batch, 0, count, whole=True):
        offsets.extend(map(_offset, got))
        timestamps.extend(map(_timestamp, got))
        keys.extend(map(_key, got))
        values.extend(map(_value, got))
        headers.extend(map(tuple, map(_headers, got)))


def check(batch: bytes | memoryview, count: int, base: int, base_timestamp: int) -> SectionFacts:
    """Check the framing of every record of ``batch`` (see :func:`plain_batch`; a
    CreateTime batch: the reader reports a LogAppendTime batch's clock, not its
    records' deltas) as :func:`~tiered_log.format.kafka.records.check_section` does,
    with the reader walking the records: each record's fields fill its length exactly,
    header keys are UTF-8, ``count`` records and no byte after them, offset deltas 0,
    1, ... in order. ``base`` and ``base_timestamp`` are the batch header's. Returns
    the same facts; raises CorruptRecordError naming the first fault."""
    max_value = -1
    max_ts = -(1 << 63)
    max_at = 0
    i = 0
    for got in _chunks(batch, 0, count, whole=True):
        k = len(got)
        offsets = list(map(_offset, got))
        if offsets != list(range(base + i, base + i + k)):
            j = next(j for j, o in enumerate(offsets) if o != base + i + j)
            raise CorruptRecordError(
                f"record {i + j} has offsetDelta {offsets[j] - base}, not {i + j}"
            )
        stamps = list(map(_timestamp, got))
        top = max(stamps)
        if top > max_ts:
            max_ts = top
            max_at = i + stamps.index(top)
        longest = max(map(len, filter(_not_null, map(_value, got))), default=-1)
        if longest > max_value:
            max_value = longest
        i += k
    return SectionFacts(max_value, max_ts - base_timestamp, max_at)


__all__ = ["AVAILABLE", "ENABLED", "check", "columns", "plain_batch", "records"]
