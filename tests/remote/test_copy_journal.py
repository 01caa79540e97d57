"""The copy journal's finished copies (with their total size and the unreadable ones) and
its open attempts, kept up to date as attempts are recorded (a copy finishing is an
insertion, not a sort or a walk of the whole archive), always what a sort of every
attempt gives and what the journal file gives when opened again."""

from __future__ import annotations

import random
import uuid
from dataclasses import replace
from pathlib import Path

import pytest

from tiered_log.remote.metadata import CopyJournal, CopyState, RemoteSegment


def attempt(base: int, n: int = 10) -> RemoteSegment:
    return RemoteSegment(
        uuid.uuid4().hex, base, base + n, 100 * n, base, base + n, CopyState.COPY_STARTED
    )


def by_sort(j: CopyJournal) -> list[RemoteSegment]:
    return [s for s in j.segments() if s.state == CopyState.COPY_FINISHED]


def check_views(j: CopyJournal) -> None:
    """Every kept view against a walk over every attempt."""
    fin = by_sort(j)
    assert j.finished_summary() == (fin, sum(s.size for s in fin), [s for s in fin if s.unreadable])
    open_states = (CopyState.COPY_STARTED, CopyState.DELETE_STARTED)
    assert j.open_attempts() == [s for s in j.segments() if s.state in open_states]


@pytest.mark.parametrize("seed", range(8))
def test_finished_matches_a_sort_of_every_attempt_whatever_is_recorded(
    tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    path = tmp_path / "journal"
    j = CopyJournal(path)
    started: list[RemoteSegment] = []
    finished: list[RemoteSegment] = []
    deleting: list[RemoteSegment] = []
    base = 0
    for _ in range(300):
        op = rng.random()
        if op < 0.35:  # a copy starts (sometimes two at once, out of offset order)
            segs = [attempt(base), attempt(base + 10)]
            rng.shuffle(segs)
            base += 20
            started += j.record_all(segs, CopyState.COPY_STARTED)
        elif op < 0.65 and started:  # one finishes, not necessarily the oldest
            s = started.pop(rng.randrange(len(started)))
            finished.append(j.record(s, CopyState.COPY_FINISHED))
        elif op < 0.75:  # a rebuild journals copies found in the bucket, finished
            segs = [attempt(base + 10 * k) for k in range(rng.randrange(1, 4))]
            segs = [replace(x, unreadable=rng.random() < 0.3) for x in segs]
            base += 40
            finished += j.record_all(segs, CopyState.COPY_FINISHED)
        elif op < 0.85 and finished:  # retention or a truncation starts deleting some
            doomed = rng.sample(finished, min(len(finished), rng.randrange(1, 4)))
            for s in doomed:
                finished.remove(s)
            deleting += j.record_all(doomed, CopyState.DELETE_STARTED)
        elif op < 0.92 and deleting:  # ... and finishes, then forgets them
            done = j.record_all(deleting, CopyState.DELETE_FINISHED)
            j.forget([s.id for s in done])
            deleting = []
        elif op < 0.96:
            j.compact()
        else:  # a crash: the journal opened again from its file
            j = CopyJournal(path)
        got = j.finished()
        assert got == by_sort(j)
        assert {s.id for s in got} == {s.id for s in finished}
        got.clear()  # the caller's list: the journal's own is not changed
        assert j.finished() == by_sort(j)
        check_views(j)
    assert CopyJournal(path).finished() == j.finished()
    check_views(CopyJournal(path))


def test_a_cleared_journal_has_no_finished_copies(tmp_path: Path) -> None:
    j = CopyJournal(tmp_path / "journal")
    j.record_all([attempt(0), attempt(10)], CopyState.COPY_FINISHED)
    assert len(j.finished()) == 2
    j.record(attempt(30), CopyState.COPY_STARTED)
    assert [s.base_offset for s in j.open_attempts()] == [30]
    j.clear()
    assert j.finished() == [] and j.open_attempts() == []
    j.record(attempt(20), CopyState.COPY_FINISHED)
    assert [s.base_offset for s in j.finished()] == [20]
