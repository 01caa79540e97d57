#!/usr/bin/env python3
"""Quickstart: create a topic, produce records and consume them over HTTP.

Usage::

    python examples/quickstart.py                       # starts a service of its own
    python examples/quickstart.py --url http://127.0.0.1:8080 [--token T]

Without ``--url`` it runs ``python -m tiered_log.service`` on a free loopback port with a
temporary data directory (the remote tier is the default local directory
``<data_dir>-remote`` beside it) and stops it at the end. With ``--url`` it talks to a running
service (e.g. the one from ``infra/docker-compose.yml``) and deletes its topic afterwards
unless ``--keep``. Exits 0 when every record read back matches what was produced.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from tiered_log.client import Client
from tiered_log.format.records import ProducerRecord


@contextlib.contextmanager
def service_url(url: str | None) -> Iterator[str]:
    """``url``, or the URL of a service started here for the duration."""
    if url:
        yield url
        return
    from _service import LocalService

    with tempfile.TemporaryDirectory(prefix="tiered-log-quickstart-") as tmp:
        print(f"starting the service (data directory {tmp}/data) ...")
        with LocalService(Path(tmp) / "data") as svc:
            print(f"service listening on {svc.url}")
            yield svc.url
        print("service stopped (SIGTERM: flushed and closed cleanly)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", help="a running service; default: start one here")
    parser.add_argument("--token", help="bearer token (when the service has auth on)")
    parser.add_argument("--topic", default=f"quickstart-{uuid.uuid4().hex[:8]}")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--records", type=int, default=100, help="records per partition")
    parser.add_argument("--keep", action="store_true", help="do not delete the topic at the end")
    args = parser.parse_args(argv)

    with service_url(args.url) as url, Client(url, token=args.token) as client:
        print(f"health: {client.health()}")
        desc = client.create_topic(
            args.topic, partitions=args.partitions, config={"segment_bytes": 64 * 1024}
        )
        print(f"created topic {desc['name']!r} with {desc['partitions']} partition(s)")
        try:
            expected: dict[int, list[bytes]] = {}
            for p in range(args.partitions):
                values = [f"partition {p} record {i}".encode() for i in range(args.records)]
                # A batch mixes plain values and records with a key and headers.
                batch: list[ProducerRecord | bytes] = [
                    ProducerRecord(v, key=b"k%d" % (i % 4), headers=(("source", b"quickstart"),))
                    if i % 10 == 0
                    else v
                    for i, v in enumerate(values)
                ]
                offsets = client.produce(args.topic, p, batch)
                expected[p] = values
                print(
                    f"produced {len(offsets)} records to partition {p}: offsets "
                    f"{offsets[0]}..{offsets[-1]}"
                )
            raw_offset = client.produce_raw(
                args.topic, 0, b"\x00\x01 a binary value \xff", key="raw"
            )
            print(f"produced one raw binary record to partition 0 at offset {raw_offset}")

            for p in range(args.partitions):
                got: list[bytes | None] = []
                offset = 0
                while True:
                    batch_read = client.fetch(args.topic, p, offset, max_records=40)
                    if not batch_read.records:
                        break
                    got.extend(r.value for r in batch_read.records)
                    offset = batch_read.next_offset
                want = expected[p] + ([b"\x00\x01 a binary value \xff"] if p == 0 else [])
                if got != want:
                    print(
                        f"MISMATCH on partition {p}: read {len(got)} records, expected {len(want)}",
                        file=sys.stderr,
                    )
                    return 1
                print(
                    f"consumed {len(got)} records from partition {p} (binary fetch, "
                    f"checksums verified); next offset {offset}"
                )
            first = client.fetch(args.topic, 0, 0, max_records=1).records[0]
            print(f"record 0: key={first.key!r} value={first.value!r} headers={first.headers!r}")
            ts = client.offset_for_timestamp(args.topic, 0, int(time.time() * 1000) - 60_000)
            print(f"first offset in the last minute: {ts}")
            b = client.bounds(args.topic, 0)
            print(
                f"bounds of partition 0: log_start={b.log_start_offset} "
                f"local_start={b.local_start_offset} high_watermark={b.high_watermark} "
                f"next={b.next_offset}"
            )
            print(f"topics on the service: {[t['name'] for t in client.list_topics()]}")
        finally:
            if not args.keep:
                client.delete_topic(args.topic)
                print(f"deleted topic {args.topic!r}")
    print("quickstart OK")
    return 0


if __name__ == "__main__":
    from _service import run_main

    run_main(main, __file__)
