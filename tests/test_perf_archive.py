"""``tiered-log perf archive`` on tiny corpora: the report's shape, that every archive read
back is byte for byte the log that was shipped, that every scrub came out clean, and that
JSON lines shrink in the bucket while random values do not; never speed (a loaded CI
machine says nothing about the code).

The command runs in a subprocess through ``tiered_log.cli.main`` (its own session, so a
timeout takes moto's server process with it).
"""

from __future__ import annotations

import json
from pathlib import Path

from perf_cli import run_perf

from tiered_log.perf.archive import json_lines, random_values

SUBJECTS = ("plain", "compressed_encrypted")
PHASES = ("ship", "read", "scrub")
RATIOS = tuple(f"{p}_compressed_encrypted_vs_plain" for p in PHASES)


def test_corpora_are_deterministic_and_distinct() -> None:
    """The same records for the same arguments; no record repeats (so compression finds
    only what one line shares with its neighbours, not copies of the corpus)."""
    assert json_lines(100, 50) == json_lines(100, 50)
    assert json_lines(100, 50) != json_lines(150, 50)
    assert len(set(json_lines(0, 2000))) == 2000
    assert all(json.loads(v)["ts"] for v in json_lines(0, 5))
    assert random_values(7, 3) == random_values(7, 3)
    vals = random_values(0, 200)
    assert len(set(vals)) == 200 and all(len(v) == 1024 for v in vals)


def test_perf_archive_json(tmp_path: Path) -> None:
    out, err = run_perf(
        [
            *("archive", "--json", "--total-mib", "1", "--segment-mib", "1"),
            *("--repeat", "2", "--dir", str(tmp_path)),
        ]
    )
    r = json.loads(out)
    assert "[perf] archive" in err  # progress on stderr, not in the JSON
    assert r["benchmark"] == "archive"
    assert r["params"]["repeat"] == 2 and r["params"]["endpoint"] == "moto"
    assert r["params"]["subjects"] == {
        "plain": {"compression": "none", "encrypted": False},
        "compressed_encrypted": {"compression": "zstd", "encrypted": True},
    }
    assert set(r["corpora"]) == {"json_lines", "random"}
    for name, c in r["corpora"].items():
        assert c["records"] > 0 and c["log_bytes"] >= 1 << 20 and c["segments"] >= 1
        for s in SUBJECTS:
            # What every cold read returned is exactly the log that was shipped.
            assert c["read_sha256"][s] == [c["log_sha256"]] * 2, name
            for phase in PHASES:
                f = c[phase][s]
                assert len(f["runs_mb_per_s"]) == 2 and all(x > 0 for x in f["runs_mb_per_s"])
                assert f["mb_per_s"] == max(f["runs_mb_per_s"])
            assert c["scrub_bucket_bytes_read"][s] > 0
        for k in RATIOS:
            assert len(c["per_round"][k]) == 2
            lo, hi = c["ranges"][k]
            assert 0 < lo <= c["ratios"][k] <= hi
    js, rnd = r["corpora"]["json_lines"], r["corpora"]["random"]
    # Sizes, not speed: JSON lines compress, random values are stored as they are, and
    # the manifests come on top of a plain archive.
    assert js["bucket_bytes_ratio"]["compressed_encrypted"] < 0.35
    assert js["bucket_bytes_ratio"]["plain"] >= 1.0
    assert rnd["bucket_bytes_ratio"]["compressed_encrypted"] >= 1.0
    assert r["bucket_bytes_ratio"] == js["bucket_bytes_ratio"]["compressed_encrypted"]
    for k in RATIOS:
        assert r["ratios"][k] == min(js["ratios"][k], rnd["ratios"][k])
    assert set(r["scrub_mb_per_s"]) == {"json_lines", "random"}
    t = r["targets"]
    assert set(t) == {*RATIOS[:2], "bucket_bytes_ratio"}
    for k in RATIOS[:2]:
        assert t[k]["ratio"] == r["ratios"][k] and t[k]["min_ratio"] == 0.7
        assert t[k]["met"] == (t[k]["ratio"] >= 0.7)
    assert t["bucket_bytes_ratio"] == {
        "corpus": "json_lines",
        "max": 0.35,
        "value": r["bucket_bytes_ratio"],
        "met": True,
    }
    assert r["met"] == all(x["met"] for x in t.values())
    assert not any(tmp_path.iterdir())  # the work directory is removed
