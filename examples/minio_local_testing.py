#!/usr/bin/env python3
"""The service with its remote tier in an S3 bucket: MinIO, or moto's S3 server.

Usage::

    # against MinIO (e.g. `docker compose -f infra/docker-compose.yml up -d minio create-bucket`)
    python examples/minio_local_testing.py --endpoint http://127.0.0.1:9000 \\
        --access-key tiered --secret-key tiered-secret-key --bucket tiered-log

    # no MinIO at hand: moto's S3 server is started on 127.0.0.1 instead (moto comes
    # with the dev extra: pip install -e '.[dev]')
    python examples/minio_local_testing.py

Steps: create the bucket (if missing), start ``python -m tiered_log.service`` with
``TIERED_LOG_REMOTE_URL=s3://<bucket>/<prefix>`` and the ``TIERED_LOG_S3_*`` settings,
create a topic with small segments and ``local_retention_bytes=0``, produce, wait until
the sealed segments are shipped, list the objects in the bucket with boto3, read every
record back (the early ones from the bucket), then restart the service on an EMPTY data
directory and read offset 0 again: the topic and its archived records come back from the
bucket alone. Exits 0 when everything read back matches. The objects are removed at the
end unless ``--keep``. An endpoint that cannot be reached or refuses the credentials,
and moto missing without ``--endpoint``, are one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from tiered_log.client import Client

MINIO_UP = "docker compose -f infra/docker-compose.yml up -d minio create-bucket"


class SetupError(Exception):
    """What keeps the example from starting, in one line for the user."""


@contextlib.contextmanager
def s3_endpoint(endpoint: str | None) -> Iterator[str]:
    """``endpoint``, or the URL of a moto S3 server started here on 127.0.0.1."""
    if endpoint:
        yield endpoint
        return
    try:
        from moto.server import ThreadedMotoServer
    except ImportError:
        raise SetupError(
            "without --endpoint this example starts moto's S3 server, and moto is not "
            "installed: pip install -e '.[dev]', or give --endpoint http://127.0.0.1:9000 "
            f"for a MinIO ({MINIO_UP})"
        ) from None

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        url = f"http://{host}:{port}"
        print(f"no --endpoint: started moto's S3 server on {url}")
        yield url
    finally:
        server.stop()
        print("moto's S3 server stopped")


def s3_client(endpoint: str, access_key: str, secret_key: str, region: str) -> Any:
    """A boto3 S3 client for the endpoint (path-style addressing, as MinIO wants)."""
    return boto3.session.Session().client(
        "s3",
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        # A MinIO that is down fails in seconds, not after botocore's five attempts.
        config=Config(
            s3={"addressing_style": "path"},
            connect_timeout=5,
            read_timeout=30,
            retries={"max_attempts": 2},
        ),
    )


def ensure_bucket(s3: Any, endpoint: str, bucket: str) -> None:
    """Create ``bucket`` unless it exists; SetupError (one line) when the endpoint cannot
    be reached or refuses the request."""
    try:
        existing = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
        if bucket not in existing:
            s3.create_bucket(Bucket=bucket)
            print(f"created bucket {bucket}")
        else:
            print(f"bucket {bucket} exists")
    except ClientError as exc:
        err = exc.response.get("Error", {})
        raise SetupError(
            f"the S3 endpoint {endpoint} refused the request ({err.get('Code', '?')}: "
            f"{err.get('Message', exc)}): check --access-key/--secret-key and --bucket"
        ) from None
    except BotoCoreError as exc:
        raise SetupError(
            f"cannot reach the S3 endpoint {endpoint} ({exc}): start MinIO ({MINIO_UP}), "
            "or leave out --endpoint to use moto's S3 server"
        ) from None


def list_objects(s3: Any, bucket: str, prefix: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        out.extend(page.get("Contents", []))
    return out


def read_all(client: Client, topic: str, end: int) -> list[bytes | None]:
    got: list[bytes | None] = []
    offset = 0
    while offset < end:
        batch = client.fetch(topic, 0, offset, max_records=1000)
        if not batch.records:
            break
        got.extend(r.value for r in batch.records)
        offset = batch.next_offset
    return got


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--endpoint",
        help="S3 endpoint (MinIO); default: start moto's S3 server on 127.0.0.1 (moto comes "
        "with the dev extra)",
    )
    parser.add_argument("--access-key", default="testing")
    parser.add_argument("--secret-key", default="testing")
    parser.add_argument("--region", default="us-east-1")
    parser.add_argument("--bucket", default="tiered-log-example")
    parser.add_argument("--prefix", default=f"example-{uuid.uuid4().hex[:8]}")
    parser.add_argument("--records", type=int, default=1000)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--keep", action="store_true", help="leave the objects in the bucket")
    args = parser.parse_args(argv)

    try:
        return run(args)
    except SetupError as exc:
        print(f"minio_local_testing.py: error: {exc}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    """The example's steps (see the module docstring)."""
    from _service import LocalService, wait_until

    topic = "orders"
    with (
        s3_endpoint(args.endpoint) as endpoint,
        tempfile.TemporaryDirectory(prefix="tiered-log-s3-") as tmp,
    ):
        s3 = s3_client(endpoint, args.access_key, args.secret_key, args.region)
        ensure_bucket(s3, endpoint, args.bucket)
        remote_url = f"s3://{args.bucket}/{args.prefix}"
        settings = {
            "remote_url": remote_url,
            "s3_endpoint_url": endpoint,
            "s3_region": args.region,
            "s3_access_key": args.access_key,
            "s3_secret_key": args.secret_key,
            "ship_interval_ms": "100",
        }
        print(
            f"service settings: TIERED_LOG_REMOTE_URL={remote_url} "
            f"TIERED_LOG_S3_ENDPOINT_URL={endpoint} (credentials not shown)"
        )
        values = [b"record %06d " % i + b"." * 180 for i in range(args.records)]
        config = {"segment_bytes": 16 * 1024, "local_retention_bytes": 0}
        try:
            with LocalService(Path(tmp) / "data", **settings) as svc, Client(svc.url) as client:
                print(f"service listening on {svc.url}")
                client.create_topic(topic, partitions=1, config=config)
                for i in range(0, len(values), 50):
                    client.produce(topic, 0, values[i : i + 50])
                print(f"produced {len(values)} records to {topic}/0 (config {config})")

                def shipped() -> bool:
                    text = client.metrics()
                    lag = next(
                        (
                            float(ln.split()[-1])
                            for ln in text.splitlines()
                            if ln.startswith(f'tiered_log_copy_lag_segments{{topic="{topic}"}}')
                        ),
                        1.0,
                    )
                    return lag == 0 and client.bounds(topic, 0).local_start_offset > 0

                wait_until("the sealed segments to be shipped", shipped, timeout=args.timeout)
                b = client.bounds(topic, 0)
                print(
                    f"shipped: log_start={b.log_start_offset} local_start={b.local_start_offset} "
                    f"next={b.next_offset}"
                )

                objects = list_objects(s3, args.bucket, args.prefix + "/")
                total = sum(int(o["Size"]) for o in objects)
                print(
                    f"objects under s3://{args.bucket}/{args.prefix}/ ({len(objects)}, "
                    f"{total:,} bytes):"
                )
                kinds: dict[str, int] = {}
                for o in objects:
                    kind = o["Key"].rsplit("/", 1)[-1].rsplit(".", 1)[-1]
                    kinds[kind] = kinds.get(kind, 0) + 1
                print("  by kind: " + ", ".join(f"{n} .{k}" for k, n in sorted(kinds.items())))
                for o in objects[:6]:
                    print(f"  {o['Size']:>8}  {o['Key']}")
                if len(objects) > 6:
                    print(f"  ... and {len(objects) - 6} more")
                if not any(o["Key"].endswith(".log") for o in objects):
                    print("no segment objects in the bucket", file=sys.stderr)
                    return 1

                got = read_all(client, topic, b.next_offset)
                if got != values:
                    print(f"MISMATCH: read {len(got)} of {len(values)} records", file=sys.stderr)
                    return 1
                print(
                    f"read all {len(got)} records back; offsets 0..{b.local_start_offset - 1} "
                    "came from the bucket"
                )
                end = b.next_offset
            print("service stopped")

            # A lost disk: a new server on an empty data directory, same bucket and prefix.
            with (
                LocalService(Path(tmp) / "fresh-data", **settings) as svc,
                Client(svc.url) as client,
            ):
                print(f"restarted on an EMPTY data directory: {svc.url}")
                names = [t["name"] for t in client.list_topics()]
                b = client.bounds(topic, 0)
                print(
                    f"topics restored from the bucket: {names}; bounds log_start="
                    f"{b.log_start_offset} local_start={b.local_start_offset} "
                    f"next={b.next_offset}"
                )
                first = client.fetch(topic, 0, 0, max_records=1).records[0]
                assert first.value is not None  # every record written here has a value
                print(f"offset 0 read from the bucket: {first.value[:13]!r}...")
                if first.value != values[0] or topic not in names:
                    print("MISMATCH after the restore", file=sys.stderr)
                    return 1
                info = client.describe_topic(topic)["partition_info"][0]
                lost = info.get("lost_offsets") or []
                shipped_end = lost[0][0] if lost else b.next_offset
                archived = read_all(client, topic, shipped_end)
                if (
                    archived != values[: len(archived)]
                    or len(archived) != shipped_end
                    or (b.next_offset != end)
                ):
                    print("MISMATCH in the restored records", file=sys.stderr)
                    return 1
                print(
                    f"read {len(archived)} restored records; every value matches (offsets "
                    f"{shipped_end}..{end - 1} were in the active segment, never shipped, so "
                    f"they were lost with the old disk: reported as lost_offsets {lost}, and "
                    f"never handed out again: the log goes on at {b.next_offset})"
                )
                if not args.keep:
                    client.delete_topic(topic)
        finally:
            if not args.keep:
                leftover = list_objects(s3, args.bucket, args.prefix + "/")
                for i in range(0, len(leftover), 1000):
                    s3.delete_objects(
                        Bucket=args.bucket,
                        Delete={
                            "Objects": [{"Key": o["Key"]} for o in leftover[i : i + 1000]],
                            "Quiet": True,
                        },
                    )
                print(f"removed the example's objects under s3://{args.bucket}/{args.prefix}/")
    print("MinIO/moto local testing OK")
    return 0


if __name__ == "__main__":
    from _service import run_main

    run_main(main, __file__)
