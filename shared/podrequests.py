"""A pod's effective resource request, exactly as kube-scheduler computes it, and ``ResourceList`` parsing.

:func:`pod_requests` is ``resourcehelper.PodRequests`` (``component-helpers/resource/helpers.go``): containers
summed, init containers as a peak, sidecars (init containers with ``restartPolicy: Always``) added to both,
pod-level requests, then ``spec.overhead``. Quantities are summed exactly in nano-units and rounded once,
as upstream adds ``Quantity`` values before converting. :mod:`shared.model` computes it once per pod at parse
time and re-exports these names; :class:`ParseError` is defined here, the lowest module that raises it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from shared.quantity import NANO, NANO_PER_MILLI, QuantityError, nano_value, resource_value, round_up

__all__ = ["ParseError", "parse_resources", "pod_requests", "pod_requests_and_non_zero"]


class ParseError(ValueError):
    """An API object this library cannot read; the message names the object and the field."""


def _parse_list(raw: Any, where: str, convert: Callable[[str, Any], int]) -> dict[str, int]:
    if not raw:
        return {}
    if not isinstance(raw, Mapping):
        raise ParseError(f"{where}: expected an object of quantities")
    out: dict[str, int] = {}
    for name, q in raw.items():
        try:
            out[name] = convert(name, q)
        except QuantityError as e:
            raise ParseError(f"{where}.{name}: {e}") from None
    return out


def parse_resources(raw: Any, where: str) -> dict[str, int]:
    """Parse a ``ResourceList`` (``{"cpu": "100m", ...}``) into scheduler integers."""
    return _parse_list(raw, where, resource_value)


def _parse_nanos(raw: Any, where: str) -> dict[str, int]:
    """A ``ResourceList`` as exact nano-units (:func:`shared.quantity.nano_value`), for summing."""
    return _parse_list(raw, where, lambda _name, q: nano_value(q))


def _from_nanos(nanos: Mapping[str, int]) -> dict[str, int]:
    """``MilliValue()`` for ``cpu``, ``Value()`` for the rest, of already-summed quantities."""
    return {k: round_up(v, NANO_PER_MILLI if k == "cpu" else NANO) for k, v in nanos.items()}


def _add_into(acc: dict[str, int], other: Mapping[str, int]) -> None:
    for k, v in other.items():
        acc[k] = acc.get(k, 0) + v


def _max_into(acc: dict[str, int], other: Mapping[str, int]) -> None:
    # helpers.go maxResourceList: a name missing from acc is added even at zero (presence matters
    # for pod-level defaulting).
    for k, v in other.items():
        if k not in acc or v > acc[k]:
            acc[k] = v


def _container_requests(c: Mapping[str, Any], where: str) -> dict[str, int]:
    """A container's requests in nano-units, with the API server's limit→request defaulting."""
    res = c.get("resources") or {}
    if not isinstance(res, Mapping):
        raise ParseError(f"{where}.resources: expected an object")
    requests = _parse_nanos(res.get("requests"), f"{where}.resources.requests")
    # API-server defaulting (pkg/apis/core/v1/defaults.go SetDefaults_Pod): a limit with no
    # request makes the request equal to the limit. Objects read back from the API already
    # carry it; hand-written manifests and test fixtures may not.
    limits = res.get("limits")
    if limits:
        for name, v in _parse_nanos(limits, f"{where}.resources.limits").items():
            requests.setdefault(name, v)
    return requests


# pkg/scheduler/util/pod_resources.go DefaultMilliCPURequest (100m) and DefaultMemoryRequest
# (200Mi), in nano-units: what scoring assumes for a container that does not request cpu/memory.
_NON_ZERO_DEFAULTS = {"cpu": 100 * NANO_PER_MILLI, "memory": 200 * 2**20 * NANO}


def _aggregate(
    containers: list[dict[str, int]],
    inits: list[tuple[dict[str, int], bool]],
    defaults: Mapping[str, int] | None = None,
) -> dict[str, int]:
    """``AggregateContainerRequests`` (component-helpers/resource/helpers.go), optionally with
    ``NonMissingContainerRequests``: ``defaults`` fill names a container does not request at all."""
    reqs: dict[str, int] = {}
    for creqs in containers:
        if defaults:
            creqs = {**{k: v for k, v in defaults.items() if k not in creqs}, **creqs}
        _add_into(reqs, creqs)
    init_peak: dict[str, int] = {}
    sidecars: dict[str, int] = {}
    for creqs, sidecar in inits:
        if defaults:
            creqs = {**{k: v for k, v in defaults.items() if k not in creqs}, **creqs}
        if sidecar:
            _add_into(reqs, creqs)
            _add_into(sidecars, creqs)
            peak = sidecars
        else:
            peak = dict(sidecars)
            _add_into(peak, creqs)
        _max_into(init_peak, peak)
    _max_into(reqs, init_peak)
    return reqs


def _is_pod_level_resource(name: str) -> bool:
    # helpers.go IsSupportedPodLevelResource: cpu, memory and hugepages-*.
    return name in ("cpu", "memory") or name.startswith("hugepages-")


def _pod_level_requests(spec: Mapping[str, Any], aggregated: Mapping[str, int], where: str) -> dict[str, int]:
    """Pod-level requests (``spec.resources``, PodLevelResources) that replace the containers' sums.

    Includes the API server's defaulting (defaults.go ``defaultPodRequests``): with pod-level limits,
    a supported resource without a pod-level request takes the containers' sum when they request it
    and it is overcommittable (cpu, memory), else the pod-level limit.
    """
    res = spec.get("resources")
    if not res:
        return {}
    if not isinstance(res, Mapping):
        raise ParseError(f"{where}.resources: expected an object")
    requests = _parse_nanos(res.get("requests"), f"{where}.resources.requests")
    for name, v in _parse_nanos(res.get("limits"), f"{where}.resources.limits").items():
        if name not in requests and _is_pod_level_resource(name):
            if name in aggregated and name in ("cpu", "memory"):
                requests[name] = aggregated[name]
            else:
                requests[name] = v
    return {k: v for k, v in requests.items() if _is_pod_level_resource(k)}


def _split_containers(
    spec: Mapping[str, Any], where: str
) -> tuple[list[dict[str, int]], list[tuple[dict[str, int], bool]]]:
    containers = [
        _container_requests(c, f"{where}.containers[{i}]") for i, c in enumerate(spec.get("containers") or ())
    ]
    inits = [
        (_container_requests(c, f"{where}.initContainers[{i}]"), c.get("restartPolicy") == "Always")
        for i, c in enumerate(spec.get("initContainers") or ())
    ]
    return containers, inits


def pod_requests(spec: Mapping[str, Any], where: str = "spec") -> dict[str, int]:
    """Effective pod request, exactly like ``resourcehelper.PodRequests`` used by ``noderesources``.

    ``max(sum(containers) + sum(sidecars), max over init containers of (init + sidecars started
    before it))``, then pod-level requests (``spec.resources``) replace cpu/memory/hugepages, plus
    ``spec.overhead``. A sidecar is an init container with ``restartPolicy: Always``: it keeps
    running, so it adds to the running sum and to every later init container's peak. Quantities are
    summed exactly and rounded once at the end (``MilliValue()`` for cpu, ``Value()`` otherwise),
    like upstream adds ``Quantity`` values before converting.
    """
    return pod_requests_and_non_zero(spec, where)[0]


def pod_requests_and_non_zero(spec: Mapping[str, Any], where: str = "spec") -> tuple[dict[str, int], tuple[int, int]]:
    """:func:`pod_requests` and the scoring requests ``(milli_cpu, memory)`` of ``calculateResource``.

    The non-zero requests (framework/types.go ``calculateResource``) count 100m cpu / 200Mi memory
    for every container (init containers included) that does not request them at all; an explicit
    zero stays zero. With pod-level requests set, a resource present in the pod's requests is
    taken as is.
    """
    containers, inits = _split_containers(spec, where)
    reqs = _aggregate(containers, inits)
    pod_level = _pod_level_requests(spec, reqs, where)
    reqs.update(pod_level)
    overhead = _parse_nanos(spec.get("overhead"), f"{where}.overhead")
    _add_into(reqs, overhead)
    # types.go getNonMissingContainerRequests: with pod-level requests, only a resource missing
    # from the pod's requests (overhead included) gets the per-container defaults.
    missing = {k: v for k, v in _NON_ZERO_DEFAULTS.items() if k not in reqs} if pod_level else _NON_ZERO_DEFAULTS
    non0 = reqs
    if missing and any(k not in c for c in (*containers, *(c for c, _ in inits)) for k in missing):
        non0 = _aggregate(containers, inits, missing)
        non0.update(pod_level)
        _add_into(non0, overhead)
    non_zero = (round_up(non0.get("cpu", 0), NANO_PER_MILLI), round_up(non0.get("memory", 0), NANO))
    return _from_nanos(reqs), non_zero
