"""``get_items`` with a token budget: the context-builder's budgeted history, as SDK items.

Instead of every item, the session asks the context-builder to build (and freeze) the context
of the conversation's newest turn with ``window_tokens`` = the budget and no generation
reserve: seed 002's rules decide what fits (a contiguous old prefix compacted into a
structured summary, whole recent turns verbatim, the newest turn always), counted with
tiktoken in the requested encoding, and every unit taken or left gets a trace line. The
branch the builder selected becomes the items:

- its data message (the goal, Working Memory and, when it compacted, the summary of the old
  prefix, all as ``<data>`` blocks: low-privilege data, never an instruction) as one
  ``{"role": "user", "content": ...}`` item, first;
- each turn it kept verbatim as the very item ``add_items`` stored (a ``system`` or
  ``developer`` item reaches the model inside the data message, as the builder renders it).

The model sees the builder's text, so the returned history's tokens are the builder's count:
each item's text (the data message's content; a turn's stored JSON) is one of the segments
the builder added up, and their sum is at most the budget. The session does not commit the
generation's compaction checkpoint: the SDK stores the next input and its answer together
after the read, which is not seed 002's "answer right after the input" that activation
requires, so each budgeted read compacts again from the conversation's lineage base.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import msgspec

from agentledger.adapters.openai_agents import items as items_mod
from agentledger.contracts.context_api import CompactionPlan, Coverage, TraceLine
from agentledger.models import tokens

if TYPE_CHECKING:
    from agentledger.adapters.openai_agents.session import AgentledgerSession
    from agentledger.client import Client

DATA_PREFIX = "<data"
_TURN_UNITS = ("turn:", "input:")


@dataclass(frozen=True)
class BudgetedHistory:
    """What a budgeted ``get_items`` returned, and why.

    ``tokens``: the items' token count (each item's text as the builder counted it, in
    ``encoding``), at most ``budget``; ``trace``: the selected branch's line per candidate
    unit; ``left_out``: what the history leaves out, and why: the branch's rejected lines, and
    a line (``compacted``, or ``older_than_recent:<branch>``) for each turn of the epoch the
    branch has none for; ``compacted``: the turns the summary stands for, when the selected
    branch is the compacted one; ``plan``: the builder's compaction plan.
    """

    items: list[Any]
    tokens: int
    budget: int
    encoding: str
    generation_id: str
    branch: str
    trace: list[TraceLine]
    left_out: list[TraceLine] = field(default_factory=list)
    compacted: Coverage | None = None
    plan: CompactionPlan | None = None


def item_text(item: Any) -> str:
    """The text of a returned item the builder counted: a data message's content, else the
    item's JSON as stored in its turn."""
    content = item.get("content") if isinstance(item, dict) else None
    if item.get("role") == "user" and isinstance(content, str) and content.startswith(DATA_PREFIX):
        return content
    return msgspec.json.encode(item).decode()


def history_tokens(history: list[Any], encoding: str) -> int:
    """The token count of a history as ``budgeted_history`` defines it."""
    return sum(tokens.count(item_text(item), encoding) for item in history)


async def budgeted_history(session: AgentledgerSession, client: Client, last_ordinal: int,
                           lineage_base: int, transcript: list[dict[str, Any]], *, budget: int,
                           limit: int | None) -> BudgetedHistory:
    """Build the budgeted history of the session's current epoch (see the module)."""
    if last_ordinal <= lineage_base:
        return BudgetedHistory([], 0, budget, session.encoding, "", "", [])
    options: dict[str, Any] = {"reserve_tokens": 0, "encoding": session.encoding}
    if session.model is not None:
        options["model"] = session.model
    if session.compaction is not None:
        options["compaction"] = session.compaction
    generation = await client.build_context(session.tenant, session.session_id, last_ordinal,
                                            window_tokens=budget, **options)
    branch = next(b for b in generation.branches if b.name == generation.selected)
    kept = {int(line.unit_id.split(":", 1)[1]) for line in branch.trace
            if line.outcome == "accepted" and line.unit_id.startswith(_TURN_UNITS)}
    by_ordinal = {t["ordinal"]: t for t in transcript}
    turn_items = [items_mod.decode_item(by_ordinal[o]["content"]) for o in sorted(kept)
                  if o in by_ordinal and by_ordinal[o]["role"] != "system"]
    if limit is not None:
        turn_items = turn_items[-limit:]
    data = [{"role": "user", "content": m.content} for m in branch.messages
            if m.role == "user" and m.content.startswith(DATA_PREFIX)]
    returned = data + turn_items
    plan = generation.compaction
    compacted = plan.compacted if plan is not None and branch.name == "primary" else None
    in_branch = {line.unit_id for line in branch.trace}
    left_out = [line for line in branch.trace if line.outcome == "rejected"]
    # Turns of the epoch the branch has no line for: the summary stands for them, or (recent
    # turns only: no compaction needed, or its fallback) they are older than what fitted.
    why = "compacted" if compacted is not None else (
        f"older_than_recent:{branch.name}" + (f";{plan.failure}" if plan is not None and plan.failure else ""))
    for turn in transcript:
        unit = f"turn:{turn['ordinal']}"
        if unit not in in_branch and f"input:{turn['ordinal']}" not in in_branch:
            covered = compacted is not None and compacted.first <= turn["ordinal"] <= compacted.through
            left_out.append(TraceLine(unit_id=unit, source="turn", outcome="rejected",
                                      reason="compacted" if covered else why, tokens=0))
    return BudgetedHistory(
        items=returned, tokens=history_tokens(returned, session.encoding),
        budget=generation.budget_tokens, encoding=session.encoding,
        generation_id=generation.generation_id, branch=branch.name, trace=list(branch.trace),
        left_out=left_out, compacted=compacted, plan=plan)
