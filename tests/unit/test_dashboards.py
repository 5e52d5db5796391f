"""deploy/dashboards: the Grafana dashboard and the PrometheusRule are well formed and use only real metrics.

Every metric name in a PromQL expression must be one the code exports (collected from the collectors in
extender/metrics.py and rescheduler/metrics.py, with the ``_total``/``_bucket``/``_sum``/``_count`` names
Prometheus scrapes), so renaming a metric fails here; every exported family must be on the dashboard.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import yaml

from tests.support.kustomize import render_text
from tools.gen_reference import exported_series, metric_families

DASHBOARDS = Path(__file__).resolve().parents[2] / "deploy" / "dashboards"
METRIC = re.compile(r"\bspotshift_[a-z0-9_]+\b")
PANEL_TYPES = {"row", "stat", "timeseries", "gauge", "bargauge", "table"}


def dashboard() -> dict[str, Any]:
    return json.loads((DASHBOARDS / "spotshift-dashboard.json").read_text())


def rule() -> dict[str, Any]:
    return yaml.safe_load((DASHBOARDS / "prometheusrule.yaml").read_text())


def dashboard_exprs() -> list[str]:
    return [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])]


def rule_exprs() -> list[str]:
    return [r["expr"] for g in rule()["spec"]["groups"] for r in g["rules"]]


def balanced(expr: str) -> bool:
    """Brackets nest and quotes close: the PromQL mistakes a structure check can see."""
    stack: list[str] = []
    pairs = {")": "(", "]": "[", "}": "{"}
    in_string = False
    for ch in expr:
        if ch == '"':
            in_string = not in_string
        elif in_string:
            continue
        elif ch in "([{":
            stack.append(ch)
        elif ch in pairs and (not stack or stack.pop() != pairs[ch]):
            return False
    return not stack and not in_string


def test_the_dashboard_is_a_grafana_dashboard() -> None:
    d = dashboard()
    assert d["title"] == "spotshift" and d["uid"] == "spotshift"
    assert isinstance(d["schemaVersion"], int) and d["schemaVersion"] >= 36
    (variable,) = d["templating"]["list"]
    assert (variable["name"], variable["type"], variable["query"]) == ("datasource", "datasource", "prometheus")
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"


def test_every_panel_has_a_place_a_type_and_queries() -> None:
    occupied: set[tuple[int, int]] = set()
    for p in dashboard()["panels"]:
        assert p["type"] in PANEL_TYPES, p["title"]
        g = p["gridPos"]
        assert all(isinstance(g[k], int) and g[k] >= 0 for k in ("x", "y", "w", "h")), p["title"]
        assert g["w"] >= 1 and g["x"] + g["w"] <= 24, p["title"]
        cells = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not cells & occupied, f"panel {p['title']!r} overlaps another"
        occupied |= cells
        if p["type"] == "row":
            continue
        assert p["title"] and p.get("description"), "every panel says what it shows"
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        targets = p["targets"]
        assert targets, p["title"]
        assert len({t["refId"] for t in targets}) == len(targets)
        for t in targets:
            assert t["expr"].strip() and balanced(t["expr"]), t["expr"]
            assert t["datasource"] == p["datasource"]


def test_the_dashboard_and_the_alerts_use_only_metrics_the_code_exports() -> None:
    exported = exported_series()
    for expr in dashboard_exprs() + rule_exprs():
        names = set(METRIC.findall(expr))
        assert names, f"no spotshift metric in {expr!r}"
        assert names <= exported, f"{sorted(names - exported)} in {expr!r} are not exported by the code"


def test_every_exported_metric_is_on_the_dashboard() -> None:
    used = {n for expr in dashboard_exprs() for n in METRIC.findall(expr)}
    for family in metric_families():
        assert used & set(family.series), f"{family.name} is not on the dashboard"


def test_a_renamed_metric_would_fail() -> None:
    exported = exported_series()
    assert "spotshift_rescheduler_evictions_total" in exported
    assert "spotshift_rescheduler_evictions" not in exported, "counters are scraped with _total"
    assert "spotshift_http_request_duration_seconds_bucket" in exported


def test_the_prometheus_rule_alerts_on_a_failing_rescheduler_and_webhook() -> None:
    doc = rule()
    assert (doc["apiVersion"], doc["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    rules = [r for g in doc["spec"]["groups"] for r in g["rules"]]
    names = Counter(r["alert"] for r in rules)
    assert all(n == 1 for n in names.values()), names
    for r in rules:
        assert balanced(r["expr"]), r["expr"]
        assert re.fullmatch(r"\d+[smh]", r["for"]), r["for"]
        assert r["labels"]["severity"] in ("critical", "warning", "info")
        assert r["annotations"]["summary"] and r["annotations"]["description"]
    for wanted in (
        "SpotshiftReschedulerAbsent",
        "SpotshiftReschedulerNoLeader",
        "SpotshiftReschedulerStalled",
        "SpotshiftDrainsFailing",
        "SpotshiftWebhookErrors",
        "SpotshiftWebhookSlow",
        "SpotshiftExtenderErrors",
        "SpotshiftCertificateExpiresSoon",
        "SpotshiftCertificateExpired",
    ):
        assert wanted in names


def test_the_kustomization_renders_the_rule_monitors_and_dashboard() -> None:
    docs = list(yaml.safe_load_all(render_text(DASHBOARDS)))
    kinds = Counter(d["kind"] for d in docs)
    assert kinds == {"ConfigMap": 1, "PrometheusRule": 1, "PodMonitor": 2}
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["spotshift-dashboard.json"]) == dashboard()
    assert all(d["metadata"]["namespace"] == "spotshift" for d in docs)
