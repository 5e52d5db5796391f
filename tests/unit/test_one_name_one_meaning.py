"""One name, one meaning: no top-level class or function name is defined in two modules of the product
(``shared/``, ``extender/``, ``rescheduler/``), so that a name read anywhere says which thing it is.

:data:`ALLOWED` lists the exceptions, each with its reason.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("shared", "extender", "rescheduler")

ALLOWED = {
    # Each command's entry point (pyproject.toml's console scripts and ``python -m``) is its module's ``main``.
    "main": {
        "extender/cli.py",
        "extender/certs.py",
        "extender/probe.py",
        "rescheduler/cli.py",
        "rescheduler/run.py",
        "rescheduler/kubectl_plugin.py",
    },
}


def defined_names() -> dict[str, set[str]]:
    """Every public top-level class and function name of the product, with the files defining it."""
    out: dict[str, set[str]] = defaultdict(set)
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            file = path.relative_to(ROOT).as_posix()
            for node in ast.parse(path.read_text(encoding="utf-8"), filename=file).body:
                if isinstance(node, ast.ClassDef | ast.FunctionDef) and not node.name.startswith("_"):
                    out[node.name].add(file)
    return out


def test_no_name_is_defined_in_two_modules_but_the_allowed() -> None:
    twice = {name: files for name, files in defined_names().items() if len(files) > 1}
    unexpected = {name: sorted(files) for name, files in twice.items() if ALLOWED.get(name) != files}
    assert not unexpected, f"defined in more than one module: {unexpected}"


def test_the_allowed_list_holds_only_names_still_defined_twice() -> None:
    names = defined_names()
    stale = {name for name, files in ALLOWED.items() if names.get(name) != files}
    assert not stale, f"no longer defined in exactly these modules: {stale}"


def test_the_walk_sees_the_product() -> None:
    names = defined_names()
    assert names["fits"] == {"shared/fit.py"} and "ExtenderService" in names and len(names) > 400
