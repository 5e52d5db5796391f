"""Each vocabulary of reasons has one home, so that a reason read in an Event, a log line or ``plan``'s output is
defined in one place and worded the same everywhere:

* kube-scheduler's texts for a pod that does not fit a node (``Insufficient cpu``, ``node(s) ...``, ``Too many
  pods``): :mod:`shared.fit_reasons` (the release-dependent wording is chosen there, by :mod:`shared.switches`);
* why an on-demand node stays: :mod:`rescheduler.plan.stay_reasons`;
* the rescheduler's Event reasons (``SpotshiftDrainStarted`` ...): :mod:`rescheduler.cluster.events`.

Docstrings and comments may quote them; code elsewhere names the constants.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("shared", "extender", "rescheduler")

HOMES = {
    "a kube-scheduler fit reason": (re.compile(r"^(Insufficient |Too many pods|node\(s\) )"), "shared/fit_reasons.py"),
    "an Event reason": (re.compile(r"^Spotshift[A-Z][A-Za-z]+$"), "rescheduler/cluster/events.py"),
}


def code_strings(source: str) -> list[str]:
    """The string constants of ``source``'s code (f-strings' literal parts too), docstrings left out."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def strays(vocabulary: str, files: dict[str, str]) -> list[str]:
    pattern, home = HOMES[vocabulary]
    return sorted(
        f"{file}: {text!r}"
        for file, source in files.items()
        if file != home
        for text in code_strings(source)
        if pattern.search(text)
    )


def product_sources() -> dict[str, str]:
    return {
        path.relative_to(ROOT).as_posix(): path.read_text(encoding="utf-8")
        for package in PRODUCT
        for path in sorted((ROOT / package).rglob("*.py"))
    }


@pytest.mark.parametrize("vocabulary", sorted(HOMES))
def test_a_reason_is_written_only_in_its_vocabularys_home(vocabulary: str) -> None:
    found = strays(vocabulary, product_sources())
    assert not found, f"{vocabulary} written outside {HOMES[vocabulary][1]}: {found}"


@pytest.mark.parametrize("vocabulary", sorted(HOMES))
def test_each_home_holds_its_vocabulary(vocabulary: str) -> None:
    pattern, home = HOMES[vocabulary]
    assert any(pattern.search(text) for text in code_strings((ROOT / home).read_text(encoding="utf-8")))


@pytest.mark.parametrize(
    ("vocabulary", "source"),
    [
        ("a kube-scheduler fit reason", 'def why(name):\n    return f"Insufficient {name}"\n'),
        ("a kube-scheduler fit reason", 'WHY = "node(s) had untolerated taint(s)"\n'),
        ("an Event reason", 'def record(events):\n    events.record("SpotshiftDrainStarted", "")\n'),
    ],
)
def test_a_reason_written_elsewhere_is_found(vocabulary: str, source: str) -> None:
    assert strays(vocabulary, {"rescheduler/plan/elsewhere.py": source})


def test_a_docstring_may_quote_a_reason() -> None:
    source = '"""Says ``Insufficient cpu`` and SpotshiftDrainStarted."""\n\n\ndef f():\n    """``node(s) x``"""\n'
    assert not strays("a kube-scheduler fit reason", {"shared/x.py": source})
