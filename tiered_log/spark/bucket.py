"""The bucket a read takes archived segments from: opened read-only, checked on the driver.

:func:`open_reader_store` opens a store that creates and writes nothing (a local directory
through ``LocalDirStorage(read_only=True)``: no ``mkdir``, no xattr probe file; S3 objects
are only ever read), for the executors and for the check.

:func:`check_bucket` is the driver's check while planning: before any task is started it
asks the bucket for the first segment object the read will fetch (one ``stat`` or one
HeadObject), with small timeouts and no retries, so a wrong ``bucketUrl`` (a directory
that does not exist, a file, a directory or prefix that is not the log's store, a bucket
that does not exist) or an unreachable, hung or refusing S3 endpoint fails the query at
once with one line naming the option, as the option parser's errors do (ValueError),
instead of as an executor's traceback. Only if the object is missing does it make a
second request, a listing of the object's folder: other objects there mean the store is
right and retention removed the object since the service answered (left to the executors
and ``failOnDataLoss``). A read that needs nothing from the bucket (only unshipped
records) checks nothing.

Functions only; each call opens and closes its own store. Thread-safe.
"""

from __future__ import annotations

from typing import Any

from ..errors import RemoteObjectNotFoundError, TieredLogError
from ..remote.storage import RemoteStorage, open_storage
from .options import ReadOptions, parse_bucket_url
from .planning import ArchiveSplit, PartitionState

PROBE_CONNECT_TIMEOUT = 3.0
"""Seconds the check waits to connect to S3 (the executors use the store's default)."""
PROBE_READ_TIMEOUT = 5.0
"""Seconds the check waits for S3's answer (an endpoint that accepts and never answers)."""

_CREDENTIAL_CODES = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "HTTP 403")


def open_reader_store(url: str, s3: tuple[tuple[str, Any], ...], **overrides: Any) -> RemoteStorage:
    """A store on ``url`` that creates and writes nothing (see the module docstring).

    ``s3`` are the read's S3 options; ``overrides`` (``connect_timeout``, ``retries``, ...)
    go to an S3 store only. Errors as :func:`~tiered_log.remote.storage.open_storage`'s.
    """
    try:
        path = parse_bucket_url(url, "bucket URL")
    except ValueError:
        path = None  # not a form we know: open_storage refuses it (creating nothing)
    else:
        if path is not None:
            from ..remote.fs import LocalDirStorage

            return LocalDirStorage(path, read_only=True)
    return open_storage(url, **dict(s3), **overrides)


def _one_line(exc: BaseException) -> str:
    """``exc``'s message with its whitespace (newlines too) collapsed: one line."""
    return " ".join(str(exc).split())


def _is_connection_failure(exc: BaseException) -> bool:
    """Whether ``exc`` (a store's error) comes from not reaching the endpoint at all:
    refused, reset, timed out, no such host."""
    from botocore import exceptions as bex

    cause = exc.__cause__
    return isinstance(cause, bex.ConnectionError | bex.HTTPClientError | OSError)


def check_bucket(opts: ReadOptions, splits: list[Any], states: dict[int, PartitionState]) -> bool:
    """Check that the first :class:`ArchiveSplit` of ``splits`` can be read (see the module
    docstring); ValueError with one line naming the option if not. False when no split
    reads from the bucket (nothing checked), True when checked."""
    split = next((s for s in splits if isinstance(s, ArchiveSplit)), None)
    if split is None:
        return False
    url = split.bucket_url
    shown = (
        f"option 'bucketUrl' {url!r}"
        if opts.bucket_url
        else f"option 'bucketUrl' (not given; the service's store {url!r})"
    )
    path = parse_bucket_url(url, shown)
    if path is not None:
        if not path.exists():
            raise ValueError(f"{shown}: the directory does not exist")
        if not path.is_dir():
            raise ValueError(f"{shown}: not a directory")
    endpoint = opts.s3_options.get("endpoint_url") if path is None else None
    key = split.object_key
    try:
        store = open_reader_store(
            url,
            opts.s3,
            connect_timeout=PROBE_CONNECT_TIMEOUT,
            read_timeout=PROBE_READ_TIMEOUT,
            retries=0,
        )
    except TieredLogError as exc:
        raise ValueError(f"{shown}: {_one_line(exc)}") from None
    try:
        try:
            store.size(key)
            return True
        except RemoteObjectNotFoundError:
            pass
        # The object is missing. Retention may have removed it since the service answered
        # (the executors apply failOnDataLoss to that): then the store still holds other
        # objects of the log's segments. A wrong store holds none (and S3, which answers a
        # HEAD in a missing bucket with a bare 404, names a missing bucket here).
        folder = key.rpartition("/")[0]
        if folder and next(iter(store.list(f"{folder}/")), None) is not None:
            return True
        service_url = states[split.partition].remote_url
        hint = f" The service's is {service_url!r}." if service_url and opts.bucket_url else ""
        raise ValueError(
            f"{shown} holds no object {key!r} (offsets [{split.start}, {split.end}) of "
            f"{split.topic}-{split.partition}) nor any other of its log: is it this log's "
            f"store?{hint}"
        ) from None
    except TieredLogError as exc:
        text = _one_line(exc)
        if endpoint and _is_connection_failure(exc):
            raise ValueError(f"option 's3.endpointUrl' {endpoint!r}: {text}") from None
        if any(c in text for c in _CREDENTIAL_CODES):
            raise ValueError(
                f"options 's3.accessKey' / 's3.secretKey' for {url!r}: {text}"
            ) from None
        raise ValueError(f"{shown}: {text}") from None
    finally:
        store.close()
