"""The leader-epoch file of one log: the first offset written in each leader epoch.

What it is for (Kafka's ``leader-epoch-checkpoint``, KIP-101 and KIP-279): every leader
of a partition is elected with a leader epoch one higher than the last; the leader
records, before it appends the first batch of its epoch, the epoch and that batch's
offset; a follower records the same as it appends the leader's batches. With these
entries a replica coming back can ask the leader "where does my latest epoch end in your
log?" (:meth:`LeaderEpochCache.end_offset_for`, Kafka's OffsetsForLeaderEpoch) and cut
its own log where the two histories diverge (:func:`divergence_point`), rather than at
the high watermark, which loses acknowledged records or keeps divergent ones.

Entries are ``(epoch, start_offset)``, strictly increasing in both: epoch ``e`` covers
the offsets from its start up to the next entry's start (the latest entry: up to the
log end). The invariant is kept by every change (:meth:`~LeaderEpochCache.assign`
replaces the entries a new one contradicts; the truncations keep it by construction) and
checked on load.

The file, ``<log dir>/leader-epoch-checkpoint`` (:data:`~tiered_log.format.naming.LEADER_EPOCH_FILE`),
is ASCII text, Kafka's own layout, each line ended by ``\\n``::

    0                 version
    2                 number of entries
    0 0               epoch start_offset, one line per entry, in order
    3 1200

An empty cache is ``0\\n0\\n``; a missing file is an empty cache. The whole file is
rewritten on every change with :func:`~tiered_log.local.files.write_atomic` (``<file>.tmp``,
fsync, rename, fsync the directory): a crash leaves the old file or the new one, and a
leftover ``.tmp`` is never read (the log removes it when it opens). A file that does not
parse, whose count disagrees with its lines, or whose entries are not strictly increasing
is damaged: loading it raises :class:`~tiered_log.errors.CorruptIndexError` naming it.

Thread-safety: a :class:`LeaderEpochCache` is safe to share between threads: one lock
guards the entries and the file, so a change and its rewrite happen together and readers
never see a half-made change. One instance per log directory (the log's directory lock
keeps other processes out); two instances over one file would overwrite each other.
"""

from __future__ import annotations

import threading
from bisect import bisect_left, bisect_right
from pathlib import Path
from typing import NamedTuple

from ..errors import CorruptIndexError, InvalidArgumentError
from ..format import naming
from .files import write_atomic

UNDEFINED_EPOCH = -1
"""Kafka's "no epoch" (``UNDEFINED_EPOCH``), in :meth:`LeaderEpochCache.end_offset_for`."""
UNDEFINED_EPOCH_OFFSET = -1
"""Kafka's "no offset" (``UNDEFINED_EPOCH_OFFSET``), in :meth:`LeaderEpochCache.end_offset_for`."""
FILE_VERSION = 0


class EpochEntry(NamedTuple):
    """Leader epoch ``epoch`` began at offset ``start_offset`` (its first record)."""

    epoch: int
    start_offset: int


class Truncation(NamedTuple):
    """Where a follower cuts its log (:func:`divergence_point`): ``offset`` is the new log
    end; ``complete`` is False when the follower must ask the leader again (for its
    latest epoch after the cut) before it fetches, as Kafka's fetcher does (KIP-279)."""

    offset: int
    complete: bool


def _check_entries(entries: list[EpochEntry]) -> str | None:
    """Why ``entries`` break the invariant (both fields >= 0, strictly increasing), or None."""
    for i, (epoch, start) in enumerate(entries):
        if epoch < 0 or start < 0:
            return f"entry {i} ({epoch} {start}) is negative"
        if i and (epoch <= entries[i - 1].epoch or start <= entries[i - 1].start_offset):
            prev = entries[i - 1]
            return (
                f"entry {i} ({epoch} {start}) does not follow "
                f"({prev.epoch} {prev.start_offset}) in both epoch and offset"
            )
    return None


def encode(entries: list[EpochEntry]) -> bytes:
    """The file's bytes for ``entries`` (layout in the module docstring)."""
    lines = [str(FILE_VERSION), str(len(entries))]
    lines += [f"{e.epoch} {e.start_offset}" for e in entries]
    return ("\n".join(lines) + "\n").encode("ascii")


def decode(data: bytes, path: Path) -> list[EpochEntry]:
    """The entries of a leader-epoch file's bytes; CorruptIndexError (naming ``path``) if
    they are damaged in any way."""

    def bad(why: str) -> CorruptIndexError:
        return CorruptIndexError(f"leader-epoch file {path} is damaged: {why}")

    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise bad("not ASCII text") from None
    if not text.endswith("\n"):
        raise bad("it does not end with a newline (torn or empty)")
    lines = text[:-1].split("\n")
    if len(lines) < 2:
        raise bad("it has no count line")
    if lines[0] != str(FILE_VERSION):
        raise bad(f"version line {lines[0][:20]!r}, expected {FILE_VERSION}")
    if not lines[1].isdigit():
        raise bad(f"count line {lines[1][:20]!r} is not a number")
    if int(lines[1]) != len(lines) - 2:
        raise bad(f"count {lines[1]} but {len(lines) - 2} entry lines")
    entries = []
    for n, line in enumerate(lines[2:], start=3):
        fields = line.split(" ")
        if len(fields) != 2 or not all(f.isdigit() for f in fields):
            raise bad(f"line {n} {line[:40]!r} is not 'epoch start_offset'")
        entries.append(EpochEntry(int(fields[0]), int(fields[1])))
    why = _check_entries(entries)
    if why:
        raise bad(why)
    return entries


class LeaderEpochCache:
    """The leader epochs of one log, kept in memory and in ``<directory>/leader-epoch-checkpoint``.

    Every change is written to the file (atomically, fsynced) before the method returns;
    the entries stay strictly increasing in epoch and in start offset. Thread-safe (see
    the module docstring). Offsets and epochs are ints >= 0; a negative one is refused
    with :class:`~tiered_log.errors.InvalidArgumentError`.
    """

    def __init__(self, directory: Path) -> None:
        """Load the file in ``directory`` (missing: empty cache); CorruptIndexError if it
        is damaged. Creates no file until the first change."""
        self.path = Path(directory) / naming.LEADER_EPOCH_FILE
        self._lock = threading.Lock()
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            self._entries: list[EpochEntry] = []
        else:
            self._entries = decode(data, self.path)

    # ---- reading --------------------------------------------------------------------

    def entries(self) -> list[EpochEntry]:
        """A copy of the entries, oldest first."""
        with self._lock:
            return list(self._entries)

    @property
    def latest_entry(self) -> EpochEntry | None:
        """The entry of the highest epoch, or None when the cache is empty."""
        with self._lock:
            return self._entries[-1] if self._entries else None

    @property
    def latest_epoch(self) -> int | None:
        """The highest epoch recorded, or None when the cache is empty."""
        entry = self.latest_entry
        return None if entry is None else entry.epoch

    def epoch_for(self, offset: int) -> int | None:
        """The epoch ``offset`` was written in: that of the last entry starting at or
        before it; None if ``offset`` is below the first entry (or the cache is empty).
        Offsets past the log end answer the latest epoch (the cache does not know the
        log end), as Kafka's ``epochForOffset``."""
        with self._lock:
            i = bisect_right(self._entries, offset, key=lambda e: e.start_offset)
            return self._entries[i - 1].epoch if i else None

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's OffsetsForLeaderEpoch answer, on the leader: ``(epoch found, end offset)``.

        - ``epoch`` is the latest epoch: ``(epoch, log_end_offset)``;
        - an older epoch: ``(the largest epoch <= epoch present, start offset of the
          first epoch > epoch)``: for an epoch present that is itself and its end; for one
          missing between two present, the lower one and its end;
        - below the earliest epoch present: ``(epoch, start offset of the earliest
          entry)``, as Kafka (since KAFKA-7415's rework): the requested epoch echoed,
          ending where the log's known history begins (the data below was removed from the
          log, so the follower keeps nothing past it);
        - :data:`UNDEFINED_EPOCH` requested, an epoch above the latest, or an empty
          cache: ``(UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)``, i.e. ``(-1, -1)``: the
          follower falls back to its high watermark.
        """
        with self._lock:
            entries = self._entries
            if epoch == UNDEFINED_EPOCH or not entries:
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if epoch == entries[-1].epoch:
                return epoch, log_end_offset
            higher = bisect_right(entries, epoch, key=lambda e: e.epoch)
            if higher == len(entries):
                return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
            if higher == 0:
                return epoch, entries[0].start_offset
            return entries[higher - 1].epoch, entries[higher].start_offset

    # ---- changing (each change rewrites the file) -----------------------------------

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` began at ``start_offset``.

        No-op when the latest entry is this epoch starting at or before ``start_offset``
        (the common case: every append of a batch of the current epoch calls this).
        An epoch lower than the latest is refused (InvalidArgumentError): a log never goes
        back to an older leader; it is truncated first (:meth:`truncate_from_end`), which
        removes the newer epochs. Otherwise the entries this one contradicts (starting at
        or after ``start_offset``, or of the same epoch) are dropped and the new one is
        appended, as Kafka: the latest epoch again with a lower start moves its start down;
        a higher epoch starting at or below the latest entry's start replaces the entries
        from there on (they held no records the log still has).
        """
        if epoch < 0 or start_offset < 0:
            raise InvalidArgumentError(
                f"leader epoch {epoch} and start offset {start_offset} must be >= 0"
            )
        with self._lock:
            entries = self._entries
            if entries:
                last = entries[-1]
                if epoch < last.epoch:
                    raise InvalidArgumentError(
                        f"leader epoch {epoch} is below the latest epoch {last.epoch} of {self.path}"
                    )
                if epoch == last.epoch and start_offset >= last.start_offset:
                    return
            keep = list(entries)
            while keep and (keep[-1].epoch >= epoch or keep[-1].start_offset >= start_offset):
                keep.pop()
            keep.append(EpochEntry(epoch, start_offset))
            self._save(keep)

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was truncated to ``end_offset`` (its new end): drop the entries
        starting at or after it. A no-op when none does."""
        if end_offset < 0:
            raise InvalidArgumentError(f"end offset {end_offset} must be >= 0")
        with self._lock:
            cut = bisect_left(self._entries, end_offset, key=lambda e: e.start_offset)
            if cut < len(self._entries):
                self._save(self._entries[:cut])

    def truncate_from_start(self, start_offset: int) -> None:
        """The log start moved up to ``start_offset`` (retention, deletion of records):
        drop the entries wholly below it and clamp the first one left to start there, as
        Kafka: the entry covering ``start_offset`` is kept with that start; entries at or
        after it stay. A no-op when the first entry already starts at or after it."""
        if start_offset < 0:
            raise InvalidArgumentError(f"start offset {start_offset} must be >= 0")
        with self._lock:
            covering = bisect_right(self._entries, start_offset, key=lambda e: e.start_offset)
            if covering == 0:
                return
            first = self._entries[covering - 1]
            if first.start_offset == start_offset and covering == 1:
                return
            self._save([EpochEntry(first.epoch, start_offset), *self._entries[covering:]])

    def clear(self) -> None:
        """Drop every entry (a log emptied or replaced wholesale)."""
        with self._lock:
            if self._entries:
                self._save([])

    def _save(self, entries: list[EpochEntry]) -> None:
        """Write ``entries`` to the file, then make them the cache's (caller holds the
        lock): if the write fails, memory still matches the file on disk."""
        assert _check_entries(entries) is None, entries
        write_atomic(self.path, encode(entries))
        self._entries = entries

    def __repr__(self) -> str:
        return f"LeaderEpochCache({self.path}, {self.entries()})"


def divergence_point(
    follower_cache: LeaderEpochCache,
    follower_leo: int,
    leader_answer: tuple[int, int],
    *,
    high_watermark: int = 0,
) -> Truncation:
    """Where a follower truncates its log after asking the leader about its latest epoch.

    The follower sent ``follower_cache.latest_epoch``; ``leader_answer`` is the leader's
    :meth:`~LeaderEpochCache.end_offset_for` for it, ``(leader_epoch, leader_end)``.
    As Kafka's fetcher (KIP-279):

    - the leader knows no such epoch (``leader_end == UNDEFINED_EPOCH_OFFSET``), or the
      follower has none to ask about: cut at ``min(high_watermark, follower_leo)``,
      complete (the high watermark is all the follower may trust);
    - an answer without an epoch (``leader_epoch == UNDEFINED_EPOCH``, an old-style
      leader): ``min(leader_end, follower_leo)``, complete;
    - the follower has ``leader_epoch`` too: cut at ``min(leader_end, the follower's own
      end of that epoch, follower_leo)``, complete: below that the logs agree (an epoch
      below the follower's first counts as ending at the follower's first entry, as
      :meth:`~LeaderEpochCache.end_offset_for` answers it);
    - the follower lacks ``leader_epoch`` but has a lower one: cut at the follower's end of
      the largest epoch below it (``min`` with ``follower_leo``), NOT complete: the
      follower truncates its log and cache there and asks again for its new latest epoch.

    ``high_watermark``: the follower's, used only in the first case (default 0: keep
    nothing the leader cannot vouch for). Pure: it truncates nothing itself.
    """
    leader_epoch, leader_end = leader_answer
    if leader_end == UNDEFINED_EPOCH_OFFSET or follower_cache.latest_epoch is None:
        return Truncation(min(high_watermark, follower_leo), True)
    if leader_epoch == UNDEFINED_EPOCH:  # an answer without epochs: its offset only
        return Truncation(min(leader_end, follower_leo), True)
    own_epoch, own_end = follower_cache.end_offset_for(leader_epoch, follower_leo)
    if own_epoch == UNDEFINED_EPOCH:  # leader_epoch is above all the follower has
        return Truncation(min(leader_end, follower_leo), True)
    if own_epoch == leader_epoch:
        return Truncation(min(own_end, leader_end, follower_leo), True)
    return Truncation(min(own_end, follower_leo), False)


__all__ = [
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
    "EpochEntry",
    "LeaderEpochCache",
    "Truncation",
    "decode",
    "divergence_point",
    "encode",
]
