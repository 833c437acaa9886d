"""Your own data: evidence recall per strategy on a LoCoMo-format conversation file.

The file is read by the recall bench's loader (``bench.recall_corpus.load``: sessions of turns
with ``dia_id``, questions with evidence ids). The turns go in through the real write paths as
the recall bench writes them (``bench.recall.ingest``: each turn a memory proposal from its
speaker, each session a document), and once more as the turns of one conversation task with
the questions after them. For each question with evidence, each strategy's context within
``budget`` tokens is scored by the share of the evidence turns whose text it holds:

* **off**: nothing; **full**: the conversation, newest turns first until the budget is spent;
* **summary**: ``context.build`` of the conversation at the question's turn with compaction
  forced, ``window_tokens`` = the budget;
* **vector**: pgvector cosine over the tenant's memory records and session chunks, no gate,
  packed best first into the budget;
* **structured**: ``context.build`` of a one-turn task holding the question, reading gated
  memory and documents for it, ``window_tokens`` = the budget.

The project ships no third-party data: point ``agentledger eval --locomo FILE`` at yours.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg

from agentledger.bench.recall import ingest as ingest_conversation
from agentledger.bench.recall_corpus import Conversation, load, pack, recall
from agentledger.client import Client
from agentledger.config import Settings
from agentledger.core.validate import goal_hash
from agentledger.eval.metrics import ENCODING
from agentledger.eval.strategies import NAMES, VECTOR_SQL
from agentledger.models.embedding import Embedder
from agentledger.services.memory_policy.store import decode_row, vector_text

PROJECT = "conv"  # the recall bench's project scope of a conversation's records
CHAT = "locomo-chat"
SUBJECT = "speakers"


@dataclass
class LocomoResult:
    """Per strategy, the evidence recall of every scored question (in file order)."""

    budget: int
    recall: dict[str, list[float]] = field(default_factory=dict)
    questions: int = 0
    unanswerable: int = 0

    def mean(self, strategy: str) -> float | None:
        vals = self.recall.get(strategy, [])
        return sum(vals) / len(vals) if vals else None


def _event(kind: str, tenant: str, task: str, event_id: str, payload: dict[str, Any], *,
           subject: str | None = None) -> dict[str, Any]:
    e = {"kind": kind, "event_id": event_id, "tenant": tenant, "task_id": task, "producer": "agentledger-eval",
         "occurred_at": "2026-01-01T00:00:00+00:00", "schema_version": 1, "payload": payload}
    if subject is not None:
        e["data_subject"] = subject
    return e


def _created(tenant: str, task: str) -> dict[str, Any]:
    return _event("task_created", tenant, task, "created", {
        "goal": {"text": "answer", "acceptance_criteria": [], "goal_hash": goal_hash("answer", [])}})


async def _write(client: Client, tenant: str, conv: Conversation, scored: Sequence[int]) -> dict[int, int]:
    """Write the conversation; the chat ordinal of each scored question."""
    await ingest_conversation(client, tenant, conv)
    events = [_created(tenant, CHAT)]
    events += [_event("turn_appended", tenant, CHAT, f"t{n}", {"role": "user", "ordinal": n, "content": t.line},
                      subject=SUBJECT) for n, t in enumerate(conv.turns, 1)]
    ordinal = {}
    for qi in scored:
        n = len(events)
        ordinal[qi] = n
        events.append(_event("turn_appended", tenant, CHAT, f"q{qi}", {
            "role": "user", "ordinal": n, "content": conv.questions[qi].question}, subject=SUBJECT))
    for i in range(0, len(events), 200):  # a batch holds the events of one task
        await client.append_batch(events[i:i + 200])
    for qi in scored:  # the structured build's one-turn task per question
        await client.append_batch([_created(tenant, f"q{qi}"), _event("turn_appended", tenant, f"q{qi}", "question", {
            "role": "user", "ordinal": 1, "content": conv.questions[qi].question}, subject=SUBJECT)])
    return ordinal


async def _vector_text(conn: asyncpg.Connection, tenant: str, qv: list[float], budget: int) -> str:
    rows = await conn.fetch(VECTOR_SQL, tenant, vector_text(qv), 400)
    texts = []
    for r in rows:
        if r["source"] == "memory":
            row = decode_row(r["row"])
            texts.append(str(row.body.value) if row.body.value is not None else "")
        else:
            texts.append(str(r["text"]))
    return "\n".join(texts[i] for i in pack(texts, range(len(texts)), budget, ENCODING))


def _selected(gen: Any) -> str:
    return html.unescape(next(b for b in gen.branches if b.name == gen.selected).rendered)


async def evaluate_file(client: Client, settings: Settings, embedder: Embedder, path: str | Path, *,
                        budget: int = 2000, tenant_prefix: str = "locomo",
                        strategies: Sequence[str] = NAMES) -> LocomoResult:
    """Evidence recall of each strategy on each scored question of the file's conversations."""
    res = LocomoResult(budget)
    conn = await asyncpg.connect(settings.database_url)
    try:
        for ci, conv in enumerate(load(path)):
            tenant = f"{tenant_prefix}{ci}"
            scored = [qi for qi, q in enumerate(conv.questions) if q.evidence]
            res.unanswerable += len(conv.questions) - len(scored)
            ordinal = await _write(client, tenant, conv, scored)
            by_id = {t.dia_id: t for t in conv.turns}
            lines = [t.line for t in conv.turns]
            newest_first = list(range(len(lines) - 1, -1, -1))
            for qi in scored:
                q = conv.questions[qi]
                evidence = [by_id[e] for e in q.evidence]
                texts: dict[str, str] = {"off": ""}
                texts["full"] = "\n".join(lines[i] for i in sorted(pack(lines, newest_first, budget, ENCODING)))
                if "summary" in strategies:
                    texts["summary"] = _selected(await client.build_context(
                        tenant, CHAT, ordinal[qi], window_tokens=budget, reserve_tokens=0, encoding=ENCODING,
                        compaction={"mode": "auto", "high_watermark": 0.05,
                                    "recent_exact_tokens": max(1, budget // 4)}))
                if "vector" in strategies:
                    [qv] = await embedder.embed([q.question])
                    texts["vector"] = await _vector_text(conn, tenant, qv, budget)
                if "structured" in strategies:
                    texts["structured"] = _selected(await client.build_context(
                        tenant, f"q{qi}", 1, window_tokens=budget, reserve_tokens=0, encoding=ENCODING,
                        memory_query=q.question, document_query=q.question, project_id=PROJECT))
                for name in strategies:
                    res.recall.setdefault(name, []).append(recall(evidence, texts[name]))
                res.questions += 1
    finally:
        await conn.close()
    return res


def markdown(res: LocomoResult, source: str) -> str:
    lines = [f"## Your data: evidence recall at {res.budget} tokens ({source})", "",
             f"{res.questions} questions scored, {res.unanswerable} without evidence not scored.", "",
             "| strategy | evidence recall |", "|---|---|"]
    for name, vals in res.recall.items():
        m = res.mean(name)
        lines.append(f"| {name} | {'N/A' if m is None else f'{m:.3f}'} ({len(vals)}) |")
    return "\n".join(lines) + "\n"
