"""Write the documentation's configuration and metrics references from the code, so they cannot drift from it.

    python3 tools/gen_reference.py           rewrite the generated sections of docs/configuration.md, docs/metrics.md
    python3 tools/gen_reference.py --check   exit 1 if either page differs from what the code says

The configuration table comes from :mod:`shared.config`: every setting's dotted path and ``SPOTSHIFT_*``
variable (:func:`shared.config.env_names`), its default (the dataclass default), and its description (the
attribute docstring under the field, read from the source with :mod:`ast`, since Python keeps no such
docstrings at run time). Each setting also needs an example in :data:`EXAMPLES`; every example is validated
by the real loader, and a setting without one is an error, so a setting cannot reach the
documentation undocumented.

The metrics table comes from the collectors themselves (:mod:`extender.metrics`, :class:`rescheduler.metrics.
Metrics`), with the names Prometheus scrapes (``_total`` for counters, ``_bucket``/``_sum``/``_count`` for
histograms); :func:`exported_series` is also what ``tests/unit/test_dashboards.py`` checks the dashboard and
the alerts against. ``tests/unit/test_readme_reference.py`` fails when either page is stale.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python3 tools/gen_reference.py` from anywhere
    sys.path.insert(0, str(ROOT))

from shared import config as config_module  # noqa: E402
from shared import config_sections  # noqa: E402
from shared.classes import Selector  # noqa: E402
from shared.config import Config, parse_config  # noqa: E402
from shared.model import Toleration  # noqa: E402

CONFIG_PAGE = ROOT / "docs" / "configuration.md"
METRICS_PAGE = ROOT / "docs" / "metrics.md"
CONFIG_BEGIN = "<!-- generated: configuration reference (python3 tools/gen_reference.py) -->"
METRICS_BEGIN = "<!-- generated: metrics reference (python3 tools/gen_reference.py) -->"
END = "<!-- end of generated section -->"

EXAMPLES: dict[str, str] = {
    "namespace": "platform-spot",
    "node_classes.presets": "[karpenter, aks]",
    "node_classes.spot_selectors": '["lifecycle=spot"]',
    "node_classes.on_demand_selectors": '["node-role.kubernetes.io/worker"]',
    "node_classes.control_plane_selectors": '["node-role.kubernetes.io/control-plane", "role=infra"]',
    "node_classes.spot_tolerations": "[{key: spot, operator: Equal, value: 'true', effect: NoSchedule}]",
    "node_classes.extra_reclaim_taints": "[example.com/draining]",
    "webhook.mode": "tolerate-only",
    "webhook.weight": "50",
    "webhook.excluded_namespaces": "[kube-system, monitoring]",
    "webhook.scheduler_name": "spotshift-scheduler",
    "extender.spot_score": "8",
    "extender.on_demand_score": "2",
    "extender.other_score": "1",
    "extender.filter_reclaimed": "false",
    "rescheduler.housekeeping_interval": "30s",
    "rescheduler.node_drain_delay": "5m",
    "rescheduler.pod_eviction_timeout": "5m",
    "rescheduler.max_graceful_termination": "1m",
    "rescheduler.replacement_timeout": "10m",
    "rescheduler.node_backoff": "1h",
    "rescheduler.max_nodes_per_cycle": "2",
    "rescheduler.pdb_rule": "all-at-once",
    "rescheduler.drain_taint": "cordon",
    "rescheduler.drain_taint_key": "example.com/spotshift-draining",
    "rescheduler.keep_drained_tainted": "false",
    "rescheduler.dry_run": "true",
    "rescheduler.leader_elect": "false",
    "rescheduler.lease_name": "spotshift-rescheduler-prod",
    "rescheduler.metrics_bind": "127.0.0.1:9235",
    "movability.delete_non_replicated_pods": "true",
    "movability.allow_local_storage": "true",
    "movability.kube_system_without_pdb_blocks": "false",
    "movability.expendable_priority_cutoff": "-100",
    "movability.opt_out_key": "example.com/no-spot",
    "movability.do_not_disrupt_pod_annotations": "[karpenter.sh/do-not-disrupt, example.com/keep]",
    "movability.do_not_disrupt_node_annotations": "[karpenter.sh/do-not-disrupt]",
    "spot_ceiling.max_spot_percent_annotation": "example.com/max-spot",
    "spot_ceiling.min_on_demand_annotation": "example.com/min-on-demand",
    "spot_ceiling.default_max_spot_percent": "70",
    "spot_ceiling.default_min_on_demand": "1",
    "server.bind": "0.0.0.0:9443",
    "server.tls_cert_file": "/etc/spotshift/tls/tls.crt",
    "server.tls_key_file": "/etc/spotshift/tls/tls.key",
    "disruption.budgets": '[{nodes: "20%"}, {nodes: "0", schedule: "0 8 * * mon-fri", duration: 10h}]',
    "disruption.time_zone": "Europe/Berlin",
    "disruption.min_pod_age": "10m",
    "disruption.min_target_age": "5m",
    "disruption.namespaces": "[shop, batch]",
    "disruption.excluded_namespaces": "[payments]",
    "disruption.pod_selector": '"tier!=critical"',
    "disruption.min_replicas": "2",
    "disruption.jobs": "wait",
    "disruption.job_timeout": "2h",
    "capacity.enabled": "true",
    "capacity.timeout": "15m",
    "capacity.max_pods": "50",
    "capacity.max_cpu": "32",
    "capacity.max_memory": "128Gi",
    "capacity.priority_class_name": "spot-capacity-placeholder",
    "capacity.image": "registry.internal/pause:3.9",
    "karpenter.defer_to_consolidation": "false",
    "worth.enabled": "false",
    "worth.spot_price_ratio": "0.35",
    "worth.removal_delay": "15m",
    "worth.expected_stay": "4h",
    "worth.horizon": "12h",
    "worth.default_start_up": "1m",
    "worth.volume_attach_time": "90s",
    "worth.eviction_cost": "1.0",
    "worth.margin": "1.5",
    "spot.stability_window": "1h",
    "spot.memory": "12h",
}
"""One example value per setting, in YAML flow style."""

_DEFAULT_TEXT: dict[str, str] = {"disruption.pod_selector": '"" (every pod)'}
"""Defaults that read better in words than as the value (``null``)."""

# Examples that are only valid together with another setting (the loader rejects them alone).
_COMPANIONS: dict[str, dict[str, Any]] = {
    "server.tls_cert_file": {"server": {"tls_key_file": "/k"}},
    "server.tls_key_file": {"server": {"tls_cert_file": "/c"}},
}


@dataclass(frozen=True, slots=True)
class Setting:
    path: str
    env: str
    default: str
    example: str
    doc: str


def _attribute_docs() -> dict[str, dict[str, str]]:
    """Class name → field name → the docstring written under the field (shared/config.py, config_sections.py)."""
    out: dict[str, dict[str, str]] = {}
    body_of_both: list[ast.stmt] = []
    for module in (config_module, config_sections):
        body_of_both += ast.parse(Path(str(module.__file__)).read_text(encoding="utf-8")).body
    for cls in body_of_both:
        if not isinstance(cls, ast.ClassDef):
            continue
        docs: dict[str, str] = {}
        body = cls.body
        for stmt, nxt in zip(body, [*body[1:], None], strict=True):
            if (
                isinstance(stmt, ast.AnnAssign)
                and isinstance(stmt.target, ast.Name)
                and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant)
                and isinstance(nxt.value.value, str)
            ):
                docs[stmt.target.id] = nxt.value.value
        out[cls.name] = docs
    return out


def _fields(cls: type, prefix: str = "") -> Iterator[tuple[str, type, dataclasses.Field[Any]]]:
    for f in dataclasses.fields(cls):
        section = f.metadata.get("section")
        if section is not None:
            yield from _fields(section, f"{prefix}{f.name}.")
        else:
            yield prefix + f.name, cls, f


def _is_number(f: dataclasses.Field[Any]) -> bool:
    """Whether the setting is a plain number (``config_values.number``), not a duration in seconds."""
    return str(getattr(f.metadata.get("conv"), "__qualname__", "")).startswith("number.")


def _show(value: Any) -> str:
    """A default as the YAML a person would write: durations as ``10s``/``10m``, lists in flow style."""
    if value is None:
        return "null (the presets' taints)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        seconds = int(value)
        if seconds and seconds % 3600 == 0:
            return f"{seconds // 3600}h"
        if seconds and seconds % 60 == 0:
            return f"{seconds // 60}m"
        return f"{value:g}s"
    if isinstance(value, str):
        return f'"{value}"' if value == "" else value
    if isinstance(value, tuple):
        return "[" + ", ".join(_show_item(v) for v in value) + "]"
    return str(value)


def _show_item(value: Any) -> str:
    if isinstance(value, Selector):
        return f'"{value.text}"'
    if isinstance(value, Toleration):
        return f"{{key: {value.key}, value: {value.value}, effect: {value.effect}}}"
    return _show(value)


def _markdown(text: str) -> str:
    """An RST-flavoured docstring as one Markdown table cell."""
    return " ".join(text.replace("``", "`").split()).replace("|", "\\|")


def check_example(path: str, example: str) -> None:
    value = yaml.safe_load(example)
    data: dict[str, Any] = {}
    node = data
    *parents, leaf = path.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
    for section, extra in _COMPANIONS.get(path, {}).items():
        data.setdefault(section, {}).update(extra)
    parse_config(data)  # raises ConfigError: the example is wrong


def settings() -> list[Setting]:
    """Every configuration setting, in the schema's order."""
    docs = _attribute_docs()
    env = {path: name for name, path in config_module.env_names().items()}
    defaults = Config()
    out = []
    for path, cls, f in _fields(Config):
        value: Any = defaults
        for part in path.split("."):
            value = getattr(value, part)
        example = EXAMPLES.get(path)
        if example is None:
            raise KeyError(f"tools/gen_reference.py: EXAMPLES has no example for the setting {path}")
        check_example(path, example)
        doc = docs.get(cls.__name__, {}).get(f.name)
        if not doc:
            raise KeyError(f"shared/config_sections.py: the setting {path} has no docstring under its field")
        shown = f"{value:g}" if _is_number(f) else _show(value)
        out.append(Setting(path, env[path], _DEFAULT_TEXT.get(path) or shown, example, _markdown(doc)))
    unknown = set(EXAMPLES) - {s.path for s in out}
    if unknown:
        raise KeyError(f"tools/gen_reference.py: EXAMPLES names settings that do not exist: {sorted(unknown)}")
    return out


def config_reference() -> str:
    lines = [
        "| setting | default | example | environment variable | what it does |",
        "|---|---|---|---|---|",
    ]
    for s in settings():
        lines.append(f"| `{s.path}` | `{s.default}` | `{s.example}` | `{s.env}` | {s.doc} |")
    return "\n".join(lines)


# --- metrics ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MetricFamily:
    name: str
    kind: str
    labels: tuple[str, ...]
    doc: str
    part: str

    @property
    def series(self) -> tuple[str, ...]:
        """The names Prometheus scrapes for this family."""
        if self.kind == "counter":
            return (self.name + "_total", self.name + "_created")
        if self.kind == "histogram":
            return tuple(self.name + s for s in ("_bucket", "_sum", "_count", "_created"))
        return (self.name,)

    @property
    def shown(self) -> str:
        return {"counter": self.name + "_total", "histogram": self.name + "_bucket/_sum/_count"}.get(
            self.kind, self.name
        )


def metric_families() -> list[MetricFamily]:
    """Every metric family the code exports: the webhook/extender server's, then the rescheduler's."""
    from prometheus_client.metrics import MetricWrapperBase

    from extender import metrics as extender_metrics
    from rescheduler.metrics import Metrics

    out: list[MetricFamily] = []
    sources = (
        ("webhook + extender", vars(extender_metrics).values()),
        ("rescheduler", vars(Metrics()).values()),
    )
    for part, objects in sources:
        for obj in objects:
            if not isinstance(obj, MetricWrapperBase):
                continue
            (family,) = obj.describe()
            labels = tuple(getattr(obj, "_labelnames", ()))
            out.append(MetricFamily(family.name, family.type, labels, family.documentation, part))
    return out


def exported_series() -> set[str]:
    """Every series name a scrape of spotshift can return."""
    return {name for family in metric_families() for name in family.series}


def metrics_reference() -> str:
    lines = ["| metric | type | labels | part | what it measures |", "|---|---|---|---|---|"]
    for m in metric_families():
        labels = ", ".join(f"`{label}`" for label in m.labels) or "-"
        lines.append(f"| `{m.shown}` | {m.kind} | {labels} | {m.part} | {_markdown(m.doc)} |")
    return "\n".join(lines)


# --- the pages -------------------------------------------------------------------------------------------------


def _replace(text: str, begin: str, body: str) -> str:
    start = text.index(begin) + len(begin)
    stop = text.index(END, start)
    return text[:start] + "\n" + body + "\n" + text[stop:]


def updated_config_page(text: str) -> str:
    """docs/configuration.md's text with its settings table rewritten (raises ValueError if the marker is missing)."""
    return _replace(text, CONFIG_BEGIN, config_reference())


def updated_metrics_page(text: str) -> str:
    """docs/metrics.md's text with its metrics table rewritten (raises ValueError if the marker is missing)."""
    return _replace(text, METRICS_BEGIN, metrics_reference())


PAGES = ((CONFIG_PAGE, updated_config_page), (METRICS_PAGE, updated_metrics_page))
"""Each generated page and the function that rewrites its text."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a page is not up to date")
    args = parser.parse_args(argv)
    stale = 0
    for page, updated in PAGES:
        name = page.relative_to(ROOT)
        current = page.read_text(encoding="utf-8")
        wanted = updated(current)
        if wanted == current:
            continue
        if args.check:
            print(f"{name}: the generated reference is stale; run python3 tools/gen_reference.py", file=sys.stderr)
            stale += 1
        else:
            page.write_text(wanted, encoding="utf-8")
            print(f"{name}: reference updated")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
