"""Label selectors (``metav1.LabelSelector``) and node selectors (``v1.NodeSelector``), parsed once.

Two different grammars, kept apart like upstream:

* :class:`LabelSelector` is ``metav1.LabelSelector`` (pods, PDBs, namespaces, topology spread):
  ``matchLabels`` plus ``matchExpressions`` with ``In NotIn Exists DoesNotExist``, all ANDed.
  ``None`` (a nil selector) matches **nothing**; an empty selector ``{}`` matches **everything**
  (``metav1.LabelSelectorAsSelector``). An invalid selector (unknown operator, ``In`` with no values,
  ``Exists`` with values) is a :class:`SelectorError` at parse time, like upstream returns an error.
* :class:`NodeSelector` is the required node affinity (``component-helpers/scheduling/corev1/nodeaffinity``):
  terms are ORed, expressions inside a term ANDed, ``matchFields`` supports only ``metadata.name``.
  A nil or empty term matches no objects. Operators ``In NotIn Exists DoesNotExist Gt Lt``. A term that
  fails to parse (unknown operator, ``Gt`` with a non-integer) does not match, but the other terms
  still do (``LazyErrorNodeSelector``); the parse errors are kept in :attr:`NodeSelector.errors`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "SelectorError",
    "Requirement",
    "LabelSelector",
    "NodeSelectorTerm",
    "NodeSelector",
    "parse_label_selector",
    "parse_node_selector",
    "parse_node_selector_term",
    "EVERYTHING",
]

IN, NOT_IN, EXISTS, DOES_NOT_EXIST, GT, LT = "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"
_LABEL_OPERATORS = frozenset({IN, NOT_IN, EXISTS, DOES_NOT_EXIST})
_NODE_OPERATORS = _LABEL_OPERATORS | {GT, LT}


class SelectorError(ValueError):
    """A selector the API server would reject; the message names the offending requirement."""


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``key operator values`` expression. For ``Gt``/``Lt`` ``bound`` holds the integer."""

    key: str
    operator: str
    values: frozenset[str] = frozenset()
    bound: int = 0

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op == IN:
            v = labels.get(self.key)
            return v is not None and v in self.values
        if op == NOT_IN:
            v = labels.get(self.key)
            return v is None or v not in self.values
        if op == EXISTS:
            return self.key in labels
        if op == DOES_NOT_EXIST:
            return self.key not in labels
        v = labels.get(self.key)
        if v is None:
            return False
        try:
            n = int(v)
        except ValueError:
            return False
        return n > self.bound if op == GT else n < self.bound


def _requirement(expr: Any, operators: frozenset[str], where: str) -> Requirement:
    if not isinstance(expr, Mapping):
        raise SelectorError(f"{where}: expected an object, got {expr!r}")
    key = expr.get("key")
    op = expr.get("operator")
    values = expr.get("values") or []
    if not isinstance(key, str) or not key:
        raise SelectorError(f"{where}: key must be a non-empty string")
    if op not in operators:
        raise SelectorError(f"{where}: {op!r} is not a valid operator (one of {sorted(operators)})")
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise SelectorError(f"{where}: values must be a list of strings")
    if op in (IN, NOT_IN) and not values:
        raise SelectorError(f"{where}: values must be non-empty for operator {op}")
    if op in (EXISTS, DOES_NOT_EXIST) and values:
        raise SelectorError(f"{where}: values must be empty for operator {op}")
    if op in (GT, LT):
        if len(values) != 1:
            raise SelectorError(f"{where}: operator {op} takes exactly one value")
        try:
            bound = int(values[0])
        except ValueError:
            raise SelectorError(f"{where}: {values[0]!r} is not an integer") from None
        return Requirement(key, op, frozenset(values), bound)
    return Requirement(key, op, frozenset(values))


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A parsed ``metav1.LabelSelector``. ``requirements == ()`` matches every label set."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        for r in self.requirements:
            if not r.matches(labels):
                return False
        return True

    @property
    def is_empty(self) -> bool:
        return not self.requirements


EVERYTHING = LabelSelector()


def parse_label_selector(raw: Any, where: str = "selector") -> LabelSelector | None:
    """Parse a ``metav1.LabelSelector``; ``None`` in, ``None`` out (matches nothing)."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise SelectorError(f"{where}: expected an object, got {raw!r}")
    reqs: list[Requirement] = []
    match_labels = raw.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise SelectorError(f"{where}.matchLabels: expected an object")
    for k, v in match_labels.items():
        if not isinstance(v, str):
            raise SelectorError(f"{where}.matchLabels[{k}]: value must be a string")
        reqs.append(Requirement(k, IN, frozenset((v,))))
    exprs = raw.get("matchExpressions") or []
    if not isinstance(exprs, list):
        raise SelectorError(f"{where}.matchExpressions: expected a list")
    for i, e in enumerate(exprs):
        reqs.append(_requirement(e, _LABEL_OPERATORS, f"{where}.matchExpressions[{i}]"))
    return LabelSelector(tuple(reqs))


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """Expressions and fields ANDed. ``valid=False`` (a parse error) or an empty term matches nothing."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()
    valid: bool = True

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        if not self.valid or (not self.expressions and not self.fields):
            return False
        for r in self.expressions:
            if not r.matches(labels):
                return False
        if self.fields:
            name_fields = {"metadata.name": node_name}
            for r in self.fields:
                if not r.matches(name_fields):
                    return False
        return True


def parse_node_selector_term(raw: Any, where: str = "term") -> tuple[NodeSelectorTerm, str | None]:
    """Parse one ``NodeSelectorTerm``; a bad term becomes a never-matching term plus its error."""
    if raw is None:
        return NodeSelectorTerm(), None
    try:
        if not isinstance(raw, Mapping):
            raise SelectorError(f"{where}: expected an object, got {raw!r}")
        exprs = raw.get("matchExpressions") or []
        fields = raw.get("matchFields") or []
        if not isinstance(exprs, list) or not isinstance(fields, list):
            raise SelectorError(f"{where}: matchExpressions and matchFields must be lists")
        parsed_exprs = tuple(
            _requirement(e, _NODE_OPERATORS, f"{where}.matchExpressions[{i}]") for i, e in enumerate(exprs)
        )
        parsed_fields = []
        for i, f in enumerate(fields):
            r = _requirement(f, frozenset({IN, NOT_IN}), f"{where}.matchFields[{i}]")
            if r.key != "metadata.name":
                raise SelectorError(f"{where}.matchFields[{i}]: not a supported field selector: {r.key}")
            if len(r.values) != 1:
                raise SelectorError(f"{where}.matchFields[{i}]: must have one element")
            parsed_fields.append(r)
        return NodeSelectorTerm(parsed_exprs, tuple(parsed_fields)), None
    except SelectorError as e:
        return NodeSelectorTerm(valid=False), str(e)


@dataclass(frozen=True, slots=True)
class NodeSelector:
    """Required node affinity: the node matches if **any** term matches. No terms match nothing."""

    terms: tuple[NodeSelectorTerm, ...]
    errors: tuple[str, ...] = ()

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        for t in self.terms:
            if t.matches(node_name, labels):
                return True
        return False


def parse_node_selector(raw: Any, where: str = "nodeSelector") -> NodeSelector | None:
    """Parse a ``v1.NodeSelector`` (``{"nodeSelectorTerms": [...]}``); ``None`` in, ``None`` out."""
    if raw is None:
        return None
    terms_raw = raw.get("nodeSelectorTerms") if isinstance(raw, Mapping) else None
    if not isinstance(terms_raw, list):
        return NodeSelector((), (f"{where}.nodeSelectorTerms: expected a list",))
    terms: list[NodeSelectorTerm] = []
    errors: list[str] = []
    for i, t in enumerate(terms_raw):
        term, err = parse_node_selector_term(t, f"{where}.nodeSelectorTerms[{i}]")
        terms.append(term)
        if err:
            errors.append(err)
    return NodeSelector(tuple(terms), tuple(errors))
