"""One piece of work in a forked child, its answer read back as bytes: :func:`fork` and :func:`read_back`.

What :mod:`rescheduler.decode.split` (half a snapshot file) and :mod:`rescheduler.parallel.packing` (packing
passes) share. The child sees this process's memory as it was at the fork (copy-on-write), runs ``work`` and
writes what it returns to a pipe only the two processes hold, then ends at once (``os._exit``: no atexit
handlers, no buffer flushed twice; this process owns the exit). Any failure, to fork or in the child, reads as
``None``: callers then do the work themselves.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

__all__ = ["fork", "read_back", "can_fork"]


def can_fork() -> bool:
    """Whether this platform forks (Linux, macOS; not Windows)."""
    return hasattr(os, "fork")


def fork(work: Callable[[], bytes]) -> tuple[int, int] | None:
    """A child running ``work``: ``(pid, read end of its pipe)``, or ``None`` when it could not be started."""
    if not can_fork():
        return None
    try:
        r, w = os.pipe()
    except OSError:
        return None
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        pid = os.fork()
    except OSError:
        os.close(r)
        os.close(w)
        return None
    if pid == 0:  # pragma: no cover - the child's own coverage is not collected; its answer is tested
        code = 1
        try:
            os.close(r)
            data = work()
            with os.fdopen(w, "wb") as out:
                out.write(data)
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


def read_back(child: tuple[int, int]) -> bytes | None:
    """What the child wrote, once it has ended; ``None`` when it failed (killed, or an exception)."""
    pid, fd = child
    with os.fdopen(fd, "rb") as src:
        data = src.read()
    _, status = os.waitpid(pid, 0)
    if not os.WIFEXITED(status) or os.WEXITSTATUS(status) != 0:
        return None
    return data
