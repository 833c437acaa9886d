"""Projection figures: what a long task costs PostgreSQL per event, and reading it back.

* WAL and PostgreSQL CPU per event: a task is filled to ``size - tail`` events
  (in batches, not measured), then ``tail`` single events are appended one at a
  time (each acked before the next, as a lone agent does) and the window closes
  when the projector's watermark reaches the last of them. WAL is the
  ``pg_current_wal_lsn()`` delta, CPU that of the postmaster and every backend.
  A long task (6,000 events) against a short one (500): a projection whose cost
  grows with the history shows it as a ratio above 1.
* ``wm.get`` p50 through the client against a raw read of the same data (the
  projector's own statement on an open asyncpg connection), at both sizes; and,
  to show what the NATS hop alone costs, against the same read behind a minimal
  Python NATS responder (request in, raw rows out, no decoding, no checks).
* What the integrity check costs the read (``wm_get_integrity_p50``): the read path's own
  work in this process (the statement, then the view rendered) with the rows' tags checked
  before rendering, against the same without the check, alternated sample by sample on the
  same connection. Without the NATS hop and the service around it the denominator is
  smaller than a real ``wm.get``'s, so the ratio is a lower bound of the real one.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from agentledger.bench.appends import TENANT
from agentledger.bench.common import (
    Stack,
    agent_settings,
    cpu_ms_per_event,
    cpu_sample,
    emit,
    median,
    median_ratio,
    pct,
    task_stream,
    variable_event,
)
from agentledger.client import Client, connect
from agentledger.config import Settings
from agentledger.core.state import decode_state
from agentledger.security import auth
from agentledger.security.integrity_keys import keys_of
from agentledger.services.projector.service import render_view
from agentledger.services.projector.store import Store, check_view_row
from agentledger.stores import db

FILL_CHUNK = 500
POLL_S = 0.01
WAIT_S = 60.0
# The baseline reads the same data wm.get returns (core row, variables and turns as stored JSON)
# with the projector's own statement, straight from asyncpg: what the read path adds is the ratio.
_STORE = Store()


async def _wait_watermark(conn: asyncpg.Connection, seq: int) -> None:
    """Poll on an open connection: a new connection would cost PostgreSQL a backend."""
    deadline = time.monotonic() + WAIT_S
    while (await Store().watermark(conn) or 0) < seq:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the projector did not reach seq {seq} in {WAIT_S} s")
        await asyncio.sleep(POLL_S)


async def _grow(stack: Stack, client: Client, conn: asyncpg.Connection, task: str,
                size: int) -> tuple[int, float, dict[str, float], int]:
    """Fill ``task`` to ``size`` events; (WAL bytes, PG CPU ms, CPU by process, state bytes)
    of its last ``history_tail`` events."""
    tail = stack.profile.history_tail
    history = task_stream(TENANT, task, size - tail)
    for i in range(0, len(history), FILL_CHUNK):
        last = await client.append_batch(history[i:i + FILL_CHUNK])
    await _wait_watermark(conn, last[-1].seq)
    procs = [p for p in stack.stack_procs() if p.name in ("postgres", "projector", "checkpointer")]
    lsn = await conn.fetchval("SELECT pg_current_wal_lsn()")
    before = cpu_sample(procs)
    for k in range(tail):
        seq = (await client.append(variable_event(TENANT, task, f"tail{k}", k))).seq
    await _wait_watermark(conn, seq)
    after = cpu_sample(procs)
    wal = await conn.fetchval("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1)", lsn)
    state_bytes = await conn.fetchval("SELECT octet_length(state) FROM task_state WHERE tenant = $1 "
                                      "AND task_id = $2", TENANT, task)
    pg = [p for p in procs if p.name == "postgres"]
    pg_ms, _ = cpu_ms_per_event({p.name: before[p.name] for p in pg},
                                {p.name: after[p.name] for p in pg}, tail)
    _, by = cpu_ms_per_event(before, after, tail)
    return int(wal), pg_ms, by, int(state_bytes or 0)


async def _p50_ms(fn: Callable[[], Awaitable[None]], samples: int) -> float:
    times = []
    for _ in range(samples):
        t = time.perf_counter()
        await fn()
        times.append((time.perf_counter() - t) * 1000)
    return pct(times, 0.5)


async def _integrity_ms(conn: asyncpg.Connection, task: str, settings: Settings,
                        samples: int) -> tuple[float, float]:
    """p50 in ms of the read path in process (statement, view rendered) with the tag check and
    without it, sample by sample in turn (so drift hits both alike)."""
    key_of = keys_of(settings).mac_key_of

    async def with_check() -> None:
        row = await _STORE.get_task(conn, TENANT, task)
        await render_view(row, check_view_row(row, key_of, TENANT, task, None), None)

    async def without_check() -> None:
        row = await _STORE.get_task(conn, TENANT, task)
        await render_view(row, decode_state(row["state"]), None)

    for fn in (with_check, without_check):
        await _p50_ms(fn, 5)
    return await _alternated_ms(with_check, without_check, samples)


async def _alternated_ms(a: Callable[[], Awaitable[None]], b: Callable[[], Awaitable[None]],
                         samples: int) -> tuple[float, float]:
    """p50 of ``a`` and of ``b`` in ms, sample by sample in turn (so drift hits both alike)."""
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(samples):
        for fn, out in ((a, times[0]), (b, times[1])):
            t = time.perf_counter()
            await fn()
            out.append((time.perf_counter() - t) * 1000)
    return pct(times[0], 0.5), pct(times[1], 0.5)


async def bench_history(stack: Stack) -> None:
    """WAL and PostgreSQL CPU per event, and ``wm.get`` against a raw SELECT, at two sizes."""
    p = stack.profile
    small, large = p.history_sizes
    wal: dict[int, list[float]] = {small: [], large: []}
    cpu: dict[int, list[float]] = {small: [], large: []}
    by: dict[int, dict[str, float]] = {}
    state: dict[int, int] = {}
    wm: dict[int, list[float]] = {small: [], large: []}
    raw: dict[int, list[float]] = {small: [], large: []}
    has_pg = any(pr.name == "postgres" for pr in stack.server_procs())
    client = await connect(await agent_settings(stack.settings, TENANT), timeout=60)
    conn = await db.connect(stack.settings.database_url)
    hop_conn = await db.connect(stack.settings.database_url)
    nc = await auth.connect(stack.settings, auth.OPERATOR_ROLE)
    hop_subject = f"{stack.settings.prefix}.bench.{uuid.uuid4().hex}"

    async def respond(msg: Any) -> None:
        tenant, task = msg.data.decode().split("/")
        row = await _STORE.get_task(hop_conn, tenant, task)
        await msg.respond(bytes(row["state"]) if row is not None else b"")

    await nc.subscribe(hop_subject, cb=respond)
    hop: dict[int, list[float]] = {small: [], large: []}
    # (with the tag check, without it) per repeat
    integrity: dict[int, list[tuple[float, float]]] = {small: [], large: []}
    try:
        await stack.wait_projected()
        for r in range(p.repeats):
            for size in (small, large):
                task = f"hist{size}r{r}{uuid.uuid4().hex[:4]}"
                w, c, by[size], state[size] = await _grow(stack, client, conn, task, size)
                wal[size].append(w / p.history_tail)
                cpu[size].append(c)

                async def read(task: str = task) -> None:
                    await client.working_memory(TENANT, task)

                async def select(task: str = task) -> None:
                    await _STORE.get_task(conn, TENANT, task)

                async def hopped(task: str = task) -> None:
                    await nc.request(hop_subject, f"{TENANT}/{task}".encode(), timeout=10)

                for fn in (read, select, hopped):  # warm every path
                    await _p50_ms(fn, 5)
                wm[size].append(await _p50_ms(read, p.wm_samples))
                raw[size].append(await _p50_ms(select, p.wm_samples))
                hop[size].append(await _p50_ms(hopped, p.wm_samples))
                integrity[size].append(await _integrity_ms(conn, task, stack.settings, p.wm_samples))
    finally:
        await nc.close()
        await hop_conn.close()
        await conn.close()
        await client.close()

    ctx = {"events": large, "baseline_events": small, "tail_events": p.history_tail,
           "repeats": p.repeats, "state_bytes": state[large], "baseline_state_bytes": state[small]}
    emit("projection_wal_per_event", median(wal[large]), "bytes/event", median(wal[small]),
         median_ratio(wal[large], wal[small]), target="<= 1.2", **ctx)
    if has_pg:
        emit("projection_pg_cpu_per_event", median(cpu[large]), "cpu-ms/event", median(cpu[small]),
             median_ratio(cpu[large], cpu[small]), target="<= 1.2",
             cpu_by_process=by[large], baseline_cpu_by_process=by[small], **ctx)
    for size in (small, large):
        _emit_reads(wm[size], raw[size], hop[size], integrity[size], events=size, state_bytes=state[size],
                    samples=p.wm_samples, repeats=p.repeats)


def _emit_reads(wm: list[float], raw: list[float], hop: list[float], integrity: list[tuple[float, float]], *,
                events: int, state_bytes: int, samples: int, repeats: int) -> None:
    """The read figures of one size (each list: one p50 per repeat)."""
    emit("wm_get_p50", median(wm), "ms", median(raw), median_ratio(wm, raw),
         baseline_is="raw SELECT of the same data (the projector's statement, asyncpg)", target="<= 2",
         events=events, state_bytes=state_bytes, samples=samples, repeats=repeats)
    emit("wm_get_vs_hop_p50", median(wm), "ms", median(hop), median_ratio(wm, hop),
         baseline_is="the same read behind a minimal Python NATS responder (no checks)",
         events=events, samples=samples, repeats=repeats)
    # The ratio is off / on: the target is the read with integrity on at >= 0.95 of off.
    on, off = [a for a, _ in integrity], [b for _, b in integrity]
    emit("wm_get_integrity_p50", median(on), "ms", median(off), median_ratio(off, on), target=">= 0.95",
         baseline_is="the read path in process (statement + render) without the tag check; ratio off/on",
         events=events, state_bytes=state_bytes, samples=samples, repeats=repeats)

