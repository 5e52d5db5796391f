"""Leader election on a coordination.k8s.io/v1 Lease: client-go's rules, optimistic concurrency, release."""

from __future__ import annotations

import pytest

from rescheduler.cluster.leader import PROBLEM_WARNING_EVERY, LeaderElector, LeaseConfig
from shared.kube.api import Kube
from tests.support.fake_api import FakeApiServer, namespace

LEASE = "spotshift/spotshift-rescheduler"


def api(*, with_namespace: bool = True) -> FakeApiServer:
    """A fake API server; the Lease's namespace exists unless told otherwise (as the real server checks it)."""
    server = FakeApiServer()
    if with_namespace:
        server.put("namespaces", namespace("spotshift"))
    return server


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elector(server: FakeApiServer, identity: str, clock: Clock, changes: list[tuple[str, bool]] | None = None):
    config = LeaseConfig("spotshift", "spotshift-rescheduler", identity, 15.0, 10.0, 2.0)
    record = changes if changes is not None else []
    return LeaderElector(Kube(server), config, clock=clock, on_change=lambda leader: record.append((identity, leader)))


def test_the_first_replica_creates_the_lease_and_leads() -> None:
    server, clock, changes = api(), Clock(), []
    a = elector(server, "a", clock, changes)
    assert a.try_acquire_or_renew()
    assert a.is_leader()
    spec = server.get_obj("leases", LEASE)["spec"]
    assert spec["holderIdentity"] == "a"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    assert changes == [("a", True)]


def test_two_replicas_one_leader_and_the_other_waits_out_the_lease() -> None:
    server, clock = api(), Clock()
    a, b = elector(server, "a", clock), elector(server, "b", clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert b.holder == "a"
    # a keeps renewing: b never takes over, however long it waits.
    for _ in range(20):
        clock.now += 2
        assert a.try_acquire_or_renew()
        assert not b.try_acquire_or_renew()
    assert (a.is_leader(), b.is_leader()) == (True, False)


def test_a_crashed_leader_is_replaced_after_the_lease_duration_on_the_followers_clock() -> None:
    server, clock = api(), Clock()
    a, b = elector(server, "a", clock), elector(server, "b", clock)
    a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()  # b first sees the record now
    clock.now += 14
    assert not b.try_acquire_or_renew()
    clock.now += 2
    assert b.try_acquire_or_renew()
    spec = server.get_obj("leases", LEASE)["spec"]
    assert spec["holderIdentity"] == "b"
    assert spec["leaseTransitions"] == 1
    assert not a.is_leader(), "a has not renewed within its renew deadline"


def test_release_hands_over_at_once() -> None:
    server, clock = api(), Clock()
    a, b = elector(server, "a", clock), elector(server, "b", clock)
    a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    assert a.release()
    assert server.get_obj("leases", LEASE)["spec"]["holderIdentity"] == ""
    assert b.try_acquire_or_renew(), "an empty holder may be taken without waiting"
    assert not a.is_leader()


def test_a_lost_update_race_does_not_make_a_leader() -> None:
    server, clock = api(), Clock()
    a = elector(server, "a", clock)
    a.try_acquire_or_renew()
    a.release()
    b = elector(server, "b", clock)
    server.fail("PUT", r"/leases/", 409)  # another replica updated the Lease between b's read and write
    assert not b.try_acquire_or_renew()
    assert b.try_acquire_or_renew()


def test_a_leader_that_cannot_renew_stops_leading_after_the_renew_deadline() -> None:
    server, clock, changes = api(), Clock(), []
    a = elector(server, "a", clock, changes)
    a.try_acquire_or_renew()
    server.fail("GET", r"/leases/", 500, 500, 500, 500, 500, 500)
    clock.now += 5
    assert a.try_acquire_or_renew(), "within the deadline it still leads"
    clock.now += 6
    assert not a.try_acquire_or_renew()
    assert changes == [("a", True), ("a", False)]


def test_lease_timings_must_nest() -> None:
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        LeaseConfig("ns", "name", "id", lease_duration=10, renew_deadline=10, retry_period=2)


class SlowServer(FakeApiServer):
    """A fake API server whose Lease writes take ``delay`` seconds on the test clock; ``during`` runs mid-write."""

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.put("namespaces", namespace("spotshift"))
        self.clock = clock
        self.delay = 0.0
        self.during: list[object] = []
        self.probe = lambda: None

    def request(self, method: str, path: str, **kwargs):  # type: ignore[override]
        if method in ("PUT", "POST") and "/leases" in path and self.delay:
            self.clock.now += self.delay
            self.during.append(self.probe())
        return super().request(method, path, **kwargs)


def test_the_renewal_time_is_when_the_write_succeeded_not_when_it_was_sent() -> None:
    clock = Clock()
    server = SlowServer(clock)
    a = elector(server, "a", clock)
    assert a.try_acquire_or_renew()
    clock.now += 2
    server.delay = 8.5  # the API server is restarting: the renewal is answered 8.5 s late
    assert a.try_acquire_or_renew()
    clock.now += 1.7
    assert a.is_leader(), "a lease renewed 1.7 s ago is not expired"


def test_a_renewal_that_arrives_late_while_the_lease_is_ours_does_not_drop_leadership() -> None:
    clock = Clock()
    server = SlowServer(clock)
    changes: list[tuple[str, bool]] = []
    a = elector(server, "a", clock, changes)
    assert a.try_acquire_or_renew()
    clock.now += 2
    server.delay = 9.0  # in flight past the renew deadline, still well inside the lease duration
    server.probe = a.is_leader
    assert a.try_acquire_or_renew()
    assert server.during == [True], "the drain asked mid-renewal and must not have been told to stop"
    assert changes == [("a", True)], "no loss and re-acquisition in between"


def test_a_renewal_in_flight_does_not_keep_leadership_past_the_lease_duration() -> None:
    clock = Clock()
    server = SlowServer(clock)
    a = elector(server, "a", clock)
    assert a.try_acquire_or_renew()
    clock.now += 2
    server.delay = 14.0  # 16 s after the last successful write: another replica may hold it by now
    server.probe = a.is_leader
    a.try_acquire_or_renew()
    assert server.during == [False]


def test_a_missing_namespace_is_said_loudly_naming_the_lease_and_the_fix(caplog: pytest.LogCaptureFixture) -> None:
    server, clock = api(with_namespace=False), Clock()
    a = elector(server, "a", clock)
    with caplog.at_level("WARNING", logger="spotshift.rescheduler.cluster.leader"):
        assert not a.try_acquire_or_renew()
        clock.now += 2.0
        assert not a.try_acquire_or_renew()  # repeated within the interval: not warned again
        clock.now += PROBLEM_WARNING_EVERY
        assert not a.try_acquire_or_renew()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2
    assert "Lease spotshift/spotshift-rescheduler" in warnings[0]
    assert "create the namespace spotshift" in warnings[0] and "--namespace" in warnings[0]
    assert "--leader-elect=false" in warnings[0]
    assert a.problem == warnings[0]
    server.put("namespaces", namespace("spotshift"))
    assert a.try_acquire_or_renew() and a.problem == ""


def test_rbac_forbidding_the_lease_is_a_problem_too() -> None:
    server, clock = api(), Clock()
    server.fail("GET", r"/leases/", *([403] * 5))
    a = elector(server, "a", clock)
    assert not a.try_acquire_or_renew()
    assert "forbidden (RBAC)" in a.problem and "spotshift/spotshift-rescheduler" in a.problem
