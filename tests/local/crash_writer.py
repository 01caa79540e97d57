"""Writer process for the crash tests: appends to a Log until it is killed.

Usage::

    python crash_writer.py DIR SEED SEGMENT_BYTES [KILL_AT]

Opens the log in DIR (small segments, so it rolls often; retention on, so old segments
are deleted while it runs), prints ``ready <next offset>`` and appends batches of random
sizes forever. Every record's content is a pure function of its offset
(:func:`expected_record`), so a checker can verify any offset it finds. After some batches
it calls ``log.flush()`` and then, only once flush returned, records the flushed offset
in ``DIR/../acked`` atomically (tmp file, fsync, rename, fsync the directory).

``KILL_AT`` (optional) makes the process SIGKILL itself at an exact point of a roll,
found through a Python audit hook on the library's real file operations (the library
itself is not changed or mocked):

- ``index-rename:N``       before the N-th rename of a ``.index`` tmp file into place
- ``timeindex-rename:N``   before the N-th rename of a ``.timeindex`` tmp file
- ``create-store:N``       before the N-th creation of a new segment store (O_TRUNC)
- ``unlink-index:N``       before the N-th deletion of a ``.index`` file (retention:
                           the segment's store is already gone)
"""

from __future__ import annotations

import hashlib
import os
import random
import signal
import sys
from pathlib import Path

from tiered_log import Log, LogConfig, ProducerRecord

TS_BASE = 1_600_000_000_000


def expected_record(offset: int) -> ProducerRecord:
    """The record the writer appends at ``offset``: value, key, headers and timestamp."""
    h = hashlib.sha256(str(offset).encode()).digest()
    size = 1 + int.from_bytes(h[:2], "little") % 600
    value = (h * (size // len(h) + 1))[:size]
    key = None
    if h[2] % 3 == 0:
        key = h[3 : 4 + h[3] % 20]
    elif h[2] % 3 == 1 and h[4] % 2:
        key = b""
    headers: tuple[tuple[str, bytes | None], ...] = ()
    if h[5] % 4 == 0:
        headers = (("offset", str(offset).encode()), ("none", None))
    elif h[5] % 4 == 1:
        headers = (("é-name", h[6 : 6 + h[6] % 12]),)
    return ProducerRecord(value, key=key, headers=headers, timestamp=TS_BASE + offset)


def config(segment_bytes: int) -> LogConfig:
    # No fsync per append (the default fsyncs each one): the writer flushes now and then,
    # so a kill finds appends that reached only the OS, as the tests mean it to.
    return LogConfig(
        segment_bytes=segment_bytes,
        index_interval_bytes=512,
        segment_ms=None,
        flush_messages=None,
        retention_bytes=max(64 * 1024, 40 * segment_bytes),
    )


def write_acked(path: Path, offset: int) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(str(offset))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def install_kill_hook(kill_at: str, directory: Path) -> None:
    event, _, nth = kill_at.partition(":")
    target = int(nth)
    seen = 0
    prefix = str(directory)

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    def hook(name: str, args: tuple[object, ...]) -> None:
        nonlocal seen
        hit = False
        if name == "os.rename" and event in ("index-rename", "timeindex-rename"):
            src, dst = str(args[0]), str(args[1])
            suffix = ".index" if event == "index-rename" else ".timeindex"
            hit = src.startswith(prefix) and dst.endswith(suffix)
        elif name == "open" and event == "create-store":
            path, flags = args[0], args[2]
            hit = (
                isinstance(path, str | os.PathLike)
                and str(path).endswith(".log")
                and str(path).startswith(prefix)
                and isinstance(flags, int)
                and bool(flags & os.O_TRUNC)
            )
        elif name == "os.remove" and event == "unlink-index":
            hit = str(args[0]).startswith(prefix) and str(args[0]).endswith(".index")
        if hit:
            seen += 1
            if seen == target:
                die()

    sys.addaudithook(hook)


def main() -> None:
    directory = Path(sys.argv[1])
    rng = random.Random(int(sys.argv[2]))
    segment_bytes = int(sys.argv[3])
    acked = directory.parent / "acked"
    log = Log.open(directory, config(segment_bytes))
    if len(sys.argv) > 4:
        install_kill_hook(sys.argv[4], directory)
    print("ready", log.next_offset, flush=True)
    while True:
        base = log.next_offset
        n = rng.randint(1, 12)
        first, last = log.append_batch([expected_record(base + i) for i in range(n)])
        if (first, last) != (base, base + n - 1):
            raise SystemExit(
                f"append_batch returned {(first, last)}, expected {(base, base + n - 1)}"
            )
        if rng.random() < 0.3:
            flushed = log.flush()
            write_acked(acked, flushed)
        if rng.random() < 0.1:
            log.enforce_retention()


if __name__ == "__main__":
    main()
