"""No function or method in ``rescheduler/`` is longer than :data:`LIMIT` lines, so that each can be read whole
and each step is a function that can be tested alone.

A function's length runs from its ``def`` line to its last line (decorators excluded). :data:`PENDING` names the
functions still over the limit that are being split; the second test fails once one of them is short or gone, so
the list cannot go stale.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 60
PENDING = {
    ("rescheduler/cluster/drain.py", "drain"),
    ("rescheduler/cluster/evictor.py", "_evict"),
    ("rescheduler/run.py", "__init__"),
    ("rescheduler/run.py", "run_command"),
    ("rescheduler/plan/planner.py", "plan"),
}
"""(file, function name) of the functions over :data:`LIMIT` still being split."""


class Function(NamedTuple):
    file: str
    line: int
    name: str
    length: int


def _functions() -> list[Function]:
    """Every function and method under ``rescheduler/``, with its length in lines."""
    out = []
    for path in sorted((ROOT / "rescheduler").rglob("*.py")):
        file = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=file)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                assert node.end_lineno is not None
                out.append(Function(file, node.lineno, node.name, node.end_lineno - node.lineno + 1))
    return out


FUNCTIONS = _functions()


def test_no_function_is_longer_than_the_limit() -> None:
    long = [
        f"{f.file}:{f.line} {f.name} {f.length}"
        for f in FUNCTIONS
        if f.length > LIMIT and (f.file, f.name) not in PENDING
    ]
    assert not long, f"functions over {LIMIT} lines:\n" + "\n".join(long)


@pytest.mark.parametrize(("file", "name"), sorted(PENDING))
def test_a_pending_function_still_exists_and_is_still_too_long(file: str, name: str) -> None:
    lengths = [f.length for f in FUNCTIONS if (f.file, f.name) == (file, name)]
    assert lengths, f"{file} has no function {name}: remove it from PENDING"
    assert max(lengths) > LIMIT, f"{file}: {name} is {max(lengths)} lines now: remove it from PENDING"
