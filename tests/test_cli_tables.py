"""What the inspection commands show a person: ``topics list`` and ``topics describe`` as
tables (``--json`` for JSON), ``no topics`` / ``no partitions`` when there is nothing,
and ``dump`` of a copied segment's ``.rli`` manifest. Against real servers (and a real
2-node cluster for ``cluster status``), through :func:`tiered_log.cli.main`."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from service.conftest import ServerProcess  # tests/service/conftest.py

from tiered_log.cli import main

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A server without auth whose remote tier is a local directory, shipping at once."""
    srv = ServerProcess(
        tmp_path / "data",
        tmp_path,
        {"remote_url": str(tmp_path / "archive"), "ship_interval_ms": "50"},
    )
    srv.start()
    yield srv
    try:
        srv.stop(timeout=15)
    finally:
        srv.kill()


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def shipped_topic(srv: ServerProcess, name: str) -> None:
    """``name``: 2 partitions of 300 records, tiny segments, most of them shipped."""
    with httpx.Client(base_url=srv.url, timeout=10) as c:
        cfg = {"segment_bytes": 4096, "local_retention_bytes": 0}
        r = c.post("/v1/topics", json={"name": name, "partitions": 2, "config": cfg})
        assert r.status_code == 201, r.text
        for p in (0, 1):
            for lo in range(0, 300, 30):
                recs = [{"value": f"v{i:04d}" + "x" * 80} for i in range(lo, lo + 30)]
                r = c.post(f"/v1/topics/{name}/partitions/{p}/records", json={"records": recs})
                assert r.status_code == 200, r.text
        deadline = time.monotonic() + 30
        for p in (0, 1):
            while (
                c.get(f"/v1/topics/{name}/partitions/{p}/bounds").json()["local_start_offset"] == 0
            ):
                assert time.monotonic() < deadline, "not shipped"
                time.sleep(0.05)


def test_topics_list_and_describe_are_tables(
    server: ServerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    url = ["--url", server.url]
    rc, out, _ = run(capsys, "topics", "list", *url)
    assert rc == 0 and out == "no topics\n"
    rc, out, _ = run(capsys, "topics", "list", "--json", *url)
    assert rc == 0 and json.loads(out) == []
    shipped_topic(server, "orders")
    rc, out, _ = run(capsys, "topics", "list", *url)
    rows = [ln.split() for ln in out.splitlines()]
    assert rows == [["NAME", "PARTITIONS", "REPLICAS"], ["orders", "2", "-"]]
    rc, out, _ = run(capsys, "topics", "describe", "orders", *url)
    assert rc == 0
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "orders"]
    assert any(ln.split()[:2] == ["PARTITIONS", "2"] for ln in lines)
    assert "CONFIG" in lines and "PARTITIONS" in lines
    assert any(ln.split() == ["segment_bytes", "4096"] for ln in lines)
    assert any(ln.split() == ["retention_ms", "-"] for ln in lines)  # null: no limit
    table = lines[lines.index("PARTITIONS") + 1 :]
    header = table[0].split()
    assert header[:4] == ["PARTITION", "LOG-START-OFFSET", "LOCAL-START-OFFSET", "HIGH-WATERMARK"]
    for p, row in enumerate(table[1:3]):
        cells = dict(zip(header, row.split(), strict=True))
        assert cells["PARTITION"] == str(p) and cells["HIGH-WATERMARK"] == "300"
        assert int(cells["LOCAL-START-OFFSET"]) > 0
    rc, out, _ = run(capsys, "topics", "describe", "orders", "--json", *url)
    d = json.loads(out)
    assert d["name"] == "orders" and len(d["partition_info"]) == 2


def test_dump_reads_rli_manifests(
    server: ServerProcess, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    shipped_topic(server, "dumped")
    manifests = sorted((tmp_path / "archive").rglob("*.rli"))
    assert manifests
    rli = manifests[0]
    rc, out, err = run(capsys, "dump", str(rli))
    assert rc == 0, err
    lines = out.splitlines()
    assert lines[0] == f"Dumping {rli} (remote segment manifest)"
    assert lines[1].startswith("segment: id: ") and "base_offset: " in lines[1]
    assert "(checksum ok)" in lines[1]
    chunks = [ln for ln in lines if ln.startswith("  chunk: ")]
    assert chunks and all("object: " in c and c.endswith(".log") for c in chunks)
    assert lines[-1].startswith("Summary: offsets ") and "as it says" in lines[-1]
    # The directory: every manifest in it (the service may ship one more meanwhile).
    before = len(list(rli.parent.glob("*.rli")))
    rc, out, _ = run(capsys, "dump", str(rli.parent))
    n = out.count("(remote segment manifest)")
    assert rc == 0 and before <= n <= len(list(rli.parent.glob("*.rli")))
    assert out.splitlines()[-1] == f"Dumped {n} file{'s' if n != 1 else ''}; 0 with problems"
    # A damaged copy: one PROBLEM line, exit 1.
    bad = tmp_path / rli.name
    blob = bytearray(rli.read_bytes())
    blob[-3] ^= 0xFF
    bad.write_bytes(bytes(blob))
    rc, out, _ = run(capsys, "dump", str(bad))
    assert rc == 1
    assert any(ln.startswith("PROBLEM: manifest ") and "damaged" in ln for ln in out.splitlines())


def test_cluster_status_says_when_there_is_nothing(
    tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    from cluster.conftest import dev_cluster  # tests/cluster/conftest.py

    gen: Any = dev_cluster(tmp_path_factory, {}, nodes=2)
    cluster = next(gen)
    try:
        urls = ",".join(cluster.urls)
        rc, out, err = run(capsys, "cluster", "status", "--url", urls)
        assert rc == 0, err
        assert out == "no partitions: the cluster has no topics\n"
        rc, out, _ = run(capsys, "cluster", "status", "--url", urls, "--topic", "nope")
        assert rc == 0 and out == "no partitions of topic(s) nope\n"
        rc, out, _ = run(capsys, "cluster", "status", "--url", urls, "--json")
        assert json.loads(out) == {"partitions": []}
    finally:
        next(gen, None)
