"""Every file name and object key of tiered_log, in one place.

Local segment files are named by their base offset, zero-padded to 20 digits so that
``ls`` sorts them numerically (as Kafka does)::

    00000000000000000000.log         store: record frames (see :mod:`.records`)
    00000000000000000000.index       offset index (see :mod:`.index`)
    00000000000000000000.timeindex   time index (see :mod:`.index`)

Pure functions; safe from any thread.
"""

from __future__ import annotations

from pathlib import Path

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX)
TMP_SUFFIX = ".tmp"
OFFSET_DIGITS = 20


def offset_name(offset: int) -> str:
    """The 20-digit zero-padded form of ``offset``."""
    return f"{offset:0{OFFSET_DIGITS}d}"


def segment_path(directory: Path, base_offset: int, suffix: str) -> Path:
    """Path of one of a segment's files."""
    return directory / (offset_name(base_offset) + suffix)


def parse_offset_name(name: str, suffix: str) -> int | None:
    """Base offset of a segment file name, or None if ``name`` is not one."""
    if not name.endswith(suffix):
        return None
    stem = name[: -len(suffix)]
    if len(stem) != OFFSET_DIGITS or not stem.isdigit():
        return None
    return int(stem)


def list_segment_bases(directory: Path) -> list[int]:
    """Sorted base offsets of every store file in ``directory``."""
    bases = []
    for p in directory.iterdir():
        b = parse_offset_name(p.name, LOG_SUFFIX)
        if b is not None:
            bases.append(b)
    return sorted(bases)
