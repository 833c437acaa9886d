"""``memory_reach_start``: what a memory-policy process reads at start for its put-back
reference (``services/memory_policy/reach_log``: one stored entry per record, each tag checked,
then ``RecordReach.seed``), against the server's ceiling for the same work: the same entries
delivered to a raw ordered consumer that only counts them.

The reference it replaced was a fold of the whole ``_memory`` ledger at start, whose cost grew
with every version of every record (about 13 s of a core per 100,000 messages, and it stopped
there); this one is one entry per record, whatever the history.
"""

from __future__ import annotations

import asyncio
import time
from statistics import median
from typing import Any

import asyncpg
from nats.aio.client import Client
from nats.js.api import DeliverPolicy

from agentledger.bench.common import Stack, emit
from agentledger.projection.stream import seq_pending
from agentledger.security import auth
from agentledger.security.integrity_keys import keys_of
from agentledger.services.memory_policy import reach_log
from agentledger.services.memory_policy.record_reach import RecordReach
from agentledger.services.memory_policy.store import MemoryStore

# How long the stream may take to store the entries of the loaded records.
FILLED_TIMEOUT_S = 120.0


async def _raw_read(nc: Client, stream: str, subject: str) -> int:
    """The ceiling: the last entry of every subject delivered, counted, nothing else."""
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    count = [0]

    async def on_msg(msg: Any) -> None:
        count[0] += 1
        if seq_pending(msg)[1] == 0 and not done.done():
            done.set_result(None)

    sub = await nc.jetstream().subscribe(subject, stream=stream, cb=on_msg, ordered_consumer=True,
                                         deliver_policy=DeliverPolicy.LAST_PER_SUBJECT,
                                         pending_msgs_limit=0, pending_bytes_limit=0)
    try:
        await asyncio.wait_for(done, timeout=FILLED_TIMEOUT_S)
    finally:
        await sub.unsubscribe()
    return count[0]


async def publish_loaded(stack: Stack, conn: asyncpg.Connection) -> int:
    """The entries the live projection would have written as it committed the records the bench
    loaded (``memory_corpus`` writes them without the ledger, so the leader's backfill, a fold
    of the ledger, finds none); how many."""
    s = stack.settings
    position = await MemoryStore().position(conn)
    assert position is not None
    rows = [((r[0], r[1]), r[2]) for r in await conn.fetch("SELECT tenant, record_id, ledger_seq FROM memory_records")]
    nc = await auth.connect(s, auth.OPERATOR_ROLE)
    try:
        await reach_log.ensure_stream(nc, s)
        return await reach_log.publish(nc, s, keys_of(s), position[1], rows)
    finally:
        await nc.close()


async def bench_reach_start(stack: Stack, projection: int, records: int, ctx: dict[str, Any]) -> None:
    """Once the stream holds an entry for each of ``records``, the read a starting process
    makes, alternating with the raw read, ``stack.profile.repeats`` times each."""
    s = stack.settings
    keys = keys_of(s)
    nc = await auth.connect(s, auth.OPERATOR_ROLE)
    try:
        js = nc.jetstream()
        deadline = time.monotonic() + FILLED_TIMEOUT_S
        while (await js.stream_info(s.reach_stream)).state.messages < records:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the stream did not store {records} reach entries in time")
            await asyncio.sleep(0.2)
        subject = reach_log.projection_subjects(s.prefix, projection)
        ours: list[float] = []
        raw: list[float] = []
        seeded = 0
        for r in range(stack.profile.repeats):
            for mine in ((True, False) if r % 2 == 0 else (False, True)):
                started = time.perf_counter()
                if mine:
                    reach = RecordReach()
                    seeded = reach.seed(await reach_log.read(nc, s, keys, projection), reach.generation, projection)
                    ours.append(time.perf_counter() - started)
                else:
                    await _raw_read(nc, s.reach_stream, subject)
                    raw.append(time.perf_counter() - started)
    finally:
        await nc.close()
    value, baseline = median(ours), median(raw)
    emit("memory_reach_start", value, "s", baseline, baseline / value,
         baseline_is="the same stored entries delivered to a raw ordered consumer that only counts them",
         value_is="reach_log.read (each entry's tag and subject checked) and RecordReach.seed",
         target=">= 0.5", seeded=seeded, **ctx)
