"""What ``tiered-log produce`` does with its input: lines into records, records into
batches sent within a linger, and the account of what was acknowledged.

- :func:`line_to_record`: a line is a record's value, or with a key separator (kcat's
  ``-K``) the key before the first separator and the value after it (a line without the
  separator is a value without a key, as kcat does), or every record gets one ``--key``.
  An empty value is sent as an empty value, or with ``-Z`` (kcat's) as a null value (a
  tombstone: ``-K :`` and a line ``key:`` deletes ``key`` in a compacted topic).
- :func:`lines_with_linger`: the lines of a stream in batches: a batch is sent once it has
  ``batch_size`` records or its first record has waited ``linger_ms`` (Kafka's
  ``linger.ms``), so a line typed at a terminal is sent within a fraction of a second
  instead of at the end of the input. The input is read in a daemon thread.
- :class:`Acknowledged`: per partition, how many records the service acknowledged and
  their offsets; the summary line printed at the end, on Ctrl-C too.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO

from ..format.records import ProducerRecord
from .registry import counted

_EOF = object()


def line_to_record(
    line: bytes, *, separator: bytes | None, key: bytes | None, empty_is_null: bool = False
) -> ProducerRecord | bytes:
    """The record a line of input stands for (see the module docstring); an empty value
    is a null value with ``empty_is_null`` (kcat's ``-Z``), else an empty one."""
    value: bytes | None = line
    if separator is not None:
        k, sep, v = line.partition(separator)
        if sep:
            key, value = k, v
    if empty_is_null and not value:
        value = None
    if key is None and value is not None:
        return value
    return ProducerRecord(value, key=key)


READ_BYTES = 1 << 16
"""How much the input thread asks of the input at a time."""


def fd_lines(fd: int) -> Iterator[bytes]:
    """The lines of file descriptor ``fd`` without their line ending (``\\n`` or
    ``\\r\\n``), each as soon as it is complete. Reads the descriptor itself, not a
    buffered file object: a thread still blocked in a read when the program exits
    holds no lock the interpreter's shutdown needs (``sys.stdin.buffer``'s would abort it)."""
    pending = b""
    while True:
        chunk = os.read(fd, READ_BYTES)
        if not chunk:
            break
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            yield line[:-1] if line.endswith(b"\r") else line
    if pending:
        yield pending[:-1] if pending.endswith(b"\r") else pending


def _read_into(fd: int, out: queue.Queue[object]) -> None:
    """Put each line of ``fd`` on ``out``, then the end marker (or the error)."""
    try:
        for line in fd_lines(fd):
            out.put(line)
        out.put(_EOF)
    except BaseException as exc:  # handed to the reading thread, which raises it
        out.put(exc)


def lines_with_linger(
    stream: IO[bytes], *, batch_size: int, linger_ms: int
) -> Iterator[tuple[list[bytes], bool]]:
    """Batches of lines of ``stream`` (read through its file descriptor, see
    :func:`fd_lines`): ``(lines, at_end)``. A batch is handed out once it
    holds ``batch_size`` lines, once ``linger_ms`` passed since its first line came, or at
    the end of the input. An error reading the stream is raised here."""
    lines: queue.Queue[object] = queue.Queue(maxsize=max(4 * batch_size, 1024))
    threading.Thread(
        target=_read_into, args=(stream.fileno(), lines), name="tl-produce-input", daemon=True
    ).start()
    batch: list[bytes] = []
    deadline = 0.0
    while True:
        try:
            item = lines.get(timeout=max(0.0, deadline - time.monotonic()) if batch else None)
        except queue.Empty:
            yield batch, False
            batch = []
            continue
        if item is _EOF:
            yield batch, True
            return
        if isinstance(item, BaseException):
            raise item
        assert isinstance(item, bytes)
        if not batch:
            deadline = time.monotonic() + linger_ms / 1000
        batch.append(item)
        if len(batch) >= batch_size:
            yield batch, False
            batch = []


@dataclass
class _Range:
    count: int
    first: int
    last: int


@dataclass
class Acknowledged:
    """What the service acknowledged of one ``produce`` run, partition by partition, and
    what was not sent."""

    topic: str
    partitions: dict[int, _Range] = field(default_factory=dict)
    unsent: int = 0
    """Records read but not sent (a batch not complete when the run stopped)."""
    in_flight: int = 0
    """Records of a request whose answer never came (stopped while it was under way)."""

    @property
    def total(self) -> int:
        return sum(r.count for r in self.partitions.values())

    def add(self, partition: int, offsets: list[int]) -> None:
        """A produce to ``partition`` acknowledged ``offsets``."""
        if not offsets:
            return
        r = self.partitions.get(partition)
        if r is None:
            self.partitions[partition] = _Range(len(offsets), offsets[0], offsets[-1])
        else:
            r.count += len(offsets)
            r.last = offsets[-1]

    def summary(self, *, interrupted: bool = False) -> str:
        """One line: ``produced 1,000 records to orders/0 (offsets 0..999)``, then one
        ``partition N offsets a..b`` per partition when several, and what was skipped or
        not acknowledged."""
        head = f"produced {counted(self.total, 'record')} to {self.topic}"
        parts = sorted(self.partitions.items())
        if len(parts) == 1:
            p, r = parts[0]
            text = f"{head}/{p} (offsets {r.first}..{r.last})"
        elif parts:
            text = (
                head
                + ": "
                + ", ".join(f"partition {p} offsets {r.first}..{r.last}" for p, r in parts)
            )
        else:
            text = head
        notes = []
        if self.in_flight:
            notes.append(
                f"{counted(self.in_flight, 'record')} sent but not acknowledged "
                "(they may or may not be in the log)"
            )
        if self.unsent:
            notes.append(f"{counted(self.unsent, 'record')} read but not sent")
        if notes:
            text += ", " + ", ".join(notes)
        return f"interrupted: {text}" if interrupted else text


__all__ = ["Acknowledged", "fd_lines", "line_to_record", "lines_with_linger"]
