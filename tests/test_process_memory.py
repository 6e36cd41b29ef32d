"""Freed heap memory goes back to the system after a run (glibc, this machine kind)."""

from __future__ import annotations

import platform

import psutil
import pytest

from app.process_memory import trim


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_trim_returns_freed_heap_pages():
    proc = psutil.Process()
    before = proc.memory_info().rss
    # many small blocks (below the mmap threshold, so they live on the heap), most of them freed
    blocks = [bytearray(4000) for _ in range(40_000)]
    keep = blocks[::50]
    del blocks
    held = proc.memory_info().rss
    assert trim() is True
    after = proc.memory_info().rss
    assert held - before > 50e6 and held - after > 50e6, (before, held, after)
    del keep
