"""The run loop and drains not worth their evictions: not started, and counted once per node each time a plan starts
keeping the node for that (``spotshift_rescheduler_drains_not_worth_total``)."""

from __future__ import annotations

from dataclasses import replace

from rescheduler.plan.records import Plan, Summary
from rescheduler.plan.stay_reasons import Kind, StayReason
from rescheduler.run import Rescheduler, RunOptions
from tests.unit.test_run import cluster, fast

COUNTER = "spotshift_rescheduler_drains_not_worth_total"


def _kept(*nodes: str) -> Plan:
    """A plan keeping ``nodes`` as not worth draining, and one more node for another reason."""
    reasons = {n: StayReason(Kind.NOT_WORTH, "not worth draining: ...") for n in nodes}
    reasons["od-other"] = StayReason(Kind.NO_CAPACITY, "no room")
    return Plan((), (), reasons, Summary())


def test_a_node_not_worth_draining_is_not_drained_and_counted_once_over_cycles() -> None:
    server = cluster()
    base = fast()
    config = replace(base, worth=replace(base.worth, eviction_cost=100.0))
    r = Rescheduler(server, config, RunOptions(identity="me", sync_timeout=5))
    r.start_informers()
    try:
        assert r.state.wait_synced(5)
        r.cycle()
        r.cycle()
    finally:
        r.stop_informers()
        server.close()
    assert r.results == [] and server.evictions == []
    assert r.plans.last_plan is not None and r.plans.last_plan.reasons["od-1"].kind is Kind.NOT_WORTH
    assert r.metrics.registry.get_sample_value(COUNTER) == 1


def test_a_node_counts_again_only_after_a_plan_that_did_not_keep_it_as_not_worth() -> None:
    server = cluster()
    r = Rescheduler(server, fast(), RunOptions(identity="me", sync_timeout=5))
    try:
        counted = []
        for plan in (_kept("od-1"), _kept("od-1"), _kept(), _kept("od-1"), _kept("od-1", "od-2")):
            r.plans._report_not_worth(plan)
            counted.append(r.metrics.registry.get_sample_value(COUNTER))
    finally:
        server.close()
    assert counted == [1, 1, 1, 2, 3]
