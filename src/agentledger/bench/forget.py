"""Forgetting a data subject: fan-out latency to the last receipt, against the bare deletes.

Each sample is one data subject of its own tenant with ``records`` personal memory records,
``summaries`` committed compaction checkpoints (one per conversation), ``generations`` frozen
context generations over those conversations and ``artifacts`` artifacts registered about the
subject, all written through the running services (memory-policy, context-builder and the
tombstone-fanout run as processes beside the bench stack's).

* ``forget_subject_p50`` / ``_p99``: from the ``forget.request`` call to the moment
  ``forget_requests`` says completed (a 5 ms poll), the whole saga: key destroyed and every
  service's cache evicted, the records tombstoned and their ledger messages erased, receipts
  gone, generations and their artifacts erased, summaries forgotten and their conversations on
  a new lineage, the sealed Working Memory and checkpoint values counted, artifacts erased, the
  receipt sealed and appended.
* The baseline deletes the same things of another, identically built subject with bare calls
  and no bookkeeping: the key destroyed (the memory records' messages hold their values sealed
  under it: neither erases them), the records' and generations' rows deleted, the summaries'
  rows marked, every artifact erased, 16 at a time as the fan-out does (what any correct
  deletion must at least do). The ratio is what the saga (plans stored, the tombstone event and
  its projection, receipts, evictions, projections waited for) costs on top.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
import msgspec

from agentledger.bench.common import PROFILES, ServiceProcess, Stack, emit, pct
from agentledger.client import Client, connect
from agentledger.core.validate import goal_hash
from agentledger.security import auth
from agentledger.security.sealing import Keyring, kek_of
from agentledger.stores import artifacts

TARGET_P99_S = 2.0


@dataclass(frozen=True)
class Sizes:
    samples: int
    records: int
    summaries: int
    generations: int
    artifacts: int


SIZES = {"full": Sizes(samples=5, records=1000, summaries=10, generations=100, artifacts=10),
         "smoke": Sizes(samples=1, records=50, summaries=2, generations=6, artifacts=2)}
TURNS = 12


def sizes_of(stack: Stack) -> Sizes:
    name = next((n for n, p in PROFILES.items() if p == stack.profile), "full")
    return SIZES.get(name, SIZES["full"])


def _event(kind: str, payload: dict[str, Any], tenant: str, task: str, event_id: str, *,
           subject: str | None) -> dict[str, Any]:
    body = {"kind": kind, "event_id": event_id, "tenant": tenant, "task_id": task, "producer": "bench",
            "occurred_at": datetime.now(UTC).isoformat(), "schema_version": 1, "payload": payload}
    return body if subject is None else {**body, "data_subject": subject}


async def populate(c: Client, tenant: str, subject: str, sizes: Sizes) -> list[str]:
    """One data subject's footprint, written through the services (see the module docstring);
    the URIs of the artifacts registered about it."""
    proposals = [{"proposal_id": f"{subject}-{i}", "kind": "fact", "scope": {"level": "user", "id": subject},
                  "source": {"kind": "user_confirmed"}, "key": f"fact.item{i}", "personal": True,
                  "data_subject": subject, "value": f"{subject} owns item number {i} since spring"}
                 for i in range(sizes.records)]
    await c.memory_propose(tenant, proposals)
    per_task = max(1, sizes.generations // sizes.summaries)
    for t in range(sizes.summaries):
        task = f"chat{t}"
        goal = {"text": "help", "acceptance_criteria": ["done"], "goal_hash": goal_hash("help", ["done"])}
        created = _event("task_created", {"goal": goal, "budget": {"tokens": 10**9}}, tenant, task,
                         f"{task}-c", subject=None)
        turns = [_event("turn_appended", {"role": "user" if i % 2 else "assistant", "ordinal": i,
                                          "content": f"{subject} turn {i}: we went through the log excerpt "
                                                     f"number {i} and it showed nothing new"},
                        tenant, task, f"{task}-{i}", subject=subject) for i in range(1, TURNS + 1)]
        await c.append_batch([created, *turns])
        gen = await c.build_context(tenant, task, TURNS - 1, window_tokens=400, reserve_tokens=32,
                                    compaction={"high_watermark": 0.5, "recent_exact_tokens": 1},
                                    user_id=subject)
        await c.commit_generation(tenant, gen.generation_id, TURNS)
        for _ in range(per_task - 1):
            await c.build_context(tenant, task, TURNS - 1, window_tokens=8000, reserve_tokens=64,
                                  user_id=subject)
    uris = []
    for a in range(sizes.artifacts):
        ref = await c.put_artifact(f"{subject} scan {a}".encode(), schema="text/plain", producer="bench",
                                   tenant=tenant)
        await c.append_batch([_event("artifact_registered", {"artifact": msgspec.to_builtins(ref)},
                                     tenant, "chat0", f"art-{a}", subject=subject)])
        uris.append(ref.uri)
    return uris


async def _wait_completed(db: asyncpg.Connection, tenant: str, request_id: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while await db.fetchval("SELECT status FROM forget_requests WHERE tenant = $1 AND request_id = $2",
                            tenant, request_id) != "completed":
        if time.monotonic() > deadline:
            raise TimeoutError(f"forget request {request_id} did not complete")
        await asyncio.sleep(0.005)


async def _fanout(c: Client, db: asyncpg.Connection, tenant: str, subject: str) -> float:
    started = time.perf_counter()
    reply = await c.forget(tenant, {"kind": "subject", "subject": subject}, reason="bench")
    await _wait_completed(db, tenant, reply.request_id)
    return time.perf_counter() - started


async def _bare(stack: Stack, db: asyncpg.Connection, tenant: str, subject: str, registered: list[str]) -> float:
    """The same deletions with bare calls (see the module docstring)."""
    s = stack.settings
    nc = await auth.connect(s, "tombstone-fanout")
    try:
        keyring = Keyring(nc, s.keys_bucket, kek_of(s))
        store = await artifacts.open(nc, s)
        records = [r[0] for r in await db.fetch(
            "SELECT record_id FROM memory_records WHERE tenant = $1 AND data_subject = $2", tenant, subject)]
        gens = await db.fetch("SELECT generation_id, frozen_uri, artifact_uri FROM context_generations"
                              " WHERE tenant = $1 AND $2 = ANY(subjects)", tenant, subject)
        uris = [u for g in gens for u in (g[1], g[2]) if u]
        started = time.perf_counter()
        await keyring.destroy_subject(tenant, subject)
        async with db.transaction():
            await db.execute("DELETE FROM memory_records WHERE tenant = $1 AND record_id = ANY($2::text[])",
                             tenant, records)
            await db.execute("DELETE FROM memory_history WHERE tenant = $1 AND record_id = ANY($2::text[])",
                             tenant, records)
            await db.execute("DELETE FROM context_generations WHERE tenant = $1 AND generation_id = ANY($2::text[])",
                             tenant, [g[0] for g in gens])
            await db.execute("UPDATE context_checkpoints SET status = 'forgotten' WHERE tenant = $1"
                             " AND $2 = ANY(subjects)", tenant, subject)
        gate = asyncio.Semaphore(16)

        async def erase(uri: str) -> None:
            async with gate:
                await store.erase(uri)

        await asyncio.gather(*(erase(u) for u in [*uris, *registered]))
        return time.perf_counter() - started
    finally:
        await nc.close()


async def bench_forget(stack: Stack) -> None:
    sizes = sizes_of(stack)
    services = [await ServiceProcess.start(stack, module, micro) for module, micro in (
        ("memory_policy", "agentledger-memory-policy"), ("context_builder", "agentledger-context-builder"),
        ("tombstone_fanout", "agentledger-tombstone-fanout"))]
    db = await asyncpg.connect(stack.settings.database_url)
    try:
        async with await connect(stack.settings, timeout=120) as c:
            fanout: list[float] = []
            bare: list[float] = []
            for i in range(sizes.samples):
                for kind in ("fanout", "bare"):
                    tenant, subject = f"fg{i}{kind[0]}", f"subj{i}{kind[0]}"
                    registered = await populate(c, tenant, subject, sizes)
                    if kind == "fanout":
                        fanout.append(await _fanout(c, db, tenant, subject))
                    else:
                        bare.append(await _bare(stack, db, tenant, subject, registered))
        p50, p99 = pct(fanout, 0.5), pct(fanout, 0.99)
        base50 = pct(bare, 0.5)
        context = {"records": sizes.records, "summaries": sizes.summaries, "generations": sizes.generations,
                   "artifacts": sizes.artifacts, "samples": sizes.samples}
        emit("forget_subject_p50", p50, "s", base50, p50 / base50 if base50 else None, **context)
        base99 = pct(bare, 0.99)
        emit("forget_subject_p99", p99, "s", base99, p99 / base99 if base99 else None,
             target=f"value <= {TARGET_P99_S} s", **context)
    finally:
        await db.close()
        for service in services:
            service.stop()
