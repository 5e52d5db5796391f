"""Fixtures of the e2e tier: one real control plane per test session (see tests/e2e/README.md).

- `control_plane` (session): a started `ControlPlane` with `.kubeconfig`, `.ca_path`, `.server`, `.api` (raw JSON
  client), `.api_client()` (kubernetes client), `.create_node(...)`, `.restart_scheduler(config)`, `.run_dir`.
- `namespace` (function): a fresh namespace whose `default` ServiceAccount is ready; deleted afterwards.
- `make_node` (function): creates nodes with unique names (labels, taints, allocatable); deletes them afterwards.
- `runs` (function): a list to append `spot-rescheduler run` processes to (`rescheduler_world.Rescheduler`); they
  are closed afterwards and their log tails printed.

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
import yaml

_HERE = Path(__file__).resolve().parent
_ROOT = _HERE.parents[1]
if str(_ROOT) not in sys.path:  # `pytest` (not `python -m pytest`) under --import-mode=importlib
    sys.path.insert(0, str(_ROOT))

from tests.support.controlplane import ApiError, Binaries, BinariesMissing, ControlPlane  # noqa: E402

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


@pytest.fixture
def runs() -> Iterator[list[Any]]:
    started: list[Any] = []
    yield started
    for r in started:
        r.close()
    for r in started:
        print(f"--- rescheduler {r.name} log tail ---\n{r.tail(15)}")


@pytest.fixture(scope="module")
def capacity_priority_class(control_plane: ControlPlane) -> Iterator[None]:
    """The PriorityClass deploy/base/rescheduler ships, for the tests of one module whose rescheduler asks for spot
    capacity; deleted after them if this fixture made it (cluster-scoped, and the Helm test's release must
    create its own)."""
    body = yaml.safe_load((_ROOT / "deploy/base/rescheduler/capacity-priorityclass.yaml").read_text())
    path = "/apis/scheduling.k8s.io/v1/priorityclasses"
    made = True
    try:
        control_plane.api.post(path, body)
    except ApiError as error:
        if error.status != 409:
            raise
        made = False
    yield
    if made:
        control_plane.api.delete_if_exists(f"{path}/{body['metadata']['name']}")
