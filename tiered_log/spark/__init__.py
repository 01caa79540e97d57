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


def register(spark: Any) -> None:
    """Register the ``tiered_log`` source with ``spark`` and enable Python filter pushdown
    (``spark.sql.python.filterPushdown.enabled``) so partition/offset/timestamp filters
    prune what is read. Call once per SparkSession."""
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(TieredLogDataSource)


__all__ = ["NAME", "TieredLogDataSource", "register", "source_schema"]
