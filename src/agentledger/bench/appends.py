"""Append figures: closed-loop agents through the client against raw same-shape publishing.

An agent is closed-loop: it awaits its append's reply before it sends the next.
Each figure runs, per repeat, three things on the same server, one after the other:

* the system: ``agents`` closed-loop agents appending through ``Client`` (the
  tenant agent's connection, into the writer, the ledger stream, and on into the
  projector and the checkpointer, which run too);
* raw same-shape: as many closed-loop raw nats-py publishers, each publishing the
  same event bytes on the same subject shape as a durable JetStream publish
  (``js.publish``: request, wait for the PubAck), or an atomic batch of the same
  size for multi-event appends, into a second stream of the same configuration
  that no service reads;
* the batch ceiling: per round, one raw atomic batch holding one append's events
  per agent (everything the agents have outstanding at once; at most 1000 per
  batch), the next round after its commit ack.

Each run is timed over a window after a warm-up; only appends that complete in
the window count, and CPU is read at its two ends. Between runs the projector
is given time to fold everything, so one run's backlog never slows the next.
A figure reports the median value and baseline over the repeats and the median
of the per-repeat ratios.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from agentledger.bench.common import (
    Proc,
    Stack,
    agent_settings,
    cpu_ms_per_event,
    cpu_sample,
    create_tasks,
    emit,
    median,
    median_ratio,
    pct,
    raw_atomic_batch,
    restart_services,
    variable_event,
)
from agentledger.client import Client, connect
from agentledger.core import ledger_chain
from agentledger.core.ledger_chain import CHAIN, GENESIS, Head
from agentledger.security import auth
from agentledger.security.integrity_keys import IntegrityKeys, keys_of
from agentledger.stores.ledger import ledger_subject, msg_id

MAX_BATCH = 1000
TENANT = "bench"


@dataclass(frozen=True)
class Shape:
    """What the agents append: ``events`` per append, on their own task or on one shared task."""

    name: str
    agents: int
    events: int = 1
    one_task: bool = False

    def task(self, tag: str, agent: int) -> str:
        return f"{tag}-shared" if self.one_task else f"{tag}-a{agent}"


@dataclass
class Run:
    """One measured window: events completed, per-append latencies, CPU per event."""

    events: int
    seconds: float
    latencies_ms: list[float]
    cpu_ms: float | None = None
    cpu_by: dict[str, float] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.events / self.seconds


Op = Callable[[int, int], Awaitable[int]]


async def closed_loop(stack: Stack, workers: int, op: Op, procs: list[Proc] | None) -> Run:
    """Run ``workers`` closed loops of ``op(worker, n)`` (returns events done) over one window."""
    p = stack.profile
    window: dict[str, float] = {}
    stop = asyncio.Event()
    counted = [0]
    latencies: list[float] = []
    cpu: dict[str, dict[str, float]] = {}

    async def worker(w: int) -> None:
        n = 0
        while not stop.is_set():
            t = time.perf_counter()
            done = await op(w, n)
            end = time.perf_counter()
            n += 1
            # Counted when it completed after the window opened and before it closed.
            if window.get("start", end + 1) <= end <= window.get("end", end + 1):
                counted[0] += done
                latencies.append((end - t) * 1000)

    async def clock() -> None:
        await asyncio.sleep(p.warmup_s)
        if procs:
            cpu["before"] = cpu_sample(procs)
        window["start"] = time.perf_counter()
        await asyncio.sleep(p.window_s)
        window["end"] = time.perf_counter()
        if procs:
            cpu["after"] = cpu_sample(procs)
        stop.set()

    await asyncio.gather(clock(), *(worker(w) for w in range(workers)))
    run = Run(counted[0], window["end"] - window["start"], latencies)
    if procs:
        run.cpu_ms, run.cpu_by = cpu_ms_per_event(cpu["before"], cpu["after"], run.events)
    return run


class Agents:
    """Client connections for the system runs and raw connections for the baselines."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.clients: list[Client] = []
        self.raw: list[Any] = []

    async def __aenter__(self) -> Agents:
        s = self.stack.settings
        agent = await agent_settings(s, TENANT)
        for _ in range(self.stack.profile.connections):
            self.clients.append(await connect(agent, timeout=60))
            self.raw.append(await auth.connect(self.stack.raw, auth.WRITER))
        return self

    async def __aexit__(self, *exc: object) -> None:
        for c in self.clients:
            await c.close()
        for nc in self.raw:
            await nc.close()

    def conns(self, agents: int) -> int:
        return min(agents, len(self.clients))

    async def system_op(self, shape: Shape, tag: str) -> Op:
        """Appends through the client, to tasks opened here first."""
        n = self.conns(shape.agents)
        await create_tasks(self.clients[:n], TENANT, (shape.task(tag, a) for a in range(shape.agents)))

        async def op(agent: int, k: int) -> int:
            task = shape.task(tag, agent)
            events = [variable_event(TENANT, task, f"{agent}-{k}-{j}", k)
                      for j in range(shape.events)]
            await self.clients[agent % n].append_batch(events)
            return shape.events
        return op

    def _raw_items(self, shape: Shape, tag: str, agent: int, k: int) -> list[tuple[str, bytes, str]]:
        task = shape.task(tag, agent)
        subject = ledger_subject(self.stack.raw.prefix, TENANT, task)
        out = []
        for j in range(shape.events):
            eid = f"{agent}-{k}-{j}"
            out.append((subject, msgspec.json.encode(variable_event(TENANT, task, eid, k)),
                        msg_id(TENANT, task, eid)))
        return out

    def raw_op(self, shape: Shape, tag: str) -> Op:
        n = self.conns(shape.agents)
        js = [nc.jetstream() for nc in self.raw]

        async def op(agent: int, k: int) -> int:
            items = self._raw_items(shape, tag, agent, k)
            if len(items) == 1:
                subject, body, mid = items[0]
                await js[agent % n].publish(subject, body, headers={"Nats-Msg-Id": mid})
            else:
                await raw_atomic_batch(self.raw[agent % n], items)
            return len(items)
        return op

    def raw_chained_op(self, shape: Shape, tag: str, keys: IntegrityKeys) -> Op:
        """``raw_op`` of single events with what the ledger chain adds on the wire: each message
        linked by ``ledger_chain.link`` (its header) and sent with the expectation on its task's
        last sequence that every chained append carries."""
        n = self.conns(shape.agents)
        js = [nc.jetstream() for nc in self.raw]
        heads: dict[int, tuple[int, Head]] = {}

        async def op(agent: int, k: int) -> int:
            [(subject, body, mid)] = self._raw_items(shape, tag, agent, k)
            last, head = heads.get(agent, (0, GENESIS))
            headers = {"Nats-Msg-Id": mid}
            headers[CHAIN], new = ledger_chain.link(keys.current, keys.mac_key, head, tenant=TENANT,
                                                    task=shape.task(tag, agent), body=body, headers=headers)
            headers["Nats-Expected-Last-Subject-Sequence"] = str(last)
            ack = await js[agent % n].publish(subject, body, headers=headers)
            heads[agent] = (ack.seq, new)
            return 1
        return op

    def ceiling_op(self, shape: Shape, tag: str) -> Op:
        """One round: every agent's next append, as raw atomic batches of at most MAX_BATCH."""
        async def op(_: int, k: int) -> int:
            items = [i for a in range(shape.agents) for i in self._raw_items(shape, tag, a, k)]
            for b in range(0, len(items), MAX_BATCH):
                await raw_atomic_batch(self.raw[0], items[b:b + MAX_BATCH])
            return len(items)
        return op


@dataclass
class Measured:
    system: list[Run] = field(default_factory=list)
    raw: list[Run] = field(default_factory=list)
    ceiling: list[Run] = field(default_factory=list)


async def measure(stack: Stack, agents: Agents, shape: Shape, *, ceiling: bool = True) -> Measured:
    """``repeats`` times (system, raw same-shape, batch ceiling) for ``shape``."""
    out = Measured()
    for r in range(stack.profile.repeats):
        tag = f"{shape.name}{shape.agents}r{r}{uuid.uuid4().hex[:4]}"
        await stack.wait_projected()
        out.system.append(await closed_loop(stack, shape.agents, await agents.system_op(shape, tag),
                                            stack.stack_procs()))
        await stack.wait_projected()
        out.raw.append(await closed_loop(stack, shape.agents, agents.raw_op(shape, tag),
                                         stack.raw_procs()))
        if ceiling:
            out.ceiling.append(await closed_loop(stack, 1, agents.ceiling_op(shape, f"{tag}c"), None))
    return out


def report(stack: Stack, shape: Shape, m: Measured, targets: dict[str, str]) -> None:
    """The figures of one shape: throughput vs raw and vs the ceiling, latency, CPU."""
    ctx = {"agents": shape.agents, "events_per_append": shape.events,
           "tasks": 1 if shape.one_task else shape.agents, "repeats": stack.profile.repeats,
           "connections": min(shape.agents, stack.profile.connections)}
    sys_rate = [r.rate for r in m.system]
    raw_rate = [r.rate for r in m.raw]
    emit(f"{shape.name}_throughput", median(sys_rate), "events/s", median(raw_rate),
         median_ratio(sys_rate, raw_rate), baseline_is="raw same-shape publishers",
         target=targets.get("throughput"), **ctx)
    if m.ceiling:
        ceil_rate = [r.rate for r in m.ceiling]
        emit(f"{shape.name}_vs_ceiling", median(sys_rate), "events/s", median(ceil_rate),
             median_ratio(sys_rate, ceil_rate),
             baseline_is=f"one raw atomic batch of {shape.agents * shape.events} events per round",
             target=targets.get("vs_ceiling"), **ctx)
    for q, name in ((0.5, "p50"), (0.99, "p99")):
        v = [pct(r.latencies_ms, q) for r in m.system]
        b = [pct(r.latencies_ms, q) for r in m.raw]
        emit(f"{shape.name}_latency_{name}", median(v), "ms", median(b), median_ratio(v, b),
             baseline_is="raw same-shape publishers", target=targets.get(name), **ctx)
    if all(r.cpu_ms is not None for r in m.system + m.raw):
        v = [r.cpu_ms or 0.0 for r in m.system]
        b = [r.cpu_ms or 0.0 for r in m.raw]
        mid = sorted(m.system, key=lambda r: r.cpu_ms or 0.0)[len(m.system) // 2]
        emit(f"{shape.name}_cpu_per_event", median(v), "cpu-ms/event", median(b), median_ratio(v, b),
             baseline_is="raw same-shape: raw client + nats-server", target=targets.get("cpu"),
             cpu_by_process=mid.cpu_by, processes=sorted(mid.cpu_by), **ctx)


async def bench_single(stack: Stack) -> None:
    """Single-event agents at 1, 32 and 512 (default profile), each on its own task."""
    async with Agents(stack) as agents:
        top = max(stack.profile.single_agents)
        for n in stack.profile.single_agents:
            shape = Shape("single", n)
            targets = {"cpu": "<= 3"}
            if n == 1:
                targets["p99"] = "<= 3"
            if n == top:
                targets["vs_ceiling"] = ">= 0.35"
            report(stack, shape, await measure(stack, agents, shape), targets)


async def bench_batch(stack: Stack) -> None:
    """Agents appending ``batch_events`` events at a time, each on its own task."""
    p = stack.profile
    async with Agents(stack) as agents:
        shape = Shape("batch", p.batch_agents, p.batch_events)
        report(stack, shape, await measure(stack, agents, shape), {"cpu": "<= 3"})


async def bench_one_task(stack: Stack) -> None:
    """Agents all appending single events to one task, vs as many agents on their own tasks.

    Both sides run in every repeat, back to back, so the ratio compares like with like.
    """
    p = stack.profile
    async with Agents(stack) as agents:
        shape = Shape("one_task", p.one_task_agents, one_task=True)
        m = await measure(stack, agents, shape)
        report(stack, shape, m, {"cpu": "<= 3"})
        many: list[Run] = []
        spread = Shape("spread", p.one_task_agents)
        for r in range(p.repeats):
            await stack.wait_projected()
            many.append(await closed_loop(stack, spread.agents,
                                          await agents.system_op(spread, f"spread{r}{uuid.uuid4().hex[:4]}"),
                                          None))
        one, other = [r.rate for r in m.system], [r.rate for r in many]
        emit("one_task_vs_many_tasks", median(one), "events/s", median(other), median_ratio(one, other),
             baseline_is=f"{spread.agents} single-event agents on {spread.agents} tasks",
             target=">= 0.5", agents=shape.agents, repeats=p.repeats)


async def bench_pause(stack: Stack) -> None:
    """Append throughput with the projector and checkpointer running vs SIGSTOPped.

    The paused run's backlog is folded (after SIGCONT) before the next run starts.
    """
    p = stack.profile
    paused = ["projector", "checkpointer"]
    async with Agents(stack) as agents:
        shape = Shape("pause", p.pause_agents)
        running: list[Run] = []
        stopped: list[Run] = []
        for r in range(p.repeats):
            tag = f"pause{r}{uuid.uuid4().hex[:4]}"
            await stack.wait_projected()
            running.append(await closed_loop(stack, shape.agents, await agents.system_op(shape, f"{tag}on"),
                                             None))
            await stack.wait_projected()
            stack.pause(paused)
            try:
                stopped.append(await closed_loop(stack, shape.agents,
                                                 await agents.system_op(shape, f"{tag}off"), None))
            finally:
                stack.resume(paused)
        on, off = [r.rate for r in running], [r.rate for r in stopped]
        emit("pause_gain", median(off), "events/s", median(on), median_ratio(off, on),
             baseline_is="the same appends with projector and checkpointer running",
             value_is="projector and checkpointer SIGSTOPped", target="<= 1.2",
             agents=shape.agents, events_per_append=1, repeats=p.repeats)
        await stack.wait_projected()


def pooled_rate(runs: list[Run]) -> float:
    """Events per second over every window of ``runs`` together."""
    return sum(r.events for r in runs) / sum(r.seconds for r in runs)


async def bench_integrity(stack: Stack) -> None:
    """Append throughput with the ledger chain and its checks on vs off, in the same run.

    Per repeat, the services are restarted with ``AGENTLEDGER_INTEGRITY`` on and off (the order
    alternating between repeats, so neither side always runs on a warmer server) and the same
    closed-loop single-event agents append to tasks of their own. The ratio is the events of
    every window with it on over those with it off, per second (``integrity_repeats`` pairs of
    windows: one window moves with whatever else the host does by more than the chain costs).
    """
    p = stack.profile
    shape = Shape("integrity", p.pause_agents)
    on: list[Run] = []
    off: list[Run] = []
    try:
        async with Agents(stack) as agents:
            for r in range(p.integrity_repeats):
                for chained in ((True, False) if r % 2 == 0 else (False, True)):
                    await stack.wait_projected()
                    await restart_services(stack, AGENTLEDGER_INTEGRITY="true" if chained else "false")
                    tag = f"integrity{r}{'on' if chained else 'off'}{uuid.uuid4().hex[:4]}"
                    run = await closed_loop(stack, shape.agents, await agents.system_op(shape, tag),
                                            stack.stack_procs())
                    (on if chained else off).append(run)
    finally:
        await restart_services(stack)
    ctx = {"agents": shape.agents, "events_per_append": 1, "tasks": shape.agents, "repeats": p.integrity_repeats}
    pooled_on, pooled_off = pooled_rate(on), pooled_rate(off)
    emit("integrity_append_throughput", pooled_on, "events/s", pooled_off, pooled_on / pooled_off,
         baseline_is="the same stack with AGENTLEDGER_INTEGRITY=false (no chain, no checks); each side's "
                     "events over its windows' seconds, all repeats pooled",
         target=">= 0.95", on_rates=[round(r.rate, 1) for r in on], off_rates=[round(r.rate, 1) for r in off],
         **ctx)
    if all(r.cpu_ms is not None for r in on + off):
        v, b = [r.cpu_ms or 0.0 for r in on], [r.cpu_ms or 0.0 for r in off]
        mid = sorted(on, key=lambda r: r.cpu_ms or 0.0)[len(on) // 2]
        emit("integrity_cpu_per_event", median(v), "cpu-ms/event", median(b), median_ratio(v, b),
             baseline_is="the same stack with AGENTLEDGER_INTEGRITY=false, every process",
             cpu_by_process=mid.cpu_by, **ctx)
    v = [pct(r.latencies_ms, 0.5) for r in on]
    b = [pct(r.latencies_ms, 0.5) for r in off]
    emit("integrity_append_latency_p50", median(v), "ms", median(b), median_ratio(v, b),
         baseline_is="the same stack with AGENTLEDGER_INTEGRITY=false", **ctx)
    await bench_integrity_raw(stack, shape, ctx)


async def bench_integrity_raw(stack: Stack, shape: Shape, ctx: dict[str, Any]) -> None:
    """The server's own share of the chain's cost: raw publishers of the same single events with
    the chain's header and expectation (``raw_chained_op``) against the same without, windows
    alternating as above, pooled. ``integrity_append_throughput`` is to be read beside it: a
    stack that lost no more than this loses nothing of its own."""
    keys = keys_of(stack.settings)
    chained: list[Run] = []
    plain: list[Run] = []
    async with Agents(stack) as agents:
        for r in range(stack.profile.integrity_repeats):
            for with_chain in ((True, False) if r % 2 == 0 else (False, True)):
                tag = f"rawchain{r}{'on' if with_chain else 'off'}{uuid.uuid4().hex[:4]}"
                op = agents.raw_chained_op(shape, tag, keys) if with_chain else agents.raw_op(shape, tag)
                (chained if with_chain else plain).append(
                    await closed_loop(stack, shape.agents, op, stack.raw_procs()))
    on, off = pooled_rate(chained), pooled_rate(plain)
    emit("integrity_append_raw_ceiling", on, "events/s", off, on / off,
         baseline_is="raw publishers of the same single events without the chain header and expectation; "
                     "each side's events over its windows' seconds, all repeats pooled",
         value_is="raw publishers, each event linked (ledger_chain.link) and sent with the expectation "
                  "on its task's last sequence", **ctx)
