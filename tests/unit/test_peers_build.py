"""The build of the real peers (``tests/e2e/controlplane/peers.sh``) and its place in ``tests/run.sh``.

The script's reading of a module's go.mod is run on fixture files; ``tests/run.sh`` is run in a scratch copy of the
repository whose tools, builds and Python are stubs that only write down how they were called, so the order of the
builds and the tiers is the script's own.
"""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.support.peers import PEERS_SCRIPT, peer_versions

ROOT = Path(__file__).resolve().parents[2]

# --- peers.sh ---------------------------------------------------------------------------------------------------


def test_the_versions_are_the_scripts_own_lines() -> None:
    versions = peer_versions()
    assert set(versions) == {"DESCHEDULER_VERSION", "KARPENTER_VERSION", "KARPENTER_TOOLCHAIN"}
    assert re.fullmatch(r"v0\.\d+\.\d+", versions["DESCHEDULER_VERSION"])
    assert re.fullmatch(r"v1\.\d+\.\d+", versions["KARPENTER_VERSION"])
    assert re.fullmatch(r"go1\.\d+\.\d+", versions["KARPENTER_TOOLCHAIN"])


def test_only_the_karpenter_build_leaves_the_machines_go() -> None:
    text = PEERS_SCRIPT.read_text()
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    assert "\nexport GOTOOLCHAIN=local " in code
    named = {value.strip('"') for value in re.findall(r"GOTOOLCHAIN=(\S+)", code)}
    assert named == {"local", "${KARPENTER_TOOLCHAIN}"}
    # Each peer is fetched and built at the script's version.
    assert 'go get "sigs.k8s.io/descheduler/cmd/descheduler@${DESCHEDULER_VERSION}"' in text
    assert 'go get "sigs.k8s.io/karpenter/kwok@${KARPENTER_VERSION}"' in text


def directives(gomod: Path) -> subprocess.CompletedProcess[str]:
    """The script's ``main_module_directives`` run on ``gomod``, the script sourced for its functions only."""
    return subprocess.run(
        ["bash", "-c", 'source "$0"; main_module_directives "$1"', str(PEERS_SCRIPT), str(gomod)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={**os.environ, "PEERS_SH_FUNCTIONS_ONLY": "1"},
    )


GOMOD = """module sigs.k8s.io/example

go 1.26.0

godebug default=go1.26

require (
\tk8s.io/api v0.36.0
\tk8s.io/kube-openapi v0.0.0-20260101000000-abcdef012345 // indirect
)

replace k8s.io/kube-openapi => k8s.io/kube-openapi v0.0.0-20260512234627-ef417d054102

replace (
\tgithub.com/a/b => github.com/c/b v1.2.3 // a fork
\tgithub.com/d/e v0.1.0 => github.com/d/e v0.1.1
)
"""


def test_the_replace_lines_and_the_godebug_line_of_a_go_mod_are_copied(tmp_path: Path) -> None:
    (tmp_path / "go.mod").write_text(GOMOD)
    found = directives(tmp_path / "go.mod")
    assert found.returncode == 0, found.stderr
    assert found.stdout.splitlines() == [
        "godebug default=go1.26",
        "replace k8s.io/kube-openapi => k8s.io/kube-openapi v0.0.0-20260512234627-ef417d054102",
        "replace github.com/a/b => github.com/c/b v1.2.3",
        "replace github.com/d/e v0.1.0 => github.com/d/e v0.1.1",
    ]


def test_a_go_mod_without_replace_lines_gives_none(tmp_path: Path) -> None:
    (tmp_path / "go.mod").write_text("module sigs.k8s.io/example\n\ngo 1.26.9\n\nrequire k8s.io/api v0.36.0\n")
    found = directives(tmp_path / "go.mod")
    assert (found.returncode, found.stdout) == (0, "")


def test_a_replace_to_a_local_directory_fails_the_build(tmp_path: Path) -> None:
    (tmp_path / "go.mod").write_text(GOMOD + "\nreplace k8s.io/api => ./staging/src/k8s.io/api\n")
    found = directives(tmp_path / "go.mod")
    assert found.returncode != 0
    assert "local replace" in found.stderr and "./staging/src/k8s.io/api" in found.stderr


# --- the marker -------------------------------------------------------------------------------------------------


def test_the_peers_marker_is_registered() -> None:
    pytest_ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "--strict-markers" in pytest_ini["addopts"]
    assert any(m.split(":")[0] == "peers" for m in pytest_ini["markers"])


# --- tests/run.sh, in a scratch copy with stubs -----------------------------------------------------------------

STUB = '#!/usr/bin/env bash\necho "{name} $* K8S=${{SPOTSHIFT_K8S_VERSION:-}}" >>"$RUN_SH_LOG"\n'
# The Python stub: unless the peers' build is made to fail, the e2e tier's run waits (up to 20 s) until the peers'
# tests have started, so it passes only if tests/run.sh runs them beside it; the peers' tests exit $PEERS_TESTS_RC.
PYTHON_STUB = """#!/usr/bin/env bash
echo "python $* K8S=${SPOTSHIFT_K8S_VERSION:-}" >>"$RUN_SH_LOG"
case "$*" in
  *"-m not peers"*)
    [ -z "${PEERS_RC:-}" ] || exit 0
    for _ in $(seq 200); do
      grep -q -- "-m peers" "$RUN_SH_LOG" && exit 0
      sleep 0.1
    done
    echo "the peers' tests did not start beside the e2e tier" >&2
    exit 1 ;;
  *"-m peers"*)
    echo "the peers' tests output"
    exit "${PEERS_TESTS_RC:-0}" ;;
esac
"""
PEERS_STUB = """#!/usr/bin/env bash
echo "peers.sh start" >>"$RUN_SH_LOG"
echo "the peers' build log"
echo "peers.sh end" >>"$RUN_SH_LOG"
exit "${PEERS_RC:-0}"
"""


def stub(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)


@pytest.fixture
def scratch(tmp_path: Path) -> Path:
    """A repository holding tests/run.sh and stubs of everything it calls."""
    repo = tmp_path / "repo"
    stub(repo / "tests" / "run.sh", (ROOT / "tests" / "run.sh").read_text())
    venv = tmp_path / "venv"
    stub(repo / "tools" / "venv.sh", f"#!/usr/bin/env bash\necho {venv}\n")
    for name in ("kustomize", "helm", "promtool"):
        stub(repo / "tools" / f"{name}.sh", STUB.format(name=name))
    stub(venv / "bin" / "python", PYTHON_STUB)
    stub(venv / "bin" / "chromium", "#!/bin/sh\n")
    controlplane = repo / "tests" / "e2e" / "controlplane"
    stub(controlplane / "build.sh", STUB.format(name="build.sh"))
    stub(controlplane / "peers.sh", PEERS_STUB)
    stub(controlplane / "releases.env", 'SPOTSHIFT_K8S_DEFAULT=1.37.2\nSPOTSHIFT_K8S_COMPAT="1.36.3 1.35.4"\n')
    return repo


def run_sh(repo: Path, *argv: str, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Runs the scratch tests/run.sh; returns the run and the stubs' calls in order."""
    log = repo / "calls.log"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SPOTSHIFT_")}
    run = subprocess.run(
        ["bash", str(repo / "tests" / "run.sh"), *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**clean, "RUN_SH_LOG": str(log), "SPOTSHIFT_SKIP_IMAGE": "1", **env},
    )
    return run, log.read_text().splitlines() if log.exists() else []


def index(calls: list[str], pattern: str) -> int:
    matching = [i for i, call in enumerate(calls) if re.fullmatch(pattern, call)]
    assert len(matching) == 1, f"{pattern!r} matches {len(matching)} calls of {calls}"
    return matching[0]


E2E = r"python -m pytest tests/e2e -q -p no:randomly -m not peers K8S=1\.37\.2"
PEERS_TESTS = (
    r"python -m pytest tests/e2e -q -p no:randomly -p no:cacheprovider --basetemp=\S+/peers-tmp -m peers K8S=1\.37\.2"
)


def test_the_peers_build_before_the_compatibility_builds_and_their_tests_beside_the_e2e_tier(scratch: Path) -> None:
    run, calls = run_sh(scratch)
    assert run.returncode == 0, run.stderr
    default_build = index(calls, r"build\.sh  K8S=1\.37\.2")
    peers_start, peers_end = index(calls, "peers.sh start"), index(calls, "peers.sh end")
    compat_builds = [index(calls, rf"build\.sh  K8S={re.escape(r)}") for r in ("1.36.3", "1.35.4")]
    assert default_build < peers_start < peers_end < compat_builds[0] < compat_builds[1]
    e2e, peers_tests = index(calls, E2E), index(calls, PEERS_TESTS)
    compat_runs = [index(calls, rf"python .* -m compat K8S={re.escape(r)}") for r in ("1.36.3", "1.35.4")]
    assert e2e < compat_runs[0] < compat_runs[1]
    assert peers_end < peers_tests
    # The peers' output is printed once the other tiers are over.
    assert "the peers' build log" in run.stdout and "the peers' tests output" in run.stdout
    assert run.stdout.index("compatibility run on Kubernetes 1.35.4") < run.stdout.index("the peers' tests output")


def test_a_single_release_still_builds_the_peers_and_runs_their_tests(scratch: Path) -> None:
    run, calls = run_sh(scratch, SPOTSHIFT_K8S_VERSION="1.37.2")
    assert run.returncode == 0, run.stderr
    assert index(calls, r"build\.sh  K8S=1\.37\.2") < index(calls, "peers.sh start") < index(calls, PEERS_TESTS)
    assert index(calls, E2E) < index(calls, PEERS_TESTS)
    assert not [call for call in calls if "compat" in call or re.fullmatch(r"build\.sh  K8S=1\.3[56]\..*", call)]


def test_a_failed_peers_build_fails_the_run_loudly_and_their_tests_do_not_run(scratch: Path) -> None:
    run, calls = run_sh(scratch, SPOTSHIFT_K8S_VERSION="1.37.2", PEERS_RC="3")
    assert run.returncode != 0
    assert "the build of the peers (the descheduler, Karpenter) failed" in run.stdout
    assert "the peers' build or tests failed" in run.stderr
    assert "the peers' build log" in run.stdout
    assert not [call for call in calls if "-m peers" in call]


def test_a_failed_peers_test_fails_the_run_after_the_other_tiers(scratch: Path) -> None:
    run, calls = run_sh(scratch, PEERS_TESTS_RC="1")
    assert run.returncode != 0
    assert "the peers' build or tests failed" in run.stderr and "the peers' tests output" in run.stdout
    index(calls, E2E)
    index(calls, PEERS_TESTS)
    assert [call for call in calls if "-m compat" in call]
