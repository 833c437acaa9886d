"""Seed 002's compaction walk-through, run by ``agentledger demo`` after the policy lab.

A post-mortem conversation of 48 turns goes into a task's ledger. At turn 31 the
context-builder compacts turns 1…30 into CP-30, which the committed answer
(turn 32) activates. Turn 49 then crosses the high watermark: the planner keeps
CP-30, compacts turns 31…42 into a CP-42 candidate and keeps 43…48 verbatim;
both branches are frozen before the compactor runs. The answer is committed as
turn 50 and the compare-and-swap activates CP-42. Only the service decides; this
module appends turns, asks for builds and prints what came back.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from agentledger.client import Client, connect
from agentledger.config import Settings
from agentledger.contracts.context_api import CommitReply, Generation
from agentledger.core.context import turn_tokens
from agentledger.core.validate import goal_hash
from agentledger.models import tokens

TENANT = "demo"
# The seed's input cap is 16,000 tokens; the demo's turns are short, so its window is too.
WINDOW = 1700
RESERVE = 100
HIGH_WATERMARK = 0.5
SEED_TURNS = {
    3: "The failure only appears when the device returns to the foreground after a long offline "
       "period; short network jitter does not reproduce it.",
    9: "We decided the review only covers the case where the connection is restored but the "
       "message list is stuck, not login or push.",
    17: "Evidence must only cite redacted logs, state transitions and aggregate metrics; never "
        "disclose account or device identifiers.",
    26: "The fix must cover foreground resume, background reconnect and duplicate callbacks.",
    41: "Confirmed: the resume flow has a race between the cursor and the local revision; two "
        "metrics are still to be checked.",
    45: "Correction: the root cause is not a network timeout, it is the old cursor being "
        "committed again by the resume task.",
    47: "Verified: the focused tests passed and the long offline case no longer gets stuck.",
    48: "We will now rewrite the root cause and fix verification sections.",
    49: "Please rewrite the root cause and fix verification sections; state clearly that the root "
        "cause is not a network timeout, and do not leak account or device identifiers.",
}


@dataclass(frozen=True)
class _Turn:
    ordinal: int
    role: str
    content: str | None


def text(i: int) -> str:
    return SEED_TURNS.get(i, f"Turn {i}: we went through log excerpt number {i} together and it "
                             "showed nothing new about the stuck list")


def role(i: int) -> str:
    return "user" if i % 2 or i in SEED_TURNS else "assistant"


def _event(task: str, kind: str, payload: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "event_id": uuid.uuid4().hex, "tenant": TENANT, "task_id": task,
            "producer": "operator", "occurred_at": datetime.now(UTC).isoformat(),
            "schema_version": 1, "payload": payload, **extra}


def _turns(task: str, first: int, last: int, override: dict[int, tuple[str, str]] | None = None
           ) -> list[dict[str, Any]]:
    out = []
    for i in range(first, last + 1):
        r, t = (override or {}).get(i, (role(i), text(i)))
        out.append(_event(task, "turn_appended", {"role": r, "ordinal": i, "content": t},
                          data_subject="demo-user"))
    return out


async def run_compaction(settings: Settings) -> tuple[Generation, CommitReply, Generation, CommitReply]:
    """CP-30 at turn 31, then turn 49 → CP-42; returns both generations and both commits."""
    task = f"postmortem-{uuid.uuid4().hex[:8]}"
    goal = "Write the post-mortem of the stuck message list"
    async with await connect(settings, timeout=30) as client:
        await client.append(_event(task, "task_created", {"goal": {
            "text": goal, "acceptance_criteria": [], "goal_hash": goal_hash(goal, [])}}))
        await client.append_batch(_turns(task, 1, 31))
        g31 = await _build(client, task, 31, recent_exact_tokens=1)
        await client.append_batch(_turns(task, 32, 32, {32: ("assistant", "Noted, I will keep "
                                                                          "these constraints.")}))
        c31 = await client.commit_generation(TENANT, g31.generation_id, 32)
        await client.append_batch(_turns(task, 33, 49))
        count = lambda s: tokens.count(s, "cl100k_base")  # noqa: E731 - the counter the build uses
        recent = sum(turn_tokens(_Turn(i, role(i), text(i)), count) for i in range(43, 49))
        g49 = await _build(client, task, 49, recent_exact_tokens=recent)
        await client.append_batch(_turns(task, 50, 50, {50: (
            "assistant", "Root cause: the old cursor is committed again by the resume task.")}))
        c49 = await client.commit_generation(TENANT, g49.generation_id, 50)
    return g31, c31, g49, c49


async def _build(client: Client, task: str, ordinal: int, *, recent_exact_tokens: int) -> Generation:
    return await client.build_context(
        TENANT, task, ordinal, window_tokens=WINDOW, reserve_tokens=RESERVE,
        compaction={"high_watermark": HIGH_WATERMARK, "recent_exact_tokens": recent_exact_tokens})


def _span(c: Any) -> str:
    return f"{c.first}…{c.through}" if c is not None else "-"


def render_compaction(g31: Generation, c31: CommitReply, g49: Generation, c49: CommitReply) -> str:
    plan = g49.compaction
    assert plan is not None
    lines = ["", f"conversation compaction (seed 002): window {WINDOW}, reserve {RESERVE}, high "
                 f"watermark {HIGH_WATERMARK:.0%}, cl100k_base counted exactly",
             f"  turn 31: turns {_span(g31.compaction.compacted if g31.compaction else None)} "
             f"compacted; answer committed as turn 32: "
             f"{'CP-30 active' if c31.activated else 'not activated: ' + c31.reason}",
             f"  turn 49: {plan.measured_tokens} tokens > watermark {plan.high_watermark_tokens}: "
             f"from CP-30, turns {_span(plan.compacted)} compacted, {_span(plan.recent_exact)} "
             f"verbatim, 49 current ({plan.outcome})",
             "  frozen before the compactor ran: " + ", ".join(
                 f"{b.name} ({b.tokens} tokens = {b.unit_tokens} + {b.separator_tokens} separators)"
                 for b in g49.branches) + f"; selected {g49.selected}"]
    branch = next(b for b in g49.branches if b.name == g49.selected)
    lines.append(f"  trace of the {branch.name} branch (budget {g49.budget_tokens}):")
    lines += [f"    {t.outcome:<8} {t.unit_id:<22} {t.tokens:>5} tok  {t.reason}" for t in branch.trace]
    cp = c49.checkpoint
    state = (f"CP-42 active (coverage {_span(cp.coverage)}), CP-30 superseded" if c49.activated and cp
             else f"not activated: {c49.reason}")
    lines.append(f"  answer committed as turn 50: {state}")
    return "\n".join(lines)
