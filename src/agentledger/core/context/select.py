"""Selection: which units enter the context, in which form, and why each other one did not.

Order of decisions (MISSION "Context builder"):

1. Gates and identity: a gated unit is rejected ``gated``; of units sharing a ``key`` only
   the highest version stays (the others ``superseded``); a unit whose text repeats an
   earlier one's (mandatory first, then by value) is ``duplicate_of:{id}``.
2. Mandatory units, in the given order, each in its fullest form that leaves room for the
   smallest form of every mandatory unit after it. If even the smallest forms do not fit:
   ``BudgetTooSmallError`` naming every mandatory unit and the shortfall.
3. Optional turns: a contiguous suffix, newest first, whole turns only; the first that does
   not fit ends it (older ones ``over_budget`` too: no holes in the conversation).
4. The rest by value (``units.value``), highest first, ties by source then id: below
   ``min_value`` ``lower_value``; otherwise the fullest form that fits — the full text, then
   each reduction in order (structured, essential, free summary last) — or ``over_budget``.

The data message's frame is paid by the first data unit taken. Costs are the exact
counts of each unit's rendered segment, so the sum is the rendered count (see
``render``); the rendered text is counted once more at the end and must agree.
"""

from __future__ import annotations

from collections.abc import Sequence

from msgspec import Struct

from agentledger.contracts.context_api import SystemPart, ToolSchema, TraceLine
from agentledger.core.context.accounting import BudgetTooSmallError
from agentledger.core.context.render import Count, Rendered, frame_tokens, is_data, render, unit_segment
from agentledger.core.context.units import SOURCE_RANK, Unit, value
from agentledger.errors import ContractError


class Selection(Struct, frozen=True):
    """The units taken (in candidate order), the text each is rendered with, the trace, the rendering.

    ``forms``: the form each taken unit uses (``full`` or a reduction's kind);
    ``trace``: one line per candidate, in candidate order.
    """

    units: list[Unit]
    forms: dict[str, str]
    trace: list[TraceLine]
    rendered: Rendered
    budget: int


def _version_key(v: str) -> tuple[int, int, str]:
    return (1, int(v), "") if v.isascii() and v.isdigit() else (0, 0, v)


def _forms(unit: Unit) -> list[tuple[str, str]]:
    forms = [("full", unit.text)]
    if not unit.verbatim and unit.source not in ("turn", "input"):
        forms.extend((r.kind, r.text) for r in unit.reductions)
    return forms


def _filter(units: Sequence[Unit], values: list[float]) -> tuple[dict[int, str], list[int], list[int], list[int]]:
    """Gates, supersession, duplicates: the rejected (index -> reason) and the three queues."""
    n = len(units)
    reason: dict[int, str] = {}
    best_of_key: dict[str, int] = {}
    for i, u in enumerate(units):
        if u.gated is not None:
            reason[i] = f"gated:{u.gated}" if u.gated else "gated"
        elif u.key is not None:
            j = best_of_key.get(u.key)
            if j is None or _version_key(u.version) > _version_key(units[j].version):
                best_of_key[u.key] = i
    for i, u in enumerate(units):
        if i not in reason and u.key is not None and best_of_key[u.key] != i and not u.mandatory:
            reason[i] = "superseded"
    mandatory = [i for i in range(n) if units[i].mandatory and i not in reason]
    turns = sorted((i for i in range(n) if not units[i].mandatory and i not in reason and units[i].source == "turn"),
                   key=lambda i: (-(units[i].ordinal or 0), i))
    rest = sorted((i for i in range(n) if not units[i].mandatory and i not in reason and units[i].source != "turn"),
                  key=lambda i: (-values[i], SOURCE_RANK[units[i].source], units[i].id))
    seen: dict[str, int] = {}
    for i in [*mandatory, *turns, *rest]:
        u = units[i]
        if u.source in ("turn", "input"):
            continue  # two turns saying the same thing are both part of the conversation
        first = seen.setdefault(u.text, i)
        if first != i and not u.mandatory:
            reason[i] = f"duplicate_of:{units[first].id}"
    return reason, mandatory, [i for i in turns if i not in reason], [i for i in rest if i not in reason]


def select(units: Sequence[Unit], budget: int, count: Count, *, system_parts: Sequence[SystemPart] = (),
           tools: Sequence[ToolSchema] = (), now: float | None = None, min_value: float = 0.0) -> Selection:
    """Choose and render the units that fit ``budget`` (see the module docstring for the order).

    ``count`` is the build's counter (``accounting.counter_for(...).count``); ``now``
    (seconds since the Unix epoch) feeds freshness. Deterministic: the same input gives
    the same selection, trace and bytes. Raises ``BudgetTooSmallError`` and
    ``ContractError`` ``duplicate_unit_id``.
    """
    ids = [u.id for u in units]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ContractError(f"unit id {dup!r} appears twice", code="duplicate_unit_id", path="$.units")
    values = [value(u, now) for u in units]
    forms = [_forms(u) for u in units]
    costs = [[count(unit_segment(u, text)) for _, text in f] for u, f in zip(units, forms, strict=True)]
    frame = frame_tokens(count)
    reason, mandatory, optional_turns, rest = _filter(units, values)
    chosen: dict[int, int] = {}  # unit index -> form index

    any_data = any(is_data(units[i]) for i in mandatory)
    least = [min(costs[i]) for i in mandatory]
    need = sum(least) + (frame if any_data else 0)
    if need > budget:
        raise BudgetTooSmallError(
            f"the mandatory units need {need} tokens at least, the budget is {budget}",
            mandatory=[units[i].id for i in mandatory], shortfall=need - budget)
    left = budget - (frame if any_data else 0)
    framed = any_data
    for k, i in enumerate(mandatory):
        after = sum(least[k + 1:])
        chosen[i] = f = next(f for f, c in enumerate(costs[i]) if c + after <= left)
        left -= costs[i][f]

    ended = False  # optional turns: a contiguous suffix, no holes
    for i in optional_turns:
        ended = ended or costs[i][0] > left
        if ended:
            reason[i] = "over_budget"
        else:
            chosen[i] = 0
            left -= costs[i][0]

    for i in rest:
        extra = frame if is_data(units[i]) and not framed else 0
        f_or_none = next((f for f, c in enumerate(costs[i]) if c + extra <= left), None)
        if values[i] < min_value:
            reason[i] = "lower_value"
        elif f_or_none is None:
            reason[i] = "over_budget"
        else:
            chosen[i] = f_or_none
            left -= costs[i][f_or_none] + extra
            framed = framed or bool(extra)

    taken = sorted(chosen)
    texts = {units[i].id: forms[i][chosen[i]][1] for i in taken if chosen[i] != 0}
    rendered = render([units[i] for i in taken], system_parts=system_parts, tools=tools, count=count, texts=texts)
    assert rendered.budgeted_tokens == budget - left <= budget, (rendered.budgeted_tokens, budget, left)
    trace = [_line(u, values[i], costs[i], forms[i], chosen=chosen.get(i), reason=reason.get(i, ""))
             for i, u in enumerate(units)]
    return Selection(units=[units[i] for i in taken], forms={units[i].id: forms[i][chosen[i]][0] for i in taken},
                     trace=trace, rendered=rendered, budget=budget)


def _line(u: Unit, val: float, costs: list[int], forms: list[tuple[str, str]], *, chosen: int | None,
          reason: str) -> TraceLine:
    if chosen is None:
        return TraceLine(unit_id=u.id, source=u.source, outcome="rejected", reason=reason, tokens=costs[0],
                         version=u.version, mandatory=u.mandatory, value=val)
    why = "mandatory" if u.mandatory else "recent_turn" if u.source == "turn" else "selected"
    if forms[chosen][0] != "full":
        why = f"{why};reduced:{forms[chosen][0]}"
    return TraceLine(unit_id=u.id, source=u.source, outcome="accepted", reason=why, tokens=costs[chosen],
                     version=u.version, mandatory=u.mandatory, value=val)
