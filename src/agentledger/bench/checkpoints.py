"""Checkpoint benchmarks: checkpoint size against history length, resume latency against replay.

Each function prints JSON lines ``{"bench", "value", "unit", "baseline", "ratio"}``
through ``agentledger.bench.emit``. They need NATS and PostgreSQL servers
(``settings.nats_url`` / ``settings.database_url``) and bring their own services:
an in-process ledger-writer and checkpointer on a private subject prefix
(``<prefix>ckb<random>``), so no running checkpointer or projector saves
checkpoints of the benchmark's tasks behind its back. Everything they create
(stream, buckets, checkpoint rows) is removed afterwards.

Run them with ``agentledger bench --only checkpoint_bytes --only resume``.

* ``checkpoint_bytes``: stored checkpoint bytes of a task of 10,000 events vs one of
  100 events with the same state shape (plan, 16 recurring variables, budget
  reserve-consume-release cycles). Target ratio <= 1.1.
* ``resume_latency``: median wall time of the ``resume`` endpoint for a task
  with a checkpoint and a 1,000-event tail after it (10,000 events before it),
  vs the same 11,000-event history without a checkpoint (replay from the start).
"""

from __future__ import annotations

import contextlib
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import msgspec
import nats
import nats.js.errors

from agentledger.bench.common import emit, task_stream
from agentledger.client import Client, connect
from agentledger.config import Settings
from agentledger.core import checkpoint as cp_mod
from agentledger.core.checkpoint_policy import CHECKPOINT_TTL_S
from agentledger.security import auth
from agentledger.security.identity import tenants_bucket
from agentledger.services.checkpointer.service import Checkpointer
from agentledger.services.checkpointer.store import CheckpointStore
from agentledger.services.ledger_writer.service import LedgerWriter
from agentledger.services.projector.rebuild import Fold, read_stream
from agentledger.stores.ledger import ledger_subject

SMALL_EVENTS = 100
LARGE_EVENTS = 10_000
HEAD_EVENTS = 10_000
TAIL_EVENTS = 1_000
RESUME_RUNS = 7
APPEND_CHUNK = 1_000


@dataclass
class _Bench:
    settings: Settings
    tenant: str
    client: Client
    checkpointer: Checkpointer

    @property
    def store(self) -> CheckpointStore:
        assert self.checkpointer.store is not None
        return self.checkpointer.store

    async def append(self, events: list[dict[str, object]]) -> None:
        for i in range(0, len(events), APPEND_CHUNK):
            await self.client.append_batch(events[i:i + APPEND_CHUNK])

    async def checkpoint(self, task: str) -> tuple[int, int]:
        """Fold the task from the ledger, save a checkpoint of it; (id, stored bytes)."""
        fold = await read_stream(self.client.nc, self.settings, None, fold=Fold(),
                                 subject=ledger_subject(self.settings.prefix, self.tenant, task))
        state = fold.states[(self.tenant, task)]
        cp = cp_mod.build(state, now=time.time(), ttl_s=CHECKPOINT_TTL_S)
        checkpoint_id = await self.store.save(cp, events=len(state.applied))
        size = await self.store.pool.fetchval("SELECT octet_length(body) FROM checkpoints WHERE id = $1",
                                              checkpoint_id)
        return checkpoint_id, int(size)


@contextlib.asynccontextmanager
async def _private(settings: Settings) -> AsyncIterator[_Bench]:
    """A writer and a checkpointer in process on a private prefix; removed on the way out."""
    tmp = tempfile.TemporaryDirectory(prefix="agentledger-ckbench-")
    s = msgspec.structs.replace(settings, prefix=f"{settings.prefix}ckb{uuid.uuid4().hex[:6]}",
                                data_dir=Path(tmp.name))
    tenant = f"bench{uuid.uuid4().hex[:6]}"
    writer = LedgerWriter(s)
    checkpointer = Checkpointer(s)
    client: Client | None = None
    try:
        await writer.start()
        await checkpointer.start()
        client = await connect(s, timeout=120)
        yield _Bench(s, tenant, client, checkpointer)
    finally:
        if checkpointer.store is not None:
            async with checkpointer.store.pool.acquire() as conn, conn.transaction():
                await conn.execute("DELETE FROM checkpoint_pointer WHERE tenant = $1", tenant)
                await conn.execute("DELETE FROM checkpoints WHERE tenant = $1", tenant)
        if client is not None:
            await client.close()
        await checkpointer.stop()
        await writer.stop()
        await _drop_prefix(s)
        tmp.cleanup()


async def _drop_prefix(s: Settings) -> None:
    """Delete the stream and buckets of a private prefix."""
    nc = await auth.connect(s, auth.OPERATOR_ROLE)
    try:
        js = nc.jetstream()
        base = s.prefix.upper().replace("-", "_")
        for name in (s.stream, f"KV_{s.keys_bucket}", f"KV_{s.leases_bucket}", f"KV_{tenants_bucket(s.prefix)}",
                     f"OBJ_{base}_ARTIFACTS"):
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await js.delete_stream(name)
    finally:
        await nc.close()


async def bench_checkpoint_bytes(settings: Settings) -> None:
    """Stored checkpoint bytes: 10,000 events vs 100 events of the same state shape."""
    async with _private(settings) as b:
        sizes = {}
        for n in (SMALL_EVENTS, LARGE_EVENTS):
            task = f"size{n}"
            await b.append(task_stream(b.tenant, task, n))
            _, sizes[n] = await b.checkpoint(task)
    large, small = sizes[LARGE_EVENTS], sizes[SMALL_EVENTS]
    emit("checkpoint_bytes", large, "bytes", small, large / small,
         events=LARGE_EVENTS, baseline_events=SMALL_EVENTS, target="<= 1.1")


async def _resume_ms(b: _Bench, task: str) -> tuple[float, int]:
    """Median milliseconds of the resume endpoint for ``task``, and events it replayed."""
    samples, replayed = [], 0
    for _ in range(RESUME_RUNS):
        start = time.perf_counter()
        reply = await b.client.resume(b.tenant, task, "bench-executor")
        samples.append((time.perf_counter() - start) * 1000)
        if reply.status != "resumable":
            raise RuntimeError(f"resume of {task} was {reply.status}: {reply.reasons}")
        replayed = reply.replayed_events
    return statistics.median(samples), replayed


async def bench_resume(settings: Settings) -> None:
    """Resume with a 1,000-event tail after the checkpoint vs replaying all 11,000 events."""
    async with _private(settings) as b:
        history = task_stream(b.tenant, "x", HEAD_EVENTS + TAIL_EVENTS)
        for task in ("cp", "nocp"):
            events = [{**e, "task_id": task} for e in history]
            await b.append(events[:HEAD_EVENTS])
            if task == "cp":
                await b.checkpoint(task)
            await b.append(events[HEAD_EVENTS:])
        value, tail = await _resume_ms(b, "cp")
        baseline, full = await _resume_ms(b, "nocp")
    # Every resume takes the lease, which appends a `lease_granted` event: the last of the
    # RESUME_RUNS resumes replays the grants of the runs before it and its own.
    expected = (TAIL_EVENTS + RESUME_RUNS, HEAD_EVENTS + TAIL_EVENTS + RESUME_RUNS)
    if (tail, full) != expected:
        raise RuntimeError(f"replayed {tail} and {full} events; expected {expected}")
    emit("resume_latency", value, "ms", baseline, value / baseline, tail_events=tail,
         baseline_is=f"resume replaying all {full} events (no checkpoint)", runs=RESUME_RUNS)
