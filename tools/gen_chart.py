"""Write what deploy/chart/spotshift takes from elsewhere, so it cannot drift from its source.

    python3 tools/gen_chart.py           copy deploy/dashboards' files into the chart, rewrite the values table
                                         of docs/install.md
    python3 tools/gen_chart.py --check   exit 1 if either is stale

- ``deploy/chart/spotshift/files/``: the PrometheusRule, the PodMonitors and the Grafana dashboard of
  ``deploy/dashboards`` (a chart can read only its own files), byte for byte.
- docs/install.md's Helm values table, from ``values.schema.json`` (every leaf: its dotted key, type, allowed values and
  description) with each default from ``values.yaml``.

``tests/unit/test_chart.py`` fails when either is stale.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy/chart/spotshift"
DASHBOARDS = ROOT / "deploy/dashboards"
COPIED = ("prometheusrule.yaml", "podmonitors.yaml", "spotshift-dashboard.json")
INSTALL_PAGE = ROOT / "docs" / "install.md"
VALUES_BEGIN = "<!-- generated: chart values (python3 tools/gen_chart.py) -->"
END = "<!-- end of generated section -->"


def _leaves(schema: Mapping[str, Any], path: str = "") -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Each value a user sets: schema leaves, and objects shown whole where their keys are free or carry no
    description of their own (CPU and memory requests and limits)."""
    props = schema.get("properties")
    closed = schema.get("type") == "object" and props and schema.get("additionalProperties") is False
    if closed and all("description" in sub for sub in props.values()):
        for name, sub in props.items():
            yield from _leaves(sub, f"{path}.{name}" if path else name)
    else:
        yield path, schema


def _default(values: Mapping[str, Any], path: str) -> Any:
    node: Any = values
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _type(schema: Mapping[str, Any]) -> str:
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    kinds = schema.get("type") or [s.get("type", "?") for s in schema.get("anyOf", [])]
    return " \\| ".join(kinds) if isinstance(kinds, list) else str(kinds)


def values_table() -> str:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    lines = ["| value | type | default | description |", "|---|---|---|---|"]
    for path, leaf in _leaves(schema):
        value = _default(values, path)
        default = "unset" if value is None else f"`{json.dumps(value, separators=(', ', ': '))}`"
        description = leaf.get("description", "").replace("|", "\\|")
        lines.append(f"| `{path}` | {_type(leaf)} | {default} | {description} |")
    return "\n".join(lines)


def updated_install_page(text: str) -> str:
    """docs/install.md's text with the values table rewritten (raises ValueError if a marker is missing)."""
    start = text.index(VALUES_BEGIN) + len(VALUES_BEGIN)
    stop = text.index(END, start)
    return text[:start] + "\n" + values_table() + "\n" + text[stop:]


def stale_files() -> list[str]:
    return [name for name in COPIED if (CHART / "files" / name).read_bytes() != (DASHBOARDS / name).read_bytes()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the chart's copies or docs/install.md are stale"
    )
    args = parser.parse_args(argv)
    current = INSTALL_PAGE.read_text(encoding="utf-8")
    wanted = updated_install_page(current)
    if args.check:
        stale = stale_files() + (["docs/install.md"] if wanted != current else [])
        if stale:
            print(f"stale: {', '.join(stale)}; run python3 tools/gen_chart.py", file=sys.stderr)
            return 1
        return 0
    (CHART / "files").mkdir(exist_ok=True)
    for name in COPIED:
        (CHART / "files" / name).write_bytes((DASHBOARDS / name).read_bytes())
    INSTALL_PAGE.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
