"""``perf archive``: what compressing and encrypting the archive costs and saves.

Two corpora are generated in the run: JSON log lines (about 250 bytes each, the
compressible case an archive of application logs is) and random 1 KiB values (the
incompressible case: already compressed or encrypted payloads). For each, a log is
filled once and its sealed segments copied for every shipment. Two subjects take turns
(who goes first alternates by round), each round on a fresh copy under a new log id:

- ``plain``: ``remote_compression=none``, no key ring (the baseline: the archive as it
  was before);
- ``compressed_encrypted``: ``remote_compression=zstd`` and a key ring (every chunk
  compressed where that pays, then encrypted).

Each shipment is timed (``tier_once`` of every segment, through the tier's worker
process as the service ships), then the archive is read from offset 0 by a cold reader
(an emptied chunk cache, a fresh open: every byte fetched, decoded and verified, as
``read_remote_batches`` serves a catch-up consumer), and the bucket's bytes for the log
(data objects and manifests) are counted. Figures: throughput in MB/s of the log's
bytes (best run of each side, and the range over the runs), per-round ratios
(subject / baseline, min..max), and ``bucket_bytes_ratio`` (bucket bytes / log
bytes). ``ratios`` holds the worst corpus's ratio of best runs, the issue's targets
being >= 0.7.

The bucket is moto's S3 server in a separate process on 127.0.0.1 unless ``endpoint``
names one. Not thread-safe: one benchmark at a time.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..format import naming
from ..local.log import LogConfig
from ..partition import TieredLog
from ..remote.crypto import KeyRing, new_key_ring_file
from ..remote.storage import RemoteStorage
from ..remote.tier import TierConfig
from .remote import _say, _storage, s3_target

SUBJECTS = ("plain", "compressed_encrypted")
TARGET = 0.7


def json_lines(n: int, seed: int = 7) -> list[bytes]:
    """``n`` JSON log lines, as an application's structured logs look."""
    rng = random.Random(seed)
    out = []
    for o in range(n):
        out.append(
            json.dumps(
                {
                    "ts": 1764331200000 + o * 7,
                    "level": rng.choice(("INFO", "INFO", "INFO", "WARN", "ERROR")),
                    "service": rng.choice(("orders", "billing", "auth", "search")),
                    "trace_id": rng.getrandbits(64).to_bytes(8, "big").hex(),
                    "user": f"u{rng.randint(1, 50_000)}",
                    "msg": f"{rng.choice(('GET', 'POST'))} /api/v1/items/"
                    f"{rng.randint(1, 10**6)} took {rng.randint(1, 900)} ms",
                    "status": rng.choice((200, 200, 200, 201, 404, 500)),
                }
            ).encode()
        )
    return out


def random_values(n: int) -> list[bytes]:
    """``n`` random 1 KiB values (incompressible)."""
    return [os.urandom(1024) for _ in range(n)]


CORPORA: dict[str, Callable[[int], list[bytes]]] = {
    "json_lines": json_lines,
    "random": random_values,
}


def _fill(directory: Path, values: list[bytes], total: int, cfg: LogConfig) -> tuple[int, int]:
    """A log at ``directory`` holding ``values`` over and over up to ``total`` bytes,
    sealed; its record count and bytes."""
    tlog = TieredLog(directory, config=cfg, start_shipper=False)
    n = size = 0
    try:
        while size < total:
            tlog.append_batch(values)
            n += len(values)
            size += sum(len(v) for v in values)
        tlog.flush()
        tlog.roll()
        return n, sum(s.size for s in tlog.local_segments())
    finally:
        tlog.close()


def _bucket_bytes(storage: RemoteStorage, log_id: str) -> int:
    return sum(o.size for o in storage.list(naming.segment_objects_prefix(log_id)))


def _one(
    src: Path,
    storage: RemoteStorage,
    log_id: str,
    cfg: LogConfig,
    tier: TierConfig,
    records: int,
    work: Path,
) -> tuple[float, float, int]:
    """Ship a copy of ``src`` and read it back cold: (ship s, read s, bucket bytes)."""
    copy = work / log_id
    shutil.copytree(src, copy, ignore=shutil.ignore_patterns(".lock"))
    os.sync()
    tl = TieredLog(copy, log_id=log_id, storage=storage, config=cfg, tier=tier, start_shipper=False)
    try:
        t0 = time.perf_counter()
        tl.tier_once()
        ship_s = time.perf_counter() - t0
        if tl.bounds().local_start_offset != records:
            raise RuntimeError(f"{log_id}: the local copies were not all shipped and dropped")
    finally:
        tl.close()
    bucket = _bucket_bytes(storage, log_id)
    shutil.rmtree(copy / naming.REMOTE_DIR / naming.CHUNK_CACHE_DIR, ignore_errors=True)
    tl = TieredLog(copy, log_id=log_id, storage=storage, config=cfg, tier=tier, start_shipper=False)
    try:
        t0 = time.perf_counter()
        o = 0
        while o < records:
            o = tl.read_remote_batches(o, 10_000, 8 << 20).next_offset
        read_s = time.perf_counter() - t0
    finally:
        tl.close()
    tl.delete_remote_objects()
    shutil.rmtree(copy, ignore_errors=True)
    return ship_s, read_s, bucket


def _span(xs: list[float]) -> list[float]:
    return [round(min(xs), 3), round(max(xs), 3)]


def run_archive(
    total_mib: int = 24,
    segment_mib: int = 4,
    endpoint: str | None = None,
    repeat: int = 3,
    show: bool = True,
) -> dict[str, Any]:
    """The benchmark (see the module docstring); one JSON-able dict."""

    def say(msg: str) -> None:
        if show:
            _say(msg)

    work = Path(tempfile.mkdtemp(prefix="tl-perf-archive-"))
    try:
        ring_file = work / "ring.json"
        new_key_ring_file(ring_file)
        ring = KeyRing(ring_file)
        cfg = LogConfig(segment_bytes=segment_mib << 20)
        tiers = {
            "plain": TierConfig(local_retention_bytes=0, compression="none"),
            "compressed_encrypted": TierConfig(
                local_retention_bytes=0, compression="zstd", key_ring=ring
            ),
        }
        corpora: dict[str, dict[str, Any]] = {}
        with s3_target(endpoint) as t:
            storage = _storage(t, "archive")
            for name, make in CORPORA.items():
                say(f"filling the {name} corpus ({total_mib} MiB)")
                records, size = _fill(work / f"src-{name}", make(2000), total_mib << 20, cfg)
                corpora[name] = {"records": records, "log_bytes": size}
                runs: dict[str, dict[str, list[float]]] = {
                    s: {"ship_s": [], "read_s": [], "bucket_bytes": []} for s in SUBJECTS
                }
                for r in range(repeat):
                    order = SUBJECTS if r % 2 == 0 else SUBJECTS[::-1]
                    for subject in order:
                        say(
                            f"{name}: round {r + 1}/{repeat}: {subject}: shipping "
                            f"{size >> 20} MiB, then reading it back cold"
                        )
                        ship_s, read_s, bucket = _one(
                            work / f"src-{name}",
                            storage,
                            f"{name}-{subject}-{r}",
                            cfg,
                            tiers[subject],
                            records,
                            work,
                        )
                        runs[subject]["ship_s"].append(ship_s)
                        runs[subject]["read_s"].append(read_s)
                        runs[subject]["bucket_bytes"].append(bucket)
                out = corpora[name]
                for subject in SUBJECTS:
                    ship, read = runs[subject]["ship_s"], runs[subject]["read_s"]
                    out[subject] = {
                        "ship_mb_s": round(size / min(ship) / 1e6, 1),
                        "ship_mb_s_range": [
                            round(size / max(ship) / 1e6, 1),
                            round(size / min(ship) / 1e6, 1),
                        ],
                        "read_mb_s": round(size / min(read) / 1e6, 1),
                        "read_mb_s_range": [
                            round(size / max(read) / 1e6, 1),
                            round(size / min(read) / 1e6, 1),
                        ],
                        "bucket_bytes": int(max(runs[subject]["bucket_bytes"])),
                        "bucket_bytes_ratio": round(max(runs[subject]["bucket_bytes"]) / size, 3),
                    }
                p, s = runs["plain"], runs["compressed_encrypted"]
                out["ratios"] = {
                    "ship_compressed_encrypted_vs_plain": round(
                        min(p["ship_s"]) / min(s["ship_s"]), 3
                    ),
                    "ship_per_round_range": _span(
                        [a / b for a, b in zip(p["ship_s"], s["ship_s"], strict=True)]
                    ),
                    "read_compressed_encrypted_vs_plain": round(
                        min(p["read_s"]) / min(s["read_s"]), 3
                    ),
                    "read_per_round_range": _span(
                        [a / b for a, b in zip(p["read_s"], s["read_s"], strict=True)]
                    ),
                }
                out["runs_seconds"] = {
                    k: {m: [round(x, 3) for x in v[m]] for m in ("ship_s", "read_s")}
                    for k, v in runs.items()
                }
                shutil.rmtree(work / f"src-{name}", ignore_errors=True)
            storage.close()
        ratios = {
            k: min(c["ratios"][k] for c in corpora.values())
            for k in ("ship_compressed_encrypted_vs_plain", "read_compressed_encrypted_vs_plain")
        }
        json_ratio = corpora["json_lines"]["compressed_encrypted"]["bucket_bytes_ratio"]
        return {
            "benchmark": "archive",
            "repeat": repeat,
            "segment_mib": segment_mib,
            "endpoint": "moto" if endpoint is None else endpoint,
            "bucket_bytes_ratio": json_ratio,
            "bucket_bytes_ratio_target": 0.35,
            "ratios": ratios,
            "target": TARGET,
            "met": json_ratio <= 0.35 and all(v >= TARGET for v in ratios.values()),
            "corpora": corpora,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


__all__ = ["CORPORA", "json_lines", "random_values", "run_archive"]
