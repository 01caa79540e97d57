"""When a partition's tiering rounds run: :class:`Shipper` (one log's policy) on a
:class:`TieringScheduler` (a few threads for every log of a process).

A :class:`Shipper` drives one :class:`TieringRound` (a partition's
:class:`~tiered_log.partition.tiering.Tiering`): every ``ship_interval_ms`` (or at once
when woken by a roll) it runs one :meth:`~TieringRound.tier_once` (clean up interrupted
attempts, copy eligible segments, apply local and remote retention). A round that fails
because the bucket is unreachable is retried with exponential backoff (0.5 s doubling to
30 s); appends go on meanwhile and unshipped segments stay on disk.

An idle log costs almost nothing: a round whose log has not changed since the last one
(same :meth:`~TieringRound.tiering_state`: next, flushed and start offsets, active
segment, remote end, no repair pending) is skipped, and the next look comes later and
later (doubling up to :data:`FULL_ROUND_S`); a full round runs at least every
:data:`FULL_ROUND_S` seconds so that time-based retention still applies (as Kafka checks
retention every ``log.retention.check.interval.ms``). A roll wakes the shipper at once.

The rounds of every shipper on one :class:`TieringScheduler` run on a few worker threads
(:data:`DEFAULT_WORKERS`) fed by a queue ordered by due time, so a node with thousands of
partitions has a bounded number of tiering threads and copies, not one per partition (as
Kafka's remote log manager has a bounded thread pool). One log never has two rounds at
once. A log uses the process-wide :func:`default_scheduler` unless given one.

Thread-safety: ``Shipper.start``/``stop``/``wake`` and the scheduler may be used from
any thread. Worker threads are daemons, so a crashed process never hangs on them.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from typing import Any, Protocol

from ..errors import TieredLogError

log = logging.getLogger(__name__)

MIN_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0
FULL_ROUND_S = 30.0
"""An unchanged log still gets a full round this often (time-based retention)."""
DEFAULT_WORKERS = 4


class TieringRound(Protocol):
    """What a :class:`Shipper` runs: one partition's tiering round and what it depends on."""

    @property
    def log_id(self) -> str: ...

    def tiering_state(self) -> tuple[int, ...]:
        """What a round depends on besides the clock (unchanged: the round is skipped)."""
        ...

    def tier_once(self, stop: threading.Event | None = None) -> int:
        """One round; stops between segments once ``stop`` is set."""
        ...


class TieringScheduler:
    """Runs the rounds of many :class:`Shipper` s on ``workers`` threads (started on first
    use), each round when it is due; see the module docstring."""

    def __init__(self, workers: int = DEFAULT_WORKERS) -> None:
        if workers < 1:
            raise ValueError("a tiering scheduler needs at least one worker")
        self.workers = workers
        self._cv = threading.Condition()
        self._queue: list[tuple[float, int, int, Shipper]] = []  # (due, seq, generation, shipper)
        self._seq = itertools.count()
        self._threads: list[threading.Thread] = []

    def _push(self, sh: Shipper, due: float) -> None:
        """Queue ``sh`` for ``due`` (monotonic seconds), replacing any earlier entry.
        Call with ``_cv`` held."""
        sh._generation += 1
        entry = (due, next(self._seq), sh._generation, sh)
        heapq.heappush(self._queue, entry)
        if len(self._threads) < self.workers:
            t = threading.Thread(
                target=self._work, name=f"tiering-{len(self._threads)}", daemon=True
            )
            self._threads.append(t)
            t.start()
        if self._queue[0] is entry:
            self._cv.notify()  # the new first entry: a waiting worker must look at it

    def _next(self) -> Shipper:
        """Wait for the first due shipper and mark it running. Call with ``_cv`` held."""
        while True:
            q = self._queue
            while q and (q[0][2] != q[0][3]._generation or q[0][3]._stopping):
                heapq.heappop(q)  # replaced by a later schedule, or stopped
            if not q:
                self._cv.wait()
                continue
            due = q[0][0]
            now = time.monotonic()
            if due > now:
                self._cv.wait(due - now)
                continue
            sh = heapq.heappop(q)[3]
            sh._generation += 1
            sh._running = True
            sh._idle.clear()
            sh._wake_pending, sh._woken = sh._woken, False
            return sh

    def _work(self) -> None:
        while True:
            with self._cv:
                sh = self._next()
            delay = sh.interval
            try:
                delay = sh._round()
            finally:
                with self._cv:
                    sh._running = False
                    sh._idle.set()  # stop() may be waiting for this round
                    if not sh._stopping:
                        self._push(sh, time.monotonic() + (0.0 if sh._woken else delay))


_default: TieringScheduler | None = None
_default_lock = threading.Lock()


def default_scheduler() -> TieringScheduler:
    """The process-wide scheduler shippers use unless given another."""
    global _default
    with _default_lock:
        if _default is None:
            _default = TieringScheduler()
        return _default


class Shipper:
    """Background tiering of one log; see the module docstring."""

    def __init__(
        self, tiering: TieringRound, interval_ms: int, scheduler: TieringScheduler | None = None
    ) -> None:
        self.tiering = tiering
        self.interval = interval_ms / 1000
        self.scheduler = scheduler or default_scheduler()
        self.backoff = 0.0
        self.last_error: str | None = None
        self.rounds = 0
        """Rounds run (skipped rounds of an unchanged log do not count)."""
        self._stop = threading.Event()  # passed to tier_once: stop between segments
        self._started = False
        self._stopping = False
        self._running = False
        self._idle = threading.Event()  # set while no round of this log runs
        self._idle.set()
        self._skip_delay = 0.0
        self._woken = False  # woken since this round started: run again at once
        self._wake_pending = False  # this round was asked for by a wake: never skip it
        self._generation = 0
        self._last_state: Any = None
        self._last_full = 0.0

    def start(self) -> None:
        with self.scheduler._cv:
            if self._started or self._stopping:
                return
            self._started = True
            self.scheduler._push(self, time.monotonic())

    def wake(self) -> None:
        """Run a round as soon as a worker is free (after the current one, if running)."""
        with self.scheduler._cv:
            if not self._started or self._stopping:
                return
            self._woken = True
            if not self._running:
                self.scheduler._push(self, time.monotonic())

    def stop(self, timeout: float = 30.0) -> None:
        """Ask the log's tiering to stop after the step in progress and wait for it."""
        self._stop.set()
        with self.scheduler._cv:
            self._stopping = True
        self._idle.wait(timeout)

    def _round(self) -> float:
        """One round (or a skip) in a worker thread; the seconds until the next one."""
        now = time.monotonic()
        try:
            state = self.tiering.tiering_state()
            if (
                state == self._last_state
                and not self._wake_pending
                and not self.backoff
                and now - self._last_full < FULL_ROUND_S
            ):
                # Nothing changed: nothing to ship, nothing to drop. Look again later and
                # later (up to FULL_ROUND_S) while the log stays idle.
                self._skip_delay = min(FULL_ROUND_S, max(self.interval, 2 * self._skip_delay))
                return self._skip_delay
            self._skip_delay = 0.0
            self.tiering.tier_once(stop=self._stop)
            self._last_state = self.tiering.tiering_state()
            self._last_full = now
            self.backoff = 0.0
            self.last_error = None
        except TieredLogError as exc:
            self.backoff = min(MAX_BACKOFF_S, max(MIN_BACKOFF_S, self.backoff * 2))
            self.last_error = str(exc)
            log.warning(
                "tiering %s failed, retrying in %.1fs: %s", self.tiering.log_id, self.backoff, exc
            )
        except Exception as exc:  # keep the tiering alive whatever happens
            self.backoff = min(MAX_BACKOFF_S, max(MIN_BACKOFF_S, self.backoff * 2))
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.exception("tiering %s failed unexpectedly", self.tiering.log_id)
        self.rounds += 1
        return self.backoff or self.interval
