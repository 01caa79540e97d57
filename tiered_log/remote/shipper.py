"""The background loop that ships a tiered log's sealed segments and applies retention.

:class:`Shipper` is policy only: every ``ship_interval_ms`` (or at once when woken by a
roll) it asks its :class:`~tiered_log.tiered.TieredLog` to run one round of
:meth:`~tiered_log.tiered.TieredLog.tier_once` (clean up interrupted attempts, copy
eligible segments, apply local and remote retention). A round that fails because the
bucket is unreachable is retried with exponential backoff (0.5 s doubling to 30 s);
appends go on meanwhile and unshipped segments stay on disk.

Thread-safety: ``start``/``stop``/``wake`` may be called from any thread. One thread per
shipper; it is a daemon so a crashed process never hangs on it.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING

from ..errors import TieredLogError

if TYPE_CHECKING:
    from ..tiered import TieredLog

log = logging.getLogger(__name__)

MIN_BACKOFF_S = 0.5
MAX_BACKOFF_S = 30.0


class Shipper:
    """Background tiering loop for one log; see the module docstring."""

    def __init__(self, tlog: TieredLog, interval_ms: int) -> None:
        self.tlog = tlog
        self.interval = interval_ms / 1000
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.backoff = 0.0
        self.last_error: str | None = None
        self.rounds = 0

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name=f"shipper-{self.tlog.log_id}",
                                        daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 30.0) -> None:
        """Ask the loop to stop after the step in progress and wait for it."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.tlog.tier_once(stop=self._stop)
                self.backoff = 0.0
                self.last_error = None
            except TieredLogError as exc:
                self.backoff = min(MAX_BACKOFF_S, max(MIN_BACKOFF_S, self.backoff * 2))
                self.last_error = str(exc)
                log.warning("tiering %s failed, retrying in %.1fs: %s", self.tlog.log_id,
                            self.backoff, exc)
            except Exception as exc:  # keep the loop alive whatever happens
                self.backoff = min(MAX_BACKOFF_S, max(MIN_BACKOFF_S, self.backoff * 2))
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("tiering %s failed unexpectedly", self.tlog.log_id)
            self.rounds += 1
            self._wake.wait(self.backoff or self.interval)
            self._wake.clear()
