"""The cluster's kube-scheduler release, read from the API server's ``/version`` when ``spot-extender`` starts.

The extender's answers (``/filter`` drops nodes being reclaimed, ``/prioritize`` scores spot) run no
predicate whose rules changed between releases, so nothing it serves depends on the version. It reports the
rules (:func:`shared.kube.version.read_switches`) at start-up next to the rescheduler's, so one look at both
logs tells which kube-scheduler behaviour the cluster has; a version that cannot be read is said to be
unknown, as the rescheduler then plans with the strictest rules. Any failure (credentials, network, an HTTP
status, an answer that is not JSON) means just that: version unknown, with a warning.
"""

from __future__ import annotations

from extender import USER_AGENT
from shared.kube.api import Kube, transport_from_kubeconfig
from shared.kube.version import Discovered, read_switches, version_unknown

__all__ = ["release_sentence", "read_release", "read_release_over"]


def release_sentence(found: Discovered) -> str:
    """What was found and what it means for the cluster's scheduler, in one sentence."""
    if found.warning:
        return f"{found.message}: the scheduler's release is unknown"
    return f"{found.message}: the cluster schedules with the {found.switches.describe()}"


def read_release_over(kube: Kube, *, timeout: float = 10.0) -> Discovered:
    """:func:`~shared.kube.version.read_switches` through ``kube``; any failure is :func:`version_unknown`."""
    try:
        return read_switches(kube, timeout=timeout)
    except Exception as e:  # any failure means the same: version unknown
        return version_unknown(" ".join(str(e).split()) or type(e).__name__)


def read_release(kubeconfig: str | None, *, timeout: float = 10.0) -> Discovered:
    """The release of the API server of ``kubeconfig`` (else in-cluster, then ``~/.kube/config``:
    :func:`shared.kube.credentials.load_client_configuration`), read by the gunicorn master before it forks
    its workers: the transport is closed again here, and no worker uses it."""
    try:
        transport = transport_from_kubeconfig(kubeconfig, user_agent=USER_AGENT)
    except Exception as e:  # credentials that cannot be read: version unknown too
        return version_unknown(" ".join(str(e).split()) or type(e).__name__)
    try:
        return read_release_over(Kube(transport), timeout=timeout)
    finally:
        transport.close()
