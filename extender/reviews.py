"""The two wire formats this server speaks, typed: AdmissionReview v1 and kube-scheduler extender v1.

AdmissionReview keys are lowerCamelCase (``admission.k8s.io/v1``). The extender's keys are Go field names
with no JSON tags (``k8s.io/kube-scheduler/extender/v1``: ``Pod``, ``Nodes``, ``NodeNames``...); Go's
``encoding/json`` matches them case-insensitively on decode, so :func:`fold_keys` does the same, and this
server always answers with the exact Go spelling.

What comes in is checked against :data:`REVIEW_SHAPE`, :data:`EXTENDER_ARGS_SHAPE` and :data:`NODE_SHAPE` (each
item of a NodeList) by :func:`check_shape`:
msgspec structs naming every field the webhook or the extender reads, each with the type the API server's Go
struct gives it (a string, a map of strings, an ``int32``...). A field of the wrong type, a number out of its Go
type's range or a missing Node name is refused there with its path (``request.object.metadata: expected an
object, got an array``), so the code behind the door reads only well-typed documents. Fields the product does
not read are not checked: they are never copied into an answer. A null counts as absent, as Go's decoder takes it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal, NotRequired, TypedDict, TypeVar

import msgspec

__all__ = [
    "ADMISSION_API_VERSION",
    "AdmissionRequest",
    "AdmissionResponse",
    "AdmissionReview",
    "FoldedExtenderArgs",
    "ExtenderFilterResult",
    "HostPriority",
    "MAX_EXTENDER_PRIORITY",
    "REVIEW_SHAPE",
    "EXTENDER_ARGS_SHAPE",
    "NODE_SHAPE",
    "ShapeError",
    "check_shape",
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


# --- what comes in: the fields the product reads, with their Go types ----------------------------------------

Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
StrMap = dict[str, str]


class _In(msgspec.Struct, gc=False):
    """A checked part of a request: unknown fields are ignored, a null is the field's zero value.

    ``gc=False``: these hold only strings, numbers, lists and maps of them and each other, never a cycle, so the
    garbage collector need not track them (checking 5,000 full Nodes took three times as long with it).
    """


class OwnerReferenceIn(_In):
    kind: str | None = None
    name: str | None = None
    controller: bool | None = None


class ObjectMetaIn(_In):
    name: str | None = None
    generateName: str | None = None
    namespace: str | None = None
    labels: StrMap | None = None
    annotations: StrMap | None = None
    ownerReferences: list[OwnerReferenceIn] | None = None


class RequirementIn(_In):
    """A ``NodeSelectorRequirement``: the operator is any string here; the selector parser judges its value."""

    key: str | None = None
    operator: str | None = None
    values: list[str] | None = None


class NodeSelectorTermIn(_In):
    matchExpressions: list[RequirementIn] | None = None
    matchFields: list[RequirementIn] | None = None


class NodeSelectorIn(_In):
    nodeSelectorTerms: list[NodeSelectorTermIn] | None = None


class PreferredTermIn(_In):
    weight: Int32 | None = None
    preference: NodeSelectorTermIn | None = None


class NodeAffinityIn(_In):
    requiredDuringSchedulingIgnoredDuringExecution: NodeSelectorIn | None = None
    preferredDuringSchedulingIgnoredDuringExecution: list[PreferredTermIn] | None = None


class AffinityIn(_In):
    nodeAffinity: NodeAffinityIn | None = None


class TolerationIn(_In):
    key: str | None = None
    operator: str | None = None
    value: str | None = None
    effect: str | None = None
    tolerationSeconds: Int64 | None = None


class PodSpecIn(_In):
    nodeSelector: StrMap | None = None
    affinity: AffinityIn | None = None
    tolerations: list[TolerationIn] | None = None
    schedulerName: str | None = None


class PodIn(_In):
    kind: str | None = None
    metadata: ObjectMetaIn | None = None
    spec: PodSpecIn | None = None


class GroupVersionKindIn(_In):
    group: str | None = None
    version: str | None = None
    kind: str | None = None


class AdmissionRequestIn(_In):
    uid: str | None = None
    kind: GroupVersionKindIn | None = None
    operation: str | None = None
    namespace: str | None = None
    object: PodIn | None = None
    dryRun: bool | None = None


class AdmissionReviewIn(_In):
    apiVersion: str | None = None
    kind: str | None = None
    request: AdmissionRequestIn | None = None


class TaintIn(_In):
    key: str | None = None
    value: str | None = None
    effect: str | None = None


class NodeMetaIn(_In):
    name: str
    labels: StrMap | None = None


class NodeSpecIn(_In):
    taints: list[TaintIn] | None = None
    unschedulable: bool | None = None


class NodeIn(_In):
    metadata: NodeMetaIn
    spec: NodeSpecIn | None = None


class NodeListIn(_In):
    """A NodeList. Each item is checked on its own as :data:`NODE_SHAPE`
    (:func:`extender.service.decode_extender_args`), so no more than one Node's typed copy is alive at a time."""

    items: list[Any] | None = None


class ExtenderPodIn(_In):
    """The extender reads only the pod's metadata (its workload and spot ceiling)."""

    metadata: ObjectMetaIn | None = None


class ExtenderArgsIn(_In):
    """``ExtenderArgs`` after :func:`fold_keys`."""

    Pod: ExtenderPodIn
    Nodes: NodeListIn | None = None
    NodeNames: list[str] | None = None


REVIEW_SHAPE = AdmissionReviewIn
EXTENDER_ARGS_SHAPE = ExtenderArgsIn
NODE_SHAPE = NodeIn


T = TypeVar("T")


class ShapeError(ValueError):
    """A request that does not have its wire format's shape; ``path`` names the field (``request.object``)."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path, self.problem = path, problem


# msgspec's message: "Expected `object | null`, got `array` - at `$.request.object.metadata`"
_AT = re.compile(r"^(?P<problem>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_TYPE_NAMES = {
    "object": "an object",
    "array": "an array",
    "str": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "a boolean",
    "null": "null",
}
_NAMED = re.compile(r"`(int|str|float|bool|object|array)`")
_EXPECTED = re.compile(r"^Expected `(?P<want>[^`]*)`, got `(?P<got>[^`]*)`$")


def _type_name(name: str) -> str:
    return _TYPE_NAMES.get(name, name)


def _phrase(problem: str) -> str:
    """msgspec's sentence in the server's words: ``expected an object, got an array``."""
    match = _EXPECTED.match(problem)
    if match is None:
        named = _NAMED.sub(lambda m: _type_name(m[1]), problem)
        return named[:1].lower() + named[1:]
    wanted = [_type_name(t) for t in match["want"].split(" | ") if t != "null"]
    return f"expected {' or '.join(wanted)}, got {_type_name(match['got'])}"


def check_shape(document: Any, shape: type[T], root: str) -> T:
    """``document`` (decoded JSON) as the typed ``shape``; :class:`ShapeError` names the first wrong field,
    its path starting at ``root`` (``""`` for the document itself, else a name such as ``ExtenderArgs``)."""
    try:
        return msgspec.convert(document, shape)
    except msgspec.ValidationError as e:
        match = _AT.match(str(e))
        assert match is not None  # the pattern matches any text
        path = (match["path"] or "").replace("[...]", "[*]")
        full = (root + path) if root else (path.lstrip(".") or "request body")
        raise ShapeError(full, _phrase(match["problem"])) from None
