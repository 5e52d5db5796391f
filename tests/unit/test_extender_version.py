"""spot-extender reads the cluster's release from ``/version`` (extender/version.py), over real HTTP.

A loopback HTTP server stands in for the API server; the kubernetes client is used as the extender uses it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
import yaml

from extender.version import read_switches
from shared.switches import STRICTEST, for_version


class _ApiServer(BaseHTTPRequestHandler):
    answer: tuple[int, bytes] = (200, b"{}")

    def do_GET(self) -> None:
        status, body = self.answer if self.path.rstrip("/") == "/version" else (404, b"{}")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[type[_ApiServer], Path]]:
    handler = type("Handler", (_ApiServer,), {})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.server_port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    yield handler, kubeconfig
    server.shutdown()
    server.server_close()


def test_the_version_of_a_1_20_api_server(api: tuple[type[_ApiServer], Path]) -> None:
    handler, kubeconfig = api
    handler.answer = (200, json.dumps({"major": "1", "minor": "20", "gitVersion": "v1.20.2"}).encode())
    switches, said, warning = read_switches(str(kubeconfig))
    assert switches == for_version("v1.20.2") and not warning
    assert said.startswith("API server version v1.20.2: the cluster schedules with the kube-scheduler rules of")


def test_a_managed_clusters_version(api: tuple[type[_ApiServer], Path]) -> None:
    handler, kubeconfig = api
    handler.answer = (200, json.dumps({"major": "1", "minor": "27+", "gitVersion": "v1.27.3-eks-2d98532"}).encode())
    assert read_switches(str(kubeconfig))[0] == for_version("v1.27.3")


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        pytest.param((500, b'{"kind":"Status","code":500}'), "cannot read the API server's version", id="error"),
        pytest.param((200, b'{"gitVersion":"custom"}'), "is not a Kubernetes 1.x version", id="not-a-version"),
    ],
)
def test_an_unusable_version_is_unknown_and_said_so(
    api: tuple[type[_ApiServer], Path], answer: tuple[int, bytes], said: str
) -> None:
    handler, kubeconfig = api
    handler.answer = answer
    switches, text, warning = read_switches(str(kubeconfig))
    assert switches == STRICTEST and warning and said in text


def test_an_unreachable_api_server_is_unknown(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    switches, text, warning = read_switches(str(kubeconfig), timeout=2)
    assert switches == STRICTEST and warning and text.startswith("cannot read the API server's version")
