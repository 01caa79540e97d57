"""Helpers of the cluster tests: bounded waiting."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(
    pred: Callable[[], bool], timeout_s: float, what: str, interval_s: float = 0.05
) -> float:
    """Poll ``pred`` until it is true; the seconds it took. Fails the test after
    ``timeout_s`` naming ``what``."""
    start = time.monotonic()
    while True:
        if pred():
            return time.monotonic() - start
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"not within {timeout_s}s: {what}")
        time.sleep(interval_s)
