"""Properties of rendering and selection over random units, budgets and unicode text.

- Additivity: for both bundled encodings, the whole rendered text counts exactly the sum
  of its units' segments plus the reported separators (BPE never merges across a boundary).
- Selection: the rendered count equals the reported total and never exceeds ``B``; every
  mandatory unit is present, or the build fails with ``budget_too_small``; the result is a
  function of its input (the same bytes twice); every candidate has exactly one trace line.
- Escaping: data can never contain a tag, turn text never a message frame; both reverse.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentledger.contracts.context_api import SystemPart, ToolSchema
from agentledger.core import context as cx
from agentledger.core.context.render import frame_tokens, group_of, group_tokens, unit_segment
from agentledger.core.context.select import words_of
from agentledger.core.context.units import SOURCE_RANK, W_REDUNDANCY
from agentledger.models import tokens

pytestmark = pytest.mark.timeout(900)
PROPS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Unicode of every kind, weighted towards what stresses a BPE boundary: whitespace runs,
# newlines, punctuation, frame and tag characters, CJK, combining marks, emoji.
TRICKY = st.sampled_from(list(" \n\n\r\t<>|/&\"'=-_.,!?:;。？！忽略删除😀\u00a0\u2028\u0301ß0123456789"))
TEXT = st.lists(st.one_of(TRICKY, st.characters(codec="utf-8")), max_size=40).map("".join)
SOURCES = ["goal", "working_memory", "checkpoint", "memory", "document", "artifact", "turn"]
ROLES = ["user", "assistant", "system", "tool"]


@st.composite
def units(draw: st.DrawFn) -> list[cx.Unit]:
    out = []
    for i in range(draw(st.integers(0, 8))):
        source = draw(st.sampled_from(SOURCES))
        turn = source == "turn"
        reds = tuple(cx.Reduction(kind=f"r{k}", text=draw(TEXT)) for k in range(draw(st.integers(0, 2))))
        out.append(cx.Unit(
            id=f"u{i}{draw(TEXT)}", source=source, text=draw(TEXT), version=draw(TEXT),  # type: ignore[arg-type]
            mandatory=draw(st.booleans()) and draw(st.booleans()), role=draw(st.sampled_from(ROLES)) if turn else None,
            ordinal=i + 1 if turn else None, relevance=draw(st.floats(0, 1)), verifiability=draw(st.floats(0, 1)),
            risk=draw(st.floats(0, 1)), key=draw(st.sampled_from([None, None, "k1", "k2"])),
            gated=draw(st.sampled_from([None, None, None, "ttl"])), reductions=reds,
            attrs=(("uri", draw(TEXT)),) if source == "artifact" else
            (("receipt", draw(st.sampled_from(["r1", "r2<&\""]))),) if source == "memory" else ()))
    if draw(st.booleans()):
        out.append(cx.Unit(id="input", source="input", role="user", ordinal=99, text=draw(TEXT), mandatory=True))
    return out


SYSTEMS = st.lists(st.builds(SystemPart, name=st.sampled_from(["a", "b", "a"]), text=TEXT), max_size=2)
TOOLS = st.lists(st.builds(ToolSchema, name=st.sampled_from(["t", "u"]), description=TEXT), max_size=2)


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
@PROPS
@given(us=units(), system=SYSTEMS, tools=TOOLS)
def test_count_is_additive(encoding: str, us: list[cx.Unit], system: list[SystemPart], tools: list[ToolSchema]) -> None:
    """count(text) == sum(unit_tokens) + separator_tokens, for any text in either encoding."""
    def count(text: str) -> int:
        return tokens.count(text, encoding)

    r = cx.render(us, system_parts=system, tools=tools, count=count)  # raises AccountingError otherwise
    assert r.tokens == count(r.text) == sum(r.unit_tokens.values()) + r.separator_tokens
    assert all(f"<|im_start|>{m.role}\n{m.content}<|im_end|>\n" in r.text for m in r.messages)


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
@PROPS
@given(us=units(), budget=st.integers(1, 400), system=SYSTEMS)
def test_selection_within_budget_and_mandatory(encoding: str, us: list[cx.Unit], budget: int,
                                               system: list[SystemPart]) -> None:
    """Never above B, the count is the reported total, the mandatory set is whole or the build fails."""
    def count(text: str) -> int:
        return tokens.count(text, encoding)

    mandatory = [u.id for u in us if u.mandatory and u.gated is None]
    try:
        sel = cx.select(us, budget, count, system_parts=system)
    except cx.BudgetTooSmallError as e:
        assert e.code == "budget_too_small" and e.mandatory == mandatory and e.shortfall > 0
        return
    r = sel.rendered
    assert r.budgeted_tokens <= budget
    assert r.tokens == count(r.text) == sum(r.unit_tokens.values()) + r.separator_tokens
    assert r.budgeted_tokens == sum(t.tokens for t in sel.trace if t.outcome == "accepted") + r.separator_tokens
    taken = {u.id for u in sel.units}
    assert set(mandatory) <= taken
    assert not any(u.gated is not None for u in sel.units)
    assert [t.unit_id for t in sel.trace] == [u.id for u in us]
    assert {t.unit_id for t in sel.trace if t.outcome == "accepted"} == taken
    again = cx.select(us, budget, count, system_parts=system)
    assert again == sel


@given(text=TEXT)
def test_escapes_reverse_and_hold(text: str) -> None:
    """Escaped data holds no ``<``; escaped turn text no frame; both reverse exactly."""
    data = cx.escape_data(text)
    assert "<" not in data and cx.unescape_data(data) == text
    frame = cx.escape_frame(text)
    assert "<|im_" not in frame and cx.unescape_frame(frame) == text


# ---- budget filling by marginal value -----------------------------------------------------------

VOCAB = ["alice", "lives", "in", "lisbon", "moved", "porto", "the", "weekend", "was", "quiet", "cat", "mochi"]
WORDY = st.lists(st.sampled_from(VOCAB), min_size=1, max_size=6).map(" ".join)


@st.composite
def optional_units(draw: st.DrawFn) -> list[cx.Unit]:
    """Optional data units whose texts share words (and may hold one another): memory items in
    two shared blocks, document chunks made of several of them, Working Memory parts."""
    out: list[cx.Unit] = []
    for i in range(draw(st.integers(0, 12))):
        source = draw(st.sampled_from(["memory", "memory", "document", "working_memory"]))
        text = "\n".join(draw(st.lists(WORDY, min_size=1, max_size=4 if source == "document" else 1)))
        attrs = (("receipt", draw(st.sampled_from(["r1", "r2"]))),) if source == "memory" else ()
        out.append(cx.Unit(id=f"{source}:{i}", source=source, text=text, attrs=attrs,  # type: ignore[arg-type]
                           relevance=draw(st.floats(0, 1)), verifiability=draw(st.floats(0, 1)),
                           risk=draw(st.floats(0, 0.4))))
    return out


def _reference(us: list[cx.Unit], budget: int, count: Callable[[str], int]) -> dict[str, str]:
    """The selection rule written the slow, obvious way: recompute every remaining unit's
    marginal value after each decision, decide the best; each unit's outcome and reason."""
    values = {u.id: cx.value(u) for u in us}
    seen: dict[str, str] = {}
    out: dict[str, str] = {}
    left = sorted(us, key=lambda u: (-values[u.id], SOURCE_RANK[u.source], u.id))
    for u in left:  # exact repeats, as the filter decides them (by value)
        first = seen.setdefault(u.text, u.id)
        if first != u.id:
            out[u.id] = f"duplicate_of:{first}"
    left = [u for u in left if u.id not in out]
    shown: set[str] = set()
    taken: list[cx.Unit] = []
    room, framed, opened = budget, False, set()
    def marginal(u: cx.Unit, shown: set[str]) -> float:
        w = words_of(u.text)
        return round(values[u.id] - W_REDUNDANCY * (len(w & shown) / len(w) if w else 0.0), 9)

    while left:
        u = min(left, key=lambda u: (-marginal(u, shown), SOURCE_RANK[u.source], u.id))
        left.remove(u)
        g = group_of(u)
        extra = (0 if framed else frame_tokens(count)) + (group_tokens(g, count) if g and g not in opened else 0)
        cost = count(unit_segment(u)) + extra
        holder = next((t for t in taken if u.text.strip() in t.text), None)
        if values[u.id] < 0:
            out[u.id] = "lower_value"
        elif holder is not None:
            out[u.id] = f"duplicate_of:{holder.id}"
        elif cost > room:
            out[u.id] = "over_budget"
        else:
            out[u.id] = "accepted"
            room -= cost
            framed = True
            if g:
                opened.add(g)
            shown |= words_of(u.text)
            taken.append(u)
    return out


@PROPS
@given(us=optional_units(), budget=st.integers(1, 300))
def test_marginal_value_filling_matches_the_reference(us: list[cx.Unit], budget: int) -> None:
    """The lazy greedy decides every unit as recomputing every marginal value would: same units
    taken, same reasons; no taken unit's text lies inside another's taken before it."""
    def count(text: str) -> int:
        return tokens.count(text, "cl100k_base")

    sel = cx.select(us, budget, count)
    got = {t.unit_id: "accepted" if t.outcome == "accepted" else t.reason.split(";")[0] for t in sel.trace}
    assert got == _reference(us, budget, count)
    accepted = [t for t in sel.trace if t.outcome == "accepted"]
    for t in accepted:  # the trace names the redundancy it subtracted, and the value it left
        unit = next(u for u in us if u.id == t.unit_id)
        assert ("redundancy:" in t.reason) == (t.value is not None and t.value < cx.value(unit))


def test_an_item_inside_a_taken_chunk_does_not_spend_the_budget_twice() -> None:
    """A memory item whose text a taken document chunk already shows is a duplicate of it; a
    near-copy of a taken item gives way to one that adds words (example of the rule above)."""
    def count(text: str) -> int:
        return tokens.count(text, "cl100k_base")

    chunk = cx.Unit(id="doc:s1#0", source="document", text="[Ana] I moved to Porto.\n[Ben] Nice!", relevance=1.0,
                    verifiability=1.0)
    inside = cx.Unit(id="memory:a", source="memory", text="[Ana] I moved to Porto.", relevance=0.9)
    twin = cx.Unit(id="memory:b", source="memory", text="[Ben] Nice! Nice!", relevance=0.5)
    new = cx.Unit(id="memory:c", source="memory", text="[Ana] adopted a cat named Mochi", relevance=0.45)
    # Room for the chunk and one item: the item that adds words wins it, though valued lower.
    room = cx.select([chunk, new], 1000, count).rendered.budgeted_tokens
    sel = cx.select([chunk, inside, twin, new], room, count)
    got = {t.unit_id: (t.outcome, t.reason) for t in sel.trace}
    assert got["memory:a"] == ("rejected", "duplicate_of:doc:s1#0")
    assert got["memory:c"][0] == "accepted"
    assert got["memory:b"] == ("rejected", "over_budget;redundancy:0.200")
