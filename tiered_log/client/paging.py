"""How a consume is paged: what each request asks for, how its answer is cut into pages,
when the consume ends. Shared by both clients' ``consume``.

As a Kafka consumer does, requests and pages are sized apart: a request asks for up to
:data:`FETCH_RECORDS` records within ``max_bytes`` (Kafka's ``fetch.max.bytes``) and
never past ``end_offset``; its records are handed out ``max_records`` at a time
(``max.poll.records``).

Pure functions: safe from any thread.
"""

from __future__ import annotations

from collections.abc import Iterator

from .. import errors as E
from .messages import FetchResult


def _check_consume(offset: int, end_offset: int | None, max_records: int) -> None:
    if offset < 0 or (end_offset is not None and end_offset < offset) or max_records < 1:
        raise E.InvalidArgumentError(
            f"consume needs 0 <= offset <= end_offset and max_records >= 1 (got offset "
            f"{offset}, end_offset {end_offset}, max_records {max_records})"
        )


def _pages(page: FetchResult, max_records: int) -> Iterator[FetchResult]:
    """``page`` as pages of at most ``max_records`` records (a fetch brings whole batches,
    which may hold more)."""
    recs = page.records
    if len(recs) <= max_records:
        yield page
        return
    for i in range(0, len(recs), max_records):
        part = recs[i : i + max_records]
        nxt = page.next_offset if i + max_records >= len(recs) else part[-1].offset + 1
        yield FetchResult(part, nxt, page.high_watermark, page.log_start_offset)


def _left(offset: int, end_offset: int | None) -> int | None:
    """Records a consume may still return at ``offset`` (None: no end)."""
    return None if end_offset is None else end_offset - offset


FETCH_RECORDS = 10_000
"""Records a consume's request asks for (the server's limit); ``max_bytes`` bounds it."""


def _page_plan(offset: int, end_offset: int | None) -> int:
    """Records a consume's request asks for at ``offset``: as many as the server gives in
    one answer (``max_bytes`` bounds them, as Kafka's ``fetch.max.bytes`` does), never
    past ``end_offset``."""
    return FETCH_RECORDS if end_offset is None else min(FETCH_RECORDS, end_offset - offset)


def _consume_done(count: int, nxt: int, end_offset: int | None, follow: bool) -> bool:
    """Whether a consume ends after a page of ``count`` records continuing at ``nxt``."""
    return (end_offset is not None and nxt >= end_offset) or (count == 0 and not follow)
