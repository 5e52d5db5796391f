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
   ``SPOTSHIFT_NAMESPACE=spotshift`` sets ``namespace``. :func:`env_names` lists them all.

The environment is an argument (the caller passes ``os.environ``), so this module stays pure apart
from the one file read in :func:`load_config`.

Environment values are text: booleans are ``true/false/1/0/yes/no/on/off``; a list is either a
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
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import yaml

from shared.model import NO_EXECUTE, NO_SCHEDULE, PREFER_NO_SCHEDULE, Toleration
from shared.names import is_dns1123_label, is_dns1123_subdomain, is_label_value, is_qualified_name
from shared.presets import CONTROL_PLANE_SELECTORS, PRESET_NAMES, PRESETS
from shared.selectors import EXISTS, IN, Selector, SelectorSyntaxError

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
    "WEBHOOK_MODES",
    "DRAIN_TAINT_MODES",
    "ENV_PREFIX",
    "ENV_CONFIG_PATH",
    "load_config",
    "parse_config",
    "parse_duration",
    "env_names",
]

ENV_PREFIX = "SPOTSHIFT_"
ENV_CONFIG_PATH = "SPOTSHIFT_CONFIG"
"""The one ``SPOTSHIFT_*`` variable that is not a setting: the YAML file's path."""

WEBHOOK_MODES = ("prefer", "tolerate-only", "require", "off")
DRAIN_TAINT_MODES = ("prefer-no-schedule", "cordon")
_TAINT_EFFECTS = (NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE)


class ConfigError(ValueError):
    """A configuration that cannot be used; the message is one sentence naming the field path."""


class _Bad(Exception):
    """Raised by converters: ``problem`` is a phrase (``must be ...``); ``suffix`` extends the path."""

    def __init__(self, problem: str, suffix: str = "", value: Any = ..., *, bare: bool = False) -> None:
        super().__init__(problem)
        self.problem = problem
        self.suffix = suffix
        self.value = value
        self.bare = bare  # the problem already says what was found: no ", got ..."


Conv = Callable[[Any, bool], Any]
"""A field converter: ``(raw value, came from the environment) -> value``; raises :class:`_Bad`."""


# --- converters -----------------------------------------------------------------------------------

_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


def _boolean(raw: Any, from_env: bool) -> bool:
    if isinstance(raw, bool):
        return raw
    if from_env and isinstance(raw, str):
        low = raw.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
    raise _Bad("must be true or false")


def _integer(lo: int | None = None, hi: int | None = None) -> Conv:
    if lo is not None and hi is not None:
        phrase = f"must be an integer from {lo} to {hi}"
    elif lo is not None:
        phrase = f"must be an integer of at least {lo}"
    else:
        phrase = "must be an integer"

    def conv(raw: Any, from_env: bool) -> int:
        value = raw
        if from_env and isinstance(raw, str):
            try:
                value = int(raw.strip())
            except ValueError:
                raise _Bad(phrase) from None
        if isinstance(value, bool) or not isinstance(value, int):
            raise _Bad(phrase)
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            raise _Bad(phrase)
        return value

    return conv


_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_NUMBER = re.compile(r"[+-]?(\d+(?:\.\d*)?|\.\d+)")


def parse_duration(text: str) -> float:
    """Seconds in a Go-style duration (``time.ParseDuration``): ``300ms``, ``30s``, ``5m``, ``1h30m``.

    Also accepts a bare number as seconds (``"90"``), which Go does not. Raises ``ValueError``.
    """
    s = text.strip()
    if _NUMBER.fullmatch(s):
        return float(s)
    sign = 1.0
    if s and s[0] in "+-":
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    total, pos = 0.0, 0
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if m is None:
            raise ValueError(f"invalid duration {text!r}")
        total += float(m[1]) * _DURATION_UNITS[m[2]]
        pos = m.end()
    if not s:
        raise ValueError(f"invalid duration {text!r}")
    return sign * total


def _duration(*, positive: bool) -> Conv:
    phrase = (
        "must be a positive duration like 30s, 5m or 1h30m"
        if positive
        else "must be a duration of zero or more like 30s, 5m or 1h30m"
    )

    def conv(raw: Any, from_env: bool) -> float:
        if isinstance(raw, bool):
            raise _Bad(phrase)
        if isinstance(raw, int | float):
            seconds = float(raw)
        elif isinstance(raw, str):
            try:
                seconds = parse_duration(raw)
            except ValueError:
                raise _Bad(phrase) from None
        else:
            raise _Bad(phrase)
        if not math.isfinite(seconds) or seconds < 0 or (positive and seconds == 0):
            raise _Bad(phrase)
        return seconds

    return conv


def _choice(options: tuple[str, ...]) -> Conv:
    phrase = "must be one of " + ", ".join(options)

    def conv(raw: Any, from_env: bool) -> str:
        value = raw.strip() if from_env and isinstance(raw, str) else raw
        if value is False and "off" in options:
            return "off"  # YAML 1.1 reads an unquoted `mode: off` as false
        if not isinstance(value, str) or value not in options:
            raise _Bad(phrase)
        return value

    return conv


def _text(check: Callable[[str], bool] | None = None, phrase: str = "must be a string") -> Conv:
    def conv(raw: Any, from_env: bool) -> str:
        value = raw.strip() if from_env and isinstance(raw, str) else raw
        if not isinstance(value, str) or (check is not None and not check(value)):
            raise _Bad(phrase)
        return value

    return conv


_BIND_RE = re.compile(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.\-]*):(\d{1,5})")


def _is_bind(v: str) -> bool:
    m = _BIND_RE.fullmatch(v)
    return m is not None and 1 <= int(m[2]) <= 65535


_label_key = _text(is_qualified_name, "must be a valid label or annotation key like example.com/name")
_namespace = _text(is_dns1123_label, "must be a namespace name (lower-case letters, digits and '-', at most 63)")
_object_name = _text(is_dns1123_subdomain, "must be a lower-case DNS subdomain name like spotshift-rescheduler")
_bind = _text(_is_bind, "must be an address like 0.0.0.0:8443 or [::]:8443")
_path = _text()


def _scheduler_name(raw: Any, from_env: bool) -> str:
    value = raw.strip() if from_env and isinstance(raw, str) else raw
    if not isinstance(value, str) or (value and not is_dns1123_subdomain(value)):
        raise _Bad("must be empty or a scheduler name like spot-scheduler")
    return value


def _selector(raw: Any, from_env: bool) -> Selector:
    if not isinstance(raw, str):
        raise _Bad("must be a label selector string like key=value, key or key in (a,b)")
    try:
        return Selector.parse(raw)
    except SelectorSyntaxError as e:
        raise _Bad(str(e)) from None


def _seq(item: Conv, *, comma_separated: bool) -> Conv:
    """A list of ``item``. From the environment: a YAML flow list, else comma-separated names
    (``comma_separated``) or a single item (selectors, whose commas are their own)."""

    def conv(raw: Any, from_env: bool) -> tuple[Any, ...]:
        if from_env and isinstance(raw, str):
            text = raw.strip()
            if text.startswith("["):
                try:
                    raw = yaml.safe_load(text)
                except yaml.YAMLError:
                    raise _Bad("must be a YAML flow list like [a, b]") from None
                from_env = False
            elif comma_separated:
                raw = [p.strip() for p in text.split(",") if p.strip()]
            else:
                raw = [text] if text else []
        if not isinstance(raw, list | tuple):
            raise _Bad("must be a list")
        out = []
        for i, x in enumerate(raw):
            try:
                out.append(item(x, from_env))
            except _Bad as e:
                raise _Bad(e.problem, f"[{i}]{e.suffix}", x if e.value is ... else e.value, bare=e.bare) from None
        return tuple(out)

    return conv


_TOLERATION_FIELDS = ("key", "operator", "value", "effect", "tolerationSeconds")


def _toleration(raw: Any, from_env: bool) -> Toleration:
    if not isinstance(raw, Mapping):
        raise _Bad("must be a toleration mapping with key, operator, value and effect")
    for k in raw:
        if k not in _TOLERATION_FIELDS:
            raise _Bad("is not a toleration field (one of " + ", ".join(_TOLERATION_FIELDS) + ")", f".{k}", bare=True)
    key, op = raw.get("key"), raw.get("operator", "Equal")
    value, effect, seconds = raw.get("value", ""), raw.get("effect"), raw.get("tolerationSeconds")
    if not isinstance(key, str) or not is_qualified_name(key):
        raise _Bad(
            "must be a taint key like example.com/name (a key-less toleration would tolerate every taint)", ".key", key
        )
    if op not in ("Equal", "Exists"):
        raise _Bad("must be Equal or Exists", ".operator", op)
    if not isinstance(value, str) or not is_label_value(value) or (op == "Exists" and value):
        phrase = (
            "must be empty with operator Exists" if op == "Exists" else "must be a label value (quote true in YAML)"
        )
        raise _Bad(phrase, ".value", value)
    if effect not in _TAINT_EFFECTS:
        raise _Bad(
            "must be one of " + ", ".join(_TAINT_EFFECTS) + " (an empty effect tolerates every effect)",
            ".effect",
            effect,
        )
    if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, int) or effect != NO_EXECUTE):
        raise _Bad("must be an integer and is only allowed with effect NoExecute", ".tolerationSeconds", seconds)
    return Toleration(key, op, value, effect, seconds)


_tolerations = _seq(_toleration, comma_separated=False)


def _optional_tolerations(raw: Any, from_env: bool) -> tuple[Toleration, ...] | None:
    return None if raw is None else _tolerations(raw, from_env)


def _setting(default: Any, conv: Conv) -> Any:
    return field(default=default, metadata={"conv": conv})


# --- the schema -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeClasses:
    """Which nodes are spot, on-demand or neither (see :mod:`shared.classes`)."""

    presets: tuple[str, ...] = _setting(PRESET_NAMES, _seq(_choice(PRESET_NAMES), comma_separated=True))
    """Provider presets to enable: karpenter, eks, gke-spot, gke-preemptible, aks, spot-worker (default: all)."""
    spot_selectors: tuple[Selector, ...] = _setting((), _seq(_selector, comma_separated=False))
    """Extra label selectors marking spot nodes (``lifecycle=spot``); spot if any preset or selector matches."""
    on_demand_selectors: tuple[Selector, ...] = _setting((), _seq(_selector, comma_separated=False))
    """If set, only non-spot nodes matching one of these are on-demand; empty means every non-spot worker node."""
    control_plane_selectors: tuple[Selector, ...] = _setting(
        CONTROL_PLANE_SELECTORS, _seq(_selector, comma_separated=False)
    )
    """Control-plane nodes: never on-demand, never drained."""
    spot_tolerations: tuple[Toleration, ...] | None = _setting(None, _optional_tolerations)
    """Tolerations the webhook injects; ``null`` means the enabled presets' taints. Explicit key and effect required."""
    extra_reclaim_taints: tuple[str, ...] = _setting((), _seq(_label_key, comma_separated=True))
    """Taint keys of the cluster's own termination tooling that mark a node as being reclaimed."""


@dataclass(frozen=True, slots=True)
class WebhookConfig:
    """The mutating admission webhook (on Pod CREATE)."""

    mode: str = _setting("prefer", _choice(WEBHOOK_MODES))
    """``prefer``: preferred spot affinity plus tolerations; ``tolerate-only``: tolerations only;
    ``require``: required spot affinity plus tolerations (opt-in); ``off``: admit unchanged."""
    weight: int = _setting(100, _integer(1, 100))
    """Weight of the injected preferred node-affinity term (1-100)."""
    excluded_namespaces: tuple[str, ...] = _setting(("kube-system",), _seq(_namespace, comma_separated=True))
    """Namespaces whose pods are never mutated; spotshift's own ``namespace`` is always added."""
    scheduler_name: str = _setting("", _scheduler_name)
    """If set, ``spec.schedulerName`` for mutated pods (a second kube-scheduler with the extender); empty: unchanged."""


@dataclass(frozen=True, slots=True)
class ExtenderConfig:
    """The scheduler extender's ``/filter`` and ``/prioritize``."""

    spot_score: int = _setting(10, _integer(0, 10))
    """Score of a spot node (0-10, ``MaxExtenderPriority`` is 10)."""
    on_demand_score: int = _setting(0, _integer(0, 10))
    """Score of an on-demand node; must not exceed ``spot_score``."""
    other_score: int = _setting(0, _integer(0, 10))
    """Score of a node that is neither spot nor on-demand."""
    filter_reclaimed: bool = _setting(True, _boolean)
    """Whether ``/filter`` drops nodes being reclaimed (termination notices, cordoned, ...)."""


@dataclass(frozen=True, slots=True)
class ReschedulerConfig:
    """The rescheduler's loop; names and defaults follow pusher/k8s-spot-rescheduler's flags."""

    housekeeping_interval: float = _setting(10.0, _duration(positive=True))
    """How often the rescheduler plans (``--housekeeping-interval``, 10s), in seconds."""
    node_drain_delay: float = _setting(600.0, _duration(positive=False))
    """Wait after draining a node before the next one (``--node-drain-delay``, 10m)."""
    pod_eviction_timeout: float = _setting(120.0, _duration(positive=True))
    """How long to retry an eviction refused with 429 (``--pod-eviction-timeout``, 2m)."""
    max_graceful_termination: float = _setting(120.0, _duration(positive=False))
    """How long to wait for evicted pods to be gone before failing the drain (``--max-graceful-termination``, 2m)."""
    replacement_timeout: float = _setting(300.0, _duration(positive=True))
    """How long to wait for the evicted pods' replacements to be Running on spot (5m)."""
    node_backoff: float = _setting(1800.0, _duration(positive=False))
    """How long to leave a node alone after its pods' replacements landed on on-demand again (30m)."""
    max_nodes_per_cycle: int = _setting(1, _integer(1))
    """At most this many nodes drained per housekeeping cycle."""
    drain_taint: str = _setting("prefer-no-schedule", _choice(DRAIN_TAINT_MODES))
    """How a node being drained is kept from new pods: a ``PreferNoSchedule`` taint, or ``cordon``."""
    drain_taint_key: str = _setting("spotshift.io/draining", _label_key)
    """Key of the rescheduler's own taint (found and removed again after a restart)."""
    keep_drained_tainted: bool = _setting(True, _boolean)
    """Once a drained node is empty, keep its taint (or cordon) so the autoscaler removes it without pods
    coming back; false makes the node schedulable again."""
    dry_run: bool = _setting(False, _boolean)
    """Plan and report, never taint or evict."""
    leader_elect: bool = _setting(True, _boolean)
    """Run only while holding the ``coordination.k8s.io`` Lease ``lease_name`` in ``namespace``."""
    lease_name: str = _setting("spotshift-rescheduler", _object_name)
    """Name of the leader-election Lease."""
    metrics_bind: str = _setting("0.0.0.0:9235", _bind)
    """Address of the Prometheus metrics endpoint (pusher's ``--listen-address`` port)."""


@dataclass(frozen=True, slots=True)
class MovabilityConfig:
    """Which pods may be moved (:mod:`shared.movable`), read by the rescheduler and the webhook alike."""

    delete_non_replicated_pods: bool = _setting(False, _boolean)
    """Move pods without a controller (``--delete-non-replicated-pods``); they are not recreated."""
    allow_local_storage: bool = _setting(False, _boolean)
    """Move pods with hostPath or disk-backed emptyDir volumes (their data is lost)."""
    kube_system_without_pdb_blocks: bool = _setting(True, _boolean)
    """kube-system pods without a PodDisruptionBudget block their node, like cluster-autoscaler."""
    expendable_priority_cutoff: int = _setting(-10, _integer())
    """Pods with a priority below this neither block nor move (``--expendable-pods-priority-cutoff``)."""
    opt_out_key: str = _setting("spotshift.io/exclude", _label_key)
    """A pod label or annotation with value ``"true"``: not mutated by the webhook, never moved."""


@dataclass(frozen=True, slots=True)
class SpotCeilingConfig:
    """Per-workload spot ceilings, set on the pod template, enforced by the extender and the rescheduler."""

    max_spot_percent_annotation: str = _setting("spotshift.io/max-spot-percent", _label_key)
    """Annotation: at most this percentage (0-100) of a workload's pods on spot."""
    min_on_demand_annotation: str = _setting("spotshift.io/min-on-demand", _label_key)
    """Annotation: at least this many of a workload's pods on on-demand nodes."""
    default_max_spot_percent: int = _setting(100, _integer(0, 100))
    """Ceiling for workloads without the annotation."""
    default_min_on_demand: int = _setting(0, _integer(0))
    """On-demand floor for workloads without the annotation."""


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """The HTTPS server that serves the webhook and the extender."""

    bind: str = _setting("0.0.0.0:8443", _bind)
    """Listen address."""
    tls_cert_file: str = _setting("", _path)
    """PEM certificate file; empty (with ``tls_key_file`` empty) serves plain HTTP."""
    tls_key_file: str = _setting("", _path)
    """PEM private key file, set together with ``tls_cert_file``."""


@dataclass(frozen=True, slots=True)
class Config:
    """Everything configurable, one schema for the three parts. ``Config()`` is the default."""

    namespace: str = _setting("spotshift", _namespace)
    """The namespace spotshift runs in: excluded from the webhook, home of the leader-election Lease."""
    node_classes: NodeClasses = field(default_factory=NodeClasses, metadata={"section": NodeClasses})
    webhook: WebhookConfig = field(default_factory=WebhookConfig, metadata={"section": WebhookConfig})
    extender: ExtenderConfig = field(default_factory=ExtenderConfig, metadata={"section": ExtenderConfig})
    rescheduler: ReschedulerConfig = field(default_factory=ReschedulerConfig, metadata={"section": ReschedulerConfig})
    movability: MovabilityConfig = field(default_factory=MovabilityConfig, metadata={"section": MovabilityConfig})
    spot_ceiling: SpotCeilingConfig = field(default_factory=SpotCeilingConfig, metadata={"section": SpotCeilingConfig})
    server: ServerConfig = field(default_factory=ServerConfig, metadata={"section": ServerConfig})

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


def _fail(path: str, problem: str, value: Any = ..., env_name: str | None = None, *, bare: bool = False) -> ConfigError:
    src = f" (from {env_name})" if env_name else ""
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


def _env_overrides(env: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    out: dict[str, tuple[str, str]] = {}
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


def _build(
    cls: type, data: Mapping[str, Any], prefix: str, overrides: dict[str, tuple[str, str]], origin: dict[str, str]
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
        env_name: str | None = None
        if path in overrides:
            env_name, raw = overrides[path]
            from_env = True
            origin[path] = env_name
        elif f.name in data:
            raw, from_env = data[f.name], False
        else:
            continue
        try:
            kwargs[f.name] = f.metadata["conv"](raw, from_env)
        except _Bad as e:
            raise _fail(path + e.suffix, e.problem, raw if e.value is ... else e.value, env_name, bare=e.bare) from None
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
        return _fail(path, problem, value, origin.get(path))

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
    server = config.server
    if bool(server.tls_cert_file) != bool(server.tls_key_file):
        missing = "server.tls_key_file" if server.tls_cert_file else "server.tls_cert_file"
        other = "server.tls_cert_file" if server.tls_cert_file else "server.tls_key_file"
        raise fail(missing, f"must be set together with {other}", "")


def parse_config(data: Any, env: Mapping[str, str] | None = None, *, source: str = "configuration") -> Config:
    """Validate parsed YAML (``None`` for an empty file) plus environment overrides into a :class:`Config`."""
    if data is None:
        data = {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: must be a mapping of settings at the top level, got {_show(data)}.")
    origin: dict[str, str] = {}
    config = _build(Config, data, "", _env_overrides(env or {}), origin)
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


def load_config(path: str | None, env: Mapping[str, str]) -> Config:
    """Read the YAML file at ``path`` (or ``env["SPOTSHIFT_CONFIG"]``; neither: defaults) plus ``env``.

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
    return parse_config(data, env, source=f"config file {path}" if path else "configuration")
