"""The bucket reads a node makes before it leads a partition whose log never held a
record (:meth:`TieredLog.read_bucket_view <tiered_log.partition.log.TieredLog.read_bucket_view>`),
each on a thread of its own, so a slow bucket never holds the node's role-change lock
and never delays the role changes of its other partitions.

What it keeps: for each such partition, the read under way or done for one leader
epoch. The poll thread starts the reads its new metadata asks for
(:meth:`LeadViews.ready`), waits a moment for them (:meth:`LeadViews.wait`: a bucket
that answers in time costs no extra poll) holding no lock, then takes its lock and asks
:meth:`LeadViews.ready` again before it moves each partition to leader; False (the read
is still under way) leaves the partition's role as it is until a later poll finds the
read done for the same epoch. A read done for an epoch stays done for it (the poll
asks twice, and both must see it: the first answer must not use it up, or a read that
outlived the wait would start again forever). A read for an epoch the metadata no
longer names is dropped and a new one started, so a view is applied only in the epoch
it was read for (the log re-checks that too); one no longer needed (the log holds
records, or has its marker) is dropped. A failed read is logged and started again at
the next poll.

Thread-safety: :meth:`ready` and :meth:`close` are called by the poll thread (and
close); the reads run on the pool's threads and touch only their log.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor, wait

from ..errors import TieredLogError
from ..partition import TieredLog

log = logging.getLogger("tiered_log.cluster.lead_views")

READ_THREADS = 4
"""Bucket reads of different partitions that may run at once."""
READ_WAIT_S = 0.3
"""How long a poll waits for the reads it started before it changes roles (a bucket
that answers in time: the partition leads in the same poll, as its other partitions).
Well under the node's ``STALE_AFTER_S``: a bucket that fails every read makes each poll
start one again and wait this long, and the node's view must not turn stale for it."""


class LeadViews:
    """The bucket reads before a lead, keyed by partition; see the module docstring."""

    def __init__(self, node_id: int) -> None:
        self._pool = ThreadPoolExecutor(READ_THREADS, thread_name_prefix=f"lead-view-{node_id}")
        self._reads: dict[tuple[str, int], tuple[int, Future[None]]] = {}
        self._started: list[Future[None]] = []
        """The reads started since the last :meth:`wait` (only those are waited for: a
        read still hanging from an earlier poll delays no later one)."""

    def ready(self, key: tuple[str, int], plog: TieredLog, epoch: int) -> bool:
        """Whether ``plog`` (partition ``key``) may take the lead in ``epoch`` now: it
        needs no bucket read, or its read for ``epoch`` is done. Otherwise the read is
        started (or left running) and False returned."""
        if not plog.needs_bucket_view():
            self._reads.pop(key, None)
            return True
        held = self._reads.get(key)
        if held is not None and held[0] == epoch:
            if not held[1].done():
                return False
            exc = held[1].exception()
            if exc is None:
                return True  # kept: asked again before the lead, the answer stays yes
            del self._reads[key]
            shown = exc.message if isinstance(exc, TieredLogError) else repr(exc)
            log.warning("%s-%d: reading the bucket before leading: %s", *key, shown)
        read = self._pool.submit(plog.read_bucket_view, epoch)
        self._reads[key] = (epoch, read)
        self._started.append(read)
        return False

    def wait(self, timeout_s: float = READ_WAIT_S) -> None:
        """Wait up to ``timeout_s`` for the reads started since the last call (the poll
        thread, holding no lock)."""
        started, self._started = self._started, []
        if started:
            wait(started, timeout=timeout_s)

    def close(self) -> None:
        """Stop: the reads under way finish on their own (a closed log ends them)."""
        self._reads.clear()
        self._started.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)


__all__ = ["LeadViews"]
