"""The run loop's size limits, measured on the code: :class:`rescheduler.run.Rescheduler` is at most
:data:`LOOP_LINES` lines with at most :data:`LOOP_ATTRIBUTES` instance attributes (the drains in flight, the
plans, the capacity requests and the rest are parts it holds), no function in ``rescheduler/`` is longer than
:data:`FUNCTION_LINES` lines, and one line of code assigns a drain's phase
(:meth:`rescheduler.cluster.drain.Drainer._take`).

Each measure is also run on a small source that breaks it, so that none passes by seeing nothing.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "rescheduler"
LOOP_LINES = 300
LOOP_ATTRIBUTES = 12
FUNCTION_LINES = 60


def class_def(tree: ast.Module, name: str) -> ast.ClassDef:
    (found,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    return found


def instance_attributes(cls: ast.ClassDef) -> set[str]:
    """The names ``self.<name>`` is assigned to in the class's methods (plain, annotated, augmented and tuple
    assignments)."""
    names: set[str] = set()
    for node in ast.walk(cls):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        else:
            continue
        for target in targets:
            for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    names.add(t.attr)
    return names


def long_functions(tree: ast.Module, file: str, limit: int) -> list[str]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            length = node.end_lineno - node.lineno + 1
            if length > limit:
                out.append(f"{file}:{node.lineno} {node.name} {length}")
    return out


def phase_assignments(tree: ast.Module, file: str) -> list[str]:
    """``file:line`` of each statement that assigns an attribute named ``phase`` (``x.phase = ...``, also within
    a tuple, annotated or augmented)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        else:
            continue
        for target in targets:
            for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(t, ast.Attribute) and t.attr == "phase":
                    out.append(f"{file}:{node.lineno}")
    return out


def parsed() -> dict[str, ast.Module]:
    return {
        path.relative_to(ROOT).as_posix(): ast.parse(path.read_text(encoding="utf-8"))
        for path in sorted(PACKAGE.rglob("*.py"))
    }


TREES = parsed()


def test_the_rescheduler_class_is_short() -> None:
    cls = class_def(TREES["rescheduler/run.py"], "Rescheduler")
    assert cls.end_lineno is not None
    assert cls.end_lineno - cls.lineno + 1 <= LOOP_LINES


def test_the_rescheduler_class_has_few_instance_attributes() -> None:
    attributes = instance_attributes(class_def(TREES["rescheduler/run.py"], "Rescheduler"))
    assert "queue" in attributes, "the walk sees the attributes"
    assert len(attributes) <= LOOP_ATTRIBUTES, sorted(attributes)


def test_no_function_in_the_rescheduler_is_long() -> None:
    long = [f for file, tree in TREES.items() for f in long_functions(tree, file, FUNCTION_LINES)]
    assert not long, long


def test_one_line_assigns_a_drains_phase() -> None:
    sites = [s for file, tree in TREES.items() for s in phase_assignments(tree, file)]
    assert len(sites) == 1 and sites[0].startswith("rescheduler/cluster/drain.py:"), sites


def test_the_measures_see_what_breaks_them() -> None:
    source = (
        "class Rescheduler:\n"
        "    def __init__(self):\n"
        "        self.a, self.b = 1, 2\n"
        "        self.c: int = 3\n"
        "        self.c += 1\n"
        "    def f(self, drain):\n"
        "        drain.phase = 1\n"
        "        drain.phase, drain.since = 2, 0\n" + "        x = 1\n" * FUNCTION_LINES
    )
    tree = ast.parse(source)
    assert instance_attributes(class_def(tree, "Rescheduler")) == {"a", "b", "c"}
    assert phase_assignments(tree, "x.py") == ["x.py:7", "x.py:8"]
    assert long_functions(tree, "x.py", FUNCTION_LINES) == [f"x.py:6 f {FUNCTION_LINES + 3}"]
