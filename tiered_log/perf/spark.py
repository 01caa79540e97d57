"""``tiered-log perf spark-scan``: Spark scanning an archive through the ``tiered_log`` source.

Builds an archive of ``--records`` 1 KiB records (default 2 million, about 2 GB) over
``--partitions`` partitions with the library itself (TieredLog appends, segments shipped
to a local-directory store, the topic's metadata put where the service finds it), starts
the service on an empty data directory (it restores the topic from the store, reading
only the manifests) and then, in the same run, times:

- ``local[1]`` and ``local[2]``: ``sum(length(value))`` and ``count(*)`` over the whole
  topic read with ``spark.read.format("tiered_log")`` (every archived byte fetched with
  ranged GETs and checksum-verified by the executors);
- ``parquet``: the same aggregate over a Parquet copy of the same rows (written by Spark
  from the source in the same run), with ``local[2]``.

The sessions set ``spark.python.unix.domain.socket.enabled`` (Spark 4.1+; off by default):
the rows of a Python data source travel from its Python workers to the JVM over a Unix
domain socket instead of TCP on loopback, the setting the README's Spark figures
recommend for the source. It changes nothing on the Parquet side, which runs no Python
worker. ``run_spark_scan(unix_socket=False)`` measures without it.

Targets: ``local[2]`` >= 1.6x ``local[1]`` (scaling), and ``local[2]`` >= 0.5x Parquet.
Each configuration first runs the same scan once, untimed (the JVM's JIT, Spark's Python
workers and the page cache warm on both sides alike: a filtered warm-up let Parquet skip
most of its read path, so its timed scan was the first full one while ours was not).
Each figure is the best of ``--repeat`` runs. Progress goes to stderr.

Not thread-safe; one benchmark per process (it owns the SparkSession).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import MB, Progress, environment, rate, ratio, say

DEFAULT_SPARK_RECORDS = 2_000_000
RECORD_BYTES = 1024
TOPIC = "perf-spark"
TARGETS = {"scaling_local2_vs_local1": 1.6, "local2_vs_parquet": 0.5}


def build_archive(
    root: Path, records: int, partitions: int, segment_bytes: int, progress: bool | None
) -> tuple[str, int]:
    """Write and ship the archive; returns the store URL and the archived bytes."""
    from ..broker.topics import TopicMeta, log_id_of, topic_object_key
    from ..config import TopicConfig
    from ..format.records import ProducerRecord
    from ..local.log import LogConfig
    from ..partition import TieredLog
    from ..remote.storage import open_storage
    from ..remote.tier import TierConfig

    bucket = root / "bucket"
    store = open_storage(bucket.as_uri())
    meta = TopicMeta(
        TOPIC,
        partitions,
        config=TopicConfig.model_validate({"segment_bytes": segment_bytes}),
        topic_id=os.urandom(16).hex(),
        created_ms=int(time.time() * 1000),
    )
    pool = os.urandom(RECORD_BYTES * 64)
    base_ts = int(time.time() * 1000) - records
    span = len(pool) - RECORD_BYTES
    shipped = 0
    with Progress(records, "building archive", enabled=progress) as prog:
        for p in range(partitions):
            n = records // partitions + (1 if p < records % partitions else 0)
            log = TieredLog(
                root / "build" / str(p),
                log_id=log_id_of(meta, p),
                storage=store,
                config=LogConfig(segment_bytes=segment_bytes),
                tier=TierConfig(),
                start_shipper=False,
                rebuild=False,
            )
            try:
                done = 0
                while done < n:
                    k = min(1000, n - done)
                    batch = [
                        ProducerRecord(
                            pool[(j := ((done + i) * 977) % span) : j + RECORD_BYTES],
                            timestamp=base_ts + done + i,
                        )
                        for i in range(k)
                    ]
                    log.append_batch(batch)
                    done += k
                    prog.advance(k)
                log.roll()
                log.flush()
                log.tier_once()
                shipped += int(log.stats()["remote_bytes"])
            finally:
                log.close()
        shutil.rmtree(root / "build", ignore_errors=True)
    store.put(topic_object_key(TOPIC), meta.to_json())
    store.close()
    return bucket.as_uri(), shipped


def _session(master: str, unix_socket: bool) -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from ..spark import register

    spark = (
        SparkSession.builder.master(master)
        .appName(f"tiered-log-perf-{master}")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.unix.domain.socket.enabled", str(unix_socket).lower())
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def _scan(df: Any) -> tuple[float, int, int]:
    """Seconds, rows and value bytes of one full scan of ``df``."""
    from pyspark.sql import functions as F

    t0 = time.perf_counter()
    row = df.agg(F.count("*").alias("n"), F.sum(F.length("value")).alias("b")).collect()[0]
    return time.perf_counter() - t0, int(row.n), int(row.b or 0)


def run_spark_scan(
    records: int = DEFAULT_SPARK_RECORDS,
    *,
    partitions: int = 2,
    segment_bytes: int = 64 << 20,
    repeat: int = 1,
    directory: str | None = None,
    keep: bool = False,
    progress: bool | None = None,
    unix_socket: bool = True,
) -> dict[str, Any]:
    """Run the benchmark (see the module docstring); the JSON-able report.

    ``unix_socket``: Spark's Python workers talk to the JVM over a Unix domain socket
    (``spark.python.unix.domain.socket.enabled``) instead of TCP on loopback.
    """

    from .http import ServerProcess

    show = progress is not False
    root = Path(tempfile.mkdtemp(prefix="tiered-log-spark-", dir=directory))
    server: ServerProcess | None = None
    spark: Any = None
    try:
        say(
            f"building an archive of {records:,} x {RECORD_BYTES} B records in {root}", enabled=show
        )
        url, archived = build_archive(root, records, partitions, segment_bytes, progress)
        server = ServerProcess(
            root / "data", root / "server.log", {"remote_url": url, "remote_cache_bytes": "0"}
        ).start()
        say(f"service restored the topic from the store at {server.url}", enabled=show)
        opts = {"serviceUrl": server.url, "topic": TOPIC, "bucketUrl": url}
        results: dict[str, dict[str, Any]] = {}
        parquet = root / "parquet"
        for master in ("local[1]", "local[2]"):
            spark = _session(master, unix_socket)
            df = spark.read.format("tiered_log").options(**opts).load()
            splits = df.rdd.getNumPartitions()
            say(f"{master}: warming up (the same scan, untimed)", enabled=show)
            _scan(spark.read.format("tiered_log").options(**opts).load())
            runs = []
            for i in range(repeat):
                say(
                    f"{master}: scanning the archive ({splits} splits), run {i + 1}/{repeat}",
                    enabled=show,
                )
                secs, n, b = _scan(df)
                if n != records or b != records * RECORD_BYTES:
                    raise RuntimeError(f"{master} read {n} rows / {b} bytes, expected {records}")
                runs.append(secs)
            best = min(runs)
            results[master] = {
                "seconds": round(best, 3),
                "rows_per_s": round(rate(records, best)),
                "mb_per_s": round(rate(records * RECORD_BYTES, best) / MB, 1),
                "splits": splits,
                "runs_seconds": [round(r, 3) for r in runs],
            }
            if master == "local[2]":
                say("writing the Parquet copy", enabled=show)
                df.drop("headers").write.mode("overwrite").parquet(str(parquet))
                pq = spark.read.parquet(str(parquet))
                say(
                    "local[2]: warming up on the Parquet copy (the same scan, untimed)",
                    enabled=show,
                )
                _scan(spark.read.parquet(str(parquet)))
                runs = []
                for i in range(repeat):
                    say(f"local[2]: scanning the Parquet copy, run {i + 1}/{repeat}", enabled=show)
                    secs, n, b = _scan(pq)
                    if n != records:
                        raise RuntimeError(f"parquet read {n} rows, expected {records}")
                    runs.append(secs)
                best = min(runs)
                results["parquet"] = {
                    "seconds": round(best, 3),
                    "rows_per_s": round(rate(records, best)),
                    "mb_per_s": round(rate(records * RECORD_BYTES, best) / MB, 1),
                    "splits": pq.rdd.getNumPartitions(),
                    "runs_seconds": [round(r, 3) for r in runs],
                }
            spark.stop()
            spark = None
        figures = {
            "scaling_local2_vs_local1": round(
                ratio(results["local[2]"]["rows_per_s"], results["local[1]"]["rows_per_s"]), 3
            ),
            "local2_vs_parquet": round(
                ratio(results["local[2]"]["rows_per_s"], results["parquet"]["rows_per_s"]), 3
            ),
        }
        return {
            "benchmark": "spark-scan",
            "params": {
                "records": records,
                "record_bytes": RECORD_BYTES,
                "partitions": partitions,
                "segment_bytes": segment_bytes,
                "repeat": repeat,
                "archived_bytes": archived,
                "store": "local directory",
                "python_unix_socket": unix_socket,
            },
            "results": results,
            "figures": figures,
            "targets": {
                k: {"target": v, "measured": figures[k], "met": figures[k] >= v}
                for k, v in TARGETS.items()
            },
            "environment": environment(),
        }
    finally:
        if spark is not None:
            spark.stop()
        if server is not None:
            server.stop()
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


def format_table(report: dict[str, Any]) -> str:
    """The report as a few lines of text."""
    lines = [f"spark-scan: {report['params']['records']:,} x {RECORD_BYTES} B records"]
    for name, r in report["results"].items():
        lines.append(
            f"  {name:<9} {r['rows_per_s']:>12,} rows/s {r['mb_per_s']:>8} MB/s "
            f"{r['seconds']:>8}s  ({r['splits']} splits)"
        )
    for k, t in report["targets"].items():
        lines.append(
            f"  {k}: {t['measured']} (target >= {t['target']}: {'met' if t['met'] else 'NOT met'})"
        )
    return "\n".join(lines)


__all__ = ["DEFAULT_SPARK_RECORDS", "build_archive", "format_table", "run_spark_scan"]
