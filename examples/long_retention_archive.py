#!/usr/bin/env python3
"""Long-retention archive: keep almost nothing on local disk, read old offsets from the
remote tier.

The topic has tiny segments (``segment_bytes``) and ``local_retention_bytes=0``: every
sealed segment is deleted locally as soon as it has been copied to the remote tier, so
only the active segment stays on disk. The example produces records, waits until the
partition's ``local_start_offset`` moves past 0 (the early segments are only in the
remote tier now), then reads everything back from offset 0 over HTTP: the service reads
the archived part from the remote tier, the rest from disk, in one consistent stream.

Usage::

    python examples/long_retention_archive.py              # starts a service of its own
    python examples/long_retention_archive.py --url http://127.0.0.1:8080 [--token T]

Without ``--url`` the service runs on a free loopback port with a temporary data
directory and the default remote tier (the local directory ``<data_dir>-remote`` beside it;
set ``--remote-url s3://bucket/prefix`` plus the ``TIERED_LOG_S3_*`` variables to use a
bucket). Exits 0 when every record read back matches.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

from tiered_log.client import Client


@contextlib.contextmanager
def service_url(url: str | None, remote_url: str | None) -> Iterator[str]:
    """``url``, or the URL of a service started here (shipping every 100 ms)."""
    if url:
        yield url
        return
    from _service import LocalService

    settings = {"ship_interval_ms": "100"}
    if remote_url:
        settings["remote_url"] = remote_url
    with tempfile.TemporaryDirectory(prefix="tiered-log-archive-") as tmp:
        data = Path(tmp) / "data"
        where = remote_url or f"{data}-remote"
        print(f"starting the service (data directory {data}, remote tier {where}) ...")
        with LocalService(data, **settings) as svc:
            print(f"service listening on {svc.url}")
            yield svc.url
        print("service stopped")


def metric(text: str, name: str, topic: str) -> float:
    """The value of ``name{topic="<topic>"}`` in a Prometheus text page (0 if absent)."""
    prefix = f'{name}{{topic="{topic}"}} '
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line[len(prefix) :])
    return 0.0


def main(argv: list[str] | None = None) -> int:
    from _service import wait_until

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running service; default: start one here")
    parser.add_argument("--token", help="bearer token (when the service has auth on)")
    parser.add_argument("--remote-url", help="remote tier of the service started here")
    parser.add_argument("--topic", default=f"archive-{uuid.uuid4().hex[:8]}")
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--record-bytes", type=int, default=200)
    parser.add_argument("--segment-bytes", type=int, default=16 * 1024)
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="how long to wait for shipping (seconds)"
    )
    parser.add_argument("--keep", action="store_true", help="do not delete the topic at the end")
    args = parser.parse_args(argv)

    config = {
        "segment_bytes": args.segment_bytes,
        "local_retention_bytes": 0,
        "remote_enabled": True,
    }
    with service_url(args.url, args.remote_url) as url, Client(url, token=args.token) as client:
        client.create_topic(args.topic, partitions=1, config=config)
        print(f"created topic {args.topic!r} with config {config}")
        try:
            pad = max(0, args.record_bytes - 9)
            values = [b"%08d|" % i + b"x" * pad for i in range(args.records)]
            # Small batches: a batch never straddles segments, so segments roll between them.
            for i in range(0, len(values), 50):
                client.produce(args.topic, 0, values[i : i + 50])
            b = client.bounds(args.topic, 0)
            print(
                f"produced {len(values)} records of {args.record_bytes} bytes "
                f"({len(values) * args.record_bytes / 1024:.0f} KiB) into "
                f"{args.segment_bytes // 1024} KiB segments"
            )
            print(
                f"bounds right after producing: log_start={b.log_start_offset} "
                f"local_start={b.local_start_offset} next={b.next_offset}"
            )

            print("waiting for the shipper to copy sealed segments and drop them locally ...")

            def shipped() -> bool:
                # Every sealed segment copied (copy lag 0) and the copies dropped locally.
                lag = metric(client.metrics(), "tiered_log_copy_lag_segments", args.topic)
                return lag == 0 and client.bounds(args.topic, 0).local_start_offset > 0

            wait_until("the sealed segments to be shipped", shipped, timeout=args.timeout)
            b = client.bounds(args.topic, 0)
            print(
                f"bounds after shipping:       log_start={b.log_start_offset} "
                f"local_start={b.local_start_offset} next={b.next_offset}"
            )
            print(
                f"offsets {b.log_start_offset}..{b.local_start_offset - 1} are only in the "
                f"remote tier now; {b.local_start_offset}..{b.next_offset - 1} are local"
            )
            if b.log_start_offset != 0 or b.local_start_offset <= 0:
                print("unexpected bounds", file=sys.stderr)
                return 1

            first = client.fetch(args.topic, 0, 0, max_records=1).records[0]
            assert first.value is not None  # every record written here has a value
            print(
                f"read offset 0 (from the remote tier): {first.value[:9]!r}... "
                f"({len(first.value)} bytes)"
            )
            got: list[bytes | None] = []
            offset = 0
            while offset < b.next_offset:
                batch = client.fetch(args.topic, 0, offset, max_records=1000, max_bytes=1 << 20)
                if not batch.records:
                    break
                got.extend(r.value for r in batch.records)
                offset = batch.next_offset
            if got != values:
                print(f"MISMATCH: read {len(got)} records, expected {len(values)}", file=sys.stderr)
                return 1
            print(
                f"read all {len(got)} records back from offset 0 (remote tier, then local); "
                f"every value matches"
            )

            text = client.metrics()
            for name in (
                "tiered_log_remote_copy_segments_total",
                "tiered_log_remote_fetch_bytes_total",
                "tiered_log_remote_cache_misses_total",
                "tiered_log_remote_cache_hits_total",
                "tiered_log_local_bytes",
                "tiered_log_remote_bytes",
            ):
                print(f"  {name} = {metric(text, name, args.topic):.0f}")
        finally:
            if not args.keep:
                client.delete_topic(args.topic)
                print(f"deleted topic {args.topic!r} (and its remote objects)")
    print("long-retention archive OK")
    return 0


if __name__ == "__main__":
    from _service import run_main

    run_main(main, __file__)
