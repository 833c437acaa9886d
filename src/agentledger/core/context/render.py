"""The exact rendered input of a model call: instructions apart from data, counted additively.

The rendered text is a sequence of **segments**, concatenated with nothing in between:

- each system part: ``<|im_start|>system\\n{text}<|im_end|>\\n`` (one segment, unit id
  ``system:{name}``);
- the tool schemas, if any: ``<|im_start|>tools\\n{one canonical JSON object per line}<|im_end|>\\n``
  (one segment, unit id ``tools``; not a chat message: tools travel beside the messages);
- if any data unit was selected, the **data message**: the separator ``<|im_start|>user\\n``,
  then one block per unit ``<data source="…" id="…" version="…">\\n{escaped text}\\n</data>\\n``
  in source order (goal, working_memory, checkpoint, memory, document, artifact), then the
  separator ``<|im_end|>\\n``. Units of a **listed** source (memory: many short items, where a
  block of its own per item would cost more than the item) share one block per set of
  attributes instead, ``<data source="memory" receipt="…" scope="…">\\n`` … ``</data>\\n``
  (separators, paid by the first unit of the block taken), one line each:
  ``- {escaped text}\\n``, a newline inside the text continued as ``\\n  ``. A listed line
  names no id or version: the trace line of the same unit does, and the block's receipt
  names every record it read;
- each turn, by ordinal, then the current input: ``<|im_start|>{role}\\n{text}<|im_end|>\\n``
  (one segment each). A turn whose stored role is ``system`` is never a system message:
  it is a data block (``source="turn" role="system"``) inside a user message.

Every segment starts with ``<`` (a listed line: ``-``) and ends with one ``\\n``.
Both bundled encodings (cl100k_base, o200k_base) pre-split text with a regular expression
before BPE, and such a boundary is always a split point of it (the newline ends the last
piece of a segment, whatever precedes it; ``<`` starts the next piece), so the count of
the whole text is exactly the sum of the counts of its segments:
``count(text) == sum(unit_tokens) + separator_tokens``, where ``separator_tokens`` is the
data message's opening and closing and the shared blocks' tags.
``tests/test_context_properties.py`` checks this on random unicode; ``render`` re-counts the whole
text and raises if a counter is not additive.

Escaping. Data text escapes ``&`` and ``<`` (``&amp;``, ``&lt;``), so it cannot close its
block, open another or contain a message frame: a document saying "ignore previous
instructions" stays inside its ``<data>`` block and creates no system or user instruction.
Turn and system text is kept verbatim except the frame marker: ``<`` followed by ``k ≥ 1``
pipes is written with ``k + 1`` pipes (``unescape_frame`` reverses it), so no content can
contain ``<|im_start|>`` or ``<|im_end|>``. The frames are written as plain text and counted
as such (a provider's special tokens are fewer), so the count errs on the safe side.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import msgspec
from msgspec import Struct

from agentledger.contracts.context_api import ChatMessage, SystemPart, ToolSchema
from agentledger.core.context.units import DATA_SOURCES, LISTED_SOURCES, SOURCE_RANK, Unit
from agentledger.errors import AgentLedgerError, ContractError

Count = Callable[[str], int]

START, END = "<|im_start|>", "<|im_end|>"
DATA_OPEN = f"{START}user\n"
DATA_CLOSE = f"{END}\n"
TOOLS_ID = "tools"


class AccountingError(AgentLedgerError):
    """The whole rendered text did not count as the sum of its parts: the counter is not additive."""

    code = "count_not_additive"


class Rendered(Struct, frozen=True):
    """The rendered input: chat messages and the exact text, with its token accounting.

    ``unit_tokens``: tokens of every segment that belongs to a unit (system parts as
    ``system:{name}``, the tools as ``tools``, then the selected units by id), in render
    order. ``separator_tokens``: the data message's frame and the shared blocks' opening and
    closing. ``tokens == count(text) ==
    sum(unit_tokens) + separator_tokens``; ``budgeted_tokens`` is what counts against the
    budget ``B`` (everything but the system parts and the tools).
    """

    messages: list[ChatMessage]
    text: str
    unit_tokens: dict[str, int]
    separator_tokens: int
    tokens: int
    system_tokens: int
    tools_tokens: int
    budgeted_tokens: int


_FRAME = re.compile(r"<(\|+)")


def escape_frame(text: str) -> str:
    """Verbatim text that cannot contain a message frame: ``<|`` → ``<||``, ``<||`` → ``<|||``…"""
    return _FRAME.sub(lambda m: "<" + m.group(1) + "|", text)


def unescape_frame(text: str) -> str:
    """The inverse of ``escape_frame``."""
    return _FRAME.sub(lambda m: "<" + m.group(1)[1:], text)


def escape_data(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;")


def unescape_data(text: str) -> str:
    return text.replace("&lt;", "<").replace("&amp;", "&")


def _attr(value: str) -> str:
    return (value.replace("&", "&amp;").replace("<", "&lt;").replace('"', "&quot;")
            .replace("\n", "&#10;").replace("\r", "&#13;"))


def message_segment(role: str, content: str) -> str:
    return f"{START}{role}\n{content}{END}\n"


def data_block(unit: Unit, text: str | None = None) -> str:
    """The provenance-tagged block of a data unit (``text`` overrides the unit's, for a reduction)."""
    attrs = [("source", unit.source), ("id", unit.id)]
    if unit.version:
        attrs.append(("version", unit.version))
    if unit.source in ("turn", "input"):
        attrs.append(("role", unit.role or "user"))
        if unit.ordinal is not None:
            attrs.append(("ordinal", str(unit.ordinal)))
    attrs.extend(sorted(unit.attrs))
    head = " ".join(f'{k}="{_attr(v)}"' for k, v in attrs)
    body = unit.text if text is None else text
    return f"<data {head}>\n{escape_data(body)}\n</data>\n"


def is_listed(unit: Unit) -> bool:
    """Rendered as one line of a block shared with the units of its source and attributes."""
    return unit.source in LISTED_SOURCES


Group = tuple[str, tuple[tuple[str, str], ...]]


def group_of(unit: Unit) -> Group | None:
    """The shared block a listed unit is a line of (its source and attributes); None otherwise."""
    return (unit.source, tuple(sorted(unit.attrs))) if is_listed(unit) else None


def group_open(group: Group) -> str:
    source, attrs = group
    head = " ".join(f'{k}="{_attr(v)}"' for k, v in (("source", source), *attrs))
    return f"<data {head}>\n"


GROUP_CLOSE = "</data>\n"


def group_tokens(group: Group, count: Count) -> int:
    """Tokens of a shared block's opening and closing (paid once, by its first unit taken)."""
    return count(group_open(group)) + count(GROUP_CLOSE)


def listed_line(text: str) -> str:
    """One listed unit: ``- {escaped text}\\n``, inner newlines continued with two spaces."""
    return f"- {escape_data(text).replace(chr(10), chr(10) + '  ')}\n"


def is_data(unit: Unit) -> bool:
    """Rendered inside the data message (everything but turns and the current input)."""
    return unit.source in DATA_SOURCES


def unit_segment(unit: Unit, text: str | None = None) -> str:
    """The segment a unit renders to (its line, its data block, or its whole turn message)."""
    if is_listed(unit):
        return listed_line(unit.text if text is None else text)
    if is_data(unit):
        return data_block(unit, text)
    role = unit.role or "user"
    if role == "system":  # a stored system turn is conversation data, never an instruction
        return message_segment("user", data_block(unit, text))
    return message_segment(role, escape_frame(unit.text if text is None else text))


def _turn_message(unit: Unit, text: str | None) -> ChatMessage:
    role = unit.role or "user"
    if role == "system":
        return ChatMessage("user", data_block(unit, text))
    content = escape_frame(unit.text if text is None else text)
    return ChatMessage(role, content)


def system_segment(part: SystemPart) -> str:
    return message_segment("system", escape_frame(part.text))


def tools_text(tools: Sequence[ToolSchema]) -> str:
    """The tools as the text counts them: one canonical (sorted-key) JSON object per line."""
    lines = [msgspec.json.encode({"name": t.name, "description": t.description, "parameters": t.parameters},
                                 order="sorted").decode() for t in tools]
    return "\n".join(escape_frame(line) for line in lines)


def tools_segment(tools: Sequence[ToolSchema]) -> str:
    return message_segment("tools", tools_text(tools)) if tools else ""


def system_ids(system_parts: Sequence[SystemPart]) -> list[str]:
    """``system:{name}``, made unique with ``#n`` when names repeat."""
    seen: dict[str, int] = {}
    out = []
    for part in system_parts:
        n = seen.get(part.name, 0)
        seen[part.name] = n + 1
        out.append(f"system:{part.name}" if n == 0 else f"system:{part.name}#{n + 1}")
    return out


def frame_tokens(count: Count) -> int:
    """Tokens of the data message's frame (paid once, when the first data unit is selected)."""
    return count(DATA_OPEN) + count(DATA_CLOSE)


def render_order(units: Sequence[Unit]) -> tuple[list[int], list[int]]:
    """Indices of the data units (by source, then shared block in order of first appearance,
    then given order) and of the turns (by ordinal, input last)."""
    first: dict[Group, int] = {}
    for i, u in enumerate(units):
        g = group_of(u)
        if g is not None:
            first.setdefault(g, i)

    def data_key(i: int) -> tuple[int, int, int]:
        g = group_of(units[i])
        return SOURCE_RANK[units[i].source], first[g] if g is not None else i, i

    data = sorted((i for i, u in enumerate(units) if is_data(u)), key=data_key)
    turns = sorted((i for i, u in enumerate(units) if not is_data(u)),
                   key=lambda i: (units[i].source == "input", units[i].ordinal or 0, i))
    return data, turns


def _data_blocks(data: Sequence[Unit], texts: dict[str, str], count: Count,
                 unit_tokens: dict[str, int]) -> tuple[list[str], int]:
    """The data message's segments between its frame (blocks, listed lines and their shared
    blocks' tags), each data unit's tokens added to ``unit_tokens``; and the separator tokens
    (the frame and the shared blocks' tags)."""
    out: list[str] = []
    separators = frame_tokens(count)
    group: Group | None = None
    for u in data:
        g = group_of(u)
        if g != group:  # close the shared block open before, open this unit's
            if group is not None:
                out.append(GROUP_CLOSE)
            if g is not None:
                out.append(group_open(g))
                separators += group_tokens(g, count)
            group = g
        segment = unit_segment(u, texts.get(u.id))
        out.append(segment)
        unit_tokens[u.id] = count(segment)
    if group is not None:
        out.append(GROUP_CLOSE)
    return out, separators


def render(units: Sequence[Unit], *, system_parts: Sequence[SystemPart] = (), tools: Sequence[ToolSchema] = (),
           count: Count, texts: dict[str, str] | None = None) -> Rendered:
    """Render ``units`` (already selected) after the system parts and tools, and count it.

    ``texts`` overrides a unit's text by id (the reduction selection chose). Raises
    ``ContractError`` ``duplicate_unit_id`` and ``AccountingError`` if the whole text
    does not count as the sum of its segments.
    """
    texts = texts or {}
    ids = [u.id for u in units]
    if len(set(ids)) != len(ids):
        dup = next(i for i in ids if ids.count(i) > 1)
        raise ContractError(f"unit id {dup!r} appears twice", code="duplicate_unit_id", path="$.units")
    segments: list[str] = []
    unit_tokens: dict[str, int] = {}
    messages: list[ChatMessage] = []
    system_tokens = 0
    for sid, part in zip(system_ids(system_parts), system_parts, strict=True):
        seg = system_segment(part)
        segments.append(seg)
        unit_tokens[sid] = n = count(seg)
        system_tokens += n
        messages.append(ChatMessage("system", escape_frame(part.text)))
    tools_tokens = 0
    if tools:
        seg = tools_segment(tools)
        segments.append(seg)
        unit_tokens[TOOLS_ID] = tools_tokens = count(seg)
    data, turns = render_order(units)
    separator_tokens = 0
    if data:
        blocks, separator_tokens = _data_blocks([units[i] for i in data], texts, count, unit_tokens)
        segments += [DATA_OPEN, *blocks, DATA_CLOSE]
        messages.append(ChatMessage("user", "".join(blocks)))
    for i in turns:
        u = units[i]
        seg = unit_segment(u, texts.get(u.id))
        segments.append(seg)
        unit_tokens[u.id] = count(seg)
        messages.append(_turn_message(u, texts.get(u.id)))
    text = "".join(segments)
    tokens = count(text) if text else 0
    parts = sum(unit_tokens.values()) + separator_tokens
    if tokens != parts:
        raise AccountingError(f"the rendered text counts {tokens} tokens, its parts {parts}: the counter is not "
                              "additive over segments")
    return Rendered(messages=messages, text=text, unit_tokens=unit_tokens, separator_tokens=separator_tokens,
                    tokens=tokens, system_tokens=system_tokens, tools_tokens=tools_tokens,
                    budgeted_tokens=tokens - system_tokens - tools_tokens)
