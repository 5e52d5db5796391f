"""spot-extender reads the cluster's release from ``/version`` (extender/release.py over shared/kube/version.py).

The project's own fake API server (:mod:`tests.support.fake_api`) stands behind the transport boundary, as it does
for the rescheduler; the real HTTP transport is used once, against a port where nothing listens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from extender.release import read_release, read_release_over, release_sentence
from shared.kube.api import Kube, Unavailable
from shared.switches import STRICTEST, for_version
from tests.support.fake_api import FakeApiServer


def said(kube: Kube) -> tuple[Any, str, bool]:
    found = read_release_over(kube)
    return found.switches, release_sentence(found), found.warning


def test_the_version_of_a_1_20_api_server() -> None:
    switches, text, warning = said(Kube(FakeApiServer(git_version="v1.20.2")))
    assert switches == for_version("v1.20.2") and not warning
    assert text.startswith("API server version v1.20.2: the cluster schedules with the kube-scheduler rules of")


def test_a_managed_clusters_version() -> None:
    assert said(Kube(FakeApiServer(git_version="v1.27.3-eks-2d98532")))[0] == for_version("v1.27.3")


def _failing(status: int) -> FakeApiServer:
    server = FakeApiServer()
    server.fail("GET", r"^/version$", status)
    return server


class _Answers:
    """A transport whose every request gets ``body`` (or raises ``error``)."""

    def __init__(self, body: bytes = b"", error: Exception | None = None) -> None:
        self.body, self.error = body, error

    def request(self, method: str, path: str, **_: Any) -> bytes:
        if self.error is not None:
            raise self.error
        return self.body

    def stream(self, path: str, **_: Any) -> Any:
        raise AssertionError("no watch")


@pytest.mark.parametrize(
    ("kube", "said_text"),
    [
        pytest.param(Kube(_failing(500)), "cannot read the API server's version", id="error"),
        pytest.param(Kube(_failing(403)), "cannot read the API server's version", id="forbidden"),
        pytest.param(Kube(FakeApiServer(git_version="custom")), "is not a Kubernetes 1.x version", id="not-a-version"),
        pytest.param(Kube(_Answers(b"<html>")), "cannot read the API server's version", id="not-json"),
        pytest.param(
            Kube(_Answers(error=Unavailable("ConnectionRefusedError", method="GET", path="/version"))),
            "cannot read the API server's version",
            id="no-answer",
        ),
        pytest.param(
            Kube(_Answers(error=RuntimeError("anything"))), "cannot read the API server's version", id="any-failure"
        ),
    ],
)
def test_an_unusable_version_is_unknown_and_said_so(kube: Kube, said_text: str) -> None:
    switches, text, warning = said(kube)
    assert switches == STRICTEST and warning and said_text in text
    assert text.endswith("the scheduler's release is unknown")


def _kubeconfig(tmp_path: Path, server: str) -> Path:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return kubeconfig


def test_an_unreachable_api_server_is_unknown(tmp_path: Path) -> None:
    found = read_release(str(_kubeconfig(tmp_path, "http://127.0.0.1:9")), timeout=2)
    assert found.switches == STRICTEST and found.warning
    assert release_sentence(found).startswith("cannot read the API server's version (GET /version: no answer")


def test_credentials_that_cannot_be_read_are_an_unknown_version(tmp_path: Path) -> None:
    found = read_release(str(tmp_path / "no-such-kubeconfig"))
    assert found.switches == STRICTEST and found.warning
    assert release_sentence(found).startswith("cannot read the API server's version (cannot load the kubeconfig")
