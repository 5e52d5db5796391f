"""Resource fit: kube-scheduler's ``NodeResourcesFit`` filter, plus node free capacity and scoring requests.

:func:`check_resources` is ``noderesources/fit.go`` ``Fits``/``fitsRequest`` over the lean views: the pod's
effective request is computed once at parse time (:func:`shared.model.pod_requests`, which is
``resourcehelper.PodRequests``) and a node's used resources are kept by :class:`shared.snapshot.NodeInfo`
(terminal pods hold nothing), so a check is a handful of integer comparisons.

Semantics, in upstream's order:

1. Pods count: ``len(pods) + 1 > allocatable pods`` is "Too many pods", whatever the pod requests.
2. ``cpu`` (millicores), ``memory`` and ``ephemeral-storage`` (bytes) are checked only when the pod
   requests more than zero, against ``allocatable - requested`` (a node already over-committed by
   pods bound outside the scheduler fails any positive request).
3. Scalar resources (:func:`is_scalar_resource`: extended resources such as ``nvidia.com/gpu``,
   ``hugepages-*``, ``attachable-volumes-*`` and ``*kubernetes.io/*`` names) are checked when the
   request is non-zero; a node without the resource has capacity 0. ``ignored`` and
   ``ignored_groups`` are ``NodeResourcesFitArgs.IgnoredResources``/``IgnoredResourceGroups`` and
   apply to extended resources only.
4. Any other name (``storage``, ``pods``, an unqualified ``foo``) is ignored, as ``Resource.Add`` does.

A shortage is ``UnschedulableAndUnresolvable`` (``InsufficientResource.unresolvable``) when the pod asks
more than the node's whole allocatable: no preemption could make room. Otherwise it is ``Unschedulable``,
as is "Too many pods". (kube-scheduler 1.34 and 1.37 do so; the flag informs, no check here depends on it.)

Upstream returns early when the pod requests nothing; every later check is guarded by a non-zero
request, so the early return changes nothing and is not repeated here. Upstream lists scalar
failures in Go map order (random); here they come sorted by name, after pods/cpu/memory/ephemeral-storage.

Older releases (:mod:`shared.switches`) were stricter on over-committed nodes:

* before v1.27 (kubernetes#116408, ``resources_fit_ignores_unrequested_overcommit=False``) cpu, memory and
  ephemeral-storage are checked whatever the pod requests, as ``allocatable < request + requested``: a node
  whose pods already over-commit cpu refuses a pod asking only for memory. The early return then matters:
  a pod that requests no cpu, memory or ephemeral-storage and names no scalar resource (even at 0) is not
  checked at all. A scalar named only in an init container at 0 counts as named here (v1.20's
  ``SetMaxResource`` did not record it), which errs on the strict side;
* before v1.26 (kubernetes#111544, ``resources_fit_skips_zero_scalar_requests=False``) a scalar resource
  requested with quantity 0 is checked too, so it fails where the node's pods over-commit it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from shared.fit_reasons import ERR_INSUFFICIENT, ERR_TOO_MANY_PODS, InsufficientResource
from shared.model import Node, Pod
from shared.names import is_qualified_name
from shared.snapshot import NodeInfo
from shared.switches import CURRENT, Switches

__all__ = [
    "check_resources",
    "exceeds_allocatable",
    "requests_exceed",
    "requests_anything",
    "is_scalar_resource",
    "is_extended_resource",
    "node_free",
    "non_zero_requests",
    "DEFAULT_MILLI_CPU_REQUEST",
    "DEFAULT_MEMORY_REQUEST",
]

# pkg/scheduler/util/pod_resources.go (framework/types.go in older releases).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

_NATIVE = ("cpu", "memory", "ephemeral-storage")
_MESSAGES = {name: ERR_INSUFFICIENT.format(resource=name) for name in _NATIVE}
_RANK = {"pods": 0, "cpu": 1, "memory": 2, "ephemeral-storage": 3}


def _is_prefixed_native(name: str) -> bool:
    # v1helper.IsPrefixedNativeResource: strings.Contains, so "foo.kubernetes.io/x" counts too.
    return "kubernetes.io/" in name


def is_extended_resource(name: str) -> bool:
    """``v1helper.IsExtendedResourceName``: a ``domain/name`` outside ``*kubernetes.io/``.

    Not native (has a ``/`` and is not in the ``kubernetes.io/`` namespace), not ``requests.*``, and
    ``requests.<name>`` is a valid qualified name (what a quota on it would be called).
    """
    if "/" not in name or _is_prefixed_native(name) or name.startswith("requests."):
        return False
    return is_qualified_name("requests." + name)


def is_scalar_resource(name: str) -> bool:
    """``schedutil.IsScalarResourceName``: extended, ``hugepages-*``, prefixed native or ``attachable-volumes-*``."""
    return (
        is_extended_resource(name)
        or name.startswith("hugepages-")
        or _is_prefixed_native(name)
        or name.startswith("attachable-volumes-")
    )


# Resource name -> "is checked": True for the natives, else whether it is scalar. Filled lazily;
# a cluster has a handful of resource names, so the cache stays tiny.
_CHECKED: dict[str, bool] = {"cpu": True, "memory": True, "ephemeral-storage": True, "pods": False, "storage": False}


def _checked(name: str) -> bool:
    checked = _CHECKED.get(name)
    if checked is None:
        checked = _CHECKED[name] = is_scalar_resource(name)
    return checked


def _ignored(name: str, ignored: frozenset[str], ignored_groups: frozenset[str]) -> bool:
    if not (ignored or ignored_groups) or not is_extended_resource(name):
        return False
    return name in ignored or name.split("/", 1)[0] in ignored_groups


def exceeds_allocatable(pod: Pod, node: Node) -> bool:
    """Whether one of ``pod``'s positive requests of a checked resource exceeds ``node``'s allocatable: then
    :func:`check_resources` (with nothing ignored) fails on that node whatever runs there."""
    return requests_exceed(pod.requests.items(), node.allocatable)


def requests_exceed(requests: Iterable[tuple[str, int]], allocatable: Mapping[str, int]) -> bool:
    """:func:`exceeds_allocatable` for some of a pod's ``requests``."""
    return any(want > 0 and _checked(name) and want > allocatable.get(name, 0) for name, want in requests)


def check_resources(
    pod: Pod,
    node_info: NodeInfo,
    *,
    ignored: frozenset[str] = frozenset(),
    ignored_groups: frozenset[str] = frozenset(),
    switches: Switches = CURRENT,
) -> Sequence[InsufficientResource]:
    """Every resource ``pod`` lacks on ``node_info`` (``noderesources.Fits``); empty means it fits.

    ``node_info`` must not already hold ``pod``. Returns an immutable tuple; the success path
    allocates nothing. Inputs are not modified. ``switches`` selects an older release's rules.
    """
    alloc = node_info.node.allocatable
    used = node_info.requested
    out: list[InsufficientResource] | None = None
    n_pods = len(node_info.pods)
    allowed = alloc.get("pods", 0)
    if n_pods + 1 > allowed:
        out = [InsufficientResource(ERR_TOO_MANY_PODS, ERR_TOO_MANY_PODS, False, "pods", 1, n_pods, allowed)]
    requests = pod.requests
    if not switches.resources_fit_ignores_unrequested_overcommit and requests_anything(pod):
        requests = _with_unrequested_natives(requests)
        zero_natives = True
    else:
        zero_natives = False
    zero_scalars = not switches.resources_fit_skips_zero_scalar_requests
    for name, want in requests.items():
        if want <= 0:
            # Natives are checked only when positive; scalars whenever non-zero (a negative request
            # cannot pass API validation, but upstream's comparison is kept exact). Older releases
            # also check zero natives (kubernetes#116408) and zero scalars (kubernetes#111544).
            if name in _RANK:
                if not (zero_natives and want == 0):
                    continue
            elif not _checked(name) or (want == 0 and not zero_scalars):
                continue
        elif not _checked(name):
            continue
        capacity = alloc.get(name, 0)
        in_use = used.get(name, 0)
        if want > capacity - in_use:
            if (ignored or ignored_groups) and _ignored(name, ignored, ignored_groups):
                continue
            message = _MESSAGES.get(name) or ERR_INSUFFICIENT.format(resource=name)
            failure = InsufficientResource(ERR_INSUFFICIENT, message, want > capacity, name, want, in_use, capacity)
            if out is None:
                out = [failure]
            else:
                out.append(failure)
    if out is None:
        return ()
    if len(out) > 1:
        out.sort(key=lambda r: (_RANK.get(r.resource, 4), r.resource))
    return tuple(out)


def requests_anything(pod: Pod) -> bool:
    """Whether ``fitsRequest`` gets past its early return: the pod requests cpu, memory or
    ephemeral-storage, or names any scalar resource (even at 0). Only older releases' rules depend on it."""
    for name, want in pod.requests.items():
        if name in _RANK:
            if want != 0 and name != "pods":
                return True
        elif _checked(name):
            return True
    return False


def _with_unrequested_natives(requests: Mapping[str, int]) -> dict[str, int]:
    """``requests`` plus cpu, memory and ephemeral-storage at 0 where missing (checked before v1.27)."""
    return {**dict.fromkeys(_NATIVE, 0), **requests}


def node_free(node_info: NodeInfo) -> dict[str, int]:
    """Allocatable minus requested, per resource the scheduler accounts (``pods`` counts pods).

    Covers every allocatable resource plus any checked resource the node's pods request without the
    node having it (negative free). For reports ("why this node stays"), not for the hot path.
    """
    alloc = node_info.node.allocatable
    used = node_info.requested
    free = {name: cap - used.get(name, 0) for name, cap in alloc.items() if name != "pods"}
    for name, in_use in used.items():
        if name not in free and name != "pods" and _checked(name):
            free[name] = -in_use
    free["pods"] = alloc.get("pods", 0) - len(node_info.pods)
    return free


def non_zero_requests(pod: Pod) -> tuple[int, int]:
    """``(milli_cpu, memory)`` the scheduler's scoring counts for ``pod`` (``NonZeroRequested``).

    A container that requests no cpu counts 100m, no memory 200Mi (explicit zeros stay zero); see
    :func:`shared.model.pod_requests_and_non_zero`. A ``Pod`` built by hand rather than parsed has no
    per-container detail: it is treated as one container with its effective requests.
    """
    if pod.non_zero_requests is not None:
        return pod.non_zero_requests
    reqs = pod.requests
    return reqs.get("cpu", DEFAULT_MILLI_CPU_REQUEST), reqs.get("memory", DEFAULT_MEMORY_REQUEST)
