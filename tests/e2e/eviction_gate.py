"""A gate on evictions for the fault tier: a mutating admission webhook that holds evictions until opened.

Why: a fault must sometimes hit a drain while its eviction request is in flight, the window where a retry (or
its absence) decides the outcome. Waiting for that moment by polling would be timing luck; holding the
eviction in admission makes it an observed state: :attr:`EvictionGate.held` is set while the API server
waits on the gate, which answers "allowed" (no patch) once :attr:`EvictionGate.open` is set. It only sees
evictions in the namespace it is registered for (a namespace label), and ``failurePolicy: Ignore`` lets
evictions through should the gate be gone.
"""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.e2e.controlplane import ApiError, ControlPlane, issue_cert, make_ca, wait_for


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet: a killed API server drops the connection of the eviction being held, by design."""


HOLD_SECONDS = 28.0
"""Longest hold: under the API server's 30 s webhook timeout."""
PROBE = "eviction-gate-probe"


class EvictionGate:
    def __init__(self, plane: ControlPlane, namespace: str, directory: Path) -> None:
        self.plane = plane
        self.ns = namespace
        self.name = f"eviction-gate-{namespace}"
        self.open = threading.Event()
        self.held = threading.Event()
        self.probed = threading.Event()
        self.seen: list[str] = []
        ca = make_ca("eviction-gate-ca")
        cert, key = issue_cert(ca, "eviction-gate", hosts=("127.0.0.1",)).write(directory, "eviction-gate")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server = _Server(("127.0.0.1", 0), self._handler())
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.ca_bundle = base64.b64encode(ca.cert_pem).decode()
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                request = review.get("request") or {}
                name = request.get("name") or ""
                if name == PROBE:
                    gate.probed.set()
                else:
                    gate.seen.append(name)
                    if not gate.open.is_set():
                        gate.held.set()
                        gate.open.wait(HOLD_SECONDS)
                body = json.dumps(
                    {
                        "apiVersion": "admission.k8s.io/v1",
                        "kind": "AdmissionReview",
                        "response": {"uid": request.get("uid", ""), "allowed": True},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    def start(self) -> EvictionGate:
        """Serve, register the webhook for this namespace, and wait until the API server calls it."""
        self.thread.start()
        api = self.plane.api
        api.patch(f"/api/v1/namespaces/{self.ns}", {"metadata": {"labels": {"e2e.spotshift.io/eviction-gate": "on"}}})
        port = self.server.server_address[1]
        api.post(
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": self.name},
                "webhooks": [
                    {
                        "name": "eviction-gate.e2e.spotshift.io",
                        "clientConfig": {"url": f"https://127.0.0.1:{port}/gate", "caBundle": self.ca_bundle},
                        "rules": [
                            {
                                "operations": ["CREATE"],
                                "apiGroups": [""],
                                "apiVersions": ["v1"],
                                "resources": ["pods/eviction"],
                                "scope": "Namespaced",
                            }
                        ],
                        "namespaceSelector": {"matchLabels": {"e2e.spotshift.io/eviction-gate": "on"}},
                        "failurePolicy": "Ignore",
                        "sideEffects": "None",
                        "timeoutSeconds": 30,
                        "admissionReviewVersions": ["v1"],
                        "reinvocationPolicy": "Never",
                    }
                ],
            },
        )

        def called() -> bool:
            # The configuration takes effect asynchronously: evict a pod that does not exist until the gate sees it.
            body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": PROBE}}
            with contextlib.suppress(ApiError):
                api.post(f"/api/v1/namespaces/{self.ns}/pods/{PROBE}/eviction", body)
            return self.probed.is_set()

        wait_for(called, timeout=60, what="the API server to call the eviction gate", interval=0.5)
        return self

    def close(self) -> None:
        self.open.set()
        try:
            self.plane.api.delete_if_exists(
                f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{self.name}"
            )
        finally:
            self.server.shutdown()
            self.server.server_close()
