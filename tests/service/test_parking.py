"""The broker's long poll (:func:`tiered_log.broker.parking.poll`): where a consumer's
fetch of one partition (HTTP) and of several (Kafka's Fetch with ``min_bytes``) waits."""

from __future__ import annotations

import asyncio

from tiered_log.broker.parking import Channel, poll


def test_a_wake_up_that_brings_too_little_parks_again_until_enough() -> None:
    """Woken by a partition's event while the result is still not enough, the poll
    releases that result and parks again (it does not answer early); the event that
    brings enough ends it."""

    async def main() -> tuple[list[int], list[int]]:
        ch = Channel()
        ch.bind(asyncio.get_running_loop())
        stored: list[int] = []
        reads: list[int] = []
        released: list[int] = []

        async def read() -> int:
            reads.append(len(stored))
            return sum(stored)

        async def producer() -> None:
            for size in (1, 1, 5):  # too little, too little, then enough
                await asyncio.sleep(0.05)
                stored.append(size)
                ch.notify(("t", 1))

        task = asyncio.ensure_future(producer())
        got = await poll(
            ch, None, [("t", 0), ("t", 1)], 10_000, read, lambda n: n >= 5, released.append
        )
        await task
        assert got == 7
        return reads, released

    reads, released = asyncio.run(asyncio.wait_for(main(), 30))
    assert reads == [0, 1, 2, 3]  # read at the start and after each of the three events
    assert released == [0, 1, 2]  # every result read again was released; the last was not


def test_the_wait_ends_with_what_there_is() -> None:
    """Nothing comes: once ``wait_ms`` passed the poll reads a last time and answers
    that (not enough) result, not released; ``wait_ms`` 0 reads once and does not park."""

    async def main(wait_ms: int) -> tuple[int, list[int], int]:
        ch = Channel()
        ch.bind(asyncio.get_running_loop())
        released: list[int] = []
        n = 0

        async def read() -> int:
            nonlocal n
            n += 1
            return 0

        got = await poll(ch, None, [("t", 0)], wait_ms, read, lambda r: r > 0, released.append)
        return got, released, n

    assert asyncio.run(asyncio.wait_for(main(100), 30)) == (0, [0], 2)
    assert asyncio.run(asyncio.wait_for(main(0), 30)) == (0, [], 1)


def test_the_shutdown_ends_a_parked_poll() -> None:
    async def main() -> int:
        ch = Channel()
        ch.bind(asyncio.get_running_loop())
        stopping = asyncio.Event()

        async def read() -> int:
            return 0

        async def stop() -> None:
            await asyncio.sleep(0.05)
            stopping.set()

        task = asyncio.ensure_future(stop())
        got = await poll(ch, stopping, [("t", 0)], 60_000, read, lambda r: r > 0)
        await task
        return got

    assert asyncio.run(asyncio.wait_for(main(), 30)) == 0
