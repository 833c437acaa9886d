"""Fairness at the default settings: a quiet tenant alone, then beside a busy neighbour.

The quota figure (``bench.quotas``) gives each tenant a rate an operator would choose; this one
changes nothing: the writer and the memory-policy service run as the stack started them, with
the default quotas (10,000 events/s a tenant, far above what this host serves), so only the
services' own sharing (``shell/turns.py``, the committer's turns, the proposal path's yields)
stands between the neighbours. Windows alternate, alone then loaded, ``quotas.ROUNDS`` times:

* **appends**: the quiet tenant's agent, paced (``quotas.QUIET_INTERVAL_S``), appends one event
  and reads its task back; loaded, the flooding tenant's process (``python -m
  agentledger.bench.quotas``) runs ``quotas.FLOOD_LOOPS`` closed-loop appenders on its
  connections plus artifact puts. Figures ``fairness_quiet_append_p50`` / ``_p99`` and
  ``fairness_quiet_wm_get_p99``: loaded as ``value``, alone as ``baseline``, target ratio ≤ 2
  for the p99s;
* **memory reads**: the quiet tenant's ``memory.read`` of its own records, paced; loaded,
  another tenant imports the bulk corpus (``memory_bulk``: up to 6,000 proposals, 200 a
  request) as fast as the service decides. Figures ``fairness_quiet_memory_read_p50`` /
  ``_p99`` (target ≤ 2 for the p99) and the importer's proposals per second loaded beside
  alone (``fairness_import_rate``; ratio, no target: it shares the host).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from typing import Any

from agentledger.bench import memory_bulk, quotas
from agentledger.bench.common import ServiceProcess, Stack, agent_settings, create_tasks, emit, pct
from agentledger.client import Client, connect
from agentledger.runtime.state import settings_env
from agentledger.security import bindings

READER, IMPORTER = "quietmem", "importer"
READ_INTERVAL_S = 0.02
RECORDS = 50


async def _appends(stack: Stack, window: float) -> None:
    alone: tuple[list[float], list[float]] = ([], [])
    loaded: tuple[list[float], list[float]] = ([], [])
    quiet = await connect(await agent_settings(stack.settings, quotas.QUIET), timeout=30)
    env = {**os.environ, **settings_env(await agent_settings(stack.settings, quotas.FLOOD))}
    flooder = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agentledger.bench.quotas", env=env,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    assert flooder.stdin is not None and flooder.stdout is not None
    try:
        await flooder.stdout.readline()  # "ready"
        await create_tasks([quiet], quotas.QUIET, ["fq"])
        await quotas._quiet_run(quiet, "fq", min(window, 1.0), "warm")
        for n in range(quotas.ROUNDS):
            for into, got in zip(alone, await quotas._quiet_run(quiet, "fq", window, f"a{n}"),
                                 strict=True):
                into.extend(got)
            flooder.stdin.write(f"flood {quotas.FLOOD_WARMUP_S + window + 0.5}\n".encode())
            await flooder.stdin.drain()
            await asyncio.sleep(quotas.FLOOD_WARMUP_S)
            for into, got in zip(loaded, await quotas._quiet_run(quiet, "fq", window, f"l{n}"),
                                 strict=True):
                into.extend(got)
            await flooder.stdout.readline()  # "done"
        flooder.stdin.close()
        flood = (await flooder.stdout.read()).decode().strip().splitlines()[-1]
    finally:
        with contextlib.suppress(ProcessLookupError):
            flooder.kill()
        await flooder.wait()
        await quiet.close()
    extra: dict[str, Any] = {"flooder": flood, "rounds_alone": len(alone[0]), "rounds_loaded": len(loaded[0])}
    for name, i, q, target in (("append_p50", 0, 0.5, None), ("append_p99", 0, 0.99, 2.0),
                               ("wm_get_p99", 1, 0.99, 2.0)):
        value, base = pct(loaded[i], q), pct(alone[i], q)
        emit(f"fairness_quiet_{name}", round(value, 2), "ms", round(base, 2), round(value / base, 2) if base else None,
             target=None if target is None else f"<= {target}", **extra)


async def _reads(client: Client, seconds: float) -> list[float]:
    out: list[float] = []
    end = time.monotonic() + seconds
    while (start := time.monotonic()) < end:
        await client.memory_read(READER, "which build tool does the release use", project_id="p1")
        done = time.monotonic()
        out.append((done - start) * 1000)
        await asyncio.sleep(max(0.0, READ_INTERVAL_S - (done - start)))
    return out


async def _import(client: Client, bodies: list[dict[str, Any]], tag: str, until: asyncio.Event) -> int:
    """Propose ``bodies`` (fresh ids) 200 at a time until done or ``until`` is set; how many."""
    done = 0
    for i in range(0, len(bodies), memory_bulk.BATCH):
        if until.is_set():
            break
        chunk = [{**b, "proposal_id": f"{tag}-{b['proposal_id']}"} for b in bodies[i:i + memory_bulk.BATCH]]
        await client.memory_propose(IMPORTER, chunk)
        done += len(chunk)
    return done


async def _memory(stack: Stack, window: float) -> None:
    bodies, source = memory_bulk.proposals_of(stack, None)
    service = await ServiceProcess.start(stack, "memory_policy", "agentledger-memory-policy")
    reader_s = await agent_settings(stack.settings, READER)
    importer_s = await agent_settings(stack.settings, IMPORTER)
    for tenant, s in ((READER, reader_s), (IMPORTER, importer_s)):
        if s is not stack.settings:
            await bindings.bind_agent(stack.settings, tenant, "bench", [], ["p1", "conv"], roles=["project-admin"])
    reader = await connect(reader_s, timeout=60)
    importer = await connect(importer_s, timeout=60)
    try:
        await reader.memory_propose(READER, [
            {"proposal_id": f"r{i}", "kind": "fact", "scope": {"level": "project", "id": "p1"},
             "source": {"kind": "runtime_evidence"}, "value": f"release {i} was built with tool-{i % 7} on runner {i}"}
            for i in range(RECORDS)])
        await _reads(reader, min(window, 1.0))
        alone: list[float] = []
        loaded: list[float] = []
        rates: list[tuple[float, float]] = []
        for n in range(quotas.ROUNDS):
            alone.extend(await _reads(reader, window))
            stop = asyncio.Event()
            started = time.perf_counter()
            job = asyncio.create_task(_import(importer, bodies, f"l{n}", stop))
            loaded.extend(await _reads(reader, window))
            stop.set()
            imported = await job
            rates.append((imported, time.perf_counter() - started))
        per_s = sum(n for n, _ in rates) / max(sum(t for _, t in rates), 1e-9)
    finally:
        await reader.close()
        await importer.close()
        service.stop()
    for name, q, target in (("p50", 0.5, None), ("p99", 0.99, 2.0)):
        value, base = pct(loaded, q), pct(alone, q)
        emit(f"fairness_quiet_memory_read_{name}", round(value, 2), "ms", round(base, 2),
             round(value / base, 2) if base else None, target=None if target is None else f"<= {target}",
             reads_alone=len(alone), reads_loaded=len(loaded), import_proposals_per_s=round(per_s, 1),
             corpus=source)


async def bench_fairness(stack: Stack) -> None:
    window = max(stack.profile.window_s * 6, 1.0) / quotas.ROUNDS
    await _appends(stack, window)
    await _memory(stack, window)
