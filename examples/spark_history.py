"""Read a topic's whole history with Spark (archive + tail), write it as Parquet by date,
and compute a daily aggregate.

The archived segments are read by the Spark executors straight from the bucket (ranged
GETs, checksums verified); the records not yet shipped come through the service. Run it
against a running service whose remote tier is ``--bucket-url``::

    python examples/spark_history.py --service-url http://127.0.0.1:8080 \\
        --bucket-url s3://archive/prod --s3-endpoint-url http://127.0.0.1:9000 \\
        --topic orders --out /tmp/orders-parquet

Progress (stages, tasks done) goes to stderr every second; a summary to stdout.
Needs the ``spark`` extra and Java 17. Runs with ``local[2]`` by default.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from typing import Any


def _progress(sc: Any, stop: threading.Event) -> None:
    """Print the running stages' task counts to stderr, once a second."""
    tracker = sc.statusTracker()
    last = ""
    while not stop.wait(1.0):
        parts = []
        for sid in tracker.getActiveStageIds():
            info = tracker.getStageInfo(sid)
            if info is not None:
                parts.append(f"stage {sid}: {info.numCompletedTasks}/{info.numTasks} tasks")
        line = "; ".join(parts)
        if line and line != last:
            print(f"progress: {line}", file=sys.stderr, flush=True)
            last = line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--service-url", required=True)
    ap.add_argument("--bucket-url", required=True, help="the service's remote tier, e.g. s3://b/p")
    ap.add_argument("--topic", required=True)
    ap.add_argument("--token", default=None)
    ap.add_argument("--s3-endpoint-url", default=None)
    ap.add_argument("--s3-region", default=None)
    ap.add_argument("--s3-access-key", default=os.environ.get("AWS_ACCESS_KEY_ID"))
    ap.add_argument("--s3-secret-key", default=os.environ.get("AWS_SECRET_ACCESS_KEY"))
    ap.add_argument("--out", required=True, help="directory for the Parquet copy")
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args(argv)

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from tiered_log.spark import register

    spark = (
        SparkSession.builder.master(args.master)
        .appName("tiered-log-history")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    stop = threading.Event()
    watcher = threading.Thread(target=_progress, args=(spark.sparkContext, stop), daemon=True)
    watcher.start()
    t0 = time.monotonic()
    try:
        opts = {
            "serviceUrl": args.service_url,
            "bucketUrl": args.bucket_url,
            "topic": args.topic,
            "startingOffsets": "earliest",
            "endingOffsets": "latest",
        }
        for k, v in (
            ("token", args.token),
            ("s3.endpointUrl", args.s3_endpoint_url),
            ("s3.region", args.s3_region),
            ("s3.accessKey", args.s3_access_key),
            ("s3.secretKey", args.s3_secret_key),
        ):
            if v:
                opts[k] = v
        df = spark.read.format("tiered_log").options(**opts).load()
        splits = df.rdd.getNumPartitions()
        print(f"planned {splits} split(s) of topic {args.topic} (archived segments + tails)")
        dated = df.withColumn("date", F.to_date("timestamp"))
        dated.write.mode("overwrite").partitionBy("date").parquet(args.out)
        copy = spark.read.parquet(args.out)
        daily = (
            copy.groupBy("date")
            .agg(
                F.count("*").alias("records"),
                F.sum(F.length("value")).alias("value_bytes"),
                F.min("offset").alias("min_offset"),
                F.max("offset").alias("max_offset"),
            )
            .orderBy("date")
            .collect()
        )
        per_part = (
            copy.groupBy("partition")
            .agg(F.count("*").alias("n"), F.min("offset").alias("lo"), F.max("offset").alias("hi"))
            .orderBy("partition")
        )
        total = 0
        print("daily aggregate:")
        for r in daily:
            print(
                f"  {r.date}: {r.records} records, {r.value_bytes} value bytes, "
                f"offsets {r.min_offset}..{r.max_offset}"
            )
            total += r.records
        for r in per_part.collect():
            print(f"partition {r.partition}: {r.n} records, offsets {r.lo}..{r.hi}")
        secs = time.monotonic() - t0
        print(
            f"summary: {total} records over {len(daily)} day(s) written to {args.out} "
            f"in {secs:.1f}s ({total / secs:,.0f} records/s)"
        )
        print("spark_history OK")
    finally:
        stop.set()
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
