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
* every attempt is counted by result (``spotshift_rescheduler_evictions``) and reported as an Event on the pod.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from rescheduler.cluster.events import EVICTING, EVICTION_REFUSED, NORMAL, WARNING, EventRecorder, Ref
from rescheduler.cluster.kube import (
    ApiError,
    Conflict,
    Forbidden,
    Kube,
    NotFound,
    Retry,
    ServerError,
    TooManyRequests,
    Unavailable,
    pod_path,
)
from rescheduler.logs import fields
from rescheduler.metrics import Metrics
from shared.model import Pod

__all__ = ["Result", "Eviction", "Evictor", "DEFAULT_GRACE_SECONDS"]

log = logging.getLogger("spotshift.rescheduler.cluster.evictor")

DEFAULT_GRACE_SECONDS = 30
"""``terminationGracePeriodSeconds`` when a pod does not set it (the API server's default)."""


class Result(enum.Enum):
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
        return self in (Result.EVICTED, Result.GONE, Result.DRY_RUN)


@dataclass(frozen=True, slots=True)
class Eviction:
    pod: str
    result: Result
    message: str = ""
    attempts: int = 0


class Evictor:
    """Evict one pod at a time, with the guards of the module docstring."""

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
        wait: Callable[[float], None] | None = None,
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

    def evict(self, pod: Pod, *, why: str) -> Eviction:
        """Evict ``pod`` (that UID); ``why`` goes into the log and the pod's Event."""
        result = self._evict(pod, why)
        self.metrics.evictions.labels(result.result.value).inc()
        level = logging.INFO if result.result.ok else logging.WARNING
        log.log(
            level,
            "%s pod %s: %s",
            "would evict" if result.result is Result.DRY_RUN else "eviction of",
            pod.key,
            result.result.value + (f" ({result.message})" if result.message else ""),
            extra=fields(
                pod=pod.key, node=pod.node_name, result=result.result.value, attempts=result.attempts, why=why
            ),
        )
        return result

    def _evict(self, pod: Pod, why: str) -> Eviction:
        if self.dry_run:
            return Eviction(pod.key, Result.DRY_RUN, why)
        path = pod_path(pod.namespace, pod.name)
        deadline = self.clock() + self.timeout
        retry = Retry(self.timeout, self.backoff, self.max_backoff, self._wait, self.clock)
        try:
            live = retry.call(lambda: self.kube.get(path), stop=self.should_abort)
            version = retry.call(self.kube.eviction_version, stop=self.should_abort)
        except NotFound:
            return Eviction(pod.key, Result.GONE, "not found")
        except ApiError as e:
            if self.should_abort():
                return Eviction(pod.key, Result.ABORTED, f"cannot read the pod: {e}")
            return Eviction(pod.key, Result.FAILED, f"cannot read the pod: {e}")
        meta = live.get("metadata") or {}
        if pod.uid and meta.get("uid") != pod.uid:
            return Eviction(pod.key, Result.GONE, "replaced by a new pod of the same name")
        if meta.get("deletionTimestamp"):
            return Eviction(pod.key, Result.EVICTED, "already terminating")
        grace = (live.get("spec") or {}).get("terminationGracePeriodSeconds")
        grace = DEFAULT_GRACE_SECONDS if grace is None else int(grace)
        grace = max(0, min(grace, int(self.max_grace)))
        body = {
            "apiVersion": f"policy/{version}",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
            "deleteOptions": {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "gracePeriodSeconds": grace,
                "preconditions": {"uid": meta.get("uid") or pod.uid},
            },
        }
        self.events.record(Ref.pod(pod.namespace, pod.name, pod.uid), NORMAL, EVICTING, why)
        delay = self.backoff
        attempts = 0
        last = ""
        while True:
            attempts += 1
            try:
                self.kube.post(path + "/eviction", body)
                return Eviction(pod.key, Result.EVICTED, f"grace period {grace}s", attempts)
            except NotFound:
                return Eviction(pod.key, Result.GONE, "deleted meanwhile", attempts)
            except Conflict as e:
                # The UID precondition failed: the pod we meant is gone and another took its name.
                return Eviction(pod.key, Result.GONE, f"precondition failed: {e.message}", attempts)
            except TooManyRequests as e:
                last = e.message
                wait_for = min(max(e.retry_after or 0.0, delay), self.max_backoff)
            except ServerError as e:
                if "more than one" in e.message.lower() and "disruption" in e.message.lower():
                    self._refused(pod, e.message)
                    return Eviction(pod.key, Result.REFUSED, e.message, attempts)
                last = str(e)
                wait_for = delay
            except Unavailable as e:
                last = str(e)
                wait_for = delay
            except Forbidden as e:
                return Eviction(
                    pod.key, Result.FAILED, f"forbidden (RBAC needs pods/eviction create): {e.message}", attempts
                )
            except ApiError as e:
                return Eviction(pod.key, Result.FAILED, str(e), attempts)
            left = deadline - self.clock()
            if left <= 0:
                self._refused(pod, last)
                return Eviction(pod.key, Result.REFUSED, f"still refused after {self.timeout:.0f}s: {last}", attempts)
            if self.should_abort():
                return Eviction(pod.key, Result.ABORTED, last, attempts)
            self._wait(min(wait_for, left))
            if self.should_abort():
                return Eviction(pod.key, Result.ABORTED, last, attempts)
            delay = min(delay * 2, self.max_backoff)

    def _refused(self, pod: Pod, message: str) -> None:
        self.events.record(
            Ref.pod(pod.namespace, pod.name, pod.uid), WARNING, EVICTION_REFUSED, f"Eviction refused: {message}"
        )
