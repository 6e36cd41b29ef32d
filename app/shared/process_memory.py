"""Keep the server's resident memory from creeping up run after run.

A run frees what it allocated (KV caches, activations, messages), but glibc keeps freed heap
pages mapped for reuse, and a fragmented heap can rarely give its top back. `trim()`
(`malloc_trim(0)`) after each run returns the free pages inside every heap (a few milliseconds).
It cannot shrink the top of a thread arena's heap, which is why all model work runs on one
long-lived thread (app.shared.jobs): one arena, reused run after run.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache


@cache
def _libc():
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim  # noqa: B018 (glibc only: musl and macOS have none)
    except (OSError, AttributeError):
        return None
    return libc


def trim() -> bool:
    """Give freed heap memory back to the system. False where there is no glibc to ask."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True
