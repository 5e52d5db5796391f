"""Fixtures of the e2e tier: one real control plane per test session (see tests/e2e/README.md).

- `control_plane` (session): a started `ControlPlane` with `.kubeconfig`, `.ca_path`, `.server`, `.api` (raw JSON
  client), `.api_client()` (kubernetes client), `.create_node(...)`, `.restart_scheduler(config)`, `.run_dir`.
- `namespace` (function): a fresh namespace whose `default` ServiceAccount is ready; deleted afterwards.
- `make_node` (function): creates nodes with unique names (labels, taints, allocatable); deletes them afterwards.
- `world` (function): the `rescheduler_world.World` of one test (its namespace and nodes), once no pod of the
  cluster is unschedulable; a test marked `clear_workloads` has its Deployments and pods deleted (and waited for)
  before its nodes go.
- `budgets` (function): a `BudgetWatcher` of the test's namespace; the test fails if a budget fell below its minimum.
- `start` (function): `start(config, *flags, kubeconfig=None, name="r")` runs `spot-rescheduler run`
  (`rescheduler_world.Rescheduler`); the processes are closed afterwards and their log tails printed.
- `spotshift` (function): spotshift's webhook (for `namespace`) and extender (the `spotshift-scheduler` profile of a
  restarted kube-scheduler) with the churn replay's configuration (`tests.support.real_replay.spotshift_front`);
  yields the configuration's path and spotshift's own namespace.
- `runs` (function): a list to append `spot-rescheduler run` processes to; they are closed afterwards and their
  log tails printed.

The binaries come from `bash tests/e2e/controlplane/build.sh`. Without them the fixture fails with that hint;
SPOTSHIFT_SKIP_E2E=1 skips the tier instead. Logs stay in the run dir when a test failed (or with
SPOTSHIFT_E2E_KEEP=1) and their path is printed in the summary and in each failed test's report.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

_HERE = Path(__file__).resolve().parent
_ROOT = _HERE.parents[1]
if str(_ROOT) not in sys.path:  # `pytest` (not `python -m pytest`) under --import-mode=importlib
    sys.path.insert(0, str(_ROOT))

from bench.churnlab import replay  # noqa: E402
from tests.support.controlplane import Binaries, BinariesMissing, ControlPlane, wait_for  # noqa: E402
from tests.support.real_replay import capacity_priority_class as priority_class  # noqa: E402
from tests.support.real_replay import spotshift_front  # noqa: E402
from tests.support.rescheduler_world import (  # noqa: E402
    BudgetWatcher,
    Rescheduler,
    World,
    clear_workloads,
    unschedulable_names,
)

_PLANE = pytest.StashKey[ControlPlane]()
_SUMMARY = pytest.StashKey[list[str]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("spotshift e2e")
    group.addoption(
        "--differential-cases",
        type=int,
        default=0,
        help="cases of test_scheduler_differential_e2e.py (default: 500 on the default release, 200 on the others)",
    )
    group.addoption("--differential-seed", type=int, default=0, help="its generator's seed (default: 1)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "e2e: end-to-end test against a real Kubernetes control plane (tests/e2e)")
    config.addinivalue_line(
        "markers", "clear_workloads: the world fixture deletes the test's Deployments and pods before its nodes"
    )
    config.addinivalue_line(
        "markers", "compat: also run on the oldest release the project supports (tests/run.sh's compatibility run)"
    )
    config.stash[_SUMMARY] = []
    # The files share control planes in a set order: pytest-randomly, when installed, leaves the order as collected
    # (tests/run.sh passes -p no:randomly as well; this covers a direct `python -m pytest tests/e2e/...`).
    config.option.randomly_reorganize = False


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.e2e)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    report = yield
    plane = item.config.stash.get(_PLANE, None)
    if report.failed and plane is not None:
        report.sections.append(("spotshift e2e", f"control plane logs: {plane.logs_dir}"))
    return report


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for line in terminalreporter.config.stash.get(_SUMMARY, []):
        terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def control_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    if os.environ.get("SPOTSHIFT_SKIP_E2E") == "1":
        pytest.skip("SPOTSHIFT_SKIP_E2E=1: the e2e tier is skipped")
    try:
        binaries = Binaries.locate()
    except BinariesMissing as error:
        pytest.fail(str(error), pytrace=False)
    summary = request.config.stash[_SUMMARY]
    plane = ControlPlane(binaries)
    try:
        plane.start()
    except Exception:
        summary.append(f"spotshift e2e: control plane failed to start; logs kept in {plane.logs_dir}")
        raise
    request.config.stash[_PLANE] = plane
    summary.append(f"spotshift e2e: control plane started in {plane.start_seconds:.1f}s (run dir {plane.run_dir})")
    yield plane
    del request.config.stash[_PLANE]
    plane.stop()
    if request.session.testsfailed or os.environ.get("SPOTSHIFT_E2E_KEEP") == "1":
        summary.append(f"spotshift e2e: control plane logs kept in {plane.logs_dir}")
    else:
        plane.remove_run_dir()


def _unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def namespace(control_plane: ControlPlane) -> Iterator[str]:
    name = _unique("e2e")
    control_plane.create_namespace(name)
    yield name
    control_plane.delete_namespace(name)


@pytest.fixture
def make_node(control_plane: ControlPlane) -> Iterator[Callable[..., dict[str, Any]]]:
    """`make_node(labels=..., taints=..., allocatable=..., ready=True, prefix="node")` -> the Node dict."""
    created: list[str] = []

    def make(prefix: str = "node", **kwargs: Any) -> dict[str, Any]:
        name = _unique(prefix)
        created.append(name)
        return control_plane.create_node(name, **kwargs)

    yield make
    control_plane.delete_nodes(created)


def _close_and_show(processes: list[Rescheduler]) -> None:
    for r in processes:
        r.close()
    for r in processes:
        print(f"--- rescheduler {r.name} log tail ---\n{r.tail(15)}")


@pytest.fixture
def runs() -> Iterator[list[Rescheduler]]:
    started: list[Rescheduler] = []
    yield started
    _close_and_show(started)


@pytest.fixture
def world(
    request: pytest.FixtureRequest,
    control_plane: ControlPlane,
    namespace: str,
    make_node: Callable[..., dict[str, Any]],
    tmp_path: Path,
) -> Iterator[World]:
    # A pending pod is planned first and may hold a node it could use: let earlier tests' leftovers go first.
    wait_for(lambda: not unschedulable_names(control_plane), timeout=60, what="no unschedulable pods in the cluster")
    yield World(control_plane, namespace, make_node, tmp_path)
    if request.node.get_closest_marker("clear_workloads") is not None:
        clear_workloads(control_plane, namespace)


@pytest.fixture
def budgets(control_plane: ControlPlane, namespace: str) -> Iterator[BudgetWatcher]:
    watcher = BudgetWatcher(control_plane, namespace)
    watcher.start()
    yield watcher
    violations = watcher.close()
    assert violations == [], f"a PodDisruptionBudget fell below its minimum: {violations[:5]}"


@pytest.fixture
def start(control_plane: ControlPlane, tmp_path: Path) -> Iterator[Callable[..., Rescheduler]]:
    started: list[Rescheduler] = []

    def run(config: Path, *extra: str, kubeconfig: Path | None = None, name: str = "r") -> Rescheduler:
        log = tmp_path / f"rescheduler-{name}-{len(started)}.log"
        r = Rescheduler(kubeconfig or control_plane.kubeconfig, config, log, *extra, name=name)
        started.append(r)
        return r

    yield run
    _close_and_show(started)


@pytest.fixture
def spotshift(control_plane: ControlPlane, namespace: str, tmp_path: Path) -> Iterator[tuple[Path, str]]:
    with spotshift_front(control_plane, namespace, tmp_path, replay.overrides(replay.COMPRESSION)) as front:
        yield front


@pytest.fixture(scope="module")
def capacity_priority_class(control_plane: ControlPlane) -> Iterator[None]:
    """The PriorityClass deploy/base/rescheduler ships, for the tests of one module whose rescheduler asks for spot
    capacity; deleted after them if this fixture made it (cluster-scoped, and the Helm test's release must
    create its own)."""
    with priority_class(control_plane):
        yield
