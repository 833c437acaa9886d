"""Scale-out: appends and projection lag with 1, 2 and 3 writers / projectors on a 3-node cluster.

Each configuration is a stack of its own, started by ``agentledger up`` in a
temporary folder as an operator would start it: the single-node stack (one
writer, one projector; the baseline of every ratio), then ``up --cluster 3``
with ``--instances N --partitions N`` for N = 1, 2, 3. The same closed-loop
load runs against each: ``tasks`` concurrent agents, each appending its
task's events one at a time through the client. Measured: acked events/s,
append p50 / p99 as the client sees them, and projection lag, the time from an
append's ack until the watermark of its task's partition covers it (sampled
every 10 ms from PostgreSQL). The point on one 2-core machine is the shape:
docs/scaling.md says what bottlenecks each configuration here and what a
multi-machine deployment changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import asyncpg

from agentledger.bench.common import (
    Proc,
    agent_settings,
    cpu_ms_per_event,
    cpu_sample,
    create_tasks,
    emit,
    median,
    pct,
    variable_event,
)
from agentledger.client import connect
from agentledger.config import Settings
from agentledger.errors import UnavailableError
from agentledger.runtime import commands
from agentledger.runtime.hosting import remove_instance
from agentledger.runtime.state import read_runtime, resolve_urls
from agentledger.services.projector.store import Store
from agentledger.stores.ledger import partition_of

TENANT = "bench"
SAMPLE_S = 0.01


@dataclass
class Run:
    """What one configuration's load measured."""

    latencies: list[float] = field(default_factory=list)
    # (ack time, seq, partition) of every acked event.
    acks: list[tuple[float, int, int]] = field(default_factory=list)
    # (time, watermark of each partition) samples.
    marks: list[tuple[float, tuple[int, ...]]] = field(default_factory=list)
    seconds: float = 0.0
    # Several runs' ``lags()`` pooled.
    lag_samples: list[float] = field(default_factory=list)
    # CPU milliseconds per event of every process of the stack, by process kind.
    cpu: dict[str, float] = field(default_factory=dict)

    def lags(self) -> list[float]:
        """Per acked event: seconds from its ack to the first sample covering it."""
        out: list[float] = []
        i = 0
        for at, seq, part in sorted(self.acks):
            while i < len(self.marks) and self.marks[i][0] < at:
                i += 1
            j = i
            while j < len(self.marks) and self.marks[j][1][part] < seq:
                j += 1
            if j < len(self.marks):
                out.append(max(0.0, self.marks[j][0] - at))
        return out


@contextlib.asynccontextmanager
async def _stack(base: Settings, cluster: int, instances: int) -> AsyncIterator[Settings]:
    """``agentledger up`` in a folder of its own; the client's settings; ``down`` after.

    ``up`` and ``down`` run their own event loops, so they run in a thread."""
    with tempfile.TemporaryDirectory(prefix="agentledger-scaleout-") as folder:
        os.chmod(folder, 0o711)  # noqa: S103 - traversable only: servers started as root run as their own users
        settings = Settings(data_dir=Path(folder) / "data", prefix=base.prefix,
                            server_root=Path(folder) / "servers", cluster_size=cluster,
                            instances=instances, projector_partitions=instances)
        try:
            await asyncio.to_thread(commands.up, settings)
            yield resolve_urls(settings)
        finally:
            try:
                if settings.runtime_file.exists():
                    await asyncio.to_thread(commands.down, settings)
            finally:
                remove_instance(settings.data_dir, settings.server_root)


def _procs(settings: Settings) -> list[Proc]:
    """Every process of the stack: the services, the NATS servers, PostgreSQL with its backends."""
    info = read_runtime(settings.runtime_file)
    procs = [Proc(name, pid) for name, pid in info.services.items()]
    procs += [Proc(node.name, node.pid) for node in info.nats_nodes if node.pid is not None]
    if info.nats_pid is not None:
        procs.append(Proc("nats", info.nats_pid))
    if info.postgres_pid is not None:
        procs.append(Proc("postgres", info.postgres_pid, tree=True))
    return procs


def _by_kind(by: dict[str, float]) -> dict[str, float]:
    """Per-process CPU summed by kind: ``projector-2`` counts as projector, ``nats-3`` as nats."""
    out: dict[str, float] = {}
    for name, ms in by.items():
        head, _, tail = name.rpartition("-")
        kind = head if tail.isdigit() else name
        out[kind] = round(out.get(kind, 0.0) + ms, 3)
    return out


async def _load(settings: Settings, tasks: int, per_task: int, partitions: int, name: str) -> Run:
    run = Run()
    client = await connect(await agent_settings(settings, TENANT), timeout=5.0, retries=0)
    pool = await asyncpg.create_pool(settings.database_url, min_size=1, max_size=2)
    assert pool is not None
    store = Store()
    stop, caught = asyncio.Event(), asyncio.Event()
    # The last acked seq, once the load is done: the sampler says when every partition has it.
    target: list[int] = []

    async def sample() -> None:
        while not stop.is_set():
            layout = await store.layout(pool)
            if layout is not None and layout.partitions == partitions:
                run.marks.append((time.monotonic(), layout.seqs))
                if target and layout.watermark >= target[0]:
                    caught.set()
            await asyncio.sleep(SAMPLE_S)

    async def agent(t: int) -> None:
        task = f"{name}-{t}"
        part = partition_of(TENANT, task, partitions)
        for i in range(per_task):
            body = variable_event(TENANT, task, f"e{i}", i)
            while True:
                began = time.monotonic()
                try:
                    result = await client.append(body)
                    break
                except UnavailableError:
                    await asyncio.sleep(0.05)
            now = time.monotonic()
            run.latencies.append(now - began)
            run.acks.append((now, result.seq, part))

    await create_tasks([client], TENANT, (f"{name}-{t}" for t in range(tasks)))
    sampler = asyncio.create_task(sample())
    try:
        began = time.monotonic()
        await asyncio.gather(*(agent(t) for t in range(tasks)))
        run.seconds = time.monotonic() - began
        target.append(max(seq for _, seq, _ in run.acks))
        await asyncio.wait_for(caught.wait(), 120)
    finally:
        stop.set()
        await sampler
        await client.close()
        await pool.close()
    return run


async def bench_scaleout(base: Settings, tasks: int, per_task: int, counts: tuple[int, ...],
                         repeats: int) -> None:
    """Every configuration in turn (one stack at a time, the load ``repeats`` times on it),
    then one line per figure: the median rate, the quantiles over every repeat's samples."""
    results: list[tuple[str, int, int, float, Run]] = []
    for cluster, n in ((1, 1), *((3, c) for c in counts)):
        runs: list[Run] = []
        async with _stack(base, cluster, n) as settings:
            # A few events per agent first, not measured: connections, plans and leaders settle.
            await _load(settings, tasks, 3, n, "warm")
            procs = _procs(settings)
            before = cpu_sample(procs)
            for r in range(repeats):
                runs.append(await _load(settings, tasks, per_task, n, f"so{r}"))
            _, by = cpu_ms_per_event(before, cpu_sample(procs), tasks * per_task * repeats)
        name = "single" if cluster == 1 else f"cluster3_x{n}"
        pooled = Run(latencies=[x for run in runs for x in run.latencies],
                     lag_samples=[x for run in runs for x in run.lags()], cpu=_by_kind(by))
        rate = median(len(run.acks) / run.seconds for run in runs)
        results.append((name, cluster, n, rate, pooled))
    _, _, _, base_rate, base_run = results[0]
    base_lag = pct(base_run.lag_samples, 0.99)
    for name, cluster, n, rate, run in results:
        lags = run.lag_samples
        extra = {"nodes": cluster, "writers": n, "projectors": n, "partitions": n,
                 "agents": tasks, "events": tasks * per_task, "repeats": repeats}
        emit(f"scaleout_{name}_throughput", rate, "events/s", base_rate, rate / base_rate,
             cpu_ms_per_event=round(sum(run.cpu.values()), 3), cpu_by_kind=run.cpu, **extra)
        emit(f"scaleout_{name}_append_p99", pct(run.latencies, 0.99) * 1000, "ms",
             pct(base_run.latencies, 0.99) * 1000,
             pct(run.latencies, 0.99) / max(pct(base_run.latencies, 0.99), 1e-9),
             p50_ms=round(pct(run.latencies, 0.5) * 1000, 3), **extra)
        emit(f"scaleout_{name}_lag_p99", pct(lags, 0.99) * 1000, "ms", base_lag * 1000,
             pct(lags, 0.99) / max(base_lag, 1e-9), p50_ms=round(pct(lags, 0.5) * 1000, 3), **extra)
