"""shared.heap: with the threshold fixed, a freed list page leaves the process at once (glibc)."""

from __future__ import annotations

import platform

import pytest

from shared import heap


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_a_large_buffer_freed_after_a_larger_one_leaves_the_process() -> None:
    assert heap.map_large_buffers()
    # Left to itself, glibc would raise its threshold to 16 MB here and keep the next 4 MB page in the heap.
    larger = b"x" * (16 << 20)
    del larger
    before = rss_kib()
    page = b"y" * (4 << 20)
    assert rss_kib() - before >= 4000
    del page
    assert rss_kib() - before < 1024, "the page was mapped alone and unmapped when freed"
    heap.trim()  # and a trim does no harm
