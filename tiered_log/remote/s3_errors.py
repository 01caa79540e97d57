"""How errors of S3 (botocore, urllib3, the OS) map to :mod:`tiered_log.errors`.

:class:`~tiered_log.remote.s3.S3Storage` catches :data:`BOUNDARY_ERRORS` around every
request and raises :func:`map_s3_error`'s answer: connection failures, throttling and 5xx
become a retriable RemoteStorageError, timeouts a RemoteTimeoutError (retriable), a
missing key or a range past the end RemoteObjectNotFoundError, damage in transit a
retriable RemoteCorruptionError, other 4xx (access denied, missing bucket) a
non-retriable RemoteStorageError. Pure functions; any thread.
"""

from __future__ import annotations

import urllib3.exceptions
from botocore import exceptions as bex

from ..errors import (
    RemoteCorruptionError,
    RemoteObjectNotFoundError,
    RemoteStorageError,
    RemoteTimeoutError,
    TieredLogError,
)

RETRIABLE_CODES = frozenset(
    {
        "InternalError",
        "ServiceUnavailable",
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "RequestLimitExceeded",
        "TooManyRequests",
        "OperationAborted",
        "503",
        "500",
        "429",
    }
)
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "NotFound", "404"})
_INTEGRITY_CODES = frozenset(
    {
        "BadDigest",
        "InvalidDigest",
        "XAmzContentSHA256Mismatch",
        "XAmzContentChecksumMismatch",
        "InvalidChecksum",
        "InvalidRequestChecksum",
    }
)
_CONFIG_ERRORS: tuple[type[Exception], ...] = (
    bex.NoCredentialsError,
    bex.PartialCredentialsError,
    bex.NoRegionError,
    bex.ParamValidationError,
    bex.UnknownEndpointError,
    bex.InvalidEndpointConfigurationError,
)
_CONNECTION_ERRORS: tuple[type[Exception], ...] = (
    bex.HTTPClientError,
    bex.ConnectionError,
    bex.IncompleteReadError,
    bex.ResponseStreamingError,
)
_CHECKSUM_ERRORS: tuple[type[Exception], ...] = (bex.ChecksumError, bex.FlexibleChecksumError)
_TIMEOUT_ERRORS: tuple[type[Exception], ...] = (
    bex.ReadTimeoutError,
    bex.ConnectTimeoutError,
    urllib3.exceptions.ReadTimeoutError,
    TimeoutError,
)
BOUNDARY_ERRORS: tuple[type[BaseException], ...] = (
    bex.BotoCoreError,
    bex.ClientError,
    OSError,
    urllib3.exceptions.HTTPError,
)


def map_s3_error(exc: BaseException, target: str, bucket: str) -> TieredLogError:
    """The tiered_log error for a botocore/urllib3/OS error of ``target`` (what was done,
    to what, where) on ``bucket``."""
    if isinstance(exc, bex.ClientError):
        err = exc.response.get("Error", {})
        code = str(err.get("Code", ""))
        message = err.get("Message") or code
        status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0))
        detail = f"{target} failed: {code} (HTTP {status}): {message}"
        if code in _NOT_FOUND_CODES or (
            status == 404 and code not in ("NoSuchBucket", "NoSuchUpload")
        ):
            return RemoteObjectNotFoundError(
                f"{target} failed: no such object" + (f" ({code})" if code else "")
            )
        if code == "InvalidRange" or status == 416:
            return RemoteObjectNotFoundError(
                f"{target} failed: the byte range is past the end of the object"
            )
        if code == "NoSuchBucket":
            return RemoteStorageError(
                f"{target} failed: bucket {bucket!r} does not exist", retriable=False
            )
        if code in _INTEGRITY_CODES:
            return RemoteCorruptionError(f"{detail} (bytes damaged in transit?)", retriable=True)
        if code in RETRIABLE_CODES or status >= 500 or status in (408, 429):
            return RemoteStorageError(detail, retriable=True)
        return RemoteStorageError(detail, retriable=False)
    if isinstance(exc, _CHECKSUM_ERRORS):
        return RemoteCorruptionError(f"{target} failed a transfer checksum: {exc}", retriable=True)
    if isinstance(exc, _TIMEOUT_ERRORS):
        return RemoteTimeoutError(f"{target} failed: S3 did not answer in time: {exc}")
    if isinstance(exc, _CONNECTION_ERRORS):
        return RemoteStorageError(f"{target} failed: cannot reach S3: {exc}", retriable=True)
    if isinstance(exc, _CONFIG_ERRORS):
        return RemoteStorageError(f"{target} failed: {exc}", retriable=False)
    if isinstance(exc, (OSError, urllib3.exceptions.HTTPError)):
        return RemoteStorageError(f"{target} failed: I/O error: {exc}", retriable=True)
    return RemoteStorageError(f"{target} failed: {exc}", retriable=False)
