"""Every file name and object key of tiered_log, in one place.

Local segment files are named by their base offset, zero-padded to 20 digits so that
``ls`` sorts them numerically (as Kafka does)::

    00000000000000000000.log         store: record frames (see :mod:`.records`)
    00000000000000000000.index       offset index (see :mod:`.index`)
    00000000000000000000.timeindex   time index (see :mod:`.index`)

and files per log beside them: ``leader-epoch-checkpoint``, the first offset of each
leader epoch (see :mod:`tiered_log.local.leader_epoch`), and, for a replicated log,
``high-watermark-checkpoint``, its last checkpointed high watermark (see
:mod:`tiered_log.partition.replication`).

Pure functions; safe from any thread.
"""

from __future__ import annotations

from pathlib import Path

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIMEINDEX_SUFFIX)
TMP_SUFFIX = ".tmp"
CUT_SUFFIX = ".cut"
"""``<base>.cut``: a truncation inside a batch in progress (see ``Segment.truncate_to``)."""
LEADER_EPOCH_FILE = "leader-epoch-checkpoint"
"""The log's leader-epoch file: the first offset of each leader epoch (see
:mod:`tiered_log.local.leader_epoch`)."""
HIGH_WATERMARK_FILE = "high-watermark-checkpoint"
"""A replicated log's high watermark, checkpointed (see :mod:`tiered_log.partition.replication`)."""
LOG_START_FILE = "log-start-offset-checkpoint"
"""The partition's log start as records were deleted below it (Kafka's DeleteRecords;
see :mod:`tiered_log.partition.log_start`): one decimal offset."""
CREATED_EMPTY_FILE = "created-empty"
"""Empty marker file: a cluster replica's log created empty while its node was a running
member (a topic created, not a disk found empty at a start): its emptiness is what its
leaders sent it, never a loss (see :meth:`TieredLog.needs_bucket_view
<tiered_log.partition.log.TieredLog.needs_bucket_view>`)."""
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


# ---- the remote tier -------------------------------------------------------------------
#
# Local remote-index files live in ``<log dir>/remote/``, named by the first offset they
# cover: ``<first>.remoteLogIndex``, ``<first>.remoteOffsetIndex``, ``<first>.remoteTimeIndex``
# (layouts in :mod:`.remote_index`); the copy state journal is ``segments.jsonl`` and the
# log's remote metadata ``meta.json`` (both in :mod:`tiered_log.remote.metadata`).
#
# Objects in the bucket, for a log with id ``L`` (topic-partition, e.g. ``orders-3``)::
#
#     <prefix>/<h>/<L>/segments/<base>-<segment id>.log   segment data (record frames)
#     <prefix>/<h>/<L>/segments/<base>-<segment id>.rli   manifest: the segment's offset and
#                                                         time indexes + remoteLogIndex entries
#     <prefix>/<h>/<L>/meta.json                          log start offset, truncations
#
# ``<h>`` is 4 hex digits of a hash of ``L``: different logs spread over the key space (and
# so over the store's partitions), while one log's objects share one prefix and list
# cheaply. The two objects of a copy go up at the same time; a copy is complete when both
# exist (an attempt with only one of them is incomplete and is cleaned up).

# ---- the service's data directory and its topics' objects in the bucket -----------------
#
#   <data dir>/.lock                 the data-dir lock (one server per directory)
#   <data dir>/topics/<name>/topic.json, <name>/<partition>/   a topic and its partition logs
#   <data dir>/trash/                topics being deleted
#   topics/<name>.json               (bucket) a topic's metadata, for a restore from the bucket

DATA_DIR_LOCK = ".lock"
TOPICS_DIR = "topics"
TRASH_DIR = "trash"
TOPIC_FILE = "topic.json"
TOPIC_OBJECTS_PREFIX = "topics/"


def topic_object_key(name: str) -> str:
    """Key of a topic's metadata in the remote store."""
    return f"{TOPIC_OBJECTS_PREFIX}{name}.json"


REMOTE_DIR = "remote"
"""A log's remote-tier files live in ``<log dir>/remote/``: these names below it."""
COPY_JOURNAL_FILE = "segments.jsonl"
REMOTE_META_FILE = "meta.json"
LOCATION_FILE = "location.json"
REMOTE_INDEX_DIR = "index"
CHUNK_CACHE_DIR = "cache"
REMOTE_LOG_INDEX_SUFFIX = ".remoteLogIndex"
REMOTE_OFFSET_INDEX_SUFFIX = ".remoteOffsetIndex"
REMOTE_TIME_INDEX_SUFFIX = ".remoteTimeIndex"
REMOTE_INDEX_SUFFIXES = (
    REMOTE_LOG_INDEX_SUFFIX,
    REMOTE_OFFSET_INDEX_SUFFIX,
    REMOTE_TIME_INDEX_SUFFIX,
)
RLI_SUFFIX = ".rli"
SEGMENT_OBJECT_SUFFIXES = (LOG_SUFFIX, RLI_SUFFIX)

_LOG_ID_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def validate_log_id(log_id: str) -> str:
    """Return ``log_id`` if it is safe in a path and an object key; else raise."""
    from ..errors import InvalidArgumentError

    if not log_id or len(log_id) > 249 or log_id in (".", "..") or not set(log_id) <= _LOG_ID_OK:
        raise InvalidArgumentError(
            f"log id {log_id!r} must be 1-249 characters of letters, digits, '.', '_', '-'"
        )
    return log_id


def log_prefix(log_id: str) -> str:
    """Key prefix (no store prefix, no trailing slash) of all objects of one log."""
    import xxhash

    h = xxhash.xxh3_64_hexdigest(log_id.encode())[:4]
    return f"{h}/{log_id}"


def segment_object_key(log_id: str, base_offset: int, segment_id: str, suffix: str) -> str:
    """Object key of one file of one copied segment."""
    return f"{log_prefix(log_id)}/segments/{offset_name(base_offset)}-{segment_id}{suffix}"


def manifest_key_of(data_key: str) -> str:
    """The manifest's object key (``.rli``) of a copied segment's data object key."""
    return data_key[: -len(LOG_SUFFIX)] + RLI_SUFFIX


def data_key_of(manifest_key: str) -> str:
    """The data object's key (``.log``) of a copied segment's manifest key."""
    return manifest_key[: -len(RLI_SUFFIX)] + LOG_SUFFIX


def segment_objects_prefix(log_id: str) -> str:
    return f"{log_prefix(log_id)}/segments/"


def meta_object_key(log_id: str) -> str:
    return f"{log_prefix(log_id)}/meta.json"


def deletion_marker_key(log_id: str) -> str:
    """The deletion marker of a deleted topic's log, beside ``meta.json``: put before
    the log's other objects are deleted and deleted after them, it is what tells
    ``archive reconcile`` that what is left of the log is a deleted topic's
    (:mod:`tiered_log.remote.reconcile`)."""
    return f"{log_prefix(log_id)}/deleted.json"


def snapshot_object_key(log_id: str) -> str:
    """The partition snapshot's key, beside ``meta.json`` (:mod:`tiered_log.remote.snapshot`)."""
    return f"{log_prefix(log_id)}/snapshot.bin"


def parse_segment_object_key(key: str) -> tuple[int, str, str] | None:
    """``(base_offset, segment_id, suffix)`` of a segment object key, or None."""
    name = key.rsplit("/", 1)[-1]
    for suffix in SEGMENT_OBJECT_SUFFIXES:
        if name.endswith(suffix):
            stem = name[: -len(suffix)]
            base, sep, seg_id = stem.partition("-")
            if sep and len(base) == OFFSET_DIGITS and base.isdigit() and seg_id:
                return int(base), seg_id, suffix
    return None


def suffix_of(key: str) -> str | None:
    """The segment-object suffix of ``key`` (``.log``, ``.rli``), or None if it is not one."""
    parsed = parse_segment_object_key(key)
    return None if parsed is None else parsed[2]
