"""The ``tiered-log`` command, run as a real subprocess (``python -m tiered_log.cli``).

Covers append/read round trips, demo, dump of each file kind and of a directory, verify
on a clean log and on each kind of damage (without modifying the directory), and that
every bad input ends in one ``tiered-log: error:`` line, a non-zero exit and no traceback.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from tiered_log import Log, LogConfig, ProducerRecord
from tiered_log.format import naming
from tiered_log.format.records import HEADER_SIZE
from tiered_log.tools import BatchEntry, StoreDamage, iter_store, scan_store

SMALL = LogConfig(segment_bytes=16 * 1024, index_interval_bytes=512)
RECORDS = 600
BATCH = 50
"""Records per ``append_batch`` of ``base_log``: each is one batch in the store."""
TS0 = 1_700_000_000_000


def run(
    *args: str | os.PathLike[str], stdin: bytes | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run the CLI; stdout/stderr as text."""
    proc = subprocess.run(
        [sys.executable, "-m", "tiered_log.cli", *map(str, args)],
        input=stdin,
        capture_output=True,
        timeout=timeout,
    )
    return subprocess.CompletedProcess(
        proc.args,
        proc.returncode,
        proc.stdout.decode("utf-8", "replace"),
        proc.stderr.decode("utf-8", "replace"),
    )


def assert_one_line_error(p: subprocess.CompletedProcess[str], code: int | None = None) -> str:
    """The failure contract: non-zero exit, exactly one error line on stderr, no traceback."""
    assert p.returncode != 0, p
    if code is not None:
        assert p.returncode == code, p
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("tiered-log: error: "), p.stderr
    return lines[0]


def value_for(i: int) -> bytes:
    return hashlib.sha256(str(i).encode()).hexdigest().encode() * (1 + i % 3)


def snapshot(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir()) if p.is_file()}


@pytest.fixture(scope="module")
def base_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A closed log of several small segments (keys, headers, increasing timestamps), each
    holding a few batches of ``BATCH`` records."""
    d = tmp_path_factory.mktemp("base") / "log"
    with Log.open(d, SMALL) as log:
        for start in range(0, RECORDS, BATCH):
            log.append_batch(
                [
                    ProducerRecord(
                        value_for(i),
                        key=f"k{i % 5}".encode(),
                        headers=(("n", str(i).encode()),),
                        timestamp=TS0 + i,
                    )
                    for i in range(start, start + BATCH)
                ]
            )
    assert len(naming.list_segment_bases(d)) >= 4
    return d


@pytest.fixture()
def log_copy(base_log: Path, tmp_path: Path) -> Path:
    """A private copy of ``base_log`` to damage."""
    d = tmp_path / "log"
    shutil.copytree(base_log, d)
    return d


def seg(d: Path, i: int, suffix: str) -> Path:
    return naming.segment_path(d, naming.list_segment_bases(d)[i], suffix)


# ---- append / read / demo -----------------------------------------------------------------


def test_append_then_read_round_trip(tmp_path: Path) -> None:
    d = tmp_path / "log"
    lines = [
        b"hello",
        b"world with spaces",
        "caf\u00e9".encode(),
        b"\xff\xfe binary",
        b"",
        b"tab\there",
        b"base64:looks-encoded",
    ]
    p = run("append", d, "--key", "k1", stdin=b"\n".join(lines) + b"\r\n")
    assert p.returncode == 0, p.stderr
    assert "appended 6 records at offsets 0..5" in p.stdout
    assert "skipped 1 empty line" in p.stderr

    p = run("read", d)
    assert p.returncode == 0, p.stderr
    rows = [line.split("\t") for line in p.stdout.splitlines()]
    assert [r[0] for r in rows] == ["0", "1", "2", "3", "4", "5"]
    assert all(r[2] == "k1" for r in rows)
    assert [r[3] for r in rows[:3]] == ["hello", "world with spaces", "caf\u00e9"]
    # Not printable as text: base64 with a prefix, never ambiguous.
    assert rows[3][3] == "base64:" + base64.b64encode(b"\xff\xfe binary").decode()
    assert rows[4][3] == "base64:" + base64.b64encode(b"tab\there").decode()
    assert rows[5][3] == "base64:" + base64.b64encode(b"base64:looks-encoded").decode()

    p = run("read", d, "--json", "--offset", "2", "--max-records", "2")
    assert p.returncode == 0, p.stderr
    objs = [json.loads(line) for line in p.stdout.splitlines()]
    assert [o["offset"] for o in objs] == [2, 3]
    assert objs[0]["value"] == "caf\u00e9" and objs[0]["value_b64"] is None
    assert objs[1]["value"] is None and base64.b64decode(objs[1]["value_b64"]) == b"\xff\xfe binary"
    assert objs[0]["key"] == "k1" and objs[0]["headers"] == []

    # Appending again continues the offsets; --file reads a file.
    f = tmp_path / "more.txt"
    f.write_bytes(b"".join(b"line %d\n" % i for i in range(2500)))
    p = run("append", d, "--file", f, "--segment-bytes", "4096", "--progress")
    assert p.returncode == 0, p.stderr
    assert "appended 2500 records at offsets 6..2505" in p.stdout
    assert len(naming.list_segment_bases(d)) > 1
    p = run("read", d, "--offset", "2505")
    assert p.stdout.splitlines() == ["2505\t" + p.stdout.split("\t")[1] + "\t\tline 2499"]
    p = run("read", d, "--offset", "2506")  # exactly the end: nothing, no error
    assert p.returncode == 0 and p.stdout == ""
    assert run("verify", d).returncode == 0


def test_read_by_timestamp(base_log: Path) -> None:
    p = run("read", base_log, "--timestamp", str(TS0 + 123), "--max-records", "3", "--json")
    assert p.returncode == 0, p.stderr
    objs = [json.loads(line) for line in p.stdout.splitlines()]
    assert [o["offset"] for o in objs] == [123, 124, 125]
    assert objs[0]["timestamp"] == TS0 + 123
    assert objs[0]["headers"] == [{"name": "n", "value": "123", "value_b64": None}]
    p = run("read", base_log, "--timestamp", "2100-01-01T00:00:00")
    assert p.returncode == 0 and p.stdout == ""
    assert "no record" in p.stderr


def test_read_does_not_create_a_log(tmp_path: Path) -> None:
    p = run("read", tmp_path / "nope")
    assert "does not exist" in assert_one_line_error(p, 1)
    assert not (tmp_path / "nope").exists()
    p = run("read", tmp_path)  # exists, but holds no log
    assert "holds no log" in assert_one_line_error(p, 1)


def test_demo(tmp_path: Path) -> None:
    d = tmp_path / "data"
    p = run("demo", d)
    assert p.returncode == 0, p.stderr
    assert "appended 10,000 records (offsets 0..9999)" in p.stdout
    assert "all 10,000 match" in p.stdout
    assert "verify: clean" in p.stdout
    p = run("demo", d, "--records", "100")  # runs again on top of the existing log
    assert p.returncode == 0, p.stderr
    assert "offsets 10000..10099" in p.stdout
    assert run("verify", d).returncode == 0


# ---- dump --------------------------------------------------------------------------------


def test_dump_store(base_log: Path) -> None:
    """A line per Kafka record batch with kafka-dump-log's fields, names and order, then
    a ``| offset:`` line per record; ``--print-data`` adds key, payload and headers."""
    store = seg(base_log, 0, naming.LOG_SUFFIX)
    data = store.read_bytes()
    p = run("dump", store)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith(f"Dumping {store}")
    assert lines[1] == "Log starting offset: 0"
    size = int.from_bytes(data[8:12], "big") + 12
    crc = int.from_bytes(data[17:21], "big")
    epoch = int.from_bytes(data[12:16], "big", signed=True)
    assert lines[2] == (
        f"baseOffset: 0 lastOffset: {BATCH - 1} count: {BATCH} baseSequence: -1 "
        f"lastSequence: -1 producerId: -1 producerEpoch: -1 partitionLeaderEpoch: {epoch} "
        f"isTransactional: false isControl: false deleteHorizonMs: OptionalLong.empty "
        f"position: 0 CreateTime: {TS0 + BATCH - 1} size: {size} magic: 2 "
        f"compresscodec: none crc: {crc} isvalid: true"
    )
    assert lines[3] == (
        f"| offset: 0 CreateTime: {TS0} keySize: 2 valueSize: {len(value_for(0))} "
        f"sequence: -1 headerKeys: [n]"
    )
    assert lines[2 + BATCH].startswith(f"| offset: {BATCH - 1} CreateTime: {TS0 + BATCH - 1} ")
    assert lines[3 + BATCH].startswith(
        f"baseOffset: {BATCH} lastOffset: {2 * BATCH - 1} count: {BATCH} "
    )
    assert f" position: {size} " in lines[3 + BATCH]
    assert not any("payload: " in line for line in lines)
    headers = [line for line in lines[2:-1] if not line.startswith("| ")]
    records = [line for line in lines[2:-1] if line.startswith("| ")]
    assert len(records) == BATCH * len(headers)
    last = records[-1].split()[2]
    assert lines[-1].startswith(
        f"Summary: {len(headers)} batches, {len(records)} readable records, offsets 0..{last}, "
    )
    assert lines[-1].endswith("; all batches verify")
    for flag in ("--print-data", "--print-data-log"):  # ours, and kafka-dump-log's name
        p = run("dump", store, flag)
        assert p.stdout.splitlines()[3].endswith(
            f"headerKeys: [n] key: k0 payload: {value_for(0).decode()} headers: n=0"
        )


def test_dump_kafka_fields_nulls_and_compression(tmp_path: Path) -> None:
    """A client's zstd batch with producer fields, null and empty keys and values: the
    dump prints its codec, producer id, epoch and sequences, and ``null`` for a null
    key or value (sizes -1), ``base64:`` for an empty one (size 0)."""
    from tiered_log.format import kafka
    from tiered_log.format.records import receive_batches

    d = tmp_path / "log"
    raw = kafka.encode_batch(
        [
            kafka.NewRecord(None, b"k", (("h", None),), TS0),
            kafka.NewRecord(b"", None, (), TS0 + 1),
            kafka.NewRecord(b"null", b"", (), TS0 + 2),
        ],
        compression="zstd",
        producer_id=7,
        producer_epoch=1,
        base_sequence=10,
    )
    with Log.open(d, SMALL) as log:
        log.append_batch([ProducerRecord(b"plain", timestamp=TS0 - 1)])
        log.append_batch(receive_batches(raw, 1 << 20))
    p = run("dump", seg(d, 0, naming.LOG_SUFFIX), "--print-data")
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert lines[2].startswith("baseOffset: 0 lastOffset: 0 count: 1 ")
    assert lines[3].endswith("key: null payload: plain")
    batch = lines[4]
    assert batch.startswith(
        "baseOffset: 1 lastOffset: 3 count: 3 baseSequence: 10 lastSequence: 12 "
        "producerId: 7 producerEpoch: 1 partitionLeaderEpoch: "
    )
    assert f" CreateTime: {TS0 + 2} size: {len(raw)} magic: 2 compresscodec: zstd " in batch
    assert batch.endswith(f"crc: {int.from_bytes(raw[17:21], 'big')} isvalid: true")
    assert lines[5:8] == [
        f"| offset: 1 CreateTime: {TS0} keySize: 1 valueSize: -1 sequence: 10 "
        "headerKeys: [h] key: k payload: null headers: h=(null)",
        f"| offset: 2 CreateTime: {TS0 + 1} keySize: -1 valueSize: 0 sequence: 11 "
        "headerKeys: [] key: null payload: base64:",
        f"| offset: 3 CreateTime: {TS0 + 2} keySize: 0 valueSize: 4 sequence: 12 "
        "headerKeys: [] key: base64: payload: base64:bnVsbA==",
    ]
    assert lines[-1].endswith("; all batches verify")


def test_dump_store_with_a_damaged_batch(log_copy: Path) -> None:
    """A batch failing its CRC is listed without its records; the walk goes on."""
    store = seg(log_copy, 0, naming.LOG_SUFFIX)
    data = bytearray(store.read_bytes())
    data[HEADER_SIZE + 8 * BATCH + 1] ^= 0x01  # inside batch 0's records
    store.write_bytes(bytes(data))
    p = run("dump", store)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    lines = p.stdout.splitlines()
    assert lines[2].startswith(f"baseOffset: 0 lastOffset: {BATCH - 1} count: {BATCH} ")
    assert lines[2].endswith("isvalid: false (CRC-32C mismatch (attributes..end damaged))")
    assert lines[3].startswith(f"baseOffset: {BATCH} ") and lines[3].endswith("isvalid: true")
    assert lines[4].startswith(f"| offset: {BATCH} ")
    assert "1 batch failing their check" in lines[-1]
    assert "out of sequence" not in lines[-1]


def test_dump_a_segment_of_the_former_format(tmp_path: Path) -> None:
    """A store of tiered_log's former batches: one damage line naming the format."""
    from tiered_log.format.legacy import LegacyRecord, encode_legacy_batch

    store = tmp_path / "00000000000000000000.log"
    store.write_bytes(encode_legacy_batch(0, [LegacyRecord(0, TS0, None, b"old")]))
    p = run("dump", store)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert "DAMAGE at byte 0: the bytes hold a batch of tiered_log's former 'TB'" in p.stdout
    assert "tiered-log migrate" in p.stdout


def test_dump_indexes(base_log: Path) -> None:
    p = run("dump", seg(base_log, 0, naming.INDEX_SUFFIX))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert "offset index" in lines[0]
    assert lines[1] == "entry: 0 offset: 0 relative_offset: 0 position: 0 ok"
    # Entries point at batch starts (each batch passes the 512-byte interval).
    assert lines[2].startswith(f"entry: 1 offset: {BATCH} relative_offset: {BATCH} position: ")
    assert len(lines) > 3 and all(line.endswith(" ok") for line in lines[1:-1])
    assert "0 bad; checked against" in lines[-1]

    p = run("dump", seg(base_log, 1, naming.TIMEINDEX_SUFFIX))
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert "time index" in lines[0]
    base = naming.list_segment_bases(base_log)[1]
    # Time entries are added at batch starts; the first is the segment's first record.
    assert lines[1] == f"entry: 0 max_timestamp: {TS0 + base} offset: {base} relative_offset: 0 ok"


def test_dump_directory(base_log: Path) -> None:
    p = run("dump", base_log)
    assert p.returncode == 0, p.stderr
    n = len(naming.list_segment_bases(base_log))
    dumped = [line for line in p.stdout.splitlines() if line.startswith("Dumping ")]
    # Sealed segments have three files; the active one only its store.
    assert len(dumped) == 3 * (n - 1) + 1
    assert dumped[0].split()[1].endswith("00000000000000000000.log")
    assert dumped[1].split()[1].endswith("00000000000000000000.index")
    assert p.stdout.splitlines()[-1] == f"Dumped {len(dumped)} files; 0 with problems"


def test_dump_garbage_reports_where_damage_starts(tmp_path: Path, log_copy: Path) -> None:
    junk = tmp_path / "00000000000000000000.log"
    junk.write_bytes(os.urandom(3000))
    p = run("dump", junk)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert "DAMAGE at byte 0:" in p.stdout

    # Good batches, then garbage: the good ones are listed, the damage located after them.
    store = seg(log_copy, 0, naming.LOG_SUFFIX)
    good = store.read_bytes()
    store.write_bytes(good + b"\x07" * 100)
    p = run("dump", store)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert f"DAMAGE at byte {len(good)}:" in p.stdout
    assert "the remaining 100 bytes" in p.stdout
    garbage_index = tmp_path / "00000000000000000000.index"
    garbage_index.write_bytes(os.urandom(45))
    p = run("dump", garbage_index)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert "5 trailing bytes" in p.stdout


# ---- verify ------------------------------------------------------------------------------


def test_verify_clean(base_log: Path) -> None:
    p = run("verify", base_log)
    assert p.returncode == 0, p.stdout + p.stderr
    n = len(naming.list_segment_bases(base_log))
    assert p.stdout.strip() == (
        f"{n} segments, {RECORDS} records (offsets [0, {RECORDS})), "
        f"{sum(f.stat().st_size for f in base_log.glob('*.log')):,} "
        f"bytes: clean"
    )
    p = run("verify", base_log, "--json")
    assert p.returncode == 0
    report = json.loads(p.stdout)
    assert report["ok"] is True and report["records"] == RECORDS and report["problems"] == []
    assert len(report["segments"]) == n and report["next_offset"] == RECORDS


def _verify_damaged(d: Path) -> tuple[list[str], dict[str, object]]:
    before = snapshot(d)
    p = run("verify", d)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "Traceback" not in p.stderr and p.stderr == ""
    assert "DAMAGED" in p.stdout.splitlines()[-1]
    pj = run("verify", d, "--json")
    assert pj.returncode == 1
    assert snapshot(d) == before, "verify must not modify the directory"
    return p.stdout.splitlines()[:-1], json.loads(pj.stdout)


def test_verify_flipped_byte_in_a_record(log_copy: Path) -> None:
    store = seg(log_copy, 1, naming.LOG_SUFFIX)
    data = bytearray(store.read_bytes())
    data[500] ^= 0x01
    store.write_bytes(bytes(data))
    problems, report = _verify_damaged(log_copy)
    assert len(problems) == 1
    assert problems[0].startswith(f"{store.name}: batch at byte 0 (offset ")
    assert "CRC-32C mismatch" in problems[0]
    assert report["problems"][0]["kind"] == "checksum"  # type: ignore[index]
    # The damaged batch's records still count (its header is plausible), as do its batches.
    assert report["records"] == RECORDS
    assert report["batches"] == RECORDS // BATCH


def test_verify_truncated_index(log_copy: Path) -> None:
    index = seg(log_copy, 0, naming.INDEX_SUFFIX)
    index.write_bytes(index.read_bytes()[:-3])
    problems, _ = _verify_damaged(log_copy)
    assert any(p.startswith(f"{index.name}: ") and "trailing bytes" in p for p in problems)


def test_verify_index_pointing_at_the_wrong_record(log_copy: Path) -> None:
    index = seg(log_copy, 0, naming.INDEX_SUFFIX)
    data = bytearray(index.read_bytes())
    data[8] += 1  # entry 1's relative offset
    index.write_bytes(bytes(data))
    timeindex = seg(log_copy, 1, naming.TIMEINDEX_SUFFIX)
    tdata = bytearray(timeindex.read_bytes())
    tdata[12] += 1  # entry 1's max timestamp
    timeindex.write_bytes(bytes(tdata))
    problems, _ = _verify_damaged(log_copy)
    assert any(
        p.startswith(f"{index.name}: entry 1: ")
        and f"points at the batch with base offset {BATCH}" in p
        for p in problems
    )
    assert any(
        p.startswith(f"{timeindex.name}: entry 1: ") and "largest timestamp" in p for p in problems
    )


def test_verify_index_entry_inside_a_batch(log_copy: Path) -> None:
    """Offset-index entries must point at a batch's first byte, not at a record inside it."""
    index = seg(log_copy, 0, naming.INDEX_SUFFIX)
    data = bytearray(index.read_bytes())
    rel, pos = struct.unpack_from("<II", data, 8)
    struct.pack_into("<II", data, 8, rel + 1, pos + HEADER_SIZE)  # entry 1, one record on
    index.write_bytes(bytes(data))
    problems, report = _verify_damaged(log_copy)
    assert problems == [
        f"{index.name}: entry 1: entry (offset {rel + 1}, position "
        f"{pos + HEADER_SIZE}) points not at the start of a batch"
    ]
    assert report["problems"][0]["kind"] == "offset_index"  # type: ignore[index]


def test_iter_store_and_scan_store(log_copy: Path) -> None:
    """The tools in-process: one BatchEntry per batch (its Kafka header), records with
    ``with_data``; a damaged batch is reported and the walk goes on by its header's
    count."""
    store = seg(log_copy, 0, naming.LOG_SUFFIX)
    good = store.read_bytes()
    entries = list(iter_store(good))
    assert all(isinstance(e, BatchEntry) and e.valid and not e.records for e in entries)
    batches = [e for e in entries if isinstance(e, BatchEntry)]
    assert [e.base_offset for e in batches] == [BATCH * i for i in range(len(batches))]
    assert all(e.count == BATCH == e.header.records_count for e in batches)
    assert all(e.header.magic == 2 and e.compression == "none" for e in batches)
    assert batches[0].position == 0 and batches[1].position == batches[0].size
    assert batches[-1].position + batches[-1].size == len(good)
    assert (batches[0].first_timestamp, batches[0].max_timestamp) == (TS0, TS0 + BATCH - 1)
    full = next(iter_store(good, with_data=True))
    assert isinstance(full, BatchEntry) and len(full.records) == BATCH
    assert full.records[3].value == value_for(3) and full.records[3].key == b"k3"
    assert full.records[3].headers == (("n", b"3"),)

    damaged = bytearray(good)
    damaged[HEADER_SIZE + 8 * BATCH + 1] ^= 0x01  # inside batch 0's records
    store.write_bytes(bytes(damaged))
    first = next(iter_store(bytes(damaged), with_data=True))
    assert isinstance(first, BatchEntry) and not first.valid and first.records == ()
    assert "CRC-32C" in (first.error or "")
    found: list[tuple[str, int | None]] = []
    scan = scan_store(store, 0, lambda kind, _m, pos, _o: found.append((kind, pos)))
    assert found == [("checksum", 0)]
    assert scan.bad_batches == 1 and scan.damage is None
    assert scan.records == BATCH * len(batches) and scan.next_offset == BATCH * len(batches)
    assert scan.batch_at(batches[1].position) == 1 and scan.batch_at(1) is None
    assert scan.batch_of(BATCH + 7) == 1 and scan.batch_of(BATCH * len(batches)) is None
    assert scan.max_timestamp == batches[-1].max_timestamp

    # The next batch damaged too: the walk stops with a StoreDamage at the first one.
    damaged[batches[1].position + HEADER_SIZE + 8 * BATCH + 1] ^= 0x01
    tail = list(iter_store(bytes(damaged)))
    assert len(tail) == 1 and isinstance(tail[0], StoreDamage) and tail[0].position == 0
    assert "do not parse as batches" in tail[0].reason


def test_verify_deleted_index_of_a_sealed_segment(log_copy: Path) -> None:
    index = seg(log_copy, 1, naming.INDEX_SUFFIX)
    index.unlink()
    problems, report = _verify_damaged(log_copy)
    assert problems == [
        f"{index.name}: the offset index of a sealed segment is missing (Log.open would rebuild it)"
    ]
    assert report["problems"][0]["kind"] == "missing_index"  # type: ignore[index]


def test_verify_garbage_file_named_like_a_segment(log_copy: Path) -> None:
    junk = naming.segment_path(log_copy, 10**9, naming.LOG_SUFFIX)
    junk.write_bytes(os.urandom(4096))
    problems, _ = _verify_damaged(log_copy)
    assert any(p.startswith(f"{junk.name}: damage starts at byte 0") for p in problems)
    # It is also the last segment after a gap, which makes the real last one sealed.
    assert any(p.startswith(f"{junk.name}: offsets {RECORDS}..") for p in problems)


def test_verify_missing_middle_segment(log_copy: Path) -> None:
    bases = naming.list_segment_bases(log_copy)
    for suffix in naming.SEGMENT_SUFFIXES:
        naming.segment_path(log_copy, bases[2], suffix).unlink()
    problems, _ = _verify_damaged(log_copy)
    later = naming.offset_name(bases[3]) + naming.LOG_SUFFIX
    assert problems == [
        f"{later}: offsets {bases[2]}..{bases[3] - 1} are missing between "
        f"{naming.offset_name(bases[1])}.log and {later} (a segment is missing, or "
        f"{naming.offset_name(bases[1])}.log lost its tail)"
    ]


def test_verify_torn_tail_of_the_active_segment(log_copy: Path) -> None:
    store = seg(log_copy, -1, naming.LOG_SUFFIX)
    data = store.read_bytes()
    store.write_bytes(data[:-7])
    problems, report = _verify_damaged(log_copy)
    assert len(problems) == 1 and problems[0].startswith(f"{store.name}: damage starts at byte ")
    assert report["next_offset"] == RECORDS - BATCH  # the whole torn batch is lost


def test_verify_warnings_are_not_damage(log_copy: Path) -> None:
    (log_copy / "00000000000000000000.index.tmp").write_bytes(b"x")
    p = run("verify", log_copy)
    assert p.returncode == 0, p.stdout
    assert p.stdout.splitlines()[0].startswith("warning: 00000000000000000000.index.tmp: ")
    assert p.stdout.splitlines()[-1].endswith("clean (1 warning)")


# ---- bad input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "fragment"),
    [
        (["verify", "{missing}"], 1, "does not exist"),
        (["dump", "{missing}"], 1, "does not exist"),
        (["read", "{log}", "--offset", "-1"], 2, "must not be negative"),
        (["read", "{log}", "--offset", "abc"], 2, "non-negative integer"),
        (["read", "{log}", "--offset", "99999"], 1, "is not in the log"),
        (["read", "{log}", "--max-records", "0"], 2, "at least 1"),
        (["read", "{log}", "--timestamp", "yesterday"], 2, "ISO 8601"),
        (["read", "{log}", "--offset", "1", "--timestamp", "5"], 2, "not allowed with"),
        (["frobnicate"], 2, "invalid choice"),
        (["read"], 2, "required"),
        (["read", "{log}", "--bogus"], 2, "unrecognized arguments"),
        (["perf", "append", "--records", "0"], 2, "at least 1"),
        (["append", "{tmp}/new", "--segment-bytes", "10"], 2, "segment_bytes"),
        (["dump", "{tmp}/notes.txt"], 2, "cannot tell what"),
        (["verify", "{tmp}/notes.txt"], 1, "not a directory"),
    ],
)
def test_bad_input_is_one_line(
    base_log: Path, tmp_path: Path, args: list[str], code: int, fragment: str
) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    subst = {"missing": str(tmp_path / "missing"), "log": str(base_log), "tmp": str(tmp_path)}
    p = run(*[a.format(**subst) for a in args])
    line = assert_one_line_error(p, code)
    assert fragment in line


def test_help_and_version() -> None:
    p = run("--help")
    assert p.returncode == 0 and "verify" in p.stdout and "perf" in p.stdout
    p = run("perf", "--help")
    assert p.returncode == 0 and "append" in p.stdout and "read" in p.stdout
    p = run("--version")
    assert p.returncode == 0 and p.stdout.startswith("tiered-log ")
    for group in ([], ["perf"]):  # a group without a command: its help, not an error
        p = run(*group)
        assert p.returncode == 0 and p.stdout.startswith("usage: tiered-log") and not p.stderr


def test_record_too_large_is_one_line(tmp_path: Path) -> None:
    f = tmp_path / "big.txt"
    f.write_bytes(b"x" * (9 << 20) + b"\n")
    p = run("append", tmp_path / "log", "--file", f)
    assert "append threshold" in assert_one_line_error(p, 1)


def test_closed_pipe_is_not_a_traceback(base_log: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tiered_log.cli", "read", str(base_log)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert "Traceback" not in err


def test_verify_zero_filled_tail(log_copy: Path) -> None:
    """A crash can leave preallocated zeros after the last batch: located, not a crash."""
    store = seg(log_copy, -1, naming.LOG_SUFFIX)
    size = store.stat().st_size
    with open(store, "ab") as f:
        f.write(bytes(300))
    problems, _ = _verify_damaged(log_copy)
    assert problems == [
        f"{store.name}: damage starts at byte {size} of {size + 300} (300 bytes "
        f"not readable): the last 300 bytes are all zeros (a torn write, or space "
        f"the file system preallocated)"
    ]
