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
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from agentledger.bench.common import ServiceProcess, Stack, emit
from agentledger.bench.recall import corpus_of
from agentledger.client import Client, connect
from agentledger.contracts import events as ev
from agentledger.core.detect import find_instructions, find_personal, find_secrets
from agentledger.core.memory.decide import Detectors, decide, prepare
from agentledger.core.memory.resolve import KeyGroup

TENANT = "bulk0"
BATCH = 200
TARGET = 200.0
MAX_PROPOSALS = 6000


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


async def bench_memory_bulk(stack: Stack, corpus_file: Any = None) -> None:
    """Start the memory-policy service, import the corpus's turns, report the rate and the stages."""
    bodies, source = proposals_of(stack, corpus_file)
    rate_pure, stages = policy_costs(bodies)
    service = await ServiceProcess.start(stack, "memory_policy", "agentledger-memory-policy")
    client: Client | None = None
    try:
        client = await connect(stack.settings, timeout=120)
        elapsed, actions = await _propose_all(client, bodies)
    finally:
        if client is not None:
            await client.close()
        service.stop()
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
