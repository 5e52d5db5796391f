"""What the demo draws: nodes as rows of CPU bars and pod counts, and pods moving as one line per move.

Pure: observations in, lines of text out, so the drawing is tested without a cluster. Two styles: ``tty``
(colours, Unicode bars, the screen redrawn in place) and plain (ASCII, no escape codes, one line per
event: what a CI log or ``| tee`` wants).
"""

from __future__ import annotations

from collections import Counter, defaultdict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "PodRow",
    "NodeRow",
    "Observation",
    "Move",
    "MoveTracker",
    "Style",
    "render_table",
    "render_screen",
    "fmt_time",
]


@dataclass(frozen=True, slots=True)
class PodRow:
    """A pod of the demo's namespace as the view needs it (requests in millicores and bytes)."""

    uid: str
    name: str
    app: str
    node: str
    cpu: int
    memory: int
    ready: bool
    terminating: bool


@dataclass(frozen=True, slots=True)
class NodeRow:
    """A node: its class (spot, on-demand, other), the rescheduler's drain state, its allocatable."""

    name: str
    cls: str
    state: str
    cpu: int
    memory: int


@dataclass(frozen=True, slots=True)
class Observation:
    """The cluster at one moment (``at``: seconds since the demo started)."""

    at: float
    nodes: tuple[NodeRow, ...]
    pods: tuple[PodRow, ...]
    pdbs: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """PodDisruptionBudget name → (currentHealthy, desiredHealthy)."""

    def pods_on(self, node: str) -> list[PodRow]:
        return [p for p in self.pods if p.node == node and not p.terminating]


@dataclass(frozen=True, slots=True)
class Move:
    """A pod of ``app`` left ``source`` and its replacement ``pod`` was scheduled on ``target``."""

    at: float
    app: str
    pod: str
    source: str
    target: str


class MoveTracker:
    """Pairs pods that went away with new pods of the same app: a move is ``app: source → target``.

    Pods leave (deleted or terminating) before their ReplicaSet's replacement is bound, so departures wait
    in a queue per app, oldest first. A new pod with no departure waiting is a plain arrival (a scale-up).
    """

    def __init__(self) -> None:
        self._seen: dict[str, PodRow] = {}
        self._departed: dict[str, deque[tuple[float, PodRow]]] = defaultdict(deque)
        self.moves: list[Move] = []
        self.arrived: set[str] = set()
        """UIDs of pods that arrived as replacements (highlighted in the table)."""

    def prime(self, obs: Observation) -> None:
        """Take ``obs`` as the starting point: nothing in it is new."""
        self._seen = {p.uid: p for p in obs.pods if p.node}

    def update(self, obs: Observation) -> list[Move]:
        """The moves completed since the previous observation."""
        now = {p.uid: p for p in obs.pods}
        for uid, old in self._seen.items():
            current = now.get(uid)
            if current is None or current.terminating:
                self._departed[old.app].append((obs.at, old))
        new_moves: list[Move] = []
        bound = {uid: p for uid, p in now.items() if p.node and not p.terminating}
        for uid, pod in bound.items():
            if uid in self._seen:
                continue
            queue = self._departed.get(pod.app)
            if queue:
                _, gone = queue.popleft()
                move = Move(obs.at, pod.app, pod.name, gone.node, pod.node)
                new_moves.append(move)
                self.arrived.add(uid)
        self._seen = bound
        self.moves.extend(new_moves)
        return new_moves


@dataclass(frozen=True, slots=True)
class Style:
    """``tty``: ANSI colours and Unicode bars; otherwise plain ASCII."""

    tty: bool = False

    def color(self, text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.tty else text

    def bar(self, used: int, total: int, width: int = 16) -> str:
        filled = 0 if total <= 0 else min(width, round(width * used / total))
        if self.tty:
            return "█" * filled + "░" * (width - filled)
        return "[" + "#" * filled + "." * (width - filled) + "]"


_CLASS_COLOR = {"spot": "32", "on-demand": "33", "other": "37"}
_STATE_COLOR = {"draining": "1;35", "drained": "2"}


def fmt_time(seconds: float) -> str:
    return f"+{seconds:5.1f}s"


def _pods_cell(pods: Iterable[PodRow], arrived: set[str], style: Style) -> str:
    counts = Counter(p.app for p in pods)
    new = Counter(p.app for p in pods if p.uid in arrived)
    if not counts:
        return style.color("-", "2")
    cells = []
    for app in sorted(counts):
        text = f"{app}×{counts[app]}" if style.tty else f"{app} x{counts[app]}"
        if new[app]:
            text += f" ({new[app]} moved in)"
            text = style.color(text, "36")
        cells.append(text)
    return ", ".join(cells)


def render_table(obs: Observation, style: Style, arrived: set[str] | None = None) -> list[str]:
    """One row per spot or on-demand node: class, drain state, requested/allocatable CPU as a bar, pods."""
    arrived = arrived or set()
    order = {"on-demand": 0, "spot": 1, "other": 2}
    nodes = sorted((n for n in obs.nodes if n.cls != "other"), key=lambda n: (order[n.cls], n.name))
    width = max([len(n.name) for n in nodes] + [4])
    bar = 26 if style.tty else 28
    head = f"{'NODE':<{width}}  {'CLASS':<9}  {'STATE':<8}  {'CPU REQUESTED':<{bar}}  PODS"
    lines = [style.color(head, "1")]
    for n in nodes:
        pods = obs.pods_on(n.name)
        cpu = sum(p.cpu for p in pods)
        usage = f"{style.bar(cpu, n.cpu)} {cpu / 1000:.1f}/{n.cpu / 1000:.0f}"
        cls = style.color(f"{n.cls:<9}", _CLASS_COLOR.get(n.cls, "0"))
        state = style.color(f"{n.state or '':<8}", _STATE_COLOR.get(n.state, "0"))
        lines.append(f"{n.name:<{width}}  {cls}  {state}  {usage:<{bar}}  {_pods_cell(pods, arrived, style)}")
    return lines


def _clip(text: str, width: int) -> str:
    """``text`` cut to ``width`` characters (0: no limit), so a long event never wraps and breaks the layout."""
    return text if width <= 0 or len(text) <= width else text[: max(width - 1, 0)] + "…"


def render_screen(
    title: str,
    phase: str,
    obs: Observation,
    events: Sequence[str],
    style: Style,
    arrived: set[str] | None = None,
    *,
    rows: int = 10,
    width: int = 0,
    footer: bool = True,
) -> str:
    """The whole terminal screen, redrawn in place: title, phase, the node table, the latest events."""
    out = [style.color(title, "1") + f"   {fmt_time(obs.at)}", style.color(phase, "1;36"), ""]
    out.extend(render_table(obs, style, arrived))
    out.append("")
    out.append(style.color("recent:", "1"))
    out.extend(f"  {_clip(e, width - 2)}" for e in list(events)[-rows:])
    if footer:
        out.append("")
        out.append(style.color("Ctrl-C stops the demo and tears everything down.", "2"))
    # Home, then each line cleared to its end, then everything below cleared: no flicker, no scrollback.
    return "\x1b[H" + "".join(f"{line}\x1b[K\n" for line in out) + "\x1b[J"
