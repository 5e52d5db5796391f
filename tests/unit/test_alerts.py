"""The PrometheusRule and the dashboard, judged by Prometheus's own promtool (built by ``tools/promtool.sh``).

- ``promtool check rules`` on the PrometheusRule the Helm chart renders (``monitoring.prometheusRule``; the
  chart renders deploy/dashboards' rule, tests/unit/test_chart.py checks they agree);
- ``promtool test rules`` with ``tests/unit/prometheus/alerts_test.yaml``: for every alert at least one case
  where it fires and one where it stays silent (checked here, so a new alert without cases fails), each alert's
  labels and every annotation compared;
- every query of the dashboard parses (``promtool promql format``), with Grafana's interval variables replaced.

Which metric names they may use is tests/unit/test_dashboards.py's (the code's collectors) and the e2e tier's
(the running servers' /metrics, tests/e2e/test_helm_e2e.py).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.gotools import helm_binary, promtool_binary, run_tool

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy/chart/spotshift"
CASES = Path(__file__).resolve().parent / "prometheus" / "alerts_test.yaml"
RULES_FILE = "spotshift-rules.yaml"
GRAFANA_INTERVALS = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}


def rendered_rule() -> dict[str, Any]:
    values = ("--set", "provider=gke", "--set", "monitoring.prometheusRule=true")
    done = run_tool(
        [
            helm_binary(),
            "template",
            "spotshift",
            str(CHART),
            "-n",
            "spotshift",
            *values,
            "-s",
            "templates/monitoring.yaml",
        ]
    )
    assert done.returncode == 0, done.stderr
    (rule,) = [d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] == "PrometheusRule"]
    return dict(rule)


def rules() -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in rendered_rule()["spec"]["groups"] for r in g["rules"]}


def write_rules(directory: Path) -> Path:
    path = directory / RULES_FILE
    path.write_text(yaml.safe_dump({"groups": rendered_rule()["spec"]["groups"]}, sort_keys=False))
    return path


def completed_cases(cases: dict[str, Any], alerts: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The cases with each expected alert's fixed annotations copied from its rule; an annotation that is a
    template must be written in the case (its text depends on the series)."""
    out = copy.deepcopy(cases)
    for test in out["tests"]:
        for check in test["alert_rule_test"]:
            for expected in check["exp_alerts"]:
                given = expected.setdefault("exp_annotations", {})
                for name, text in alerts[check["alertname"]]["annotations"].items():
                    if name in given:
                        continue
                    assert "{{" not in text, f"{test['name']}: {check['alertname']}'s {name} is a template: write it"
                    given[name] = text
    return out


def run_cases(tmp_path: Path, cases: dict[str, Any]) -> Any:
    write_rules(tmp_path)
    path = tmp_path / "alerts_test.yaml"
    path.write_text(yaml.safe_dump(completed_cases(cases, rules()), sort_keys=False))
    return run_tool([promtool_binary(), "test", "rules", path.name], cwd=tmp_path)


def load_cases() -> dict[str, Any]:
    return dict(yaml.safe_load(CASES.read_text()))


def test_promtool_checks_the_rendered_rules(tmp_path: Path) -> None:
    done = run_tool([promtool_binary(), "check", "rules", str(write_rules(tmp_path))])
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


def test_every_alert_has_a_firing_and_a_silent_case() -> None:
    fired: dict[str, int] = {}
    silent: dict[str, int] = {}
    for test in load_cases()["tests"]:
        for check in test["alert_rule_test"]:
            counts = fired if check["exp_alerts"] else silent
            counts[check["alertname"]] = counts.get(check["alertname"], 0) + 1
    alerts = set(rules())
    assert set(fired) | set(silent) <= alerts, "cases for alerts the rule does not have"
    assert alerts - set(fired) == set(), "alerts no case sees firing"
    assert alerts - set(silent) == set(), "alerts no case sees silent"


def test_promtool_runs_the_alert_cases(tmp_path: Path) -> None:
    done = run_cases(tmp_path, load_cases())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


@pytest.mark.parametrize(
    "change",
    ["severity", "summary", "silent"],
)
def test_a_wrong_expectation_fails(tmp_path: Path, change: str) -> None:
    """The harness can fail: one expectation changed, promtool reports it."""
    cases = load_cases()
    checks = [c for t in cases["tests"] for c in t["alert_rule_test"]]
    if change == "severity":
        alert = next(c for c in checks if c["alertname"] == "SpotshiftCertificateExpired" and c["exp_alerts"])
        alert["exp_alerts"][0]["exp_labels"]["severity"] = "warning"
    elif change == "summary":
        alert = next(c for c in checks if c["alertname"] == "SpotshiftWebhookSlow" and c["exp_alerts"])
        alert["exp_alerts"][0]["exp_annotations"]["summary"] = "spotshift webhook p99 latency is 1s."
    else:
        alert = next(c for c in checks if c["alertname"] == "SpotshiftNodeCacheEmpty" and not c["exp_alerts"])
        alert["exp_alerts"] = [{"exp_labels": {"severity": "warning"}}]
    done = run_cases(tmp_path, cases)
    assert done.returncode != 0 and alert["alertname"] in done.stdout + done.stderr


def dashboard_queries() -> list[str]:
    dashboard = json.loads((CHART / "files" / "spotshift-dashboard.json").read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_every_dashboard_query_parses() -> None:
    queries = dashboard_queries()
    assert queries
    for query in queries:
        for variable, value in GRAFANA_INTERVALS.items():
            query = query.replace(variable, value)
        assert "$" not in query, f"a Grafana variable the test does not know: {query}"
        done = run_tool([promtool_binary(), "--experimental", "promql", "format", query])
        assert done.returncode == 0, f"{query}: {done.stderr}"


def test_a_broken_query_does_not_parse() -> None:
    done = run_tool([promtool_binary(), "--experimental", "promql", "format", "sum(rate(spotshift_x[5m])"])
    assert done.returncode != 0
