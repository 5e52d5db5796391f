"""shared.heap: with the threshold fixed, a freed list page leaves the process at once (glibc).

Measured in a process of its own: the resident size of the test run's process moves with whatever its other
threads allocate meanwhile."""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = """
import json
from shared import heap

def rss_kib():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))

taken = heap.map_large_buffers()
# Left to itself, glibc would raise its threshold to 16 MB here and keep the next 4 MB page in the heap.
larger = b"x" * (16 << 20)
del larger
before = rss_kib()
page = b"y" * (4 << 20)
held = rss_kib() - before
del page
left = rss_kib() - before
heap.trim()  # and a trim does no harm
print(json.dumps({"taken": taken, "held": held, "left": left}))
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_a_large_buffer_freed_after_a_larger_one_leaves_the_process() -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, check=True)
    figures = json.loads(out.stdout)
    assert figures["taken"]
    assert figures["held"] >= 4000
    assert figures["left"] < 1024, "the page was mapped alone and unmapped when freed"
