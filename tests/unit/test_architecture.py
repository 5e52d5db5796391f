"""The architecture's boundaries, enforced by reading every module's imports (lazy ones inside functions too).

* The pure plan (``rescheduler/plan/``) takes a snapshot and a configuration and returns a plan: it imports
  no API client, HTTP, logging, clock, thread, environment or process module, and nothing of the project
  but itself and ``shared/`` (in particular not ``rescheduler.cluster``, which acts on the cluster). That
  keeps plans reproducible and testable without a cluster (docs/architecture.md).
* The rest of ``rescheduler/`` outside the loop and the commands, folder by folder (:data:`FOLDERS`): the
  plan's renderings (``output/``) are pure as the plan is and read only the plan and ``shared/``; snapshot
  decoding (``decode/``) uses only ``shared/`` and the forked child of ``parallel/``, never the cluster, the
  plan, the loop or the commands; the forked work (``parallel/``) runs plan passes and uses nothing that acts
  on the cluster, reads snapshots or renders.
* No import cycle among the project's modules (``shared``, ``extender``, ``rescheduler``): every module can
  be understood, and imported, after the ones it uses.
* The product imports nothing from ``tests/`` or ``bench/``: the test and benchmark support (the cluster
  generator, the pusher baseline) is not shipped.
* One transport to the API server (:data:`ONE_PLACE`): only ``shared/kube/api.py`` imports an HTTP client
  (it builds the connection pools, one per process), and only ``shared/kube/credentials.py`` imports the
  ``kubernetes`` package (to read kubeconfigs and the in-cluster service account). The folders above that
  may not act on the cluster may not import ``shared.kube`` either.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("shared", "extender", "rescheduler")
PURE_FORBIDDEN = {
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
"""What a pure folder does not import: it would reach the cluster, the clock, the environment or the process."""


class Folder(NamedTuple):
    path: str
    may_import: tuple[str, ...]
    """Of the project, the modules (and the packages under them) the folder may import."""
    pure: bool
    """Also imports none of :data:`PURE_FORBIDDEN`."""


FOLDERS = (
    Folder("rescheduler/plan", ("rescheduler.plan", "shared"), pure=True),
    Folder("rescheduler/output", ("rescheduler.output", "rescheduler.plan", "shared"), pure=True),
    Folder("rescheduler/decode", ("rescheduler.decode", "rescheduler.parallel.forked", "shared"), pure=False),
    Folder("rescheduler/parallel", ("rescheduler.parallel", "rescheduler.plan", "shared"), pure=False),
)


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


FOLDER_MODULES = [(folder, path) for folder in FOLDERS for path in sorted((ROOT / folder.path).glob("*.py"))]


def _may_import(folder: Folder, name: str) -> bool:
    """``name`` is one of the folder's allowed modules, under one, or a package holding one (its ``__init__``
    runs first: ``from rescheduler.parallel import forked`` names ``rescheduler.parallel`` too)."""
    return any(name == p or name.startswith(p + ".") or p.startswith(name + ".") for p in folder.may_import)


def _boundary_problems(folder: Folder, names: list[str]) -> list[str]:
    bad = []
    for name in names:
        top = name.split(".")[0]
        if name == "shared.kube" or name.startswith("shared.kube."):
            bad.append(f"{name} (talks to the API server)")
        elif folder.pure and top in PURE_FORBIDDEN:
            bad.append(f"{name} ({PURE_FORBIDDEN[top]})")
        elif top in PRODUCT and not _may_import(folder, name):
            bad.append(f"{name} (outside {', '.join(folder.may_import)})")
        elif top in ("tests", "bench"):
            bad.append(f"{name} (test or benchmark support)")
    return bad


@pytest.mark.parametrize(
    ("folder", "path"), FOLDER_MODULES, ids=[path.relative_to(ROOT).as_posix() for _, path in FOLDER_MODULES]
)
def test_folder_module_imports_only_what_its_folder_may(folder: Folder, path: Path) -> None:
    bad = _boundary_problems(folder, _imports(path))
    assert bad == [], f"{folder.path}/{path.name} imports {bad}"


@pytest.mark.parametrize("folder", FOLDERS, ids=[f.path for f in FOLDERS])
def test_every_folder_rule_checks_modules(folder: Folder) -> None:
    # Guards the test above against a renamed folder that it would silently stop checking.
    assert len([p for f, p in FOLDER_MODULES if f == folder and p.name != "__init__.py"]) >= 2


@pytest.mark.parametrize(
    ("folder", "source"),
    [
        pytest.param(FOLDERS[0], "from rescheduler.cluster import drain", id="plan-acts-on-the-cluster"),
        pytest.param(FOLDERS[0], "import time", id="plan-reads-the-clock"),
        pytest.param(FOLDERS[1], "from rescheduler.cluster.marking import NodeMarker", id="output-acts-on-the-cluster"),
        pytest.param(FOLDERS[1], "from shared.kube.api import Kube", id="output-talks-to-the-api-server"),
        pytest.param(FOLDERS[1], "import logging", id="output-logs"),
        pytest.param(
            FOLDERS[2], "from rescheduler.cluster.watch_cache import ClusterState", id="snapshot-acts-on-the-cluster"
        ),
        pytest.param(FOLDERS[2], "from shared.kube import api", id="snapshot-talks-to-the-api-server"),
        pytest.param(FOLDERS[0], "from shared.kube.version import read_switches", id="plan-asks-the-api-server"),
        pytest.param(FOLDERS[3], "import shared.kube.informer", id="parallel-watches"),
        pytest.param(FOLDERS[2], "from rescheduler import run", id="snapshot-runs-the-loop"),
        pytest.param(FOLDERS[2], "from rescheduler.parallel.packing import passes", id="snapshot-plans"),
        pytest.param(FOLDERS[3], "from rescheduler.decode.reader import load_snapshot", id="parallel-reads-files"),
        pytest.param(FOLDERS[3], "from rescheduler.cluster.watch_cache import ClusterState", id="parallel-acts"),
    ],
)
def test_a_folder_rule_refuses_a_bad_import(folder: Folder, source: str) -> None:
    names = _imports_of(source, folder.path.replace("/", ".") + ".probe")
    assert _boundary_problems(folder, names) != []


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


ONE_PLACE = {
    "urllib3": "shared/kube/api.py",
    "requests": "shared/kube/api.py",
    "http.client": "shared/kube/api.py",
    "kubernetes": "shared/kube/credentials.py",
}
"""Who may import what reaches the API server: an HTTP client only the one transport, which makes the
connection pools; the ``kubernetes`` package only the credentials it reads (kubeconfig, service account)."""


def _reaches(names: list[str], imported: str) -> bool:
    return any(name == imported or name.startswith(imported + ".") for name in names)


@pytest.mark.parametrize("imported", sorted(ONE_PLACE), ids=sorted(ONE_PLACE))
def test_only_one_module_imports_each_way_to_the_api_server(imported: str) -> None:
    users = sorted(path.relative_to(ROOT).as_posix() for path in MODULES.values() if _reaches(_imports(path), imported))
    assert users in ([], [ONE_PLACE[imported]]), f"{imported} is imported by {users}, not only {ONE_PLACE[imported]}"


def test_the_one_transport_and_the_credentials_are_where_the_rule_says() -> None:
    # Guards the test above against checking modules that moved: both still import what they are the place for.
    assert _reaches(_imports(ROOT / "shared/kube/api.py"), "urllib3")
    assert _reaches(_imports(ROOT / "shared/kube/credentials.py"), "kubernetes")
    assert _reaches(
        _imports_of("def f() -> None:\n    from kubernetes import client\n", "extender.probe"), "kubernetes"
    )
