"""A thin JSON client for the e2e API server: raw dicts in, raw dicts out.

The e2e tier talks to the API server the way the project's own code does (raw JSON, no model classes), and
it must reach resources the current `kubernetes` Python client no longer models (policy/v1beta1 on 1.20).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import requests

PATCH_TYPES = {
    "merge": "application/merge-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "json": "application/json-patch+json",
}


class ApiError(Exception):
    """A non-2xx answer from the API server; keeps the status code and the decoded Status body."""

    def __init__(self, method: str, path: str, status: int, body: Any) -> None:
        self.method = method
        self.path = path
        self.status = status
        self.body = body
        message = body.get("message") if isinstance(body, dict) else body
        super().__init__(f"{method} {path} -> HTTP {status}: {message}")


class Api:
    """JSON over HTTPS to one API server, with a bearer token and the control plane's own CA.

    `trust_env` is off: these machines set REQUESTS_CA_BUNDLE/SSL_CERT_FILE (which would replace our CA) and
    may set proxy variables, neither of which applies to a loopback control plane.
    """

    def __init__(self, server: str, token: str, ca_path: Path, *, timeout: float = 30.0) -> None:
        self.server = server.rstrip("/")
        self.timeout = timeout
        self.session = requests.Session()
        self.session.trust_env = False
        self.session.verify = str(ca_path)
        self.session.headers["Authorization"] = f"Bearer {token}"
        self.session.headers["Accept"] = "application/json"

    def close(self) -> None:
        self.session.close()

    def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, Any] | None = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> requests.Response:
        """Send one request and return the raw response, whatever its status (for tests of status codes)."""
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if body is not None else {}
        return self.session.request(
            method,
            self.server + path,
            data=data,
            params=params,
            headers=headers,
            timeout=timeout or self.timeout,
        )

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.request(method, path, **kwargs)
        try:
            decoded = response.json() if response.content else None
        except ValueError:
            decoded = response.text
        if not response.ok:
            raise ApiError(method, path, response.status_code, decoded)
        return decoded

    def get(self, path: str, **params: Any) -> Any:
        return self._json("GET", path, params=params or None)

    def post(self, path: str, body: Any, **params: Any) -> Any:
        return self._json("POST", path, body=body, params=params or None)

    def put(self, path: str, body: Any) -> Any:
        return self._json("PUT", path, body=body)

    def patch(self, path: str, body: Any, patch_type: str = "merge") -> Any:
        return self._json("PATCH", path, body=body, content_type=PATCH_TYPES[patch_type])

    def delete(self, path: str, body: Any = None, **params: Any) -> Any:
        return self._json("DELETE", path, body=body, params=params or None)

    def delete_if_exists(self, path: str, body: Any = None, **params: Any) -> bool:
        """DELETE, treating 404 as done; returns whether the object was still there."""
        try:
            self.delete(path, body, **params)
        except ApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    def list(self, path: str, **params: Any) -> Iterator[dict[str, Any]]:
        """Every item of a list, following `continue` tokens."""
        params = {"limit": 500, **params}
        while True:
            page = self.get(path, **params)
            yield from page.get("items") or []
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return
            params["continue"] = token
