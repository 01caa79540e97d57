"""``perf kafka-codec``: the Kafka batch codec's per-request costs, each against a baseline
measured in the same run.

Two figures, over a buffer of concatenated v2 batches (by default 1 MiB of 1 KiB records,
half random and half zeros, 16 records a batch, as a Kafka producer's 16 KiB
``batch.size`` makes them):

- the checked walk (:func:`~tiered_log.format.kafka.verify_batches`: framing, magic and
  CRC-32C of every batch, no record read), in MB/s, against one ``crc32c`` call over the
  same bytes: the floor the walk cannot beat, so the ratio says what the per-batch
  Python work costs;
- decoding every record (:meth:`~tiered_log.format.kafka.KafkaBatch.records`), in
  records/s, against kafka-python's ``DefaultRecordBatch`` reader over the same bytes
  (skipped when kafka-python is not installed: it is a dev dependency).

Ours and the baseline alternate within each round, so drift in the machine's load hits
both alike; each round times ``inner`` calls and the best round counts (the median is
reported too). Progress lines go to stderr. Not thread-safe: one run per process.
"""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from crc32c import crc32c

from ..format.kafka import Compression, NewRecord, encode_batch, iter_batches, verify_batches
from .common import MB, environment, ratio, say

DEFAULT_TOTAL_BYTES = 1 << 20
DEFAULT_RECORD_BYTES = 1024
DEFAULT_BATCH_RECORDS = 16
DEFAULT_ROUNDS = 7


def build_buffer(
    total_bytes: int, record_bytes: int, batch_records: int, codec: Compression
) -> tuple[bytes, int]:
    """Batches of ``batch_records`` records of ``record_bytes`` each (half random, half
    zeros: about 2:1 compressible), about ``total_bytes`` of values in all; returns the
    buffer and its record count."""
    count = max(1, total_bytes // record_bytes)
    half = record_bytes // 2
    zeros = bytes(record_bytes - half)
    now = time.time_ns() // 1_000_000
    records = [NewRecord(os.urandom(half) + zeros, None, (), now + i) for i in range(count)]
    parts = [
        encode_batch(records[i : i + batch_records], base_offset=i, compression=codec)
        for i in range(0, count, batch_records)
    ]
    return b"".join(parts), count


def _timed(fn: Callable[[], object], inner: int) -> float:
    t = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t) / inner


def _summary(times: list[float], amount: float) -> dict[str, float]:
    return {
        "best_per_s": amount / min(times),
        "median_per_s": amount / statistics.median(times),
    }


def run(
    total_bytes: int = DEFAULT_TOTAL_BYTES,
    *,
    record_bytes: int = DEFAULT_RECORD_BYTES,
    batch_records: int = DEFAULT_BATCH_RECORDS,
    compression: Compression | str | None = None,
    rounds: int = DEFAULT_ROUNDS,
    progress: bool | None = True,
) -> dict[str, Any]:
    """Measure the walk and record decoding; returns the report (see the module doc)."""
    codec = Compression.parse(compression)
    show = progress is not False
    buf, count = build_buffer(total_bytes, record_bytes, batch_records, codec)
    batches = len(verify_batches(buf))
    say(
        f"kafka-codec: {len(buf):,} bytes, {count:,} records of {record_bytes} B in "
        f"{batches:,} batches ({codec.name.lower()}), {rounds} rounds",
        enabled=show,
    )
    # Enough calls per round for about 20 ms of ours, from one call.
    inner_walk = max(1, int(0.02 / max(_timed(lambda: verify_batches(buf), 1), 1e-7)))

    def decode() -> int:
        return sum(len(b.records()) for b in iter_batches(buf))

    def kafka_python_decode() -> int:
        mr = MemoryRecords(buf)
        n = 0
        while mr.has_next():
            batch = mr.next_batch()
            for _ in batch:
                n += 1
        return n

    try:
        from kafka.record.memory_records import MemoryRecords
    except ImportError:  # kafka-python is a dev dependency
        baseline_decode: Callable[[], int] | None = None
    else:
        baseline_decode = kafka_python_decode
        if kafka_python_decode() != count:
            raise AssertionError("kafka-python read a different number of records")
    if decode() != count:
        raise AssertionError("the decoder read a different number of records")

    inner_decode = max(1, int(0.02 / max(_timed(decode, 1), 1e-7)))

    walk_t: list[float] = []
    crc_t: list[float] = []
    dec_t: list[float] = []
    base_t: list[float] = []
    for r in range(rounds):
        crc_t.append(_timed(lambda: crc32c(buf), inner_walk))
        walk_t.append(_timed(lambda: verify_batches(buf), inner_walk))
        dec_t.append(_timed(decode, inner_decode))
        if baseline_decode is not None:
            base_t.append(_timed(baseline_decode, inner_decode))
        say(
            f"round {r + 1}/{rounds}: walk {len(buf) / walk_t[-1] / MB:,.0f} MB/s, "
            f"crc32c {len(buf) / crc_t[-1] / MB:,.0f} MB/s, decode {count / dec_t[-1]:,.0f} "
            f"records/s"
            + (f", kafka-python {count / base_t[-1]:,.0f} records/s" if base_t else ""),
            enabled=show,
        )
    walk = _summary(walk_t, len(buf) / MB)
    crc = _summary(crc_t, len(buf) / MB)
    dec = _summary(dec_t, count)
    report: dict[str, Any] = {
        "benchmark": "kafka-codec",
        "bytes": len(buf),
        "records": count,
        "record_bytes": record_bytes,
        "batches": batches,
        "compression": codec.name.lower(),
        "rounds": rounds,
        "walk_mb_s": round(walk["best_per_s"], 1),
        "walk_mb_s_median": round(walk["median_per_s"], 1),
        "crc32c_mb_s": round(crc["best_per_s"], 1),
        "crc32c_mb_s_median": round(crc["median_per_s"], 1),
        "walk_vs_crc32c": round(ratio(walk["best_per_s"], crc["best_per_s"]), 3),
        "walk_batches_per_s": round(batches / min(walk_t)),
        "decode_records_s": round(dec["best_per_s"]),
        "decode_records_s_median": round(dec["median_per_s"]),
    }
    if base_t:
        base = _summary(base_t, count)
        report["kafka_python_records_s"] = round(base["best_per_s"])
        report["kafka_python_records_s_median"] = round(base["median_per_s"])
        report["decode_vs_kafka_python"] = round(ratio(dec["best_per_s"], base["best_per_s"]), 3)
    report["environment"] = environment()
    return report


__all__ = ["build_buffer", "run"]
