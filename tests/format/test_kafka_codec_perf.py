"""The ``perf kafka-codec`` benchmark runs end to end on a small buffer (figures unchecked)."""

from __future__ import annotations

from tiered_log.perf.kafka_codec import run


def test_kafka_codec_benchmark_smoke() -> None:
    report = run(32 * 1024, batch_records=4, compression="zstd", rounds=1, progress=False)
    assert report["records"] == 32 and report["batches"] == 8
    assert report["walk_mb_s"] > 0 and report["crc32c_mb_s"] > 0
    assert report["decode_records_s"] > 0 and report["kafka_python_records_s"] > 0
    assert report["walk_vs_crc32c"] > 0 and report["decode_vs_kafka_python"] > 0
