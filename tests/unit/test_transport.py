"""The one transport (shared/kube/api.py) over real loopback HTTP: each component names itself, and a connection
pool never crosses a fork (the extender's gunicorn workers are forked from the master)."""

from __future__ import annotations

import ast
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from extender import USER_AGENT as EXTENDER_AGENT
from extender.cache import worker_kube
from rescheduler.cluster import USER_AGENT as RESCHEDULER_AGENT
from shared.kube.api import Kube, Unavailable, error_for, is_transient, transport_from_kubeconfig

ROOT = Path(__file__).resolve().parents[2]


class _Version(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: connections stay in the client's pool
    agents: list[str]

    def do_GET(self) -> None:
        self.agents.append(self.headers.get("User-Agent", ""))
        body = b'{"gitVersion":"v1.30.2"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[list[str], str]]:
    agents: list[str] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (_Version,), {"agents": agents}))
    server.daemon_threads = True
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
    yield agents, str(kubeconfig)
    server.shutdown()
    server.server_close()


def test_each_component_names_itself_to_the_api_server(api: tuple[list[str], str]) -> None:
    agents, kubeconfig = api
    assert worker_kube(kubeconfig).get("/version") == {"gitVersion": "v1.30.2"}
    Kube(transport_from_kubeconfig(kubeconfig, user_agent=RESCHEDULER_AGENT)).get("/version")
    assert agents == ["spotshift-extender", "spotshift-rescheduler"]
    assert EXTENDER_AGENT != RESCHEDULER_AGENT


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_makes_its_own_pool_and_leaves_the_parents_alone(api: tuple[list[str], str]) -> None:
    agents, kubeconfig = api
    transport = transport_from_kubeconfig(kubeconfig, user_agent=EXTENDER_AGENT)
    kube = Kube(transport)
    kube.get("/version")  # the parent's pool now holds a kept-alive connection
    parents = transport.pool()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report and leave without running any of pytest's cleanup
        try:
            ok = transport.pool() is not parents and kube.get("/version") == {"gitVersion": "v1.30.2"}
            transport.close()  # closes the child's pool only
            os.write(write, b"1" if ok and transport.pool() is not parents else b"0")
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    assert answer == b"1", "the child used the parent's pool"
    assert transport.pool() is parents, "the parent keeps its own"
    assert kube.get("/version") == {"gitVersion": "v1.30.2"}, "and its connections still work"
    assert len(agents) == 3


def _calls_of(function: ast.AST, name: str) -> list[ast.Call]:
    return [
        n for n in ast.walk(function) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == name
    ]


def test_the_extender_builds_its_caches_in_the_worker_after_the_fork() -> None:
    # gunicorn calls load_app in each worker after forking it; build_cache makes the worker's transport. Anywhere
    # else in main (the master, before the fork) the pool would be made once and cross into every worker.
    tree = ast.parse((ROOT / "extender/cli.py").read_text())
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    load_app = next(n for n in ast.walk(main) if isinstance(n, ast.FunctionDef) and n.name == "load_app")
    assert len(_calls_of(load_app, "build_cache")) == 1
    assert len(_calls_of(tree, "build_cache")) == 1, "build_cache is called from load_app only"


@pytest.mark.parametrize(
    ("status", "message", "transient"),
    [
        pytest.param(0, "connection refused", True, id="no-answer"),
        pytest.param(503, "", True, id="5xx"),
        pytest.param(429, "", True, id="priority-and-fairness"),
        pytest.param(
            403,
            'nodes "n" is forbidden: not yet ready to handle request',
            True,
            id="403-of-admission-not-yet-ready-after-a-restart",
        ),
        pytest.param(403, 'nodes "n" is forbidden: User cannot patch resource', False, id="403-of-rbac"),
        pytest.param(409, "the object has been modified", False, id="conflict"),
        pytest.param(422, "", False, id="invalid"),
    ],
)
def test_which_api_errors_may_go_away_by_themselves(status: int, message: str, transient: bool) -> None:
    error = Unavailable(message) if status == 0 else error_for(status, {"message": message})
    assert is_transient(error) is transient
