"""Properties of rendering and selection over random units, budgets and unicode text.

- Additivity: for both bundled encodings, the whole rendered text counts exactly the sum
  of its units' segments plus the reported separators (BPE never merges across a boundary).
- Selection: the rendered count equals the reported total and never exceeds ``B``; every
  mandatory unit is present, or the build fails with ``budget_too_small``; the result is a
  function of its input (the same bytes twice); every candidate has exactly one trace line.
- Escaping: data can never contain a tag, turn text never a message frame; both reverse.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentledger.contracts.context_api import SystemPart, ToolSchema
from agentledger.core import context as cx
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
            attrs=(("uri", draw(TEXT)),) if source == "artifact" else ()))
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
