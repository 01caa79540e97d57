"""S3Storage specifics: prefixes, multipart abort, batching, and the mapping of botocore and
HTTP failures to tiered_log errors.

Most tests use moto's in-process ``mock_aws``; failure injection goes through botocore's
event hooks on the storage's own client (our code is never mocked). Error mapping is
checked against a tiny local HTTP server that answers like a misbehaving S3, and against a
closed port.
"""

from __future__ import annotations

import http.server
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import pytest
import xxhash
from botocore.exceptions import EndpointConnectionError
from moto import mock_aws

from tiered_log.errors import (
    InvalidArgumentError,
    RemoteCorruptionError,
    RemoteObjectNotFoundError,
    RemoteStorageError,
    TieredLogError,
)
from tiered_log.remote.s3 import S3Storage

MiB = 1 << 20
BUCKET = "unit-bucket"


# ---- fixtures ------------------------------------------------------------------------------


@pytest.fixture
def mocked(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """moto's in-process S3 with one bucket; yields a raw boto3 client on it."""
    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
    ):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


@pytest.fixture
def make_storage(mocked: Any) -> Iterator[Callable[..., S3Storage]]:
    made: list[S3Storage] = []

    def make(**kwargs: Any) -> S3Storage:
        kwargs.setdefault("region", "us-east-1")
        st = S3Storage(kwargs.pop("bucket", BUCKET), **kwargs)
        made.append(st)
        return st

    yield make
    for st in made:
        st.close()


def no_uploads(client: Any) -> bool:
    return not client.list_multipart_uploads(Bucket=BUCKET).get("Uploads")


def raw_keys(client: Any) -> list[str]:
    return [o["Key"] for o in client.list_objects_v2(Bucket=BUCKET).get("Contents", [])]


# ---- prefixes and construction -------------------------------------------------------------


def test_prefix_is_prepended_and_stripped(
    make_storage: Callable[..., S3Storage], mocked: Any
) -> None:
    st = make_storage(prefix="/tenant/a/")
    assert st.url == f"s3://{BUCKET}/tenant/a"
    info = st.put("seg/1.log", b"hello")
    assert raw_keys(mocked) == ["tenant/a/seg/1.log"]
    head = mocked.head_object(Bucket=BUCKET, Key="tenant/a/seg/1.log")
    assert head["Metadata"]["xxh3"] == info.checksum == xxhash.xxh3_128_hexdigest(b"hello")
    assert [i.key for i in st.list("")] == ["seg/1.log"]
    assert [i.key for i in st.list("seg/")] == ["seg/1.log"]
    assert st.get("seg/1.log", 1, 3) == b"el"
    assert st.size("seg/1.log") == 5

    # Neighbours sharing the string prefix are invisible: the prefix ends at a '/'.
    other = make_storage(prefix="tenant/ab")
    other.put("seg/1.log", b"other")
    mocked.put_object(Bucket=BUCKET, Key="tenant/a", Body=b"outside")
    assert [i.key for i in st.list("")] == ["seg/1.log"]
    assert st.get("seg/1.log") == b"hello"
    st.delete(["seg/1.log"])
    assert raw_keys(mocked) == ["tenant/a", "tenant/ab/seg/1.log"]


def test_no_prefix(make_storage: Callable[..., S3Storage], mocked: Any) -> None:
    st = make_storage()
    assert st.url == f"s3://{BUCKET}"
    st.put("k", b"v")
    assert raw_keys(mocked) == ["k"]


def test_prefix_counts_toward_the_key_length_limit(make_storage: Callable[..., S3Storage]) -> None:
    st = make_storage(prefix="p" * 1000)
    st.put("k" * 23, b"v")
    with pytest.raises(InvalidArgumentError):
        st.put("k" * 24, b"v")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"bucket": "ab"},
        {"bucket": "has/slash"},
        {"bucket": "white space"},
        {"prefix": "a//b"},
        {"prefix": "a/../b"},
        {"prefix": "a\\b"},
        {"part_size": 5 * MiB - 1},
        {"multipart_threshold": -1},
        {"retries": -1},
        {"access_key": "only-half"},
        {"max_pool_connections": 0},
        {"read_timeout": 0},
    ],
)
def test_invalid_construction(kwargs: dict[str, Any]) -> None:
    kwargs.setdefault("bucket", BUCKET)
    with pytest.raises(InvalidArgumentError):
        S3Storage(**kwargs)


def test_ensure_bucket_creates_once(make_storage: Callable[..., S3Storage], mocked: Any) -> None:
    st = make_storage(bucket="fresh-bucket")
    with pytest.raises(RemoteStorageError) as exc_info:
        st.put("k", b"v")
    assert exc_info.value.retriable is False
    assert "does not exist" in str(exc_info.value)
    st.ensure_bucket()
    st.ensure_bucket()
    st.put("k", b"v")
    assert st.get("k") == b"v"


# ---- multipart -----------------------------------------------------------------------------


@pytest.fixture
def big_file(tmp_path: Path) -> tuple[Path, bytes]:
    data = os.urandom(11 * MiB + 7)
    path = tmp_path / "big.bin"
    path.write_bytes(data)
    return path, data


def test_multipart_upload(
    make_storage: Callable[..., S3Storage], mocked: Any, big_file: tuple[Path, bytes]
) -> None:
    st = make_storage(multipart_threshold=5 * MiB, part_size=5 * MiB)
    path, data = big_file
    parts: list[int] = []
    st.client.meta.events.register(
        "provide-client-params.s3.UploadPart",
        lambda params, **_: parts.append(params["PartNumber"]),
    )
    seen: list[int] = []
    info = st.put_file("big", path, progress=seen.append)
    assert sorted(parts) == [1, 2, 3]
    assert seen == [5 * MiB, 10 * MiB, len(data)]
    head = mocked.head_object(Bucket=BUCKET, Key="big")
    assert head["ETag"].strip('"').endswith("-3")
    assert head["Metadata"]["xxh3"] == info.checksum == xxhash.xxh3_128_hexdigest(data)
    assert st.get("big") == data
    assert no_uploads(mocked)


def test_file_at_threshold_is_one_put(
    make_storage: Callable[..., S3Storage], tmp_path: Path
) -> None:
    st = make_storage(multipart_threshold=1000)
    calls: list[str] = []
    st.client.meta.events.register(
        "provide-client-params.s3.*", lambda model, **_: calls.append(model.name)
    )
    (tmp_path / "f").write_bytes(b"x" * 1000)
    st.put_file("f", tmp_path / "f")
    assert calls == ["PutObject"]


def _fail_part(number: int) -> Callable[..., None]:
    def hook(params: dict[str, Any], **_: Any) -> None:
        if params["PartNumber"] == number:
            raise EndpointConnectionError(endpoint_url="http://injected-failure")

    return hook


@pytest.mark.parametrize("part", [1, 2, 3])
def test_failed_part_aborts_the_upload(
    make_storage: Callable[..., S3Storage], mocked: Any, big_file: tuple[Path, bytes], part: int
) -> None:
    st = make_storage(multipart_threshold=5 * MiB, part_size=5 * MiB)
    st.client.meta.events.register("provide-client-params.s3.UploadPart", _fail_part(part))
    with pytest.raises(RemoteStorageError) as exc_info:
        st.put_file("big", big_file[0])
    assert exc_info.value.retriable is True
    assert f"part {part}" in str(exc_info.value)
    assert not isinstance(exc_info.value.__cause__, TieredLogError)
    assert no_uploads(mocked)
    assert raw_keys(mocked) == []


def test_failed_complete_aborts_the_upload(
    make_storage: Callable[..., S3Storage], mocked: Any, big_file: tuple[Path, bytes]
) -> None:
    st = make_storage(multipart_threshold=5 * MiB, part_size=5 * MiB)

    def fail(**_: Any) -> None:
        raise EndpointConnectionError(endpoint_url="http://injected-failure")

    st.client.meta.events.register("provide-client-params.s3.CompleteMultipartUpload", fail)
    with pytest.raises(RemoteStorageError):
        st.put_file("big", big_file[0])
    assert no_uploads(mocked)
    assert raw_keys(mocked) == []


def test_file_shrinking_during_upload_aborts(
    make_storage: Callable[..., S3Storage], mocked: Any, big_file: tuple[Path, bytes]
) -> None:
    st = make_storage(multipart_threshold=5 * MiB, part_size=5 * MiB)
    path = big_file[0]

    def shrink(**_: Any) -> None:  # after the hashing pass, before the parts are read
        os.truncate(path, 7 * MiB)

    st.client.meta.events.register("provide-client-params.s3.CreateMultipartUpload", shrink)
    with pytest.raises(RemoteStorageError, match="shrank"):
        st.put_file("big", path)
    assert no_uploads(mocked)
    assert raw_keys(mocked) == []


def test_file_changing_during_upload_aborts(
    make_storage: Callable[..., S3Storage], mocked: Any, big_file: tuple[Path, bytes]
) -> None:
    st = make_storage(multipart_threshold=5 * MiB, part_size=5 * MiB)
    path = big_file[0]

    def scribble(**_: Any) -> None:
        with open(path, "r+b") as f:
            f.seek(MiB)
            f.write(b"changed")

    st.client.meta.events.register("provide-client-params.s3.CreateMultipartUpload", scribble)
    with pytest.raises(RemoteStorageError, match="changed"):
        st.put_file("big", path)
    assert no_uploads(mocked)
    assert raw_keys(mocked) == []


def test_progress_raising_aborts_the_upload(
    make_storage: Callable[..., S3Storage], mocked: Any, big_file: tuple[Path, bytes]
) -> None:
    st = make_storage(multipart_threshold=5 * MiB, part_size=5 * MiB, part_concurrency=1)

    def progress(n: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        st.put_file("big", big_file[0], progress=progress)
    assert no_uploads(mocked)
    assert raw_keys(mocked) == []


# ---- list and delete -----------------------------------------------------------------------


def test_list_and_delete_batching(make_storage: Callable[..., S3Storage], mocked: Any) -> None:
    st = make_storage(prefix="p")
    for i in range(5):
        st.put(f"k{i}", b"x")
    sizes: list[int] = []
    st.client.meta.events.register(
        "provide-client-params.s3.DeleteObjects",
        lambda params, **_: sizes.append(len(params["Delete"]["Objects"])),
    )
    st.delete([f"k{i}" for i in range(2500)])
    assert sizes == [1000, 1000, 500]
    assert list(st.list("")) == []


def test_list_follows_continuation_tokens(
    make_storage: Callable[..., S3Storage], mocked: Any
) -> None:
    st = make_storage(prefix="p")
    st.list_page_size = 3
    for i in range(8):
        mocked.put_object(Bucket=BUCKET, Key=f"p/k{i:04d}", Body=b"")
    mocked.put_object(Bucket=BUCKET, Key="p/other", Body=b"")
    pages: list[str | None] = []
    st.client.meta.events.register(
        "provide-client-params.s3.ListObjectsV2",
        lambda params, **_: pages.append(params.get("ContinuationToken")),
    )
    keys = [i.key for i in st.list("k")]
    assert keys == [f"k{i:04d}" for i in range(8)]
    assert len(pages) == 3 and pages[0] is None and all(pages[1:])


def test_delete_reports_per_key_errors(make_storage: Callable[..., S3Storage]) -> None:
    st = make_storage(prefix="p")
    st.put("a", b"x")

    def add_errors(parsed: dict[str, Any], **_: Any) -> None:
        parsed["Errors"] = [
            {"Key": "p/gone", "Code": "NoSuchKey", "Message": "fine"},
            {"Key": "p/a", "Code": "AccessDenied", "Message": "Access Denied"},
        ]

    st.client.meta.events.register("after-call.s3.DeleteObjects", add_errors)
    with pytest.raises(RemoteStorageError, match="AccessDenied") as exc_info:
        st.delete(["a", "gone"])
    assert exc_info.value.retriable is False
    assert "'a'" in str(exc_info.value)


# ---- failures: unreachable endpoint --------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_endpoint_is_retriable(tmp_path: Path) -> None:
    port = closed_port()
    st = S3Storage(
        "some-bucket",
        prefix="x",
        endpoint_url=f"http://127.0.0.1:{port}",
        region="us-east-1",
        access_key="a",
        secret_key="b",
        connect_timeout=0.2,
        read_timeout=0.2,
        retries=0,
    )
    (tmp_path / "f").write_bytes(b"data")
    calls: list[Callable[[], Any]] = [
        lambda: st.put("k", b"x"),
        lambda: st.put_file("k", tmp_path / "f"),
        lambda: st.get("k"),
        lambda: st.get("k", 1, 2),
        lambda: st.size("k"),
        lambda: list(st.list("")),
        lambda: st.delete(["k"]),
        st.ensure_bucket,
    ]
    started = time.monotonic()
    for call in calls:
        with pytest.raises(RemoteStorageError) as exc_info:
            call()
        err = exc_info.value
        assert type(err) is RemoteStorageError
        assert err.retriable is True
        assert "cannot reach S3" in str(err)
        assert f"127.0.0.1:{port}" in str(err)
    assert time.monotonic() - started < 20
    st.close()


# ---- failures: a misbehaving HTTP server ---------------------------------------------------


@dataclass
class FakeS3:
    """A local HTTP server answering every request with ``respond(method, path, headers)``."""

    endpoint: str
    respond: Callable[[str, str, dict[str, str]], tuple[int, dict[str, str], bytes]]
    requests: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)

    def error(self, status: int, code: str) -> None:
        body = (
            f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
            f"<Message>injected {code}</Message></Error>"
        ).encode()
        self.respond = lambda *_: (status, {"Content-Type": "application/xml"}, body)


@pytest.fixture
def fake_s3() -> Iterator[FakeS3]:
    fake = FakeS3("", lambda *_: (500, {}, b""))

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            headers = {k.lower(): v for k, v in self.headers.items()}
            fake.requests.append((self.command, self.path, headers))
            status, out_headers, body = fake.respond(self.command, self.path, headers)
            self.send_response(status)
            for k, v in out_headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
    )
    thread.start()
    fake.endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def fake_storage(fake: FakeS3, retries: int = 0) -> S3Storage:
    return S3Storage(
        "fake-bucket",
        endpoint_url=fake.endpoint,
        region="us-east-1",
        access_key="a",
        secret_key="b",
        retries=retries,
        connect_timeout=2,
        read_timeout=2,
    )


@pytest.mark.parametrize(
    ("status", "code", "retriable"),
    [
        (503, "SlowDown", True),
        (500, "InternalError", True),
        (503, "ServiceUnavailable", True),
        (403, "AccessDenied", False),
        (400, "InvalidRequest", False),
    ],
)
def test_http_errors_map_to_remote_storage_error(
    fake_s3: FakeS3, status: int, code: str, retriable: bool
) -> None:
    fake_s3.error(status, code)
    st = fake_storage(fake_s3)
    for call in (lambda: st.get("k"), lambda: st.put("k", b"v"), lambda: list(st.list(""))):
        with pytest.raises(RemoteStorageError) as exc_info:
            call()
        assert type(exc_info.value) is RemoteStorageError
        assert exc_info.value.retriable is retriable
        assert code in str(exc_info.value) and str(status) in str(exc_info.value)
    st.close()


def test_throttling_is_retried_before_it_is_reported(fake_s3: FakeS3) -> None:
    fake_s3.error(503, "SlowDown")
    st = fake_storage(fake_s3, retries=1)
    with pytest.raises(RemoteStorageError) as exc_info:
        st.get("k")
    assert exc_info.value.retriable is True
    assert len(fake_s3.requests) == 2
    st.close()


@pytest.mark.parametrize(
    ("status", "code", "error"),
    [
        (404, "NoSuchKey", RemoteObjectNotFoundError),
        (416, "InvalidRange", RemoteObjectNotFoundError),
        (400, "BadDigest", RemoteCorruptionError),
        (400, "XAmzContentChecksumMismatch", RemoteCorruptionError),
    ],
)
def test_specific_error_codes(
    fake_s3: FakeS3, status: int, code: str, error: type[Exception]
) -> None:
    fake_s3.error(status, code)
    st = fake_storage(fake_s3)
    with pytest.raises(error):
        st.get("k", 5, 10)
    st.close()


def test_missing_bucket_is_not_retriable(fake_s3: FakeS3) -> None:
    fake_s3.error(404, "NoSuchBucket")
    st = fake_storage(fake_s3)
    with pytest.raises(RemoteStorageError) as exc_info:
        st.get("k")
    assert type(exc_info.value) is RemoteStorageError
    assert exc_info.value.retriable is False
    assert "fake-bucket" in str(exc_info.value) and "does not exist" in str(exc_info.value)
    st.close()


def test_server_ignoring_range_still_gives_the_range(fake_s3: FakeS3) -> None:
    body = b"0123456789"
    meta = {"x-amz-meta-xxh3": xxhash.xxh3_128_hexdigest(body)}
    fake_s3.respond = lambda *_: (200, meta, body)
    st = fake_storage(fake_s3)
    assert st.get("k", 2, 5) == b"234"
    assert st.get("k", 7) == b"789"
    assert st.get("k") == body
    with pytest.raises(RemoteObjectNotFoundError):
        st.get("k", 10, 20)
    assert fake_s3.requests[0][2]["range"] == "bytes=2-4"
    assert fake_s3.requests[1][2]["range"] == "bytes=7-"
    assert "range" not in fake_s3.requests[2][2]
    st.close()


def test_short_ranged_body_is_a_retriable_error(fake_s3: FakeS3) -> None:
    fake_s3.respond = lambda *_: (206, {"Content-Range": "bytes 0-19/100"}, b"0123456789")
    st = fake_storage(fake_s3)
    with pytest.raises(RemoteStorageError) as exc_info:
        st.get("k", 0, 20)
    assert exc_info.value.retriable is True
    st.close()


def test_whole_object_with_wrong_checksum(fake_s3: FakeS3) -> None:
    fake_s3.respond = lambda *_: (200, {"x-amz-meta-xxh3": "0" * 32}, b"payload")
    st = fake_storage(fake_s3)
    with pytest.raises(RemoteCorruptionError):
        st.get("k")
    assert st.get("k", 1, 3) == b"ay"  # a partial range can't be checked
    st.close()
