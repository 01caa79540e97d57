"""What a batch read and a streaming read share: the bucket to read from and the
executor-side read of one planned split (archived segment from the bucket, unshipped
tail through the service: :mod:`tiered_log.spark.fetch`), as Arrow record batches of the
schema Spark expects.

:mod:`tiered_log.spark.source` (batch) and :mod:`tiered_log.spark.stream` (streaming)
both import this module; neither imports the other for it.

Functions only, no state: safe from any thread (Spark calls ``read_split`` on an
executor, one split per task).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from .options import ReadOptions
from .planning import ArchiveSplit, PartitionState, TailSplit


def arrow_schema(schema: StructType) -> Any:
    """The Arrow schema Spark expects batches from ``read`` to have."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")


def bucket_of(opts: ReadOptions, states: Iterable[PartitionState]) -> str | None:
    """The bucket URL to read from: the option, else what the service reports."""
    if opts.bucket_url:
        return opts.bucket_url
    for st in states:
        if st.remote_url:
            return st.remote_url
    return None


def read_split(split: InputPartition, opts: ReadOptions, schema: StructType) -> Iterator[Any]:
    """Arrow batches of one split (executor side; see :mod:`tiered_log.spark.fetch`)."""
    from .fetch import read_archive, read_tail

    aschema = arrow_schema(schema)
    if isinstance(split, ArchiveSplit):
        return read_archive(split, opts, aschema)
    if isinstance(split, TailSplit):
        return read_tail(split, opts, aschema)
    return iter(())


__all__ = ["arrow_schema", "bucket_of", "read_split"]
