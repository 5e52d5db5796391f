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


# Modules named by their role: two files of the product share a name only where the name means the same role in
# each component (each command's entry point and its metrics), and no module is named like a package elsewhere.
SAME_ROLE_FILES = {"__init__.py", "cli.py", "metrics.py"}


def module_files() -> dict[str, set[str]]:
    """Every module file name of the product, with the paths carrying it."""
    out: dict[str, set[str]] = defaultdict(set)
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            out[path.name].add(path.relative_to(ROOT).as_posix())
    return out


def test_no_two_product_modules_share_a_file_name_but_one_role_in_each_component() -> None:
    twice = {name: sorted(paths) for name, paths in module_files().items() if len(paths) > 1}
    assert set(twice) <= SAME_ROLE_FILES, (
        f"file names used twice: { {n: p for n, p in twice.items() if n not in SAME_ROLE_FILES} }"
    )
    for name in SAME_ROLE_FILES - {"__init__.py"}:
        components = [path.split("/")[0] for path in twice.get(name, [])]
        assert len(components) == len(set(components)), f"{name} twice in one component: {twice[name]}"


def test_no_module_is_named_like_a_package_of_the_product() -> None:
    packages = {path.parent.name for package in PRODUCT for path in (ROOT / package).rglob("__init__.py")}
    modules = {name.removesuffix(".py") for name in module_files()} - {"__init__"}
    assert not packages & modules, f"a module and a package share a name: {sorted(packages & modules)}"


def test_the_file_name_walk_sees_the_product() -> None:
    files = module_files()
    assert files["cli.py"] == {"extender/cli.py", "rescheduler/cli.py"} and len(files) > 80
