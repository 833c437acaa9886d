"""Evidence recall of ``memory.read`` and ``context.build`` against BM25, at 1k-8k tokens.

For each question of a multi-session conversation (``recall_corpus``: generated, or the
user's own LoCoMo-like file), the share of its evidence turns whose text is in what the
retriever returned within the budget. The turns go in through the real write paths only:
each turn a ``memory.propose`` (source ``user_confirmed``, a user speaking; ``observed_at``
the session's date; project scope of the conversation's own tenant) and each session a
document through ``context.ingest``. Each question then gets:

* ``memory.read`` with ``budget_tokens`` = the budget and no ``k`` (the read fills the budget),
  ``max_sensitivity`` personal (the turns name people: the policy marks them personal);
* ``context.build`` of a one-turn task holding the question, ``window_tokens`` = the budget,
  nothing reserved, ``memory_query`` and ``document_query`` the question (the build reads
  memory without k in three times its budget and as many chunks as would fill it, then fills
  its budget by marginal value: ``POOL_FACTOR`` in ``services/context_builder/build.py``,
  docs/context.md);
* the baseline, in the same run: Okapi BM25 (k1 1.2, b 0.75) over the same turn texts, ranked
  for the question and packed greedily into the budget with the same tokenizer (cl100k_base).

Questions without evidence (unanswerable) are counted, not scored. One JSON line per budget and
retriever (ratio to BM25) with the recall of each category beside BM25's, and a table on stderr.
"""

from __future__ import annotations

import html
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentledger.bench.common import ServiceProcess, Stack, emit
from agentledger.bench.recall_corpus import BM25, CATEGORIES, Conversation, generate, load, pack, recall
from agentledger.client import Client, connect
from agentledger.core.context.render import listed_line
from agentledger.core.memory.when import when_of
from agentledger.core.validate import goal_hash
from agentledger.models import tokens

BUDGETS = (1000, 2000, 4000, 8000)
SYSTEMS = ("memory_read", "context_build", "bm25")
PROJECT = "conv"
ENCODING = "cl100k_base"


@dataclass
class Results:
    """Per (system, budget): the recall of every scored question, with its category."""

    scores: dict[tuple[str, int], list[tuple[str, float]]] = field(default_factory=dict)
    unanswerable: int = 0
    conversations: int = 0
    turns: int = 0
    # Per budget: units the builds took, by source (memory, document, conversation...), summed.
    build_units: dict[int, Counter[str]] = field(default_factory=dict)
    # Tokens of every turn as a memory line (cl100k), without and with its observation day.
    line_tokens: int = 0
    dated_line_tokens: int = 0
    # Scored questions that name a time (``core.memory.when``): their lines show the day.
    timed: int = 0
    # The memory decisions on the turns, by action.
    actions: Counter[str] = field(default_factory=Counter)

    @property
    def kept(self) -> int:
        """Turns whose words stayed readable: written, or merged into the same words said before."""
        return self.actions["write"] + self.actions["merge"]

    def add(self, system: str, budget: int, category: str, value: float) -> None:
        self.scores.setdefault((system, budget), []).append((category, value))

    def mean(self, system: str, budget: int, category: str | None = None) -> float | None:
        vals = [v for c, v in self.scores.get((system, budget), []) if category is None or c == category]
        return sum(vals) / len(vals) if vals else None

    def count(self, system: str, budget: int, category: str | None = None) -> int:
        return sum(category is None or c == category for c, _ in self.scores.get((system, budget), []))


def tenant_of(i: int) -> str:
    return f"recall{i}"


def _event(kind: str, tenant: str, task: str, event_id: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"kind": kind, "event_id": event_id, "tenant": tenant, "task_id": task, "producer": "bench-recall",
            "occurred_at": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()), "schema_version": 1,
            "payload": payload}


def question_task(tenant: str, task: str, question: str) -> list[dict[str, Any]]:
    """The events of a one-turn task holding ``question``, what a build for it reads."""
    return [_event("task_created", tenant, task, "created", {
        "goal": {"text": "answer", "acceptance_criteria": [], "goal_hash": goal_hash("answer", [])},
        "budget": {"tokens": 10**9}}),
        # A question naming a person is personal content: keyed to a pseudonymous subject.
        {**_event("turn_appended", tenant, task, "question", {"role": "user", "ordinal": 1, "content": question}),
         "data_subject": "asker"}]


async def ingest(client: Client, tenant: str, conv: Conversation) -> Counter[str]:
    """Every turn as a memory proposal and every session as a document, through the services;
    the decisions' actions, counted (a turn is kept when it is written or merges into its own
    earlier words; a ``supersede`` displaced an earlier turn, a ``quarantine`` held this one)."""
    proposals = [{"proposal_id": f"turn-{i}", "kind": "fact", "scope": {"level": "project", "id": PROJECT},
                  "source": {"kind": "user_confirmed"}, "value": t.line,
                  "observed_at": t.date.isoformat()} for i, t in enumerate(conv.turns)]
    reply = await client.memory_propose(tenant, proposals)
    if len(reply.decisions) != len(proposals):
        raise RuntimeError(f"memory.propose decided {len(reply.decisions)} of {len(proposals)}")
    actions = Counter(d.action for d in reply.decisions)
    for n, session in enumerate(conv.sessions(), 1):
        text = "\n".join([f"Session {session[0].session}, {session[0].date:%d %B %Y}", *(t.line for t in session)])
        await client.ingest_document(tenant, f"session-{n}", 1, text, source=f"conversation:{conv.sample_id}",
                                     title=f"session {session[0].session}")
    return actions


async def _memory_text(client: Client, tenant: str, question: str, budget: int) -> str:
    reply = await client.memory_read(tenant, question, project_id=PROJECT, budget_tokens=budget, encoding=ENCODING,
                                     max_sensitivity="personal")
    if not reply.ok:
        raise RuntimeError(f"memory.read failed: {reply.error}")
    return "\n".join(str(item.value) for item in reply.items if not item.erased)


async def build_text(client: Client, tenant: str, task: str, question: str, budget: int, *,
                      units: Counter[str]) -> str:
    """The selected branch as rendered; counts the units it took, by source, into ``units``."""
    gen = await client.build_context(tenant, task, 1, window_tokens=budget, reserve_tokens=0, encoding=ENCODING,
                                     memory_query=question, document_query=question, project_id=PROJECT)
    branch = next(b for b in gen.branches if b.name == gen.selected)
    units.update(t.source for t in branch.trace if t.outcome == "accepted")
    return html.unescape(branch.rendered)


async def evaluate(client: Client, conversations: Sequence[Conversation],
                   budgets: Sequence[int] = BUDGETS) -> Results:
    """Ingest each conversation into a tenant of its own, then score every question at every
    budget for the three retrievers."""
    res = Results(conversations=len(conversations))
    for ci, conv in enumerate(conversations):
        tenant = tenant_of(ci)
        res.turns += len(conv.turns)
        for t in conv.turns:
            res.line_tokens += tokens.count(listed_line(t.line), ENCODING)
            res.dated_line_tokens += tokens.count(listed_line(f"{t.date:%Y-%m-%d} {t.line}"), ENCODING)
        res.actions.update(await ingest(client, tenant, conv))
        by_id = {t.dia_id: t for t in conv.turns}
        lines = [t.line for t in conv.turns]
        bm25 = BM25(lines)
        scored = [(qi, q) for qi, q in enumerate(conv.questions) if q.evidence]
        res.unanswerable += len(conv.questions) - len(scored)
        res.timed += sum(when_of(q.question) is not None for _, q in scored)
        for qi, _ in scored:
            await client.append_batch(question_task(tenant, f"q{qi}", conv.questions[qi].question))
        # One read at a time: concurrent reads of one tenant's records can deadlock on the
        # receipt's memory_usage upsert (rows locked in the order each read ranked them).
        for qi, q in scored:
            ev = [by_id[e] for e in q.evidence]
            order = bm25.rank(q.question)
            for budget in budgets:
                taken = "\n".join(lines[i] for i in pack(lines, order, budget, ENCODING))
                res.add("bm25", budget, q.category, recall(ev, taken))
                mem = await _memory_text(client, tenant, q.question, budget)
                res.add("memory_read", budget, q.category, recall(ev, mem))
                built = await build_text(client, tenant, f"q{qi}", q.question, budget,
                                          units=res.build_units.setdefault(budget, Counter()))
                res.add("context_build", budget, q.category, recall(ev, built))
        print(f"# recall: conversation {ci + 1}/{len(conversations)} ({len(conv.turns)} turns, "
              f"{len(scored)} scored questions)", file=sys.stderr, flush=True)
    return res


def table(res: Results, budgets: Sequence[int] = BUDGETS) -> str:
    """Recall by budget and retriever with the ratios to BM25, then per category at 2k."""
    def f(v: float | None) -> str:
        return "   -  " if v is None else f"{v:6.3f}"

    out = ["budget | memory.read | context.build |  BM25  | read/BM25 | build/BM25"]
    for b in budgets:
        m, c, base = (res.mean(s, b) for s in SYSTEMS)
        out.append(f"{b:6d} |   {f(m)}    |    {f(c)}     | {f(base)} |  {f(_ratio(m, base))}   | "
                   f"{f(_ratio(c, base))}")
    out.append("per category (questions), memory.read / context.build / BM25 at " +
               ", ".join(f"{b // 1000}k" if b % 1000 == 0 else str(b) for b in budgets))
    for cat in CATEGORIES:
        n = res.count("bm25", budgets[0], cat)
        if n:
            out.append(f"  {cat:12s} ({n:3d}): " + " | ".join(
                " / ".join(f(res.mean(s, b, cat)).strip() for s in SYSTEMS) for b in budgets))
    out.append(f"  unanswerable, not scored: {res.unanswerable}")
    if res.turns:
        out.append(f"questions naming a time (their memory lines dated): {res.timed}; a line costs "
                   f"{res.line_tokens / res.turns:.1f} tokens, {res.dated_line_tokens / res.turns:.1f} dated")
    return "\n".join(out)


def _ratio(v: float | None, base: float | None) -> float | None:
    return None if v is None or not base else v / base


def _rounded(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def report(res: Results, budgets: Sequence[int], source: str) -> None:
    categories = [cat for cat in CATEGORIES if res.count("bm25", budgets[0], cat)]
    turns = max(res.turns, 1)
    ctx = {"corpus": source, "conversations": res.conversations, "turns": res.turns,
           "questions": res.count("bm25", budgets[0]), "unanswerable_not_scored": res.unanswerable,
           "questions_naming_a_time": res.timed, "line_tokens": round(res.line_tokens / turns, 2),
           "dated_line_tokens": round(res.dated_line_tokens / turns, 2),
           "baseline_is": "Okapi BM25 (k1 1.2, b 0.75) over the same turns, packed greedily into the budget "
                          "(cl100k_base)"}
    emit("recall_turns_kept", res.kept, "turns", res.turns, res.kept / turns, target="= proposed",
         by_action=dict(sorted(res.actions.items())), corpus=source)
    for b in budgets:
        base = res.mean("bm25", b) or 0.0
        for system in ("memory_read", "context_build"):
            v = res.mean(system, b) or 0.0
            extra: dict[str, Any] = {"by_category": {c: _rounded(res.mean(system, b, c)) for c in categories},
                                     "bm25_by_category": {c: _rounded(res.mean("bm25", b, c)) for c in categories}}
            if system == "context_build":
                n = max(res.count(system, b), 1)
                extra["accepted_units_per_build"] = {k: round(v / n, 2)
                                                     for k, v in sorted(res.build_units.get(b, {}).items())}
            emit(f"recall_{system}_{b}", v, "recall", base, v / base if base else None, target=None,
                 budget_tokens=b, **extra, **ctx)
    print(table(res, budgets), file=sys.stderr, flush=True)


def corpus_of(stack: Stack, path: str | Path | None) -> tuple[list[Conversation], str]:
    if path is not None:
        return load(path), str(Path(path).name)
    p = stack.profile
    return (generate(conversations=p.recall_conversations, sessions=p.recall_sessions,
                     turns_per_session=p.recall_turns, questions=p.recall_questions), "generated")


async def bench_recall(stack: Stack, corpus_file: str | Path | None = None) -> None:
    """Start the memory-policy and context-builder services, ingest, score, report."""
    conversations, source = corpus_of(stack, corpus_file)
    services = []
    client: Client | None = None
    try:
        services.append(await ServiceProcess.start(stack, "memory_policy", "agentledger-memory-policy"))
        services.append(await ServiceProcess.start(stack, "context_builder", "agentledger-context-builder"))
        client = await connect(stack.settings, timeout=60)
        started = time.monotonic()
        res = await evaluate(client, conversations)
        print(f"# recall: {time.monotonic() - started:.1f} s", file=sys.stderr, flush=True)
        report(res, BUDGETS, source)
    finally:
        if client is not None:
            await client.close()
        for s in reversed(services):
            s.stop()
