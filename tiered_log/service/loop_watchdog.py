"""The event loop's watchdog: a thread that measures how late the loop runs a marker it
posts, and names what held the loop when it was late.

Every :attr:`LoopWatchdog.interval_s` the thread posts a marker to the loop
(``call_soon_threadsafe``) and waits for it to run. The delay is the loop's *lag*: how
long a request that became ready then waited for the loop. While a marker is late past
:attr:`~LoopWatchdog.threshold_s`, the thread samples, every
:attr:`~LoopWatchdog.sample_s`, the loop thread's Python stack
(``sys._current_frames()``) and its scheduler state (``/proc/self/task/<tid>/stat``).

Lag alone is a poor verdict on a busy machine: a loop waiting for a CPU, or for the GIL
while worker threads compute, is late without anything of ours blocking it. A late
marker therefore counts as a *stall* only when most samples (at least
:data:`MIN_SAMPLES`, and two thirds of them) show the loop thread

- off the CPU in a call (kernel state ``S`` or ``D``: sleeping on a lock, an fsync, a
  socket, a ``time.sleep``), not runnable (``R``: computing, or queued for a CPU);
- somewhere other than the selector's poll (the loop's idle wait: a marker late there
  is the kernel's wake-up, not our code);
- with no other thread of the process runnable at that moment (the sampler excepted):
  a thread that waits for the GIL is off the CPU too, and the GIL is only held for long
  by a thread that computes.

A stall is logged once, at WARNING, with the stack sampled most often; :meth:`lag_max_s`
and :attr:`stalls` feed ``/metrics`` (``tiered_log_event_loop_lag_max_seconds``,
``tiered_log_event_loop_stalls_total``). On a system without ``/proc`` the state is
unknown and a late marker off the selector counts.

Thread-safety: :meth:`start` and :meth:`stop` from the loop's thread; the figures may be
read from any thread (plain reads of numbers).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import sys
import threading
import time
import traceback
from types import FrameType

log = logging.getLogger("tiered_log.service")

MIN_SAMPLES = 3
"""Samples a stall needs (over at least the threshold's span at the default rate)."""


def _thread_state(tid: int) -> str | None:
    """The kernel's one-letter state of thread ``tid`` of this process (None: unknown)."""
    try:
        with open(f"/proc/self/task/{tid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    # "tid (comm) S ...": comm may hold spaces and parentheses; the state follows the last ")".
    return raw[raw.rindex(b")") + 2 : raw.rindex(b")") + 3].decode()


def _others_runnable(skip: set[int]) -> bool:
    """Whether a thread of this process other than those in ``skip`` is runnable now."""
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return False
    for name in tids:
        tid = int(name)
        if tid not in skip and _thread_state(tid) == "R":
            return True
    return False


def _in_selector(frame: FrameType | None) -> bool:
    """Whether the innermost frame is the selector's poll (the loop idle)."""
    return (
        frame is not None
        and frame.f_code.co_name == "select"
        and (frame.f_code.co_filename.endswith("selectors.py"))
    )


class LoopWatchdog:
    """Measures one event loop's lag and reports its stalls (see the module docstring)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        threshold_s: float = 0.05,
        interval_s: float = 0.005,
        sample_s: float = 0.01,
    ) -> None:
        self.loop = loop
        self.threshold_s = threshold_s
        self.interval_s = interval_s
        self.sample_s = sample_s
        self.stalls = 0
        """Late markers that counted as stalls since the start."""
        self._lag_max_s = 0.0
        self.last_stack: str | None = None
        """The stack of the last stall (its most sampled one)."""
        self._loop_ident = threading.get_ident()
        self._loop_tid = threading.get_native_id()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="tiered-log-loop-watch")

    def lag_max_s(self) -> float:
        """The longest lag seen since the start."""
        return self._lag_max_s

    def start(self) -> LoopWatchdog:
        """Start watching (from the loop's thread: that is the thread it samples)."""
        self._loop_ident = threading.get_ident()
        self._loop_tid = threading.get_native_id()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2)

    def _run(self) -> None:
        me = threading.get_native_id()
        while not self._stop.wait(self.interval_s):
            ran = threading.Event()
            posted = time.monotonic()
            try:
                self.loop.call_soon_threadsafe(ran.set)
            except RuntimeError:  # the loop closed
                return
            if ran.wait(self.threshold_s):
                self._note(time.monotonic() - posted)
                continue
            samples: collections.Counter[str] = collections.Counter()
            blocked = taken = 0
            while not ran.wait(self.sample_s) and not self._stop.is_set():
                frame = sys._current_frames().get(self._loop_ident)
                state = _thread_state(self._loop_tid)
                taken += 1
                if (
                    not _in_selector(frame)
                    and state != "R"
                    and not (state is not None and _others_runnable({me, self._loop_tid}))
                ):
                    blocked += 1
                    samples["".join(traceback.format_stack(frame))] += 1
            lag = time.monotonic() - posted
            self._note(lag)
            if taken >= MIN_SAMPLES and blocked * 3 >= taken * 2:
                self.stalls += 1
                stack = samples.most_common(1)[0][0]
                self.last_stack = stack
                log.warning(
                    "event loop stalled %.0f ms (%d of %d samples blocked in a call); "
                    "loop thread's stack:\n%s",
                    lag * 1000,
                    blocked,
                    taken,
                    stack,
                )

    def _note(self, lag: float) -> None:
        if lag > self._lag_max_s:
            self._lag_max_s = lag


__all__ = ["MIN_SAMPLES", "LoopWatchdog"]
