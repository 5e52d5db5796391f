"""The run loop's size limits, measured on the code: :class:`rescheduler.run.Rescheduler` is at most
:data:`LOOP_LINES` lines with at most :data:`LOOP_ATTRIBUTES` instance attributes (the drains in flight, the
plans, the capacity requests and the rest are parts it holds), and one line of code assigns a drain's phase
(:meth:`rescheduler.cluster.drain.Drainer._take`). The functions' lengths are test_function_size.py's.

Each measure is also run on a small source that breaks it, so that none passes by seeing nothing.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "rescheduler"
LOOP_LINES = 300
LOOP_ATTRIBUTES = 12


def class_def(tree: ast.Module, name: str) -> ast.ClassDef:
    (found,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
    return found


def assigned_attributes(tree: ast.AST) -> Iterator[tuple[ast.stmt, ast.Attribute]]:
    """Each attribute an assignment in ``tree`` writes (plain, annotated, augmented, within a tuple), with its
    statement."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        else:
            continue
        for target in targets:
            for t in target.elts if isinstance(target, ast.Tuple) else [target]:
                if isinstance(t, ast.Attribute):
                    yield node, t


def instance_attributes(cls: ast.ClassDef) -> set[str]:
    """The names ``self.<name>`` is assigned to in the class's methods."""
    return {a.attr for _, a in assigned_attributes(cls) if isinstance(a.value, ast.Name) and a.value.id == "self"}


def phase_assignments(tree: ast.Module, file: str) -> list[str]:
    """``file:line`` of each statement that assigns an attribute named ``phase`` (``x.phase = ...``)."""
    return [f"{file}:{node.lineno}" for node, a in assigned_attributes(tree) if a.attr == "phase"]


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
        "        drain.phase, drain.since = 2, 0\n"
    )
    tree = ast.parse(source)
    assert instance_attributes(class_def(tree, "Rescheduler")) == {"a", "b", "c"}
    assert phase_assignments(tree, "x.py") == ["x.py:7", "x.py:8"]
