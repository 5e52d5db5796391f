"""The README's first command, ``bash demo/run.sh``, minus its installation steps: ``python3 -m demo``.

Run as a subprocess exactly as a person runs it, with stdout a pipe (so the demo chooses its plain, one line
per event output). It starts its own control plane next to the session's: they share nothing but the
machine. The summary must show at least one on-demand node emptied onto spot, pods moved, and every
Deployment back at its desired Ready count; a second run is interrupted with SIGINT (what Ctrl-C sends)
in the middle of the drains and must tear everything down and leave no process behind.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.controlplane import Binaries, BinariesMissing
from tests.support.controlplane.process import CONTROL_PLANE_VARIABLES

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def binaries() -> None:
    if os.environ.get("SPOTSHIFT_SKIP_E2E") == "1":
        pytest.skip("SPOTSHIFT_SKIP_E2E=1: the e2e tier is skipped")
    try:
        Binaries.locate()
    except BinariesMissing as error:
        pytest.fail(str(error), pytrace=False)


def demo_env() -> dict[str, str]:
    """The demo's environment: no SPOTSHIFT_* setting of the servers, but the control plane's release and cache
    (the demo's own children get none of them, demo/stack.py)."""
    return {k: v for k, v in os.environ.items() if not k.startswith("SPOTSHIFT_") or k in CONTROL_PLANE_VARIABLES}


def processes_mentioning(text: str) -> list[str]:
    """Command lines of running processes that mention ``text`` (the demo's work dir is in all of them)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(f"{proc.name}: {cmdline[:200]}")
    return found


def test_the_demo_empties_on_demand_nodes_onto_spot_and_loses_no_pod(tmp_path: Path) -> None:
    work = tmp_path / "work"
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "demo", "--timeout", "240", "--work-dir", str(work)],
        cwd=ROOT,
        env=demo_env(),
        capture_output=True,
        text=True,
        timeout=330,
    )
    took = time.monotonic() - started
    out = proc.stdout
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out[-4000:]}\n{proc.stderr[-2000:]}"
    assert "\x1b" not in out, "stdout is not a terminal: plain output"
    emptied = re.search(r"nodes emptied: (\d+) of (\d+) on-demand nodes drained onto spot", out)
    assert emptied and int(emptied[1]) >= 1, out[-3000:]
    moved = re.search(r"pods moved: (\d+) \(evicted through the Eviction API", out)
    assert moved and int(moved[1]) >= 1, out[-3000:]
    assert re.search(r"moved +\w+: od-\d → spot-\d", out), "moves are shown as they happen"
    assert "no pod lost: every Deployment back at its desired Ready count" in out
    assert "stays: " in out and "safe-to-evict" in out, "the node that stays says why"
    assert "RESULT: PASS" in out
    assert "no process left running" in out
    assert processes_mentioning(str(work)) == []
    assert took < 240, f"the demo took {took:.0f}s"
    print(f"demo: {took:.0f}s, {emptied[1]} of {emptied[2]} on-demand nodes emptied, {moved[1]} pods moved")


def _interruptible() -> None:
    """In the demo's process before exec: Ctrl-C's default disposition. A test run started in the background of a
    non-interactive shell inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_in_the_middle_of_the_drains_tears_everything_down(tmp_path: Path) -> None:
    work = tmp_path / "work"
    proc = subprocess.Popen(
        [sys.executable, "-m", "demo", "--timeout", "240", "--work-dir", str(work)],
        cwd=ROOT,
        env=demo_env(),
        preexec_fn=_interruptible,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout or ()], daemon=True)
    reader.start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + 180
        while not any("rescheduler draining node" in line for line in seen):
            assert time.monotonic() < deadline, "no drain started:\n" + "".join(seen[-40:])
            assert proc.poll() is None, "the demo ended early:\n" + "".join(seen[-40:])
            with contextlib.suppress(queue.Empty):
                seen.append(lines.get(timeout=1))
        proc.send_signal(signal.SIGINT)
        code = proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    reader.join(10)
    while not lines.empty():
        seen.append(lines.get())
    out = "".join(seen)
    assert code == 130, out[-3000:]
    assert "interrupted: tearing down" in out
    assert "no process left running" in out, out[-2000:]
    assert "Traceback" not in out
    assert processes_mentioning(str(work)) == []
