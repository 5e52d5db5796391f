"""The one door to the API server of every spotshift process: raw JSON over HTTPS and a small exception hierarchy.

The extender's node and pod caches, its ``spot-certs`` and probe commands, and everything the rescheduler
reads or does reach the API server through this module. Why not the Kubernetes client's API classes: turning
150,000 pods into model objects is far too slow, the client no longer models ``policy/v1beta1`` (all that
Kubernetes 1.20 serves for evictions and PDBs), and its calling conventions change between major versions.
The client is still used for what it does well: reading a kubeconfig or the in-cluster service account (auth
plugins, token refresh, client certificates; :mod:`shared.kube.credentials`). Requests go through one
``urllib3`` pool per :class:`HttpTransport`, bodies are ``orjson``. A pool is not shared across a fork: the
extender's workers each build their own transport after gunicorn forks them.

Everything above this module talks to a :class:`Transport` (two methods: ``request`` and ``stream``), so unit
tests replace the network with a small fake API server of their own and never patch a library.

Errors are mapped once, here, from the status code to a class (kopf's ``errors.py`` idea): callers write
``except TooManyRequests`` or ``except NotFound`` instead of comparing numbers. A connection failure is
:class:`Unavailable` (status 0), so "the API server did not answer" is one more kind of :class:`ApiError`.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar
from urllib.parse import quote, urlencode

import orjson

from shared.kube.credentials import KubeconfigError, load_client_configuration

__all__ = [
    "ApiError",
    "Unavailable",
    "BadRequest",
    "Unauthorized",
    "Forbidden",
    "NotFound",
    "Conflict",
    "Gone",
    "Invalid",
    "TooManyRequests",
    "ServerError",
    "error_for",
    "is_transient",
    "Retry",
    "LineStream",
    "ResponseLines",
    "Transport",
    "Kube",
    "Collection",
    "pod_path",
    "node_path",
    "HttpTransport",
    "KubeconfigError",
    "transport_from_kubeconfig",
    "PATCH_MERGE",
    "PATCH_JSON",
    "PATCH_STRATEGIC",
]

PATCH_MERGE = "application/merge-patch+json"
PATCH_JSON = "application/json-patch+json"
PATCH_STRATEGIC = "application/strategic-merge-patch+json"


# --- errors ---------------------------------------------------------------------------------------------------


class ApiError(Exception):
    """A request the API server refused or did not answer. ``status`` is the HTTP code (0: no answer)."""

    status = 0

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        reason: str = "",
        method: str = "",
        path: str = "",
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status
        self.message = message
        self.reason = reason
        self.method = method
        self.path = path
        self.retry_after = retry_after

    def __str__(self) -> str:
        where = f"{self.method} {self.path}: " if self.method else ""
        code = f"HTTP {self.status}" if self.status else "no answer"
        return f"{where}{code}: {self.message}"


class Unavailable(ApiError):
    """The connection failed or timed out: the API server may be restarting. Worth retrying."""


class BadRequest(ApiError):
    status = 400


class Unauthorized(ApiError):
    status = 401


class Forbidden(ApiError):
    """RBAC said no: the ClusterRole lacks a verb (deploy/ must grant exactly what is used)."""

    status = 403


class NotFound(ApiError):
    status = 404


class Conflict(ApiError):
    """409: a resourceVersion precondition failed, the object exists already, or a UID precondition failed."""

    status = 409


class Gone(ApiError):
    """410: the resourceVersion a watch asked for was compacted away; the caller must list again."""

    status = 410


class Invalid(ApiError):
    status = 422


class TooManyRequests(ApiError):
    """429: for an eviction, a PodDisruptionBudget refuses it now; otherwise API priority and fairness."""

    status = 429


class ServerError(ApiError):
    """5xx. For an eviction, 500 also means "the pod matches more than one PodDisruptionBudget"."""

    status = 500


_BY_STATUS: dict[int, type[ApiError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: Invalid,
    429: TooManyRequests,
}


def error_for(
    status: int,
    body: bytes | Mapping[str, Any] | None,
    *,
    method: str = "",
    path: str = "",
    retry_after: float | None = None,
) -> ApiError:
    """The exception for an HTTP answer: class from the code, message and reason from the ``Status`` body."""
    decoded: Any = body
    if isinstance(body, bytes | bytearray):
        try:
            decoded = orjson.loads(body) if body else None
        except orjson.JSONDecodeError:
            decoded = body.decode("utf-8", "replace").strip()
    message, reason = "", ""
    if isinstance(decoded, Mapping):
        message = str(decoded.get("message") or "")
        reason = str(decoded.get("reason") or "")
        code = decoded.get("code")
        if isinstance(code, int) and code and not status:
            status = code
    elif isinstance(decoded, str):
        message = decoded[:500]
    cls = _BY_STATUS.get(status) or (ServerError if status >= 500 else ApiError)
    return cls(
        message or f"HTTP {status}",
        status=status,
        reason=reason,
        method=method,
        path=path,
        retry_after=retry_after,
    )


NOT_YET_READY = "not yet ready to handle request"
"""The 403 of a starting API server's admission webhooks and policies before their configuration is read
(``k8s.io/apiserver`` ``pkg/admission/plugin/webhook/generic/webhook.go`` ``Dispatch``, and
``pkg/admission/plugin/policy/generic/plugin.go``, at v0.37.2)."""


def is_transient(error: ApiError) -> bool:
    """Whether ``error`` may go away by itself: no answer (connection refused or reset, a timeout), 5xx, 429 (API
    priority and fairness; for an eviction the caller handles 429 itself, as a PodDisruptionBudget's answer), or
    the 403 of an API server whose admission webhooks are not yet ready (:data:`NOT_YET_READY`, right after a
    restart). Everything else (400, 401, 403, 404, 409, 410, 422) is a definite answer: retrying changes nothing.
    """
    if isinstance(error, Forbidden):
        return error.message.endswith(NOT_YET_READY)
    return isinstance(error, Unavailable | ServerError | TooManyRequests)


_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Retry:
    """Retry a call on :func:`is_transient` errors with doubling backoff, for at most ``timeout`` seconds.

    Why: an API server or etcd restart answers for some seconds with refused connections, 500 ("transport is
    closing") or 503, then recovers. A drain, a rollback or a cleanup must ride that out rather than fail
    on the first such answer and leave a node half done. ``Retry-After`` is honoured; ``stop()`` true ends
    the retries early (the last error is raised). ``timeout`` 0 means one attempt.
    """

    timeout: float
    backoff: float = 0.5
    max_backoff: float = 5.0
    wait: Callable[[float], Any] = time.sleep
    clock: Callable[[], float] = time.monotonic

    def call(self, fn: Callable[[], _T], *, stop: Callable[[], bool] = lambda: False) -> _T:
        deadline = self.clock() + self.timeout
        delay = self.backoff
        while True:
            try:
                return fn()
            except ApiError as e:
                left = deadline - self.clock()
                if not is_transient(e) or left <= 0 or stop():
                    raise
                self.wait(min(max(delay, e.retry_after or 0.0), left))
                delay = min(delay * 2, self.max_backoff)


# --- the boundary -----------------------------------------------------------------------------------------------


class LineStream(Protocol):
    """The lines of a streaming response (a watch). ``close()`` may be called from another thread to stop it."""

    def __iter__(self) -> Iterator[bytes]: ...

    def close(self) -> None: ...


class Transport(Protocol):
    """What spotshift needs from HTTP: one request, or a stream of lines. Raises :class:`ApiError`."""

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, Any]] = (),
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> bytes: ...

    def stream(self, path: str, *, query: Sequence[tuple[str, Any]] = (), timeout: float = 300.0) -> LineStream: ...


class Kube:
    """JSON helpers over a :class:`Transport`, plus the two discovery answers the rescheduler's evictions and
    budgets need."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport
        self._lock = threading.Lock()
        self._eviction_version: str | None = None
        self._pdb_version: str | None = None

    # plain verbs
    def get(self, path: str, **query: Any) -> dict[str, Any]:
        return orjson.loads(self.transport.request("GET", path, query=list(query.items())))

    def get_raw(self, path: str, query: Sequence[tuple[str, Any]] = (), *, timeout: float | None = None) -> bytes:
        return self.transport.request("GET", path, query=query, timeout=timeout)

    def post(self, path: str, body: Any, *, query: Sequence[tuple[str, Any]] = ()) -> dict[str, Any]:
        return _decode(self.transport.request("POST", path, query=query, body=body))

    def put(self, path: str, body: Any) -> dict[str, Any]:
        return _decode(self.transport.request("PUT", path, body=body))

    def patch(self, path: str, body: Any, content_type: str = PATCH_MERGE) -> dict[str, Any]:
        return _decode(self.transport.request("PATCH", path, body=body, content_type=content_type))

    def watch(self, path: str, query: Sequence[tuple[str, Any]], timeout: float) -> LineStream:
        return self.transport.stream(path, query=query, timeout=timeout)

    def delete(self, path: str, body: Any = None) -> dict[str, Any]:
        return _decode(self.transport.request("DELETE", path, body=body))

    # discovery
    def eviction_version(self) -> str:
        """``v1`` or ``v1beta1``: the version of the ``pods/eviction`` subresource, as ``kubectl drain`` finds it.

        Discovery of ``/api/v1`` names the subresource's group and version (``policy/v1`` from 1.22 on;
        ``policy/v1beta1`` on 1.20, which has nothing else). A server that does not say falls back to v1beta1.
        """
        with self._lock:
            if self._eviction_version is None:
                version = "v1beta1"
                for res in self.get("/api/v1").get("resources") or ():
                    if res.get("name") == "pods/eviction" and res.get("group") == "policy" and res.get("version"):
                        version = res["version"]
                self._eviction_version = version
            return self._eviction_version

    def pdb_version(self) -> str:
        """``v1`` where the server serves ``policy/v1`` PodDisruptionBudgets (1.21+), else ``v1beta1``."""
        with self._lock:
            if self._pdb_version is None:
                versions = {v.get("version") for v in self.get("/apis/policy").get("versions") or ()}
                self._pdb_version = "v1" if "v1" in versions else "v1beta1"
            return self._pdb_version

    def pdb_path(self, namespace: str | None = None) -> str:
        base = f"/apis/policy/{self.pdb_version()}"
        if namespace is None:
            return f"{base}/poddisruptionbudgets"
        return f"{base}/namespaces/{quote(namespace)}/poddisruptionbudgets"


def _decode(body: bytes) -> dict[str, Any]:
    return orjson.loads(body) if body else {}


class Collection:
    """One collection of the API (``/api/v1/nodes``) through :class:`Kube`: the informer's
    :class:`~shared.kube.informer.ListWatch`, used by the extender's caches and the rescheduler's state."""

    def __init__(self, kube: Kube, path: str) -> None:
        self.kube = kube
        self.path = path

    def list(self, query: Sequence[tuple[str, Any]]) -> bytes:
        return self.kube.get_raw(self.path, query)

    def watch(self, query: Sequence[tuple[str, Any]], timeout: float) -> LineStream:
        return self.kube.watch(self.path, query, timeout)


def pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}"


def node_path(name: str) -> str:
    return f"/api/v1/nodes/{quote(name)}"


# --- the real transport -------------------------------------------------------------------------------------------


class ResponseLines:
    """The non-empty lines of an unread urllib3 response, as they arrive: the :class:`LineStream` of
    :class:`HttpTransport`. ``close()`` from another thread ends the iteration quietly; ``wrap``, if given, turns
    a stream that broke into the caller's own error type."""

    def __init__(self, response: Any, *, wrap: Callable[[Exception], Exception] | None = None) -> None:
        self._response = response
        self._wrap = wrap
        self._closed = False
        self._done = False

    def __iter__(self) -> Iterator[bytes]:
        buf = b""
        try:
            for chunk in self._response.stream(65536, decode_content=True):
                buf += chunk
                while True:
                    i = buf.find(b"\n")
                    if i < 0:
                        break
                    line, buf = buf[:i], buf[i + 1 :]
                    if line.strip():
                        yield line
            if buf.strip():
                yield buf
            self._done = True
        except Exception as e:
            if self._closed:
                return
            if self._wrap is None:
                raise
            raise self._wrap(e) from None
        finally:
            self._response.release_conn()

    def close(self) -> None:
        if self._done:
            return
        self._closed = True
        # Closing a half-read stream may raise from urllib3; the watch is being abandoned anyway.
        with contextlib.suppress(Exception):
            self._response.shutdown()  # urllib3 2.3+: unblocks a read in another thread
        with contextlib.suppress(Exception):
            self._response.close()


class HttpTransport:
    """HTTPS to one API server with the credentials of a ``kubernetes.client.Configuration``.

    ``user_agent`` names the component (``spotshift-extender``, ``spotshift-rescheduler``) in the API server's
    audit log and API priority and fairness. The connection pool belongs to the process that made it: build a
    transport in the process that uses it (the extender's workers build theirs after gunicorn forks them), and
    :meth:`close` one that is done with before forking. Should a transport cross a fork all the same, the
    child makes a pool of its own on its first request rather than share the parent's connections.
    """

    def __init__(self, configuration: Any, *, user_agent: str) -> None:
        import urllib3

        self._urllib3 = urllib3
        self.host = str(configuration.host).rstrip("/")
        self._config = configuration
        self._user_agent = user_agent
        kwargs: dict[str, Any] = {"num_pools": 2, "maxsize": 16, "block": False}
        if self.host.startswith("https"):
            if configuration.verify_ssl:
                kwargs["cert_reqs"] = "CERT_REQUIRED"
                if configuration.ssl_ca_cert:
                    kwargs["ca_certs"] = configuration.ssl_ca_cert
            else:
                kwargs["cert_reqs"] = "CERT_NONE"
            if configuration.cert_file:
                kwargs["cert_file"] = configuration.cert_file
            if configuration.key_file:
                kwargs["key_file"] = configuration.key_file
            server_name = getattr(configuration, "tls_server_name", None)
            if server_name:
                kwargs["server_hostname"] = server_name
        self._pool_kwargs = kwargs
        self._pool, self._pid = self._new_pool(), os.getpid()

    def _new_pool(self) -> Any:
        urllib3 = self._urllib3
        proxy = getattr(self._config, "proxy", None)
        kwargs = self._pool_kwargs
        return urllib3.ProxyManager(proxy, **kwargs) if proxy else urllib3.PoolManager(**kwargs)

    def pool(self) -> Any:
        """This process's connection pool: the parent's is left alone in a forked child, which makes its own."""
        if self._pid != os.getpid():
            self._pool, self._pid = self._new_pool(), os.getpid()
        return self._pool

    def close(self) -> None:
        """Close the pool's connections (the transport can still be used: it connects again)."""
        if self._pid == os.getpid():
            self._pool.clear()

    def _headers(self, content_type: str | None) -> dict[str, str]:
        headers = {"Accept": "application/json", "User-Agent": self._user_agent}
        token = self._config.get_api_key_with_prefix("BearerToken") or self._config.get_api_key_with_prefix(
            "authorization"
        )
        if token:
            headers["Authorization"] = token
        if content_type:
            headers["Content-Type"] = content_type
        return headers

    def _url(self, path: str, query: Sequence[tuple[str, Any]]) -> str:
        if not query:
            return self.host + path
        return self.host + path + "?" + urlencode([(k, _query_value(v)) for k, v in query])

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, Any]] = (),
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | None = None,
    ) -> bytes:
        urllib3 = self._urllib3
        data = orjson.dumps(body) if body is not None else None
        try:
            response = self.pool().request(
                method,
                self._url(path, query),
                body=data,
                headers=self._headers(content_type if data is not None else None),
                timeout=urllib3.Timeout(connect=10.0, read=timeout or 60.0),
                retries=False,
            )
        except urllib3.exceptions.HTTPError as e:
            raise Unavailable(f"{type(e).__name__}: {e}", method=method, path=path) from None
        if not 200 <= response.status < 300:
            raise error_for(
                response.status,
                response.data,
                method=method,
                path=path,
                retry_after=_retry_after(response.headers.get("Retry-After")),
            )
        return response.data

    def stream(self, path: str, *, query: Sequence[tuple[str, Any]] = (), timeout: float = 300.0) -> LineStream:
        urllib3 = self._urllib3
        try:
            response = self.pool().request(
                "GET",
                self._url(path, query),
                headers=self._headers(None),
                timeout=urllib3.Timeout(connect=10.0, read=timeout),
                retries=False,
                preload_content=False,
            )
        except urllib3.exceptions.HTTPError as e:
            raise Unavailable(f"{type(e).__name__}: {e}", method="GET", path=path) from None
        if not 200 <= response.status < 300:
            data = response.data
            response.release_conn()
            raise error_for(response.status, data, method="GET", path=path)
        return ResponseLines(response, wrap=lambda e: Unavailable(f"watch stream broke: {type(e).__name__}: {e}"))


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def transport_from_kubeconfig(
    kubeconfig: str | None = None, context: str | None = None, *, user_agent: str
) -> HttpTransport:
    """A transport with the credentials every spotshift command finds the same way
    (:func:`shared.kube.credentials.load_client_configuration`); raises its one-line ``KubeconfigError``."""
    return HttpTransport(load_client_configuration(kubeconfig, context), user_agent=user_agent)
