"""Eviction lives here, in one guarded component (descheduler's ``evictions.go``): nothing else removes a pod.

Why the Eviction subresource and never DELETE: the API server checks PodDisruptionBudgets atomically with
the eviction, so even a stale plan cannot break a budget. Why a component: the guards belong together —

* the subresource's version by discovery (``policy/v1``; ``policy/v1beta1`` on servers without it, like 1.20);
* a fresh read of the pod first (retried on transient errors, such as a 500 while etcd restarts, within
  ``pod_eviction_timeout``): it may be gone already (done), replaced by a pod of the same name (a
  StatefulSet: done, and never evict the new one — the eviction carries a UID precondition), and its
  ``terminationGracePeriodSeconds`` caps the grace period we ask for at ``max_graceful_termination``;
* 429 (a budget refuses now) is retried with backoff until ``pod_eviction_timeout``, honouring
  ``Retry-After``; a 500 "more than one PodDisruptionBudget" is final;
* dry-run logs the eviction it would make and makes none;
* every eviction is counted by its final result (``spotshift_rescheduler_evictions``) and reported as an Event
  on the pod.

An eviction is tried one attempt at a time (:meth:`Evictor.attempt` never waits): a drain in flight asks again
when the answer says (:attr:`EvictionTry.next_at`), so many drains advance in one loop
(:mod:`rescheduler.cluster.drain`). :meth:`Evictor.evict` loops over the attempts for a caller that may wait.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from rescheduler.cluster.events import EVICTING, EVICTION_REFUSED, NORMAL, WARNING, EventRecorder, Ref
from rescheduler.logs import fields
from rescheduler.metrics import Metrics
from shared.kube.api import (
    ApiError,
    Conflict,
    Forbidden,
    Kube,
    NotFound,
    ServerError,
    TooManyRequests,
    Unavailable,
    is_transient,
    pod_path,
)
from shared.model import Pod

__all__ = ["EvictionResult", "Eviction", "EvictionTry", "Evictor", "DEFAULT_GRACE_SECONDS"]

log = logging.getLogger("spotshift.rescheduler.cluster.evictor")

DEFAULT_GRACE_SECONDS = 30
"""``terminationGracePeriodSeconds`` when a pod does not set it (the API server's default)."""


class EvictionResult(enum.Enum):
    EVICTED = "evicted"
    GONE = "gone"
    """The pod (that UID) no longer exists: nothing to evict."""
    DRY_RUN = "dry-run"
    REFUSED = "refused"
    """A PodDisruptionBudget kept refusing until the timeout, or the pod has more than one."""
    FAILED = "failed"
    ABORTED = "aborted"
    """Shutdown or lost leadership while retrying."""

    @property
    def ok(self) -> bool:
        return self in (EvictionResult.EVICTED, EvictionResult.GONE, EvictionResult.DRY_RUN)


@dataclass(frozen=True, slots=True)
class Eviction:
    pod: str
    result: EvictionResult
    message: str = ""
    attempts: int = 0


@dataclass(slots=True)
class EvictionTry:
    """One pod's eviction across its attempts (:meth:`Evictor.attempt`): when to try next, until when, and the
    last answer that asked to try again."""

    pod: Pod
    why: str
    deadline: float
    """Clock time after which a refusal is final (``pod_eviction_timeout`` after the first attempt)."""
    delay: float
    next_at: float = 0.0
    attempts: int = 0
    last: str = ""
    announced: bool = False
    """Whether the pod's ``Evicting`` Event was recorded (once per pod, not per attempt)."""


class Evictor:
    """Evict pods with the guards of the module docstring."""

    def __init__(
        self,
        kube: Kube,
        *,
        timeout: float,
        max_grace: float,
        dry_run: bool,
        metrics: Metrics,
        events: EventRecorder,
        should_abort: Callable[[], bool] = lambda: False,
        wait: Callable[[float], object] | None = None,
        clock: Callable[[], float] = time.monotonic,
        backoff: float = 1.0,
        max_backoff: float = 10.0,
    ) -> None:
        self.kube = kube
        self.timeout = timeout
        self.max_grace = max_grace
        self.dry_run = dry_run
        self.metrics = metrics
        self.events = events
        self.should_abort = should_abort
        self._wait = wait or threading.Event().wait
        self.clock = clock
        self.backoff = backoff
        self.max_backoff = max_backoff

    def begin(self, pod: Pod, *, why: str) -> EvictionTry:
        """The eviction of ``pod`` (that UID), to be tried with :meth:`attempt`; ``why`` goes into the log and the
        pod's Event."""
        return EvictionTry(pod, why, deadline=self.clock() + self.timeout, delay=self.backoff)

    def attempt(self, t: EvictionTry) -> Eviction | None:
        """Try once, never waiting: the final :class:`Eviction` (counted and logged), or ``None`` when the API
        server asked to try again (a budget's 429, a transient error); ``t.next_at`` then says when."""
        t.attempts += 1
        result = self._attempt(t)
        if result is not None:
            self._finished(t.pod, result, t.why)
        return result

    def evict(self, pod: Pod, *, why: str) -> Eviction:
        """Evict ``pod`` (that UID), retrying until it is done, refused for good or the loop must stop."""
        t = self.begin(pod, why=why)
        while True:
            result = self.attempt(t)
            if result is not None:
                return result
            if self.should_abort():
                return self._aborted(t)
            self._wait(max(0.0, t.next_at - self.clock()))
            if self.should_abort():
                return self._aborted(t)

    def _aborted(self, t: EvictionTry) -> Eviction:
        result = Eviction(t.pod.key, EvictionResult.ABORTED, t.last, t.attempts)
        self._finished(t.pod, result, t.why)
        return result

    def _finished(self, pod: Pod, result: Eviction, why: str) -> None:
        self.metrics.evictions.labels(result.result.value).inc()
        level = logging.INFO if result.result.ok else logging.WARNING
        log.log(
            level,
            "%s pod %s: %s",
            "would evict" if result.result is EvictionResult.DRY_RUN else "eviction of",
            pod.key,
            result.result.value + (f" ({result.message})" if result.message else ""),
            extra=fields(
                pod=pod.key, node=pod.node_name, result=result.result.value, attempts=result.attempts, why=why
            ),
        )

    def _attempt(self, t: EvictionTry) -> Eviction | None:
        pod = t.pod
        if self.dry_run:
            return Eviction(pod.key, EvictionResult.DRY_RUN, t.why)
        path = pod_path(pod.namespace, pod.name)
        try:
            live = self.kube.get(path)
            version = self.kube.eviction_version()
        except NotFound:
            return Eviction(pod.key, EvictionResult.GONE, "not found", t.attempts)
        except ApiError as e:
            if is_transient(e):
                return self._again(t, f"cannot read the pod: {e}", e.retry_after, read=True)
            return Eviction(pod.key, EvictionResult.FAILED, f"cannot read the pod: {e}", t.attempts)
        meta = live.get("metadata") or {}
        if pod.uid and meta.get("uid") != pod.uid:
            return Eviction(pod.key, EvictionResult.GONE, "replaced by a new pod of the same name", t.attempts)
        if meta.get("deletionTimestamp"):
            return Eviction(pod.key, EvictionResult.EVICTED, "already terminating", t.attempts)
        grace = (live.get("spec") or {}).get("terminationGracePeriodSeconds")
        grace = DEFAULT_GRACE_SECONDS if grace is None else int(grace)
        grace = max(0, min(grace, int(self.max_grace)))
        if not t.announced:
            self.events.record(Ref.pod(pod.namespace, pod.name, pod.uid), NORMAL, EVICTING, t.why)
            t.announced = True
        return self._post(t, path, self._body(pod, version, grace, meta.get("uid") or pod.uid), grace)

    @staticmethod
    def _body(pod: Pod, version: str, grace: int, uid: str) -> dict[str, object]:
        return {
            "apiVersion": f"policy/{version}",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
            "deleteOptions": {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "gracePeriodSeconds": grace,
                "preconditions": {"uid": uid},
            },
        }

    def _post(self, t: EvictionTry, path: str, body: dict[str, object], grace: int) -> Eviction | None:
        pod = t.pod
        try:
            self.kube.post(path + "/eviction", body)
            return Eviction(pod.key, EvictionResult.EVICTED, f"grace period {grace}s", t.attempts)
        except NotFound:
            return Eviction(pod.key, EvictionResult.GONE, "deleted meanwhile", t.attempts)
        except Conflict as e:
            # The UID precondition failed: the pod we meant is gone and another took its name.
            return Eviction(pod.key, EvictionResult.GONE, f"precondition failed: {e.message}", t.attempts)
        except TooManyRequests as e:
            return self._again(t, e.message, e.retry_after)
        except ServerError as e:
            if "more than one" in e.message.lower() and "disruption" in e.message.lower():
                self._refused(pod, e.message)
                return Eviction(pod.key, EvictionResult.REFUSED, e.message, t.attempts)
            return self._again(t, str(e), None)
        except Unavailable as e:
            return self._again(t, str(e), None)
        except Forbidden as e:
            return Eviction(
                pod.key, EvictionResult.FAILED, f"forbidden (RBAC needs pods/eviction create): {e.message}", t.attempts
            )
        except ApiError as e:
            return Eviction(pod.key, EvictionResult.FAILED, str(e), t.attempts)

    def _again(self, t: EvictionTry, message: str, retry_after: float | None, *, read: bool = False) -> Eviction | None:
        """Schedule the next attempt (``None``), or the final answer once ``pod_eviction_timeout`` has passed: a
        failure when the pod could not even be read (``read``), else a refusal."""
        t.last = message
        now = self.clock()
        left = t.deadline - now
        if left <= 0 and read:
            return Eviction(t.pod.key, EvictionResult.FAILED, message, t.attempts)
        if left <= 0:
            self._refused(t.pod, message)
            return Eviction(
                t.pod.key, EvictionResult.REFUSED, f"still refused after {self.timeout:.0f}s: {message}", t.attempts
            )
        t.next_at = now + min(max(retry_after or 0.0, t.delay), self.max_backoff, left)
        t.delay = min(t.delay * 2, self.max_backoff)
        return None

    def _refused(self, pod: Pod, message: str) -> None:
        self.events.record(
            Ref.pod(pod.namespace, pod.name, pod.uid), WARNING, EVICTION_REFUSED, f"Eviction refused: {message}"
        )
