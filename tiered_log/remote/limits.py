"""Thread pools and rate limits that the remote tiers of a process (or node) share.

:func:`shared_pool` gives the process-wide fetch and copy thread pools, so threads stay
bounded however many partitions a node holds; :class:`RateLimiter` is a token bucket of
bytes per second and :class:`TierLimits` the pair (upload, fetch) a node's partitions
share, as Kafka's broker-wide remote copy and fetch quotas (KIP-956).

Thread-safe throughout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

FETCH_THREADS = 16
"""Threads fetching remote chunks, shared by every log of the process (a log has at most
:data:`FETCH_DEPTH` GETs in flight)."""
FETCH_DEPTH = 2
"""Ranged GETs one log's reader has in flight at once: the one the reader is on and the
next; the rest of its prefetch window waits in read order. GETs that run together share
the bucket's bandwidth, so with more in flight the chunk a reader needs next arrives
later (every group of the window finishes at about the same time) while the sum
arrives no sooner once the link or the store's CPU is the limit."""
COPY_THREADS = 8
"""Threads that upload segments and their manifests, shared by every log of the process
(a log has at most ``copies_in_flight`` copies, two uploads each, in flight)."""

_pools: dict[str, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()


def shared_pool(name: str, workers: int) -> ThreadPoolExecutor:
    """The process-wide thread pool ``name`` (created on first use; its threads start as
    work arrives and live as long as the process). Thread-safe."""
    with _pools_lock:
        pool = _pools.get(name)
        if pool is None:
            pool = _pools[name] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        return pool


class RateLimiter:
    """A token bucket of bytes per second (a burst of one second's worth);
    ``consume(n)`` sleeps as needed: it returns once the bytes taken so far fit the rate.
    ``None`` is unlimited. One limiter may serve many logs (a node's, see
    :class:`TierLimits`). ``clock``/``sleep`` are the time source and the wait (default:
    the monotonic clock, and a wait on the caller's ``cancel`` event). Thread-safe:
    concurrent callers queue up, each waiting for its own share.
    """

    def __init__(
        self,
        bytes_per_sec: int | None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], object] | None = None,
    ) -> None:
        self.rate = bytes_per_sec
        self._clock, self._sleep = clock, sleep
        self._never = threading.Event()
        self._lock = threading.Lock()
        self._tokens = float(bytes_per_sec or 0)
        self._last = clock()
        self.waiting = 0
        """Callers waiting right now."""

    def consume(self, n: int, cancel: threading.Event | None = None) -> float:
        """Take ``n`` bytes; returns the seconds it meant to wait for them. Setting
        ``cancel`` ends the wait (a log that is closing does not sit out a slow quota);
        with ``cancel`` already set it does not wait at all."""
        if not self.rate or n <= 0 or (cancel is not None and cancel.is_set()):
            return 0.0
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.rate), self._tokens + (now - self._last) * self.rate)
            self._last = now
            self._tokens -= n
            wait = -self._tokens / self.rate if self._tokens < 0 else 0.0
            if wait > 0:
                self.waiting += 1
        if wait > 0:
            try:
                if self._sleep is not None:
                    self._sleep(wait)
                else:
                    (cancel or self._never).wait(wait)
            finally:
                with self._lock:
                    self.waiting -= 1
        return wait


@dataclass(frozen=True)
class TierLimits:
    """Rate limits several logs share: a node's, as Kafka's broker-wide remote copy and
    fetch quotas (the service gives every partition its node's). A log opened without
    them limits itself by its :class:`TierConfig`."""

    upload: RateLimiter
    fetch: RateLimiter

    @classmethod
    def of(cls, upload_bytes_per_sec: int | None, fetch_bytes_per_sec: int | None) -> TierLimits:
        return cls(RateLimiter(upload_bytes_per_sec), RateLimiter(fetch_bytes_per_sec))
