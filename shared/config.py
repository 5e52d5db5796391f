"""One configuration schema for the webhook, the extender and the rescheduler, validated at load.

The three parts must agree on what "spot", "fits" and "movable" mean, so they read one
:class:`Config`. ``Config()`` is the default configuration: every provider preset enabled, a node
is spot when a preset matches and on-demand when it is neither spot nor control-plane, the spot
tolerations are the presets' taints, and the rescheduler's options have
pusher/k8s-spot-rescheduler's meanings and defaults.

Sources, later wins:

1. the defaults (the sections in :mod:`shared.config_sections`);
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

YAML keys are the sections' field names (snake_case); the embedded Kubernetes tolerations keep the
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
from shared.config_sections import (
    DRAIN_TAINT_MODES,
    JOB_MODES,
    JOBS_BLOCK,
    JOBS_EVICT,
    JOBS_WAIT,
    PDB_ALL_AT_ONCE,
    PDB_RATE_LIMIT,
    PDB_RULES,
    WEBHOOK_MODES,
    CapacityConfig,
    DisruptionConfig,
    ExtenderConfig,
    KarpenterConfig,
    MovabilityConfig,
    NodeClasses,
    ReschedulerConfig,
    ServerConfig,
    SpotCeilingConfig,
    SpotConfig,
    WebhookConfig,
    WorthConfig,
)
from shared.config_values import parse_duration
from shared.presets import PRESETS
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
    "CapacityConfig",
    "KarpenterConfig",
    "WorthConfig",
    "SpotConfig",
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


class ConfigError(ValueError):
    """A configuration that cannot be used; the message is one sentence naming the field path."""


# --- the schema -----------------------------------------------------------------------------------


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
    capacity: CapacityConfig = field(default_factory=CapacityConfig, metadata={"section": CapacityConfig})
    karpenter: KarpenterConfig = field(default_factory=KarpenterConfig, metadata={"section": KarpenterConfig})
    worth: WorthConfig = field(default_factory=WorthConfig, metadata={"section": WorthConfig})
    spot: SpotConfig = field(default_factory=SpotConfig, metadata={"section": SpotConfig})

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
    """``SPOTSHIFT_*`` variable → field path, for every setting (the reference table of docs/configuration.md)."""
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
    pools = config.spot
    if pools.stability_window > pools.memory:
        raise fail(
            "spot.stability_window",
            f"must not be longer than spot.memory ({pools.memory:g}s), or a reclaim is forgotten while its pool is "
            "unsettled",
            pools.stability_window,
        )
    cap = config.capacity
    if cap.enabled and cap.timeout <= config.rescheduler.housekeeping_interval:
        raise fail(
            "capacity.timeout",
            f"must be longer than rescheduler.housekeeping_interval ({config.rescheduler.housekeeping_interval:g}s), "
            "or placeholders are deleted before a cycle can see them Running",
            cap.timeout,
        )
    worth = config.worth
    if worth.removal_delay >= worth.horizon:
        raise fail(
            "worth.removal_delay",
            f"must be shorter than worth.horizon ({worth.horizon:g}s), or no drain could save anything",
            worth.removal_delay,
        )


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
