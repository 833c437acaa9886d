"""The five strategies, each a real read path through the running services (seed 000 §21).

All five answer the same resume prompt of the same task; none is given the ground truth (the
metrics refuse a context holding anything no service answered with).

* **off**: reads nothing; the context is the resume prompt.
* **full**: the tenant's whole ledger in order (the task's events, the conversation, every
  memory proposal as proposed, every document chunk), read from JetStream with an ordered
  consumer: "every turn and record". Cut to the newest events that fit ``full_window`` tokens
  only if it must be, and then ``truncated``.
* **summary**: ``context.build`` of the conversation with compaction forced (the structured
  compactor's summary of the old prefix, then the recent whole turns), the window sized to
  ``summary_budget`` + ``recent_tokens`` + the mandatory units.
* **vector**: pgvector cosine similarity of the resume query over the tenant's memory records
  (every status) and document chunks, top ``k``, **no gate**. This is the one place the
  evaluation queries the projections directly: it is the ungated baseline, which no service
  offers (every service read is gated by design).
* **structured**: ``context.build`` of the runtime task: Working Memory plus the memory-policy's
  gated read (scope, TTL, version, privacy, source; merged by key) within ``window`` tokens. Its
  candidate set is the read's receipt.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import asyncpg
import msgspec

from agentledger.client import Client
from agentledger.config import Settings
from agentledger.core.context.render import data_block, frame_tokens, message_segment
from agentledger.core.context.units import Unit
from agentledger.core.validate import goal_hash
from agentledger.eval.corpus import (
    ACCEPTANCE,
    CHAT,
    GOAL,
    PROJECT,
    REQUIRED_KEYS,
    RESUME_PROMPT,
    RESUME_QUERY,
    TASK,
    items_in,
)
from agentledger.eval.metrics import ENCODING, StrategyResult
from agentledger.models import tokens
from agentledger.models.embedding import Embedder
from agentledger.security.task_seal import task_keys_of
from agentledger.services.memory_policy.store import decode_row, vector_text
from agentledger.stores.ledger import ledger_subject

NAMES = ("off", "full", "summary", "vector", "structured")
# The structured build's window: the budget the seed's §22 page shows (760) plus room for the
# goal contract and its ten acceptance criteria, which every build carries.
STRUCTURED_WINDOW = 1200
FULL_WINDOW = 128_000
SUMMARY_BUDGET = 260
RECENT_TOKENS = 120
VECTOR_K = 6
STALL_S = 60  # the full-history read gives up when no ledger message arrived for this long


def summary_overhead() -> int:
    """Tokens of what every build of the conversation carries beside the summary and the recent
    turns: the data frame, the goal contract (as ``build._goal_unit`` renders it) and the input
    turn. The summary's window is this plus its two budgets, so the summary gets its budget."""
    criteria = list(ACCEPTANCE)
    text = f"{GOAL}\nacceptance criteria:\n" + "\n".join(f"- {c}" for c in criteria)
    goal = Unit(id="goal", source="goal", text=text, version=goal_hash(GOAL, criteria)[:16])

    def count(text: str) -> int:
        return tokens.count(text, ENCODING)

    return frame_tokens(count) + count(data_block(goal)) + count(message_segment("user", RESUME_PROMPT))


VECTOR_SQL = (
    "SELECT * FROM ("
    " SELECT 'memory' AS source, record_id AS id, row, NULL::text AS text, embedding <=> $2::vector AS dist"
    " FROM memory_records WHERE tenant = $1 AND embedding IS NOT NULL"
    " UNION ALL"
    " SELECT 'document', doc_id || '#' || chunk_index, NULL, text, embedding <=> $2::vector"
    " FROM document_chunks WHERE tenant = $1 AND embedding IS NOT NULL"
    ") hits ORDER BY dist, id LIMIT $3")
RECORD_SQL = "SELECT record_id, row FROM memory_records WHERE tenant = $1 AND record_id = ANY($2::text[])"


@dataclass(frozen=True)
class Knobs:
    """The variables a run may change (seed 000 §22), one at a time in a sweep."""

    summary_budget: int = SUMMARY_BUDGET
    recent_tokens: int = RECENT_TOKENS
    k: int = VECTOR_K
    window: int = STRUCTURED_WINDOW
    full_window: int = FULL_WINDOW
    repeats: int = 3


@dataclass
class Env:
    """What the strategies read through: the client, the settings (ledger stream, database),
    the embedder (the vector baseline's query), the tenant of this scenario, the chat's input."""

    client: Client
    settings: Settings
    embedder: Embedder
    tenant: str
    chat_input: int = 0  # the conversation's resume turn: set once the corpus is written
    task_input: int = 1


def _value_text(value: Any) -> str:
    return value if isinstance(value, str) else msgspec.json.encode(value).decode()


async def off(env: Env, knobs: Knobs) -> StrategyResult:
    return StrategyResult("off", RESUME_PROMPT, received=[RESUME_PROMPT], read_ms=[0.0] * knobs.repeats)


def _event_line(subject_task: str, e: dict[str, Any]) -> str | None:  # noqa: PLR0911 - one per kind
    kind, p = e.get("kind"), e.get("payload") or {}
    if kind == "memory_proposed":
        return f"[memory proposed {p.get('kind')} {p.get('key') or ''}] {_value_text(p.get('value'))}"
    if kind == "document_ingested":
        return "\n".join(f"[document {p.get('doc_id')} v{p.get('version')}] {c.get('text', '')}"
                         for c in p.get("chunks", []))
    if kind == "variable_set":
        return f"[{subject_task} variable {p.get('name')}] {_value_text(p.get('value'))}"
    if kind in ("step_started", "step_succeeded"):
        arts = "".join(f" artifact {a.get('uri')} blake3 {a.get('blake3')}" for a in p.get("artifacts", []))
        return f"[{subject_task} {kind} {p.get('step_id')} plan v{p.get('plan_version')}]{arts}"
    if kind == "plan_versioned":
        return f"[{subject_task} plan v{p.get('version')}] " + ", ".join(s["id"] for s in p.get("steps", []))
    if kind == "task_created":
        goal = p.get("goal", {})
        return f"[{subject_task} goal] {goal.get('text', '')} " + "; ".join(goal.get("acceptance_criteria", []))
    return None


async def _ledger_lines(env: Env) -> list[str]:
    """Every event of the tenant but its turns, in ledger order, one line each (as appended,
    after the writer's redaction)."""
    s = env.settings
    js = env.client.nc.jetstream()
    wildcard = ledger_subject(s.prefix, env.tenant, ">")
    info = await js.stream_info(s.stream, subjects_filter=wildcard)
    total = sum((info.state.subjects or {}).values())
    lines: list[tuple[int, str]] = []
    done = asyncio.Event()
    seen = 0
    keys = task_keys_of(env.client.nc, s)

    async def on_msg(msg: Any) -> None:
        nonlocal seen
        seen += 1
        task = msg.subject.rsplit(".", 1)[-1]
        body = await keys.open_one(env.tenant, task, msg.headers, msg.data)  # a task's is sealed
        line = _event_line(task, msgspec.json.decode(body)) if body is not None else None
        if line is not None:
            lines.append((msg.metadata.sequence.stream, line))
        if seen >= total:
            done.set()

    sub = await js.subscribe(wildcard, stream=s.stream, ordered_consumer=True, cb=on_msg)
    try:
        # A deadline on progress, not on the whole read: 10^5 records are 2·10^5 messages.
        while total and not done.is_set():
            before = seen
            try:
                await asyncio.wait_for(done.wait(), STALL_S)
            except TimeoutError:
                if seen == before:
                    raise
    finally:
        await sub.unsubscribe()
    return [line for _, line in sorted(lines)]


async def full(env: Env, knobs: Knobs) -> StrategyResult:
    """The ledger's events in order, then the whole conversation (turns are sealed in the
    ledger: the context-builder opens them, here with compaction off and the full window)."""
    times, lines, gen = [], [], None
    for _ in range(knobs.repeats):
        t = time.perf_counter()
        lines = await _ledger_lines(env)
        again: dict[str, Any] = {} if gen is None else {"generation_id": gen.generation_id, "regenerate": True}
        built = await env.client.build_context(env.tenant, CHAT, env.chat_input, window_tokens=knobs.full_window,
                                               reserve_tokens=0, encoding=ENCODING, compaction={"mode": "off"},
                                               **again)
        gen = gen or built
        times.append((time.perf_counter() - t) * 1000)
    assert gen is not None
    branch = _branch(gen)
    rest = knobs.full_window - tokens.count(branch.rendered, ENCODING)
    kept, spent = [], 0
    for line in reversed(lines):
        cost = tokens.count(line, ENCODING) + 1
        if spent + cost > rest:
            break
        kept.append(line)
        spent += cost
    dropped_turns = sum(t.source == "turn" and t.outcome == "rejected" for t in branch.trace)
    truncated = len(kept) < len(lines) or dropped_turns > 0
    context = "\n".join([*reversed(kept), branch.rendered])
    notes = [f"{len(lines)} ledger events and the conversation"
             + (f"; cut to the window: {len(lines) - len(kept)} events, {dropped_turns} turns left out"
                if truncated else "")]
    return StrategyResult("full", context, received=[*lines, branch.rendered], read_ms=times,
                          truncated=truncated, trace=_trace(branch), notes=notes)


def _branch(gen: Any) -> Any:
    return next(b for b in gen.branches if b.name == gen.selected)


def _trace(branch: Any) -> list[dict[str, Any]]:
    return [msgspec.to_builtins(t) for t in branch.trace]


async def _timed_builds(env: Env, knobs: Knobs, task: str, ordinal: int, **options: Any) -> tuple[Any, list[float]]:
    """The build (frozen; asked again it returns the same bytes) and the latency of
    ``repeats`` builds (the first, then regenerations: each a real build)."""
    times = []
    t = time.perf_counter()
    gen = await env.client.build_context(env.tenant, task, ordinal, **options)
    times.append((time.perf_counter() - t) * 1000)
    for _ in range(knobs.repeats - 1):
        t = time.perf_counter()
        await env.client.build_context(env.tenant, task, ordinal, generation_id=gen.generation_id, regenerate=True,
                                       **options)
        times.append((time.perf_counter() - t) * 1000)
    return gen, times


async def summary(env: Env, knobs: Knobs) -> StrategyResult:
    window = summary_overhead() + knobs.summary_budget + knobs.recent_tokens
    gen, times = await _timed_builds(
        env, knobs, CHAT, env.chat_input, window_tokens=window, reserve_tokens=0, encoding=ENCODING,
        compaction={"mode": "auto", "high_watermark": 0.05, "recent_exact_tokens": knobs.recent_tokens})
    branch = _branch(gen)
    cp = [t for t in branch.trace if t.source == "checkpoint" and t.outcome == "accepted"]
    plan = gen.compaction
    notes = [f"window {window}: branch {gen.selected}, compaction {plan.outcome if plan else 'none'}"
             + (f" ({plan.failure})" if plan and plan.failure else "")
             + (f", summary {cp[0].tokens} tokens (budget {knobs.summary_budget})" if cp else ", no summary")]
    return StrategyResult("summary", branch.rendered, received=[branch.rendered], read_ms=times,
                          trace=_trace(branch), notes=notes)


async def vector(env: Env, knobs: Knobs) -> StrategyResult:
    [qv] = await env.embedder.embed([RESUME_QUERY])
    conn = await asyncpg.connect(env.settings.database_url)
    try:
        times, rows = [], []
        for _ in range(knobs.repeats):
            t = time.perf_counter()
            rows = await conn.fetch(VECTOR_SQL, env.tenant, vector_text(qv), knobs.k)
            times.append((time.perf_counter() - t) * 1000)
    finally:
        await conn.close()
    lines, ranked, trace = [], [], []
    for rank, r in enumerate(rows, 1):
        if r["source"] == "memory":
            row = decode_row(r["row"])
            text = "(sealed)" if row.body.value is None else _value_text(row.body.value)
            line = f"[memory {row.kind}:{row.key} {row.status}] {text}"
            trace.append({"rank": rank, "source": "memory", "id": r["id"], "status": row.status,
                          "distance": round(float(r["dist"]), 4)})
        else:
            line = f"[document {r['id']}] {r['text']}"
            trace.append({"rank": rank, "source": "document", "id": r["id"], "distance": round(float(r["dist"]), 4)})
        lines.append(line)
        ranked.append(items_in(line))
    context = "\n".join([*lines, RESUME_PROMPT])
    return StrategyResult("vector", context, received=[*lines, RESUME_PROMPT], ranked=ranked, read_ms=times,
                          trace=trace, candidates=[(it, "selected") for its in ranked for it in its])


async def structured(env: Env, knobs: Knobs) -> StrategyResult:
    gen, times = await _timed_builds(
        env, knobs, TASK, env.task_input, window_tokens=knobs.window, reserve_tokens=0, encoding=ENCODING,
        memory_query=RESUME_QUERY, project_id=PROJECT, compaction={"mode": "off"})
    branch = _branch(gen)
    # The candidate set: the receipt of the build's gated read (the first build's: the newest
    # receipts are the regenerations', which read the same records), then one exact-key read
    # per required key, whose receipts also list the key's records a gate stopped, with why.
    # Those audit reads show what was retrieved and refused; they add nothing to the context.
    receipts = (await env.client.memory_receipts(env.tenant, task_id=TASK, limit=knobs.repeats)).receipts
    audit = [r.receipt for k in REQUIRED_KEYS
             if (r := await env.client.memory_read(env.tenant, key=k, task_id=TASK, project_id=PROJECT,
                                                   purpose="eval candidate audit")).receipt is not None]
    candidates: list[tuple[Any, str]] = []
    trace = _trace(branch)
    looked = [*((r, False) for r in receipts[-1:]), *((r, True) for r in audit)]
    ids = sorted({c.record_id for r, _ in looked for c in r.candidates})
    conn = await asyncpg.connect(env.settings.database_url)
    try:
        rows = {r["record_id"]: decode_row(r["row"]) for r in await conn.fetch(RECORD_SQL, env.tenant, ids)}
    finally:
        await conn.close()
    for receipt, is_audit in looked:
        for c in receipt.candidates:
            row = rows.get(c.record_id)
            text = _value_text(row.body.value) if row is not None and row.body.value is not None else ""
            failed = [g.gate for g in c.gates if not g.passed]
            outcome = c.outcome + (f":{','.join(failed)}" if failed else "")
            candidates += [(it, outcome) for it in items_in(text)]
            trace.append({"receipt": receipt.receipt_id, "audit": is_audit,
                          "record_id": c.record_id, "key": c.key, "found_by": c.found_by, "outcome": c.outcome,
                          "score": c.score, "gates": [msgspec.to_builtins(g) for g in c.gates]})
    notes = [f"window {knobs.window}: {sum(t.outcome == 'accepted' for t in branch.trace)} units accepted, "
             f"{sum(t.outcome == 'rejected' for t in branch.trace)} rejected"]
    if receipts:  # the gated read's own time, as the memory-policy measured it (its receipts)
        served = sorted(r.latency_ms for r in receipts)
        notes.append(f"memory.read inside the builds: {served[len(served) // 2]:.1f} ms p50 service-side "
                     f"(n {len(served)})")
    return StrategyResult("structured", branch.rendered, received=[branch.rendered], candidates=candidates,
                          read_ms=times, trace=trace, notes=notes)


STRATEGIES = {"off": off, "full": full, "summary": summary, "vector": vector, "structured": structured}


def ensure_known(names: list[str]) -> None:
    unknown = [n for n in names if n not in STRATEGIES]
    if unknown:
        raise ValueError(f"unknown strategies {unknown}; known: {', '.join(NAMES)}")

