"""Taints and tolerations, with kube-scheduler's exact matching rules and one effect filter for every caller.

Upstream:

* ``staging/src/k8s.io/api/core/v1/toleration.go`` ``Toleration.ToleratesTaint`` — :func:`tolerates`;
* ``staging/src/k8s.io/component-helpers/scheduling/corev1/helpers.go`` ``TolerationsTolerateTaint``,
  ``FindMatchingUntoleratedTaint`` and ``getFilteredTaints`` — :func:`tolerations_tolerate_taint`,
  :func:`find_matching_untolerated_taint` (``effects=None`` is the nil filter: every taint counts);
* ``pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go`` ``Filter`` (only ``NoSchedule`` and
  ``NoExecute`` taints, ``helper.DoNotScheduleTaintsFilterFunc``) — :func:`check_taints`, and ``Score``
  (``countIntolerableTaintsPreferNoSchedule``) — :func:`count_intolerable_prefer_no_schedule`.

The webhook (which tolerations to inject), the extender (``/filter``) and the rescheduler (can this pod land on
that spot node) all call these, so "tolerated" means one thing everywhere.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from shared.fit_reasons import ERR_UNTOLERATED_TAINT, ERR_UNTOLERATED_TAINT_NAMED, Reason
from shared.model import NO_EXECUTE, NO_SCHEDULE, PREFER_NO_SCHEDULE, Node, Pod, Taint, Toleration
from shared.selectors import go_parse_int64
from shared.switches import CURRENT, Switches

__all__ = [
    "DO_NOT_SCHEDULE_EFFECTS",
    "tolerates",
    "tolerations_tolerate_taint",
    "find_matching_untolerated_taint",
    "tolerates_all",
    "check_taints",
    "count_intolerable_prefer_no_schedule",
]

DO_NOT_SCHEDULE_EFFECTS: frozenset[str] = frozenset({NO_SCHEDULE, NO_EXECUTE})
"""``helper.DoNotScheduleTaintsFilterFunc``: the effects that keep a pod off a node."""

_EQUAL, _EXISTS, _LT, _GT = "Equal", "Exists", "Lt", "Gt"


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """``Toleration.ToleratesTaint``.

    1. An empty toleration effect matches every effect; otherwise the effects must be equal.
    2. An empty toleration key matches every key (the API only allows that with ``Exists``).
    3. ``Equal`` (also an empty operator) compares values; ``Exists`` matches any value.
    4. ``Lt``/``Gt`` (``TaintTolerationComparisonOperators``) compare the values as int64: the taint's value
       must be below/above the toleration's. A value that is not a canonical decimal integer (``0``, or
       ``-?[1-9][0-9]*``: no ``+``, no leading zeros; ``content.IsDecimalInteger``) tolerates nothing.
       The API server admits these operators only with the feature gate on, so an object carrying one comes
       from a cluster that uses them; we honour them as the gated scheduler does.
    5. Any other operator tolerates nothing.
    """
    effect = toleration.effect
    if effect and effect != taint.effect:
        return False
    key = toleration.key
    if key and key != taint.key:
        return False
    op = toleration.operator
    if op == _EQUAL or not op:
        return toleration.value == taint.value
    if op == _EXISTS:
        return True
    if op in (_LT, _GT):
        bound = _decimal_int64(toleration.value)
        actual = _decimal_int64(taint.value)
        if bound is None or actual is None:
            return False
        return actual < bound if op == _LT else actual > bound
    return False


def _decimal_int64(s: str) -> int | None:
    # content.IsDecimalInteger (canonical form) then strconv.ParseInt(s, 10, 64).
    digits = s[1:] if s[:1] == "-" else s
    if not digits or (digits[0] == "0" and (len(digits) > 1 or s[0] == "-")):
        return None
    return go_parse_int64(s) if digits.isascii() and digits.isdigit() else None


def tolerations_tolerate_taint(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    """``TolerationsTolerateTaint``: some toleration tolerates ``taint``."""
    for t in tolerations:
        if tolerates(t, taint):
            return True
    return False


def find_matching_untolerated_taint(
    taints: Iterable[Taint],
    tolerations: Sequence[Toleration],
    effects: frozenset[str] | None = None,
) -> Taint | None:
    """``FindMatchingUntoleratedTaint`` + ``getFilteredTaints``: the first taint (in node order) whose effect
    is in ``effects`` (``None``: every effect) that no toleration tolerates, or ``None`` if all are tolerated.

    The first one is what the scheduler names in its message, so the order is the node's own.
    """
    for taint in taints:
        if effects is not None and taint.effect not in effects:
            continue
        if not tolerations_tolerate_taint(tolerations, taint):
            return taint
    return None


def tolerates_all(
    taints: Iterable[Taint],
    tolerations: Sequence[Toleration],
    effects: frozenset[str] | None = None,
) -> bool:
    """Every taint with an effect in ``effects`` (``None``: all) is tolerated."""
    return find_matching_untolerated_taint(taints, tolerations, effects) is None


_UNTOLERATED = Reason(ERR_UNTOLERATED_TAINT, ERR_UNTOLERATED_TAINT, True)


def check_taints(pod: Pod, node: Node, *, switches: Switches = CURRENT) -> Reason | None:
    """TaintToleration ``Filter``: ``None`` if the pod tolerates every ``NoSchedule``/``NoExecute`` taint.

    Otherwise ``UnschedulableAndUnresolvable`` (evicting pods does not remove a taint) with the text of the
    cluster's release: ``node(s) had untolerated taint(s)`` from v1.34, ``node(s) had untolerated taint {key:
    value}`` (the first untolerated taint) before (``switches.taint_reason_omits_taint``); the code is
    :data:`~shared.fit_reasons.ERR_UNTOLERATED_TAINT` either way. ``PreferNoSchedule`` never filters; it only
    lowers the score (:func:`count_intolerable_prefer_no_schedule`).
    """
    taints = node.taints
    if not taints:
        return None
    taint = find_matching_untolerated_taint(taints, pod.tolerations, DO_NOT_SCHEDULE_EFFECTS)
    if taint is None:
        return None
    if switches.taint_reason_omits_taint:
        return _UNTOLERATED
    return Reason(ERR_UNTOLERATED_TAINT, ERR_UNTOLERATED_TAINT_NAMED.format(key=taint.key, value=taint.value), True)


def count_intolerable_prefer_no_schedule(pod: Pod, node: Node) -> int:
    """TaintToleration ``Score`` before normalisation: how many ``PreferNoSchedule`` taints the pod does not
    tolerate. Fewer is better (the scheduler reverses it onto 0-100).

    Upstream first keeps only the tolerations with an empty or ``PreferNoSchedule`` effect
    (``getAllTolerationPreferNoSchedule``); any other toleration cannot tolerate a ``PreferNoSchedule``
    taint anyway, so checking them all gives the same count.
    """
    count = 0
    for taint in node.taints:
        if taint.effect == PREFER_NO_SCHEDULE and not tolerations_tolerate_taint(pod.tolerations, taint):
            count += 1
    return count
