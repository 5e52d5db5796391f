"""The two wire formats this server speaks, typed: AdmissionReview v1 and kube-scheduler extender v1.

AdmissionReview keys are lowerCamelCase (``admission.k8s.io/v1``). The extender's keys are Go field names
with no JSON tags (``k8s.io/kube-scheduler/extender/v1``: ``Pod``, ``Nodes``, ``NodeNames``...); Go's
``encoding/json`` matches them case-insensitively on decode, so :func:`fold_keys` does the same, and this
server always answers with the exact Go spelling.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, NotRequired, TypedDict

__all__ = [
    "ADMISSION_API_VERSION",
    "AdmissionRequest",
    "AdmissionResponse",
    "AdmissionReview",
    "FoldedExtenderArgs",
    "ExtenderFilterResult",
    "HostPriority",
    "MAX_EXTENDER_PRIORITY",
    "fold_keys",
]

ADMISSION_API_VERSION = "admission.k8s.io/v1"
MAX_EXTENDER_PRIORITY = 10
"""``extenderv1.MaxExtenderPriority``: the scheduler rescales extender scores from 0..10 to 0..100."""


class GroupVersionKind(TypedDict):
    group: str
    version: str
    kind: str


class AdmissionRequest(TypedDict):
    uid: str
    kind: GroupVersionKind
    resource: NotRequired[Mapping[str, str]]
    subResource: NotRequired[str]
    namespace: NotRequired[str]
    name: NotRequired[str]
    operation: NotRequired[Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]]
    object: Mapping[str, Any]
    oldObject: NotRequired[Mapping[str, Any] | None]
    dryRun: NotRequired[bool]
    userInfo: NotRequired[Mapping[str, Any]]


class Status(TypedDict, total=False):
    code: int
    message: str
    reason: str


class AdmissionResponse(TypedDict):
    uid: str
    allowed: bool
    patchType: NotRequired[Literal["JSONPatch"]]
    patch: NotRequired[str]
    warnings: NotRequired[list[str]]
    status: NotRequired[Status]
    auditAnnotations: NotRequired[dict[str, str]]


class AdmissionReview(TypedDict):
    apiVersion: str
    kind: Literal["AdmissionReview"]
    request: NotRequired[AdmissionRequest]
    response: NotRequired[AdmissionResponse]


class FoldedExtenderArgs(TypedDict):
    """``ExtenderArgs`` after :func:`fold_keys`: exactly one of ``Nodes``/``NodeNames`` is set."""

    Pod: Mapping[str, Any]
    Nodes: Mapping[str, Any] | None
    NodeNames: list[str] | None


class ExtenderFilterResult(TypedDict):
    Nodes: Mapping[str, Any] | None
    NodeNames: list[str] | None
    FailedNodes: dict[str, str]
    FailedAndUnresolvableNodes: dict[str, str]
    Error: str


class HostPriority(TypedDict):
    Host: str
    Score: int


_GO_FIELDS = ("Pod", "Nodes", "NodeNames")
_FOLDED = {name.lower(): name for name in _GO_FIELDS}


def fold_keys(args: Mapping[str, Any]) -> dict[str, Any]:
    """Top-level extender keys in their Go spelling, matched case-insensitively like ``encoding/json``.

    Only the top level is folded: ``Pod`` and the items of ``Nodes`` are Kubernetes objects whose own JSON
    tags are exact lowerCamelCase. An exact match wins over a folded one, as in Go.
    """
    out: dict[str, Any] = {}
    for key, value in args.items():
        go = _FOLDED.get(key.lower()) if isinstance(key, str) else None
        if go is not None and (go not in out or key == go):
            out[go] = value
    return out
