"""S3 (and S3-compatible: MinIO, Ceph, moto) object store via boto3.

Every object gets its xxh3-128 hex digest in the user metadata ``xxh3``
(``x-amz-meta-xxh3``), checked by any get that returns the whole object, and is uploaded
with ``ChecksumAlgorithm="CRC32"`` so the server rejects bytes damaged in transit.
Files above ``multipart_threshold`` go up as a multipart upload of ``part_size`` parts, up
to ``part_concurrency`` at once; the digest is computed in a first pass over the file (it
must be known at CreateMultipartUpload) and checked again while the parts are read, and a
failed upload is aborted so no parts are left behind. :meth:`S3Storage.put_file`'s
``storage_class`` goes to PutObject and CreateMultipartUpload as ``StorageClass``
(``STANDARD``, the default class, is not sent: S3-compatible stores without classes
accept the upload as before); :meth:`S3Storage.put` always stores in the default class.

Every botocore/urllib3/OS error is mapped to :mod:`tiered_log.errors` at this boundary
(the table is :mod:`tiered_log.remote.s3_errors`):
connection failures, throttling and 5xx become a retriable RemoteStorageError, timeouts a
RemoteTimeoutError (retriable), after botocore's own retries; a missing key, or a range
past the end, becomes RemoteObjectNotFoundError; other 4xx (access denied, missing
bucket) a non-retriable RemoteStorageError.

Reads have bounds of their own: a GetObject attempt that gets no byte for
``get_timeout`` seconds (default 5) is given up and retried ``get_retries`` times
(default 1), so a bucket that accepts connections and never answers ends a GET in about
``2 * get_timeout`` seconds, not the 4 x 30 s of the client's other requests (by
default; their answers, e.g. to a large upload, may legitimately take a while).
Readers wait less still: see ``TierConfig.fetch_max_wait_ms``.

Thread-safety: one :class:`S3Storage` may be used from any number of threads. It holds two
boto3 clients, one for GetObject and one for the rest (clients are thread-safe; the
sessions used to build them are not shared), each with a pool of
``max_pool_connections`` connections.
"""

from __future__ import annotations

import builtins
import logging
import os
import re
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

import boto3
import botocore.session
import xxhash
from botocore import exceptions as bex
from botocore.config import Config

from ..errors import (
    InvalidArgumentError,
    RemoteCorruptionError,
    RemoteObjectNotFoundError,
    RemoteStorageError,
    TieredLogError,
)
from .objects import (
    CHECKSUM_METADATA_NAME,
    MAX_KEY_BYTES,
    ObjectInfo,
    check_keys,
    check_range,
    validate_key,
    validate_prefix,
    xxh3_hex,
)
from .s3_errors import BOUNDARY_ERRORS, RETRIABLE_CODES, map_s3_error

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

log = logging.getLogger(__name__)

MIN_PART_SIZE = 5 << 20
"""S3's minimum size of every part but the last of a multipart upload."""
MAX_PART_SIZE = 5 << 30
MAX_PARTS = 10_000
DELETE_BATCH = 1000
"""S3's limit of keys per DeleteObjects request."""

_BUCKET_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{2,254}$")
_CONTENT_RANGE_RE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)$")
_loader_lock = threading.Lock()
_shared_loader: Any = None


def _new_session() -> boto3.session.Session:
    """A fresh boto3 session (sessions are not thread-safe, so each S3Storage builds its
    client from its own) sharing one botocore data loader, so the JSON service models
    are parsed once per process rather than once per client (~0.15 s each)."""
    global _shared_loader
    core = botocore.session.get_session()
    with _loader_lock:
        if _shared_loader is None:
            _shared_loader = core.get_component("data_loader")
        else:
            core.register_component("data_loader", _shared_loader)
    return boto3.session.Session(botocore_session=core)


def _class_arg(storage_class: str | None) -> dict[str, Any]:
    """The ``StorageClass`` argument of an upload: none for the default class."""
    if storage_class is None or storage_class == "STANDARD":
        return {}
    return {"StorageClass": storage_class}


class S3Storage:
    """Objects in ``bucket`` under ``prefix``; see the module docstring.

    Implements :class:`~tiered_log.remote.storage.RemoteStorage`.

    - Credentials: ``access_key``/``secret_key`` if given, else boto3's standard chain
      (environment, shared config/credentials files, instance/container roles).
    - ``endpoint_url``: an S3-compatible endpoint (MinIO, moto, ...); ``path_style``
      addresses it as ``endpoint/bucket/key`` (what MinIO and moto expect).
    - ``multipart_threshold``/``part_size``/``part_concurrency``: :meth:`put_file` uploads
      files larger than the threshold in parts (part size at least 5 MiB; raised
      automatically so an upload needs at most 10,000 parts).
    - ``retries``: botocore retries per request (standard mode, with backoff) before an
      error reaches the caller; ``connect_timeout``/``read_timeout`` in seconds.
    - ``get_timeout``/``get_retries``: the same for GetObject (the reads of the remote
      tier), whose attempts get no byte for at most ``get_timeout`` seconds (connecting
      included: its connect timeout is the smaller of the two) before they are retried
      or given up (RemoteTimeoutError). Defaults: ``min(read_timeout, 5)`` seconds and
      ``min(retries, 1)`` retries.

    Thread-safe: share one instance between threads.
    """

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        endpoint_url: str | None = None,
        region: str | None = None,
        access_key: str | None = None,
        secret_key: str | None = None,
        path_style: bool = True,
        multipart_threshold: int = 16 << 20,
        part_size: int = 8 << 20,
        max_pool_connections: int = 16,
        connect_timeout: float = 5,
        read_timeout: float = 30,
        retries: int = 3,
        part_concurrency: int = 4,
        get_timeout: float | None = None,
        get_retries: int | None = None,
    ) -> None:
        if not isinstance(bucket, str) or not _BUCKET_RE.match(bucket):
            raise InvalidArgumentError(
                f"invalid S3 bucket name {bucket!r}: bucket names are 3-255 letters, digits, "
                "'.', '_' and '-', starting with a letter or digit (new buckets: 3-63, "
                "lower-case, no '_')"
            )
        prefix = prefix.strip("/")
        if prefix:
            try:
                validate_key(prefix)
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"invalid S3 key prefix {prefix!r}: {exc}") from exc
        if (access_key is None) != (secret_key is None):
            raise InvalidArgumentError("give both access_key and secret_key, or neither")
        if not MIN_PART_SIZE <= part_size <= MAX_PART_SIZE:
            raise InvalidArgumentError(
                f"part_size {part_size} must be between {MIN_PART_SIZE} and {MAX_PART_SIZE}"
            )
        if multipart_threshold < 0:
            raise InvalidArgumentError(f"multipart_threshold {multipart_threshold} must be >= 0")
        if retries < 0 or max_pool_connections < 1 or part_concurrency < 1:
            raise InvalidArgumentError(
                "retries must be >= 0, max_pool_connections and part_concurrency >= 1"
            )
        if connect_timeout <= 0 or read_timeout <= 0:
            raise InvalidArgumentError("connect_timeout and read_timeout must be > 0")
        if get_timeout is None:
            get_timeout = min(read_timeout, 5.0)
        if get_retries is None:
            get_retries = min(retries, 1)
        if not get_timeout > 0 or get_retries < 0:
            raise InvalidArgumentError("get_timeout must be > 0 and get_retries >= 0")
        self.reopen_args: dict[str, Any] = {
            "bucket": bucket,
            "prefix": prefix,
            "endpoint_url": endpoint_url,
            "region": region,
            "access_key": access_key,
            "secret_key": secret_key,
            "path_style": path_style,
            "multipart_threshold": multipart_threshold,
            "part_size": part_size,
            "max_pool_connections": max_pool_connections,
            "connect_timeout": connect_timeout,
            "read_timeout": read_timeout,
            "retries": retries,
            "part_concurrency": part_concurrency,
            "get_timeout": get_timeout,
            "get_retries": get_retries,
        }
        """What another process opens the same store with (:mod:`.worker`)."""
        self.bucket = bucket
        self.prefix = prefix
        self._key_prefix = f"{prefix}/" if prefix else ""
        self.endpoint_url = endpoint_url
        self.multipart_threshold = multipart_threshold
        self.part_size = part_size
        self.part_concurrency = part_concurrency
        self.list_page_size = 1000  # MaxKeys of each ListObjectsV2 request (S3's maximum)
        self.get_timeout = float(get_timeout)
        self.get_retries = get_retries
        self._closed = False
        self._where = f"s3://{bucket}" + (f" at {endpoint_url}" if endpoint_url else "")

        def config(
            connect: float,
            read: float,
            attempts: int,
            check: Literal["when_supported", "when_required"] = "when_supported",
        ) -> Config:
            return Config(
                s3={"addressing_style": "path" if path_style else "auto"},
                retries={"total_max_attempts": attempts, "mode": "standard"},
                max_pool_connections=max_pool_connections,
                connect_timeout=connect,
                read_timeout=read,
                response_checksum_validation=check,
            )

        try:
            clients = []
            for cfg in (
                config(connect_timeout, read_timeout, retries + 1),
                # GetObject: botocore's CRC32 of a response would be a second pass over
                # bytes every reader checks itself (a whole object against its xxh3
                # digest below, a chunk's batches by their CRC-32C where they are read).
                config(
                    min(connect_timeout, get_timeout),
                    get_timeout,
                    get_retries + 1,
                    check="when_required",
                ),
            ):
                session = _new_session()  # private to this call: sessions aren't thread-safe
                self.region = region or session.region_name or "us-east-1"
                clients.append(
                    session.client(
                        "s3",
                        endpoint_url=endpoint_url,
                        region_name=self.region,
                        aws_access_key_id=access_key,
                        aws_secret_access_key=secret_key,
                        config=cfg,
                    )
                )
            self.client: S3Client = clients[0]
            """Every request but GetObject."""
            self.get_client: S3Client = clients[1]
            """GetObject, with ``get_timeout`` and ``get_retries``."""
        except ValueError as exc:  # e.g. a malformed endpoint URL
            raise InvalidArgumentError(
                f"cannot configure S3 client for {self._where}: {exc}"
            ) from exc
        except BOUNDARY_ERRORS as exc:
            raise RemoteStorageError(
                f"cannot create S3 client for {self._where}: {exc}", retriable=False
            ) from exc

    def __repr__(self) -> str:
        return f"S3Storage({self.url!r}, endpoint_url={self.endpoint_url!r})"

    @property
    def url(self) -> str:
        """``s3://bucket/prefix`` (``s3://bucket`` without a prefix); no endpoint in it."""
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    # ---- error mapping ------------------------------------------------------------------

    def _map_error(self, exc: BaseException, what: str, key: str | None) -> TieredLogError:
        """The tiered_log error for a botocore/urllib3/OS error from ``what`` on ``key``."""
        target = (
            f"{what} of {key!r} in {self._where}" if key is not None else f"{what} on {self._where}"
        )
        return map_s3_error(exc, target, self.bucket)

    @contextmanager
    def _boundary(self, what: str, key: str | None = None) -> Iterator[None]:
        """Map any backend error raised in the block to a tiered_log error."""
        try:
            yield
        except TieredLogError:
            raise
        except BOUNDARY_ERRORS as exc:
            raise self._map_error(exc, what, key) from exc

    def _check_open(self) -> None:
        if self._closed:
            raise RemoteStorageError(f"storage {self.url} is closed", retriable=False)

    def _full_key(self, key: str) -> str:
        validate_key(key)
        full = self._key_prefix + key
        if len(full.encode("utf-8")) > MAX_KEY_BYTES:
            raise InvalidArgumentError(
                f"object key {key!r} is too long with the prefix {self.prefix!r} "
                f"(at most {MAX_KEY_BYTES} UTF-8 bytes)"
            )
        return full

    # ---- writes -------------------------------------------------------------------------

    def put(self, key: str, data: bytes | memoryview) -> ObjectInfo:
        """Store ``data`` under ``key`` with one PutObject (CRC32-checked by the server).

        Thread-safe.
        """
        return self._put_object(key, data, None)

    def _put_object(
        self, key: str, data: bytes | memoryview, storage_class: str | None
    ) -> ObjectInfo:
        self._check_open()
        full = self._full_key(key)
        body = data if isinstance(data, bytes) else bytes(data)
        digest = xxh3_hex(body)
        with self._boundary("put", key):
            self.client.put_object(
                Bucket=self.bucket,
                Key=full,
                Body=body,
                Metadata={CHECKSUM_METADATA_NAME: digest},
                ChecksumAlgorithm="CRC32",
                **_class_arg(storage_class),
            )
        return ObjectInfo(key, len(body), digest)

    def put_file(
        self,
        key: str,
        path: str | os.PathLike[str],
        progress: Callable[[int], None] | None = None,
        *,
        storage_class: str | None = None,
    ) -> ObjectInfo:
        """Upload the local file ``path`` to ``key``, in ``storage_class`` (see the
        module docstring).

        Up to ``multipart_threshold`` bytes: one PutObject, then ``progress(size)``. Above
        it: a multipart upload; ``progress(n)`` is called in this thread as parts finish.
        If anything fails (including ``progress`` raising, or the file changing while it
        is read) the multipart upload is aborted and the error raised. A missing or
        unreadable source raises a non-retriable RemoteStorageError. Thread-safe.
        """
        self._check_open()
        full = self._full_key(key)
        name = os.fspath(path)
        try:
            with open(name, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if size <= self.multipart_threshold:
                    data = f.read()
                else:
                    return self._put_multipart(key, full, f.fileno(), size, progress, storage_class)
        except OSError as exc:
            raise RemoteStorageError(
                f"cannot read local file {name!r} to upload: {exc}", retriable=False
            ) from exc
        info = self._put_object(key, data, storage_class)
        if progress is not None:
            progress(info.size)
        return info

    def _hash_file(self, fd: int, size: int) -> str:
        h = xxhash.xxh3_128()
        pos = 0
        while pos < size:
            chunk = os.pread(fd, min(8 << 20, size - pos), pos)
            if not chunk:
                break
            h.update(chunk)
            pos += len(chunk)
        if pos != size:
            raise RemoteStorageError(
                f"local file shrank from {size} to {pos} bytes while being uploaded", retriable=True
            )
        return str(h.hexdigest())

    def _put_multipart(
        self,
        key: str,
        full: str,
        fd: int,
        size: int,
        progress: Callable[[int], None] | None,
        storage_class: str | None,
    ) -> ObjectInfo:
        part_size = max(self.part_size, -(-size // MAX_PARTS))
        digest = self._hash_file(fd, size)
        with self._boundary("create multipart upload", key):
            upload_id = self.client.create_multipart_upload(
                Bucket=self.bucket,
                Key=full,
                Metadata={CHECKSUM_METADATA_NAME: digest},
                ChecksumAlgorithm="CRC32",
                **_class_arg(storage_class),
            )["UploadId"]
        try:
            parts = self._upload_parts(key, full, upload_id, fd, size, part_size, digest, progress)
            with self._boundary("complete multipart upload", key):
                self.client.complete_multipart_upload(
                    Bucket=self.bucket,
                    Key=full,
                    UploadId=upload_id,
                    MultipartUpload={"Parts": parts},  # type: ignore[typeddict-item]
                )
        except BaseException:
            self._abort(key, full, upload_id)
            raise
        return ObjectInfo(key, size, digest)

    def _upload_parts(
        self,
        key: str,
        full: str,
        upload_id: str,
        fd: int,
        size: int,
        part_size: int,
        digest: str,
        progress: Callable[[int], None] | None,
    ) -> builtins.list[dict[str, Any]]:
        """Read the parts in order (re-hashing them), upload up to ``part_concurrency`` at
        once; the CompleteMultipartUpload part list."""
        h = xxhash.xxh3_128()
        done: dict[int, dict[str, Any]] = {}
        sent = 0
        inflight: deque[Future[tuple[int, int, dict[str, Any]]]] = deque()
        pool = ThreadPoolExecutor(max_workers=self.part_concurrency, thread_name_prefix="s3-part")

        def upload(number: int, body: bytes) -> tuple[int, int, dict[str, Any]]:
            with self._boundary(f"upload of part {number}", key):
                resp = self.client.upload_part(
                    Bucket=self.bucket,
                    Key=full,
                    UploadId=upload_id,
                    PartNumber=number,
                    Body=body,
                    ChecksumAlgorithm="CRC32",
                )
            part: dict[str, Any] = {"ETag": resp["ETag"], "PartNumber": number}
            if resp.get("ChecksumCRC32"):
                part["ChecksumCRC32"] = resp["ChecksumCRC32"]
            return number, len(body), part

        def collect(block: bool) -> None:
            nonlocal sent
            if not inflight:
                return
            if block:
                # Wait for the oldest part (results are taken in order): waiting for the
                # first of any to complete would spin, holding the GIL, once a later part
                # is done before the oldest one.
                wait([inflight[0]])
            while inflight and inflight[0].done():
                number, n, part = inflight.popleft().result()
                done[number] = part
                sent += n
                if progress is not None:
                    progress(sent)

        try:
            number, pos = 1, 0
            while pos < size:
                n = min(part_size, size - pos)
                body = os.pread(fd, n, pos)
                if len(body) != n:
                    raise RemoteStorageError(
                        f"local file for {key!r} shrank while being uploaded", retriable=True
                    )
                h.update(body)
                while len(inflight) >= self.part_concurrency:
                    collect(block=True)
                inflight.append(pool.submit(upload, number, body))
                del body
                collect(block=False)
                number, pos = number + 1, pos + n
            while inflight:
                collect(block=True)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        if h.hexdigest() != digest:
            raise RemoteStorageError(
                f"local file for {key!r} changed while being uploaded", retriable=True
            )
        return [done[i] for i in sorted(done)]

    def _abort(self, key: str, full: str, upload_id: str) -> None:
        try:
            self.client.abort_multipart_upload(Bucket=self.bucket, Key=full, UploadId=upload_id)
        except BOUNDARY_ERRORS as exc:
            log.warning(
                "could not abort multipart upload %s of %r in %s (a bucket lifecycle "
                "rule should clean it up): %s",
                upload_id,
                key,
                self._where,
                exc,
            )

    # ---- reads --------------------------------------------------------------------------

    def get(self, key: str, start: int = 0, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of ``key``: one GetObject, with ``Range: bytes=start-(end-1)``
        unless the whole object is asked for. See :meth:`RemoteStorage.get`. Thread-safe."""
        self._check_open()
        full = self._full_key(key)
        check_range(start, end)
        if end is not None and end == start:
            size = self.size(key)
            if start > size:
                raise RemoteObjectNotFoundError(
                    f"range [{start}, {end}) is past the end of {key!r} ({size} bytes)"
                )
            return b""
        whole = start == 0 and end is None
        params: dict[str, Any] = {"Bucket": self.bucket, "Key": full}
        if not whole:
            params["Range"] = f"bytes={start}-{'' if end is None else end - 1}"
        with self._boundary("get", key):
            resp = self.get_client.get_object(**params)
            body = resp["Body"]
            try:
                data = body.read()
            finally:
                body.close()
        total, first = self._total_size(resp, data)
        if not whole and "ContentRange" not in resp:
            # The server ignored Range and sent the whole object: cut the range out.
            if start >= total:
                raise RemoteObjectNotFoundError(
                    f"range [{start}, {end}) is past the end of {key!r} ({total} bytes)"
                )
            data = data[start:end]
        elif first != start:
            raise RemoteStorageError(
                f"get of {key!r}: asked for bytes from {start}, the server sent them from {first}"
            )
        stop = total if end is None else min(end, total)
        if len(data) != stop - start:
            raise RemoteStorageError(
                f"short read of {key!r} from {self._where}: {len(data)} of {stop - start} "
                f"bytes at {start}",
                retriable=True,
            )
        if start == 0 and stop == total:
            want = resp.get("Metadata", {}).get(CHECKSUM_METADATA_NAME)
            if want and xxh3_hex(data) != want:
                raise RemoteCorruptionError(
                    f"object {key!r} in {self._where} fails its xxh3 checksum"
                )
        return data

    @staticmethod
    def _total_size(resp: Any, data: bytes) -> tuple[int, int]:
        """``(object size, offset of the first byte sent)`` of a GetObject response."""
        content_range = resp.get("ContentRange")
        if content_range:
            m = _CONTENT_RANGE_RE.match(content_range)
            if m and m.group(3) != "*":
                return int(m.group(3)), int(m.group(1))
        return len(data), 0

    def size(self, key: str) -> int:
        """The object's size (HeadObject); RemoteObjectNotFoundError if missing. Thread-safe."""
        self._check_open()
        full = self._full_key(key)
        with self._boundary("head", key):
            return int(self.client.head_object(Bucket=self.bucket, Key=full)["ContentLength"])

    def list(self, prefix: str, start_after: str = "") -> Iterator[ObjectInfo]:
        """Every object whose key starts with ``prefix``, sorted by key (ListObjectsV2 order),
        fetched lazily ``list_page_size`` (1000) keys per request. ``checksum`` is None
        (listings carry no user metadata). Thread-safe (each iterator is for one thread)."""
        self._check_open()
        validate_prefix(prefix)
        return self._list(prefix, start_after)

    def _list(self, prefix: str, start_after: str = "") -> Iterator[ObjectInfo]:
        full_prefix = self._key_prefix + prefix
        cut = len(self._key_prefix)
        token: str | None = None
        while True:
            params: dict[str, Any] = {
                "Bucket": self.bucket,
                "Prefix": full_prefix,
                "MaxKeys": self.list_page_size,
            }
            if token:
                params["ContinuationToken"] = token
            elif start_after:
                params["StartAfter"] = self._key_prefix + start_after
            with self._boundary("list", prefix):
                resp = self.client.list_objects_v2(**params)
            for obj in resp.get("Contents", []):
                modified = obj.get("LastModified")
                yield ObjectInfo(
                    obj["Key"][cut:],
                    int(obj["Size"]),
                    None,
                    None if modified is None else int(modified.timestamp() * 1000),
                )
            token = resp.get("NextContinuationToken")
            if not resp.get("IsTruncated") or not token:
                return

    # ---- deletes and lifecycle ----------------------------------------------------------

    def delete(self, keys: Sequence[str]) -> None:
        """Delete the objects with DeleteObjects, 1000 keys per request; missing keys are
        fine. All keys are validated first. Thread-safe."""
        self._check_open()
        fulls = [self._full_key(k) for k in check_keys(keys)]
        for i in range(0, len(fulls), DELETE_BATCH):
            batch = fulls[i : i + DELETE_BATCH]
            with self._boundary("delete", batch[0][len(self._key_prefix) :]):
                resp = self.client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
                )
            errors = [e for e in resp.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if errors:
                e = errors[0]
                code = e.get("Code", "")
                raise RemoteStorageError(
                    f"delete of {len(errors)} object(s) in {self._where} failed, e.g. "
                    f"{e.get('Key', '')[len(self._key_prefix) :]!r}: {code}: {e.get('Message', '')}",
                    retriable=code in RETRIABLE_CODES,
                )

    def discard_partial(self, keys: Sequence[str]) -> None:
        """Abort the unfinished multipart uploads of ``keys`` (a crashed writer's parts
        otherwise stay billed until a lifecycle rule removes them). One
        ListMultipartUploads on the keys' common prefix, then one abort per upload found.
        Call only when no put of these keys is running. Thread-safe."""
        self._check_open()
        fulls = {self._full_key(k) for k in check_keys(keys)}
        if not fulls:
            return
        common = os.path.commonprefix(builtins.list(fulls))  # noqa: RUF071 - a string prefix is meant
        found: builtins.list[tuple[str, str]] = []
        params: dict[str, Any] = {"Bucket": self.bucket, "Prefix": common}
        while True:
            with self._boundary("list multipart uploads", common[len(self._key_prefix) :]):
                resp = self.client.list_multipart_uploads(**params)
            found.extend(
                (u["Key"], u["UploadId"])
                for u in resp.get("Uploads", [])
                if u.get("Key") in fulls and u.get("UploadId")
            )
            if not resp.get("IsTruncated"):
                break
            params["KeyMarker"] = resp.get("NextKeyMarker", "")
            params["UploadIdMarker"] = resp.get("NextUploadIdMarker", "")
        for full, upload_id in found:
            with self._boundary("abort multipart upload", full[len(self._key_prefix) :]):
                try:
                    self.client.abort_multipart_upload(
                        Bucket=self.bucket, Key=full, UploadId=upload_id
                    )
                except bex.ClientError as exc:
                    if exc.response.get("Error", {}).get("Code") != "NoSuchUpload":
                        raise

    def ensure_bucket(self) -> None:
        """Create the bucket if it does not exist (for tests and development). Thread-safe."""
        self._check_open()
        try:
            self.client.head_bucket(Bucket=self.bucket)
            return
        except bex.ClientError as exc:
            status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if status != 404:
                raise self._map_error(exc, "head bucket", None) from exc
        except BOUNDARY_ERRORS as exc:
            raise self._map_error(exc, "head bucket", None) from exc
        kwargs: dict[str, Any] = {"Bucket": self.bucket}
        if self.region != "us-east-1":
            kwargs["CreateBucketConfiguration"] = {"LocationConstraint": self.region}
        try:
            self.client.create_bucket(**kwargs)
        except bex.ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "BucketAlreadyOwnedByYou":
                raise self._map_error(exc, "create bucket", None) from exc
        except BOUNDARY_ERRORS as exc:
            raise self._map_error(exc, "create bucket", None) from exc

    def close(self) -> None:
        """Close the client's connections; later calls raise RemoteStorageError.
        Idempotent; call it once the other threads are done with the store."""
        if self._closed:
            return
        self._closed = True
        for client in (self.client, self.get_client):
            try:
                client.close()
            except BOUNDARY_ERRORS as exc:
                log.debug("closing S3 client for %s: %s", self._where, exc)


__all__ = ["DELETE_BATCH", "MIN_PART_SIZE", "S3Storage"]
