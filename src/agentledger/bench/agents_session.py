"""The Agents SDK session on the ledger beside the SDK's own ``SQLiteSession``, same items, same run.

A 200-item conversation is written the way the SDK's Runner writes it (one ``add_items`` per
turn: the user's message, then the assistant's), and after each turn the session is read the
way the Runner reads it before the next one (``get_items()``, every item). Two lines:
``agents_session_add_p50`` / ``_p99`` and ``agents_session_get_p50`` / ``_p99``, each with
``SQLiteSession`` (the SDK's default store, an in-process SQLite file on the same disk) as
``baseline``. What the ledger pays and SQLite does not: each add is an atomic, guarded,
chained and sealed append through the writer and the projector's fold, each get a read of the
projection that waits for this session's own last write (read-your-writes across processes).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec

from agentledger.bench.common import Stack, emit, pct
from agentledger.client import connect
from agentledger.security import auth, bindings

TENANT, USER, AGENT = "bench-sdk", "u1", "sdk-bench"
ITEMS = 200  # 100 turns of a user message and an assistant answer


def _turn(i: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"question {i}: what did the build log say about step {i}?"},
            {"type": "message", "role": "assistant", "status": "completed", "id": f"msg_{i}",
             "content": [{"type": "output_text", "text": f"step {i} passed in {i % 7 + 1}.{i % 10} s",
                          "annotations": []}]}]


async def _timed(call: Callable[[], Awaitable[Any]], into: list[float]) -> Any:
    start = time.perf_counter()
    out = await call()
    into.append((time.perf_counter() - start) * 1000)
    return out


async def _conversation(session: Any) -> tuple[list[float], list[float]]:
    """The add and get latencies (ms) of one conversation of ``ITEMS`` items."""
    adds: list[float] = []
    gets: list[float] = []
    for i in range(ITEMS // 2):
        await _timed(lambda i=i: session.add_items(_turn(i)), adds)
        got = await _timed(session.get_items, gets)
        if len(got) != 2 * (i + 1):
            raise AssertionError(f"the session holds {len(got)} items after {i + 1} turns, not {2 * (i + 1)}")
    return adds, gets


async def bench_agents_session(stack: Stack) -> None:
    """Emit the two pairs of figures (see the module docstring)."""
    from agents import SQLiteSession  # noqa: PLC0415 - the optional extra, only for this bench

    from agentledger.adapters.openai_agents import AgentledgerSession  # noqa: PLC0415

    settings = stack.settings
    if auth.auth_store(settings).initialized:
        await auth.tenant_add(settings, TENANT)
        creds = await auth.agent_add(settings, TENANT, AGENT)
        await bindings.bind_agent(settings, TENANT, AGENT, [USER], [])
        settings = msgspec.structs.replace(settings, nats_creds=creds)
    client = await connect(settings, timeout=30)
    try:
        ours = AgentledgerSession(f"s-{uuid.uuid4().hex[:12]}", client, tenant=TENANT, subject=USER)
        adds, gets = await _conversation(ours)
    finally:
        await client.close()
    with tempfile.TemporaryDirectory(prefix="agentledger-sqlite-session-") as folder:
        theirs = SQLiteSession("bench", db_path=Path(folder) / "session.db")
        base_adds, base_gets = await _conversation(theirs)
        await asyncio.to_thread(theirs.close)
    for name, mine, base in (("add", adds, base_adds), ("get", gets, base_gets)):
        for q, label in ((0.5, "p50"), (0.99, "p99")):
            value, baseline = pct(mine, q), pct(base, q)
            emit(f"agents_session_{name}_{label}", round(value, 2), "ms", round(baseline, 3),
                 round(value / baseline, 1) if baseline else None, target=None, items=ITEMS,
                 baseline_name="agents.SQLiteSession (file)")
