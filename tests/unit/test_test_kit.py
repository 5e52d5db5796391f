"""The test kit's rules: tests/e2e/conftest.py is the one place the e2e fixtures are defined; the benchmarks, tools
and the demo use tests.support and tests.builders only (the product no test code at all); no file imports another
file's private name (the functions' lengths, everywhere, are test_function_size.py's). Each rule is a function of
a source text, fed a bad one here to show it can fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from shared.classes import is_on_demand, is_spot
from shared.config import parse_config
from tests.builders import ON_DEMAND, SPOT, WEB, on_demand_node, spot_node, web_pod

ROOT = Path(__file__).resolve().parents[2]
CONFTEST = "tests/e2e/conftest.py"
PROJECT = ("shared", "extender", "rescheduler", "tests", "bench", "tools", "demo")
PRODUCT = ("shared", "extender", "rescheduler")
USERS_OF_THE_KIT = ("bench", "tools", "demo")
KIT = ("tests.support", "tests.builders")


def _files(*tops: str) -> list[Path]:
    return [path for top in tops for path in sorted((ROOT / top).rglob("*.py"))]


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=_relative(path))


# --- the e2e fixtures: defined once -----------------------------------------------------------------------------


def _is_fixture(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return (isinstance(target, ast.Attribute) and target.attr == "fixture") or (
        isinstance(target, ast.Name) and target.id == "fixture"
    )


def fixture_names(tree: ast.Module) -> set[str]:
    """The fixtures a module defines (decorated functions at any depth)."""
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(map(_is_fixture, node.decorator_list))
    }


def fixture_copies(source: str, names: set[str], *, bindings: bool = True) -> list[str]:
    """Where a module defines one of ``names`` as a fixture or, with ``bindings``, binds one at module level (by
    assignment or import, which is how pytest would find a fixture re-exported into a test module)."""
    tree = ast.parse(source)
    out = [f"fixture {name}" for name in sorted(fixture_names(tree) & names)]
    for node in tree.body if bindings else ():
        if isinstance(node, ast.Assign):
            bound = {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            bound = {node.target.id}
        elif isinstance(node, ast.ImportFrom | ast.Import):
            bound = {alias.asname or alias.name.split(".")[0] for alias in node.names}
        else:
            continue
        out += [f"line {node.lineno} binds {name}" for name in sorted(bound & names)]
    return out


E2E_FIXTURES = fixture_names(_parse(ROOT / CONFTEST))


def test_conftest_defines_the_e2e_fixtures() -> None:
    assert {"control_plane", "namespace", "make_node", "world", "budgets", "start", "runs"} <= E2E_FIXTURES


@pytest.mark.parametrize("path", [p for p in _files("tests") if _relative(p) != CONFTEST], ids=_relative)
def test_no_other_file_defines_or_re_exports_an_e2e_fixture(path: Path) -> None:
    # Outside tests/e2e/ a module-level name such as the builders' ``namespace`` is no fixture pytest would use.
    in_e2e = path.parent == ROOT / "tests" / "e2e"
    assert fixture_copies(path.read_text(encoding="utf-8"), E2E_FIXTURES, bindings=in_e2e) == []


@pytest.mark.parametrize(
    "source",
    [
        "import pytest\n@pytest.fixture\ndef world() -> None: ...\n",
        "from pytest import fixture\nclass C:\n    @fixture(scope='module')\n    def world(self) -> None: ...\n",
        "from tests.support import rescheduler_world as base\nworld = base.world\n",
        "from tests.e2e.conftest import start\n",
        "import tests.e2e.conftest as c\nbudgets: object = c.budgets\n",
    ],
)
def test_the_fixture_rule_finds_a_second_world(source: str) -> None:
    assert fixture_copies(source, E2E_FIXTURES)


def test_a_helper_named_like_a_fixture_is_no_copy() -> None:
    assert fixture_copies("def world(n: int) -> int:\n    return n\n", E2E_FIXTURES) == []
    source = "from tests.builders import namespace\n@pytest.fixture\ndef world() -> None: ...\n"
    assert fixture_copies(source, E2E_FIXTURES, bindings=False) == ["fixture world"]


# --- who may import test code -------------------------------------------------------------------------------


def imported_modules(source: str, module: str = "") -> list[str]:
    """Every module a source imports, at any depth (lazy imports too), relative ones resolved from ``module``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.split(".")[: -node.level]
                base = ".".join([*parent, base] if base else parent)
            out += [base] + [f"{base}.{alias.name}" for alias in node.names]
    return out


def _within(name: str, packages: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in packages)


def forbidden_imports(source: str, *, product: bool, module: str = "") -> list[str]:
    """The test code a source imports that it may not: none at all for the product, anything but the kit
    (tests.support, tests.builders) for the benchmarks, tools and demo."""
    names = [n for n in imported_modules(source, module) if _within(n, ("tests",))]
    if product:
        return names
    return [n for n in names if n != "tests" and not _within(n, KIT)]


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@pytest.mark.parametrize("path", _files(*PRODUCT, *USERS_OF_THE_KIT), ids=_relative)
def test_the_product_imports_no_test_code_and_the_rest_only_the_kit(path: Path) -> None:
    product = path.relative_to(ROOT).parts[0] in PRODUCT
    assert forbidden_imports(path.read_text(encoding="utf-8"), product=product, module=_module(path)) == []


@pytest.mark.parametrize("path", _files("tests/support", "tests/builders"), ids=_relative)
def test_the_kit_imports_no_test_module(path: Path) -> None:
    assert forbidden_imports(path.read_text(encoding="utf-8"), product=False, module=_module(path)) == []


@pytest.mark.parametrize(
    ("source", "product"),
    [
        ("from tests.unit.fake_api import FakeApiServer\n", False),
        ("import tests.e2e.controlplane\n", False),
        ("def f() -> None:\n    from tests.unit import test_run\n", False),
        ("from tests import unit\n", False),
        ("from tests.support.fake_api import FakeApiServer\n", True),
        ("from tests import builders\n", True),
    ],
)
def test_the_import_rule_refuses_test_code(source: str, product: bool) -> None:
    assert forbidden_imports(source, product=product)


def test_the_kit_is_what_the_benchmarks_may_import() -> None:
    source = "from tests.support.fake_api import FakeApiServer\nfrom tests import builders\nimport tests.builders\n"
    assert forbidden_imports(source, product=False) == []


# --- private names stay in their file -------------------------------------------------------------------------


def private_imports(source: str, module: str = "") -> list[str]:
    """The project's private names (one leading underscore) a source imports from another module."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            names = [node.module or "", *(alias.name for alias in node.names)]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        base = (node.module or "") if isinstance(node, ast.ImportFrom) else ""
        if isinstance(node, ast.ImportFrom) and node.level == 0 and not _within(base, PROJECT):
            continue
        if isinstance(node, ast.Import) and not any(_within(n, PROJECT) for n in names):
            continue
        for name in names:
            out += [f"line {node.lineno}: {name}" for part in name.split(".") if _private(part)]
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@pytest.mark.parametrize("path", _files(*PROJECT), ids=_relative)
def test_no_file_imports_another_files_private_name(path: Path) -> None:
    assert private_imports(path.read_text(encoding="utf-8"), _module(path)) == []


@pytest.mark.parametrize(
    "source",
    [
        "from tests.support.rescheduler_world import World, _bind\n",
        "from extender.certs import _git_would_track as tracked\n",
        "from .plan import _moves\n",
        "def f() -> None:\n    from rescheduler.output.page import _json_for_script\n",
        "import bench._private\n",
    ],
)
def test_the_private_name_rule_finds_one(source: str) -> None:
    assert private_imports(source)


def test_dunder_names_and_other_libraries_privates_are_not_the_projects() -> None:
    assert private_imports("from shared import __version__\nfrom os import _exit\nimport _thread\n") == []


# --- function length outside rescheduler/ ---------------------------------------------------------------------


def test_the_walks_see_the_files() -> None:
    # Guards the rules above against a walk that finds nothing (a wrong root or pattern).
    files = {_relative(p) for p in _files(*PROJECT)}
    assert {"tests/support/fake_api.py", "bench/drain_budget.py", "demo/stack.py", "tools/gen_reference.py"} <= files
    assert len(files) > 200


# --- presets --------------------------------------------------------------------------------------------------


def test_the_presets_are_what_their_names_say() -> None:
    classes = parse_config({}).node_classes
    spot, od, web = spot_node(), on_demand_node(labels={"zone": "a"}), web_pod(node_name="od-1")
    assert is_spot(spot, classes) and not is_on_demand(spot, classes)
    assert is_on_demand(od, classes) and not is_spot(od, classes)
    assert od.labels == {**ON_DEMAND, "zone": "a"} and spot.labels == SPOT
    assert web.labels == WEB and web.node_name == "od-1"
    assert [(o.kind, o.controller) for o in web.owners] == [("ReplicaSet", True)]
    assert web.requests == {"cpu": 100, "memory": 128 * 2**20}
