"""glibc's heap, asked to give back what a big list took: the start-up lists of a 150,000-pod cluster.

A list page is one bytes object of about 10 MB (500 pods). glibc maps a buffer that large on its own and unmaps it
when freed, but then raises its threshold for mapping to that size (its "dynamic mmap threshold"), so the next
pages come from the heap, where, freed in the middle of the objects the state keeps, they stay counted in the
process's memory; each list thread's heap (an "arena") keeps its own. :func:`map_large_buffers` fixes the threshold
at 1 MB, so every page is mapped and unmapped alone, and :func:`trim` gives back the free pages the heap has at its
end. Elsewhere than on glibc both do nothing.
"""

from __future__ import annotations

import contextlib
import ctypes

__all__ = ["map_large_buffers", "trim", "LARGE_BUFFER"]

M_MMAP_THRESHOLD = -3
"""``mallopt``'s parameter for the threshold (glibc's ``malloc.h``); setting it turns the dynamic threshold off."""
LARGE_BUFFER = 1024 * 1024


def _libc() -> ctypes.CDLL | None:
    with contextlib.suppress(OSError):
        return ctypes.CDLL(None)
    return None


def map_large_buffers(size: int = LARGE_BUFFER) -> bool:
    """Allocations of ``size`` bytes or more are mapped, and unmapped when freed; whether glibc took it."""
    libc = _libc()
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    return bool(mallopt(M_MMAP_THRESHOLD, size))


def trim() -> None:
    """Give the heaps' free pages back to the system (after a big list)."""
    libc = _libc()
    with contextlib.suppress(AttributeError, OSError):
        if libc is not None:
            libc.malloc_trim(0)
