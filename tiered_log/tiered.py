"""TieredLog: a local segmented log plus its remote tier, with transparent reads.

Offsets are laid out over the two tiers like this::

    log_start          local_start                     remote_end         next_offset
       |---- remote only ----|==== local and remote ====|---- local only ----|
                              (shipped, kept locally until local retention drops them)

A read at ``offset >= local_start`` is served from disk; a lower one from the bucket via
the remote-index files and ranged GETs (:class:`~tiered_log.remote.tier.RemoteTier`).
Appends only ever touch the local log. A background :class:`~tiered_log.shipper.Shipper`
copies sealed, flushed segments, drops local copies past local retention (only once
copied), and deletes remote segments past total retention, moving the log start.

Opening a TieredLog on an empty directory whose bucket holds the log's segments rebuilds
the remote state from the bucket alone (manifests, never segment data) and continues
the log at the remote end.

Thread-safety: as :class:`~tiered_log.local.log.Log`: appends serialize, reads take no
lock and never wait for the shipper; control operations (truncate, retention, close)
serialize with shipping on the remote tier's lock.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import (
    DataLossError,
    InvalidArgumentError,
    InvalidOffsetError,
    LogClosedError,
    OffsetOutOfRangeError,
    RemoteStorageError,
)
from .format import naming
from .format.records import EncodedBatch, ProducerRecord, Record
from .local.log import Log, LogConfig, now_ms
from .local.segment import Segment, SegmentInfo
from .remote.storage import RemoteStorage
from .remote.tier import RemoteTier, TierConfig, TierLimits
from .shipper import Shipper

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class TieredBounds:
    """Offsets bounding a tiered log (see the module docstring's picture)."""

    log_start_offset: int
    local_start_offset: int
    remote_end_offset: int
    high_watermark: int
    next_offset: int
    flushed_offset: int


class TieredLog:
    """A log whose old segments live in object storage; see the module docstring.

    ``storage=None`` (or ``tier.remote_enabled=False``) makes it a plain local log that
    applies ``retention_ms``/``retention_bytes`` locally (in :meth:`tier_once`).
    ``rebuild=False`` skips the rebuild from the bucket of a log opened on an empty
    directory (a log created just now, whose id is new, has nothing in the bucket).
    ``limits``: upload and fetch rate limits shared with other logs (a node's); without
    them the log limits itself by ``tier``'s ``upload_bytes_per_sec`` and
    ``fetch_bytes_per_sec``.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        log_id: str | None = None,
        storage: RemoteStorage | None = None,
        config: LogConfig | None = None,
        tier: TierConfig | None = None,
        start_shipper: bool = True,
        rebuild: bool = True,
        rebuild_progress: Callable[[int, int], None] | None = None,
        limits: TierLimits | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.log_id = naming.validate_log_id(log_id or self.directory.name)
        self.config = config or LogConfig()
        self.tier_config = tier or TierConfig()
        self._closed = False
        self._ctl = threading.Lock()
        self.directory.mkdir(parents=True, exist_ok=True)
        fresh = not naming.list_segment_bases(self.directory)
        self.remote: RemoteTier | None = None
        if storage is not None and self.tier_config.remote_enabled:
            self.remote = RemoteTier(self.directory, self.log_id, storage, self.tier_config,
                                     limits)
            if fresh and rebuild and not self.remote.finished_segments:
                self.remote.rebuild_from_bucket(rebuild_progress)
            elif self.remote.needs_index_rebuild:
                try:
                    self.remote.rebuild_index_files()
                except RemoteStorageError as exc:  # reads answer retriable errors meanwhile
                    log.warning("%s: remote index not rebuilt yet, the bucket failed: %s",
                                self.log_id, exc.message)
        initial = self.remote.remote_end if self.remote is not None else 0
        self.local = Log(self.directory, self.config, initial_offset=initial)
        if self.remote is not None and self.local.next_offset < self.remote.remote_end:
            # The local disk lost data the bucket holds: continue after the bucket.
            self.local.reset(self.remote.remote_end)
        if self.remote is not None:
            # A crash between moving the remote log start (retention) and deleting the
            # local segments below it left them here: never serve them again.
            self.local.delete_segments_before(self.remote.meta.log_start_offset)
        self.shipper: Shipper | None = None
        if self.remote is not None and start_shipper:
            self.shipper = Shipper(self, self.tier_config.ship_interval_ms)
            self.shipper.start()

    # ---- bounds ------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        local_start = self.local.log_start_offset
        r = self.remote
        if r is not None and r.has_data and r.start_offset < local_start:
            return r.start_offset
        return local_start

    @property
    def next_offset(self) -> int:
        return self.local.next_offset

    @property
    def flushed_offset(self) -> int:
        return self.local.flushed_offset

    def bounds(self) -> TieredBounds:
        nxt = self.local.next_offset
        remote_end = self.remote.remote_end if self.remote is not None else self.local.log_start_offset
        return TieredBounds(self.log_start_offset, self.local.log_start_offset, remote_end, nxt,
                            nxt, self.local.flushed_offset)

    # ---- appending (local only) ----------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise LogClosedError(f"log {self.log_id} is closed")

    def append(self, value: bytes, *, key: bytes | None = None,
               headers: Sequence[tuple[str, bytes | None]] = (),
               timestamp: int | None = None) -> int:
        self._check_open()
        active = self.local.active_base_offset
        offset = self.local.append(value, key=key, headers=headers, timestamp=timestamp)
        if self.shipper is not None and self.local.active_base_offset != active:
            self.shipper.wake()  # the append rolled a segment: there may be one to ship
        return offset

    def append_batch(self, records: Sequence[ProducerRecord | bytes] | EncodedBatch,
                     ) -> tuple[int, int]:
        self._check_open()
        active = self.local.active_base_offset
        first_last = self.local.append_batch(records)
        if self.shipper is not None and self.local.active_base_offset != active:
            self.shipper.wake()
        return first_last

    def flush(self) -> int:
        return self.local.flush()

    def roll(self) -> None:
        """Seal the active segment (if not empty) and wake the shipper."""
        self.local.roll()
        if self.shipper is not None:
            self.shipper.wake()

    # ---- reading (either tier) -----------------------------------------------------------

    def read(self, offset: int) -> Record:
        recs = self.read_range(offset, max_records=1)
        if not recs:
            raise OffsetOutOfRangeError(
                f"offset {offset} is not in the log [{self.log_start_offset}, {self.next_offset})",
                log_start=self.log_start_offset, next_offset=self.next_offset)
        return recs[0]

    def read_range(self, offset: int, max_records: int = 500, max_bytes: int = 1 << 20) -> list[Record]:
        """Records from ``offset`` on, from whichever tier holds them (see module doc)."""
        self._check_read(offset, max_records, max_bytes)
        if offset >= self.local.log_start_offset or self.remote is None:
            return self.local.read_range(offset, max_records, max_bytes)
        return self._archive_of(offset).read_range(offset, max_records, max_bytes)

    def _check_read(self, offset: int, max_records: int, max_bytes: int) -> None:
        """The argument checks every read makes, then that the log is open."""
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise InvalidOffsetError(f"offset must be a non-negative integer, got {offset!r}")
        if max_records < 1 or max_bytes < 1:
            raise InvalidArgumentError("max_records and max_bytes must be at least 1")
        self._check_open()

    def _archive_of(self, offset: int) -> RemoteTier:
        """The remote tier, for an ``offset`` below the local start: OffsetOutOfRangeError
        below the log start, DataLossError if no remote tier holds it."""
        start, nxt = self.log_start_offset, self.next_offset
        if offset < start:
            raise OffsetOutOfRangeError(f"offset {offset} is not in the log [{start}, {nxt})",
                                        log_start=start, next_offset=nxt)
        r = self.remote
        if r is None or offset >= r.remote_end:
            raise DataLossError(f"offset {offset} is in neither tier (remote ends at "
                                f"{r.remote_end if r else start}, local starts at "
                                f"{self.local.log_start_offset})")
        return r

    def read_remote_batches(self, offset: int, max_records: int = 500,
                            max_bytes: int = 1 << 20) -> tuple[bytes, int]:
        """For a binary fetch below the local start: the stored batches from the one
        holding ``offset``, verified, not decoded, and the offset after them (see
        :meth:`RemoteTier.read_batches <tiered_log.remote.tier.RemoteTier.read_batches>`).
        OffsetOutOfRangeError below the log start; DataLossError at or above the local
        start (read those from the local segments) or where no tier holds ``offset``."""
        self._check_read(offset, max_records, max_bytes)
        local_start = self.local.log_start_offset
        if offset >= local_start:
            raise DataLossError(f"offset {offset} is not below the local start {local_start}")
        return self._archive_of(offset).read_batches(offset, max_records, max_bytes)

    def offset_for_timestamp(self, timestamp: int) -> int | None:
        """First offset whose timestamp is >= ``timestamp`` in either tier, or None."""
        if not isinstance(timestamp, int) or isinstance(timestamp, bool):
            raise InvalidArgumentError(f"timestamp must be an integer (ms), got {timestamp!r}")
        self._check_open()
        r = self.remote
        if r is not None and r.has_data and r.start_offset < self.local.log_start_offset:
            found = r.offset_for_timestamp(timestamp)
            if found is not None and found >= self.log_start_offset:
                return found
        return self.local.offset_for_timestamp(timestamp)

    def segment_for(self, offset: int) -> Segment:
        """The local segment holding ``offset`` (OffsetOutOfRangeError if not local)."""
        return self.local.segment_for(offset)

    # ---- truncation ---------------------------------------------------------------------

    def truncate(self, offset: int) -> None:
        """Remove every record at and after ``offset`` in both tiers.

        Below the local start the local log restarts empty at ``offset`` and the remote
        tier records the truncation in its metadata; readers never see truncated records.
        """
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            raise InvalidOffsetError(f"offset must be a non-negative integer, got {offset!r}")
        with self._ctl:
            self._check_open()
            start, nxt = self.log_start_offset, self.next_offset
            if offset < start or offset > nxt:
                raise OffsetOutOfRangeError(f"cannot truncate to {offset}: the log holds [{start}, {nxt})",
                                            log_start=start, next_offset=nxt)
            local_start = self.local.log_start_offset
            if self.remote is not None:
                self.remote.truncate(offset, local_start)
            if offset >= local_start:
                self.local.truncate(offset)
            else:
                self.local.reset(offset)
        if self.shipper is not None:
            self.shipper.wake()  # truncated remote segments are deleted by the next round

    # ---- tiering (the shipper's round) -----------------------------------------------------

    def eligible_segments(self) -> list[SegmentInfo]:
        """Sealed, flushed local segments not yet in the remote tier, oldest first."""
        if self.remote is None:
            return []
        end = self.remote.remote_end
        flushed = self.local.flushed_offset
        return [s for s in self.local.segments()
                if s.sealed and s.base_offset >= end and s.next_offset <= flushed]

    def tiering_state(self) -> tuple[int, ...]:
        """What a tiering round depends on, besides the clock: the shipper skips a round
        when this has not changed since the last one. Cheap (no I/O, no lock); a racing
        append at worst causes one more round."""
        loc, r = self.local, self.remote
        state = (loc.next_offset, loc.flushed_offset, loc.log_start_offset,
                 loc.active_base_offset)
        if r is None:
            return state
        return (*state, r.remote_end, r.start_offset, int(r.needs_index_rebuild))

    def tier_once(self, stop: threading.Event | None = None) -> int:
        """One round: clean up, copy eligible segments, apply both retentions.

        Returns the number of segments copied. Raises RemoteStorageError when the bucket
        fails (the shipper backs off and retries).
        """
        with self._ctl:
            if self._closed:
                return 0
            copied = 0
            r = self.remote
            if r is not None:
                r.cleanup_pending()
                if r.needs_index_rebuild:
                    r.rebuild_index_files()
                copied = r.copy_segments(self.eligible_segments(), stop)
            self._apply_retention()
            return copied

    def _apply_retention(self) -> None:
        now = now_ms()
        r = self.remote
        tc = self.tier_config
        if r is None:
            cands = self.local.retention_candidates(tc.retention_ms, tc.retention_bytes, now)
            if cands:
                self.local.delete_segments_before(cands[-1].next_offset)
            return
        # Remote (total) retention: moves the log start, in both tiers.
        unshipped = sum(s.size for s in self.local.segments() if s.base_offset >= r.remote_end)
        cut = r.retention_cutoff(unshipped, now)
        if cut is not None:
            r.delete_before(cut)
        # Local segments below the log start go too: those just cut, and any a crash
        # left behind after the start had moved (then ``cut`` is None on the retry).
        self.local.delete_segments_before(max(cut or 0, r.meta.log_start_offset))
        # Local retention: only segments whose copy is finished.
        end = r.remote_end
        cands = self.local.retention_candidates(tc.local_retention_ms, tc.local_retention_bytes, now)
        shipped = [s for s in cands if s.next_offset <= end]
        if shipped:
            self.local.delete_segments_before(shipped[-1].next_offset)

    def maintain(self) -> None:
        """Time-based upkeep, run periodically by the owner (the service): flush by
        ``flush_ms``, roll by ``segment_ms``; without a shipper (remote tier off, or not
        started) the round of retention runs here, with one a roll wakes it. Any thread."""
        if self._closed:
            return
        self.local.maybe_flush()
        rolled = self.local.maybe_roll_by_age()
        if self.shipper is None:
            self.tier_once()
        elif rolled:
            self.shipper.wake()  # a segment to ship

    def remote_segments(self, log_start: int) -> tuple[str | None, int | None,
                                                       list[dict[str, Any]]]:
        """``(remote_url, remote_end, segments)``: the remote tier's URL and end and its
        finished segments holding offsets at or above ``log_start``, as
        :meth:`RemoteTier.archived_segments <tiered_log.remote.tier.RemoteTier.archived_segments>`
        lists them (what a reader that fetches from the bucket itself plans from);
        ``(None, None, [])`` without a remote tier. Reads the index files; any thread."""
        r = self.remote
        if r is None:
            return None, None, []
        return r.storage.url, r.remote_end, r.archived_segments(log_start)

    # ---- visibility ---------------------------------------------------------------------

    def stats(self) -> dict[str, float]:
        """Numeric counters and gauges, for /metrics: one pass over the local segments,
        no per-segment lists (a scrape touches every partition)."""
        r = self.remote
        end = r.remote_end if r is not None else 0
        local_bytes = lag_bytes = lag_segments = 0
        for s in self.local.segments():
            local_bytes += s.size
            if r is not None and s.sealed and s.base_offset >= end:
                lag_bytes += s.size
                lag_segments += 1
        out = {"local_bytes": float(local_bytes), "copy_lag_bytes": float(lag_bytes),
               "copy_lag_segments": float(lag_segments), "remote_bytes": 0.0, "cache_hits": 0.0,
               "cache_misses": 0.0, "uploaded_bytes": 0.0, "uploaded_segments": 0.0,
               "copy_failures": 0.0, "remote_fetch_bytes": 0.0, "remote_fetch_requests": 0.0,
               "remote_fetch_errors": 0.0, "remote_fetch_throttled_ms": 0.0}
        if r is not None:
            st = r.stats
            out.update({
                "remote_bytes": float(r.size_bytes), "cache_hits": float(r.cache.hits),
                "cache_misses": float(r.cache.misses),
                "uploaded_bytes": float(st.uploaded_bytes),
                "uploaded_segments": float(st.uploaded_segments),
                "copy_failures": float(st.copy_failures),
                "remote_fetch_bytes": float(st.remote_fetch_bytes),
                "remote_fetch_requests": float(st.remote_fetch_requests),
                "remote_fetch_errors": float(st.remote_fetch_errors),
                "remote_fetch_throttled_ms": float(st.remote_fetch_throttled_ms),
            })
        return out

    def describe(self) -> dict[str, Any]:
        """Local and remote segments, copy lag, cache and fetch counters (JSON-able)."""
        b = self.bounds()
        end = b.remote_end_offset
        st = self.stats()
        out: dict[str, Any] = {
            "log_id": self.log_id,
            "bounds": {"log_start_offset": b.log_start_offset,
                       "local_start_offset": b.local_start_offset,
                       "remote_end_offset": b.remote_end_offset,
                       "high_watermark": b.high_watermark, "next_offset": b.next_offset,
                       "flushed_offset": b.flushed_offset},
            "local_segments": [{"base_offset": s.base_offset, "next_offset": s.next_offset,
                                "size": s.size, "sealed": s.sealed,
                                "copied": self.remote is not None and s.next_offset <= end}
                               for s in self.local.segments()],
            "local_bytes": int(st["local_bytes"]),
            "copy_lag_segments": int(st["copy_lag_segments"]),
            "copy_lag_bytes": int(st["copy_lag_bytes"]),
            "remote_enabled": self.remote is not None,
        }
        r = self.remote
        if r is not None:
            out.update({k: int(st[k]) for k in (
                "remote_bytes", "cache_hits", "cache_misses", "uploaded_bytes",
                "uploaded_segments", "copy_failures", "remote_fetch_bytes",
                "remote_fetch_requests", "remote_fetch_errors", "remote_fetch_throttled_ms")})
            out.update({
                "remote_url": r.storage.url,
                "remote_segments": [{"id": s.id, "base_offset": s.base_offset,
                                     "next_offset": r.served_end(s),
                                     "size": s.size, "state": str(s.state)}
                                    for s in r.journal.segments()],
                "cache_hit_rate": round(r.cache.hit_rate, 4), "cache_bytes": r.cache.size_bytes,
                "remote_deleted_segments": r.stats.deleted_segments,
                "remote_damage": self.remote_damage(),
                "shipper_error": self.shipper.last_error if self.shipper else None,
            })
        return out

    def remote_damage(self) -> list[dict[str, Any]]:
        """Remote ranges that cannot be read (their manifest and data object are damaged),
        each ``{"id", "base_offset", "next_offset", "problem"}``; reads there answer
        RemoteCorruptionError. Empty when all is well or without a remote tier."""
        r = self.remote
        if r is None:
            return []
        return [{"id": s.id, "base_offset": s.base_offset, "next_offset": r.served_end(s),
                 "problem": r.damage[s.id]} for s in r.finished_segments if s.id in r.damage]

    def delete_remote_objects(self) -> int:
        """Delete every object of this log from the remote tier (for a deleted topic).

        Call on a closed log. Returns the number of objects deleted; raises
        RemoteStorageError if the bucket fails (what is left is found again by listing
        the log's prefix).
        """
        if self.remote is None:
            return 0
        storage = self.remote.storage
        keys = [o.key for o in storage.list(naming.log_prefix(self.log_id) + "/")]
        storage.delete(keys)  # the store batches (S3: 1,000 keys per request)
        return len(keys)

    # ---- closing ------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the shipper (after its current step, which from now on ignores the upload
        limit, as fetches under way ignore the fetch quota), flush and close. Idempotent."""
        if self._closed:
            return
        if self.remote is not None:
            self.remote.release_limits()  # a copy or fetch under way need not sit out its quota
        if self.shipper is not None:
            self.shipper.stop()
        with self._ctl:
            self._closed = True
            self.local.close()
            if self.remote is not None:
                self.remote.close()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> TieredLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
