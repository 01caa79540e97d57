"""``perf archive``: what compressing and encrypting the archive costs and saves.

Two corpora are generated in the run, deterministically (seeded), every record distinct
so that no chunk compresses by repeating another part of the corpus:

- ``json_lines``: JSON log lines of about 250 bytes (the compressible case an archive
  of application logs is);
- ``random``: 1 KiB values of seeded random bytes (the incompressible case: already
  compressed or encrypted payloads).

For each corpus a log is filled once and sealed; each shipment is of a fresh copy of it
under a log id of its own. Two subjects are compared:

- ``plain``: ``remote_compression=none``, no key ring (the baseline: the archive as it
  was before);
- ``compressed_encrypted``: ``remote_compression=zstd`` and a key ring
  (``remote_encryption_key_file``'s: every chunk compressed where that pays, then
  encrypted with the segment's data key).

Three measurements, each taking turns between the subjects for ``repeat`` rounds (the
order reversed every other round, :func:`~tiered_log.perf.common.alternate`):

- **ship**: ``tier_once`` of every sealed segment of a copy, through the tier's worker
  process as the service ships, then the bucket's bytes for that log (data objects and
  manifests) are counted;
- **read**: a cold reader of that copy (a fresh open, an emptied chunk cache: every
  byte fetched, decoded and verified) reads the archive from offset 0 with
  ``read_remote_batches``, as the service serves a catch-up consumer; the bytes read
  must be exactly the source log's segments (their SHA-256 is compared, outside the
  timing), else the run fails;
- **scrub**: one pass of :func:`~tiered_log.remote.scrub.scrub_bucket` over that copy,
  unthrottled; every segment must come out clean, else the run fails.

Rates are MB/s (10**6 bytes) of the log's bytes. Per corpus the report gives every
round's figures, each round's ratio (compressed_encrypted / plain), their median
(``ratios``) and range (``ranges``), and ``bucket_bytes_ratio`` (bucket bytes / log
bytes). At the top: ``bucket_bytes_ratio`` of the JSON corpus compressed, ``ratios``
the worse corpus's median ratios, ``scrub_mb_per_s`` and ``targets`` with ``met``.

The bucket is moto's S3 server in a separate process on 127.0.0.1 unless ``endpoint``
names one. Progress goes to stderr. Not thread-safe: one benchmark at a time.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..allocator import tune_malloc
from ..format import naming
from ..local.log import LogConfig
from ..partition import TieredLog
from ..remote.crypto import KeyRing, new_key_ring_file
from ..remote.scrub import scrub_bucket
from ..remote.storage import RemoteStorage
from ..remote.tier import TierConfig
from .common import MB, Progress, alternate, environment, figures, per_round, say
from .local import work_dir
from .remote import _storage, s3_target

PLAIN = "plain"
SEALED = "compressed_encrypted"
SUBJECTS = (PLAIN, SEALED)
JSON_CORPUS = "json_lines"
BATCH_RECORDS = 2000
"""Records per appended batch."""
DEFAULT_TOTAL_MIB = 24
DEFAULT_SEGMENT_MIB = 4
DEFAULT_ARCHIVE_REPEAT = 3
BUCKET_BYTES_TARGET = 0.35
"""The most bucket bytes per log byte the JSON corpus may take compressed."""
TARGETS: dict[str, float] = {
    "ship_compressed_encrypted_vs_plain": 0.7,
    "read_compressed_encrypted_vs_plain": 0.7,
}
"""Ratio name -> the minimum ratio (compressed_encrypted / plain, the worse corpus)."""
PHASES = ("ship", "read", "scrub")


def json_lines(start: int, n: int, seed: int = 7) -> list[bytes]:
    """JSON log lines ``start`` to ``start + n``, as an application's structured logs
    look; the same lines for the same arguments."""
    rng = random.Random(seed * 1_000_003 + start)
    out = []
    for o in range(start, start + n):
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


def random_values(start: int, n: int, seed: int = 7) -> list[bytes]:
    """Values ``start`` to ``start + n``: 1 KiB of seeded random bytes each
    (incompressible); the same values for the same arguments."""
    rng = random.Random(seed * 1_000_003 + start)
    return [rng.randbytes(1024) for _ in range(n)]


CORPORA: dict[str, Callable[[int, int], list[bytes]]] = {
    JSON_CORPUS: json_lines,
    "random": random_values,
}
"""Corpus name -> (first record, count) -> the records' values."""


def _fill(
    directory: Path,
    make: Callable[[int, int], list[bytes]],
    total: int,
    cfg: LogConfig,
    progress: bool | None,
) -> dict[str, Any]:
    """A log at ``directory`` holding ``make``'s records up to ``total`` value bytes,
    sealed: its records, bytes, segments and the SHA-256 of its segments' bytes."""
    tlog = TieredLog(directory, config=cfg, start_shipper=False)
    n = size = 0
    try:
        with Progress(total, f"filling {directory.name}", unit="bytes", enabled=progress) as pr:
            while size < total:
                values = make(n, BATCH_RECORDS)
                tlog.append_batch(values)
                n += len(values)
                grown = sum(len(v) for v in values)
                size += grown
                pr.advance(grown)
        tlog.flush()
        tlog.roll()
        digest = hashlib.sha256()
        stored = segments = 0
        for seg in tlog.local_segments():
            if seg.size:
                digest.update(seg.store_path.read_bytes())
                stored += seg.size
                segments += 1
        return {
            "records": n,
            "log_bytes": stored,
            "segments": segments,
            "sha256": digest.hexdigest(),
        }
    finally:
        tlog.close()


class _CorpusRun:
    """The shipped copies of one corpus and the three measurements over them."""

    def __init__(
        self,
        name: str,
        src: Path,
        source: dict[str, Any],
        storage: RemoteStorage,
        cfg: LogConfig,
        tiers: dict[str, TierConfig],
        ring: KeyRing,
        work: Path,
        show: bool | None,
    ) -> None:
        self.name, self.src, self.source = name, src, source
        self.storage, self.cfg, self.tiers, self.ring, self.work = storage, cfg, tiers, ring, work
        self.show = show
        self.log_mb: float = source["log_bytes"] / MB
        self.bucket_bytes: dict[str, list[int]] = {s: [] for s in SUBJECTS}
        self.read_sha256: dict[str, list[str]] = {s: [] for s in SUBJECTS}
        self.scrub_bucket_bytes: dict[str, list[int]] = {s: [] for s in SUBJECTS}

    def topic(self, subject: str, r: int) -> str:
        """The topic of round ``r``'s copy (its log id is ``<topic>-0``, which the
        scrubber reads as partition 0 of it)."""
        return f"{self.name}-{subject}-r{r}"

    def log_id(self, subject: str, r: int) -> str:
        return f"{self.topic(subject, r)}-0"

    def _open(self, subject: str, r: int) -> TieredLog:
        return TieredLog(
            self.work / self.log_id(subject, r),
            log_id=self.log_id(subject, r),
            storage=self.storage,
            config=self.cfg,
            tier=self.tiers[subject],
            start_shipper=False,
        )

    def ship(self, subject: str) -> Callable[[int], float]:
        def run(r: int) -> float:
            copy = self.work / self.log_id(subject, r)
            shutil.copytree(self.src, copy, ignore=shutil.ignore_patterns(".lock"))
            os.sync()  # the copy just made is not written back while we measure
            tl = self._open(subject, r)
            try:
                t0 = time.perf_counter()
                tl.tier_once()
                secs = time.perf_counter() - t0
                if tl.bounds().local_start_offset != self.source["records"]:
                    raise RuntimeError(f"{copy.name}: the local copies were not all shipped")
            finally:
                tl.close()
            prefix = naming.segment_objects_prefix(self.log_id(subject, r))
            self.bucket_bytes[subject].append(sum(o.size for o in self.storage.list(prefix)))
            return self.log_mb / secs

        return run

    def read(self, subject: str) -> Callable[[int], float]:
        def run(r: int) -> float:
            copy = self.work / self.log_id(subject, r)
            shutil.rmtree(copy / naming.REMOTE_DIR / naming.CHUNK_CACHE_DIR, ignore_errors=True)
            records = self.source["records"]
            tl = self._open(subject, r)
            parts: list[bytes | memoryview] = []
            try:
                with Progress(records, f"reading {copy.name}", enabled=self.show) as pr:
                    t0 = time.perf_counter()
                    o = 0
                    while o < records:
                        page = tl.read_remote_batches(o, 10_000, 8 << 20)
                        parts.append(page.data)
                        o = page.next_offset
                        pr.update(o)
                    secs = time.perf_counter() - t0
            finally:
                tl.close()
            digest = hashlib.sha256()
            for p in parts:
                digest.update(p)
            got = digest.hexdigest()
            self.read_sha256[subject].append(got)
            if got != self.source["sha256"]:
                raise RuntimeError(f"{copy.name}: the archive read back differs from the log")
            return self.log_mb / secs

        return run

    def scrub(self, subject: str) -> Callable[[int], float]:
        def run(r: int) -> float:
            t0 = time.perf_counter()
            rep = scrub_bucket(self.storage, self.ring, topic=self.topic(subject, r))
            secs = time.perf_counter() - t0
            if rep.damaged or rep.segments_clean != self.source["segments"]:
                raise RuntimeError(
                    f"{self.topic(subject, r)}: the scrub found {len(rep.damaged)} damaged "
                    f"and {rep.segments_clean} clean of {self.source['segments']} segments"
                )
            self.scrub_bucket_bytes[subject].append(rep.bytes_read)
            return self.log_mb / secs

        return run

    def cleanup(self, repeat: int) -> None:
        for subject in SUBJECTS:
            for r in range(repeat):
                prefix = naming.log_prefix(self.log_id(subject, r)) + "/"
                self.storage.delete([o.key for o in self.storage.list(prefix)])
                shutil.rmtree(self.work / self.log_id(subject, r), ignore_errors=True)


def _ratio_key(phase: str) -> str:
    return f"{phase}_{SEALED}_vs_{PLAIN}"


def run_archive(
    total_mib: int = DEFAULT_TOTAL_MIB,
    segment_mib: int = DEFAULT_SEGMENT_MIB,
    endpoint: str | None = None,
    repeat: int = DEFAULT_ARCHIVE_REPEAT,
    *,
    directory: str | os.PathLike[str] | None = None,
    keep: bool = False,
    progress: bool | None = None,
) -> dict[str, Any]:
    """The benchmark (see the module docstring); one JSON-able dict. ``progress``:
    the progress lines on stderr (None: only when stderr is a terminal; the phase
    lines are said unless False)."""
    tune_malloc()  # the in-process side with the allocator settings of the service
    show = progress is not False
    corpora: dict[str, dict[str, Any]] = {}
    with work_dir(directory, keep=keep) as work:
        ring_file = work / "ring.json"
        new_key_ring_file(ring_file)
        ring = KeyRing(ring_file)
        cfg = LogConfig(segment_bytes=segment_mib << 20)
        tiers = {
            PLAIN: TierConfig(local_retention_bytes=0, compression="none"),
            SEALED: TierConfig(local_retention_bytes=0, compression="zstd", key_ring=ring),
        }
        with s3_target(endpoint) as t:
            storage = _storage(t, "archive")
            try:
                for name, make in CORPORA.items():
                    say(f"archive: filling the {name} corpus ({total_mib} MiB)", enabled=show)
                    src = work / f"src-{name}"
                    source = _fill(src, make, total_mib << 20, cfg, progress)
                    run = _CorpusRun(name, src, source, storage, cfg, tiers, ring, work, progress)
                    jobs = {"ship": run.ship, "read": run.read, "scrub": run.scrub}
                    runs = {
                        phase: alternate(
                            repeat,
                            {s: jobs[phase](s) for s in SUBJECTS},
                            show,
                            f"archive {name} {phase}",
                        )
                        for phase in PHASES  # in this order: each needs the one before
                    }
                    run.cleanup(repeat)
                    shutil.rmtree(src, ignore_errors=True)
                    corpora[name] = _corpus_report(source, runs, run)
            finally:
                storage.close()
    say("archive: done", enabled=show)
    return _report(corpora, total_mib, segment_mib, endpoint, repeat, tiers)


def _corpus_report(
    source: dict[str, Any], runs: dict[str, dict[str, list[float]]], run: _CorpusRun
) -> dict[str, Any]:
    per = {_ratio_key(p): per_round(runs[p], SEALED, PLAIN) for p in PHASES}
    size = source["log_bytes"]
    return {
        **{k: source[k] for k in ("records", "log_bytes", "segments")},
        "log_sha256": source["sha256"],
        **{phase: {s: figures(runs[phase][s]) for s in SUBJECTS} for phase in PHASES},
        "bucket_bytes": {s: max(run.bucket_bytes[s]) for s in SUBJECTS},
        "bucket_bytes_ratio": {s: round(max(run.bucket_bytes[s]) / size, 3) for s in SUBJECTS},
        "scrub_bucket_bytes_read": {s: max(run.scrub_bucket_bytes[s]) for s in SUBJECTS},
        "read_sha256": run.read_sha256,
        "per_round": per,
        "ratios": {k: round(statistics.median(v), 3) for k, v in per.items()},
        "ranges": {k: [min(v), max(v)] for k, v in per.items()},
    }


def _report(
    corpora: dict[str, dict[str, Any]],
    total_mib: int,
    segment_mib: int,
    endpoint: str | None,
    repeat: int,
    tiers: dict[str, TierConfig],
) -> dict[str, Any]:
    ratios: dict[str, float] = {}
    targets: dict[str, dict[str, Any]] = {}
    for phase in PHASES:
        k = _ratio_key(phase)
        worst = min(corpora, key=lambda c: corpora[c]["ratios"][k])
        ratios[k] = corpora[worst]["ratios"][k]
        if k in TARGETS:
            targets[k] = {
                "baseline": PLAIN,
                "corpus": worst,
                "min_ratio": TARGETS[k],
                "ratio": ratios[k],
                "range": corpora[worst]["ranges"][k],
                "met": bool(ratios[k] >= TARGETS[k]),
            }
    bucket_ratio = corpora[JSON_CORPUS]["bucket_bytes_ratio"][SEALED]
    targets["bucket_bytes_ratio"] = {
        "corpus": JSON_CORPUS,
        "max": BUCKET_BYTES_TARGET,
        "value": bucket_ratio,
        "met": bool(bucket_ratio <= BUCKET_BYTES_TARGET),
    }
    return {
        "benchmark": "archive",
        "note": "MB = 10**6 bytes of the log's segments; ship = tier_once of a fresh copy "
        "through the tier's worker; read = a cold reader (fresh open, empty chunk cache) "
        "from offset 0 with read_remote_batches, its bytes checked against the log's; "
        "scrub = one unthrottled scrub_bucket pass over the copy; each measurement takes "
        "turns between plain and compressed_encrypted, order reversed every other round; "
        "ratios = median of the rounds' ratios, the worse corpus's at the top",
        "environment": environment(),
        "params": {
            "total_mib": total_mib,
            "segment_mib": segment_mib,
            "repeat": repeat,
            "endpoint": "moto" if endpoint is None else endpoint,
            "chunk_bytes": tiers[PLAIN].chunk_bytes,
            "subjects": {
                s: {"compression": tiers[s].compression, "encrypted": tiers[s].key_ring is not None}
                for s in SUBJECTS
            },
        },
        "corpora": corpora,
        "bucket_bytes_ratio": bucket_ratio,
        "ratios": ratios,
        "scrub_mb_per_s": {
            c: {s: v["scrub"][s]["mb_per_s"] for s in SUBJECTS} for c, v in corpora.items()
        },
        "targets": targets,
        "met": all(t["met"] for t in targets.values()),
    }


def format_lines(report: dict[str, Any]) -> str:
    """A readable summary of a :func:`run_archive` report."""
    p = report["params"]
    lines = [
        f"perf archive: {p['total_mib']} MiB per corpus, {p['segment_mib']} MiB segments, "
        f"{p['repeat']} rounds, {p['endpoint']}"
    ]
    for name, c in report["corpora"].items():
        lines.append(f"{name}: {c['records']:,} records, {c['log_bytes']:,} bytes")
        for s in SUBJECTS:
            lines.append(
                f"  {s:<21} bucket/log {c['bucket_bytes_ratio'][s]:.3f}  "
                + "  ".join(
                    f"{phase} {c[phase][s]['mb_per_s']:,.1f} MB/s (median "
                    f"{c[phase][s]['median_mb_per_s']:,.1f})"
                    for phase in PHASES
                )
            )
    for k, t in report["targets"].items():
        if "min_ratio" in t:
            lo, hi = t["range"]
            what = (
                f"median {t['ratio']:.2f} (range {lo:.2f}-{hi:.2f}, {t['corpus']}, "
                f"target >= {t['min_ratio']:g})"
            )
        else:
            what = f"{t['value']:.3f} ({t['corpus']}, target <= {t['max']:g})"
        lines.append(f"{k}: {what} {'met' if t['met'] else 'NOT MET'}")
    return "\n".join(lines)


__all__ = [
    "CORPORA",
    "DEFAULT_ARCHIVE_REPEAT",
    "DEFAULT_SEGMENT_MIB",
    "DEFAULT_TOTAL_MIB",
    "TARGETS",
    "format_lines",
    "json_lines",
    "random_values",
    "run_archive",
]
