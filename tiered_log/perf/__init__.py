"""Benchmarks of tiered_log, each measuring its baseline in the same run.

- :mod:`.local`   ``perf append`` / ``perf read``: the local log vs plain files and SQLite
- :mod:`.http`    ``perf http-produce`` / ``perf http-fetch``: the service over HTTP (a
                  real server process) vs the library in process
- :mod:`.remote`  ``perf ship`` / ``perf remote-read`` / ``perf produce-latency``: the
                  remote tier vs plain boto3 transfers (moto's S3 server unless an
                  endpoint is given)
- :mod:`.spark`   ``perf spark-scan``: Spark reading an archive vs a Parquet copy
- :mod:`.archive` ``perf archive``: the archive compressed and encrypted vs plain (bucket
                  bytes, shipping, cold reads, scrubs)
- :mod:`.common`  the progress line and small helpers they share (also used by
                  ``tiered-log append`` and ``verify``)

Each module runs its benchmarks and returns one JSON-able report; the command line
(:mod:`tiered_log.cli.perf`) parses the arguments and prints the report. Run them with
``tiered-log perf KIND`` (``--json`` for one machine-readable object). Importing this
package imports none of them; nothing here imports the command line.
"""
