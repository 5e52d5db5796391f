"""The demo's drawing (demo/view.py): moves paired from pod churn, the node table, the terminal screen."""

from __future__ import annotations

from demo.view import MoveTracker, NodeRow, Observation, PodRow, Style, render_screen, render_table

NODES = (
    NodeRow("od-1", "on-demand", "drained", 4000, 8 * 2**30),
    NodeRow("spot-1", "spot", "", 4000, 8 * 2**30),
    NodeRow("cp", "other", "", 4000, 8 * 2**30),
)


def pod(uid: str, app: str, node: str, *, terminating: bool = False) -> PodRow:
    return PodRow(uid, f"{app}-{uid}", app, node, 250, 2**28, True, terminating)


def test_a_pod_that_leaves_and_a_new_pod_of_its_app_make_one_move() -> None:
    tracker = MoveTracker()
    tracker.prime(Observation(0.0, NODES, (pod("a", "web", "od-1"), pod("b", "api", "od-1"))))
    # a is evicted (terminating), its replacement c is not bound yet: no move
    assert (
        tracker.update(
            Observation(
                1.0, NODES, (pod("a", "web", "od-1", terminating=True), pod("b", "api", "od-1"), pod("c", "web", ""))
            )
        )
        == []
    )
    moves = tracker.update(Observation(2.0, NODES, (pod("b", "api", "od-1"), pod("c", "web", "spot-1"))))
    assert [(m.app, m.source, m.target, m.pod) for m in moves] == [("web", "od-1", "spot-1", "web-c")]
    assert tracker.arrived == {"c"}
    # a new pod with nobody gone before it is a scale-up, not a move
    assert (
        tracker.update(
            Observation(3.0, NODES, (pod("b", "api", "od-1"), pod("c", "web", "spot-1"), pod("d", "web", "spot-1")))
        )
        == []
    )
    assert tracker.arrived == {"c"}


def test_departures_of_one_app_pair_oldest_first() -> None:
    tracker = MoveTracker()
    tracker.prime(Observation(0.0, NODES, (pod("a", "web", "od-1"), pod("b", "web", "spot-1"))))
    tracker.update(Observation(1.0, NODES, (pod("b", "web", "spot-1"),)))
    tracker.update(Observation(2.0, NODES, ()))
    moves = tracker.update(Observation(3.0, NODES, (pod("c", "web", "spot-1"), pod("d", "web", "spot-1"))))
    assert sorted((m.source, m.pod) for m in moves) == [("od-1", "web-c"), ("spot-1", "web-d")]


def test_the_plain_table_has_no_escape_codes_and_leaves_other_nodes_out() -> None:
    obs = Observation(5.0, NODES, (pod("c", "web", "spot-1"), pod("d", "web", "spot-1"), pod("e", "api", "spot-1")))
    lines = render_table(obs, Style(tty=False), arrived={"c"})
    text = "\n".join(lines)
    assert "\x1b" not in text
    assert [line.split()[0] for line in lines] == ["NODE", "od-1", "spot-1"]
    assert "drained" in lines[1] and lines[1].rstrip().endswith("-")
    assert "[###.............] 0.8/4" in lines[2]
    assert "api x1, web x2 (1 moved in)" in lines[2]


def test_the_screen_redraws_in_place_and_clips_long_events() -> None:
    obs = Observation(5.0, NODES, ())
    screen = render_screen("t", "phase", obs, ["x" * 200, "short"], Style(tty=True), width=40)
    assert screen.startswith("\x1b[H") and screen.endswith("\x1b[J")
    assert "x" * 37 + "…" in screen and "x" * 39 not in screen
    assert "Ctrl-C" in screen
    assert "Ctrl-C" not in render_screen("t", "phase", obs, [], Style(tty=True), footer=False)
