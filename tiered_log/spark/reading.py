"""What a batch read and a streaming read share: the bucket to read from and the
executor-side read of one planned split (archived segment from the bucket, unshipped
tail through the service: :mod:`tiered_log.spark.fetch`), as Arrow record batches of the
schema Spark expects.

:mod:`tiered_log.spark.source` (batch) and :mod:`tiered_log.spark.stream` (streaming)
both import this module; neither imports the other for it.

Functions only; the one state is whether this process's heap was frozen
(:func:`freeze_worker_heap`). Safe from any thread (Spark calls ``read_split`` on an
executor, one split per task).
"""

from __future__ import annotations

import gc
import os
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


_frozen = False


def freeze_worker_heap() -> None:
    """Once per process: a full collection, then move every object left (the modules
    the executor's Python worker has imported: pyspark, pyarrow, pandas, numpy, this
    package) out of the garbage collector's sight.

    Only in a reused Spark Python worker (``SPARK_REUSE_WORKER`` set, as Spark's
    daemon reads it), which runs ``gc.collect()`` after every task; over those
    ~100,000 long-lived objects each such full collection took 50-120 ms of CPU on the
    project's VM, a third of a worker's time in ``perf spark-scan`` (a task per 64 MiB
    segment). Frozen, they are not traversed again, and the collection after a task
    sees only what later tasks leave. Called after the process's first task has read
    its split (so the modules imported lazily by then are frozen too); what is frozen is
    never freed by the collector, which is what modules loaded for the process's
    lifetime need anyway, and the collection first leaves no garbage among them.
    """
    global _frozen
    if _frozen or not os.environ.get("SPARK_REUSE_WORKER"):
        return  # done, or not a reused Spark worker (the driver, a test): left alone
    _frozen = True
    gc.collect()
    gc.freeze()


def _then_freeze(batches: Iterator[Any]) -> Iterator[Any]:
    """``batches``, then :func:`freeze_worker_heap` once they are all read."""
    yield from batches
    freeze_worker_heap()


def read_split(split: InputPartition, opts: ReadOptions, schema: StructType) -> Iterator[Any]:
    """Arrow batches of one split (executor side; see :mod:`tiered_log.spark.fetch`)."""
    from .fetch import read_archive, read_tail

    aschema = arrow_schema(schema)
    if isinstance(split, ArchiveSplit):
        return _then_freeze(read_archive(split, opts, aschema))
    if isinstance(split, TailSplit):
        return _then_freeze(read_tail(split, opts, aschema))
    return iter(())


__all__ = ["arrow_schema", "bucket_of", "read_split"]
