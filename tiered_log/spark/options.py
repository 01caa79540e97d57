"""Options of the ``tiered_log`` Spark data source, parsed once into frozen values.

Spark passes options as a case-insensitive map of strings. :func:`parse_read_options` and
:func:`parse_write_options` turn it into :class:`ReadOptions` / :class:`WriteOptions`
(picklable: they travel from the driver to the executors inside the reader/writer) and
raise ``ValueError`` with a clear message on anything malformed or unknown (a misspelt
option name is an error, not silently ignored). The source reads and writes the topic its
options name: a path given to ``load()``, ``save()`` or ``start()`` is refused too.

Offsets follow Spark's Kafka source: ``earliest``, ``latest``, or JSON per partition,
``{"orders": {"0": 23, "1": -2}}`` (``-2`` earliest, ``-1`` latest); the topic level may
be left out (``{"0": 23}``). Partitions missing from the JSON take the default (earliest
for a start, latest for an end).

Pure functions and immutable values: safe from any thread.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

EARLIEST = -2
LATEST = -1

_S3_KEYS = {
    "s3.endpointurl": "endpoint_url",
    "s3.region": "region",
    "s3.accesskey": "access_key",
    "s3.secretkey": "secret_key",
    "s3.pathstyle": "path_style",
}

READ_OPTIONS = frozenset(
    {
        "serviceurl",
        "token",
        "bucketurl",
        "topic",
        "partitions",
        "startingoffsets",
        "endingoffsets",
        "startingtimestamp",
        "endingtimestamp",
        "includeheaders",
        "minpartitions",
        "failondataloss",
        "maxoffsetspertrigger",
        "fetchbytes",
        "filterpushdown",
        *_S3_KEYS,
    }
)
"""Every read option (lower case; Spark matches option names case-insensitively)."""

WRITE_OPTIONS = frozenset(
    {"serviceurl", "token", "topic", "batchrecords", "batchbytes", "compression"}
)
"""Every write option (lower case)."""


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """A start or end position: ``earliest``/``latest`` or explicit per-partition offsets.

    ``per_partition`` maps a partition to an offset or to EARLIEST/LATEST; partitions not
    in it use ``default`` (EARLIEST or LATEST).
    """

    default: int
    per_partition: tuple[tuple[int, int], ...] = ()

    def for_partition(self, partition: int) -> int:
        for p, off in self.per_partition:
            if p == partition:
                return off
        return self.default


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """What a read (batch or streaming) was asked for; see the module docstring."""

    service_url: str
    topic: str
    token: str | None = None
    bucket_url: str | None = None
    s3: tuple[tuple[str, Any], ...] = ()
    partitions: tuple[int, ...] | None = None
    starting: OffsetSpec = field(default_factory=lambda: OffsetSpec(EARLIEST))
    ending: OffsetSpec = field(default_factory=lambda: OffsetSpec(LATEST))
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    include_headers: bool = False
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    fetch_bytes: int = 8 << 20
    filter_pushdown: bool = False
    starting_given: bool = False

    @property
    def s3_options(self) -> dict[str, Any]:
        return dict(self.s3)


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """What a write was asked for: where to produce, how to batch requests, and the
    codec each Kafka batch is compressed with (``none``, ``gzip``, ``snappy``, ``lz4``,
    ``zstd``; stored as sent)."""

    service_url: str
    topic: str
    token: str | None = None
    batch_records: int = 1000
    batch_bytes: int = 4 << 20
    compression: str = "none"


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    return {str(k).lower(): str(v) for k, v in options.items()}


_SPARK_OPTIONS = frozenset({"checkpointlocation", "queryname"})
"""Options Spark itself may pass along (not ours, not errors)."""

_PATH_OPTIONS = ("path", "paths")
"""What Spark turns ``load(path)`` / ``load([paths])`` / ``save(path)`` / ``start(path)``
into: the source has no use for a path, so it is refused rather than ignored."""


def _refuse_path(opts: Mapping[str, str], call: str) -> None:
    """ValueError if Spark passed a path (see _PATH_OPTIONS); ``call`` names the caller's
    method in the message."""
    for name in _PATH_OPTIONS:
        if name in opts:
            raise ValueError(
                f"the tiered_log source takes no path (got {opts[name]!r}): it "
                f"reads and writes the topic named by the option 'topic'; "
                f"call {call} without one"
            )


def parse_bucket_url(url: str, shown: str = "option 'bucketUrl'") -> Path | None:
    """The local directory a bucket URL names, or None for ``s3://bucket[/prefix]``.

    Takes the forms :func:`tiered_log.remote.storage.open_storage` takes (``file:///dir``,
    an absolute path or one starting with ``./``, ``../``, ``~``; ``s3://...``) and checks
    only their form, touching nothing; ValueError naming ``shown`` for anything else.
    """
    u = url.strip()
    if u.startswith(("/", "./", "../", "~")) or u in (".", ".."):
        return Path(u).expanduser()
    expected = "expected s3://bucket/prefix, file:///abs/dir or an absolute path"
    try:
        parts = urlsplit(u)
    except ValueError:
        raise ValueError(f"{shown} {url!r} is not a URL; {expected}") from None
    scheme = parts.scheme.lower()
    if scheme == "file":
        path = unquote(parts.path)
        if (
            parts.netloc not in ("", "localhost")
            or not path.startswith("/")
            or (parts.query or parts.fragment)
        ):
            raise ValueError(
                f"{shown} {url!r} must be file:///absolute/path (a local "
                "directory every executor sees)"
            )
        return Path(path)
    if scheme == "s3":
        if (
            not parts.netloc
            or parts.query
            or parts.fragment
            or "@" in parts.netloc
            or (":" in parts.netloc)
        ):
            raise ValueError(f"{shown} {url!r} must be s3://bucket or s3://bucket/prefix")
        return None
    raise ValueError(f"{shown} {url!r}: {expected}")


def _check_known(opts: Mapping[str, str], known: frozenset[str], what: str) -> None:
    unknown = sorted(k for k in opts if k not in known and k not in _SPARK_OPTIONS)
    if unknown:
        raise ValueError(f"unknown tiered_log {what} option(s) {unknown}; known: {sorted(known)}")


def _required(opts: Mapping[str, str], name: str, shown: str) -> str:
    v = opts.get(name, "").strip()
    if not v:
        raise ValueError(f"the tiered_log source needs the option {shown!r}")
    return v


def _bool(opts: Mapping[str, str], name: str, shown: str, default: bool) -> bool:
    v = opts.get(name)
    if v is None:
        return default
    low = v.strip().lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise ValueError(f"option {shown!r} must be true or false, not {v!r}")


def _int(opts: Mapping[str, str], name: str, shown: str, *, minimum: int) -> int | None:
    v = opts.get(name)
    if v is None:
        return None
    try:
        n = int(v.strip())
    except ValueError:
        raise ValueError(f"option {shown!r} must be an integer, not {v!r}") from None
    if n < minimum:
        raise ValueError(f"option {shown!r} must be at least {minimum}, not {n}")
    return n


def parse_offsets(text: str | None, topic: str, default: int, shown: str) -> OffsetSpec:
    """Parse ``earliest``/``latest``/JSON offsets (see the module docstring)."""
    if text is None:
        return OffsetSpec(default)
    t = text.strip()
    if t.lower() == "earliest":
        return OffsetSpec(EARLIEST)
    if t.lower() == "latest":
        return OffsetSpec(LATEST)
    try:
        doc = json.loads(t)
    except ValueError:
        raise ValueError(
            f"option {shown!r} must be 'earliest', 'latest' or JSON offsets like "
            f'{{"{topic}": {{"0": 42}}}}, not {text!r}'
        ) from None
    if isinstance(doc, dict) and len(doc) == 1 and topic in doc:
        doc = doc[topic]
    if not isinstance(doc, dict) or not doc:
        raise ValueError(
            f"option {shown!r}: JSON offsets must map topic {topic!r} to "
            f'{{"partition": offset}}, got {text!r}'
        )
    items: list[tuple[int, int]] = []
    for p, off in doc.items():
        try:
            pi = int(p)
        except (TypeError, ValueError):
            raise ValueError(
                f"option {shown!r}: {p!r} is not a partition number (is the topic "
                f"name {topic!r} right?)"
            ) from None
        if pi < 0 or not isinstance(off, int) or isinstance(off, bool) or off < EARLIEST:
            raise ValueError(
                f"option {shown!r}: partition {p} needs an offset >= 0, or -2 "
                f"(earliest) / -1 (latest), not {off!r}"
            )
        items.append((pi, off))
    return OffsetSpec(default, tuple(sorted(items)))


def parse_read_options(options: Mapping[str, str]) -> ReadOptions:
    """:class:`ReadOptions` from Spark's option map; ValueError if anything is wrong."""
    o = _lower(options)
    _refuse_path(o, "load()")
    _check_known(o, READ_OPTIONS, "read")
    topic = _required(o, "topic", "topic")
    bucket_url = o.get("bucketurl", "").strip() or None
    if bucket_url is not None:
        parse_bucket_url(bucket_url)
    service_url = _required(o, "serviceurl", "serviceUrl")
    parts: tuple[int, ...] | None = None
    if o.get("partitions", "").strip():
        try:
            parts = tuple(sorted({int(x) for x in o["partitions"].split(",") if x.strip()}))
        except ValueError:
            raise ValueError(
                f"option 'partitions' must be a comma-separated list of partition "
                f"numbers, not {o['partitions']!r}"
            ) from None
        if any(p < 0 for p in parts) or not parts:
            raise ValueError(
                f"option 'partitions' must list partitions >= 0, not {o['partitions']!r}"
            )
    s3: list[tuple[str, Any]] = []
    for k, name in _S3_KEYS.items():
        if k in o:
            s3.append((name, _bool(o, k, "s3.pathStyle", True) if name == "path_style" else o[k]))
    endpoint = o.get("s3.endpointurl", "").strip()
    if endpoint:
        ep = urlsplit(endpoint)
        if ep.scheme.lower() not in ("http", "https") or not ep.hostname:
            raise ValueError(
                f"option 's3.endpointUrl' must be an http(s) URL like "
                f"http://127.0.0.1:9000, not {endpoint!r}"
            )
    if ("s3.accesskey" in o) != ("s3.secretkey" in o):
        raise ValueError("give both options 's3.accessKey' and 's3.secretKey', or neither")
    starting = parse_offsets(o.get("startingoffsets"), topic, EARLIEST, "startingOffsets")
    ending = parse_offsets(o.get("endingoffsets"), topic, LATEST, "endingOffsets")
    if ending.default == EARLIEST or any(v == EARLIEST for _, v in ending.per_partition):
        raise ValueError("option 'endingOffsets' cannot be 'earliest' (-2)")
    st = _int(o, "startingtimestamp", "startingTimestamp", minimum=0)
    et = _int(o, "endingtimestamp", "endingTimestamp", minimum=0)
    if st is not None and "startingoffsets" in o:
        raise ValueError("give either 'startingOffsets' or 'startingTimestamp', not both")
    if et is not None and "endingoffsets" in o:
        raise ValueError("give either 'endingOffsets' or 'endingTimestamp', not both")
    return ReadOptions(
        service_url=service_url,
        topic=topic,
        token=o.get("token") or None,
        bucket_url=bucket_url,
        s3=tuple(s3),
        partitions=parts,
        starting=starting,
        ending=ending,
        starting_timestamp=st,
        ending_timestamp=et,
        include_headers=_bool(o, "includeheaders", "includeHeaders", False),
        min_partitions=_int(o, "minpartitions", "minPartitions", minimum=1),
        fail_on_data_loss=_bool(o, "failondataloss", "failOnDataLoss", True),
        max_offsets_per_trigger=_int(o, "maxoffsetspertrigger", "maxOffsetsPerTrigger", minimum=1),
        fetch_bytes=_int(o, "fetchbytes", "fetchBytes", minimum=1 << 16) or 8 << 20,
        filter_pushdown=_bool(o, "filterpushdown", "filterPushdown", False),
        starting_given="startingoffsets" in o,
    )


def parse_write_options(options: Mapping[str, str]) -> WriteOptions:
    """:class:`WriteOptions` from Spark's option map; ValueError if anything is wrong."""
    o = _lower(options)
    _refuse_path(o, "save() or start()")
    _check_known(o, WRITE_OPTIONS, "write")
    return WriteOptions(
        service_url=_required(o, "serviceurl", "serviceUrl"),
        topic=_required(o, "topic", "topic"),
        token=o.get("token") or None,
        batch_records=_int(o, "batchrecords", "batchRecords", minimum=1) or 1000,
        batch_bytes=_int(o, "batchbytes", "batchBytes", minimum=1024) or 4 << 20,
        compression=_codec(o.get("compression", "none")),
    )


def _codec(name: str) -> str:
    """A Kafka compression codec's name, lower case; ValueError naming the choices."""
    from ..format.kafka import Compression

    try:
        return Compression.parse(name.strip()).name.lower()
    except ValueError:
        choices = ", ".join(c.name.lower() for c in Compression)
        raise ValueError(f"option 'compression' must be one of {choices}, not {name!r}") from None
