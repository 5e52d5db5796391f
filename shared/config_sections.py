"""The sections of :class:`shared.config.Config`: one frozen dataclass per section, each field with its default,
its converter (:mod:`shared.config_values`) and, under it, the docstring the configuration reference of
docs/configuration.md is generated from (``tools/gen_reference.py``). Loading, layering and the checks across
fields live in :mod:`shared.config`, which re-exports everything here."""

from __future__ import annotations

from dataclasses import dataclass

from shared import config_values as v
from shared.model import Toleration
from shared.presets import CONTROL_PLANE_SELECTORS, PRESET_NAMES
from shared.selectors import Selector

__all__ = [
    "NodeClasses",
    "WebhookConfig",
    "ExtenderConfig",
    "ReschedulerConfig",
    "MovabilityConfig",
    "SpotCeilingConfig",
    "ServerConfig",
    "DisruptionConfig",
    "CapacityConfig",
    "KarpenterConfig",
    "WorthConfig",
    "SpotConfig",
    "WEBHOOK_MODES",
    "DRAIN_TAINT_MODES",
    "PDB_RULES",
    "PDB_RATE_LIMIT",
    "PDB_ALL_AT_ONCE",
    "JOB_MODES",
    "JOBS_BLOCK",
    "JOBS_WAIT",
    "JOBS_EVICT",
]

WEBHOOK_MODES = ("prefer", "tolerate-only", "require", "off")
DRAIN_TAINT_MODES = ("prefer-no-schedule", "cordon")
PDB_RATE_LIMIT = "rate-limit"
PDB_ALL_AT_ONCE = "all-at-once"
PDB_RULES = (PDB_RATE_LIMIT, PDB_ALL_AT_ONCE)
JOBS_BLOCK = "block"
JOBS_WAIT = "wait"
JOBS_EVICT = "evict"
JOB_MODES = (JOBS_BLOCK, JOBS_WAIT, JOBS_EVICT)


@dataclass(frozen=True, slots=True)
class NodeClasses:
    """Which nodes are spot, on-demand or neither (see :mod:`shared.classes`)."""

    presets: tuple[str, ...] = v.setting(PRESET_NAMES, v.seq(v.choice(PRESET_NAMES), comma_separated=True))
    """Provider presets to enable: karpenter, eks, gke-spot, gke-preemptible, aks, spot-worker (default: all)."""
    spot_selectors: tuple[Selector, ...] = v.setting((), v.seq(v.selector, comma_separated=False))
    """Extra label selectors marking spot nodes (``lifecycle=spot``); spot if any preset or selector matches."""
    on_demand_selectors: tuple[Selector, ...] = v.setting((), v.seq(v.selector, comma_separated=False))
    """If set, only non-spot nodes matching one of these are on-demand; empty means every non-spot worker node."""
    control_plane_selectors: tuple[Selector, ...] = v.setting(
        CONTROL_PLANE_SELECTORS, v.seq(v.selector, comma_separated=False)
    )
    """Control-plane nodes: never on-demand, never drained."""
    spot_tolerations: tuple[Toleration, ...] | None = v.setting(None, v.optional_tolerations)
    """Tolerations the webhook injects; ``null`` means the enabled presets' taints. Explicit key and effect required."""
    extra_reclaim_taints: tuple[str, ...] = v.setting((), v.seq(v.label_key, comma_separated=True))
    """Taint keys of the cluster's own termination tooling that mark a node as being reclaimed."""


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    """The mutating admission webhook (on Pod CREATE)."""

    mode: str = v.setting("prefer", v.choice(WEBHOOK_MODES))
    """``prefer``: preferred spot affinity plus tolerations; ``tolerate-only``: tolerations only;
    ``require``: required spot affinity plus tolerations (opt-in); ``off``: admit unchanged."""
    weight: int = v.setting(100, v.integer(1, 100))
    """Weight of the injected preferred node-affinity term (1-100)."""
    excluded_namespaces: tuple[str, ...] = v.setting(("kube-system",), v.seq(v.namespace, comma_separated=True))
    """Namespaces whose pods are never mutated; spotshift's own ``namespace`` is always added."""
    scheduler_name: str = v.setting("", v.scheduler_name)
    """If set, ``spec.schedulerName`` for mutated pods (a second kube-scheduler with the extender); empty: unchanged."""


@dataclass(frozen=True, slots=True)
class ExtenderConfig:
    """The scheduler extender's ``/filter`` and ``/prioritize``."""

    spot_score: int = v.setting(10, v.integer(0, 10))
    """Score of a spot node (0-10, ``MaxExtenderPriority`` is 10)."""
    on_demand_score: int = v.setting(0, v.integer(0, 10))
    """Score of an on-demand node; must not exceed ``spot_score``."""
    other_score: int = v.setting(0, v.integer(0, 10))
    """Score of a node that is neither spot nor on-demand."""
    filter_reclaimed: bool = v.setting(True, v.boolean)
    """Whether ``/filter`` drops nodes being reclaimed (termination notices, cordoned, ...)."""


@dataclass(frozen=True, slots=True)
class ReschedulerConfig:
    """The rescheduler's loop; names and defaults follow pusher/k8s-spot-rescheduler's flags."""

    housekeeping_interval: float = v.setting(10.0, v.duration(positive=True))
    """How often the rescheduler plans (``--housekeeping-interval``, 10s), in seconds."""
    node_drain_delay: float = v.setting(600.0, v.duration(positive=False))
    """Wait after a drain ends before its place is taken by another (``--node-drain-delay``, 10m): with one node at
    a time (no budgets), the wait between two drains, as pusher's flag."""
    pod_eviction_timeout: float = v.setting(120.0, v.duration(positive=True))
    """How long to retry an eviction refused with 429 (``--pod-eviction-timeout``, 2m)."""
    max_graceful_termination: float = v.setting(120.0, v.duration(positive=False))
    """How long to wait for evicted pods to be gone before failing the drain (``--max-graceful-termination``, 2m)."""
    replacement_timeout: float = v.setting(300.0, v.duration(positive=True))
    """How long to wait for the evicted pods' replacements to be Running on spot (5m)."""
    node_backoff: float = v.setting(1800.0, v.duration(positive=False))
    """How long to leave a node alone after its pods' replacements landed on on-demand again (30m)."""
    max_nodes_per_cycle: int = v.setting(1, v.integer(1))
    """At most this many drains started per housekeeping cycle (the drains in flight go on between cycles)."""
    pdb_rule: str = v.setting(PDB_RATE_LIMIT, v.choice(PDB_RULES))
    """How PodDisruptionBudgets limit a plan: ``rate-limit`` (as ``kubectl drain``) blocks a node only when a
    budget of its pods allows no disruption now, and the drain evicts what each budget allows, retrying 429s as
    replacements become Ready; ``all-at-once`` (cluster-autoscaler's rule) needs every eviction of the plan
    allowed at once."""
    drain_taint: str = v.setting("prefer-no-schedule", v.choice(DRAIN_TAINT_MODES))
    """How a node being drained is kept from new pods: a ``PreferNoSchedule`` taint, or ``cordon``."""
    drain_taint_key: str = v.setting("spotshift.io/draining", v.label_key)
    """Key of the rescheduler's own taint (found and removed again after a restart)."""
    keep_drained_tainted: bool = v.setting(True, v.boolean)
    """Once a drained node is empty, keep its taint (or cordon) so the autoscaler removes it without pods
    coming back; false makes the node schedulable again."""
    dry_run: bool = v.setting(False, v.boolean)
    """Plan and report, never taint or evict."""
    leader_elect: bool = v.setting(True, v.boolean)
    """Run only while holding the ``coordination.k8s.io`` Lease ``lease_name`` in ``namespace``."""
    lease_name: str = v.setting("spotshift-rescheduler", v.object_name)
    """Name of the leader-election Lease."""
    metrics_bind: str = v.setting("0.0.0.0:9235", v.bind)
    """Address of the Prometheus metrics endpoint (pusher's ``--listen-address`` port)."""


@dataclass(frozen=True, slots=True)
class MovabilityConfig:
    """Which pods may be moved (:mod:`shared.movable`), read by the rescheduler and the webhook alike."""

    delete_non_replicated_pods: bool = v.setting(False, v.boolean)
    """Move pods without a controller (``--delete-non-replicated-pods``); they are not recreated."""
    allow_local_storage: bool = v.setting(False, v.boolean)
    """Move pods with hostPath or disk-backed emptyDir volumes (their data is lost)."""
    kube_system_without_pdb_blocks: bool = v.setting(True, v.boolean)
    """kube-system pods without a PodDisruptionBudget block their node, like cluster-autoscaler."""
    expendable_priority_cutoff: int = v.setting(-10, v.integer())
    """Pods with a priority below this neither block nor move (``--expendable-pods-priority-cutoff``)."""
    opt_out_key: str = v.setting("spotshift.io/exclude", v.label_key)
    """A pod label or annotation with value ``"true"``: not mutated by the webhook, never moved."""
    do_not_disrupt_pod_annotations: tuple[str, ...] = v.setting(
        ("karpenter.sh/do-not-disrupt", "karpenter.sh/do-not-evict"), v.seq(v.label_key, comma_separated=True)
    )
    """Other tools' pod annotations that, set to ``"true"``, keep a pod and so its node where they are."""
    do_not_disrupt_node_annotations: tuple[str, ...] = v.setting(
        ("cluster-autoscaler.kubernetes.io/scale-down-disabled", "karpenter.sh/do-not-disrupt"),
        v.seq(v.label_key, comma_separated=True),
    )
    """Other tools' node annotations that, set to ``"true"``, keep an on-demand node from being drained."""


@dataclass(frozen=True, slots=True)
class SpotCeilingConfig:
    """Per-workload spot ceilings, set on the pod template, enforced by the extender and the rescheduler."""

    max_spot_percent_annotation: str = v.setting("spotshift.io/max-spot-percent", v.label_key)
    """Annotation: at most this percentage (0-100) of a workload's pods on spot."""
    min_on_demand_annotation: str = v.setting("spotshift.io/min-on-demand", v.label_key)
    """Annotation: at least this many of a workload's pods on on-demand nodes."""
    default_max_spot_percent: int = v.setting(100, v.integer(0, 100))
    """Ceiling for workloads without the annotation."""
    default_min_on_demand: int = v.setting(0, v.integer(0))
    """On-demand floor for workloads without the annotation."""


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """The HTTPS server that serves the webhook and the extender."""

    bind: str = v.setting("0.0.0.0:8443", v.bind)
    """Listen address."""
    tls_cert_file: str = v.setting("", v.path)
    """PEM certificate file; empty (with ``tls_key_file`` empty) serves plain HTTP."""
    tls_key_file: str = v.setting("", v.path)
    """PEM private key file, set together with ``tls_cert_file``."""


@dataclass(frozen=True, slots=True)
class DisruptionConfig:
    """Operator controls on the rescheduler's drains: when and how many (budgets, windows), how settled pods and
    targets must be, what may move, and Jobs (docs/controls.md). The defaults change nothing but Jobs."""

    budgets: tuple[v.Budget, ...] = v.setting((), v.budgets)
    """At most this many on-demand nodes draining at once, each ``{nodes: "N" or "P%", schedule, duration}``; a
    budget with a cron ``schedule`` applies for ``duration`` from each match, the most restrictive applying one
    wins, and when every budget has a schedule and none applies, nothing drains (outside the drain window).
    Percentages of the on-demand nodes round up. Empty: one node drains at a time."""
    time_zone: str = v.setting("UTC", v.time_zone)
    """IANA time zone the budgets' schedules are read in (``Europe/Berlin``); durations are elapsed time."""
    min_pod_age: float = v.setting(0.0, v.duration(positive=False))
    """Pods younger than this do not move, and their node waits (0: no minimum)."""
    min_target_age: float = v.setting(0.0, v.duration(positive=False))
    """Spot nodes younger than this, or Ready for less than this, are not targets (0: no minimum)."""
    namespaces: tuple[str, ...] = v.setting((), v.seq(v.namespace, comma_separated=True))
    """If set, only pods in these namespaces may move; a pod elsewhere keeps its node from draining."""
    excluded_namespaces: tuple[str, ...] = v.setting((), v.seq(v.namespace, comma_separated=True))
    """Pods in these namespaces never move; their node does not drain."""
    pod_selector: Selector | None = v.setting(None, v.optional_selector)  # noqa: RUF009 (Selector is frozen)
    """If set, only pods whose labels match this selector (``tier!=critical``) may move."""
    min_replicas: int = v.setting(0, v.integer(0))
    """Pods of a workload with fewer Ready replicas than this do not move, and their node waits (0: no minimum)."""
    jobs: str = v.setting(JOBS_BLOCK, v.choice(JOB_MODES))
    """Pods of a running Job: ``block`` keeps their node from draining; ``wait`` marks the node and waits up to
    ``job_timeout`` for them to finish before evicting the rest; ``evict`` moves them like any pod."""
    job_timeout: float = v.setting(3600.0, v.duration(positive=True))
    """With ``jobs: wait``, how long to wait for a node's Job pods to finish before rolling the drain back."""


@dataclass(frozen=True, slots=True)
class CapacityConfig:
    """Asking for spot capacity: placeholder pods for on-demand nodes that only lack spot room."""

    enabled: bool = v.setting(True, v.boolean)
    """Create low-priority placeholder pods that require spot for each on-demand node whose pods would all move
    if spot had room, so the autoscaler adds spot nodes; the node is drained once they run there."""
    timeout: float = v.setting(600.0, v.duration(positive=True))
    """How long a node's placeholders may wait to be Running on spot, and then for the node's drain to start,
    before they are deleted and the node backed off (10m)."""
    max_pods: int = v.setting(20, v.integer(1))
    """At most this many placeholder pods exist at once."""
    max_cpu: str = v.setting("16", v.quantity("cpu"))
    """At most this much CPU requested by all placeholder pods together (a quantity: ``16``, ``500m``)."""
    max_memory: str = v.setting("64Gi", v.quantity("memory"))
    """At most this much memory requested by all placeholder pods together (a quantity: ``64Gi``)."""
    priority_class_name: str = v.setting("spotshift-placeholder", v.object_name)
    """PriorityClass of the placeholders (deploy/ ships it: value -5, ``preemptionPolicy: Never``): above
    cluster-autoscaler's expendable cutoff, so it scales up for them, below every workload, so they are preempted."""
    image: str = v.setting("registry.k8s.io/pause:3.9", v.image)
    """Container image of the placeholders (a pause image: it only sleeps)."""


@dataclass(frozen=True, slots=True)
class KarpenterConfig:
    """Living with Karpenter's own consolidation (docs/karpenter.md)."""

    defer_to_consolidation: bool = v.setting(True, v.boolean)
    """Leave to Karpenter the on-demand nodes of a NodePool that consolidates toward spot by itself
    (``consolidationPolicy: WhenEmptyOrUnderutilized`` or ``Balanced``, spot allowed, consolidation not forbidden
    for good): the rescheduler neither drains them nor asks placeholders for their pods, and ``plan`` says
    ``karpenter-consolidates``. Nodes of other NodePools, and of no NodePool, stay the rescheduler's."""


@dataclass(frozen=True, slots=True)
class WorthConfig:
    """Whether a drain is worth its evictions (docs/worth.md), in on-demand vCPU-hours: a node's hourly price is
    the larger of its allocatable vCPUs and its allocatable memory in GiB divided by 4."""

    enabled: bool = v.setting(True, v.boolean)
    """Drain an on-demand node only when its expected saving is at least its cost times ``margin``; false drains
    every node the plan empties (its saving and cost are still shown)."""
    spot_price_ratio: float = v.setting(0.3, v.number(0.0, 1.0, below_hi=True))
    """Spot's price as a fraction of on-demand's for the same capacity (0.3: spot costs 30%)."""
    removal_delay: float = v.setting(600.0, v.duration(positive=False))
    """How long an emptied node still runs, and is paid for, before the autoscaler removes it (10m)."""
    expected_stay: float = v.setting(21600.0, v.duration(positive=True))
    """How long moved pods are expected to stay on spot before a reclaim sends them back (6h)."""
    horizon: float = v.setting(86400.0, v.duration(positive=True))
    """The longest stay a saving counts (24h): beyond it, other changes in the cluster matter more."""
    default_start_up: float = v.setting(30.0, v.duration(positive=False))
    """A pod's start-up time when its status does not tell it (Ready condition's time less ``status.startTime``)."""
    volume_attach_time: float = v.setting(60.0, v.duration(positive=False))
    """Added to a pod's start-up time per PersistentVolumeClaim it mounts: detaching and attaching the volume."""
    eviction_cost: float = v.setting(0.25, v.number(0.0))
    """vCPU-hours each eviction costs beyond the pod's restart (lost connections, cold caches, the risk of moving):
    the knob between fewer evictions (higher) and more savings (lower; 0 counts only the restart)."""
    margin: float = v.setting(1.0, v.number(0.0))
    """A drain is worth it when its saving is at least its cost times this (above 1: a safety margin)."""


@dataclass(frozen=True, slots=True)
class SpotConfig:
    """Spot pools and the memory of their reclaims (docs/spot-pools.md)."""

    stability_window: float = v.setting(1800.0, v.duration(positive=False))
    """How long after a reclaim its pool (node group, instance type, zone) is unsettled: its nodes are not targets,
    placeholders do not ask it for capacity, the extender scores its nodes as on-demand (30m; 0: never)."""
    memory: float = v.setting(86400.0, v.duration(positive=True))
    """How long a reclaim is remembered: the span over which a pool's reclaim rate and expected stay are judged
    (24h)."""
