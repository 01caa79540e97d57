"""The RemoteStorage contract, run against every backend (local directory, S3 via moto's
server or ``TIERED_LOG_TEST_S3_ENDPOINT``, and the tests' in-memory fake store
``tests/remote/fake_store.py``), and the first two again with every call run in a tier
worker process (what a remote tier uses), plus the URL factory and a few fs specifics."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import xxhash

from tiered_log.errors import (
    InvalidArgumentError,
    RemoteCorruptionError,
    RemoteObjectNotFoundError,
    RemoteStorageError,
)
from tiered_log.remote.fs import XATTR_NAME, LocalDirStorage
from tiered_log.remote.s3 import S3Storage
from tiered_log.remote.storage import ObjectInfo, RemoteStorage, open_storage
from tiered_log.remote.worker import WorkerStorage, shared_worker, spec_of

from .fake_store import MemoryStorage

MiB = 1 << 20


@dataclass
class Backend:
    """A store under test, and a way to damage a stored object behind its back."""

    name: str
    storage: RemoteStorage
    flip_byte: Callable[[str, int], None]  # (key, position) -> xor that byte with 0xFF
    url_scheme: str  # what its url starts with


def _fs_backend(tmp_path: Path) -> Backend:
    storage = LocalDirStorage(tmp_path / "store")

    def flip(key: str, pos: int) -> None:
        with open(storage.root / key, "r+b") as f:  # in place: same inode, same xattrs
            f.seek(pos)
            b = f.read(1)
            f.seek(pos)
            f.write(bytes([b[0] ^ 0xFF]))

    return Backend("fs", storage, flip, "file:///")


def _s3_backend(request: pytest.FixtureRequest) -> Backend:
    # get_retries: moto's server answers 500 ("I/O operation on closed file") to a GET
    # that races an overwrite of the same key, where S3 serves one whole version; the
    # concurrent-overwrite test below would fail on moto's race, not on ours.
    storage: S3Storage = request.getfixturevalue("s3_storage_factory")(
        multipart_threshold=5 * MiB, part_size=5 * MiB, get_retries=4
    )
    client = request.getfixturevalue("s3_client")

    def flip(key: str, pos: int) -> None:
        full = f"{storage.prefix}/{key}" if storage.prefix else key
        obj = client.get_object(Bucket=storage.bucket, Key=full)
        data = bytearray(obj["Body"].read())
        data[pos] ^= 0xFF
        client.put_object(
            Bucket=storage.bucket, Key=full, Body=bytes(data), Metadata=obj["Metadata"]
        )  # keeps the (now wrong) xxh3

    return Backend("s3", storage, flip, "s3://")


def _mem_backend() -> Backend:
    storage = MemoryStorage()
    return Backend("mem", storage, storage.flip_byte, "mem://")


def _in_worker(b: Backend) -> Backend:
    """``b``'s store with every call run in a tier worker process (what a remote tier
    uses: :class:`~tiered_log.remote.worker.WorkerStorage`)."""
    spec = spec_of(b.storage)
    worker = shared_worker(1)
    assert spec is not None and worker is not None
    return Backend(
        f"worker-{b.name}", WorkerStorage(worker, spec, b.storage), b.flip_byte, b.url_scheme
    )


@pytest.fixture(
    params=[
        pytest.param("fs", id="fs"),
        pytest.param("s3", id="s3"),
        pytest.param("mem", id="mem"),
        pytest.param("worker-fs", id="worker-fs"),
        pytest.param("worker-s3", id="worker-s3"),
    ]
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    kind = str(request.param)
    if kind.endswith("fs"):
        b = _fs_backend(tmp_path)
    elif kind.endswith("s3"):
        b = _s3_backend(request)
    else:
        b = _mem_backend()
    if kind.startswith("worker-"):
        b = _in_worker(b)
    yield b
    b.storage.close()


@pytest.fixture
def store(backend: Backend) -> RemoteStorage:
    return backend.storage


def xxh(data: bytes) -> str:
    return str(xxhash.xxh3_128_hexdigest(data))


def write_file(path: Path, size: int) -> bytes:
    data = os.urandom(size)
    path.write_bytes(data)
    return data


# ---- put / get ---------------------------------------------------------------------------


def test_is_a_remote_storage(backend: Backend) -> None:
    assert isinstance(backend.storage, RemoteStorage)
    assert backend.storage.url.startswith(backend.url_scheme)


def test_put_get_round_trip(store: RemoteStorage) -> None:
    data = os.urandom(10_000)
    info = store.put("a/b/c.log", data)
    assert info == ObjectInfo("a/b/c.log", len(data), xxh(data))
    assert store.get("a/b/c.log") == data
    assert store.size("a/b/c.log") == len(data)


def test_put_memoryview_and_empty(store: RemoteStorage) -> None:
    buf = bytearray(b"0123456789")
    assert store.put("mv", memoryview(buf)[2:6]).size == 4
    assert store.get("mv") == b"2345"
    assert store.put("empty", b"") == ObjectInfo("empty", 0, xxh(b""))
    assert store.get("empty") == b""
    assert store.size("empty") == 0


def test_put_overwrites(store: RemoteStorage) -> None:
    store.put("k", b"first version")
    store.put("k", b"second")
    assert store.get("k") == b"second"
    assert store.size("k") == 6


def test_unicode_and_odd_characters_in_keys(store: RemoteStorage) -> None:
    key = "dir with space/ünïcödé+plus=eq&amp;%20~.txt"
    store.put(key, b"x")
    assert store.get(key) == b"x"
    assert [i.key for i in store.list("dir ")] == [key]


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        (0, None, slice(0, 100)),  # whole object
        (0, 10, slice(0, 10)),  # start
        (40, 60, slice(40, 60)),  # middle
        (90, 100, slice(90, 100)),  # exact end
        (90, None, slice(90, 100)),  # open end
        (95, 1000, slice(95, 100)),  # clipped end
        (0, 1000, slice(0, 100)),  # clipped to the whole object
        (99, 100, slice(99, 100)),  # last byte
        (50, 50, slice(0, 0)),  # empty range
        (100, 100, slice(0, 0)),  # empty range at the end
    ],
)
def test_ranged_get(store: RemoteStorage, start: int, end: int | None, expected: slice) -> None:
    data = bytes(range(100))
    store.put("r", data)
    assert store.get("r", start, end) == data[expected]


@pytest.mark.parametrize(("start", "end"), [(100, None), (100, 101), (150, 200), (101, 101)])
def test_range_past_the_end_is_not_found(store: RemoteStorage, start: int, end: int | None) -> None:
    store.put("r", bytes(100))
    with pytest.raises(RemoteObjectNotFoundError):
        store.get("r", start, end)


def test_range_on_empty_object(store: RemoteStorage) -> None:
    store.put("e", b"")
    assert store.get("e", 0, 0) == b""
    with pytest.raises(RemoteObjectNotFoundError):
        store.get("e", 0, 10)


@pytest.mark.parametrize(("start", "end"), [(-1, None), (-1, 5), (5, 4)])
def test_bad_range_is_invalid(store: RemoteStorage, start: int, end: int | None) -> None:
    store.put("r", bytes(10))
    with pytest.raises(InvalidArgumentError):
        store.get("r", start, end)


def test_missing_key(store: RemoteStorage) -> None:
    store.put("present", b"x")
    for call in (
        lambda: store.get("absent"),
        lambda: store.get("absent", 0, 1),
        lambda: store.get("absent", 1, 1),
        lambda: store.size("absent"),
        lambda: store.get("present/child"),
    ):
        with pytest.raises(RemoteObjectNotFoundError) as exc_info:
            call()
        assert exc_info.value.retriable is False


def test_a_prefix_of_keys_is_not_an_object(store: RemoteStorage) -> None:
    store.put("dir/obj", b"x")
    with pytest.raises(RemoteObjectNotFoundError):
        store.get("dir")
    with pytest.raises(RemoteObjectNotFoundError):
        store.size("dir")


# ---- list ----------------------------------------------------------------------------------


def test_list_sorted_and_prefix_filtered(store: RemoteStorage) -> None:
    keys = ["b/2", "a/1", "b/10", "b/1", "ba", "c", "a-b", "b/sub/x"]
    for k in keys:
        store.put(k, k.encode())
    listed = list(store.list(""))
    assert [i.key for i in listed] == sorted(keys)
    assert all(i.size == len(i.key) for i in listed)
    assert all(i.checksum in (None, xxh(i.key.encode())) for i in listed)
    assert [i.key for i in store.list("b/")] == ["b/1", "b/10", "b/2", "b/sub/x"]
    assert [i.key for i in store.list("b")] == ["b/1", "b/10", "b/2", "b/sub/x", "ba"]
    assert [i.key for i in store.list("b/1")] == ["b/1", "b/10"]
    assert [i.key for i in store.list("b/sub/")] == ["b/sub/x"]
    assert list(store.list("zzz")) == []
    assert list(store.list("nothing/here/")) == []


def test_list_many_keys_is_paginated(store: RemoteStorage) -> None:
    keys = [f"many/{i:05d}" for i in range(1005)]  # > 1000: S3 lists in pages of 1000
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: store.put(k, b"."), keys))
    store.put("manx", b"not under many/")
    assert [i.key for i in store.list("many/")] == keys
    assert len(list(store.list("man"))) == 1006
    store.delete(keys)
    assert [i.key for i in store.list("")] == ["manx"]


def test_list_does_not_show_in_flight_puts_or_checksums(store: RemoteStorage) -> None:
    store.put("x/obj", b"abc")
    assert [(i.key, i.size) for i in store.list("")] == [("x/obj", 3)]


# ---- delete --------------------------------------------------------------------------------


def test_delete_is_idempotent(store: RemoteStorage) -> None:
    store.put("d/1", b"1")
    store.put("d/2", b"2")
    store.put("d/3", b"3")
    store.delete(["d/1", "d/2", "d/missing", "d/1"])
    assert [i.key for i in store.list("d/")] == ["d/3"]
    store.delete(["d/1", "d/2"])
    store.delete([])
    with pytest.raises(RemoteObjectNotFoundError):
        store.get("d/1")
    assert store.get("d/3") == b"3"


def test_delete_validates_every_key_first(store: RemoteStorage) -> None:
    store.put("keep", b"x")
    with pytest.raises(InvalidArgumentError):
        store.delete(["keep", "../bad"])
    assert store.get("keep") == b"x"
    with pytest.raises(InvalidArgumentError):
        store.delete("keep")


# ---- put_file ------------------------------------------------------------------------------


def test_put_file_small(store: RemoteStorage, tmp_path: Path) -> None:
    data = write_file(tmp_path / "small.bin", 100_000)
    seen: list[int] = []
    info = store.put_file("files/small", tmp_path / "small.bin", progress=seen.append)
    assert info == ObjectInfo("files/small", len(data), xxh(data))
    assert store.get("files/small") == data
    assert seen and seen[-1] == len(data)
    assert seen == sorted(seen)


def test_put_file_multipart(store: RemoteStorage, tmp_path: Path) -> None:
    size = 11 * MiB + 12345  # three 5 MiB parts on S3
    data = write_file(tmp_path / "big.bin", size)
    seen: list[int] = []
    info = store.put_file("files/big", str(tmp_path / "big.bin"), progress=seen.append)
    assert info == ObjectInfo("files/big", size, xxh(data))
    assert len(seen) > 1
    assert seen == sorted(seen)
    assert seen[-1] == size
    assert store.size("files/big") == size
    assert store.get("files/big") == data
    assert store.get("files/big", 5 * MiB - 10, 5 * MiB + 10) == data[5 * MiB - 10 : 5 * MiB + 10]
    assert [(i.key, i.size) for i in store.list("files/")] == [("files/big", size)]


def test_put_file_without_progress_and_empty(store: RemoteStorage, tmp_path: Path) -> None:
    (tmp_path / "empty").write_bytes(b"")
    assert store.put_file("e", tmp_path / "empty").size == 0
    assert store.get("e") == b""


def test_put_file_missing_source(store: RemoteStorage, tmp_path: Path) -> None:
    with pytest.raises(RemoteStorageError) as exc_info:
        store.put_file("k", tmp_path / "does-not-exist")
    assert exc_info.value.retriable is False
    assert "does-not-exist" in str(exc_info.value)
    assert list(store.list("")) == []


def test_progress_exception_aborts_the_upload(store: RemoteStorage, tmp_path: Path) -> None:
    write_file(tmp_path / "big.bin", 11 * MiB)

    def boom(n: int) -> None:
        raise KeyError("stop")

    with pytest.raises(KeyError):
        store.put_file("files/aborted", tmp_path / "big.bin", progress=boom)
    assert list(store.list("")) == []


# ---- checksums -----------------------------------------------------------------------------


def test_flipped_byte_fails_whole_object_get(backend: Backend) -> None:
    store = backend.storage
    data = os.urandom(5000)
    store.put("c/obj", data)
    backend.flip_byte("c/obj", 1234)
    with pytest.raises(RemoteCorruptionError) as exc_info:
        store.get("c/obj")
    assert exc_info.value.retriable is False
    with pytest.raises(RemoteCorruptionError):
        store.get("c/obj", 0, 5000)  # a range that covers the whole object is checked too
    # A partial range can't be checked against the whole-object digest.
    assert store.get("c/obj", 2000, 3000) == data[2000:3000]


def test_flipped_byte_in_multipart_object(backend: Backend, tmp_path: Path) -> None:
    write_file(tmp_path / "big.bin", 11 * MiB)
    backend.storage.put_file("c/big", tmp_path / "big.bin")
    backend.flip_byte("c/big", 7 * MiB)
    with pytest.raises(RemoteCorruptionError):
        backend.storage.get("c/big")


# ---- keys ----------------------------------------------------------------------------------

BAD_KEYS = [
    "",
    "/abs",
    "a//b",
    "a/",
    "a/../b",
    "..",
    ".",
    "a/./b",
    "../x",
    "a\\b",
    "a\0b",
    "a\nb",
    "x" * 1025,
    "é" * 600,
]


@pytest.mark.parametrize("key", BAD_KEYS, ids=lambda k: repr(k)[:20])
def test_invalid_keys_are_rejected(store: RemoteStorage, key: str, tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    calls: list[Callable[[], Any]] = [
        lambda: store.put(key, b"x"),
        lambda: store.put_file(key, tmp_path / "f"),
        lambda: store.get(key),
        lambda: store.get(key, 1, 2),
        lambda: store.size(key),
        lambda: store.delete([key]),
    ]
    for call in calls:
        with pytest.raises(InvalidArgumentError):
            call()
    assert list(store.list("")) == []


@pytest.mark.parametrize("prefix", ["/x", "a//b", "../x", "a/../", "a\0", "a\\b"])
def test_invalid_prefix_is_rejected_at_the_call(store: RemoteStorage, prefix: str) -> None:
    with pytest.raises(InvalidArgumentError):
        store.list(prefix)


def test_non_str_key(store: RemoteStorage) -> None:
    with pytest.raises(InvalidArgumentError):
        store.put(b"bytes-key", b"x")  # type: ignore[arg-type]


# ---- threads and lifecycle -----------------------------------------------------------------


def test_concurrent_puts_and_gets(store: RemoteStorage) -> None:
    versions = [bytes([i]) * (1000 + i) for i in range(8)]
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def worker(n: int) -> None:
        try:
            start.wait()
            for i in range(6):
                key = f"t/{n}/{i}"
                payload = os.urandom(100 + i)
                store.put(key, payload)
                assert store.get(key) == payload
                assert store.get(key, 10, 20) == payload[10:20]
                assert store.size(key) == len(payload)
                # Everyone overwrites one shared key; readers see one whole version.
                store.put("t/shared", versions[n])
                assert store.get("t/shared") in versions
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    keys = [i.key for i in store.list("t/")]
    assert len(keys) == 8 * 6 + 1
    assert keys == sorted(keys)


def test_closed_store_refuses_calls(store: RemoteStorage) -> None:
    store.put("k", b"x")
    store.close()
    store.close()  # idempotent
    for call in (
        lambda: store.get("k"),
        lambda: store.put("k", b"y"),
        lambda: store.size("k"),
        lambda: store.list(""),
        lambda: store.delete(["k"]),
    ):
        with pytest.raises(RemoteStorageError) as exc_info:
            call()
        assert exc_info.value.retriable is False


# ---- open_storage --------------------------------------------------------------------------


def test_open_storage_file_urls(tmp_path: Path) -> None:
    for url in (tmp_path.as_uri(), str(tmp_path), f"file://localhost{tmp_path}"):
        st = open_storage(url, endpoint_url="ignored-for-files")
        assert isinstance(st, LocalDirStorage)
        assert st.url == tmp_path.as_uri()
    spaced = tmp_path / "with space"
    st = open_storage(spaced.as_uri())
    assert isinstance(st, LocalDirStorage) and st.root == spaced and spaced.is_dir()


def test_open_storage_s3_url(s3_target: Any, s3_location: Any) -> None:
    bucket = s3_location.bucket
    prefix = "/".join(p for p in (s3_location.prefix, "tenant/a") if p)
    st = open_storage(
        f"s3://{bucket}/{prefix}/",
        endpoint_url=s3_target.endpoint,
        region=s3_target.region,
        access_key=s3_target.access_key,
        secret_key=s3_target.secret_key,
        path_style=True,
    )
    try:
        assert isinstance(st, S3Storage)
        assert st.url == f"s3://{bucket}/{prefix}"
        st.put("k", b"v")
        assert st.get("k") == b"v"
        assert [i.key for i in st.list("")] == ["k"]
    finally:
        st.close()


def test_open_storage_s3_url_without_prefix() -> None:
    st = open_storage(
        "s3://some-bucket", endpoint_url=None, region="us-east-1", access_key="a", secret_key="b"
    )
    assert isinstance(st, S3Storage) and st.url == "s3://some-bucket" and st.prefix == ""
    st.close()


@pytest.mark.parametrize(
    "url",
    [
        "",
        "   ",
        "bucket-name",
        "relative/dir",
        "http://example.com/x",
        "gs://bucket/x",
        "s3://",
        "s3:///prefix-only",
        "s3://user@bucket/x",
        "s3://bucket:9000/x",
        "s3://b/x?y=1",
        "s3://bucket/a//b",
        "s3://bucket/../x",
        "s3://ab/x",
        "s3://-bad/x",
        "file://otherhost/x",
        "file:relative",
        "file:///x?query=1",
    ],
)
def test_open_storage_bad_urls(url: str) -> None:
    with pytest.raises(InvalidArgumentError):
        open_storage(url)


def test_open_storage_unknown_s3_option() -> None:
    with pytest.raises(InvalidArgumentError, match="unknown S3 option"):
        open_storage("s3://bucket/x", endpoint="http://nope")


# ---- local-directory specifics -------------------------------------------------------------


def test_fs_leftover_temp_files_are_hidden(tmp_path: Path) -> None:
    st = LocalDirStorage(tmp_path)
    st.put("a/obj", b"x")
    (tmp_path / "a" / f"obj.tmp-{uuid.uuid4().hex}").write_bytes(b"partial")
    (tmp_path / "a" / f"other.tmp-{uuid.uuid4().hex}").write_bytes(b"partial")
    assert [i.key for i in st.list("")] == ["a/obj"]
    with pytest.raises(InvalidArgumentError):
        st.put(f"a/x.tmp-{uuid.uuid4().hex}", b"x")


def test_fs_checksum_in_xattr_not_in_a_sidecar(tmp_path: Path) -> None:
    st = LocalDirStorage(tmp_path)
    if not st.use_xattr:
        pytest.skip("file system without user xattrs")
    info = st.put("k", b"hello")
    assert os.getxattr(tmp_path / "k", XATTR_NAME).decode() == info.checksum
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k"]


def test_fs_sidecar_fallback(tmp_path: Path) -> None:
    st = LocalDirStorage(tmp_path)
    st.use_xattr = False  # as on a file system without user xattrs
    info = st.put("d/k", b"hello")
    assert (tmp_path / "d" / ".k.xxh3").read_text() == info.checksum
    assert list(st.list("")) == [info]
    assert st.get("d/k") == b"hello"
    (tmp_path / "d" / "k").write_bytes(b"jello")
    with pytest.raises(RemoteCorruptionError):
        st.get("d/k")
    st.delete(["d/k"])
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == []
    with pytest.raises(InvalidArgumentError):
        st.put("d/.k.xxh3", b"x")


def test_fs_key_and_directory_conflict(tmp_path: Path) -> None:
    st = LocalDirStorage(tmp_path)
    st.put("a", b"x")
    with pytest.raises(RemoteStorageError) as exc_info:
        st.put("a/b", b"y")
    assert exc_info.value.retriable is False
    st.put("d/e", b"x")
    with pytest.raises(RemoteStorageError):
        st.put("d", b"y")
    assert [i.key for i in st.list("")] == ["a", "d/e"]


def test_fs_object_without_checksum_is_served(tmp_path: Path) -> None:
    st = LocalDirStorage(tmp_path)
    (tmp_path / "dropped-in").write_bytes(b"from elsewhere")
    assert st.get("dropped-in") == b"from elsewhere"
    assert list(st.list("")) == [ObjectInfo("dropped-in", 14, None)]


# ---- discard_partial ---------------------------------------------------------------------


def test_discard_partial_keeps_stored_objects(store: RemoteStorage, tmp_path: Path) -> None:
    """Cleanup after a crashed writer never touches what is stored; missing keys are fine.
    (What it does remove, a killed writer's leftovers, is shown by test_crash_shipping.)"""
    store.put("dp/a.log", b"kept")
    src = tmp_path / "src"
    data = write_file(src, 3000)
    store.put_file("dp/b.log", src)
    store.discard_partial(["dp/a.log", "dp/b.log", "dp/never-written.log"])
    store.discard_partial([])
    assert store.get("dp/a.log") == b"kept"
    assert store.get("dp/b.log") == data
    assert [o.key for o in store.list("dp/")] == ["dp/a.log", "dp/b.log"]
    with pytest.raises(InvalidArgumentError):
        store.discard_partial(["../escape"])
