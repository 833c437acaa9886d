"""The LangGraph adapter beside LangGraph's own Postgres saver, on the same PostgreSQL, one run.

Figures (``emit`` JSON lines):

* ``langgraph_bytes_<N>``: bytes stored after an N-step thread whose ``messages`` list gains one
  assistant message of ``MESSAGE_CHARS`` characters per step (what ``add_messages`` does), for
  AgentledgerSaver (ledger stream bytes + artifact bytes it added) against
  ``AsyncPostgresSaver`` (total relation size of its tables, in a schema of its own).
  Target: ours <= 0.1x at 200 steps.
* ``langgraph_growth``: ours at 800 steps / ours at 200 (target <= 4.4: linear).
* ``langgraph_put_p50`` / ``_p99`` and ``langgraph_get_p50`` / ``_p99``: milliseconds, with
  ``THREADS`` threads writing at once; ``langgraph_throughput``: put + get_tuple per second,
  against AsyncPostgresSaver on a pool of ``POOL`` connections (target >= 3x).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Any

import nats.js.errors

from agentledger.bench.common import Stack, emit, pct
from agentledger.config import Settings
from agentledger.security import auth
from agentledger.stores.artifacts import artifacts_bucket

STEPS = (200, 800)
MESSAGE_CHARS = 400
THREADS = 64
STEPS_PER_THREAD = 10
POOL = 16
SCHEMA = "lgbaseline"


def _checkpoint(messages: list[Any], version: Any) -> Any:
    from langgraph.checkpoint.base import empty_checkpoint  # noqa: PLC0415 - an optional extra

    cp = empty_checkpoint()
    cp["channel_values"] = {"messages": messages}
    cp["channel_versions"] = {"messages": version}
    return cp


async def _thread(saver: Any, thread: str, steps: int,
                  timings: tuple[list[float], list[float]] | None = None) -> None:
    """``steps`` checkpoints of one thread, each with one more message; put, then (when timed)
    get_tuple; the last checkpoint is read back and checked in any case."""
    from langchain_core.messages import AIMessage  # noqa: PLC0415

    messages: list[Any] = []
    version: Any = None
    parent: str | None = None
    for step in range(steps):
        messages = [*messages, AIMessage(content=f"step {step} " + "x" * MESSAGE_CHARS, id=f"m{step}")]
        version = saver.get_next_version(version, None)
        conf: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        if parent:
            conf["configurable"]["checkpoint_id"] = parent
        start = time.perf_counter()
        stored = await saver.aput(conf, _checkpoint(messages, version), {"source": "loop", "step": step},
                                  {"messages": version})
        put_ms = (time.perf_counter() - start) * 1000
        parent = stored["configurable"]["checkpoint_id"]
        if timings is None and step < steps - 1:
            continue
        start = time.perf_counter()
        got = await saver.aget_tuple(stored)
        get_ms = (time.perf_counter() - start) * 1000
        if got is None or len(got.checkpoint["channel_values"]["messages"]) != step + 1:
            raise RuntimeError(f"{thread}: step {step} did not read back")
        if timings is not None:
            timings[0].append(put_ms)
            timings[1].append(get_ms)


async def _ledger_bytes(settings: Settings) -> int:
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        jsm = nc.jsm()
        total = (await jsm.stream_info(settings.stream)).state.bytes
        # No artifact stored yet: no bucket, no bytes.
        with contextlib.suppress(nats.js.errors.NotFoundError):
            total += (await jsm.stream_info(f"OBJ_{artifacts_bucket(settings)}")).state.bytes
        return int(total)
    finally:
        await nc.close()


async def _postgres(settings: Settings) -> Any:
    import psycopg  # noqa: PLC0415
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver  # noqa: PLC0415
    from psycopg.rows import dict_row  # noqa: PLC0415
    from psycopg_pool import AsyncConnectionPool  # noqa: PLC0415

    async with await psycopg.AsyncConnection.connect(settings.database_url, autocommit=True) as conn:
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    pool = AsyncConnectionPool(settings.database_url, min_size=1, max_size=POOL, open=False,
                               kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row,
                                       "options": f"-c search_path={SCHEMA}"})
    await pool.open()
    saver = AsyncPostgresSaver(pool)
    await saver.setup()
    return pool, saver


async def _postgres_bytes(pool: Any) -> int:
    async with pool.connection() as conn:
        row = await (await conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) AS n FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r' "
            "AND c.relname IN ('checkpoints', 'checkpoint_blobs', 'checkpoint_writes')", (SCHEMA,))).fetchone()
    return int(row["n"])


async def _truncate(pool: Any) -> None:
    async with pool.connection() as conn:
        await conn.execute("TRUNCATE checkpoints, checkpoint_blobs, checkpoint_writes")
        await conn.execute("VACUUM FULL checkpoints")
        await conn.execute("VACUUM FULL checkpoint_blobs")
        await conn.execute("VACUUM FULL checkpoint_writes")


async def _throughput(saver: Any) -> tuple[float, list[float], list[float]]:
    timings: tuple[list[float], list[float]] = ([], [])
    run = uuid.uuid4().hex[:6]
    start = time.perf_counter()
    await asyncio.gather(*(_thread(saver, f"tp-{run}-{i}", STEPS_PER_THREAD, timings) for i in range(THREADS)))
    elapsed = time.perf_counter() - start
    return 2 * THREADS * STEPS_PER_THREAD / elapsed, timings[0], timings[1]


async def bench_langgraph(stack: Stack) -> None:
    """Bytes per thread length and put/get_tuple latency and throughput, ours against Postgres."""
    from agentledger.adapters.langgraph import AgentledgerSaver  # noqa: PLC0415

    settings = stack.settings
    ours = AgentledgerSaver(settings, tenant="bench")
    pool, baseline = await _postgres(settings)
    try:
        mine: dict[int, int] = {}
        for steps in STEPS:
            before = await _ledger_bytes(settings)
            await _thread(ours, f"bytes-{steps}-{uuid.uuid4().hex[:6]}", steps)
            mine[steps] = await _ledger_bytes(settings) - before
            await _truncate(pool)
            await _thread(baseline, f"bytes-{steps}", steps)
            theirs = await _postgres_bytes(pool)
            emit(f"langgraph_bytes_{steps}", mine[steps], "bytes", theirs, mine[steps] / theirs,
                 target="<= 0.1" if steps == 200 else None, message_chars=MESSAGE_CHARS,
                 baseline_name="AsyncPostgresSaver")
        emit("langgraph_growth", mine[800] / mine[200], "x", None, None, target="<= 4.4", steps=list(STEPS))
        await _truncate(pool)
        rate, puts, gets = await _throughput(ours)
        base_rate, base_puts, base_gets = await _throughput(baseline)
        for name, mine_ms, theirs_ms in (("put", puts, base_puts), ("get", gets, base_gets)):
            for q in (50, 99):
                value, base = pct(mine_ms, q / 100), pct(theirs_ms, q / 100)
                emit(f"langgraph_{name}_p{q}", value, "ms", base, value / base, threads=THREADS)
        emit("langgraph_throughput", rate, "ops/s", base_rate, rate / base_rate, target=">= 3",
             threads=THREADS, pool=POOL)
    finally:
        await ours.aclose()
        await pool.close()


if __name__ == "__main__":
    import sys

    from agentledger.bench.common import PROFILES, bench_stack
    from agentledger.config import from_env

    async def _main() -> None:
        async with bench_stack(from_env(), PROFILES["smoke"]) as stack:
            await bench_langgraph(stack)

    asyncio.run(_main())
    sys.exit(0)
