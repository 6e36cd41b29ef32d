"""Freed heap memory goes back to the system after a run (glibc, this machine kind)."""

from __future__ import annotations

import platform

import psutil
import pytest

from app.shared.process_memory import trim


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_trim_returns_freed_heap_pages():
    proc = psutil.Process()
    trim()  # start from a heap with nothing free in it, whatever ran before in this process
    before = proc.memory_info().rss
    # many small blocks (below the mmap threshold, so they live on the heap); most are freed, the
    # ones kept are spread over the heap, so glibc cannot give the freed pages back by itself
    blocks = [bytearray(4000) for _ in range(40_000)]
    assert proc.memory_info().rss - before > 100e6
    keep = blocks[::50]
    del blocks
    held = proc.memory_info().rss
    assert trim() is True
    after = proc.memory_info().rss
    assert held - after > 50e6, (before, held, after)
    del keep
