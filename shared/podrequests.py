"""A pod's effective resource request, exactly as kube-scheduler computes it, and ``ResourceList`` parsing.

:func:`pod_requests` is ``resourcehelper.PodRequests`` (``component-helpers/resource/helpers.go``): containers
summed, init containers as a peak, sidecars (init containers with ``restartPolicy: Always``) added to both,
pod-level requests, then ``spec.overhead``. Quantities are summed exactly in nano-units and rounded once,
as upstream adds ``Quantity`` values before converting. :mod:`shared.model` computes it once per pod at parse
time and re-exports these names; :class:`ParseError` is defined here, the lowest module that raises it.

:func:`status_requests` is the same helper with ``UseStatusResources``: what kube-scheduler counts for a pod
already on a node (``calculateResource`` in ``pkg/scheduler/framework/types.go``) while an in-place resize is
pending or in progress. A pod being placed has no status resources; the scheduler computes its fit from its spec
(``noderesources.computePodResourceRequest``), and so does the planner for a pod it moves.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from shared.quantity import NANO, NANO_PER_MILLI, QuantityError, nano_value, resource_value, round_up

__all__ = ["ParseError", "parse_resources", "pod_requests", "pod_requests_and_non_zero", "status_requests"]


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
    if not isinstance(c, Mapping):
        raise ParseError(f"{where}: expected an object")
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


# --- in-place resize: what a pod on a node counts for -----------------------------------------------------------


_Status = tuple[dict[str, int] | None, bool, dict[str, int] | None]
"""A container status as the rules read it: ``(allocatedResources, resources is set, resources.requests)``."""
_NO_STATUS: _Status = (None, False, None)


def _container_status(raw: Any, where: str) -> _Status:
    """``(allocatedResources, resources is set, resources.requests)`` of one ``ContainerStatus``, in nano-units;
    ``None`` where the field is absent (``null`` is absent, as Go decodes it)."""
    if not isinstance(raw, Mapping):
        raise ParseError(f"{where}: expected an object")
    alloc_raw = raw.get("allocatedResources")
    alloc = _parse_nanos(alloc_raw, f"{where}.allocatedResources") if alloc_raw is not None else None
    res = raw.get("resources")
    if res is None:
        return alloc, False, None
    if not isinstance(res, Mapping):
        raise ParseError(f"{where}.resources: expected an object")
    req_raw = res.get("requests")
    actuated = _parse_nanos(req_raw, f"{where}.resources.requests") if req_raw is not None else None
    return alloc, True, actuated


def _statuses(raw: Any, where: str) -> dict[str, _Status]:
    """The container statuses that report resources, by container name."""
    if not raw:
        return {}
    if not isinstance(raw, list):
        raise ParseError(f"{where}: expected a list")
    out: dict[str, _Status] = {}
    for i, cs in enumerate(raw):
        if isinstance(cs, Mapping) and cs.get("allocatedResources") is None and cs.get("resources") is None:
            continue  # nothing a rule reads: the container counts by its spec
        name = cs.get("name") if isinstance(cs, Mapping) else None
        out.setdefault(name or "", _container_status(cs, f"{where}[{i}]"))
    return out


def _resize_infeasible(conditions: Any) -> bool:
    """``IsPodResizeInfeasible``: the first ``PodResizePending`` condition has reason ``Infeasible``."""
    for c in conditions or ():
        if isinstance(c, Mapping) and c.get("type") == "PodResizePending":
            return c.get("reason") == "Infeasible"
    return False


def _max_of(*lists: Mapping[str, int] | None) -> dict[str, int]:
    """helpers.go ``max(a, b...)``: per name the largest; ``None`` lists add nothing."""
    out: dict[str, int] = {}
    for lst in lists:
        if lst is not None:
            _max_into(out, lst)
    return out


def _minus_overhead(lst: Mapping[str, int] | None, overhead: Mapping[str, int]) -> dict[str, int] | None:
    """helpers.go ``subtractResourceList``: the names of ``lst`` less ``overhead``, never below zero."""
    if lst is None:
        return None
    return {k: max(v - overhead.get(k, 0), 0) for k, v in lst.items()}


def _repeats_the_spec(spec: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
    """Whether the status only repeats the spec: no pod-level status, and every container status that reports
    resources reports its container's own requests, allocated and actuated. Both rules below then give the spec's
    requests. It compares the quantities' text, which the API server and the kubelet both write in canonical form
    (``Quantity.String()``), so equal text is equal value; different text, or anything but the plain objects JSON
    decodes to, is left to the rules (which word any error)."""
    if status.get("allocatedResources") is not None or status.get("resources") is not None:
        return False
    own: dict[Any, Any] = {}
    for key in ("containers", "initContainers"):
        for c in spec.get(key) or ():
            res = c.get("resources") if type(c) is dict else False
            if res is None:
                own[c.get("name")] = None
            elif type(res) is dict:
                own[c.get("name")] = res.get("requests") or None
            else:
                return False
    for key in ("containerStatuses", "initContainerStatuses"):
        statuses = status.get(key)
        if not statuses:
            continue
        if type(statuses) is not list:
            return False
        for cs in statuses:
            if type(cs) is not dict:
                return False
            alloc, res = cs.get("allocatedResources"), cs.get("resources")
            if alloc is None and res is None:
                continue
            want = own.get(cs.get("name"), False)
            if want is False or (alloc is not None and (alloc or None) != want):
                return False
            if res is not None and (type(res) is not dict or (res.get("requests") or None) != want):
                return False
    return True


class _Named(NamedTuple):
    """A pod's containers' and init containers' spec requests (:func:`_split_containers`) and their names."""

    containers: list[dict[str, int]]
    inits: list[tuple[dict[str, int], bool]]
    names: list[str]
    init_names: list[str]


def _named_containers(spec: Mapping[str, Any]) -> _Named:
    containers, inits = _split_containers(spec, "spec")
    names = [c.get("name") or "" for c in spec.get("containers") or ()]
    init_names = [c.get("name") or "" for c in spec.get("initContainers") or ()]
    return _Named(containers, inits, names, init_names)


def _pod_status(status: Mapping[str, Any], where: str) -> tuple[dict[str, int] | None, dict[str, int] | None]:
    """The pod-level status (KEP-5419): ``status.allocatedResources`` and ``status.resources.requests`` in
    nano-units, ``None`` where absent."""
    alloc_raw = status.get("allocatedResources")
    alloc = _parse_nanos(alloc_raw, f"{where}.allocatedResources") if alloc_raw is not None else None
    res = status.get("resources")
    if res is not None and not isinstance(res, Mapping):
        raise ParseError(f"{where}.resources: expected an object")
    act_raw = res.get("requests") if res is not None else None
    act = _parse_nanos(act_raw, f"{where}.resources.requests") if act_raw is not None else None
    return alloc, act


def _determined_requests(named: _Named, by_name: Mapping[str, _Status], infeasible: bool) -> dict[str, int]:
    """Rule 1 of :func:`status_requests` (1.34 to 1.36, ``determineContainerReqs``): a container or sidecar whose
    status has ``resources`` set counts the largest of its spec, actuated and allocated requests (without the spec
    when the resize is infeasible); the rest count by their spec. ``by_name`` holds the init containers' statuses
    over the containers' of the same name, as upstream's one map does."""

    def determined(reqs: dict[str, int], name: str) -> dict[str, int]:
        alloc, has_resources, act = by_name.get(name, _NO_STATUS)
        if not has_resources:
            return reqs
        return _max_of(act, alloc) if infeasible else _max_of(reqs, act, alloc)

    return _aggregate(
        [determined(r, n) for r, n in zip(named.containers, named.names, strict=True)],
        [
            (determined(r, n) if sidecar else r, sidecar)
            for (r, sidecar), n in zip(named.inits, named.init_names, strict=True)
        ],
    )


def _status_aggregates(
    named: _Named,
    spec_agg: dict[str, int],
    c_statuses: Mapping[str, _Status],
    i_statuses: Mapping[str, _Status],
    pod_alloc: dict[str, int] | None,
    pod_act: dict[str, int] | None,
    infeasible: bool,
) -> dict[str, int]:
    """Rule 2 of :func:`status_requests` (1.37): the largest of the spec's aggregate ``spec_agg``, the allocated and
    the actuated aggregates (without the spec when the resize is infeasible). With both pod-level status lists set,
    they are the allocated and actuated aggregates; otherwise each container, init containers too, counts by its
    status (``findContainerStatus``, ``containerAllocatedRequests``, ``containerActuatedRequests``), a container
    without the field by its spec, or by nothing when the resize is infeasible."""

    def allocated(reqs: dict[str, int], name: str) -> dict[str, int]:
        alloc, _, _ = c_statuses.get(name) or i_statuses.get(name) or _NO_STATUS
        if alloc is not None:
            return alloc
        return {} if infeasible else reqs

    def actuated(reqs: dict[str, int], name: str) -> dict[str, int]:
        alloc, _, act = c_statuses.get(name) or i_statuses.get(name) or _NO_STATUS
        if act is not None:
            return act
        if alloc is not None:
            return alloc
        return {} if infeasible else reqs

    if pod_alloc is not None and pod_act is not None:
        alloc_agg, act_agg = pod_alloc, pod_act
    else:
        alloc_agg = _aggregate(
            [allocated(r, n) for r, n in zip(named.containers, named.names, strict=True)],
            [(allocated(r, n), sc) for (r, sc), n in zip(named.inits, named.init_names, strict=True)],
        )
        act_agg = _aggregate(
            [actuated(r, n) for r, n in zip(named.containers, named.names, strict=True)],
            [(actuated(r, n), sc) for (r, sc), n in zip(named.inits, named.init_names, strict=True)],
        )
    return _max_of(act_agg, alloc_agg) if infeasible else _max_of(spec_agg, act_agg, alloc_agg)


def _effective_pod_level(
    pod_level: dict[str, int],
    pod_alloc: dict[str, int] | None,
    pod_act: dict[str, int] | None,
    overhead: Mapping[str, int],
    infeasible: bool,
) -> dict[str, int]:
    """``effectivePodLevelResources``: the largest of the pod-level spec requests and the pod-level status lists
    less the overhead (without the spec when the resize is infeasible), for the pod-level resources only."""
    statuses = (_minus_overhead(pod_act, overhead), _minus_overhead(pod_alloc, overhead))
    effective = _max_of(*statuses) if infeasible else _max_of(pod_level, *statuses)
    return {k: v for k, v in effective.items() if _is_pod_level_resource(k)}


def status_requests(spec: Mapping[str, Any], status: Mapping[str, Any], where: str = "status") -> dict[str, int] | None:
    """The requests kube-scheduler counts for a pod on its node, from its spec and the resources its status reports
    (``PodRequests`` with ``UseStatusResources``, component-helpers/resource/helpers.go); ``None`` when the status
    reports none or only repeats the spec, so that the spec's requests (:func:`pod_requests`) are what counts.

    The fields read: ``status.containerStatuses[]`` and ``status.initContainerStatuses[]`` (matched to containers by
    name) ``.allocatedResources`` and ``.resources.requests``; the pod-level ``status.allocatedResources`` and
    ``status.resources.requests``; and ``IsPodResizeInfeasible``, a ``PodResizePending`` condition with reason
    ``Infeasible``, which drops the spec from every maximum below (the resize will not happen).

    The rule changed in 1.37 (kubernetes#140047), and both forms are computed; the result is, per resource, the
    larger of the two:

    1. 1.34 to 1.36, ``determineContainerReqs``: for each container and sidecar whose status has ``resources``
       set, the largest of its spec requests, ``resources.requests`` and ``allocatedResources``; other
       containers, and init containers that are not sidecars, count by their spec. Then the usual sum and init
       peak.
    2. 1.37, the larger of three aggregates (each the usual sum and init peak): the spec's; the allocated
       (``allocatedResources``, else the spec); the actuated (``resources.requests``, else ``allocatedResources``,
       else the spec). With the pod-level status set (``status.allocatedResources`` and
       ``status.resources.requests``, KEP-5419), those two stand for the allocated and actuated aggregates.

    The two agree for a pod whose containers all resize the same way and report both fields. The first counts
    more for containers resized in opposite directions (a sum of maxima against a maximum of sums); the second
    counts more where a container reports ``allocatedResources`` alone, or an init container that is not a sidecar
    reports a status, which 1.34 to 1.36 do not read. The larger is each release's own count where they agree,
    and never less than any release counts where they do not.

    Pod-level requests (``spec.resources``) then replace cpu, memory and hugepages as in :func:`pod_requests`; with
    the pod-level status set, by ``effectivePodLevelResources``: the largest of the spec's and the two status
    lists less ``spec.overhead`` (without the spec when the resize is infeasible). Only a kubelet with the
    pod-level resize feature (KEP-5419: alpha in 1.35, on by default from 1.36) writes those fields, and the
    scheduler of such a cluster reads them. Then ``spec.overhead`` is added.
    """
    if _repeats_the_spec(spec, status):
        return None
    c_statuses = _statuses(status.get("containerStatuses"), f"{where}.containerStatuses")
    i_statuses = _statuses(status.get("initContainerStatuses"), f"{where}.initContainerStatuses")
    pod_alloc, pod_act = _pod_status(status, where)
    if not (c_statuses or i_statuses or pod_alloc is not None or pod_act is not None):
        return None
    infeasible = _resize_infeasible(status.get("conditions"))
    named = _named_containers(spec)
    spec_agg = _aggregate(named.containers, named.inits)
    reqs = _max_of(
        _determined_requests(named, {**c_statuses, **i_statuses}, infeasible),
        _status_aggregates(named, spec_agg, c_statuses, i_statuses, pod_alloc, pod_act, infeasible),
    )
    overhead = _parse_nanos(spec.get("overhead"), "spec.overhead")
    pod_level = _pod_level_requests(spec, spec_agg, "spec")
    if pod_level and (pod_act is not None or pod_alloc is not None):
        reqs.update(_effective_pod_level(pod_level, pod_alloc, pod_act, overhead, infeasible))
    else:
        reqs.update(pod_level)
    _add_into(reqs, overhead)
    return _from_nanos(reqs)
