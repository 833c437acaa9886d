"""Quota figures: a quiet tenant alone, then beside a tenant that floods at its limits.

For this figure the bench restarts the writer with per-tenant limits an operator would give
each of two tenants sharing this 2-core stack: an append rate of ``RATE`` events/s, artifact
requests at ``ARTIFACT_RATE``/s and ``ARTIFACT_BYTES_RATE`` bytes/s, and an artifact quota of
``ARTIFACT_QUOTA`` bytes (the defaults are sized for a single tenant; docs/operations.md), and
puts it back as it was afterwards. Then, in one run, ``ROUNDS`` times in turn:

* **alone**: the quiet tenant's agent, paced at one round every ``QUIET_INTERVAL_S`` (well
  under its rate), appends one event to its task and reads the task back with ``wm.get``;
  per-request latencies over the window;
* **loaded**: the same, while the flooding tenant, in a process of its own (so that its
  client work does not share the quiet agent's event loop), runs ``FLOOD_LOOPS`` closed-loop
  appenders (each sends its next append as soon as the last one is answered, accepted or
  refused: far above ``RATE``) and ``ARTIFACT_LOOPS`` loops putting distinct 64 KiB artifacts
  (past its quota, refused).

The flooder holds its ``FLOOD_CONNECTIONS`` connections plus ``IDLE_CONNECTIONS`` idle ones (64,
the default account limit) through both kinds of window, and floods when told to. Windows
alternate so that what drifts during a run (the stream and the tables growing, a vacuum, other
processes of the host) falls on both figures alike instead of only on the second one.

Figures: ``quota_quiet_append_p50`` / ``_p99`` and ``quota_quiet_wm_get_p99``: ``value`` is
the loaded figure, ``baseline`` the one alone, ``ratio`` loaded / alone (target ≤ 2 for the
p99s); the flooder's accepted and refused counts ride along. Traffic goes to 127.0.0.1 only;
every loop stops at the end of its window.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

from agentledger.bench.common import (
    SERVICES,
    Stack,
    _wait_services,
    agent_settings,
    create_tasks,
    emit,
    pct,
    variable_event,
)
from agentledger.client import Client, connect
from agentledger.config import from_env
from agentledger.errors import AgentLedgerError
from agentledger.runtime.state import settings_env

QUIET, FLOOD = "quiet", "flood"
# The per-tenant limits of the writer during this figure.
RATE = 100.0
ARTIFACT_RATE = 20.0
ARTIFACT_BYTES_RATE = float(1 << 20)
ARTIFACT_QUOTA = 2 << 20
ARTIFACT_BYTES = 64 << 10
QUIET_INTERVAL_S = 0.01
FLOOD_LOOPS = 64
FLOOD_CONNECTIONS = 8
IDLE_CONNECTIONS = 56
ARTIFACT_LOOPS = 4
# How long the flooder runs before a loaded window opens, in seconds.
FLOOD_WARMUP_S = 1.0
# Alone and loaded windows, each this many times.
ROUNDS = 3


@contextlib.asynccontextmanager
async def _writer_with_limits(stack: Stack) -> AsyncIterator[None]:
    """The bench stack's writer process, restarted with this figure's limits, then put back."""
    limits = {"AGENTLEDGER_TENANT_APPEND_EVENTS_PER_S": str(RATE),
              "AGENTLEDGER_TENANT_ARTIFACT_REQUESTS_PER_S": str(ARTIFACT_RATE),
              "AGENTLEDGER_TENANT_ARTIFACT_BYTES_PER_S": str(ARTIFACT_BYTES_RATE),
              "AGENTLEDGER_TENANT_MAX_ARTIFACT_BYTES": str(ARTIFACT_QUOTA)}
    await _restart_writer(stack, limits)
    try:
        yield
    finally:
        await _restart_writer(stack, {})


async def _restart_writer(stack: Stack, extra: dict[str, str]) -> None:
    old = stack.services["writer"]
    old.terminate()
    old.wait(timeout=20)
    module = next(m for name, m, _ in SERVICES if name == "writer")
    env = {**os.environ, **settings_env(stack.settings), **extra}
    stack.services["writer"] = subprocess.Popen([sys.executable, "-m", module], env=env)
    await _wait_services(stack.settings, stack.services)


async def _quiet_run(client: Client, task: str, seconds: float, tag: str) -> tuple[list[float], list[float]]:
    """Paced rounds of one append and one ``wm.get``: their latencies in ms."""
    appends: list[float] = []
    reads: list[float] = []
    end = time.monotonic() + seconds
    i = 0
    while (start := time.monotonic()) < end:
        i += 1
        result = await client.append(variable_event(QUIET, task, f"{tag}-{i}", i))
        mid = time.monotonic()
        await client.working_memory(QUIET, task, min_seq=result.seq)
        done = time.monotonic()
        appends.append((mid - start) * 1000)
        reads.append((done - mid) * 1000)
        await asyncio.sleep(max(0.0, QUIET_INTERVAL_S - (done - start)))
    return appends, reads


async def bench_quotas(stack: Stack) -> None:
    # Long enough for a p99 of some thousand rounds (15 s of each kind in the full profile).
    seconds = max(stack.profile.window_s * 6, 1.0)
    window = seconds / ROUNDS
    alone: tuple[list[float], list[float]] = ([], [])
    loaded: tuple[list[float], list[float]] = ([], [])
    async with _writer_with_limits(stack):
        quiet = await connect(await agent_settings(stack.settings, QUIET), timeout=30)
        env = {**os.environ, **settings_env(await agent_settings(stack.settings, FLOOD))}
        flooder = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agentledger.bench.quotas", env=env,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        assert flooder.stdin is not None and flooder.stdout is not None
        try:
            await flooder.stdout.readline()  # "ready": connected, its task opened
            await create_tasks([quiet], QUIET, ["q"])
            await _quiet_run(quiet, "q", min(window, 1.0), "warm")
            for n in range(ROUNDS):
                for into, got in zip(alone, await _quiet_run(quiet, "q", window, f"alone{n}"), strict=True):
                    into.extend(got)
                flooder.stdin.write(f"flood {FLOOD_WARMUP_S + window + 0.5}\n".encode())
                await flooder.stdin.drain()
                await asyncio.sleep(FLOOD_WARMUP_S)
                for into, got in zip(loaded, await _quiet_run(quiet, "q", window, f"loaded{n}"), strict=True):
                    into.extend(got)
                await flooder.stdout.readline()  # "done": its loops stopped
            flooder.stdin.close()
            counts = json.loads(await flooder.stdout.readline())
            await flooder.wait()
        finally:
            if flooder.returncode is None:
                flooder.kill()
            await quiet.close()
    context = {"rate_events_per_s": RATE, "artifact_requests_per_s": ARTIFACT_RATE,
               "artifact_bytes_per_s": ARTIFACT_BYTES_RATE, "artifact_quota_bytes": ARTIFACT_QUOTA, "flood": counts,
               "samples": [len(alone[0]), len(loaded[0])], "window_s": seconds, "rounds": ROUNDS}
    for name, q, which, target in (("quota_quiet_append_p50", 0.5, 0, None),
                                   ("quota_quiet_append_p99", 0.99, 0, "<= 2"),
                                   ("quota_quiet_wm_get_p99", 0.99, 1, "<= 2")):
        value, baseline = pct(loaded[which], q), pct(alone[which], q)
        emit(name, value, "ms", baseline, value / baseline, target=target,
             baseline_is="the quiet tenant alone, same run", **context)


# ---- the flooding tenant, as its own process ------------------------------------------------

async def _flood() -> dict[str, Any]:
    """Hold the tenant's connections; on each ``flood S`` line of stdin flood appends and
    artifact puts at its limits for S seconds, then say ``done``; at the end of stdin, what came back."""
    s = from_env()
    clients = [await connect(s, timeout=30) for _ in range(FLOOD_CONNECTIONS)]
    idle: list[Client] = []
    refused_connections = 0
    for _ in range(IDLE_CONNECTIONS):
        try:
            idle.append(await connect(s, timeout=5))
        except Exception:  # noqa: BLE001 - the account's connection limit: counted
            refused_connections += 1
    await create_tasks(clients, FLOOD, ["f"])
    print("ready", flush=True)
    counts: dict[str, int] = {}
    serial = itertools.count()

    def count(key: str) -> None:
        counts[key] = counts.get(key, 0) + 1

    async def appender(n: int, end: float) -> None:
        client = clients[n % len(clients)]
        while time.monotonic() < end:
            i = next(serial)
            try:
                await client.append(variable_event(FLOOD, "f", f"{n}-{i}", i))
                count("appended")
            except AgentLedgerError as exc:
                count(exc.code)

    async def putter(n: int, end: float) -> None:
        client = clients[n % len(clients)]
        while time.monotonic() < end:
            data = f"{n}-{next(serial)}-".encode() * (ARTIFACT_BYTES // 8)
            try:
                await client.put_artifact(data[:ARTIFACT_BYTES], schema="bench", producer="bench")
                count("artifacts_stored")
            except AgentLedgerError as exc:
                count(f"put_{exc.code}")

    loop = asyncio.get_running_loop()
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        end = time.monotonic() + float(line.split()[1])
        await asyncio.gather(*(appender(n, end) for n in range(FLOOD_LOOPS)),
                             *(putter(n, end) for n in range(ARTIFACT_LOOPS)))
        print("done", flush=True)
    for client in clients + idle:
        await client.close()
    return {"connections": len(clients) + len(idle), "connections_refused": refused_connections,
            **counts}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(_flood())), flush=True)
