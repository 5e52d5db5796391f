"""The architecture's boundaries, enforced by reading every module's imports (lazy ones inside functions too).

* The pure plan (``rescheduler/plan/``) takes a snapshot and a configuration and returns a plan: it imports
  no API client, HTTP, logging, clock, thread, environment or process module, and nothing of the project
  but itself and ``shared/`` (in particular not ``rescheduler.cluster``, which acts on the cluster). That
  keeps plans reproducible and testable without a cluster (docs/architecture.md).
* No import cycle among the project's modules (``shared``, ``extender``, ``rescheduler``): every module can
  be understood, and imported, after the ones it uses.
* The product imports nothing from ``tests/`` or ``bench/``: the test and benchmark support (the cluster
  generator, the pusher baseline) is not shipped.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("shared", "extender", "rescheduler")
PLAN = ROOT / "rescheduler" / "plan"
PLAN_FORBIDDEN = {
    "kubernetes": "a Kubernetes client",
    "requests": "an HTTP client",
    "urllib3": "an HTTP client",
    "http": "an HTTP client",
    "socket": "the network",
    "logging": "logging",
    "time": "the clock",
    "datetime": "the clock",
    "threading": "threads",
    "os": "the environment",
    "subprocess": "processes",
    "flask": "a web framework",
    "prometheus_client": "metrics",
}
PLAN_MAY_IMPORT = ("rescheduler.plan", "shared")
"""Of the project, the plan folder imports only itself and the predicate library."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _product_modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for pkg in PRODUCT:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            out[_module_name(path)] = path
    return out


MODULES = _product_modules()


def _imports(path: Path) -> list[str]:
    return _imports_of(path.read_text(), _module_name(path), is_package=path.name == "__init__.py")


def _imports_of(source: str, module: str, *, is_package: bool = False) -> list[str]:
    """Every module named by an import in ``source`` of ``module`` (``from a import b`` also names ``a.b``,
    which is a module when ``b`` is one); relative imports resolved."""
    tree = ast.parse(source)
    here = module.split(".")
    package = here if is_package else here[:-1]
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            names.append(target)
            names.extend(f"{target}.{a.name}" for a in node.names)
    return names


def _project_edges(name: str, path: Path) -> set[str]:
    """The project modules ``name`` imports (a package import counts as its ``__init__``)."""
    out = set()
    for imported in _imports(path):
        if imported in MODULES and imported != name:
            out.add(imported)
    return out


def test_the_project_has_modules() -> None:
    # Guards the tests below against silently checking nothing.
    assert len(MODULES) >= 40
    assert len([m for m in MODULES if m.startswith("rescheduler.plan.")]) >= 8


PLAN_MODULES = sorted(PLAN.glob("*.py"))


@pytest.mark.parametrize("path", PLAN_MODULES, ids=[p.name for p in PLAN_MODULES])
def test_plan_module_imports_nothing_impure(path: Path) -> None:
    bad = []
    for name in _imports(path):
        top = name.split(".")[0]
        if top in PLAN_FORBIDDEN:
            bad.append(f"{name} ({PLAN_FORBIDDEN[top]})")
        elif top in PRODUCT and not any(name == p or name.startswith(p + ".") for p in PLAN_MAY_IMPORT):
            bad.append(f"{name} (outside the plan and shared/)")
        elif top in ("tests", "bench"):
            bad.append(f"{name} (test or benchmark support)")
    assert bad == [], f"rescheduler/plan/{path.name} imports {bad}"


def test_the_import_reader_sees_lazy_and_relative_imports() -> None:
    # What the tests above rely on: an import inside a function and a relative import are both seen.
    source = "def f() -> None:\n    import time\n    from ..cluster import drain\n"
    names = _imports_of(source, "rescheduler.plan.probe")
    assert "time" in names
    assert "rescheduler.cluster.drain" in names


def _project_graph() -> dict[str, set[str]]:
    return {name: _project_edges(name, path) for name, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_among_the_projects_modules() -> None:
    cycles = _cycles(_project_graph())
    assert cycles == [], f"import cycles: {cycles}"


def test_the_cycle_finder_finds_cycles_and_only_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set(), "f": {"f"}}
    assert _cycles(graph) == [["a", "b", "c"]]


@pytest.mark.parametrize("name", sorted(MODULES), ids=sorted(MODULES))
def test_product_imports_no_test_or_bench_support(name: str) -> None:
    bad = [i for i in _imports(MODULES[name]) if i.split(".")[0] in ("tests", "bench")]
    assert bad == [], f"{name} imports {bad}"
