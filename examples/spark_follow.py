"""Follow a topic with Spark Structured Streaming and print every micro-batch.

Starts at ``--starting-offsets`` (earliest by default), reads at most
``--max-offsets-per-trigger`` records a batch, keeps its position in
``--checkpoint`` (run it again with the same directory and it resumes exactly where it
stopped: no gap, no duplicate). ``--available-now`` reads what is there and stops;
otherwise it follows for ``--seconds``::

    python examples/spark_follow.py --service-url http://127.0.0.1:8080 \\
        --bucket-url s3://archive/prod --topic orders --checkpoint /tmp/follow-ckpt

Needs the ``spark`` extra and Java 17. Runs with ``local[2]`` by default.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from tiered_log.spark import register

    spark = (
        SparkSession.builder.master(args.master)
        .appName("tiered-log-follow")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    try:
        return follow(spark, args)
    finally:
        spark.stop()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--service-url", required=True)
    ap.add_argument("--bucket-url", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--token", default=None)
    ap.add_argument("--s3-endpoint-url", default=None)
    ap.add_argument("--s3-region", default=None)
    ap.add_argument("--s3-access-key", default=os.environ.get("AWS_ACCESS_KEY_ID"))
    ap.add_argument("--s3-secret-key", default=os.environ.get("AWS_SECRET_ACCESS_KEY"))
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--starting-offsets", default="earliest")
    ap.add_argument("--max-offsets-per-trigger", type=int, default=10_000)
    ap.add_argument("--available-now", action="store_true")
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--master", default="local[2]")
    return ap.parse_args(argv)


def follow(spark: Any, args: argparse.Namespace) -> int:
    """Run the streaming query on ``spark`` (a session with the source registered)."""
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    opts = {
        "serviceUrl": args.service_url,
        "bucketUrl": args.bucket_url,
        "topic": args.topic,
        "startingOffsets": args.starting_offsets,
        "maxOffsetsPerTrigger": str(args.max_offsets_per_trigger),
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
    totals = {"batches": 0, "records": 0}

    def on_batch(batch: DataFrame, batch_id: int) -> None:
        rows: list[Any] = (
            batch.groupBy("partition")
            .agg(F.count("*").alias("n"), F.min("offset").alias("lo"), F.max("offset").alias("hi"))
            .orderBy("partition")
            .collect()
        )
        n = sum(r.n for r in rows)
        if not n:
            return
        totals["batches"] += 1
        totals["records"] += n
        where = ", ".join(f"p{r.partition} {r.lo}..{r.hi}" for r in rows)
        print(f"batch {batch_id}: {n} records ({where})", flush=True)

    t0 = time.monotonic()
    writer = (
        spark.readStream.format("tiered_log")
        .options(**opts)
        .load()
        .writeStream.foreachBatch(on_batch)
        .option("checkpointLocation", args.checkpoint)
    )
    if args.available_now:
        query = writer.trigger(availableNow=True).start()
        query.awaitTermination()
    else:
        query = writer.trigger(processingTime="1 second").start()
        query.awaitTermination(args.seconds)
        query.stop()
    err = query.exception()
    if err is not None:
        print(f"query failed: {err}", file=sys.stderr)
        return 1
    print(
        f"summary: {totals['records']} records in {totals['batches']} batch(es) "
        f"in {time.monotonic() - t0:.1f}s"
    )
    print("spark_follow OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
