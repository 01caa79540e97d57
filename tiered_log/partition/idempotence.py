"""The partition log's idempotent producers: its producer state, kept beside the local log.

:class:`Idempotence` is the collaborator through which
:class:`~tiered_log.partition.log.TieredLog` uses a
:class:`~tiered_log.partition.producer_state.ProducerStateManager` (what the state is
and which checks it makes are drawn there): it rebuilds the state when the log opens,
says which of a client's batches belong to an idempotent producer, checks such a batch,
appends it through the log and records it (one critical section, so a retry racing its
original cannot be written twice), forgets producers idle for longer than the
expiration (Kafka's ``producer.id.expiration.ms``: at the open and at most every
:data:`EXPIRATION_CHECK_MS`, as Kafka's ``producer.id.expiration.check.interval.ms``),
and writes the state's snapshot when the log rolled since the last one (so that an open
walks the headers of about one segment).

Thread-safety: :attr:`lock` (the state's) serialises every use of the state; the
partition log takes it, beside its own locks, where the log's bounds move (truncation,
reset), and its follower's fetcher where leader batches are recorded. The snapshot check
may run on any thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from ..errors import InvalidArgumentError
from ..format.records import EncodedBatch
from ..local.log import Log, now_ms
from .producer_state import ProducerBatch, ProducerStateManager, producer_batch

log = logging.getLogger(__name__)

PRODUCER_ID_EXPIRATION_MS = 24 * 3600 * 1000
"""Kafka's default ``producer.id.expiration.ms`` (one day)."""
EXPIRATION_CHECK_MS = 10 * 60 * 1000
"""How often idle producers are looked for at most (Kafka's default
``producer.id.expiration.check.interval.ms``; sooner when the expiration is shorter)."""


class Idempotence:
    """One partition log's idempotent-producer state and what the log does with it.

    ``expiration_ms``: how long a producer's entry outlives the last time this node
    recorded one of its batches; ``clock``: wall-clock milliseconds for that.
    """

    def __init__(
        self,
        directory: Path,
        log_id: str,
        local: Log,
        *,
        expiration_ms: int = PRODUCER_ID_EXPIRATION_MS,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.log_id = log_id
        self.state = ProducerStateManager(directory, log_id, clock)
        self.expiration_ms = expiration_ms
        self._clock = clock
        self._local = local
        self._next_expiry_check = 0
        with self.state.lock:
            self.rebuild()
            self._expire()
        self._snapshot_base = local.active_base_offset

    @property
    def lock(self) -> threading.Lock:
        """The state's lock (see the module docstring)."""
        return self.state.lock

    def rebuild(self) -> None:
        """The state from its snapshot and a header walk of the local log (see
        :meth:`ProducerStateManager.rebuild
        <tiered_log.partition.producer_state.ProducerStateManager.rebuild>`). Under
        :attr:`lock`."""
        local = self._local
        start, n = self.state.rebuild(local.segment_for, local.log_start_offset, local.next_offset)
        if n:
            log.info(
                "%s: producer state of %d producers rebuilt from %d batch headers from offset %d",
                self.log_id,
                len(self.state),
                n,
                start,
            )

    @staticmethod
    def producer_batch_of(records: EncodedBatch) -> ProducerBatch | None:
        """The idempotent producer's batch among a client's ``records``, None when they
        hold none; InvalidArgumentError when such a batch does not come alone (Kafka's
        rule: one batch per partition of an idempotent producer's request)."""
        if not records.batches:
            return None
        pb = producer_batch(records.data, records.batches[0].position)
        if pb is not None and len(records.batches) != 1:
            raise InvalidArgumentError(
                f"batches of producer id {pb.producer_id}: an idempotent producer's batch "
                "must come alone (one batch per partition of a request)"
            )
        if pb is None and any(
            producer_batch(records.data, b.position) is not None for b in records.batches
        ):
            raise InvalidArgumentError(
                "an idempotent producer's batch must come alone (one batch per partition "
                "of a request)"
            )
        return pb

    def append(
        self,
        records: EncodedBatch,
        pb: ProducerBatch,
        write: Callable[[EncodedBatch], tuple[int, int]],
    ) -> tuple[int, int]:
        """Check ``pb`` (the one batch of ``records``), write it with ``write`` and record
        it, under :attr:`lock`: ``(first_offset, last_offset)``, the original's for a
        duplicate (nothing written). A refused batch raises the state's
        :class:`~tiered_log.errors.ProducerStateError` with nothing written."""
        ps = self.state
        with ps.lock:
            dup = ps.check(pb)
            if dup is not None:
                return dup.first_offset, dup.last_offset
            first, last = write(records)
            ps.update(pb, first, last)
            return first, last

    def _expire(self) -> None:
        """Forget the producers idle past the expiration (see
        :meth:`ProducerStateManager.expire
        <tiered_log.partition.producer_state.ProducerStateManager.expire>`) and set the
        next check. Under :attr:`lock`."""
        now = self._clock()
        gone = self.state.expire(now, self.expiration_ms)
        self._next_expiry_check = now + min(self.expiration_ms, EXPIRATION_CHECK_MS)
        if gone:
            log.info(
                "%s: %d producer ids idle for %d ms or more forgotten (%d left)",
                self.log_id,
                len(gone),
                self.expiration_ms,
                len(self.state),
            )

    def maybe_snapshot(self, *, force: bool = False) -> None:
        """Forget the idle producers when a check is due, then write the state's
        snapshot when it changed and the log rolled since the last one (``force``:
        whenever it changed). A failed write is logged; the open then walks from an
        older snapshot or the log start. Any thread."""
        ps = self.state
        if self._clock() >= self._next_expiry_check:
            with ps.lock:
                self._expire()
        active = self._local.active_base_offset
        if not ps.dirty or (not force and active == self._snapshot_base):
            return
        with ps.lock:
            try:
                ps.write_snapshot(self._local.next_offset)
            except OSError as exc:
                log.warning("%s: producer state snapshot not written: %s", self.log_id, exc)
                return
            self._snapshot_base = active
