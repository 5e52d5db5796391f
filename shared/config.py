"""One configuration schema for the webhook, the extender and the rescheduler, validated at load.

The three parts must agree on what "spot", "fits" and "movable" mean, so they read one
:class:`Config`. ``Config()`` is the default configuration: every provider preset enabled, a node
is spot when a preset matches and on-demand when it is neither spot nor control-plane, the spot
tolerations are the presets' taints, and the rescheduler's options have
pusher/k8s-spot-rescheduler's meanings and defaults.

Sources, later wins:

1. the defaults below;
2. a YAML file (``load_config(path, env)``; ``path=None`` reads ``env["SPOTSHIFT_CONFIG"]`` if set);
3. environment variables ``SPOTSHIFT_<SECTION>_<FIELD>`` in upper case, or ``SPOTSHIFT_<FIELD>``
   for a top-level field: ``SPOTSHIFT_WEBHOOK_MODE=prefer`` sets ``webhook.mode``,
   ``SPOTSHIFT_RESCHEDULER_DRY_RUN=true`` sets ``rescheduler.dry_run``,
   ``SPOTSHIFT_NODE_CLASSES_PRESETS=karpenter,aks`` sets ``node_classes.presets``,
   ``SPOTSHIFT_NAMESPACE=spotshift`` sets ``namespace``. :func:`env_names` lists them all;
4. command-line flags, passed as ``overrides`` (field path → value) with ``sources`` (field path → the
   flag's name): ``load_config(path, env, overrides={"rescheduler.node_drain_delay": "5m"},
   sources={"rescheduler.node_drain_delay": "--node-drain-delay"})``. :func:`flag_overrides` builds
   both from a CLI's table of flags.

An error about a value says where it came from: ``config field rescheduler.node_drain_delay (from
--node-drain-delay): must be a duration ...``, or ``(from SPOTSHIFT_RESCHEDULER_NODE_DRAIN_DELAY)``.

The environment and the flags are arguments (the caller passes ``os.environ``), so this module stays pure
apart from the one file read in :func:`load_config`.

Environment and flag values are text: booleans are ``true/false/1/0/yes/no/on/off``; a list is either a
YAML flow sequence (``[a, "b in (x,y)"]``) or, for lists of names, comma-separated (``a,b``); a bare
value of a selector list is one selector (commas inside a selector AND its requirements). Any other
``SPOTSHIFT_*`` variable is an error (a typo must not be ignored), except ``SPOTSHIFT_CONFIG``.

YAML keys are the field names below (snake_case); the embedded Kubernetes tolerations keep the
API's own names (``key``, ``operator``, ``value``, ``effect``, ``tolerationSeconds``).

Validation fails with :class:`ConfigError` whose message is one sentence naming the field path,
e.g. ``config field webhook.weight: must be an integer from 1 to 100, got 150.``: unknown keys
(with a suggestion), wrong types, out-of-range values, malformed durations (``500ms``, ``30s``,
``5m``, ``1h30m``; a bare number is seconds), malformed label selectors and keys, and contradictory
options (the same label selecting spot and on-demand nodes, on-demand scored above spot, a TLS
certificate without its key, ...).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import yaml

from shared import config_values as v
from shared.config_values import parse_duration
from shared.model import Toleration
from shared.presets import CONTROL_PLANE_SELECTORS, PRESET_NAMES, PRESETS
from shared.selectors import EXISTS, IN, Selector

__all__ = [
    "ConfigError",
    "Config",
    "NodeClasses",
    "WebhookConfig",
    "ExtenderConfig",
    "ReschedulerConfig",
    "MovabilityConfig",
    "SpotCeilingConfig",
    "ServerConfig",
    "DisruptionConfig",
    "JOB_MODES",
    "JOBS_BLOCK",
    "JOBS_WAIT",
    "JOBS_EVICT",
    "WEBHOOK_MODES",
    "DRAIN_TAINT_MODES",
    "PDB_RULES",
    "PDB_RATE_LIMIT",
    "PDB_ALL_AT_ONCE",
    "ENV_PREFIX",
    "ENV_CONFIG_PATH",
    "load_config",
    "parse_config",
    "parse_duration",
    "env_names",
    "flag_overrides",
]

ENV_PREFIX = "SPOTSHIFT_"
ENV_CONFIG_PATH = "SPOTSHIFT_CONFIG"
"""The one ``SPOTSHIFT_*`` variable that is not a setting: the YAML file's path."""

WEBHOOK_MODES = ("prefer", "tolerate-only", "require", "off")
DRAIN_TAINT_MODES = ("prefer-no-schedule", "cordon")
PDB_RATE_LIMIT = "rate-limit"
PDB_ALL_AT_ONCE = "all-at-once"
PDB_RULES = (PDB_RATE_LIMIT, PDB_ALL_AT_ONCE)
JOBS_BLOCK = "block"
JOBS_WAIT = "wait"
JOBS_EVICT = "evict"
JOB_MODES = (JOBS_BLOCK, JOBS_WAIT, JOBS_EVICT)


class ConfigError(ValueError):
    """A configuration that cannot be used; the message is one sentence naming the field path."""


# --- the schema -----------------------------------------------------------------------------------


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
    """Wait after draining a node before the next one (``--node-drain-delay``, 10m)."""
    pod_eviction_timeout: float = v.setting(120.0, v.duration(positive=True))
    """How long to retry an eviction refused with 429 (``--pod-eviction-timeout``, 2m)."""
    max_graceful_termination: float = v.setting(120.0, v.duration(positive=False))
    """How long to wait for evicted pods to be gone before failing the drain (``--max-graceful-termination``, 2m)."""
    replacement_timeout: float = v.setting(300.0, v.duration(positive=True))
    """How long to wait for the evicted pods' replacements to be Running on spot (5m)."""
    node_backoff: float = v.setting(1800.0, v.duration(positive=False))
    """How long to leave a node alone after its pods' replacements landed on on-demand again (30m)."""
    max_nodes_per_cycle: int = v.setting(1, v.integer(1))
    """At most this many nodes drained per housekeeping cycle."""
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
    Percentages of the on-demand nodes round up. Empty: no limit beyond ``rescheduler.max_nodes_per_cycle``."""
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
class Config:
    """Everything configurable, one schema for the three parts. ``Config()`` is the default."""

    namespace: str = v.setting("spotshift", v.namespace)
    """The namespace spotshift runs in: excluded from the webhook, home of the leader-election Lease."""
    node_classes: NodeClasses = field(default_factory=NodeClasses, metadata={"section": NodeClasses})
    webhook: WebhookConfig = field(default_factory=WebhookConfig, metadata={"section": WebhookConfig})
    extender: ExtenderConfig = field(default_factory=ExtenderConfig, metadata={"section": ExtenderConfig})
    rescheduler: ReschedulerConfig = field(default_factory=ReschedulerConfig, metadata={"section": ReschedulerConfig})
    movability: MovabilityConfig = field(default_factory=MovabilityConfig, metadata={"section": MovabilityConfig})
    spot_ceiling: SpotCeilingConfig = field(default_factory=SpotCeilingConfig, metadata={"section": SpotCeilingConfig})
    server: ServerConfig = field(default_factory=ServerConfig, metadata={"section": ServerConfig})
    disruption: DisruptionConfig = field(default_factory=DisruptionConfig, metadata={"section": DisruptionConfig})

    @property
    def webhook_excluded_namespaces(self) -> frozenset[str]:
        """``webhook.excluded_namespaces`` plus spotshift's own namespace."""
        return frozenset(self.webhook.excluded_namespaces) | {self.namespace}


# --- loading --------------------------------------------------------------------------------------


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "an empty list" if not value else "a list"
    return f"a {type(value).__name__}"


def _fail(path: str, problem: str, value: Any = ..., source: str | None = None, *, bare: bool = False) -> ConfigError:
    src = f" (from {source})" if source else ""
    got = "" if bare or value is ... else f", got {_show(value)}"
    return ConfigError(f"config field {path}{src}: {problem}{got}.")


def _camel_to_snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).replace("-", "_").lower()


def _unknown(path: str, key: Any, known: list[str]) -> ConfigError:
    full = f"{path}{key}"
    if isinstance(key, str):
        snake = _camel_to_snake(key)
        guess = [snake] if snake in known else difflib.get_close_matches(key, known, n=1)
        if guess:
            return ConfigError(f"config field {full}: is not a known setting (did you mean {path}{guess[0]}?).")
    return ConfigError(f"config field {full}: is not a known setting (known: {', '.join(known)}).")


def _walk(cls: type, prefix: str = "") -> list[tuple[str, Any]]:
    """Every setting as (dotted path, dataclass field), depth first."""
    out = []
    for f in fields(cls):
        if "section" in f.metadata:
            out.extend(_walk(f.metadata["section"], f"{prefix}{f.name}."))
        else:
            out.append((prefix + f.name, f))
    return out


def env_names() -> dict[str, str]:
    """``SPOTSHIFT_*`` variable → field path, for every setting (the README's reference table)."""
    return {ENV_PREFIX + path.replace(".", "_").upper(): path for path, _ in _walk(Config)}


_ENV_NAMES = env_names()


def _env_overrides(env: Mapping[str, str]) -> dict[str, tuple[str, Any]]:
    out: dict[str, tuple[str, Any]] = {}
    for name in sorted(env):
        if not name.startswith(ENV_PREFIX) or name == ENV_CONFIG_PATH:
            continue
        path = _ENV_NAMES.get(name)
        if path is None:
            guess = difflib.get_close_matches(name, list(_ENV_NAMES), n=1)
            hint = f" (did you mean {guess[0]}?)" if guess else ""
            raise ConfigError(f"environment variable {name}: is not a known spotshift setting{hint}.")
        out[path] = (name, env[name])
    return out


_PATHS = frozenset(_ENV_NAMES.values())


def _layers(
    env: Mapping[str, str], overrides: Mapping[str, Any] | None, sources: Mapping[str, str] | None
) -> dict[str, tuple[str, Any]]:
    """Field path → (where the value came from, raw value): the environment, then ``overrides`` on top."""
    layered = _env_overrides(env)
    for path, raw in (overrides or {}).items():
        if path not in _PATHS:
            raise ConfigError(f"{(sources or {}).get(path) or path}: is not a known spotshift setting ({path}).")
        layered[path] = ((sources or {}).get(path) or f"override of {path}", raw)
    return layered


def _build(
    cls: type, data: Mapping[str, Any], prefix: str, overrides: dict[str, tuple[str, Any]], origin: dict[str, str]
) -> Any:
    known = [f.name for f in fields(cls)]
    for key in data:
        if key not in known:
            raise _unknown(prefix, key, known)
    kwargs: dict[str, Any] = {}
    for f in fields(cls):
        path = prefix + f.name
        section = f.metadata.get("section")
        if section is not None:
            raw = data.get(f.name)
            if raw is None:
                raw = {}
            if not isinstance(raw, Mapping):
                raise _fail(path, "must be a mapping of settings", raw)
            kwargs[f.name] = _build(section, raw, path + ".", overrides, origin)
            continue
        source: str | None = None
        if path in overrides:
            source, raw = overrides[path]
            from_env = True
            origin[path] = source
        elif f.name in data:
            raw, from_env = data[f.name], False
        else:
            continue
        try:
            kwargs[f.name] = f.metadata["conv"](raw, from_env)
        except v.Bad as e:
            raise _fail(path + e.suffix, e.problem, raw if e.value is ... else e.value, source, bare=e.bare) from None
    return cls(**kwargs)


def _overlaps(a: Selector, b: Selector) -> bool:
    """Whether two selectors name the same label: equal, or one positive requirement on one key each."""
    if frozenset(a.requirements) == frozenset(b.requirements):
        return True
    if len(a.requirements) != 1 or len(b.requirements) != 1:
        return False
    ra, rb = a.requirements[0], b.requirements[0]
    if ra.key != rb.key or ra.operator not in (IN, EXISTS) or rb.operator not in (IN, EXISTS):
        return False
    return ra.operator == EXISTS or rb.operator == EXISTS or bool(ra.values & rb.values)


def _check(config: Config, origin: dict[str, str]) -> None:
    """Reject combinations of individually valid options that contradict each other."""

    def fail(path: str, problem: str, value: Any) -> ConfigError:
        return _fail(path, problem, value, origin.get(path.partition("[")[0]))

    nc = config.node_classes
    if not nc.presets and not nc.spot_selectors:
        raise fail(
            "node_classes.spot_selectors",
            "must not be empty when node_classes.presets is empty, since then no node would be spot",
            [],
        )
    spot = [(f"preset {n}", PRESETS[n].selector) for n in nc.presets]
    spot += [(f"node_classes.spot_selectors[{i}]", s) for i, s in enumerate(nc.spot_selectors)]
    for i, od in enumerate(nc.on_demand_selectors):
        for what, s in spot:
            if _overlaps(od, s):
                raise fail(
                    f"node_classes.on_demand_selectors[{i}]",
                    f"must not select the spot label {s.text} of {what}",
                    od.text,
                )
    ex = config.extender
    if ex.on_demand_score > ex.spot_score:
        raise fail(
            "extender.on_demand_score",
            f"must not be higher than extender.spot_score ({ex.spot_score}), or spot nodes would score lower",
            ex.on_demand_score,
        )
    ceiling = config.spot_ceiling
    if ceiling.max_spot_percent_annotation == ceiling.min_on_demand_annotation:
        raise fail(
            "spot_ceiling.min_on_demand_annotation",
            "must differ from spot_ceiling.max_spot_percent_annotation",
            ceiling.min_on_demand_annotation,
        )
    dis = config.disruption
    both = sorted(set(dis.namespaces) & set(dis.excluded_namespaces))
    if both:
        raise fail(
            "disruption.excluded_namespaces",
            f"must not name a namespace that disruption.namespaces includes ({', '.join(both)})",
            list(dis.excluded_namespaces),
        )
    server = config.server
    if bool(server.tls_cert_file) != bool(server.tls_key_file):
        missing = "server.tls_key_file" if server.tls_cert_file else "server.tls_cert_file"
        other = "server.tls_cert_file" if server.tls_cert_file else "server.tls_key_file"
        raise fail(missing, f"must be set together with {other}", "")


def parse_config(
    data: Any,
    env: Mapping[str, str] | None = None,
    *,
    source: str = "configuration",
    overrides: Mapping[str, Any] | None = None,
    sources: Mapping[str, str] | None = None,
) -> Config:
    """Validate parsed YAML (``None`` for an empty file), then the environment, then ``overrides`` on top.

    ``overrides`` maps a field path (``rescheduler.node_drain_delay``) to a raw value, text as a flag gives
    it (``"5m"``) or already typed (``True``, a list); ``sources`` names where each came from
    (``--node-drain-delay``), and an error about that field names it instead of the field's variable.
    """
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: must be a mapping of settings at the top level, got {_show(data)}.")
    origin: dict[str, str] = {}
    config = _build(Config, data, "", _layers(env or {}, overrides, sources), origin)
    _check(config, origin)
    return config


class _StrictLoader(yaml.SafeLoader):
    """``SafeLoader`` that rejects a key given twice in one mapping (PyYAML keeps the last silently)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if isinstance(key, str) and key in seen:
            mark = key_node.start_mark
            raise yaml.constructor.ConstructorError(None, None, f"key {key!r} appears twice", mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _yaml_problem(e: yaml.YAMLError) -> str:
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    mark = getattr(e, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return (where + problem).rstrip(".")


def load_config(
    path: str | None,
    env: Mapping[str, str],
    overrides: Mapping[str, Any] | None = None,
    sources: Mapping[str, str] | None = None,
) -> Config:
    """Read the YAML file at ``path`` (or ``env["SPOTSHIFT_CONFIG"]``; neither: defaults), then ``env``, then
    ``overrides`` (command-line flags, named by ``sources``; see :func:`parse_config`).

    This is the only function here that touches the outside world: one file read.
    """
    if path is None:
        path = env.get(ENV_CONFIG_PATH) or None
    data: Any = None
    if path is not None:
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except FileNotFoundError:
            raise ConfigError(f"config file {path}: does not exist.") from None
        except IsADirectoryError:
            raise ConfigError(f"config file {path}: is a directory, not a file.") from None
        except (OSError, UnicodeDecodeError) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
            raise ConfigError(f"config file {path}: cannot be read ({why}).") from None
        try:
            data = yaml.load(text, Loader=_StrictLoader)  # a SafeLoader subclass
        except yaml.YAMLError as e:
            raise ConfigError(f"config file {path}: is not valid YAML ({_yaml_problem(e)}).") from None
    where = f"config file {path}" if path else "configuration"
    return parse_config(data, env, source=where, overrides=overrides, sources=sources)


def flag_overrides(values: Mapping[str, Any], flags: Mapping[str, str]) -> tuple[dict[str, Any], dict[str, str]]:
    """The ``overrides`` and ``sources`` of :func:`load_config` from command-line flags.

    ``flags`` maps a flag (``--node-drain-delay``) to the field path it sets; ``values`` holds the parsed
    values by the flag's argparse destination (``node_drain_delay``), ``None`` when the flag was not given.
    """
    overrides: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for flag, path in flags.items():
        value = values.get(flag.lstrip("-").replace("-", "_"))
        if value is not None:
            overrides[path] = value
            sources[path] = flag
    return overrides, sources
