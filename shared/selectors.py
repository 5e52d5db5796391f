"""Label selectors (``metav1.LabelSelector``), node selectors (``v1.NodeSelector``) and selector text, parsed once.

Three different grammars, kept apart like upstream:

* :class:`LabelSelector` is ``metav1.LabelSelector`` (pods, PDBs, namespaces, topology spread):
  ``matchLabels`` plus ``matchExpressions`` with ``In NotIn Exists DoesNotExist``, all ANDed.
  ``None`` (a nil selector) matches **nothing**; an empty selector ``{}`` matches **everything**
  (``metav1.LabelSelectorAsSelector``). An invalid selector (unknown operator, ``In`` with no values,
  ``Exists`` with values) is a :class:`SelectorError` at parse time, like upstream returns an error.
* :class:`NodeSelector` is the required node affinity (``component-helpers/scheduling/corev1/nodeaffinity``):
  terms are ORed, expressions inside a term ANDed. A nil or empty term matches no objects. Operators
  ``In NotIn Exists DoesNotExist Gt Lt``; every key must be a qualified name and every value a valid label
  value, because upstream builds the term with ``labels.NewRequirement`` (the API server validates only the
  keys, so ``NotIn ["invalid value: @#"]`` reaches the scheduler and makes the term fail). ``Gt``/``Lt``
  compare as Go's ``strconv.ParseInt(s, 10, 64)`` does. ``matchFields`` takes ``In``/``NotIn`` with exactly
  one value and compares against the node's fields, which are only ``metadata.name`` (any other key reads
  as ``""``); a node without a name (a PV's node-affinity check passes only labels) skips ``matchFields``.
  A term that fails to parse does not match, but the other terms still do (``LazyErrorNodeSelector``);
  the parse errors are kept in :attr:`NodeSelector.errors`.
* :class:`Selector` is a label selector written as text (``kubectl get -l``, ``labels.Parse``), the form the
  configuration uses for node classes; a bad one is a :class:`SelectorSyntaxError` whose message is a phrase
  for the configuration's one-sentence error.

Upstream: ``staging/src/k8s.io/component-helpers/scheduling/corev1/nodeaffinity/nodeaffinity.go`` and
``staging/src/k8s.io/apimachinery/pkg/labels/selector.go`` (``NewRequirement``, ``Requirement.Matches``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from shared.names import is_label_value, is_qualified_name, label_value_error, qualified_name_error

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
    "go_parse_int64",
    "Selector",
    "SelectorSyntaxError",
]

IN, NOT_IN, EXISTS, DOES_NOT_EXIST, GT, LT = "In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"
_LABEL_OPERATORS = frozenset({IN, NOT_IN, EXISTS, DOES_NOT_EXIST})
_NODE_OPERATORS = _LABEL_OPERATORS | {GT, LT}
_FIELD_OPERATORS = frozenset({IN, NOT_IN})
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def go_parse_int64(s: str) -> int | None:
    """``strconv.ParseInt(s, 10, 64)``: optional sign, ASCII digits only, int64 range; else ``None``.

    Python's ``int()`` is laxer (whitespace, ``_``, non-ASCII digits, no range), which would make
    ``Gt``/``Lt`` match labels kube-scheduler rejects.
    """
    body = s[1:] if s[:1] in ("+", "-") else s
    if not body or not body.isascii() or not body.isdigit():
        return None
    n = int(s)
    return n if _INT64_MIN <= n <= _INT64_MAX else None


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
        n = go_parse_int64(v)
        if n is None:
            return False
        return n > self.bound if op == GT else n < self.bound


def _requirement(expr: Any, operators: frozenset[str], where: str, *, validate_syntax: bool = False) -> Requirement:
    """Parse one requirement. ``validate_syntax`` adds ``labels.NewRequirement``'s key and value checks."""
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
    if validate_syntax:
        err = qualified_name_error(key)
        for v in values:
            err = err or label_value_error(v)
        if err:
            raise SelectorError(f"{where}: {err}")
    if op in (GT, LT):
        if len(values) != 1:
            raise SelectorError(f"{where}: operator {op} takes exactly one value")
        bound = go_parse_int64(values[0])
        if bound is None:
            raise SelectorError(f"{where}: {values[0]!r} is not an integer")
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
    """Expressions and fields ANDed. ``valid=False`` (a parse error) or an empty term matches nothing.

    ``fields`` hold ``In``/``NotIn`` with one value each. They are matched against the node's only field,
    ``metadata.name`` (``fields.Set.Get`` of any other key is ``""``), and skipped when ``node_name`` is
    empty, exactly like ``nodeSelectorTerm.match`` with an empty ``extractNodeFields``.
    """

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()
    valid: bool = True

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        if not self.valid or (not self.expressions and not self.fields):
            return False
        for r in self.expressions:
            if not r.matches(labels):
                return False
        if node_name:
            for r in self.fields:
                actual = node_name if r.key == "metadata.name" else ""
                if (actual in r.values) != (r.operator == IN):
                    return False
        return True


def _field_requirement(expr: Any, where: str) -> Requirement:
    """``nodeSelectorRequirementsAsFieldSelector``: ``In``/``NotIn``, exactly one value, any key.

    The API server accepts only ``metadata.name``; the scheduler itself does not check the key.
    """
    if not isinstance(expr, Mapping):
        raise SelectorError(f"{where}: expected an object, got {expr!r}")
    key = expr.get("key") or ""
    op = expr.get("operator")
    values = expr.get("values") or []
    if op not in _FIELD_OPERATORS:
        raise SelectorError(f"{where}.operator: {op!r} is not a valid node field selector operator (In, NotIn)")
    if not isinstance(key, str) or not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise SelectorError(f"{where}: key must be a string and values a list of strings")
    if len(values) != 1:
        raise SelectorError(f"{where}.values: must have one element")
    return Requirement(key, op, frozenset(values))


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
            _requirement(e, _NODE_OPERATORS, f"{where}.matchExpressions[{i}]", validate_syntax=True)
            for i, e in enumerate(exprs)
        )
        parsed_fields = tuple(_field_requirement(f, f"{where}.matchFields[{i}]") for i, f in enumerate(fields))
        return NodeSelectorTerm(parsed_exprs, parsed_fields), None
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
    if terms_raw is None and isinstance(raw, Mapping):
        return NodeSelector(())  # nil nodeSelectorTerms: no term, so it matches no node (not a parse error)
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


# --- label selectors written as text (the ``kubectl get -l`` syntax) ---------------------------------


class SelectorSyntaxError(ValueError):
    """A selector string that does not parse; the message is a phrase (``must ...``) for ConfigError."""


_SET_RE = re.compile(r"(?P<key>\S+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)")


def _split_top_level(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise SelectorSyntaxError("must have balanced parentheses")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise SelectorSyntaxError("must have balanced parentheses")
    parts.append(text[start:])
    return parts


def _checked_key(key: str) -> str:
    key = key.strip()
    if not is_qualified_name(key):
        raise SelectorSyntaxError(f"must use valid label keys like example.com/name, and {key!r} is not one")
    return key


def _checked_values(values: Iterable[str]) -> frozenset[str]:
    out = []
    for v in values:
        v = v.strip()
        if not is_label_value(v):
            raise SelectorSyntaxError(f"must use valid label values, and {v!r} is not one")
        out.append(v)
    return frozenset(out)


def _parse_text_requirement(part: str) -> Requirement:
    p = part.strip()
    if not p:
        raise SelectorSyntaxError("must not contain an empty requirement")
    if p.startswith("!"):
        return Requirement(_checked_key(p[1:]), DOES_NOT_EXIST)
    m = _SET_RE.fullmatch(p)
    if m:
        values = m["values"].split(",")
        if not m["values"].strip():
            raise SelectorSyntaxError(f"must list at least one value for {m['op']}")
        return Requirement(_checked_key(m["key"]), IN if m["op"] == "in" else NOT_IN, _checked_values(values))
    for op, kind in (("!=", NOT_IN), ("==", IN), ("=", IN)):
        if op in p:
            key, _, value = p.partition(op)
            return Requirement(_checked_key(key), kind, _checked_values((value,)))
    if any(c.isspace() for c in p):
        raise SelectorSyntaxError("must be key, !key, key=value, key!=value, key in (a,b) or key notin (a,b)")
    return Requirement(_checked_key(p), EXISTS)


@dataclass(frozen=True, slots=True)
class Selector:
    """A node label selector written as text, the ``kubectl get -l`` syntax (``labels.Parse``).

    Requirements are separated by commas and ANDed: ``key`` (exists), ``!key`` (does not exist),
    ``key=value`` / ``key==value``, ``key!=value`` (true also when the key is absent),
    ``key in (a,b)``, ``key notin (a,b)``. ``text`` is kept as written, for messages.
    """

    text: str
    requirements: tuple[Requirement, ...]

    @classmethod
    def parse(cls, text: str) -> Selector:
        if not isinstance(text, str) or not text.strip():
            raise SelectorSyntaxError("must be a non-empty label selector like key=value, key or key in (a,b)")
        return cls(text, tuple(_parse_text_requirement(p) for p in _split_top_level(text)))

    def matches(self, labels: Mapping[str, str]) -> bool:
        for r in self.requirements:
            if not r.matches(labels):
                return False
        return True

    def __str__(self) -> str:
        return self.text
