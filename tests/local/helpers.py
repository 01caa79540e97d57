"""Helpers shared by the local-log tests: deterministic records and whole-log reads."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from tiered_log import Log, ProducerRecord, Record
from tiered_log.format import naming


def value_for(offset: int, size: int = 100) -> bytes:
    """A value of exactly ``size`` bytes that names its offset."""
    seed = hashlib.sha256(str(offset).encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def fixed_record(offset: int, size: int = 32, ts: int | None = None) -> ProducerRecord:
    """A keyless, headerless record that, appended on its own, takes a Kafka batch of
    ``68 + size`` bytes for a ``size`` up to 57 (100 by default: 61 of batch header, 7 of
    record framing: its length, attributes, timestamp and offset deltas, key and value
    lengths, header count, one byte each)."""
    return ProducerRecord(value_for(offset, size), timestamp=ts)


def read_all(log: Log, start: int | None = None, **limits: int) -> list[Record]:
    """Every record from ``start`` (default: the log start) to the next offset."""
    offset = log.log_start_offset if start is None else start
    out: list[Record] = []
    while offset < log.next_offset:
        batch = log.read_range(offset, **limits)
        assert batch, f"read_range({offset}) returned nothing below the next offset"
        assert batch[0].offset == offset
        out.extend(batch)
        offset = batch[-1].offset + 1
    return out


def same_content(rec: Record, want: ProducerRecord) -> bool:
    """Whether ``rec`` holds exactly what ``want`` asked for (timestamp if it set one)."""
    return (
        rec.value == want.value
        and rec.key == want.key
        and tuple(rec.headers) == tuple(want.headers)
        and (want.timestamp is None or rec.timestamp == want.timestamp)
    )


def store_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.endswith(naming.LOG_SUFFIX))


def wait_for_clock(ms: int = 2) -> None:
    """Return once the wall clock (in ms, as the log reads it) has moved ``ms`` forward."""
    start = time.time_ns() // 1_000_000
    while time.time_ns() // 1_000_000 < start + ms:
        time.sleep(0.0005)
