"""The remote chunk cache: LRU by bytes on disk, held chunks served from memory before
their file is written, discarded chunks never written."""

from __future__ import annotations

from pathlib import Path

from tiered_log.remote.cache import ChunkCache


def files(d: Path) -> list[Path]:
    return [p for p in d.iterdir() if p.is_file()]


def test_held_chunk_is_read_from_memory_then_persisted(tmp_path: Path) -> None:
    c = ChunkCache(tmp_path / "c", max_bytes=1000, memory_bytes=500)
    c.hold("k", 0, b"a" * 100)
    assert c.contains("k", 0, 100) and files(tmp_path / "c") == []
    assert c.get("k", 0, 100) == b"a" * 100  # from memory: no file yet
    assert c.get("k", 0, 100) == b"a" * 100  # read twice before the file exists
    assert c.hits == 2
    c.persist("k", 0, b"a" * 100)
    assert len(files(tmp_path / "c")) == 1 and c.size_bytes == 100
    assert c.get("k", 0, 100) == b"a" * 100
    assert c.hits == 3 and c.misses == 0


def test_discarded_held_chunk_is_never_written(tmp_path: Path) -> None:
    c = ChunkCache(tmp_path / "c", max_bytes=1000, memory_bytes=500)
    c.hold("k", 0, b"bad")
    c.discard("k", 0, 3)
    assert not c.contains("k", 0, 3) and c.get("k", 0, 3) is None
    c.persist("k", 0, b"bad")  # the fetch thread's late write
    assert files(tmp_path / "c") == [] and c.size_bytes == 0


def test_memory_of_held_chunks_is_bounded_and_lru_on_disk(tmp_path: Path) -> None:
    c = ChunkCache(tmp_path / "c", max_bytes=250, memory_bytes=250)
    for i in range(3):
        c.hold("k", i * 100, bytes([i]) * 100)
    # Past the memory bound, but none is written yet: all stay (a reader must not have
    # to fetch a chunk again because its file is late).
    assert all(c.get("k", i * 100, 100) == bytes([i]) * 100 for i in range(3))
    for i in range(3):
        c.persist("k", i * 100, bytes([i]) * 100)
    # Written: memory back under its bound (the oldest dropped); 300 bytes in a
    # 250-byte cache: the oldest file was evicted.
    assert c.size_bytes == 200 and len(files(tmp_path / "c")) == 2
    assert c.get("k", 0, 100) is None
    assert c.get("k", 200, 100) == bytes([2]) * 100
    # Reopening rebuilds the LRU from the files.
    again = ChunkCache(tmp_path / "c", max_bytes=250)
    assert again.size_bytes == 200 and again.get("k", 100, 100) == bytes([1]) * 100
