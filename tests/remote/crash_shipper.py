"""Shipper process for the remote crash tests: ships or deletes until it is killed.

Usage::

    python crash_shipper.py MODE LOG_DIR STORAGE [KILL_AT]

``STORAGE`` is ``fs:/abs/dir`` (a LocalDirStorage) or ``s3:<endpoint url>|<bucket>[|<prefix>]`` (an
S3Storage on that endpoint, credentials from the environment). The log is always
``LOG_ID`` with small segments (:data:`SEGMENT_BYTES`), so a few hundred records make
several segments. Every record is a pure function of its offset (:func:`expected_record`),
so a checker can verify any record it reads back.

Modes (each prints one marker line per step on stdout, flushed at once):

- ``upload``: on an empty log, appends :data:`RECORDS` records, rolls and flushes
  (``produced <next offset>``), then ships every eligible segment with the real
  :meth:`RemoteTier.copy_segment`, throttled by ``upload_bytes_per_sec`` =
  :data:`SLOW_RATE` so each segment's upload takes seconds. Markers: ``copying <base>``
  before each copy, ``sent <base> <bytes>`` from the copy's progress callback,
  ``copied <base>`` after it, ``done`` at the end. The test kills it while a copy is
  under way.
- ``round``: like ``upload`` (same records, a slower throttle: :data:`ROUND_RATE`), but ships with one real
  :meth:`TieredLog.tier_once`, which keeps two copies in flight; markers ``produced``
  and ``done``. The test kills it while two copies are under way.
- ``delete``: opens the (already shipped) log with remote retention
  (``retention_bytes`` = :data:`RETAIN_BYTES`) and runs one real
  :meth:`TieredLog.tier_once`, which deletes the oldest remote segments. ``KILL_AT`` = N
  stops the process at the N-th delete request sent to the store: a Python audit hook
  (``os.remove`` of a segment object for ``fs:``, ``http.client.send`` of a DeleteObjects
  body for ``s3:``; the library is neither changed nor mocked) prints ``deleting <N>``
  and then sleeps, so the test kills it with the deletion half done.
"""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path
from typing import Any

from tiered_log import LogConfig, ProducerRecord, RemoteStorage
from tiered_log.partition import TieredLog
from tiered_log.remote.tier import TierConfig

LOG_ID = "crash-0"
SEGMENT_BYTES = 8 * 1024
RECORDS = 400
SLOW_RATE = 4 * 1024
"""Upload rate limit (bytes/s) of the ``upload`` mode: about 2 s per segment."""
ROUND_RATE = SLOW_RATE // 4
"""The ``round`` mode's: two copies share it, about 16 s each, so both are surely under
way when the test has seen bytes of both (on a busy machine the second starts late)."""
RETAIN_BYTES = 3 * SEGMENT_BYTES
"""Remote retention of the ``delete`` mode: keeps about the last 3 segments."""
TS_BASE = 1_700_000_000_000


def expected_record(offset: int) -> ProducerRecord:
    """The record at ``offset``: value, key, headers and timestamp derive from it."""
    h = hashlib.sha256(str(offset).encode()).digest()
    value = h * (1 + h[0] % 8)
    key = h[:4] if offset % 3 else None
    headers: tuple[tuple[str, bytes | None], ...] = (
        (("o", str(offset).encode()),) if offset % 4 == 0 else ()
    )
    return ProducerRecord(value, key=key, headers=headers, timestamp=TS_BASE + offset)


def log_config() -> LogConfig:
    return LogConfig(segment_bytes=SEGMENT_BYTES, index_interval_bytes=512)


def open_storage(spec: str) -> RemoteStorage:
    """The store a ``STORAGE`` argument names (see the module docstring)."""
    kind, _, rest = spec.partition(":")
    if kind == "fs":
        from tiered_log.remote.fs import LocalDirStorage

        return LocalDirStorage(rest)
    if kind == "s3":
        from tiered_log.remote.s3 import S3Storage

        endpoint, bucket, prefix = [*rest.split("|"), ""][:3]
        # multipart_threshold=0: even a small segment goes up as a multipart upload, so a
        # kill between its part and the completion leaves an unfinished upload behind.
        return S3Storage(
            bucket, prefix=prefix, endpoint_url=endpoint, retries=0, multipart_threshold=0
        )
    raise SystemExit(f"bad storage spec {spec!r}")


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def produce(tlog: TieredLog, n: int) -> None:
    start = tlog.next_offset
    recs = [expected_record(o) for o in range(start, start + n)]
    for i in range(0, len(recs), 40):
        tlog.append_batch(recs[i : i + 40])
    tlog.flush()
    tlog.roll()


def open_produced(log_dir: Path, storage: RemoteStorage, rate: int = SLOW_RATE) -> TieredLog:
    """The log of the ``upload`` and ``round`` modes, throttled to ``rate`` bytes/s, with
    its records."""
    # Plain copies: the upload itself is throttled, so a kill lands inside it (an encoded
    # copy's data object goes up whole once its chunks are encoded: test_archive_codec).
    tier = TierConfig(upload_bytes_per_sec=rate, chunk_bytes=1024, compression="none")
    tlog = TieredLog(
        log_dir, log_id=LOG_ID, storage=storage, config=log_config(), tier=tier, start_shipper=False
    )
    if tlog.next_offset == 0:
        produce(tlog, RECORDS)
    say(f"produced {tlog.next_offset}")
    return tlog


def run_upload(log_dir: Path, storage: RemoteStorage) -> None:
    tlog = open_produced(log_dir, storage)
    remote = tlog.remote_tier
    assert remote is not None
    remote.cleanup_pending()
    for seg in tlog.eligible_segments():
        base = seg.base_offset
        say(f"copying {base}")
        remote.copy_segment(seg, progress=lambda n, base=base: say(f"sent {base} {n}"))  # type: ignore[misc]
        say(f"copied {base}")
    say("done")
    tlog.close()


def run_round(log_dir: Path, storage: RemoteStorage) -> None:
    tlog = open_produced(log_dir, storage, ROUND_RATE)
    tlog.tier_once()
    say("done")
    tlog.close()


def run_delete(log_dir: Path, storage: RemoteStorage, kill_at: int) -> None:
    seen = 0
    bucket_root = getattr(storage, "root", None)

    def hook(event: str, args: tuple[Any, ...]) -> None:
        nonlocal seen
        if event == "os.remove" and bucket_root is not None:
            path = str(args[0])
            if not (path.startswith(str(bucket_root)) and "/segments/" in path):
                return
        elif event == "http.client.send" and bucket_root is None:
            data = args[1]
            if not (isinstance(data, (bytes, bytearray)) and data.startswith(b"<Delete")):
                return
        else:
            return
        seen += 1
        if seen == kill_at:
            say(f"deleting {seen}")
            time.sleep(3600)  # the test kills us here

    # Local copies are kept: the crash must not leave them serving deleted offsets. The
    # store calls run in this process (no tier worker), where the audit hook sees them.
    tier = TierConfig(retention_bytes=RETAIN_BYTES, chunk_bytes=1024, worker_processes=0)
    tlog = TieredLog(
        log_dir, log_id=LOG_ID, storage=storage, config=log_config(), tier=tier, start_shipper=False
    )
    say(f"opened {tlog.log_start_offset} {tlog.next_offset}")
    sys.addaudithook(hook)
    tlog.tier_once()
    say(f"done {tlog.log_start_offset}")
    tlog.close()


def main(argv: list[str]) -> None:
    mode, log_dir, spec = argv[:3]
    storage = open_storage(spec)
    if mode == "upload":
        run_upload(Path(log_dir), storage)
    elif mode == "round":
        run_round(Path(log_dir), storage)
    elif mode == "delete":
        run_delete(Path(log_dir), storage, int(argv[3]))
    else:
        raise SystemExit(f"bad mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
