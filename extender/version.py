"""The cluster's kube-scheduler release, read from the API server's ``/version`` when ``spot-extender`` starts.

The extender's answers (``/filter`` drops nodes being reclaimed, ``/prioritize`` scores spot) run no
predicate whose rules changed between releases, so nothing it serves depends on the version. It reports the
rules (:mod:`shared.switches`) at start-up next to the rescheduler's, so one look at both logs tells which
kube-scheduler behaviour the cluster has; a version that cannot be read is said to be unknown, as the
rescheduler then plans with the strictest rules.
"""

from __future__ import annotations

import json
from typing import Any

from shared.kube.credentials import load_client_configuration
from shared.switches import STRICTEST, Switches, for_version_info

__all__ = ["read_switches"]


def read_switches(kubeconfig: str | None, *, timeout: float = 10.0) -> tuple[Switches, str, bool]:
    """``(switches, one sentence, is_warning)`` for the API server of ``kubeconfig`` (else in-cluster, then
    ``~/.kube/config``: :func:`shared.kube.credentials.load_client_configuration`)."""
    from kubernetes import client

    try:
        configuration = load_client_configuration(kubeconfig)
        configuration.retries = 0
        with client.ApiClient(configuration) as api:
            # Raw JSON: the client's VersionInfo model refuses an answer that leaves out any of its fields.
            response: Any = client.VersionApi(api).get_code(_preload_content=False, _request_timeout=timeout)
            status = int(getattr(response, "status", 200))
            if not 200 <= status < 300:
                raise ValueError(f"HTTP {status}")
            info: Any = json.loads(response.data)
    except Exception as e:  # any failure (credentials, network, HTTP status) means the same: version unknown
        code = getattr(e, "status", None)  # ApiException: its str() carries every response header
        reason = f"HTTP {code} {getattr(e, 'reason', '')}".strip() if code else " ".join(str(e).split())
        said = (
            f"cannot read the API server's version ({reason or type(e).__name__}): the scheduler's release is unknown"
        )
        return STRICTEST, said, True
    switches = for_version_info(info if isinstance(info, dict) else None)
    git_version = info.get("gitVersion") if isinstance(info, dict) else None
    if switches.kubernetes_version is None:
        return switches, f"the API server's version {git_version!r} is not a Kubernetes 1.x version", True
    shown = git_version or switches.kubernetes_version
    return switches, f"API server version {shown}: the cluster schedules with the {switches.describe()}", False
