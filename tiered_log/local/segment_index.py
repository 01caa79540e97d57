"""A segment's sparse indexes in memory: built from its batches, and cached once sealed.

- :func:`index_batches` adds the entries for batches as they are appended (the offset and
  time index rules are drawn in :mod:`tiered_log.format.index`);
- :func:`build_index` rebuilds them from a store's bytes (recovery of the active segment,
  a sealed segment's damaged or missing index files), finding the torn-tail cut point;
- :class:`IndexCache` keeps the loaded indexes and read descriptors of the most recently
  read sealed segments (an active segment keeps its own).

Thread-safety: the functions are pure over their arguments (an index is mutated by its
segment's one writer only); :class:`IndexCache` is safe from any thread.
"""

from __future__ import annotations

from collections import OrderedDict
from threading import Lock

from ..format.batch import BatchInfo
from ..format.batch_decode import scan_batches
from ..format.index import SegmentIndex
from .files import ReadFd


class IndexCache:
    """LRU of the indexes and read descriptors of sealed segments.

    Bounds memory and open files for logs of thousands of segments (laminarmq's
    ``num_index_cached_read_segments``). Thread-safe: a lock guards the ordered dict.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, capacity)
        self._entries: OrderedDict[int, tuple[SegmentIndex, ReadFd]] = OrderedDict()
        self._lock = Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: int) -> tuple[SegmentIndex, ReadFd] | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self._entries.move_to_end(key)
            self.hits += 1
            return entry

    def put(self, key: int, entry: tuple[SegmentIndex, ReadFd]) -> None:
        with self._lock:
            self._entries[key] = entry
            self._entries.move_to_end(key)
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)

    def drop(self, key: int) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)


def index_batches(
    idx: SegmentIndex,
    batches: list[BatchInfo],
    start: int,
    base_offset: int,
    interval: int,
    since: int,
    max_ts: int,
    max_rel: int,
) -> tuple[int, int, int]:
    """Add index entries for ``batches`` written from byte ``start`` of a segment: an offset
    entry for a batch once ``interval`` bytes were written since the last one (and for the
    first), a time entry when the segment's max timestamp grew. Returns the new
    ``(since, max_timestamp, rel_of_max)``.

    A time entry's offset is the last offset of the batch whose maxTimestamp raised the
    maximum (as Kafka's time index, from batch headers alone): every record up to it is
    at most the entry's timestamp. So the entries made as batches are appended and those
    rebuilt from a store (whose records are not read) are the same."""
    for b in batches:
        pos = start + b.position
        if pos == 0:  # the first entries are the first record's (the time index's rule)
            max_ts, max_rel = b.first_timestamp, 0
            idx.add_offset(0, 0)
            idx.add_time(max_ts, 0)
            since = 0
        if b.max_timestamp > max_ts:
            max_ts, max_rel = b.max_timestamp, b.next_offset - 1 - base_offset
        if pos and since >= interval:
            idx.add_offset(b.base_offset - base_offset, pos)
            if not idx.time_max or max_ts > idx.time_max[-1]:
                idx.add_time(max_ts, max_rel)
            since = 0
        since += b.size
    return since, max_ts, max_rel


def build_index(
    data: bytes, base_offset: int, interval: int
) -> tuple[SegmentIndex, int, int, int, int]:
    """Scan a store's bytes and rebuild its sparse indexes.

    Returns ``(index, valid_end, max_timestamp, rel_of_max, next_offset)`` where
    ``valid_end`` is the position after the last verified batch in sequence (the
    torn-tail cut point).
    """
    idx = SegmentIndex()
    batches = list(scan_batches(data, base_offset))
    _, max_ts, max_rel = index_batches(idx, batches, 0, base_offset, interval, 0, -1, 0)
    end = batches[-1].position + batches[-1].size if batches else 0
    nxt = batches[-1].next_offset if batches else base_offset
    return idx, end, max_ts, max_rel, nxt
