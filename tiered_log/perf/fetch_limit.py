"""The machine's loopback limit next to the batches-only fetch, for ``perf http-fetch``.

Three figures, measured in the same run on the same server (:func:`measure_limits`):

- **loopback**: the local topic's segment files sent over a 127.0.0.1 TCP connection by a
  plain sender process (``socket.sendfile`` of each file, nothing else; it imports nothing
  of tiered_log) to a plain receiver in this process (``recv_into`` one reused buffer of
  :data:`FETCH_BYTES`): what this machine carries at all for these bytes;
- **local**: :meth:`Client.fetch_batches <tiered_log.client.Client.fetch_batches>` of the
  same records over HTTP from offset 0 to the end, requests of up to :data:`FETCH_BYTES`
  received into one reused buffer, every batch's checksum verified, no record built
  (what a follower, a rebuild or a columnar reader takes);
- **archived**: the same call on a topic whose sealed segments were shipped to the
  server's remote tier (its default local-directory store) and dropped locally
  (``local_retention_bytes=0``); it is read twice before any clock starts, so the chunk
  cache is warm (the report counts the bucket reads made while timed: 0 when it was).

Each measurement moves the data ``passes`` times (at least :data:`MIN_MEASURED_BYTES`),
the three take turns, their order reversed every other round, for ``rounds`` rounds;
the report gives every round's ratio to the loopback figure of the same round, their
median (``ratios``) and range (``ranges``). Targets: local >= 0.8x, archived >= 0.7x.

Not thread-safe: one benchmark at a time.
"""

from __future__ import annotations

import math
import re
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .common import MB, say

FETCH_BYTES = 8 << 20
"""``max_bytes`` of each batches request (a consumer's default), and the receive buffer."""
MIN_MEASURED_BYTES = 400 * MB
"""Each measurement moves at least this much (the data sent ``passes`` times)."""
ARCHIVED_SEGMENT_BYTES = 8 << 20
"""Segment size of the archived topic (every sealed one is shipped, then dropped locally)."""
LOCAL_TARGET = 0.8
ARCHIVED_TARGET = 0.7
LOOPBACK = "loopback"
LOCAL = "local"
ARCHIVED = "archived"

_SENDER = """\
import socket, sys
files, passes = sys.argv[1:-1], int(sys.argv[-1])
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)
print(srv.getsockname()[1], flush=True)
conn, _ = srv.accept()
conn.recv(1)
handles = [open(f, "rb") for f in files]
for _ in range(passes):
    for f in handles:
        conn.sendfile(f, 0)
conn.close()
"""
"""The plain sender: accept one connection, wait for a byte, ``sendfile`` every file
``passes`` times, close."""


def archived_overrides(durable: bool, data_bytes: int) -> dict[str, Any]:
    """The archived topic's config: segments of :data:`ARCHIVED_SEGMENT_BYTES` (an
    eighth of ``data_bytes`` when that is less, so a small run archives too), shipped
    as soon as sealed, nothing kept locally."""
    return {
        "flush_messages": 1 if durable else None,
        "remote_enabled": True,
        "segment_bytes": max(64 << 10, min(ARCHIVED_SEGMENT_BYTES, data_bytes // 8)),
        "local_retention_bytes": 0,
    }


def loopback_seconds(files: Sequence[Path], passes: int, buffer: bytearray) -> tuple[float, int]:
    """Seconds the plain sender takes to move ``files`` ``passes`` times to this process
    over loopback, and the bytes moved."""
    total = sum(f.stat().st_size for f in files) * passes
    proc = subprocess.Popen(
        [sys.executable, "-c", _SENDER, *map(str, files), str(passes)],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    )
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline())
        with socket.create_connection(("127.0.0.1", port)) as sock:
            view = memoryview(buffer)
            got = 0
            sock.sendall(b"g")
            t0 = time.perf_counter()
            while got < total:
                n = sock.recv_into(view)
                if not n:
                    break
                got += n
            secs = time.perf_counter() - t0
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if got != total:
        raise RuntimeError(f"loopback: received {got} bytes of {total}")
    return secs, got


def batches_seconds(
    client: Any, topic: str, start: int, end: int, passes: int, buffer: bytearray
) -> tuple[float, int]:
    """Seconds ``client.fetch_batches`` takes to read ``[start, end)`` of partition 0
    ``passes`` times, and the batch bytes received."""
    fetch = client.fetch_batches
    total = 0
    t0 = time.perf_counter()
    for _ in range(passes):
        off = start
        while off < end:
            got = fetch(topic, 0, off, max_bytes=FETCH_BYTES, buffer=buffer)
            if got.next_offset <= off:
                raise RuntimeError(f"fetch_batches at offset {off} of {topic} read nothing")
            total += len(got.data)
            off = got.next_offset
    return time.perf_counter() - t0, total


def _metric(text: str, name: str, topic: str) -> float:
    m = re.search(rf'^{name}\{{topic="{re.escape(topic)}"\}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def ship_archived(client: Any, topic: str, timeout: float = 300.0) -> tuple[int, int]:
    """Wait until every sealed segment of ``topic`` is shipped and dropped locally:
    ``(log start, local start)``, the archived range."""
    deadline = time.monotonic() + timeout
    last = -1
    while time.monotonic() < deadline:
        b = client.bounds(topic, 0)
        lag = _metric(client.metrics(), "tiered_log_copy_lag_segments", topic)
        if lag == 0 and b.local_start_offset > b.log_start_offset and b.local_start_offset == last:
            return b.log_start_offset, b.local_start_offset
        last = b.local_start_offset
        time.sleep(0.5)
    raise RuntimeError(f"{topic}: its segments were not shipped within {timeout:.0f}s")


def _passes(nbytes: int) -> int:
    return max(1, math.ceil(MIN_MEASURED_BYTES / max(nbytes, 1)))


def measure_limits(
    client: Any,
    local_files: Sequence[Path],
    local_topic: str,
    local_end: int,
    archived_topic: str,
    archived: tuple[int, int],
    rounds: int,
    show: bool = True,
) -> dict[str, Any]:
    """The three figures (see the module docstring) in ``rounds`` alternating rounds;
    ``archived``: the archived topic's shipped range (:func:`ship_archived`)."""
    buffer = bytearray(FETCH_BYTES + (1 << 20))
    a_start, a_end = archived
    say(f"http-fetch: warming the chunk cache ({a_end - a_start:,} archived records)", enabled=show)
    arch_bytes = 0
    for _ in range(2):  # fetched from the bucket once, then from the cache
        arch_bytes = batches_seconds(client, archived_topic, a_start, a_end, 1, buffer)[1]
    local_bytes = sum(f.stat().st_size for f in local_files)
    fetches_before = _metric(
        client.metrics(), "tiered_log_remote_fetch_requests_total", archived_topic
    )
    jobs: dict[str, Callable[[], tuple[float, int]]] = {
        LOOPBACK: lambda: loopback_seconds(local_files, _passes(local_bytes), buffer),
        LOCAL: lambda: batches_seconds(
            client, local_topic, 0, local_end, _passes(local_bytes), buffer
        ),
        ARCHIVED: lambda: batches_seconds(
            client, archived_topic, a_start, a_end, _passes(arch_bytes), buffer
        ),
    }
    runs: dict[str, list[float]] = {k: [] for k in jobs}
    for i in range(rounds):
        order = list(jobs) if i % 2 == 0 else list(reversed(jobs))
        for name in order:
            secs, n = jobs[name]()
            runs[name].append(n / secs / MB)
            say(
                f"http-fetch: round {i + 1}/{rounds} {name}: {runs[name][-1]:,.0f} MB/s",
                enabled=show,
            )
    fetches = (
        _metric(client.metrics(), "tiered_log_remote_fetch_requests_total", archived_topic)
        - fetches_before
    )
    per_round = {
        f"{k}_vs_loopback": [round(a / b, 3) for a, b in zip(runs[k], runs[LOOPBACK], strict=True)]
        for k in (LOCAL, ARCHIVED)
    }
    return {
        "figures": {
            k: {"mb_per_s": round(max(v), 1), "runs_mb_per_s": [round(x, 1) for x in v]}
            for k, v in runs.items()
        },
        "bytes": {LOCAL: local_bytes, ARCHIVED: arch_bytes},
        "passes": {LOCAL: _passes(local_bytes), ARCHIVED: _passes(arch_bytes)},
        "fetch_max_bytes": FETCH_BYTES,
        "archived_remote_fetches_while_timed": int(fetches),
        "per_round": per_round,
        "ratios": {k: round(statistics.median(v), 3) for k, v in per_round.items()},
        "ranges": {k: [min(v), max(v)] for k, v in per_round.items()},
    }


def merge_into(report: dict[str, Any], limits: dict[str, Any]) -> dict[str, Any]:
    """``report`` (perf http-fetch's) with the limits' section, ratios and targets."""
    for key, minimum in (
        ("local_vs_loopback", LOCAL_TARGET),
        ("archived_vs_loopback", ARCHIVED_TARGET),
    ):
        r = limits["ratios"][key]
        report["ratios"][key] = r
        report["targets"][key] = {
            "baseline": LOOPBACK,
            "min_ratio": minimum,
            "ratio": r,
            "range": limits["ranges"][key],
            "met": bool(r >= minimum),
        }
    report["batches"] = {k: v for k, v in limits.items() if k not in ("ratios",)}
    report["met"] = all(t["met"] for t in report["targets"].values())
    return report


def table_lines(report: dict[str, Any]) -> list[str]:
    """The limits' lines of perf http-fetch's table (none without them)."""
    b = report.get("batches")
    if not b:
        return []
    lines = [
        f"fetch_batches vs loopback ({b['fetch_max_bytes'] >> 20} MiB requests, "
        f"{len(b['figures'][LOOPBACK]['runs_mb_per_s'])} rounds):"
    ]
    for name, f in b["figures"].items():
        lines.append(
            f"  {name:<9} best {f['mb_per_s']:>9,.1f} MB/s  runs "
            + ", ".join(f"{x:,.0f}" for x in f["runs_mb_per_s"])
        )
    for key, lo_hi in b["ranges"].items():
        lines.append(
            f"  {key}: median {report['ratios'][key]:.2f} (range {lo_hi[0]:.2f}-{lo_hi[1]:.2f})"
        )
    return lines


__all__ = [
    "ARCHIVED_TARGET",
    "FETCH_BYTES",
    "LOCAL_TARGET",
    "archived_overrides",
    "batches_seconds",
    "loopback_seconds",
    "measure_limits",
    "merge_into",
    "ship_archived",
    "table_lines",
]
