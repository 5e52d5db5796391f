"""``spot-rescheduler plan --output html``: the plan as one self-contained page, a picture an operator can share.

Every spot and on-demand node is drawn as a bin of CPU and memory, before and after the plan: the requests of
the pods that stay, the pods that leave (on their node, before) and arrive (on their target, after), each
pod a segment with its name on hover. Drained nodes are marked, nodes that stay say why (the planner's one
sentence), each node the plan weighed shows its saving, cost and verdict (:mod:`rescheduler.plan.worth`), spot
nodes that are not targets say why not. A "why nodes stay" list counts the nodes that stay by the kind of their
reason (:class:`~rescheduler.plan.stay_reasons.StayReason`, as :mod:`rescheduler.output.table`
does). Nodes of neither class are counted, not drawn.

Why a page and not a chart library: the page must open anywhere, offline and behind any proxy, so it carries
its CSS, its script and its data inline and loads nothing (no fonts, no CDN). The data is one JSON document
(:func:`page_data`, also what the tests check) embedded in a ``<script type="application/json">``; the
script draws the nodes from it, so the file stays small on a big cluster: per node, one segment for the
pods that stay plus one per moving pod, never one element per pod of the cluster.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

import orjson

from rescheduler.plan.records import Plan
from shared.classes import classifier, reclaim_reason
from shared.config import Config
from shared.controls import target_too_young
from shared.model import Node
from shared.snapshot import ClusterSnapshot, NodeInfo

__all__ = ["page_data", "render_html", "reason_groups"]


def reason_groups(result: Plan) -> list[dict[str, Any]]:
    """The nodes that stay, grouped as the CLI's "why nodes stay" table groups them (by the kind of their
    reason), most nodes first, ties in plan order: ``[{"kind", "reason", "nodes": [names]}]``."""
    groups: dict[str, dict[str, Any]] = {}
    for name, why in result.reasons.items():
        group = groups.get(why.group)
        if group is None:
            group = groups[why.group] = {"kind": why.kind.value, "reason": why.group, "nodes": []}
        group["nodes"].append(name)
    return sorted(groups.values(), key=lambda g: -len(g["nodes"]))


def _requests(requests: Any) -> tuple[int, int]:
    return requests.get("cpu", 0), requests.get("memory", 0)


def page_data(
    snapshot: ClusterSnapshot, result: Plan, config: Config, *, source: str = "", now: float | None = None
) -> dict[str, Any]:
    """The page's JSON: the summary, the moves, and per spot or on-demand node its bins before and after.

    ``snapshot`` must be the one ``result`` was planned on (the planner leaves it as it came in), and ``now``
    the time it was planned at (``None``: as planned without one, spot nodes' ages are not judged).
    Quantities are millicores and bytes. Node ``state`` is ``drained``, ``stays`` (on-demand, with
    ``reason`` and ``reason_kind``), ``target`` (spot), ``not-target`` (spot, with ``reason``); ``worth`` is the
    node's saving, cost and verdict when the plan weighed it (:attr:`~rescheduler.plan.records.Plan.worth`), else
    ``null``; ``reasons`` are the nodes that stay grouped by kind (:func:`reason_groups`).
    """
    classify = classifier(config.node_classes)
    pods = {p.key: p for info in snapshot for p in info.pods}
    leaving: dict[str, list[dict[str, Any]]] = {}
    arriving: dict[str, list[dict[str, Any]]] = {}
    for m in result.moves:
        pod = pods.get(m.pod)
        # A pod leaves what it counts for on its node (during an in-place resize, its status) and arrives as its spec.
        cpu, memory = _requests(pod.node_requests) if pod is not None else (0, 0)
        leaving.setdefault(m.source, []).append({"pod": m.pod, "cpu": cpu, "memory": memory, "to": m.target})
        cpu, memory = _requests(pod.requests) if pod is not None else (0, 0)
        arriving.setdefault(m.target, []).append({"pod": m.pod, "cpu": cpu, "memory": memory, "from": m.source})
    drained = set(result.drained)
    nodes: list[dict[str, Any]] = []
    others = 0
    for info in snapshot:
        cls = classify.node_class(info.node.labels)
        if cls == "other":
            others += 1
            continue
        out = leaving.get(info.name, [])
        into = arriving.get(info.name, [])
        nodes.append(_node_data(info, cls, out, into, result, drained, config, now))
    return {
        "source": source,
        "summary": result.summary.to_json(),
        "drained": list(result.drained),
        "undrainable": dict(result.undrainable),
        "reasons": reason_groups(result),
        "moves": [m.to_json() for m in result.moves],
        "nodes": nodes,
        "other_nodes": others,
    }


def _node_data(
    info: NodeInfo,
    cls: str,
    out: list[dict[str, Any]],
    into: list[dict[str, Any]],
    result: Plan,
    drained: set[str],
    config: Config,
    now: float | None,
) -> dict[str, Any]:
    """One spot or on-demand node of :func:`page_data`: its state and why, its bins before (``out``: the pods
    that leave it) and after (``into``: the pods that arrive)."""
    node = info.node
    cpu = info.requested.get("cpu", 0)
    memory = info.requested.get("memory", 0)
    stay_cpu = cpu - sum(p["cpu"] for p in out)
    stay_memory = memory - sum(p["memory"] for p in out)
    reason = ""
    kind = ""
    if cls == "on-demand":
        state = "drained" if node.name in drained else "stays"
        if state == "stays":
            why = result.reasons.get(node.name)
            kind = why.kind.value if why is not None else ""
            reason = (
                why.message if why is not None else ("nothing to move" if not info.pods else "not drained by this plan")
            )
    else:
        reason = _not_target_reason(node, config, now)
        state = "not-target" if reason else "target"
    return {
        "name": node.name,
        "class": cls,
        "state": state,
        "reason": reason,
        "reason_kind": kind,
        "worth": worth.to_json() if (worth := result.worth.get(node.name)) is not None else None,
        "allocatable": {"cpu": node.allocatable.get("cpu", 0), "memory": node.allocatable.get("memory", 0)},
        "pods": len(info.pods),
        "staying": {"cpu": stay_cpu, "memory": stay_memory},
        "leaving": out,
        "arriving": into,
    }


def _not_target_reason(node: Node, config: Config, now: float | None) -> str:
    """Why a spot node is not a target (being reclaimed, not Ready, too young at ``now``); ``""`` if it is one."""
    why_not = reclaim_reason(node, config.node_classes)
    if why_not is None and not node.ready:
        why_not = "node is not Ready"
    if why_not is None and now is not None and target_too_young(node, config.disruption.min_target_age, now):
        why_not = "younger, or Ready for less, than disruption.min_target_age"
    return why_not or ""


def json_for_script(data: Mapping[str, Any]) -> str:
    """JSON safe inside ``<script>``: ``<``, ``>`` and ``&`` escaped, so no value can close the element."""
    text = orjson.dumps(data).decode()
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def render_html(
    snapshot: ClusterSnapshot, result: Plan, config: Config, *, source: str = "", now: float | None = None
) -> str:
    """The self-contained page (see the module docstring)."""
    data = page_data(snapshot, result, config, source=source, now=now)
    title = "spotshift plan" + (f": {source}" if source else "")
    return (
        _TEMPLATE.replace("%TITLE%", html.escape(title))
        .replace("%CSS%", _CSS)
        .replace("%JS%", _JS)
        .replace("%DATA%", json_for_script(data))
    )


_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>%TITLE%</title>
<style>%CSS%</style>
</head>
<body>
<header>
  <h1>%TITLE%</h1>
  <div id="summary" class="summary"></div>
  <div class="legend">
    <span><i class="seg stay"></i>pods that stay</span>
    <span><i class="seg out"></i>pods that leave</span>
    <span><i class="seg in"></i>pods that arrive</span>
    <span><i class="seg free"></i>free</span>
    <label><input type="checkbox" id="involved"> only nodes the plan touches</label>
    <input type="search" id="filter" placeholder="filter nodes">
  </div>
</header>
<main>
  <section><h2>On-demand nodes</h2><div id="on-demand" class="nodes"></div></section>
  <section><h2>Spot nodes</h2><div id="spot" class="nodes"></div></section>
  <section><h2>Why nodes stay</h2><div id="why"></div></section>
  <section><h2>Moves</h2><div id="moves"></div></section>
  <p id="others" class="muted"></p>
</main>
<noscript>This page draws the plan with JavaScript; the data is in the plan-data element of its source.</noscript>
<script id="plan-data" type="application/json">%DATA%</script>
<script>%JS%</script>
</body>
</html>
"""

_CSS = """
:root { --stay: #8a94a6; --out: #e8590c; --in: #f59f00; --free: #edf0f4; --spot: #2b8a3e; --od: #1864ab;
        --bad: #c92a2a; --ink: #1f2933; --muted: #66717f; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink);
       background: #f8f9fb; }
header { padding: 16px 24px 8px; background: #fff; border-bottom: 1px solid #dde2e8; position: sticky; top: 0;
         z-index: 1; }
h1 { font-size: 20px; margin: 0 0 8px; }
h2 { font-size: 16px; margin: 20px 0 8px; }
main { padding: 0 24px 24px; }
.summary { display: flex; flex-wrap: wrap; gap: 8px; margin-bottom: 8px; }
.card { background: #f1f3f5; border-radius: 6px; padding: 6px 10px; }
.card b { font-size: 18px; display: block; }
.legend { display: flex; flex-wrap: wrap; gap: 14px; align-items: center; color: var(--muted); }
.legend .seg { display: inline-block; width: 14px; height: 10px; margin-right: 4px; vertical-align: middle;
               border-radius: 2px; }
.legend input[type=search] { padding: 3px 6px; border: 1px solid #ccd3db; border-radius: 4px; }
.nodes { display: grid; grid-template-columns: repeat(auto-fill, minmax(330px, 1fr)); gap: 10px; }
.node { background: #fff; border: 1px solid #dde2e8; border-radius: 8px; padding: 10px 12px; position: relative; }
.node[data-drained="true"] { border-color: var(--out); box-shadow: inset 4px 0 0 var(--out); }
.node[data-state="stays"] { box-shadow: inset 4px 0 0 var(--stay); }
.node[data-state="not-target"] { opacity: .75; }
.node .head { display: flex; align-items: baseline; gap: 8px; margin-bottom: 6px; }
.node .name { font-weight: 600; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.badge { font-size: 11px; padding: 1px 6px; border-radius: 9px; color: #fff; white-space: nowrap; }
.badge.spot { background: var(--spot); } .badge.on-demand { background: var(--od); }
.badge.drained { background: var(--out); } .badge.stays { background: var(--stay); }
.badge.not-target { background: var(--bad); }
.reason { color: var(--bad); font-size: 12px; margin: -2px 0 6px; }
.worth { color: var(--muted); font-size: 12px; margin: -2px 0 6px; }
.bins { display: grid; grid-template-columns: 52px 1fr 1fr; gap: 4px 8px; align-items: center; font-size: 12px; }
.bins .col { color: var(--muted); }
.bar { display: flex; height: 16px; background: var(--free); border-radius: 3px; overflow: hidden; }
.seg { height: 100%; }
.seg.stay { background: var(--stay); }
.seg.out { background: repeating-linear-gradient(45deg, var(--out) 0 4px, #ffb37a 4px 8px);
           outline: 1px solid #fff; }
.seg.in { background: var(--in); outline: 1px solid #fff; }
.seg.free { background: var(--free); border: 1px solid #ccd3db; }
.num { color: var(--muted); font-size: 11px; }
.pods { margin: 6px 0 0; padding: 0; list-style: none; font-size: 12px; color: var(--muted);
        max-height: 7.5em; overflow: auto; }
.pods li { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.pods li.moved { color: var(--out); }
table { border-collapse: collapse; background: #fff; font-size: 12px; }
td, th { padding: 3px 10px; border-bottom: 1px solid #eef0f3; text-align: left; }
.muted { color: var(--muted); }
.hidden { display: none; }
"""

_JS = r"""
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("plan-data").textContent);
  var s = data.summary;
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function cores(m) { return (m / 1000).toFixed(1); }
  function gib(b) { return (b / 1073741824).toFixed(1); }
  function fmt(kind, v) { return kind === "cpu" ? cores(v) + " CPU" : gib(v) + " GiB"; }

  var cards = [
    [s.drained + " of " + s.on_demand_nodes, "on-demand nodes drained"],
    [s.pods_moved, "pods to move"],
    [s.spot_targets, "spot nodes as targets"],
    [cores(s.freed_cpu_millicores) + " CPU / " + gib(s.freed_memory_bytes) + " GiB", "on-demand capacity freed"],
    [s.strategy, "packing strategy"]
  ];
  var summary = document.getElementById("summary");
  cards.forEach(function (c) {
    var card = el("div", "card");
    card.appendChild(el("b", null, String(c[0])));
    card.appendChild(el("span", null, c[1]));
    summary.appendChild(card);
  });
  if (s.pending_unschedulable) {
    var warn = el("div", "card reason", s.pending_unschedulable +
      " pods wait for a node: they are planned first, and hold the on-demand nodes they could use");
    summary.appendChild(warn);
  }

  function bar(node, kind, after) {
    var total = node.allocatable[kind] || 1;
    var b = el("div", "bar");
    var used = node.staying[kind];
    function seg(cls, value, title) {
      if (value <= 0) return;
      var sg = el("div", "seg " + cls);
      sg.style.width = Math.min(100, 100 * value / total) + "%";
      sg.title = title;
      b.appendChild(sg);
    }
    seg("stay", node.staying[kind], "pods that stay: " + fmt(kind, node.staying[kind]));
    var moving = after ? node.arriving : node.leaving;
    moving.forEach(function (p) {
      var where = after ? " from " + p.from : " to " + p.to;
      seg(after ? "in" : "out", p[kind], p.pod + where + ": " + fmt(kind, p[kind]));
      used += p[kind];
    });
    var wrap = el("div");
    wrap.appendChild(b);
    wrap.appendChild(el("div", "num", fmt(kind, used) + " of " + fmt(kind, total)));
    return wrap;
  }

  function card(node) {
    var c = el("article", "node");
    c.dataset.node = node.name;
    c.dataset.class = node["class"];
    c.dataset.state = node.state;
    if (node.reason_kind) c.dataset.reasonKind = node.reason_kind;
    c.dataset.drained = node.state === "drained" ? "true" : "false";
    c.dataset.involved = (node.leaving.length || node.arriving.length) ? "true" : "false";
    var head = el("div", "head");
    var name = el("span", "name", node.name);
    name.title = node.name + " (" + node.pods + " pods)";
    head.appendChild(name);
    head.appendChild(el("span", "badge " + node["class"], node["class"]));
    var label = { drained: "drained", stays: "stays", "not-target": "not a target" }[node.state];
    if (label) head.appendChild(el("span", "badge " + node.state, label));
    c.appendChild(head);
    if (node.reason) {
      var r = el("div", "reason", node.reason);
      r.dataset.reason = "true";
      c.appendChild(r);
    }
    if (node.worth) {
      var w = el("div", "worth", "saves " + node.worth.saving + " vCPU-h, costs " + node.worth.cost + " vCPU-h: " +
        node.worth.verdict);
      w.dataset.verdict = node.worth.verdict;
      c.appendChild(w);
    }
    var bins = el("div", "bins");
    bins.appendChild(el("span"));
    bins.appendChild(el("span", "col", "before"));
    bins.appendChild(el("span", "col", "after"));
    ["cpu", "memory"].forEach(function (kind) {
      bins.appendChild(el("span", "col", kind === "cpu" ? "CPU" : "memory"));
      bins.appendChild(bar(node, kind, false));
      bins.appendChild(bar(node, kind, true));
    });
    c.appendChild(bins);
    var moved = node.leaving.length ? node.leaving : node.arriving;
    if (moved.length) {
      var list = el("ul", "pods");
      moved.forEach(function (p) {
        var li = el("li", "moved", node.leaving.length ? p.pod + " → " + p.to : p.pod + " ← " + p.from);
        li.dataset.pod = p.pod;
        list.appendChild(li);
      });
      c.appendChild(list);
    }
    return c;
  }

  var rank = { drained: 0, stays: 1, target: 0, "not-target": 2 };
  var nodes = data.nodes.slice().sort(function (a, b) {
    var ra = rank[a.state] - (a.arriving.length ? 1 : 0), rb = rank[b.state] - (b.arriving.length ? 1 : 0);
    return ra - rb || (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
  });
  var od = document.getElementById("on-demand"), spot = document.getElementById("spot");
  nodes.forEach(function (n) { (n["class"] === "spot" ? spot : od).appendChild(card(n)); });
  if (!od.children.length) od.appendChild(el("p", "muted", "No on-demand nodes."));
  if (!spot.children.length) spot.appendChild(el("p", "muted", "No spot nodes."));

  var why = document.getElementById("why");
  if (data.reasons.length) {
    var wt = el("table"), wh = el("tr");
    ["why", "nodes", ""].forEach(function (h) { wh.appendChild(el("th", null, h)); });
    wt.appendChild(wh);
    data.reasons.forEach(function (g) {
      var tr = el("tr");
      tr.dataset.kind = g.kind;
      tr.appendChild(el("td", null, g.reason));
      tr.appendChild(el("td", null, String(g.nodes.length)));
      var names = g.nodes.slice(0, 10).join(", ") + (g.nodes.length > 10 ? ", …" : "");
      tr.appendChild(el("td", "muted", names));
      wt.appendChild(tr);
    });
    why.appendChild(wt);
  } else {
    why.appendChild(el("p", "muted", "No on-demand node stays."));
  }

  var moves = document.getElementById("moves");
  if (data.moves.length) {
    var t = el("table"), hr = el("tr");
    ["pod", "from", "to"].forEach(function (h) { hr.appendChild(el("th", null, h)); });
    t.appendChild(hr);
    data.moves.slice(0, 2000).forEach(function (m) {
      var tr = el("tr");
      [m.pod, m.from, m.to].forEach(function (v) { tr.appendChild(el("td", null, v)); });
      t.appendChild(tr);
    });
    moves.appendChild(t);
    if (data.moves.length > 2000) moves.appendChild(el("p", "muted", "… and " + (data.moves.length - 2000) +
      " more moves (spot-rescheduler plan --output json lists them all)"));
  } else {
    moves.appendChild(el("p", "muted", "Nothing to move."));
  }
  if (data.other_nodes) {
    document.getElementById("others").textContent = data.other_nodes +
      " node(s) neither spot nor on-demand (control plane, or outside the configured classes) are not shown.";
  }

  var involved = document.getElementById("involved"), filter = document.getElementById("filter");
  function apply() {
    var q = filter.value.toLowerCase();
    document.querySelectorAll(".node").forEach(function (c) {
      var hide = (involved.checked && c.dataset.involved !== "true") ||
                 (q && c.dataset.node.toLowerCase().indexOf(q) < 0);
      c.classList.toggle("hidden", !!hide);
    });
  }
  involved.addEventListener("change", apply);
  filter.addEventListener("input", apply);
  document.body.dataset.rendered = "true";
})();
"""
