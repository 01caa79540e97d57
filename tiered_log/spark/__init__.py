"""PySpark data source ``tiered_log``: read a topic's history (bucket + service), stream it,
write into it. Needs the ``spark`` extra (``pip install tiered-log[spark]``).

Data flow of a read: the driver asks the service for each partition's remote log index
(:mod:`.planning`), the executors fetch archived segments from the bucket with ranged
GETs and the unshipped tail through the service (:mod:`.fetch`), rows go back to Spark
as Arrow record batches. Modules: :mod:`.options` (option parsing), :mod:`.source`
(the DataSource and batch reader), :mod:`.stream` (Structured Streaming),
:mod:`.reading` (what both readers share: the bucket to read, reading one split),
:mod:`.write` (batch and streaming writes, at least once).
"""

from __future__ import annotations

from typing import Any

from .source import NAME, TieredLogDataSource, source_schema
from .workers import worker_python


def register(spark: Any) -> None:
    """Register the ``tiered_log`` source with ``spark`` and enable Python filter pushdown
    (``spark.sql.python.filterPushdown.enabled``) so partition/offset/timestamp filters
    prune what is read. Call once per SparkSession.

    The source's Python workers run the interpreter :func:`.workers.worker_python`
    picks: this one on a local master when ``PYSPARK_PYTHON`` is unset (a venv's
    ``python3`` on PATH is not needed); an interpreter that cannot import the source
    fails here, in one line saying what to set.
    """
    sc = spark.sparkContext
    python = worker_python(sc)
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    before = sc.pythonExec
    sc.pythonExec = python  # read once, when the source is wrapped for the JVM
    try:
        spark.dataSource.register(TieredLogDataSource)
    finally:
        sc.pythonExec = before


__all__ = ["NAME", "TieredLogDataSource", "register", "source_schema"]
