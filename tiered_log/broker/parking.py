"""Where the broker's requests wait: parked per partition until the event that lets them
go on (Kafka's purgatories, keyed by partition), never in a thread that sleeps.

Two channels, one mechanism (:class:`Channel`):

- :attr:`Parking.hw`: "the partition's high watermark moved" (in a cluster) or "records
  were appended" (a single node, where the log end is the high watermark): consumers'
  long polls and ``acks=all`` produces park here;
- :attr:`Parking.end`: "the leader's log end moved": the followers' long polls.

The end of this node's leadership of a partition is an event on both (the requests
parked there then answer that it leads no more).

A third event, "the remote chunk a read needs is ready", is the fetch's own future:
:func:`park_on` waits for a :class:`concurrent.futures.Future` on the loop without a
thread (the read is then run again, and finds the chunk in the cache).

A waiter takes its partition's event *before* it looks (reads, checks the high
watermark), so an event between the look and the wait still wakes it; an event pops the
partition's ``asyncio.Event`` and sets it. The events come from the loop
(:meth:`Channel.notify`) or from any thread (:meth:`Channel.notify_threadsafe`: the
cluster node's poll thread when the ISR changes, a worker thread after an append).

Concurrency: :class:`Channel`'s methods other than :meth:`~Channel.notify_threadsafe`,
and every coroutine here, run on the loop that serves the app.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

Key = tuple[str, int]
"""A partition: (topic, partition)."""


class Channel:
    """Per-partition wake-ups of one kind of event (see the module docstring)."""

    def __init__(self) -> None:
        self._events: dict[Key, asyncio.Event] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop whose waiters :meth:`notify_threadsafe` wakes."""
        self._loop = loop

    def event(self, key: Key) -> asyncio.Event:
        """The partition's event (set by its next :meth:`notify`): take it before
        looking, then wait on it."""
        ev = self._events.get(key)
        if ev is None:
            ev = self._events[key] = asyncio.Event()
        return ev

    def notify(self, key: Key) -> None:
        """Wake every request parked on the partition (loop thread)."""
        ev = self._events.pop(key, None)
        if ev is not None:
            ev.set()

    def notify_threadsafe(self, key: Key) -> None:
        """:meth:`notify` from any thread (a no-op before :meth:`bind`, or once the
        loop is closed)."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                loop.call_soon_threadsafe(self.notify, key)

    def notify_all(self) -> None:
        for key in list(self._events):
            self.notify(key)


class Parking:
    """The broker's channels (see the module docstring). One per broker."""

    def __init__(self) -> None:
        self.hw = Channel()
        self.end = Channel()

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self.hw.bind(loop)
        self.end.bind(loop)

    def notify_all(self) -> None:
        """Wake every parked request (the shutdown)."""
        self.hw.notify_all()
        self.end.notify_all()


async def wait_event(
    ev: asyncio.Event | list[asyncio.Event], stopping: asyncio.Event | None, timeout: float
) -> None:
    """Until ``ev`` (or one of a list of events, or ``stopping``) is set, or ``timeout``
    seconds passed."""
    events = ev if isinstance(ev, list) else [ev]
    waits = [asyncio.ensure_future(e.wait()) for e in events]
    if stopping is not None:
        waits.append(asyncio.ensure_future(stopping.wait()))
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()


async def poll(
    channel: Channel,
    stopping: asyncio.Event | None,
    keys: list[Key],
    wait_ms: int,
    read: Callable[[], Awaitable[T]],
    enough: Callable[[T], bool],
    release: Callable[[T], None] | None = None,
) -> T:
    """A long poll (Kafka's delayed fetch): ``read()``; while the result is not
    ``enough`` and ``wait_ms`` has not passed, park on the ``channel`` of the partitions
    ``keys`` (woken by an event of any of them, or ``stopping``) and read again. A result
    read again is given to ``release`` first (for the files it holds open); the last one
    is returned, enough or not."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_ms / 1000
    while True:
        events = [channel.event(k) for k in keys]  # taken before reading: nothing slips between
        result = await read()
        left = deadline - loop.time()
        if enough(result) or left <= 0 or (stopping is not None and stopping.is_set()):
            return result
        if release is not None:
            release(result)
        await wait_event(events, stopping, left)


async def await_commit(
    channel: Channel,
    key: Key,
    committed: Callable[[], bool],
    timeout_s: float,
    recheck_s: float = 0.5,
) -> bool:
    """Park until ``committed()`` (an ``acks=all`` produce waiting for the high watermark:
    woken when it moves or leadership ends; looked at every ``recheck_s`` anyway, for
    what does not wake it: the ISR shrinking below min_insync_replicas, which
    ``committed`` raises). True once committed, False after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        ev = channel.event(key)  # taken before looking: no move can slip between
        if committed():
            return True
        left = deadline - loop.time()
        if left <= 0:
            return False
        await wait_event(ev, None, min(left, recheck_s))


async def park_on(fut: Future[Any], timeout: float) -> bool:
    """Wait on the loop, holding no thread, until the concurrent ``fut`` is done (True)
    or ``timeout`` seconds passed (False). ``fut`` itself is never cancelled (other
    readers may wait for the same fetch)."""
    if fut.done():
        return True
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def on_done(_: Future[Any]) -> None:
        def settle() -> None:
            if not done.done():
                done.set_result(None)

        with contextlib.suppress(RuntimeError):  # the loop closed
            loop.call_soon_threadsafe(settle)

    fut.add_done_callback(on_done)
    try:
        await asyncio.wait_for(done, timeout)
    except TimeoutError:
        return fut.done()
    return True


__all__ = ["Channel", "Key", "Parking", "await_commit", "park_on", "poll", "wait_event"]
