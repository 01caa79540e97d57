"""Bad input to the Spark source is refused on the driver, before any job, in one line,
and a read writes nothing: a path given to ``load()``/``save()``/``start()``, a
``bucketUrl`` that names a missing directory, a directory that is not the log's store, a
missing bucket, an unreachable or hung S3 endpoint.

Each case checks the error's type (AnalysisException: Spark's planning error, not an
executor's PythonException), that it names the option, that no Spark job was started for
it, and that nothing was created."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tiered_log.client import Client
from tiered_log.remote.fs import LocalDirStorage

from .conftest import ADMIN, new_topic, wait_for
from .test_batch_read import produce

pytestmark = [pytest.mark.spark, pytest.mark.timeout(240)]

RECORDS = 300


@pytest.fixture(scope="module")
def archived_topic(service: Any) -> str:
    """One partition, 300 records, most of them only in the bucket."""
    with Client(service.url, ADMIN) as c:
        topic = new_topic(c)
        produce(c, topic, 0, RECORDS)
        wait_for(lambda: c.bounds(topic, 0).local_start_offset > 100, "segments shipped")
    return topic


def segments(service_url: str, topic: str) -> list[dict[str, Any]]:
    """The partition-0 remote segments the service reports for ``topic``."""
    r = httpx.get(
        f"{service_url}/v1/topics/{topic}/partitions/0/remote-segments",
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert r.status_code == 200, r.text
    segs: list[dict[str, Any]] = r.json()["segments"]
    return segs


def tree(root: Path) -> dict[str, tuple[int, int, bytes | None]]:
    """Every entry under (and including) ``root``: mtime, size and stored digest, so a
    file created and removed again (which touches its directory's mtime) shows too."""
    out: dict[str, tuple[int, int, bytes | None]] = {}
    for p in [root, *sorted(root.rglob("*"))]:
        st = p.lstat()
        digest = None
        with contextlib.suppress(OSError):
            digest = os.getxattr(p, "user.tiered_log.xxh3")
        out[str(p.relative_to(root))] = (st.st_mtime_ns, st.st_size, digest)
    return out


def planning_error(
    spark: Any,
    action: Callable[[], object],
    timeout: float = 60.0,
) -> tuple[BaseException, float]:
    """Run ``action`` in a job group of its own (cancelled after ``timeout`` s, so an
    error that only a hung task would report cannot hang the test); the exception it
    raised and the seconds it took. Fails if it raised nothing or if any Spark job ran."""
    group = f"bad-input-{uuid.uuid4().hex}"
    sc = spark.sparkContext
    box: list[BaseException] = []

    def run() -> None:
        sc.setJobGroup(group, "bad input", interruptOnCancel=True)
        try:
            action()
        except BaseException as exc:  # handed to the test thread
            box.append(exc)

    t0 = time.monotonic()
    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(timeout)
    if th.is_alive():
        sc.cancelJobGroup(group)
        th.join(30)
    elapsed = time.monotonic() - t0
    jobs = list(sc.statusTracker().getJobIdsForGroup(group))
    assert box, f"no error within {timeout} s (jobs started: {jobs})"
    assert not jobs, f"refused only after starting Spark job(s) {jobs}: {str(box[0])[:600]}"
    return box[0], elapsed


def assert_planning_error(exc: BaseException, pattern: str) -> None:
    """``exc`` is Spark's analysis/planning error (not an executor's PythonException)
    and its last line, the Python error, matches ``pattern`` and is all on one line."""
    import re

    from pyspark.errors import AnalysisException, PythonException

    assert isinstance(exc, AnalysisException) and not isinstance(exc, PythonException), (
        f"{type(exc).__name__}: {str(exc)[:800]}"
    )
    text = str(exc)
    lines = [ln for ln in text.splitlines() if ln.startswith("ValueError: ")]
    assert len(lines) == 1, text[:1500]
    assert re.search(pattern, lines[0]), lines[0]
    assert "The above exception was the direct cause" not in text, text[:1500]


# ---- a path where the source takes none ---------------------------------------------------


def test_load_with_a_path_is_refused(
    spark: Any, archived_topic: str, tmp_path: Path, read_options: Callable[..., dict[str, str]]
) -> None:
    where = tmp_path / "some" / "path"
    opts = read_options(archived_topic)
    batch = spark.read.format("tiered_log").options(**opts)
    stream = spark.readStream.format("tiered_log").options(**opts)
    for load in (
        lambda: batch.load(str(where)).count(),
        lambda: batch.load([str(where), str(tmp_path / "other")]).count(),
        lambda: stream.load(str(where)),
    ):
        exc, _ = planning_error(spark, load)
        assert_planning_error(exc, r"takes no path.*'topic'")
    assert not where.exists() and not where.parent.exists()


def test_save_with_a_path_is_refused(
    spark: Any, client: Client, service: Any, tmp_path: Path
) -> None:
    topic = new_topic(client)
    df = spark.createDataFrame([(b"v",)], "value binary")
    writer = (
        df.write.format("tiered_log")
        .option("serviceUrl", service.url)
        .option("token", ADMIN)
        .option("topic", topic)
        .mode("append")
    )
    with pytest.raises(Exception, match=r"takes no path.*'topic'") as info:
        writer.save(str(tmp_path / "out"))
    assert "PythonException" not in type(info.value).__name__
    q = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", "1")
        .load()
        .selectExpr("CAST(value AS STRING) AS value")
        .writeStream.format("tiered_log")
        .option("serviceUrl", service.url)
        .option("token", ADMIN)
        .option("topic", topic)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
    )
    with pytest.raises(Exception, match=r"takes no path.*'topic'"):
        started = q.start(str(tmp_path / "stream-out"))
        try:
            started.awaitTermination(60)
        finally:
            started.stop()
    assert client.bounds(topic, 0).high_watermark == 0
    assert not (tmp_path / "out").exists() and not (tmp_path / "stream-out").exists()


# ---- bucketUrl: a local directory ---------------------------------------------------------


@pytest.mark.parametrize("as_url", [False, True], ids=["path", "file-url"])
def test_missing_directory_is_refused_and_not_created(
    spark: Any,
    archived_topic: str,
    tmp_path: Path,
    as_url: bool,
    read_options: Callable[..., dict[str, str]],
) -> None:
    missing = tmp_path / "no" / "such" / "store"
    url = missing.as_uri() if as_url else str(missing)
    df = spark.read.format("tiered_log").options(**read_options(archived_topic, bucketUrl=url))
    exc, _ = planning_error(spark, lambda: df.load().count())
    assert_planning_error(exc, r"option 'bucketUrl'.*does not exist")
    assert not (tmp_path / "no").exists()


def test_streaming_read_of_a_missing_directory_is_refused_and_not_created(
    spark: Any, archived_topic: str, tmp_path: Path, read_options: Callable[..., dict[str, str]]
) -> None:
    missing = tmp_path / "no-store"
    q = (
        spark.readStream.format("tiered_log")
        .options(**read_options(archived_topic, bucketUrl=str(missing), startingOffsets="earliest"))
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        q.awaitTermination(120)
    except Exception as exc:  # StreamingQueryException, checked below
        err: BaseException | None = exc
    else:
        err = q.exception()
    finally:
        q.stop()
    assert err is not None
    text = str(err)
    assert "option 'bucketUrl'" in text and "does not exist" in text, text[:1500]
    assert "PythonException" not in text and "removed by retention" not in text, text[:1500]
    assert not missing.exists()


def test_directory_that_is_not_the_logs_store_is_refused_and_untouched(
    spark: Any, archived_topic: str, tmp_path: Path, read_options: Callable[..., dict[str, str]]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "unrelated.txt").write_text("not a log store\n")
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    before = tree(tmp_path)
    for url, pattern in [
        (str(empty), r"option 'bucketUrl'.*holds no object"),
        (str(a_file), r"option 'bucketUrl'.*not a directory"),
    ]:
        reader = spark.read.format("tiered_log").options(
            **read_options(archived_topic, bucketUrl=url)
        )
        exc, _ = planning_error(spark, reader.load().count)
        assert_planning_error(exc, pattern)
    assert tree(tmp_path) == before


def test_reader_writes_nothing_to_a_local_store(
    spark: Any,
    service: Any,
    archived_topic: str,
    tmp_path: Path,
    s3_client: Any,
    spark_bucket: str,
    read_options: Callable[..., dict[str, str]],
) -> None:
    """A copy of the topic's segment objects in a local directory store reads back whole
    and is left exactly as it was: no probe file, no directory, no digest written."""
    root = tmp_path / "store"
    copy = LocalDirStorage(root)
    for seg in segments(service.url, archived_topic):
        body = s3_client.get_object(Bucket=spark_bucket, Key=f"log/{seg['object_key']}")
        copy.put(seg["object_key"], body["Body"].read())
    copy.close()
    time.sleep(0.01)  # a write after this would show in mtimes
    before = tree(root)
    for url in (str(root), root.as_uri()):
        df = (
            spark.read.format("tiered_log")
            .options(**read_options(archived_topic, bucketUrl=url))
            .load()
        )
        offsets = sorted(r.offset for r in df.select("offset").collect())
        assert offsets == list(range(RECORDS))
    assert tree(root) == before


# ---- bucketUrl: S3 --------------------------------------------------------------------------


def test_missing_bucket_is_refused_and_not_created(
    spark: Any, archived_topic: str, s3_client: Any, read_options: Callable[..., dict[str, str]]
) -> None:
    name = f"no-such-bucket-{uuid.uuid4().hex[:10]}"
    df = spark.read.format("tiered_log").options(
        **read_options(archived_topic, bucketUrl=f"s3://{name}/log")
    )
    exc, _ = planning_error(spark, lambda: df.load().count())
    assert_planning_error(exc, rf"option 'bucketUrl'.*bucket '{name}' does not exist")
    names = [b["Name"] for b in s3_client.list_buckets().get("Buckets", [])]
    assert name not in names


def test_bucket_prefix_that_is_not_the_logs_store_is_refused(
    spark: Any, archived_topic: str, spark_bucket: str, read_options: Callable[..., dict[str, str]]
) -> None:
    df = spark.read.format("tiered_log").options(
        **read_options(archived_topic, bucketUrl=f"s3://{spark_bucket}/elsewhere")
    )
    exc, _ = planning_error(spark, lambda: df.load().count())
    assert_planning_error(exc, r"option 'bucketUrl'.*holds no object")


@contextlib.contextmanager
def dead_port() -> Iterator[int]:
    """A loopback port nothing listens on (bound, never listened: refuses connections)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


@contextlib.contextmanager
def hung_port() -> Iterator[int]:
    """A loopback port that accepts connections (the kernel's backlog) and never answers."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield s.getsockname()[1]


@pytest.mark.parametrize("kind", ["refused", "hung"])
def test_unreachable_endpoint_fails_fast_at_planning(
    spark: Any, archived_topic: str, kind: str, read_options: Callable[..., dict[str, str]]
) -> None:
    with dead_port() if kind == "refused" else hung_port() as port:
        endpoint = f"http://127.0.0.1:{port}"
        df = spark.read.format("tiered_log").options(
            **read_options(archived_topic, **{"s3.endpointUrl": endpoint})
        )
        exc, elapsed = planning_error(spark, lambda: df.load().count())
    assert_planning_error(exc, rf"option 's3.endpointUrl' '{endpoint}'")
    assert elapsed < 20, f"took {elapsed:.1f} s"


# ---- the pieces, without Spark -------------------------------------------------------------


def test_options_refuse_paths_and_malformed_store_options() -> None:
    from tiered_log.spark.options import parse_read_options, parse_write_options

    base = {"serviceUrl": "http://127.0.0.1:1", "topic": "t"}
    for bad, pattern in [
        ({"path": "/x"}, r"takes no path.*'topic'.*load\(\)"),
        ({"paths": '["/x","/y"]'}, r"takes no path"),
        ({"bucketUrl": "archive/prod"}, r"option 'bucketUrl' 'archive/prod'"),
        ({"bucketUrl": "http://host/dir"}, r"option 'bucketUrl'"),
        ({"bucketUrl": "file://host/dir"}, r"option 'bucketUrl'.*file:///absolute/path"),
        ({"bucketUrl": "s3://"}, r"option 'bucketUrl'.*s3://bucket"),
        ({"s3.endpointUrl": "127.0.0.1:9000"}, r"option 's3.endpointUrl'.*http"),
        ({"s3.accessKey": "k"}, r"'s3.accessKey' and 's3.secretKey'"),
    ]:
        with pytest.raises(ValueError, match=pattern):
            parse_read_options({**base, **bad})
    with pytest.raises(ValueError, match=r"takes no path.*save\(\) or start\(\)"):
        parse_write_options({**base, "path": "/x"})
    for good in ("s3://b/log", "/abs/dir", "file:///abs/dir", "~/dir", "./dir"):
        assert parse_read_options({**base, "bucketUrl": good}).bucket_url == good


def test_read_only_directory_store_creates_and_writes_nothing(tmp_path: Path) -> None:
    from tiered_log.errors import RemoteStorageError
    from tiered_log.spark.bucket import open_reader_store

    missing = tmp_path / "missing"
    for url in (str(missing), missing.as_uri()):
        with pytest.raises(RemoteStorageError, match="does not exist"):
            open_reader_store(url, ())
    assert not missing.exists()
    root = tmp_path / "store"
    LocalDirStorage(root).put("a/b", b"payload")
    (tmp_path / "src").write_bytes(b"x")
    before = tree(root)
    time.sleep(0.01)
    store = open_reader_store(str(root), ())
    assert isinstance(store, LocalDirStorage) and store.read_only
    assert store.get("a/b") == b"payload" and store.size("a/b") == 7
    assert [o.key for o in store.list("")] == ["a/b"]
    for write in (
        lambda: store.put("c", b"x"),
        lambda: store.put_file("c", tmp_path / "src"),
        lambda: store.delete(["a/b"]),
        lambda: store.discard_partial(["a/b"]),
    ):
        with pytest.raises(RemoteStorageError, match="read-only"):
            write()
    assert tree(root) == before
    # Without the flag the store is what it was: created on open, writable.
    fresh = LocalDirStorage(tmp_path / "new")
    assert not fresh.read_only and fresh.put("k", b"v").size == 1
