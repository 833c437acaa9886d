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
4. The rest by **marginal value**, highest first, ties by source then id: a unit's value
   (``units.value``) less ``W_REDUNDANCY`` times its redundancy, the share of its distinct
   words that the units taken so far already show (the current input aside), recomputed as
   units are taken (``_by_marginal_value``). So a memory item, a document chunk and a turn
   that say the same thing do not spend the budget twice, and many near-identical items
   give way to ones that add something. Each in turn: below ``min_value`` (its own value)
   ``lower_value``; its whole text inside a taken unit's text ``duplicate_of:{id}``;
   otherwise the fullest form that fits — the full text, then each reduction in order
   (structured, essential, free summary last) — or ``over_budget``. Budget filling does not
   stop at the first unit that does not fit: smaller ones after it are still tried. A
   trace line of a unit decided so shows the marginal value, and its reason the redundancy
   subtracted (``selected;redundancy:0.150``).

The data message's frame is paid by the first data unit taken, a shared block's opening
and closing (``render``: listed sources) by its first unit taken. Costs are the exact
counts of each unit's rendered segment, so the sum is the rendered count (see
``render``); the rendered text is counted once more at the end and must agree.
"""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterator, Sequence

from msgspec import Struct

from agentledger.contracts.context_api import SystemPart, ToolSchema, TraceLine
from agentledger.core.context.accounting import BudgetTooSmallError
from agentledger.core.context.render import (
    Count,
    Group,
    Rendered,
    frame_tokens,
    group_of,
    group_tokens,
    is_data,
    render,
    unit_segment,
)
from agentledger.core.context.units import SOURCE_RANK, W_REDUNDANCY, Unit, value
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


_WORD = re.compile(r"\w+")


def words_of(text: str) -> frozenset[str]:
    """The distinct words of ``text`` (casefolded), what redundancy compares."""
    return frozenset(w.casefold() for w in _WORD.findall(text))


class _Room:
    """What is left of the budget, and the separators not yet paid: the data message's frame
    (by the first data unit taken) and each shared block's tags (by its first unit taken)."""

    def __init__(self, units: Sequence[Unit], count: Count, budget: int) -> None:
        self.units = units
        self.left = budget
        self.frame = frame_tokens(count)
        self.groups = [group_of(u) for u in units]
        self.group_cost = {g: group_tokens(g, count) for g in set(self.groups) if g is not None}
        self.framed = False
        self.opened: set[Group] = set()

    def separators(self, i: int) -> int:
        """The separators taking unit ``i`` would pay now."""
        g = self.groups[i]
        return ((self.frame if is_data(self.units[i]) and not self.framed else 0)
                + (self.group_cost[g] if g is not None and g not in self.opened else 0))

    def open_for(self, taken: Sequence[int]) -> int:
        """The separators ``taken`` need together; marked paid (not yet subtracted)."""
        cost = 0
        for i in taken:
            cost += self.separators(i)
            self._opened(i)
        return cost

    def take(self, i: int, cost: int) -> None:
        self.left -= cost + self.separators(i)
        self._opened(i)

    def _opened(self, i: int) -> None:
        self.framed = self.framed or is_data(self.units[i])
        if (g := self.groups[i]) is not None:
            self.opened.add(g)


class _Shown:
    """The words and texts of the units taken so far (the current input aside: repeating the
    question is relevance, not redundancy), for redundancy and containment."""

    def __init__(self, units: Sequence[Unit]) -> None:
        self.units = units
        self.words: set[str] = set()
        self.texts: list[int] = []
        self._words = [words_of(u.text) for u in units]

    def add(self, i: int) -> None:
        if self.units[i].source == "input":
            return
        self.words |= self._words[i]
        self.texts.append(i)

    def redundancy(self, i: int) -> float:
        """The share of unit ``i``'s distinct words already shown (0 for a unit without words)."""
        mine = self._words[i]
        return len(mine & self.words) / len(mine) if mine else 0.0

    def container_of(self, i: int) -> int | None:
        """A taken unit whose text holds unit ``i``'s whole text (a turn may repeat a turn)."""
        u = self.units[i]
        text = u.text.strip()
        if not text or u.source in ("turn", "input"):
            return None
        return next((j for j in self.texts if text in self.units[j].text), None)


def _by_marginal_value(units: Sequence[Unit], order: Sequence[int], values: Sequence[float],
                       shown: _Shown) -> Iterator[tuple[int, float]]:
    """The units of ``order`` by marginal value, highest first: ``value - W_REDUNDANCY ·
    redundancy`` against what was shown when each is decided (ties: source, then id).

    Lazy greedy: what is shown only grows, so a unit's marginal value only falls; the top of
    the heap is re-evaluated and decided only if it is still not below the next one.
    """
    def marginal(i: int) -> float:
        return round(values[i] - W_REDUNDANCY * shown.redundancy(i), 9)

    heap = [(-marginal(i), SOURCE_RANK[units[i].source], units[i].id, i) for i in order]
    heapq.heapify(heap)
    while heap:
        _, rank, uid, i = heapq.heappop(heap)
        now = marginal(i)
        if heap and (-now, rank, uid) > heap[0][:3]:
            heapq.heappush(heap, (-now, rank, uid, i))
            continue
        yield i, now


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
    reason, mandatory, optional_turns, rest = _filter(units, values)
    room = _Room(units, count, budget)
    chosen: dict[int, int] = {}  # unit index -> form index

    least = [min(costs[i]) for i in mandatory]
    need = sum(least) + room.open_for(mandatory)
    if need > budget:
        raise BudgetTooSmallError(
            f"the mandatory units need {need} tokens at least, the budget is {budget}",
            mandatory=[units[i].id for i in mandatory], shortfall=need - budget)
    room.left -= need - sum(least)
    for k, i in enumerate(mandatory):
        after = sum(least[k + 1:])
        chosen[i] = f = next(f for f, c in enumerate(costs[i]) if c + after <= room.left)
        room.left -= costs[i][f]

    ended = False  # optional turns: a contiguous suffix, no holes
    for i in optional_turns:
        ended = ended or costs[i][0] > room.left
        if ended:
            reason[i] = "over_budget"
        else:
            chosen[i] = 0
            room.left -= costs[i][0]

    shown = _Shown(units)  # what the context shows so far: redundancy and containment
    for i in chosen:
        shown.add(i)
    decided: dict[int, float] = {}  # unit index -> its marginal value when it was decided
    for i, marginal in _by_marginal_value(units, rest, values, shown):
        decided[i] = marginal
        extra = room.separators(i)
        f_or_none = next((f for f, c in enumerate(costs[i]) if c + extra <= room.left), None)
        container = shown.container_of(i)
        if values[i] < min_value:
            reason[i] = "lower_value"
        elif container is not None:
            reason[i] = f"duplicate_of:{units[container].id}"
        elif f_or_none is None:
            reason[i] = "over_budget"
        else:
            chosen[i] = f_or_none
            room.take(i, costs[i][f_or_none])
            shown.add(i)

    taken = sorted(chosen)
    texts = {units[i].id: forms[i][chosen[i]][1] for i in taken if chosen[i] != 0}
    rendered = render([units[i] for i in taken], system_parts=system_parts, tools=tools, count=count, texts=texts)
    assert rendered.budgeted_tokens == budget - room.left <= budget, (rendered.budgeted_tokens, budget, room.left)
    trace = [_line(u, round(decided.get(i, values[i]), 9), costs[i], forms[i], chosen=chosen.get(i),
                   reason=reason.get(i, ""), redundancy=round(values[i] - decided[i], 9) if i in decided else 0.0)
             for i, u in enumerate(units)]
    return Selection(units=[units[i] for i in taken], forms={units[i].id: forms[i][chosen[i]][0] for i in taken},
                     trace=trace, rendered=rendered, budget=budget)


def _line(u: Unit, val: float, costs: list[int], forms: list[tuple[str, str]], *, chosen: int | None,
          reason: str, redundancy: float) -> TraceLine:
    """``val``: the value the decision saw (a unit decided by marginal value: its value less
    ``redundancy``, the weighted share of its words already shown, named in the reason)."""
    if chosen is None:
        if redundancy > 0 and reason == "over_budget":
            reason = f"{reason};redundancy:{redundancy:.3f}"
        return TraceLine(unit_id=u.id, source=u.source, outcome="rejected", reason=reason, tokens=costs[0],
                         version=u.version, mandatory=u.mandatory, value=val)
    why = "mandatory" if u.mandatory else "recent_turn" if u.source == "turn" else "selected"
    if forms[chosen][0] != "full":
        why = f"{why};reduced:{forms[chosen][0]}"
    if redundancy > 0:
        why = f"{why};redundancy:{redundancy:.3f}"
    return TraceLine(unit_id=u.id, source=u.source, outcome="accepted", reason=why, tokens=costs[chosen],
                     version=u.version, mandatory=u.mandatory, value=val)
