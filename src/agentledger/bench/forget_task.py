"""Forgetting a long task: a task of 10,000 events, from the request to the sealed receipt.

Each sample builds two identical tasks through the writer (``task_created`` and turns, sealed
under their task keys at rest: ``security/task_seal.py``), waits for the projector, then:

* ``forget_task``: from the ``forget.request`` call to the moment ``forget_requests`` says
  completed (a 5 ms poll), the whole saga run by the tombstone-fanout as its own process: the
  ledger planned, the task key destroyed and every service's copy evicted, the subject purged,
  Working Memory, checkpoints, leases, artifacts and caches reached, the receipt sealed and
  appended. Target: at most ``TARGET_S``.
* The baseline makes the other task unreadable with bare calls and no bookkeeping: its key
  destroyed (the wrapped record securely erased), its subject purged in one JetStream call and
  its Working Memory rows deleted. That is the least any correct forget of a sealed task does;
  the ratio is what the saga (plan stored, scans, evictions, receipt) costs on top.
* ``erase_per_message_ms``: what the way before sealing cost, measured on a sample of the
  baseline task's messages before its purge (secure erase, one message delete each, 64 in
  flight): multiplied by the task's length it says what a task forget took without the key.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import asyncpg

from agentledger.bench.common import PROFILES, ServiceProcess, Stack, emit, pct
from agentledger.client import Client, connect
from agentledger.core.validate import goal_hash
from agentledger.erasure.erase import erase_seqs, subject_seqs
from agentledger.security import auth
from agentledger.security.sealing import Keyring, kek_of, key_name
from agentledger.security.task_seal import slot
from agentledger.stores.ledger import ledger_subject

TARGET_S = 10.0
EVENTS = {"full": 10_000, "smoke": 500}
SAMPLES = {"full": 3, "smoke": 1}
# Messages of the baseline task erased one by one to price the way before sealing.
ERASE_SAMPLE = 200
TENANT = "fgtask"


def _event(kind: str, payload: dict[str, Any], task: str, event_id: str) -> dict[str, Any]:
    return {"kind": kind, "event_id": event_id, "tenant": TENANT, "task_id": task, "producer": "bench",
            "occurred_at": datetime.now(UTC).isoformat(), "schema_version": 1, "payload": payload}


async def populate(c: Client, task: str, events: int) -> None:
    goal = {"text": "help", "acceptance_criteria": ["done"], "goal_hash": goal_hash("help", ["done"])}
    batch = [_event("task_created", {"goal": goal}, task, f"{task}-c")]
    for i in range(1, events):
        batch.append(_event("turn_appended", {"role": "user" if i % 2 else "assistant", "ordinal": i,
                                              "content": f"turn {i}: we went through the log excerpt "
                                                         f"number {i} and it showed nothing new"},
                            task, f"{task}-{i}") | {"data_subject": f"{task}-user"})
        if len(batch) == 500:
            await c.append_batch(batch)
            batch = []
    if batch:
        await c.append_batch(batch)


async def _projected(db: asyncpg.Connection, task: str, events: int, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while (await db.fetchval("SELECT count(*) FROM task_turns WHERE tenant = $1 AND task_id = $2",
                             TENANT, task)) < events - 1:
        if time.monotonic() > deadline:
            raise TimeoutError(f"task {task} was not projected")
        await asyncio.sleep(0.05)


async def _fanout(c: Client, db: asyncpg.Connection, task: str) -> float:
    started = time.perf_counter()
    reply = await c.forget(TENANT, {"kind": "task", "task_id": task}, reason="bench")
    deadline = time.monotonic() + 600
    while await db.fetchval("SELECT status FROM forget_requests WHERE tenant = $1 AND request_id = $2",
                            TENANT, reply.request_id) != "completed":
        if time.monotonic() > deadline:
            raise TimeoutError(f"forget request {reply.request_id} did not complete")
        await asyncio.sleep(0.005)
    return time.perf_counter() - started


async def _bare(stack: Stack, db: asyncpg.Connection, task: str) -> tuple[float, float]:
    """The baseline (see the module docstring); and the per-message secure erase, in ms."""
    s = stack.settings
    nc = await auth.connect(s, "tombstone-fanout")
    try:
        js = nc.jetstream()
        subject = ledger_subject(s.prefix, TENANT, task)
        sample = (await subject_seqs(js, s.stream, subject))[-ERASE_SAMPLE:]
        started = time.perf_counter()
        await erase_seqs(js, s.stream, sample)
        erase_ms = (time.perf_counter() - started) * 1000 / max(1, len(sample))
        keyring = Keyring(nc, s.keys_bucket, kek_of(s))
        started = time.perf_counter()
        await keyring.destroy(key_name(TENANT, slot(task)))
        await js.purge_stream(s.stream, subject=subject)
        async with db.transaction():
            for table in ("task_turns", "task_variables", "applied_events", "task_state"):
                await db.execute(f"DELETE FROM {table} WHERE tenant = $1 AND task_id = $2",  # noqa: S608 - constant names
                                 TENANT, task)
        return time.perf_counter() - started, erase_ms
    finally:
        await nc.close()


async def bench_forget_task(stack: Stack) -> None:
    profile = next((n for n, p in PROFILES.items() if p == stack.profile), "full")
    events, samples = EVENTS.get(profile, EVENTS["full"]), SAMPLES.get(profile, SAMPLES["full"])
    fanout_service = await ServiceProcess.start(stack, "tombstone_fanout", "agentledger-tombstone-fanout")
    db = await asyncpg.connect(stack.settings.database_url)
    try:
        async with await connect(stack.settings, timeout=120) as c:
            fanout: list[float] = []
            bare: list[float] = []
            erase_ms: list[float] = []
            for i in range(samples):
                for kind in ("fanout", "bare"):
                    task = f"long{i}{kind[0]}"
                    await populate(c, task, events)
                    await _projected(db, task, events)
                    if kind == "fanout":
                        fanout.append(await _fanout(c, db, task))
                    else:
                        took, per = await _bare(stack, db, task)
                        bare.append(took)
                        erase_ms.append(per)
        worst, base = max(fanout), pct(bare, 0.5)
        emit("forget_task", worst, "s", base, worst / base if base else None, events=events, samples=samples,
             median_s=round(pct(fanout, 0.5), 3), target=f"value <= {TARGET_S} s",
             erase_per_message_ms=round(pct(erase_ms, 0.5), 2),
             erase_whole_task_s=round(pct(erase_ms, 0.5) * events / 1000, 1))
    finally:
        await db.close()
        fanout_service.stop()
