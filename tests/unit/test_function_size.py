"""No function or method in ``rescheduler/`` is longer than :data:`LIMIT` lines, nor anywhere else in the project
(``shared/``, ``extender/``, the tests, the benchmarks, the tools and the demo) longer than :data:`LIMIT_ELSEWHERE`,
so that each can be read whole and each step is a function that can be tested alone.

A function's length runs from its ``def`` line to its last line (decorators excluded).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 60
LIMIT_ELSEWHERE = 80
PACKAGES = {"rescheduler": LIMIT} | dict.fromkeys(
    ("shared", "extender", "tests", "bench", "tools", "demo"), LIMIT_ELSEWHERE
)


class Function(NamedTuple):
    file: str
    line: int
    name: str
    length: int
    limit: int


def functions_of(source: str, file: str, limit: int) -> list[Function]:
    """Every function and method of ``source``, with its length in lines and ``limit``."""
    out = []
    for node in ast.walk(ast.parse(source, filename=file)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            out.append(Function(file, node.lineno, node.name, node.end_lineno - node.lineno + 1, limit))
    return out


def _functions() -> list[Function]:
    """Every function and method of the project's folders, with its length in lines and its folder's limit."""
    return [
        function
        for folder, limit in PACKAGES.items()
        for path in sorted((ROOT / folder).rglob("*.py"))
        for function in functions_of(path.read_text(encoding="utf-8"), path.relative_to(ROOT).as_posix(), limit)
    ]


FUNCTIONS = _functions()


def test_no_function_is_longer_than_the_limit() -> None:
    long = [f"{f.file}:{f.line} {f.name} {f.length} (limit {f.limit})" for f in FUNCTIONS if f.length > f.limit]
    assert not long, "functions over their package's limit:\n" + "\n".join(long)


def test_the_walk_sees_the_functions() -> None:
    # Guards the test above against a walk that finds nothing (a wrong root or pattern).
    names = {(f.file, f.name) for f in FUNCTIONS}
    assert ("rescheduler/cluster/drain.py", "advance") in names and len(FUNCTIONS) > 500
    assert ("shared/fit.py", "fits") in names and ("extender/service.py", "filter") in names
    assert {"tests", "bench", "tools", "demo"} <= {f.file.split("/")[0] for f in FUNCTIONS}


def test_the_length_is_the_def_line_to_the_last() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(LIMIT))
    (f,) = functions_of(f"@decorated\ndef f() -> None:\n{body}", "x.py", LIMIT)
    assert (f.line, f.length) == (2, LIMIT + 1) and f.length > f.limit
