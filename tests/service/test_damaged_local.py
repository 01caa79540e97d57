"""Damaged local data through the real service: a flipped byte in a sealed segment.

The service verifies what it serves from local segments on both fetch paths: the JSON
path decodes (and so verifies) every record, the binary path checks every batch's
checksum before it sends it. A damaged batch is never sent: a page stops before it
(200 with the records before it, ``next_offset`` at the damaged batch) and a fetch that
starts in it answers 410 ``corrupt_record``, not retriable (the stored bytes stay
damaged), on both paths, as does a timestamp lookup that has to read it. Offsets
outside the damage are served as before.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tiered_log.client import Client
from tiered_log.errors import CorruptRecordError
from tiered_log.format.records import batch_table, decode_records

from .conftest import ServerProcess

BINARY = {"Accept": "application/octet-stream"}
TOPIC_CONFIG = {"segment_bytes": 4096, "remote_enabled": False}
N_RECORDS = 100
BATCH = 10
_topics = itertools.count()


def _value(offset: int) -> str:
    return f"v{offset:05d}-" + "x" * (80 + offset % 13)


def _make_topic(c: httpx.Client, name: str) -> None:
    r = c.post("/v1/topics", json={"name": name, "partitions": 1, "config": TOPIC_CONFIG})
    assert r.status_code == 201, r.text
    for start in range(0, N_RECORDS, BATCH):
        r = c.post(
            f"/v1/topics/{name}/partitions/0/records",
            json={
                "records": [
                    {"value": _value(o), "timestamp": 1_000_000 + o}
                    for o in range(start, start + BATCH)
                ]
            },
        )
        assert r.status_code == 200, r.text


def _segments(srv: ServerProcess, name: str) -> list[Path]:
    segs = sorted((srv.data_dir / "topics" / name / "0").glob("*.log"))
    assert len(segs) >= 3, segs  # at least two sealed ones and the active one
    return segs


def _batches(path: Path) -> list[tuple[int, int, int, int]]:
    """``(base offset, record count, position, size)`` of every batch of a segment file."""
    data = path.read_bytes()
    base = int(path.name.split(".")[0])
    infos, end = batch_table(data, base)
    assert end == len(data)
    return [(b.base_offset, b.record_count, b.position, b.size) for b in infos]


def _flip(path: Path, at: int, mask: int = 0xFF) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= mask
    path.write_bytes(bytes(data))


def _fetch_json(c: httpx.Client, name: str, offset: int, **params: int) -> httpx.Response:
    return c.get(f"/v1/topics/{name}/partitions/0/records", params={"offset": offset, **params})


def _fetch_binary(c: httpx.Client, name: str, offset: int, **params: int) -> httpx.Response:
    return c.get(
        f"/v1/topics/{name}/partitions/0/records",
        params={"offset": offset, **params},
        headers=BINARY,
    )


def _check_corrupt(r: httpx.Response) -> None:
    """The documented answer for a range whose stored bytes are damaged."""
    assert r.status_code == 410, (r.status_code, r.text[:300])
    assert r.headers["content-type"].startswith("application/json")
    err = r.json()["error"]
    assert err["code"] == "corrupt_record" and err["retriable"] is False, err


def _json_ok(r: httpx.Response, offset: int) -> int:
    """Check a 200 JSON page holds exactly the records produced from ``offset``; its
    ``next_offset``."""
    assert r.status_code == 200, (r.status_code, r.text[:300])
    body: dict[str, Any] = r.json()
    recs = body["records"]
    assert [x["offset"] for x in recs] == list(range(offset, offset + len(recs)))
    assert [x["value"] for x in recs] == [_value(o) for o in range(offset, offset + len(recs))]
    assert body["next_offset"] == offset + len(recs)
    return int(body["next_offset"])


def _binary_ok(r: httpx.Response, offset: int) -> int:
    """Check a 200 binary page: every batch verifies and holds the records produced;
    its ``next_offset``."""
    assert r.status_code == 200, (r.status_code, r.text[:300])
    recs, end, _ = decode_records(r.content)  # verifies every checksum, or raises
    assert end == len(r.content)
    assert recs and recs[0].offset <= offset
    assert [x.offset for x in recs] == list(range(recs[0].offset, recs[0].offset + len(recs)))
    assert [x.value for x in recs] == [_value(x.offset).encode() for x in recs]
    nxt = int(r.headers["x-next-offset"])
    assert nxt == recs[-1].offset + 1
    assert int(r.headers["x-record-count"]) == nxt - offset
    return nxt


@pytest.fixture
def srv(server_factory: Any) -> ServerProcess:
    return server_factory()  # type: ignore[no-any-return]


def test_damaged_batch_is_never_served_and_the_rest_is(srv: ServerProcess) -> None:
    with srv.client(None) as c:
        _make_topic(c, "t")
        first = _segments(srv, "t")[0]
        batches = _batches(first)
        assert len(batches) >= 3
        base, count, pos, size = batches[1]  # the middle of the first sealed segment
        _flip(first, pos + size // 2)  # in a record value
        after = base + count

        # A page that reaches the damaged batch stops before it, on both paths.
        assert _json_ok(_fetch_json(c, "t", 0, max_records=1000), 0) == base
        assert _binary_ok(_fetch_binary(c, "t", 0, max_records=1000), 0) == base
        # A fetch that starts in it: 410 corrupt_record, on both paths, never the batch.
        for o in (base, base + count // 2, base + count - 1):
            _check_corrupt(_fetch_json(c, "t", o))
            _check_corrupt(_fetch_binary(c, "t", o))
        msg = _fetch_json(c, "t", base).json()["error"]["message"]
        assert first.name in msg and str(base) in msg, msg
        # Everything after the damage is served as before.
        o = after
        while o < N_RECORDS:
            o = _json_ok(_fetch_json(c, "t", o, max_records=7), o)
        o = after
        while o < N_RECORDS:
            o = _binary_ok(_fetch_binary(c, "t", o, max_records=7), o)
        # A timestamp lookup that has to read the damaged batch: the same answer; one in a
        # later segment is served.
        _check_corrupt(
            c.get("/v1/topics/t/partitions/0/offsets", params={"timestamp": 1_000_000 + base + 1})
        )
        later = int(_segments(srv, "t")[2].name.split(".")[0])
        r = c.get("/v1/topics/t/partitions/0/offsets", params={"timestamp": 1_000_000 + later})
        assert r.status_code == 200 and r.json()["offset"] == later, r.text

    # The Python client (binary path) gets the records before the damage, then the
    # error by its code.
    seen: list[int] = []
    with Client(srv.url) as client, pytest.raises(CorruptRecordError):
        for page in client.consume("t", 0, 0, end_offset=N_RECORDS):
            seen.extend(r.offset for r in page.records)
    assert seen == list(range(base))
    # The operator hears of it: an ERROR line naming the segment file.
    assert any("ERROR" in line and first.name in line for line in srv.log().splitlines()), srv.log()


@pytest.mark.parametrize(("at", "mask"), [(7, 0x01), (4, 0x01)], ids=["low-bit", "bit-24"])
def test_a_damaged_base_offset_is_damage_too(srv: ServerProcess, at: int, mask: int) -> None:
    """A batch's base offset lies outside its CRC-32C: a flipped bit there moves the
    batch's offsets (a little: records lost and repeated; or far) while every checksum
    still holds. The reads see the batches out of sequence: a page that reaches it
    stops before it, a fetch in it answers 410, on both paths; the next segment is
    served as before."""
    name = f"base{next(_topics)}"
    with srv.client(None) as c:
        _make_topic(c, name)
        first = _segments(srv, name)[0]
        base, count, pos, _ = _batches(first)[1]
        _flip(first, pos + at, mask)
        assert _json_ok(_fetch_json(c, name, 0, max_records=1000), 0) == base
        assert _binary_ok(_fetch_binary(c, name, 0, max_records=1000), 0) == base
        for o in (base, base + count - 1):
            _check_corrupt(_fetch_json(c, name, o))
            _check_corrupt(_fetch_binary(c, name, o))
        later = int(_segments(srv, name)[1].name.split(".")[0])  # the next segment: served
        assert _json_ok(_fetch_json(c, name, later, max_records=7), later) > later
        assert _binary_ok(_fetch_binary(c, name, later, max_records=7), later) > later


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(segment=st.integers(0, 1), where=st.floats(0, 1, exclude_max=True), mask=st.integers(1, 255))
def test_any_flipped_byte_in_a_sealed_segment(
    srv: ServerProcess, segment: int, where: float, mask: int
) -> None:
    """Any one damaged byte of a sealed segment: every fetch from every offset of the
    first three segments answers 200 with exactly the records produced or 410
    corrupt_record; offsets in batches before the damaged one and in the other segments
    answer 200, offsets in the damaged batch answer 410."""
    name = f"flip{next(_topics)}"
    with srv.client(None) as c:
        _make_topic(c, name)
        segs = _segments(srv, name)
        path = segs[segment]
        batches = _batches(path)
        size = path.stat().st_size
        at = min(int(where * size), size - 1)
        hit = next(b for b in batches if b[2] <= at < b[2] + b[3])
        _flip(path, at, mask)
        seg_start, seg_end = batches[0][0], batches[-1][0] + batches[-1][1]
        last = int(_segments(srv, name)[2].name.split(".")[0])  # end of the sealed ones
        for o in range(last):
            for fetch, ok in ((_fetch_json, _json_ok), (_fetch_binary, _binary_ok)):
                r = fetch(c, name, o, max_records=1000)
                if hit[0] <= o < hit[0] + hit[1]:
                    _check_corrupt(r)
                elif o < hit[0] or o >= seg_end or o < seg_start:
                    nxt = ok(r, o)
                    if o < hit[0]:
                        assert nxt <= hit[0]  # stops before the damaged batch
                elif r.status_code == 200:  # after the damage in its segment: either
                    ok(r, o)
                else:
                    _check_corrupt(r)
