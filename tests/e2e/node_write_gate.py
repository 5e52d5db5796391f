"""A gate on one node's writes for the fault tier: a validating admission webhook that refuses them with 503.

Why: a test of drains that must not wait on each other needs one drain's node write to keep failing for as long
as the test says, so that the progress of the others is seen while it fails, not left to how the backoffs of the
moment fall. While :attr:`NodeWriteGate.refusing` is set, every update of the labelled node (``PATCH
/api/v1/nodes/<name>``; the kubelet's ``nodes/status`` is not matched) is answered 503, as an API server that is
not ready answers; each refusal's time is kept in :attr:`NodeWriteGate.refused`. Reads are never gated.
``failurePolicy: Ignore`` lets writes through should the gate be gone.
"""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.e2e.controlplane import ApiError, ControlPlane, issue_cert, make_ca, wait_for

LABEL = "e2e.spotshift.io/write-gate"
PROBE = "e2e.spotshift.io/write-gate-probe"
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Quiet: a killed API server drops its connections to the gate, by design."""


class NodeWriteGate:
    def __init__(self, plane: ControlPlane, node: str, directory: Path) -> None:
        self.plane = plane
        self.node = node
        self.token = uuid.uuid4().hex[:8]
        self.name = f"node-write-gate-{self.token}"
        self.refusing = threading.Event()
        self.probed = threading.Event()
        self.refused: list[float] = []
        """``time.time()`` of each refusal."""
        ca = make_ca("node-write-gate-ca")
        cert, key = issue_cert(ca, "node-write-gate", hosts=("127.0.0.1",)).write(directory, "node-write-gate")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.server = _Server(("127.0.0.1", 0), self._handler())
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.ca_bundle = base64.b64encode(ca.cert_pem).decode()
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _answer(self, request: dict[str, Any]) -> dict[str, Any]:
        annotations = ((request.get("object") or {}).get("metadata") or {}).get("annotations") or {}
        if PROBE in annotations:
            self.probed.set()
        if not self.refusing.is_set():
            return {"uid": request.get("uid", ""), "allowed": True}
        self.refused.append(time.time())
        status = {"code": 503, "reason": "ServiceUnavailable", "message": "node writes refused by the e2e gate"}
        return {"uid": request.get("uid", ""), "allowed": False, "status": status}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                review = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                answer = gate._answer(review.get("request") or {})
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

    def start(self) -> NodeWriteGate:
        """Serve, label the node, register the webhook, and wait until the API server calls it."""
        self.thread.start()
        api = self.plane.api
        path = f"/api/v1/nodes/{self.node}"
        api.patch(path, {"metadata": {"labels": {LABEL: self.token}}})
        port = self.server.server_address[1]
        webhook = {
            "name": "node-write-gate.e2e.spotshift.io",
            "clientConfig": {"url": f"https://127.0.0.1:{port}/gate", "caBundle": self.ca_bundle},
            "rules": [
                {
                    "operations": ["UPDATE"],
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "resources": ["nodes"],
                    "scope": "Cluster",
                }
            ],
            "objectSelector": {"matchLabels": {LABEL: self.token}},
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "timeoutSeconds": 5,
            "admissionReviewVersions": ["v1"],
        }
        body = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": self.name},
            "webhooks": [webhook],
        }
        api.post(WEBHOOKS, body)
        probes = iter(range(1_000_000))

        def called() -> bool:
            # The configuration takes effect asynchronously: write the node until the gate sees a write.
            with contextlib.suppress(ApiError):
                api.patch(path, {"metadata": {"annotations": {PROBE: str(next(probes))}}})
            return self.probed.is_set()

        wait_for(called, timeout=60, what="the API server to call the node write gate", interval=0.5)
        return self

    def close(self) -> None:
        self.refusing.clear()
        try:
            self.plane.api.delete_if_exists(f"{WEBHOOKS}/{self.name}")
        finally:
            self.server.shutdown()
            self.server.server_close()
