"""Kubernetes Events on nodes and pods, so ``kubectl describe node`` says what the rescheduler did and why.

core/v1 Events (every server version serves them; ``kubectl describe`` shows them), written the way
client-go's recorder does: the Event lives in the object's namespace (``default`` for a node), names the
object by kind/name/uid, and a repeat of the same reason and message on the same object within ten minutes
bumps ``count`` on the existing Event (a PATCH) instead of creating another one.

Events are best effort by design: a failure to record one is logged and never stops a drain.
"""

from __future__ import annotations

import datetime
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from rescheduler.logs import fields
from shared.kube.api import ApiError, Kube, NotFound

__all__ = [
    "Ref",
    "EventRecorder",
    "NORMAL",
    "WARNING",
    "COMPONENT",
    "DRAIN_STARTED",
    "DRAIN_SUCCEEDED",
    "DRAIN_FAILED",
    "DRAIN_ABORTED",
    "DRAIN_SKIPPED",
    "EVICTING",
    "EVICTION_REFUSED",
    "TAINT_CLEANED",
    "NODE_BACKOFF",
    "DRAIN_HELD_BACK",
    "WAITING_FOR_JOBS",
    "CAPACITY_REQUESTED",
    "CAPACITY_PROVISIONED",
    "CAPACITY_RELEASED",
    "CAPACITY_FAILED",
]

NORMAL, WARNING = "Normal", "Warning"
COMPONENT = "spotshift-rescheduler"

# Reasons, CamelCase like the kubelet's and the scheduler's.
DRAIN_STARTED = "SpotshiftDrainStarted"
DRAIN_SUCCEEDED = "SpotshiftDrainSucceeded"
DRAIN_FAILED = "SpotshiftDrainFailed"
DRAIN_ABORTED = "SpotshiftDrainAborted"
DRAIN_SKIPPED = "SpotshiftDrainSkipped"
EVICTING = "SpotshiftEvicting"
EVICTION_REFUSED = "SpotshiftEvictionRefused"
TAINT_CLEANED = "SpotshiftTaintRemoved"
NODE_BACKOFF = "SpotshiftNodeBackoff"
DRAIN_HELD_BACK = "SpotshiftDrainHeldBack"
"""An operator's disruption control holds back a node the plan would otherwise drain (once per change)."""
WAITING_FOR_JOBS = "SpotshiftWaitingForJobs"
CAPACITY_REQUESTED = "SpotshiftCapacityRequested"
CAPACITY_PROVISIONED = "SpotshiftCapacityProvisioned"
CAPACITY_RELEASED = "SpotshiftCapacityReleased"
CAPACITY_FAILED = "SpotshiftCapacityFailed"

log = logging.getLogger("spotshift.rescheduler.cluster.events")

_AGGREGATE_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class Ref:
    """The object an Event is about."""

    kind: str
    name: str
    namespace: str = ""
    uid: str = ""
    api_version: str = "v1"

    @classmethod
    def node(cls, name: str, uid: str = "") -> Ref:
        return cls("Node", name, "", uid)

    @classmethod
    def pod(cls, namespace: str, name: str, uid: str = "") -> Ref:
        return cls("Pod", name, namespace, uid)


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    """Posts Events; ``enabled=False`` (dry-run) only logs what it would have posted."""

    def __init__(
        self,
        kube: Kube | None,
        *,
        host: str = "",
        enabled: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kube = kube
        self.host = host
        self.enabled = enabled and kube is not None
        self.clock = clock
        self._seen: dict[tuple[str, str, str, str], tuple[str, str, int, float]] = {}
        self._lock = threading.Lock()
        self.posted = 0

    def record(self, ref: Ref, event_type: str, reason: str, message: str) -> None:
        if not self.enabled:
            return
        assert self.kube is not None
        namespace = ref.namespace or "default"
        key = (ref.kind, namespace, ref.name, reason + "\x00" + message)
        now = self.clock()
        with self._lock:
            seen = self._seen.get(key)
            if len(self._seen) > 5000:
                self._seen = {k: v for k, v in self._seen.items() if now - v[3] < _AGGREGATE_SECONDS}
        try:
            if seen is not None and now - seen[3] < _AGGREGATE_SECONDS:
                name, first, count, _ = seen
                try:
                    self.kube.patch(
                        f"/api/v1/namespaces/{quote(namespace)}/events/{quote(name)}",
                        {"count": count + 1, "lastTimestamp": _now()},
                    )
                    with self._lock:
                        self._seen[key] = (name, first, count + 1, now)
                    self.posted += 1
                    return
                except NotFound:
                    pass
            stamp = _now()
            name = f"{ref.name}.{uuid.uuid4().hex[:16]}"
            body = self._event(ref, name, namespace, event_type, reason, message, stamp)
            self.kube.post(f"/api/v1/namespaces/{quote(namespace)}/events", body)
            with self._lock:
                self._seen[key] = (name, stamp, 1, now)
            self.posted += 1
        except ApiError as e:
            log.warning(
                "could not record event %s on %s %s: %s",
                reason,
                ref.kind.lower(),
                ref.name,
                e,
                extra=fields(reason=reason, object=f"{ref.kind}/{ref.name}"),
            )

    def _event(
        self, ref: Ref, name: str, namespace: str, event_type: str, reason: str, message: str, stamp: str
    ) -> dict[str, Any]:
        """A new core/v1 Event named ``name`` about ``ref``, seen once at ``stamp`` (the message cut to 1024
        characters)."""
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {
                "apiVersion": ref.api_version,
                "kind": ref.kind,
                "name": ref.name,
                **({"namespace": ref.namespace} if ref.namespace else {}),
                **({"uid": ref.uid} if ref.uid else {}),
            },
            "reason": reason,
            "message": message[:1024],
            "type": event_type,
            "source": {"component": COMPONENT, **({"host": self.host} if self.host else {})},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.host or COMPONENT,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
