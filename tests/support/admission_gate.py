"""Admission webhooks the fault tier puts in the API server's way, to turn a moment into an observed state.

:class:`AdmissionGate` is the common part: an HTTPS server on 127.0.0.1 with a CA of its own, whose answer to each
AdmissionReview comes from :meth:`AdmissionGate.answer`; its webhook configuration is registered by
:meth:`AdmissionGate.start`, which returns once the API server has called the gate (a configuration takes effect
asynchronously), and deleted by :meth:`AdmissionGate.close`. ``failurePolicy: Ignore`` lets requests through should
a gate be gone. Two gates:

* :class:`EvictionGate` holds evictions in one namespace until opened. Why: a fault must sometimes hit a drain
  while its eviction request is in flight, the window where a retry (or its absence) decides the outcome. Waiting
  for that moment by polling would be timing luck; holding the eviction in admission makes it an observed state:
  :attr:`EvictionGate.held` is set while the API server waits on the gate, which answers "allowed" (no patch) once
  :attr:`EvictionGate.open` is set.
* :class:`NodeWriteGate` refuses one node's writes with 503. Why: a test of drains that must not wait on each other
  needs one drain's node write to keep failing for as long as the test says, so that the progress of the others
  is seen while it fails, not left to how the backoffs of the moment fall. While :attr:`NodeWriteGate.refusing` is
  set, every update of the labelled node (``PATCH /api/v1/nodes/<name>``; the kubelet's ``nodes/status`` is not
  matched) is answered 503, as an API server that is not ready answers; each refusal's time is kept in
  :attr:`NodeWriteGate.refused`. Reads are never gated.
"""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.support.controlplane import ApiError, ControlPlane, issue_cert, make_ca, wait_for

CONFIGURATIONS = "/apis/admissionregistration.k8s.io/v1"
HOLD_SECONDS = 28.0
"""Longest hold of an eviction: under the API server's 30 s webhook timeout."""
EVICTION_PROBE = "eviction-gate-probe"
WRITE_LABEL = "e2e.spotshift.io/write-gate"
WRITE_PROBE = "e2e.spotshift.io/write-gate-probe"


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet: a killed API server drops its connections to the gate, by design."""


class AdmissionGate:
    """An admission webhook served on 127.0.0.1; ``kind`` is ``mutating`` or ``validating``."""

    kind = "validating"

    def __init__(self, plane: ControlPlane, name: str, directory: Path) -> None:
        self.plane = plane
        self.name = name
        self.probed = threading.Event()
        ca = make_ca(f"{name}-ca")
        cert, key = issue_cert(ca, name, hosts=("127.0.0.1",)).write(directory, name)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server = _Server(("127.0.0.1", 0), self._handler())
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.ca_bundle = base64.b64encode(ca.cert_pem).decode()
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def path(self) -> str:
        return f"{CONFIGURATIONS}/{self.kind}webhookconfigurations"

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        """The ``response`` of an AdmissionReview for ``request`` (it carries the ``uid``)."""
        raise NotImplementedError

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                answer = gate.answer(review.get("request") or {})
                body = json.dumps(
                    {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": answer}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    def register(self, webhook: dict[str, Any], probe: Callable[[], None]) -> None:
        """Serve, register ``webhook`` (its client is this server), and call ``probe`` until the gate has seen it."""
        self.thread.start()
        port = self.server.server_address[1]
        hook = {
            "clientConfig": {"url": f"https://127.0.0.1:{port}/gate", "caBundle": self.ca_bundle},
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            **webhook,
        }
        kind = f"{self.kind.capitalize()}WebhookConfiguration"
        self.plane.api.post(
            self.path,
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": kind,
                "metadata": {"name": self.name},
                "webhooks": [hook],
            },
        )

        def called() -> bool:
            with contextlib.suppress(ApiError):
                probe()
            return self.probed.is_set()

        wait_for(called, timeout=60, what=f"the API server to call {self.name}", interval=0.5)

    def close(self) -> None:
        try:
            self.plane.api.delete_if_exists(f"{self.path}/{self.name}")
        finally:
            self.server.shutdown()
            self.server.server_close()


class EvictionGate(AdmissionGate):
    kind = "mutating"

    def __init__(self, plane: ControlPlane, namespace: str, directory: Path) -> None:
        super().__init__(plane, f"eviction-gate-{namespace}", directory)
        self.ns = namespace
        self.open = threading.Event()
        self.held = threading.Event()
        self.seen: list[str] = []

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        name = request.get("name") or ""
        if name == EVICTION_PROBE:
            self.probed.set()
        else:
            self.seen.append(name)
            if not self.open.is_set():
                self.held.set()
                self.open.wait(HOLD_SECONDS)
        return {"uid": request.get("uid", ""), "allowed": True}

    def start(self) -> EvictionGate:
        """Serve, register the webhook for this namespace, and wait until the API server calls it."""
        api = self.plane.api
        api.patch(f"/api/v1/namespaces/{self.ns}", {"metadata": {"labels": {"e2e.spotshift.io/eviction-gate": "on"}}})
        rule = {
            "operations": ["CREATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods/eviction"],
            "scope": "Namespaced",
        }
        webhook = {
            "name": "eviction-gate.e2e.spotshift.io",
            "rules": [rule],
            "namespaceSelector": {"matchLabels": {"e2e.spotshift.io/eviction-gate": "on"}},
            "timeoutSeconds": 30,
            "reinvocationPolicy": "Never",
        }
        # Evict a pod that does not exist until the gate sees it.
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": EVICTION_PROBE}}
        self.register(webhook, lambda: api.post(f"/api/v1/namespaces/{self.ns}/pods/{EVICTION_PROBE}/eviction", body))
        return self

    def close(self) -> None:
        self.open.set()
        super().close()


class NodeWriteGate(AdmissionGate):
    def __init__(self, plane: ControlPlane, node: str, directory: Path) -> None:
        self.token = uuid.uuid4().hex[:8]
        super().__init__(plane, f"node-write-gate-{self.token}", directory)
        self.node = node
        self.refusing = threading.Event()
        self.refused: list[float] = []
        """``time.time()`` of each refusal."""

    def answer(self, request: dict[str, Any]) -> dict[str, Any]:
        annotations = ((request.get("object") or {}).get("metadata") or {}).get("annotations") or {}
        if WRITE_PROBE in annotations:
            self.probed.set()
        if not self.refusing.is_set():
            return {"uid": request.get("uid", ""), "allowed": True}
        self.refused.append(time.time())
        status = {"code": 503, "reason": "ServiceUnavailable", "message": "node writes refused by the e2e gate"}
        return {"uid": request.get("uid", ""), "allowed": False, "status": status}

    def start(self) -> NodeWriteGate:
        """Serve, label the node, register the webhook, and wait until the API server calls it."""
        api = self.plane.api
        path = f"/api/v1/nodes/{self.node}"
        api.patch(path, {"metadata": {"labels": {WRITE_LABEL: self.token}}})
        rule = {"operations": ["UPDATE"], "apiGroups": [""], "apiVersions": ["v1"], "resources": ["nodes"]}
        webhook = {
            "name": "node-write-gate.e2e.spotshift.io",
            "rules": [{**rule, "scope": "Cluster"}],
            "objectSelector": {"matchLabels": {WRITE_LABEL: self.token}},
            "timeoutSeconds": 5,
        }
        probes = iter(range(1_000_000))
        # Write the node until the gate sees a write.
        self.register(webhook, lambda: api.patch(path, {"metadata": {"annotations": {WRITE_PROBE: str(next(probes))}}}))
        return self

    def close(self) -> None:
        self.refusing.clear()
        super().close()
