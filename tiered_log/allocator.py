"""The allocator settings of the project's long-running processes (the service, its
tier workers, the benchmarks that compare with them).

A request body, a fetch page, an archived chunk being encoded or decoded: megabytes are
allocated and freed per request. By default glibc serves such blocks with ``mmap`` and
returns freed memory to the OS at once (``munmap``, ``brk``), so the next request
faults fresh pages in again, at a cost per page that is high on virtual machines.
:func:`tune_malloc` keeps freed memory for reuse instead.

Process-wide and not thread-safe: call it once, early, from the main thread.
"""

from __future__ import annotations

import sys


def tune_malloc() -> bool:
    """glibc only: serve blocks below 32 MiB from the heap and keep up to 128 MiB of
    freed memory for reuse rather than give it back to the OS after every large
    request (see the module docstring). Whether it applied (False elsewhere, or where
    the C library has no ``mallopt``)."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if not name or not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_top_pad, m_mmap_threshold = -1, -2, -3
    ok = mallopt(m_mmap_threshold, 32 << 20)  # glibc's largest on 64-bit
    ok &= mallopt(m_trim_threshold, 128 << 20)
    ok &= mallopt(m_top_pad, 16 << 20)
    return bool(ok)


__all__ = ["tune_malloc"]
