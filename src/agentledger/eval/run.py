"""Running one scenario: the corpus through the real write paths, then the five reads, scored.

``ingest`` is the only writer: ledger events through the ledger-writer (the runtime task's
goal, plan versions, steps with their artifact references, variables; the conversation's
turns), artifacts stored before the events that cite them, memory through ``memory.propose``
from the source each record really has (a user, the project's rules, runtime evidence, a tool,
an external document), documents through ``context.ingest``. Each write call is timed: the
write latency. Then every strategy reads (timed: the read latency), the executor acts on each
context, and ``metrics`` scores it. The runtime task is checkpointed at the interruption (after
S5) and, once everything is written, resumed by the checkpointer (``resume``): its answer is
what each strategy's resume success is reconciled with (``eval.resume``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from agentledger.client import Client
from agentledger.core.validate import goal_hash
from agentledger.eval.corpus import (
    ACCEPTANCE,
    CHAT,
    GOAL,
    PROJECT,
    RESUME_PROMPT,
    TASK,
    Corpus,
    MemoryWrite,
    Options,
    generate,
)
from agentledger.eval.executor import Actions
from agentledger.eval.metrics import Scores, StrategyResult, evaluate, percentiles, secret_markers, with_delta
from agentledger.eval.model import ModelExecutor
from agentledger.eval.resume import Resumed
from agentledger.eval.strategies import NAMES, STRATEGIES, Env, Knobs

PRODUCER = "agentledger-eval"
EXECUTOR = "agentledger-eval"  # the resume's lease holder
NOISE_BATCH = 500
DATA_SUBJECT = "no19-author"


@dataclass(frozen=True)
class Scenario:
    """A named scenario: the corpus options and the strategies' knobs."""

    name: str
    options: Options = field(default_factory=Options)
    knobs: Knobs = field(default_factory=Knobs)


PRESETS = {
    "clean": Scenario("clean", Options()),
    "risk": Scenario("risk", Options(stale=True, poison=True, secret=True)),
    "budget": Scenario("budget", Options(stale=True, poison=True, secret=True),
                       Knobs(summary_budget=120, k=2, window=700, full_window=1200)),
}


@dataclass
class ScenarioResult:
    scenario: Scenario
    tenant: str
    corpus: Corpus
    scores: list[Scores]
    results: list[StrategyResult]
    actions: list[Actions]
    write_ms: dict[str, list[float]] = field(default_factory=dict)
    resumed: Resumed | None = None  # the checkpointer's resume (None: no interruption)

    def table(self) -> list[dict[str, Any]]:
        return [s.row() for s in self.scores]


def _event(kind: str, tenant: str, task: str, event_id: str, payload: dict[str, Any]) -> dict[str, Any]:
    e = {"kind": kind, "event_id": event_id, "tenant": tenant, "task_id": task, "producer": PRODUCER,
         "occurred_at": datetime.now(UTC).isoformat(), "schema_version": 1, "payload": payload}
    if kind == "turn_appended":  # a turn is personal content: sealed under its (pseudonymous) speaker
        e["data_subject"] = DATA_SUBJECT
    return e


def _created(tenant: str, task: str) -> dict[str, Any]:
    criteria = list(ACCEPTANCE)
    return _event("task_created", tenant, task, "created", {
        "goal": {"text": GOAL, "acceptance_criteria": criteria, "goal_hash": goal_hash(GOAL, criteria)},
        "title": "No.19"})


async def _timed(ms: dict[str, list[float]], what: str, call: Any) -> Any:
    t = time.perf_counter()
    out = await call
    ms.setdefault(what, []).append((time.perf_counter() - t) * 1000)
    return out


async def ingest(client: Client, tenant: str, corpus: Corpus) -> dict[str, list[float]]:
    """Write ``corpus`` for ``tenant`` through the services; per kind of write, each call's ms."""
    ms: dict[str, list[float]] = {}
    refs: dict[str, dict[str, Any]] = {}
    for a in corpus.artifacts:
        ref = await _timed(ms, "artifact.put", client.put_artifact(a.content.encode(), schema=a.schema,
                                                                    producer=PRODUCER, version=a.version,
                                                                    tenant=tenant))
        refs[f"{a.name}@{a.version}"] = msgspec.to_builtins(ref)
    events = [_created(tenant, TASK)]
    events += [_event("plan_versioned", tenant, TASK, f"plan-v{p['version']}", p) for p in corpus.plan]
    for n, e in enumerate(corpus.steps):
        payload = dict(e["payload"])
        if e.get("artifacts"):
            payload["artifacts"] = [refs[a] for a in e["artifacts"]]
        if e.get("supersedes"):
            payload["supersedes"] = [refs[a]["uri"] for a in e["supersedes"]]
        events.append(_event(e["kind"], tenant, TASK, f"rt-{n}", payload))
    events.append(_event("turn_appended", tenant, TASK, "resume", {"role": "user", "ordinal": 1,
                                                                    "content": RESUME_PROMPT}))
    last = 0
    for e in events[:-1]:  # one append each: the latency of one step event
        last = (await _timed(ms, "ledger.append", client.append(e))).seq
    if corpus.options.interrupted:  # the interruption: a checkpoint after S5, then the resume turn
        await _timed(ms, "checkpoint.save", interrupt(client, tenant, last))
    await _timed(ms, "ledger.append", client.append(events[-1]))
    chat = [_created(tenant, CHAT)]
    chat += [_event("turn_appended", tenant, CHAT, f"turn-{t.ordinal}", {"role": t.role, "ordinal": t.ordinal,
                                                                        "content": t.text}) for t in corpus.turns]
    chat.append(_event("turn_appended", tenant, CHAT, "resume", {"role": "user", "ordinal": len(corpus.turns) + 1,
                                                                  "content": RESUME_PROMPT}))
    for i in range(0, len(chat), 100):
        await _timed(ms, "ledger.append_batch", client.append_batch(chat[i:i + 100]))
    now = datetime.now(UTC)

    def proposal(m: MemoryWrite) -> dict[str, Any]:
        return {"proposal_id": m.proposal_id, "kind": m.kind,
                "scope": {"level": m.scope, "id": TASK if m.scope == "task" else PROJECT},
                "source": {"kind": m.source, "quotes_external": m.quotes_external}, "key": m.key,
                "value": m.value, "subject_version": m.subject_version,
                "observed_at": (now - timedelta(seconds=m.age_s)).isoformat(), "origin_task": TASK,
                "evidence": [refs[f"{a}@1"] for a in m.evidence]}

    noise = [m for m in corpus.memory if m.proposal_id.startswith("m-noise-")]
    for i in range(0, len(noise), NOISE_BATCH):  # the scale sweep's bulk, as a bulk import sends it
        await _timed(ms, f"memory.propose x{NOISE_BATCH}", client.memory_propose(
            tenant, [proposal(m) for m in noise[i:i + NOISE_BATCH]]))
    for m in corpus.memory:
        if not m.proposal_id.startswith("m-noise-"):
            await _timed(ms, "memory.propose", client.memory_propose(tenant, [proposal(m)]))
    for d in corpus.documents:
        await _timed(ms, "context.ingest", client.ingest_document(tenant, d.doc_id, d.version, d.text,
                                                                   source=d.source, title=d.title))
    return ms


async def interrupt(client: Client, tenant: str, last_seq: int) -> int:
    """Checkpoint the runtime task at the interruption, once the projection holds ``last_seq``
    (the checkpointer snapshots the projected state); the checkpoint's id."""
    await client.working_memory(tenant, TASK, min_seq=last_seq, wait_ms=30_000)
    reply = await client.save_checkpoint(tenant, TASK)
    assert reply.checkpoint_id is not None
    return reply.checkpoint_id


async def resume_task(client: Client, tenant: str) -> Resumed:
    """The checkpointer's resume of the runtime task for the evaluation's executor; the lease it
    granted is released at once (the executor here only compares, it appends nothing)."""
    reply = await client.resume(tenant, TASK, EXECUTOR)
    if reply.lease is not None:
        await client.release_lease(tenant, TASK, reply.lease)
    return Resumed.from_reply(reply)



async def run_scenario(env: Env, scenario: Scenario, strategies: Sequence[str] = NAMES,
                       progress: Callable[[str], None] | None = None,
                       model: ModelExecutor | None = None) -> ScenarioResult:
    """Ingest the scenario's corpus into ``env.tenant`` (a fresh one), run each strategy, score them."""
    corpus = generate(scenario.options)
    say = progress or (lambda _: None)
    say(f"{scenario.name}: writing the corpus ({len(corpus.turns)} turns, {len(corpus.memory)} memory proposals)")
    write_ms = await ingest(env.client, env.tenant, corpus)
    resumed = await resume_task(env.client, env.tenant) if corpus.options.interrupted else None
    env = dataclasses.replace(env, chat_input=len(corpus.turns) + 1)
    names = ["off", *[n for n in strategies if n != "off"]]  # the delta needs Off of this scenario
    results, scores, actions = [], [], []
    for name in names:
        say(f"{scenario.name}: {name}")
        result = await STRATEGIES[name](env, scenario.knobs)
        s, a = evaluate(result, corpus, resumed=resumed)
        results.append(result)
        scores.append(s)
        actions.append(a)
        if model is not None:  # the same context, answered by the model, scored the same way
            ms, ma = evaluate(result, corpus, await model.act(result.context, secret_markers(corpus)), "model",
                              resumed)
            results.append(result)
            scores.append(ms)
            actions.append(ma)
    return ScenarioResult(scenario, env.tenant, corpus, with_delta(scores), results, actions, write_ms, resumed)


def latency_summary(res: ScenarioResult) -> dict[str, Any]:
    return {"read": {s.strategy: percentiles(list(s.read_ms)) for s in res.scores},
            "write": {k: percentiles(v) for k, v in sorted(res.write_ms.items())}}
