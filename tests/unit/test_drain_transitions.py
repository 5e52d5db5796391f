"""The drain state machine as a table: every phase × every step result → the next phase, the end, or refused.

:func:`rescheduler.cluster.drain.transition` is checked against the table written out below (not against
:data:`~rescheduler.cluster.drain.NEXT`, which it reads), so a change to either shows here.
"""

from __future__ import annotations

import pytest

from rescheduler.cluster.drain import NEXT, DrainOutcome, Failure, Phase, Step, transition
from rescheduler.plan.labels import DrainLabel

P, E = Phase, DrainOutcome
FAILURE = Failure(DrainLabel.EVICTION_FAILED, "eviction of default/a: refused", back_off=True)

ALLOWED: dict[Phase, dict[Phase | DrainOutcome | str, Phase | DrainOutcome]] = {
    # phase: {step result: where the drain goes}; "failure" is any Failure; None (nothing to do now) stays.
    P.PENDING: {P.MARKING: P.MARKING},
    P.MARKING: {P.JOBS: P.JOBS, P.FREEING: P.FREEING, "failure": P.ROLLING_BACK},
    P.JOBS: {P.FREEING: P.FREEING, "failure": P.ROLLING_BACK},
    P.FREEING: {P.EVICTING: P.EVICTING, "failure": P.ROLLING_BACK},
    P.EVICTING: {P.TERMINATING: P.TERMINATING, "failure": P.ROLLING_BACK},
    P.TERMINATING: {P.REPLACING: P.REPLACING, "failure": P.ROLLING_BACK},
    P.REPLACING: {P.FINISHING: P.FINISHING, "failure": P.ROLLING_BACK},
    P.FINISHING: {E.SUCCEEDED: E.SUCCEEDED, "failure": P.ROLLING_BACK},
    P.ROLLING_BACK: {E.FAILED: E.FAILED},
}

RESULTS: list[tuple[Phase | DrainOutcome | str, Step]] = [
    *((p, p) for p in Phase),
    *((o, o) for o in DrainOutcome),
    ("failure", FAILURE),
]
"""Every step result a step can return (bar ``None``), with the name the table gives it."""

ROWS = [
    pytest.param(phase, step, ALLOWED[phase].get(name), id=f"{phase.value}-{getattr(name, 'value', name)}")
    for phase in Phase
    for name, step in RESULTS
]


@pytest.mark.parametrize(("phase", "step", "expected"), ROWS)
def test_each_phase_goes_only_where_the_table_says(
    phase: Phase, step: Step, expected: Phase | DrainOutcome | None
) -> None:
    if expected is None:
        with pytest.raises(ValueError, match=f"no drain goes from {phase.value}"):
            transition(phase, step)
    else:
        assert transition(phase, step) is expected


@pytest.mark.parametrize("phase", list(Phase), ids=lambda p: p.value)
def test_nothing_to_do_now_stays_in_the_phase(phase: Phase) -> None:
    assert transition(phase, None) is phase


def test_the_table_covers_every_phase_and_ends_only_in_the_two_end_states() -> None:
    assert set(ALLOWED) == set(Phase) == set(NEXT)
    ends = {to for nexts in NEXT.values() for to in nexts if isinstance(to, DrainOutcome)}
    assert ends == {DrainOutcome.SUCCEEDED, DrainOutcome.FAILED}, "skipped and dry-run drains never start"
    reached = {to for nexts in NEXT.values() for to in nexts if isinstance(to, Phase)}
    assert reached == set(Phase) - {Phase.PENDING}, "every phase but the start state is entered from another"


def test_end_states_keep_the_metric_and_log_values() -> None:
    assert [str(o) for o in DrainOutcome] == ["succeeded", "failed", "skipped", "dry-run"]
    assert DrainOutcome.FAILED == "failed" and f"{DrainOutcome.DRY_RUN}" == "dry-run"
