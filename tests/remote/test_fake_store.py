"""The fake store's own faults (its RemoteStorage contract is in test_storage_contract)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tiered_log.errors import (
    RemoteCorruptionError,
    RemoteObjectNotFoundError,
    RemoteStorageError,
)

from .fake_store import MemoryStorage


def test_an_error_hits_the_next_calls_it_names_then_is_spent() -> None:
    st = MemoryStorage()
    boom = RemoteStorageError("injected 503", retriable=True)
    fault = st.inject("put", "a/", error=boom, times=2)
    st.put("b/1", b"x")  # another prefix: not hit
    for _ in range(2):
        with pytest.raises(RemoteStorageError) as exc_info:
            st.put("a/1", b"x")
        assert exc_info.value is boom
    assert fault.hits == 2 and fault.spent
    assert st.put("a/1", b"x").size == 1
    assert st.stored_keys() == ["a/1", "b/1"]


def test_a_torn_put_file_leaves_an_invisible_partial_that_discard_removes(tmp_path: Path) -> None:
    st = MemoryStorage(part_size=1000)
    src = tmp_path / "f"
    src.write_bytes(bytes(5000))
    seen: list[int] = []
    st.inject("put_file", torn_at=2500)
    with pytest.raises(RemoteStorageError) as exc_info:
        st.put_file("seg.log", src, progress=seen.append)
    assert exc_info.value.retriable is True
    assert seen == [1000, 2000]  # the parts sent before the tear
    assert list(st.list("")) == []
    with pytest.raises(RemoteObjectNotFoundError):
        st.get("seg.log")
    assert st.partial_keys() == ["seg.log"]
    st.discard_partial(["seg.log"])
    assert st.partial_keys() == []
    assert st.put_file("seg.log", src).size == 5000  # spent: the retry goes through


def test_torn_at_the_end_still_fails_and_stores_nothing() -> None:
    st = MemoryStorage()
    st.inject("put", torn_at=10)
    with pytest.raises(RemoteStorageError):
        st.put("k", b"0123456789")
    assert st.stored_keys() == [] and st.partial_keys() == ["k"]


def test_missing_answers_not_found_for_reads_of_a_stored_object() -> None:
    st = MemoryStorage()
    st.put("k", b"data")
    st.inject("get", "k", missing=True)
    st.inject("size", "k", missing=True)
    with pytest.raises(RemoteObjectNotFoundError):
        st.get("k", 0, 2)
    with pytest.raises(RemoteObjectNotFoundError):
        st.size("k")
    assert st.get("k") == b"data"


def test_lose_and_flip_byte_happen_behind_the_stores_back() -> None:
    st = MemoryStorage()
    st.put("a", b"abc")
    st.put("b", b"xyz")
    st.lose("a")
    with pytest.raises(RemoteObjectNotFoundError):
        st.get("a")
    st.flip_byte("b", 1)
    with pytest.raises(RemoteCorruptionError):
        st.get("b")
    assert st.get("b", 1, 2) == bytes([ord("y") ^ 0xFF])


def test_delay_and_the_before_hook() -> None:
    st = MemoryStorage()
    st.put("k", b"v")
    st.inject("*", delay=0.2)
    t0 = time.monotonic()
    assert st.get("k") == b"v"
    assert time.monotonic() - t0 >= 0.2
    seen: list[tuple[str, str]] = []

    def before(op: str, key: str) -> None:
        seen.append((op, key))
        if op == "delete":
            raise RemoteStorageError("no deletes today", retriable=False)

    st.before = before
    st.size("k")
    with pytest.raises(RemoteStorageError, match="no deletes"):
        st.delete(["k", "other"])
    assert seen == [("size", "k"), ("delete", "k,other")]
    assert st.calls[-2:] == seen


def test_a_fault_names_a_known_operation() -> None:
    with pytest.raises(ValueError, match="unknown operation"):
        MemoryStorage().inject("gett")
