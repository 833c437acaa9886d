"""Bulk ``memory.propose``: proposals per second through the service, and what each stage costs.

The turns of the recall corpus (generated, or the LoCoMo-format file given with ``--locomo``)
are proposed the way a user imports a conversation: ``Speaker: text``, a user-confirmed fact,
no key, the session's date as ``observed_at``, ``BATCH`` proposals per request, one tenant.
That is the rate (``memory_bulk_proposals_per_s``, target >= 200 on a quiet host).

Beside it, in this process and on the same proposals, the pure policy's own ceiling (the
``prepare`` + ``decide`` of ``core.memory`` with an empty group per key: every rule, no I/O),
and the CPU time of each of its stages per proposal: the secret, personal-data and instruction
detectors (timed by wrapping them), and the rest of ``prepare`` with ``decide`` (the key and the
resolution). What the service spends beyond the pure policy per proposal (reading the groups,
appending two events per proposal to the ledger through the writer, waiting on them) is the
service's time per proposal minus the policy's, printed as ``io_ms``.

Then, on the tenant it filled, the read path at 2k tokens for the corpus's questions, one at a
time: ``memory.read`` (``memory_bulk_read_p50`` / ``_p99``, targets p99 <= 50 ms) and
``context.build`` of a one-turn task holding the question (``memory_bulk_build_p50`` / ``_p99``,
p99 <= 150 ms), each beside the bare SQL of the same rows in the same run: the read's two
gated search statements (``reads.TEXT_SQL`` and ``reads.VECTOR_SQL``, the question embedded
beforehand) on a connection of their own, the floor any read of those rows pays.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

import asyncpg

from agentledger.bench.common import ServiceProcess, Stack, emit, pct
from agentledger.bench.memory_reads import POOL_SETTINGS
from agentledger.bench.recall import corpus_of, question_task
from agentledger.client import Client, connect
from agentledger.contracts import events as ev
from agentledger.core.detect import find_instructions, find_personal, find_secrets
from agentledger.core.memory.authority import SENSITIVITY_RANK, scope_key
from agentledger.core.memory.decide import Detectors, decide, prepare
from agentledger.core.memory.read import candidate_cap
from agentledger.core.memory.resolve import KeyGroup
from agentledger.models.embedding import WordLlamaEmbedder
from agentledger.services.memory_policy.reads import TEXT_SQL, VECTOR_SQL
from agentledger.services.memory_policy.store import vector_text

TENANT = "bulk0"
BATCH = 200
TARGET = 200.0
MAX_PROPOSALS = 6000
MAX_QUESTIONS = 200
BUDGET = 2000
ENCODING = "cl100k_base"
READ_P99_MS, BUILD_P99_MS = 50, 150


def proposals_of(stack: Stack, corpus_file: Any) -> tuple[list[dict[str, Any]], str]:
    """Every turn of the corpus as a proposal (at most ``MAX_PROPOSALS``), and the corpus's name."""
    conversations, source = corpus_of(stack, corpus_file)
    turns = [t for conv in conversations for t in conv.turns][:MAX_PROPOSALS]
    return ([{"proposal_id": f"bulk-{i}", "kind": "fact", "scope": {"level": "project", "id": "conv"},
              "source": {"kind": "user_confirmed"}, "value": t.line, "observed_at": t.date.isoformat()}
             for i, t in enumerate(turns)], source)


class _Timed:
    """A detector that adds its CPU time to ``spent[name]``."""

    def __init__(self, name: str, fn: Callable[[str], Any], spent: dict[str, float]) -> None:
        self.name, self.fn, self.spent = name, fn, spent

    def __call__(self, text: str) -> Any:
        started = time.process_time()
        try:
            return self.fn(text)
        finally:
            self.spent[self.name] += time.process_time() - started


def policy_costs(bodies: Sequence[dict[str, Any]]) -> tuple[float, dict[str, float]]:
    """The pure policy on ``bodies``: decisions per second, and CPU ms per proposal by stage."""
    spent = {"secrets": 0.0, "personal": 0.0, "instructions": 0.0}
    detectors = Detectors(_Timed("secrets", find_secrets, spent), _Timed("personal", find_personal, spent),
                          _Timed("instructions", find_instructions, spent))
    proposed = [ev.MemoryProposed(proposal_id=b["proposal_id"], kind=b["kind"],
                                  scope=ev.Scope(level="project", tenant=TENANT, id="conv"),
                                  source=ev.MemorySource(kind="user_confirmed", producer="bench"), value=b["value"],
                                  observed_at=datetime.fromisoformat(b["observed_at"])) for b in bodies]
    now = datetime.now(UTC)
    wall, cpu = time.perf_counter(), time.process_time()
    for i, p in enumerate(proposed):
        pre = prepare(p, detectors=detectors)
        decide(p, tenant=TENANT, event_id=f"p{i}", group=KeyGroup(*pre.group_key), now=now, prepared=pre,
               detectors=detectors)
    elapsed, total = time.perf_counter() - wall, time.process_time() - cpu
    n = max(len(proposed), 1)
    per = {name: 1000 * s / n for name, s in spent.items()}
    per["keys_and_resolution"] = max(1000 * total / n - sum(per.values()), 0.0)
    return len(proposed) / elapsed if elapsed else 0.0, per


async def _propose_all(client: Client, bodies: Sequence[dict[str, Any]]) -> tuple[float, dict[str, int]]:
    actions: dict[str, int] = {}
    started = time.perf_counter()
    for i in range(0, len(bodies), BATCH):
        reply = await client.memory_propose(TENANT, list(bodies[i:i + BATCH]))
        for d in reply.decisions:
            actions[d.action] = actions.get(d.action, 0) + 1
    return time.perf_counter() - started, actions


async def _bare_sql_ms(url: str, questions: Sequence[str], limit: int) -> list[float]:
    """The read's two gated search statements per question, timed alone (embedding excluded)."""
    vectors = [vector_text(v) for v in WordLlamaEmbedder().embed_sync(list(questions))]
    scopes = [scope_key(ev.Scope(level="tenant", tenant=TENANT)), scope_key(ev.Scope(level="project", tenant=TENANT,
                                                                                     id="conv"))]
    conn = await asyncpg.connect(url, server_settings=POOL_SETTINGS)
    try:
        out = []
        for q, v in zip(questions, vectors, strict=True):
            args = (TENANT, scopes, datetime.now(UTC), None, SENSITIVITY_RANK["personal"], 0, [])
            started = time.perf_counter()
            await conn.fetch(TEXT_SQL, *args, q, limit)
            await conn.fetch(VECTOR_SQL, *args, v, limit)
            out.append(1000 * (time.perf_counter() - started))
        return out
    finally:
        await conn.close()


async def _reads(client: Client, questions: Sequence[str], builds: int) -> tuple[list[float], list[float]]:
    """``memory.read`` of every question and ``context.build`` of the first ``builds``, at 2k: ms each."""
    reads, built = [], []
    for q in questions:
        started = time.perf_counter()
        await client.memory_read(TENANT, q, project_id="conv", budget_tokens=BUDGET, encoding=ENCODING,
                                 max_sensitivity="personal")
        reads.append(1000 * (time.perf_counter() - started))
    for i, q in enumerate(questions[:builds]):
        task = f"bq{i}"
        await client.append_batch(question_task(TENANT, task, q))
        started = time.perf_counter()
        await client.build_context(TENANT, task, 1, window_tokens=BUDGET, reserve_tokens=0, encoding=ENCODING,
                                   memory_query=q, project_id="conv")
        built.append(1000 * (time.perf_counter() - started))
    return reads, built


async def bench_memory_bulk(stack: Stack, corpus_file: Any = None) -> None:
    """Start the memory-policy service, import the corpus's turns, report the rate and the stages."""
    bodies, source = proposals_of(stack, corpus_file)
    questions = questions_of(stack, corpus_file)
    rate_pure, stages = policy_costs(bodies)
    services = [await ServiceProcess.start(stack, "memory_policy", "agentledger-memory-policy"),
                await ServiceProcess.start(stack, "context_builder", "agentledger-context-builder")]
    client: Client | None = None
    try:
        client = await connect(stack.settings, timeout=120)
        elapsed, actions = await _propose_all(client, bodies)
        reads, builds = await _reads(client, questions, max(len(questions) // 4, 1))
    finally:
        if client is not None:
            await client.close()
        for service in reversed(services):
            service.stop()
    bare = await _bare_sql_ms(stack.settings.database_url, questions, candidate_cap(None, BUDGET))
    rate = len(bodies) / elapsed if elapsed else 0.0
    per_service = 1000 * elapsed / max(len(bodies), 1)
    policy_ms = sum(stages.values())
    emit("memory_bulk_proposals_per_s", rate, "proposals/s", rate_pure, rate / rate_pure if rate_pure else None,
         target=f">= {TARGET:.0f} proposals/s", baseline_is="the pure policy (prepare + decide) in one process",
         proposals=len(bodies), batch=BATCH, corpus=source, by_action=dict(sorted(actions.items())),
         stage_ms={**{k: round(v, 3) for k, v in stages.items()},
                   "io_ms": round(max(per_service - policy_ms, 0.0), 3)},
         service_ms_per_proposal=round(per_service, 3))
    print(f"# memory bulk: {len(bodies)} proposals in {elapsed:.1f} s ({rate:.0f}/s); per proposal "
          + ", ".join(f"{k} {v:.2f} ms" for k, v in stages.items())
          + f", the rest (groups, ledger) {max(per_service - policy_ms, 0.0):.2f} ms", file=sys.stderr, flush=True)
    for name, samples, target in (("read", reads, READ_P99_MS), ("build", builds, BUILD_P99_MS)):
        for q in (0.5, 0.99):
            v, b = pct(samples, q), pct(bare, q)
            emit(f"memory_bulk_{name}_p{round(q * 100)}", v, "ms", b, v / b if b else None,
                 target=f"p99 <= {target} ms" if q == 0.99 else None, budget_tokens=BUDGET, records=len(bodies),
                 calls=len(samples), baseline_is="the read's two gated search statements alone (bare SQL)")


def questions_of(stack: Stack, corpus_file: Any) -> list[str]:
    """The corpus's questions with evidence, at most ``MAX_QUESTIONS``."""
    conversations, _ = corpus_of(stack, corpus_file)
    return [q.question for conv in conversations for q in conv.questions if q.evidence][:MAX_QUESTIONS]
