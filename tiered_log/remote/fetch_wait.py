"""How long a reader waits for a fetch from the bucket (``TierConfig.fetch_max_wait_ms``).

As Kafka's ``remote.fetch.max.wait.ms`` bounds a consumer's wait for a remote read, a
reader of the remote tier waits at most ``fetch_max_wait_ms`` for the fetch that brings
its chunk, then gets a retriable :class:`~tiered_log.errors.RemoteTimeoutError` (the
service answers 503). The fetch itself goes on in its pool thread (bounded by the store's
own timeouts, e.g. ``S3Storage.get_timeout``) and caches the chunk, so a retry finds it.

Time the fetch spends held back by the fetch quota is not the bucket's: it does not
count (a quota slows readers; it does not fail them).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from ..errors import RemoteTimeoutError

STEP_S = 0.1
"""The wait goes in steps of this many seconds, to see whether the quota held it back."""


def wait_for_fetch(
    fut: Future[Any], max_wait_ms: int, throttled: Callable[[], bool], what: str
) -> None:
    """``fut.result()``, waiting at most ``max_wait_ms`` of time during which
    ``throttled()`` (fetches are waiting for the fetch quota) was false at the start and
    the end of each step; then RemoteTimeoutError naming ``what``. Any thread."""
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
            raise RemoteTimeoutError(
                f"the bucket did not answer within fetch_max_wait_ms ({max_wait_ms} ms, the "
                f"service's remote_fetch_max_wait_ms) for {what}; the fetch goes on, retry "
                "to read it"
            )


__all__ = ["STEP_S", "wait_for_fetch"]
