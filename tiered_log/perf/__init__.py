"""Benchmarks of tiered_log, each measuring its baseline in the same run.

- :mod:`.local`   ``perf append`` / ``perf read``: the local log vs plain files and SQLite
- :mod:`.remote`  shipping and remote reads vs plain boto3 transfers (needs an S3 endpoint)
- :mod:`.common`  the progress line and small helpers they share

Run them with ``tiered-log perf KIND`` (``--json`` for one machine-readable object).
Importing this package imports none of them.
"""
