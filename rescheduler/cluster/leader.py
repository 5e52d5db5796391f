"""Leader election on a ``coordination.k8s.io/v1`` Lease, with client-go's semantics, so two replicas never both act.

The algorithm is client-go's ``leaderelection`` (``tryAcquireOrRenew``):

* read the Lease; if there is none, create it naming ourselves (a 409 means another replica was faster);
* if another holder is named and the record has not changed for ``lease_duration`` *as measured by our own
  clock since we last saw it change* (not the holder's ``renewTime``, so clock skew between machines does not
  matter), the lease has expired and may be taken;
* take or renew it with an update carrying the ``resourceVersion`` we read: optimistic concurrency, so of two
  replicas racing for an expired lease exactly one update succeeds and the other gets 409 Conflict;
* a leader that cannot renew for ``renew_deadline`` stops acting (it may have been partitioned away, and the
  other replica will take over once ``lease_duration`` has passed on *its* clock: renew_deadline <
  lease_duration leaves the margin);
* the renewal time is when the write *succeeded* (an API server that is restarting may answer many seconds
  late: timing from the request would make a fresh lease look old). A renewal still in flight when
  ``renew_deadline`` passes keeps leadership while the lease is surely still ours: another replica cannot
  take it before ``lease_duration`` after our last successful write was *sent* (it has to see that write,
  then wait the duration on its clock); ``retry_period`` is kept as a margin. So a drain is not stopped by
  a renewal that is merely late, and never runs past the point where the lease may have passed on;
* on shutdown the leader releases the lease (empty holder), so its successor takes over at once instead of
  waiting out the duration.

A :class:`LeaseCarry` rides along: what the leader keeps in an annotation of the Lease (the memory of spot
reclaims, :mod:`rescheduler.cluster.spot_memory`). Every write of ours (create, renewal, release) sets the
annotation to :meth:`LeaseCarry.current`; on taking the lease (not the leader before this write), the annotation
as read is handed to :meth:`LeaseCarry.inherit` first, so a new leader continues from its predecessor's.

:class:`LeaderElector` runs the loop in a thread; the run loop asks :meth:`is_leader` before every action and
the drainer between evictions, so losing the lease stops a drain at the next step.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import quote

from rescheduler.logs import fields
from shared.kube.api import ApiError, Conflict, Forbidden, Kube, NotFound

__all__ = ["LeaseConfig", "LeaseCarry", "LeaderElector", "micro_time", "lease_problem", "PROBLEM_WARNING_EVERY"]

log = logging.getLogger("spotshift.rescheduler.cluster.leader")


@dataclass(frozen=True, slots=True)
class LeaseConfig:
    """client-go's defaults: 15 s lease, 10 s renew deadline, 2 s retry period."""

    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "leader election needs retry period < renew deadline < lease duration, got "
                f"{self.retry_period}s, {self.renew_deadline}s, {self.lease_duration}s"
            )


class LeaseCarry(Protocol):
    """What the leader keeps in the Lease's annotation :attr:`annotation` (see the module docstring)."""

    annotation: str

    def inherit(self, text: str | None) -> None:
        """Take over what the annotation holds (``None``: there is none); called on taking the lease."""

    def current(self) -> str:
        """The annotation's value to write now."""


PROBLEM_WARNING_EVERY = 60.0
"""Seconds between repeats of the warning that the Lease cannot be created or read."""


def lease_problem(namespace: str, name: str, error: ApiError) -> str:
    """The sentence for a Lease that cannot be created or read: what failed and the three ways to fix it."""
    cause = "forbidden (RBAC)" if isinstance(error, Forbidden) else str(error)
    return (
        f"cannot create or read the leader-election Lease {namespace}/{name}: {cause}; create the namespace "
        f"{namespace} (and the RBAC for leases there), pass --namespace, or pass --leader-elect=false"
    )


def micro_time(ts: float | None = None) -> str:
    """A ``metav1.MicroTime``: RFC 3339 with microseconds, UTC."""
    dt = datetime.datetime.fromtimestamp(time.time() if ts is None else ts, datetime.UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    """Acquire, renew and release one Lease; ``on_change(is_leader)`` is called on every transition."""

    def __init__(
        self,
        kube: Kube,
        config: LeaseConfig,
        *,
        on_change: Callable[[bool], None] = lambda leader: None,
        clock: Callable[[], float] = time.monotonic,
        carry: LeaseCarry | None = None,
    ) -> None:
        self.kube = kube
        self.config = config
        self.on_change = on_change
        self.carry = carry
        self.clock = clock
        self._leader = False
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._renewed_at = 0.0
        """Our clock when the last successful write came back."""
        self._sent_at = 0.0
        """Our clock when the last successful write was sent: the lease is ours until ``lease_duration`` after."""
        self._writing_since: float | None = None
        """Our clock when the write in flight was sent (``None``: none in flight)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.RLock()  # on_change may ask is_leader()
        self.holder = ""
        """The holder named in the Lease when we last read it."""
        self.problem = ""
        """Why the Lease cannot be created or read (:func:`lease_problem`), ``""`` once it can."""
        self._problem_warned_at: float | None = None

    @property
    def path(self) -> str:
        c = self.config
        return f"/apis/coordination.k8s.io/v1/namespaces/{quote(c.namespace)}/leases/{quote(c.name)}"

    def is_leader(self) -> bool:
        """Whether we hold the lease: renewed within ``renew_deadline``, or a renewal is in flight while the
        lease is surely still ours (see the module docstring)."""
        c = self.config
        with self._lock:
            if self._leader:
                now = self.clock()
                surely_ours = now < self._sent_at + c.lease_duration - c.retry_period
                lapsed = now - self._renewed_at > c.renew_deadline
                if not surely_ours or (lapsed and self._writing_since is None):
                    self._set_leader(False)
            return self._leader

    def _set_leader(self, leader: bool) -> None:
        if leader != self._leader:
            self._leader = leader
            log.info(
                "leadership %s: lease %s/%s",
                "acquired" if leader else "lost",
                self.config.namespace,
                self.config.name,
                extra=fields(identity=self.config.identity, leader=leader),
            )
            try:
                self.on_change(leader)
            except Exception:
                log.exception("leadership callback failed")

    # ---- one round ---------------------------------------------------------------------------------------

    def try_acquire_or_renew(self) -> bool:
        """One attempt; returns whether we hold the lease afterwards."""
        c = self.config
        now_wall = time.time()
        now = self.clock()
        try:
            lease = self.kube.get(self.path)
        except NotFound:
            return self._create(now_wall, now)
        except Forbidden as e:
            self._unusable(e, now)
            return self._renew_failed()
        except ApiError as e:
            log.warning("cannot read lease %s: %s", self.path, e)
            return self._renew_failed()
        self.problem = ""

        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        record = (
            holder,
            spec.get("renewTime"),
            spec.get("acquireTime"),
            spec.get("leaseDurationSeconds"),
            spec.get("leaseTransitions"),
        )
        if record != self._observed:
            self._observed = record
            self._observed_at = now
        self.holder = holder
        duration = float(spec.get("leaseDurationSeconds") or c.lease_duration)
        if holder and holder != c.identity and self._observed_at + duration > now:
            with self._lock:
                self._set_leader(False)
            return False
        return self._update(lease, now_wall)

    def _create(self, now_wall: float, now: float) -> bool:
        """Create the missing Lease naming ourselves; returns whether we hold the lease afterwards (a 409: another
        replica was faster)."""
        c = self.config
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": self._carried({"name": c.name, "namespace": c.namespace}),
            "spec": self._spec(now_wall, acquire=now_wall, transitions=0),
        }
        try:
            sent = self._writing()
            self.kube.post(f"/apis/coordination.k8s.io/v1/namespaces/{quote(c.namespace)}/leases", body)
        except (NotFound, Forbidden) as e:  # the namespace is missing, or RBAC refuses
            self._unusable(e, now)
            return self._renew_failed()
        except ApiError as e:
            log.debug("lease create failed: %s", e)
            return self._renew_failed()
        self.problem = ""
        return self._renewed(sent, c.identity)

    def _update(self, lease: dict[str, Any], now_wall: float) -> bool:
        """Take or renew the ``lease`` just read, with its ``resourceVersion`` (of two racing replicas one gets
        409 Conflict); returns whether we hold the lease afterwards."""
        c = self.config
        spec = lease.get("spec") or {}
        transitions = int(spec.get("leaseTransitions") or 0)
        acquire = spec.get("acquireTime")
        if (spec.get("holderIdentity") or "") != c.identity:
            transitions += 1
            acquire = None
        meta = lease.get("metadata") or {}
        if self.carry is not None and not self._leader:  # taking the lease: continue from what it holds
            self.carry.inherit((meta.get("annotations") or {}).get(self.carry.annotation))
        new = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": self._carried(meta),
            "spec": self._spec(now_wall, acquire=acquire or now_wall, transitions=transitions),
        }
        try:
            sent = self._writing()
            self.kube.put(self.path, new)
        except Conflict:
            log.debug("lease update lost a race (409)")
            return self._renew_failed()
        except ApiError as e:
            log.warning("cannot update lease %s: %s", self.path, e)
            return self._renew_failed()
        return self._renewed(sent, c.identity)

    def _carried(self, meta: dict[str, Any]) -> dict[str, Any]:
        """``meta`` (a Lease's metadata) with the carried annotation set to its current value."""
        out = {**meta}
        if self.carry is not None:
            out["annotations"] = {**(meta.get("annotations") or {}), self.carry.annotation: self.carry.current()}
        return out

    def _spec(self, now_wall: float, *, acquire: float | str, transitions: int) -> dict[str, Any]:
        c = self.config
        return {
            "holderIdentity": c.identity,
            "leaseDurationSeconds": max(1, round(c.lease_duration)),
            "acquireTime": acquire if isinstance(acquire, str) else micro_time(acquire),
            "renewTime": micro_time(now_wall),
            "leaseTransitions": transitions,
        }

    def _unusable(self, error: ApiError, now: float) -> None:
        """Say loudly, at most every :data:`PROBLEM_WARNING_EVERY` seconds, that the Lease cannot be used."""
        self.problem = lease_problem(self.config.namespace, self.config.name, error)
        last = self._problem_warned_at
        if last is None or now - last >= PROBLEM_WARNING_EVERY:
            self._problem_warned_at = now
            log.warning(self.problem, extra=fields(lease=f"{self.config.namespace}/{self.config.name}"))

    def _writing(self) -> float:
        """Note a write about to be sent; returns our clock at sending."""
        with self._lock:
            self._writing_since = self.clock()
            return self._writing_since

    def _renewed(self, sent: float, holder: str) -> bool:
        with self._lock:
            self._writing_since = None
            self._sent_at = sent
            self._renewed_at = self.clock()
            self.holder = holder
            self._set_leader(True)
        return True

    def _renew_failed(self) -> bool:
        with self._lock:
            self._writing_since = None
        return self.is_leader()  # still leader until renew_deadline passes without a renewal

    def release(self) -> bool:
        """Give the lease up if we hold it (empty holder, 1 s duration, as client-go does on ReleaseOnCancel)."""
        with self._lock:
            was_leader = self._leader
            self._set_leader(False)
        if not was_leader:
            return False
        try:
            lease = self.kube.get(self.path)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.config.identity:
                return False
            now = micro_time()
            lease["metadata"] = self._carried(lease.get("metadata") or {})
            lease["spec"] = {
                **spec,
                "holderIdentity": "",
                "leaseDurationSeconds": 1,
                "renewTime": now,
                "acquireTime": now,
            }
            self.kube.put(self.path, lease)
        except ApiError as e:
            log.warning("could not release lease %s: %s", self.path, e)
            return False
        log.info(
            "released lease %s/%s", self.config.namespace, self.config.name, extra=fields(identity=self.config.identity)
        )
        return True

    # ---- the loop ----------------------------------------------------------------------------------------

    def start(self) -> LeaderElector:
        self._thread = threading.Thread(target=self._run, name="leader-election", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.try_acquire_or_renew()
            except Exception:
                log.exception("leader election round failed")
            self._stop.wait(self.config.retry_period)

    def stop(self, *, release: bool = True) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.config.retry_period + 5)
        if release:
            self.release()

    def wait_for_leadership(self, timeout: float, stop: threading.Event) -> bool:
        """Block until we lead, ``timeout`` passes, or ``stop`` is set."""
        deadline = self.clock() + timeout
        while not stop.is_set():
            if self.is_leader():
                return True
            left = deadline - self.clock()
            if left <= 0:
                return False
            stop.wait(min(left, 0.2))
        return False
