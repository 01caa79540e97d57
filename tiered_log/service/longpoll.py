"""Long-polling: per-partition wake-ups and the waits of the event loop on them: a fetch
at the end of a log (:func:`poll`), an ``acks=all`` produce until the high watermark
passes its records (:func:`await_commit`), a follower's fetch at its leader's log end.
None of them holds a worker thread while it waits.

A fetch at exactly the next offset with ``wait_ms`` > 0 takes its partition's event
(:meth:`Waiters.event`) *before* reading, so an append that lands between the read and
the wait still wakes it; an append (or a topic's deletion) calls :meth:`Waiters.notify`,
the shutdown :meth:`Waiters.notify_all`. :func:`poll` then reads once more.

Concurrency: event-loop thread only. :class:`Waiters` holds ``asyncio.Event`` objects and
takes no lock; every method must be called from the loop that serves the app.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


class Waiters:
    """Per-partition wake-ups for long-polling fetches. Event-loop thread only."""

    def __init__(self) -> None:
        self._events: dict[tuple[str, int], asyncio.Event] = {}

    def event(self, key: tuple[str, int]) -> asyncio.Event:
        ev = self._events.get(key)
        if ev is None:
            ev = self._events[key] = asyncio.Event()
        return ev

    def notify(self, key: tuple[str, int]) -> None:
        ev = self._events.pop(key, None)
        if ev is not None:
            ev.set()

    def notify_all(self) -> None:
        for key in list(self._events):
            self.notify(key)


async def poll(
    waiters: Waiters,
    stopping: asyncio.Event | None,
    key: tuple[str, int],
    wait_ms: int,
    read: Callable[[], Awaitable[T]],
    empty: Callable[[T], bool],
) -> T:
    """``read()``; when it comes back empty and ``wait_ms`` > 0, wait for an append to
    the partition ``key`` (or ``stopping``, or the time) and read once more."""
    ev = waiters.event(key)  # taken before reading: no append can slip between
    result = await read()
    if wait_ms and empty(result) and not (stopping is not None and stopping.is_set()):
        await wait_event(ev, stopping, wait_ms / 1000)
        result = await read()
    return result


async def await_commit(
    waiters: Waiters,
    key: tuple[str, int],
    committed: Callable[[], bool],
    timeout_s: float,
    recheck_s: float = 0.5,
) -> bool:
    """Wait on the event loop, not in a thread, until ``committed()`` (an ``acks=all``
    produce waiting for the high watermark: woken when it moves, see ``on_commit`` in
    :mod:`~tiered_log.service.lifespan`; looked at every ``recheck_s`` anyway, for what
    does not wake it: the ISR shrinking, leadership ending, which ``committed`` raises).
    True once committed, False after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        ev = waiters.event(key)  # taken before looking: no move can slip between
        if committed():
            return True
        left = deadline - loop.time()
        if left <= 0:
            return False
        await wait_event(ev, None, min(left, recheck_s))


async def wait_event(ev: asyncio.Event, stopping: asyncio.Event | None, timeout: float) -> None:
    """Until ``ev`` (or ``stopping``) is set, or ``timeout`` seconds passed."""
    waits = [asyncio.ensure_future(ev.wait())]
    if stopping is not None:
        waits.append(asyncio.ensure_future(stopping.wait()))
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


__all__ = ["Waiters", "await_commit", "poll", "wait_event"]
