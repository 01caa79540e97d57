"""How long a reader waits for a fetch from the bucket (``TierConfig.fetch_max_wait_ms``).

As Kafka's ``remote.fetch.max.wait.ms`` bounds a consumer's wait for a remote read, a
reader of the remote tier waits at most ``fetch_max_wait_ms`` for the fetch that brings
its chunk, then gets a retriable :class:`~tiered_log.errors.RemoteTimeoutError` (the
service answers 503). The fetch itself goes on in its pool thread (bounded by the store's
own timeouts, e.g. ``S3Storage.get_timeout``) and caches the chunk, so a retry finds it.

Time the fetch spends held back by the fetch quota is not the bucket's: it does not
count (a quota slows readers; it does not fail them).

A reader on an event loop's behalf should hold no thread while the bucket answers: it
runs the read inside :func:`parked_reads`, where a fetch not done yet raises
:class:`FetchPending` (carrying the fetch's future) instead of waiting; the caller waits
for the future without a thread and reads again (the chunk is then in the cache).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from typing import Any

from ..errors import RemoteTimeoutError

STEP_S = 0.1
"""The wait goes in steps of this many seconds, to see whether the quota held it back."""


_parked = threading.local()


class FetchPending(Exception):
    """A read inside :func:`parked_reads` needs a chunk whose fetch is not done: wait
    for :attr:`future` (at most :attr:`max_wait_ms`, the quota's waits aside:
    :attr:`throttled`), then read again. Not an error a client ever sees."""

    def __init__(
        self, future: Future[Any], max_wait_ms: int, throttled: Callable[[], bool], what: str
    ) -> None:
        super().__init__(what)
        self.future = future
        self.max_wait_ms = max_wait_ms
        self.throttled = throttled
        self.what = what

    def timeout_error(self) -> RemoteTimeoutError:
        return _timeout(self.max_wait_ms, self.what)


@contextlib.contextmanager
def parked_reads() -> Iterator[None]:
    """Within this block (this thread), :func:`wait_for_fetch` raises
    :class:`FetchPending` for a fetch not done instead of waiting for it."""
    before = getattr(_parked, "on", False)
    _parked.on = True
    try:
        yield
    finally:
        _parked.on = before


def _timeout(max_wait_ms: int, what: str) -> RemoteTimeoutError:
    return RemoteTimeoutError(
        f"the bucket did not answer within fetch_max_wait_ms ({max_wait_ms} ms, the "
        f"service's remote_fetch_max_wait_ms) for {what}; the fetch goes on, retry "
        "to read it"
    )


def wait_for_fetch(
    fut: Future[Any], max_wait_ms: int, throttled: Callable[[], bool], what: str
) -> None:
    """``fut.result()``, waiting at most ``max_wait_ms`` of time during which
    ``throttled()`` (fetches are waiting for the fetch quota) was false at the start and
    the end of each step; then RemoteTimeoutError naming ``what``. Any thread. Inside
    :func:`parked_reads`, a fetch not done raises :class:`FetchPending` at once."""
    if not fut.done() and getattr(_parked, "on", False):
        raise FetchPending(fut, max_wait_ms, throttled, what)
    left = max_wait_ms / 1000
    while True:
        held = throttled()
        t0 = time.monotonic()
        try:
            fut.result(timeout=min(left, STEP_S))
            return
        except TimeoutError:
            if fut.done():
                raise  # the fetch's own error, not the end of this wait
        if not (held or throttled()):
            left -= time.monotonic() - t0
        if left <= 0:
            raise _timeout(max_wait_ms, what)


__all__ = ["STEP_S", "FetchPending", "parked_reads", "wait_for_fetch"]
