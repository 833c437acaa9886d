"""Conversation compaction through the service (seed 002): real NATS and PostgreSQL, the writer,
the projector and the context-builder in process.

The CP-30 / turn 49 / CP-42 walk-through step by step; then each refusal of the
compare-and-swap that activates a candidate; then every way a compactor can fail, each
selecting the fallback branch frozen before the compactor ran.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from agentledger.config import Settings
from agentledger.contracts.context_api import CommitReply, Generation
from agentledger.core.context import frozen_form, turn_tokens
from agentledger.core.state import core_hash, decode_state, encode_core
from agentledger.errors import AgentLedgerError, IntegrityViolationError
from agentledger.models import tokens
from agentledger.services.context_builder.compactors import PlainTurn
from ckpt_support import Stack, created
from test_compactor_adapter import Fake, fake
from test_context_service import TASK, TENANT, _build, _clear, _commit, build, call, stack, turn

# ---- seed 002: CP-30, turn 49, CP-42 -------------------------------------------------------------

SEED_TURNS = {
    3: "The failure only appears when the device returns to the foreground after a long offline period; "
       "short network jitter does not reproduce it.",
    9: "We decided the review only covers the case where the connection is restored but the message list "
       "is stuck, not login or push.",
    17: "Evidence must only cite redacted logs, state transitions and aggregate metrics; never disclose "
        "account or device identifiers.",
    26: "The fix must cover foreground resume, background reconnect and duplicate callbacks.",
    41: "Confirmed: the resume flow has a race between the cursor and the local revision; two metrics are "
        "still to be checked.",
    45: "Correction: the root cause is not a network timeout, it is the old cursor being committed again by "
        "the resume task.",
    47: "Verified: the focused tests passed and the long offline case no longer gets stuck.",
    48: "We will now rewrite the root cause and fix verification sections.",
    49: "Please rewrite the root cause and fix verification sections; state clearly that the root cause is "
        "not a network timeout, and do not leak account or device identifiers.",
}


def seed_text(i: int) -> str:
    return SEED_TURNS.get(i, f"Turn {i}: we went through log excerpt number {i} together and it showed "
                             "nothing new about the stuck list")


def seed_role(i: int) -> str:
    return "user" if i % 2 or i in SEED_TURNS else "assistant"


def seed_turns(first: int, last: int, task: str = TASK) -> list[dict[str, Any]]:
    return [turn(i, seed_text(i), seed_role(i), task) for i in range(first, last + 1)]


__all__ = ["fake", "seed_turns", "stack"]  # fixtures shared with the other context tests


def cost(i: int) -> int:
    return turn_tokens(PlainTurn(i, seed_role(i), seed_text(i)), lambda t: tokens.count(t, "cl100k_base"))


SEED_WINDOW = 1700


async def test_seed_002_cp30_turn49_cp42(stack: Stack) -> None:
    """Seed 002 step by step: CP-30 active over 1..30, turn 49 crosses the watermark, the planner
    compacts 31..42 into a CP-42 candidate and keeps 43..48 verbatim; both branches are frozen;
    the answer is committed as turn 50 and the CAS activates CP-42."""
    await stack.append([created(TASK, text="Write the post-mortem of the stuck message list")])
    await stack.append(seed_turns(1, 31))
    # Turn 31 (an input) with no room for recent turns: the whole prefix 1..30 becomes CP-30.
    g31, _ = await build(stack.c, input_ordinal=31, window_tokens=SEED_WINDOW, reserve_tokens=100,
                         compaction={"high_watermark": 0.5, "recent_exact_tokens": 1})
    assert g31.selected == "primary", g31.compaction
    assert g31.compaction.compacted.first == 1 and g31.compaction.compacted.through == 30
    await stack.append([turn(32, "Noted, I will keep these constraints.", "assistant")])
    c31 = _commit.decode(await call(stack.c, "commit", {"tenant": TENANT, "generation_id": g31.generation_id,
                                                        "answer_ordinal": 32}))
    assert c31.ok and c31.activated, c31
    cp30 = c31.checkpoint
    assert (cp30.coverage.first, cp30.coverage.through) == (1, 30) and cp30.status == "active"
    # Turns 33..48 are the exact turns after CP-30; turn 49 is the current input.
    await stack.append(seed_turns(33, 49))
    recent = sum(cost(i) for i in range(43, 49))
    g49, raw49 = await build(stack.c, input_ordinal=49, window_tokens=SEED_WINDOW, reserve_tokens=100,
                             compaction={"high_watermark": 0.5, "recent_exact_tokens": recent})
    plan = g49.compaction
    assert plan.reason == "high_watermark_crossed" and plan.measured_tokens > plan.high_watermark_tokens
    assert plan.base_checkpoint == cp30.checkpoint_id
    assert (plan.compacted.first, plan.compacted.through) == (31, 42)
    assert (plan.recent_exact.first, plan.recent_exact.through) == (43, 48)
    assert g49.selected == "primary" and plan.outcome == "compacted"
    primary, fallback = g49.branches
    assert (primary.name, fallback.name) == ("primary", "fallback")
    assert (primary.exact_turns.first, primary.exact_turns.through) == (43, 48)
    assert (fallback.exact_turns.first, fallback.exact_turns.through) == (43, 48)
    # The correction of turn 45 stays verbatim; turn 41's state and CP-30's constraints are in the summary.
    assert SEED_TURNS[45] in primary.rendered
    assert '<data source="checkpoint"' in primary.rendered and "[turns 41]" in primary.rendered
    assert "[turns 17]" in primary.rendered
    assert '<data source="checkpoint"' not in fallback.rendered
    for branch in (primary, fallback):
        assert branch.tokens == tokens.count(branch.rendered, "cl100k_base")
        assert branch.tokens == branch.unit_tokens + branch.separator_tokens <= g49.budget_tokens
    # Frozen: a retry is the same bytes, even once another turn arrived.
    await stack.append([turn(50, "Root cause: the old cursor is committed again by the resume task.",
                             "assistant")])
    again = await call(stack.c, "build", {"tenant": TENANT, "task_id": TASK, "input_ordinal": 49,
                                          "window_tokens": SEED_WINDOW, "generation_id": g49.generation_id})
    assert again == raw49
    c49 = _commit.decode(await call(stack.c, "commit", {"tenant": TENANT, "generation_id": g49.generation_id,
                                                        "answer_ordinal": 50}))
    assert c49.activated, c49
    cp42 = c49.checkpoint
    assert (cp42.coverage.first, cp42.coverage.through) == (1, 42)
    assert primary.checkpoint_id == cp42.checkpoint_id
    assert (await stack.db.fetchval("SELECT status FROM context_checkpoints WHERE checkpoint_id = $1",
                                    cp30.checkpoint_id)) == "superseded"
    # A commit again answers the same; the next build starts from CP-42.
    again = _commit.decode(await call(stack.c, "commit", {"tenant": TENANT, "generation_id": g49.generation_id,
                                                          "answer_ordinal": 50}))
    assert again.activated and again.checkpoint.checkpoint_id == cp42.checkpoint_id
    await stack.append([turn(51, "Now publish the conclusion.")])
    g51, _ = await build(stack.c, input_ordinal=51, window_tokens=SEED_WINDOW, reserve_tokens=100,
                         compaction={"high_watermark": 0.95, "recent_exact_tokens": recent})
    assert g51.selected == "direct"
    assert g51.branches[0].checkpoint_id == cp42.checkpoint_id
    assert g51.branches[0].exact_turns.first == 43


# ---- refusals of the CAS ---------------------------------------------------------------------------

COMPACT = {"high_watermark": 0.2, "recent_exact_tokens": 1}


async def staged(stack: Stack, task: str, n: int = 10, **body: Any) -> Generation:
    """A task with turns 1..n and a generation at input n that staged a checkpoint over 1..n-1."""
    await stack.append([created(task), *seed_turns(1, n, task)])
    gen, _ = await build(stack.c, task_id=task, input_ordinal=n, window_tokens=2000, reserve_tokens=100,
                         compaction=COMPACT, **body)
    assert gen.selected == "primary", gen.compaction
    return gen


async def commit(stack: Stack, gen: Generation, answer: int) -> CommitReply:
    reply = _commit.decode(await call(stack.c, "commit", {"tenant": TENANT, "generation_id": gen.generation_id,
                                                          "answer_ordinal": answer}))
    assert reply.ok, reply.error
    return reply


async def tamper(stack: Stack, gen: Generation, change: Any) -> None:
    """Rewrite the stored body of the checkpoint ``gen`` staged (``change`` edits its JSON)."""
    cid = gen.branches[0].checkpoint_id
    body = msgspec.json.decode(await stack.db.fetchval(
        "SELECT body FROM context_checkpoints WHERE checkpoint_id = $1", cid))
    change(body)
    await stack.db.execute("UPDATE context_checkpoints SET body = $2 WHERE checkpoint_id = $1", cid,
                           msgspec.json.encode(body))


async def test_commit_refused_when_the_transcript_moved_on(stack: Stack) -> None:
    """Another turn arrived after the answer: the candidate is refused, the pointer does not move."""
    gen = await staged(stack, "moved")
    await stack.append([turn(11, "answer", "assistant", "moved"), turn(12, "and one more thing", task="moved")])
    reply = await commit(stack, gen, 11)
    assert (reply.activated, reply.reason, reply.checkpoint.status) == (False, "transcript_moved_on", "refused")
    assert await stack.db.fetchval("SELECT active_checkpoint_id FROM context_conversations WHERE task_id = $1",
                                   "moved") is None
    # The refusal is final: asked again, the same answer.
    assert (await commit(stack, gen, 11)).reason == "transcript_moved_on"


async def test_commit_refuses_a_core_row_edited_to_pass_its_check(stack: Stack) -> None:
    """The CAS judges by the task's core row (transcript revision, epoch, lineage base). That row
    edited outside the services to say the transcript ends at the answer (a turn came after it)
    would let the stale candidate in: the commit answers ``integrity_violation`` and the pointer
    does not move. The catch-up before the CAS reads the state checked, and so does the locked
    read the CAS compares (``ContextStore.head``), so an edit between the two is refused too."""
    gen = await staged(stack, "edited")
    await stack.append([turn(11, "answer", "assistant", "edited"), turn(12, "and one more thing", task="edited")])
    await stack.projected()
    assert stack.db is not None
    row = await stack.db.fetchrow("SELECT state FROM task_state WHERE task_id = 'edited'")
    state = decode_state(bytes(row[0]))
    assert state.turns == 12
    state.turns = 11
    core = encode_core(state)
    await stack.db.execute("UPDATE task_state SET state = $1, state_hash = $2 WHERE task_id = 'edited'",
                           core, core_hash(core))
    reply = _commit.decode(await call(stack.c, "commit", {"tenant": TENANT, "generation_id": gen.generation_id,
                                                          "answer_ordinal": 11}))
    assert not reply.ok and reply.error is not None and reply.error.code == "integrity_violation", reply
    assert await stack.db.fetchval("SELECT active_checkpoint_id FROM context_conversations WHERE task_id = $1",
                                   "edited") is None
    assert stack.context is not None
    async with stack.db.acquire() as conn, conn.transaction():
        with pytest.raises(IntegrityViolationError):
            await stack.context.store.head(conn, TENANT, "edited")


async def test_commit_refused_after_history_was_cleared(stack: Stack) -> None:
    """A candidate of the old epoch is refused (``stale_epoch``) and can never be activated; the
    generation itself is not served again as a retry."""
    gen = await staged(stack, "cleared")
    cleared = _clear.decode(await call(stack.c, "clear", {"tenant": TENANT, "task_id": "cleared"}))
    assert cleared.ok and cleared.epoch == 1 and cleared.lineage.startswith("L1-"), cleared
    assert cleared.lineage != gen.lineage
    # A retried clear with nothing new to clear starts no second epoch.
    again = _clear.decode(await call(stack.c, "clear", {"tenant": TENANT, "task_id": "cleared"}))
    assert (again.epoch, again.lineage, again.seq) == (1, cleared.lineage, 0)
    await stack.append([turn(11, "answer", "assistant", "cleared")])
    reply = await commit(stack, gen, 11)
    assert (reply.activated, reply.reason) == (False, "stale_epoch")
    assert (await commit(stack, gen, 11)).reason == "stale_epoch"
    retry = _build.decode(await call(stack.c, "build", {"tenant": TENANT, "task_id": "cleared", "input_ordinal": 10,
                                                        "window_tokens": 2000, "generation_id": gen.generation_id}))
    assert not retry.ok and retry.error.code == "stale_epoch" and retry.error.path == "$.generation_id"
    # The new lineage starts after turn 10: its first build sees only turn 12 on.
    await stack.append([turn(12, "fresh start", task="cleared")])
    g12, _ = await build(stack.c, task_id="cleared", input_ordinal=12, window_tokens=2000)
    assert g12.epoch == 1 and g12.lineage == cleared.lineage
    assert "turn:11" in {t.unit_id for t in g12.branches[0].trace}
    assert not any(t.unit_id.startswith(("turn:1", "turn:9", "checkpoint:")) and t.unit_id != "turn:11"
                   for t in g12.branches[0].trace)


async def test_commit_refused_on_coverage_regression(stack: Stack) -> None:
    """Two candidates over the same prefix: the second cannot move coverage backwards (or sideways)."""
    first = await staged(stack, "twice")
    raw = await call(stack.c, "build", {"tenant": TENANT, "task_id": "twice", "input_ordinal": 10,
                                        "window_tokens": 2000, "reserve_tokens": 100, "compaction": COMPACT,
                                        "generation_id": first.generation_id, "regenerate": True})
    second = _build.decode(raw).generation
    assert second.regenerated_from == first.generation_id and second.selected == "primary"
    await stack.append([turn(11, "answer", "assistant", "twice")])
    assert (await commit(stack, first, 11)).activated
    reply = await commit(stack, second, 11)
    assert (reply.activated, reply.reason) == (False, "coverage_regression")


async def test_commit_refused_on_a_bad_signature(stack: Stack) -> None:
    """A stored receipt whose signature was altered never verifies."""
    gen = await staged(stack, "signed")

    def flip(body: dict[str, Any]) -> None:
        sig = body["receipt"]["signature"]
        body["receipt"]["signature"] = ("0" if sig[0] != "0" else "1") + sig[1:]

    await tamper(stack, gen, flip)
    await stack.append([turn(11, "answer", "assistant", "signed")])
    assert (await commit(stack, gen, 11)).reason == "bad_signature"


async def test_commit_refused_on_a_cited_ordinal_out_of_range(stack: Stack) -> None:
    """A stored summary altered to cite a turn outside its coverage is refused for that reason."""
    gen = await staged(stack, "cited")

    def cite(body: dict[str, Any]) -> None:
        body["summary"]["conversation_goal"][0]["source_turn_ordinals"] = [10]

    await tamper(stack, gen, cite)
    await stack.append([turn(11, "answer", "assistant", "cited")])
    assert (await commit(stack, gen, 11)).reason == "cited_ordinal_out_of_range"


async def test_commit_refused_for_another_lineage(stack: Stack) -> None:
    """A candidate claiming another lineage of the same epoch is refused."""
    gen = await staged(stack, "lineage")
    await tamper(stack, gen, lambda body: body.update(lineage="L0-000000000000"))
    await stack.append([turn(11, "answer", "assistant", "lineage")])
    assert (await commit(stack, gen, 11)).reason == "other_lineage"


# ---- compactor failures select the frozen fallback ---------------------------------------------

async def _raises(request: Any) -> Any:
    raise RuntimeError("the model endpoint returned 500")


async def _invalid(request: Any) -> Any:
    # Cites a turn outside the covered prefix (and misses a field): never a candidate.
    return {"schema_version": "checkpoint-v1", "conversation_goal": [{"text": "x", "source_turn_ordinals": [99]}]}


async def _slow(request: Any) -> Any:
    await asyncio.sleep(60)


async def _huge(request: Any) -> Any:
    # Valid, but the primary branch cannot fit the window with it.
    through = request.coverage.through
    items = [{"text": f"fact {i}: " + "a long remembered detail " * 70, "source_turn_ordinals": [through]}
             for i in range(20)]
    return {"schema_version": "checkpoint-v1", "conversation_goal": [], "confirmed_facts": items,
            "decisions_constraints": [], "preferences": [], "unresolved_questions": []}


@pytest.fixture
async def failing(settings: Settings) -> AsyncIterator[Stack]:
    fast = msgspec.structs.replace(settings, context_compactor_timeout_s=0.5)
    s = await Stack(fast).start(checkpointer=False, context=True, compactors={
        "raises": _raises, "invalid": _invalid, "slow": _slow, "huge": _huge})
    try:
        yield s
    finally:
        await s.stop()


@pytest.mark.parametrize(("compactor", "failure"), [("raises", "compactor_failed"), ("invalid", "invalid_output"),
                                                    ("slow", "timeout"), ("huge", "reassembly_over_cap")])
async def test_a_failing_compactor_selects_the_frozen_fallback(failing: Stack, compactor: str, failure: str) -> None:
    """Whatever goes wrong with the compactor, the generation selects its fallback branch, byte for
    byte the one frozen before the compactor ran, and stages nothing."""
    task = f"fail-{compactor}"
    await failing.append([created(task), *seed_turns(1, 10, task)])
    gen, _ = await build(failing.c, task_id=task, input_ordinal=10, window_tokens=2000, reserve_tokens=100,
                         compaction={**COMPACT, "compactor": compactor})
    assert gen.selected == "fallback"
    assert gen.compaction.outcome == "fallback" and gen.compaction.failure.startswith(failure), gen.compaction
    assert [b.name for b in gen.branches] == ["fallback"]
    row = await failing.db.fetchrow("SELECT frozen_uri, frozen_digest, staged_checkpoint_id, artifact_uri"
                                    " FROM context_generations WHERE generation_id = $1", gen.generation_id)
    assert row["staged_checkpoint_id"] is None and row["artifact_uri"] != row["frozen_uri"]
    # The frozen artifact was erased once the build finished; the row's frozen digest still pins
    # it, and the final generation's fallback re-derives it byte for byte.
    with pytest.raises(AgentLedgerError) as gone:
        await failing.c.get_artifact(row["frozen_uri"])
    assert gone.value.code == "artifact_missing"
    assert frozen_form(gen).digest == row["frozen_digest"]
    assert frozen_form(gen).branches == gen.branches
    assert await failing.db.fetchval("SELECT count(*) FROM context_checkpoints WHERE task_id = $1", task) == 0


async def test_clearing_history_retires_the_active_checkpoint(stack: Stack) -> None:
    """After a clear, the old lineage's active checkpoint is superseded and no build uses it, and
    a candidate staged before the clear is refused even though it was built on valid turns."""
    gen = await staged(stack, "wipe")
    await stack.append([turn(11, "answer", "assistant", "wipe")])
    assert (await commit(stack, gen, 11)).activated
    await stack.append([turn(12, "next question", task="wipe")])
    late = await build(stack.c, task_id="wipe", input_ordinal=12, window_tokens=2000, reserve_tokens=100,
                       compaction={**COMPACT, "high_watermark": 0.05})
    assert late[0].selected == "primary", late[0].compaction
    cleared = _clear.decode(await call(stack.c, "clear", {"tenant": TENANT, "task_id": "wipe",
                                                          "through_ordinal": 12, "reason": "user request"}))
    assert cleared.ok and cleared.epoch == 1
    cid = gen.branches[0].checkpoint_id
    assert await stack.db.fetchval("SELECT status FROM context_checkpoints WHERE checkpoint_id = $1",
                                   cid) == "superseded"
    await stack.append([turn(13, "answer", "assistant", "wipe"), turn(14, "a new topic", task="wipe")])
    assert (await commit(stack, late[0], 13)).reason == "stale_epoch"
    fresh, _ = await build(stack.c, task_id="wipe", input_ordinal=14, window_tokens=2000)
    [branch] = fresh.branches
    assert branch.checkpoint_id is None and "checkpoint" not in {t.source for t in branch.trace}
    assert [t.unit_id for t in branch.trace if t.source in ("turn", "input")] == ["turn:13", "input:14"]


@pytest.mark.parametrize(("mode", "selected", "failure"), [
    ("valid", "primary", ""), ("out_of_range", "fallback", "invalid_output"),
    ("truncated", "fallback", "compactor_failed: CompactorReplyError"),
    ("status:500", "fallback", "compactor_failed: CompactorUnavailableError")])
async def test_the_openai_compatible_compactor_through_the_service(settings: Settings, fake: Fake, mode: str,
                                                                   selected: str, failure: str) -> None:
    """The adapter is a compactor like any other: a valid summary becomes the staged candidate,
    anything else selects the frozen fallback."""
    fake.mode = mode
    configured = msgspec.structs.replace(settings, context_compactor_url=fake.url, context_compactor_model="m")
    s = await Stack(configured).start(checkpointer=False, context=True)
    try:
        await s.append([created("oa"), *seed_turns(1, 5, "oa")])
        gen, _ = await build(s.c, task_id="oa", input_ordinal=5, window_tokens=2000, reserve_tokens=100,
                             compaction={**COMPACT, "high_watermark": 0.05, "compactor": "openai"})
        assert gen.selected == selected and gen.compaction.failure.startswith(failure), gen.compaction
        assert fake.requests and fake.requests[-1]["path"] == "/v1/chat/completions"
        if selected == "primary":
            assert "never deploy on Fridays" in gen.branches[0].rendered
    finally:
        await s.stop()
