"""Truncation anywhere, then anything: every read path serves exactly the model's records.

A log is driven through random sequences of appends, shipping rounds, truncations (cut
at the first, a middle or the last record of a remote chunk or segment, of a local
segment, or anywhere), reopens and rebuilds from the bucket alone. After every step each
read path is compared with a plain list of what the log must hold: ``read_range`` from
every offset, ``read_remote_batches`` (the binary fetch below the local start),
``offset_for_timestamp`` and the archive listing the Spark source plans from. The case
of issue 14 (a cut inside the first chunk of a remote segment, then appends that ship:
the clipped chunk's old records came back) is one of its examples, pinned explicitly.
"""

from __future__ import annotations

import itertools
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tiered_log import LogConfig, ProducerRecord
from tiered_log.format.records import decode_records
from tiered_log.partition import TieredLog
from tiered_log.remote.fs import LocalDirStorage
from tiered_log.remote.tier import TierConfig

CONFIG = LogConfig(segment_bytes=2048, index_interval_bytes=256)
TIER = TierConfig(chunk_bytes=512, fetch_bytes=2048, prefetch_bytes=2048, local_retention_bytes=0)

CUTS = ["chunk_first", "chunk_mid", "chunk_last", "seg_first", "seg_last", "local", "any"]
append_op = st.tuples(st.just("append"), st.integers(1, 60), st.integers(1, 9))
step = st.one_of(
    append_op,
    st.tuples(st.just("ship"), st.just(0), st.just(0)),
    st.tuples(st.just("truncate"), st.sampled_from(CUTS), st.integers(0, 1 << 16)),
    st.tuples(st.just("reopen"), st.just(0), st.just(0)),
    st.tuples(st.just("rebuild"), st.just(0), st.just(0)),
)


class Model:
    """What the log must hold: (value, timestamp) by offset."""

    def __init__(self) -> None:
        self.records: list[tuple[bytes, int]] = []
        self.clock = itertools.count(1_000)  # timestamps rise across generations
        self.generation = 0


def _append(tlog: TieredLog, model: Model, n: int, per_batch: int) -> None:
    model.generation += 1
    batch: list[ProducerRecord] = []
    for _ in range(n):
        o = len(model.records)
        value = b"g%d-%d-" % (model.generation, o) + b"x" * 40
        ts = next(model.clock)
        model.records.append((value, ts))
        batch.append(ProducerRecord(value, timestamp=ts))
        if len(batch) == per_batch:
            tlog.append_batch(batch)
            batch = []
    if batch:
        tlog.append_batch(batch)
    tlog.flush()


def _cut_offset(tlog: TieredLog, kind: str, k: int) -> int:
    """The truncation offset a step names, resolved against the log as it is now."""
    nxt = tlog.next_offset
    r = tlog.remote_tier
    assert r is not None
    chunks = [e for e in r.index.all_entries() if e.first_offset < r.remote_end]
    segs = [(s.base_offset, r.served_end(s)) for s in r.finished_segments]
    local = [
        (s.base_offset, s.next_offset)
        for s in tlog.local_segments()
        if s.next_offset > s.base_offset
    ]
    if kind.startswith("chunk") and chunks:
        e = chunks[k % len(chunks)]
        first, last = e.first_offset, min(e.last_offset, r.remote_end - 1)
        return {"chunk_first": first, "chunk_last": last, "chunk_mid": (first + last + 1) // 2}[
            kind
        ]
    if kind.startswith("seg") and segs:
        base, end = segs[k % len(segs)]
        return base if kind == "seg_first" else end - 1
    if kind == "local" and local:
        base, end = local[k % len(local)]
        return base + k % (end - base)
    return k % (nxt + 1)


def _open(path: Path, storage: LocalDirStorage) -> TieredLog:
    return TieredLog(
        path, log_id="t-0", storage=storage, config=CONFIG, tier=TIER, start_shipper=False
    )


def _check(tlog: TieredLog, model: Model) -> None:
    n = len(model.records)
    assert tlog.next_offset == n
    assert tlog.log_start_offset == 0 or n == 0
    # read_range from every offset (small pages cross every chunk and segment border).
    for start in range(n):
        got = tlog.read_range(start, max_records=7, max_bytes=1 << 20)
        assert got, start
        for i, rec in enumerate(got):
            assert rec.offset == start + i
            assert (rec.value, rec.timestamp) == model.records[rec.offset], rec.offset
    # The binary fetch below the local start: whole batches, none from a truncated past.
    local_start = tlog.bounds().local_start_offset
    for start in range(min(local_start, n)):
        fetched = tlog.read_remote_batches(start, max_records=5, max_bytes=300)
        data, after = fetched.data, fetched.next_offset
        recs = decode_records(data, 0, len(data))[0]
        assert recs and recs[0].offset <= start < after <= local_start
        assert recs[-1].offset == after - 1
        for i, rec in enumerate(recs):
            assert rec.offset == recs[0].offset + i
            assert (rec.value, rec.timestamp) == model.records[rec.offset], rec.offset
    # Timestamp lookups land on the model's first record at or after the time.
    for ts in {0, *(t for _, t in model.records[::3]), *(t + 1 for _, t in model.records[-2:])}:
        want = next((o for o, (_, t) in enumerate(model.records) if t >= ts), None)
        assert tlog.offset_for_timestamp(ts) == want, ts
    # The archive listing: segments and chunks that tile [log start, remote end) once.
    r = tlog.remote_tier
    assert r is not None
    expect = r.start_offset
    for seg in r.archived_segments(0):
        assert seg["base_offset"] <= expect < seg["next_offset"] or seg["base_offset"] == expect
        chunk_expect = max(seg["base_offset"], expect)
        for first, last, *_ in seg["chunks"]:
            if last < chunk_expect:
                continue
            assert first <= chunk_expect <= last < seg["next_offset"]
            chunk_expect = last + 1
        assert chunk_expect == seg["next_offset"]
        expect = seg["next_offset"]
    assert expect == max(r.remote_end, r.start_offset)


def _run(tmp: Path, steps: list[tuple[str, object, int]]) -> None:
    storage = LocalDirStorage(tmp / "bucket")
    dirs = (tmp / f"d{i}" for i in itertools.count())
    path = next(dirs)
    tlog = _open(path, storage)
    model = Model()
    try:
        for op, a, b in steps:
            if op == "append":
                _append(tlog, model, int(a), b)  # type: ignore[call-overload]
            elif op == "ship":
                tlog.roll()
                tlog.tier_once()
            elif op == "truncate":
                cut = _cut_offset(tlog, str(a), b)
                tlog.truncate(cut)
                del model.records[cut:]
            elif op == "reopen":
                tlog.close()
                tlog = _open(path, storage)
            elif op == "rebuild":  # ship everything, lose the disk, come back from the bucket
                tlog.roll()
                tlog.tier_once()
                tlog.close()
                path = next(dirs)
                tlog = _open(path, storage)
            _check(tlog, model)
    finally:
        tlog.close()


ISSUE_CASE = [
    ("append", 150, 10),
    ("ship", 0, 0),
    ("append", 150, 10),
    ("ship", 0, 0),
    ("truncate", "chunk_mid", 0),
    ("append", 120, 10),
    ("ship", 0, 0),
]


def test_truncation_inside_an_archived_chunk_then_appends(tmp_path: Path) -> None:
    """Issue 14's case: cut inside a remote chunk, append, ship; the old records above the
    cut never come back, through any read path, after a reopen or a rebuild."""
    _run(
        tmp_path,
        [
            ("append", 150, 10),
            ("ship", 0, 0),
            ("append", 150, 10),
            ("ship", 0, 0),
            ("truncate", "chunk_mid", 9),
            ("append", 120, 10),
            ("ship", 0, 0),
            ("reopen", 0, 0),
            ("truncate", "chunk_mid", 13),
            ("append", 30, 7),
            ("rebuild", 0, 0),
            ("append", 5, 1),
        ],
    )


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(step, min_size=1, max_size=9).map(lambda s: [("append", 80, 6), *s]))
@example(steps=ISSUE_CASE)
def test_truncations_model(tmp_path_factory, steps: list[tuple[str, object, int]]) -> None:  # type: ignore[no-untyped-def]
    _run(tmp_path_factory.mktemp("trunc"), steps)
