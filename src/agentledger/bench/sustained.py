"""Sustained appends: an open-loop rate sweep with projection lag.

Closed-loop agents slow down when the system does, so they never show a
backlog. Here appends are sent on a schedule whatever the replies do: at each
offered rate, for ``sweep_s`` seconds, single-event appends spread round-robin
over ``sweep_tasks`` tasks. Reported per rate: the accepted rate (acks received
within the window, per second) and the projection lag of every acked event:
the time from its ack to the first ``TaskChanged`` of its task at or after its
sequence (0 when the notification came first). An event never notified within
the catch-up time counts as an infinite lag. A rate is sustained when at least
95 % of it is accepted and the lag p99 is within ``lag_limit_ms``.
"""

from __future__ import annotations

import asyncio
import bisect
import math
import time
import uuid
from collections import defaultdict

import msgspec

from agentledger.bench.appends import TENANT, Agents
from agentledger.bench.common import Stack, create_tasks, emit, pct, variable_event
from agentledger.contracts.api import TaskChanged
from agentledger.security import auth
from agentledger.services.projector.service import changed_subject

TICK_S = 0.005
# Appends in flight beyond which the sender stops offering (the system is far behind).
MAX_IN_FLIGHT = 5_000
ACCEPTED_SHARE = 0.95
_changed = msgspec.json.Decoder(TaskChanged)


async def _offer(stack: Stack, agents: Agents, rate: int) -> tuple[int, float, list[float]]:
    """Offer ``rate`` appends/s for one window: (acked in window, window seconds, lags ms)."""
    p = stack.profile
    tag = f"sus{rate}x{uuid.uuid4().hex[:4]}"
    notified: dict[str, tuple[list[int], list[float]]] = defaultdict(lambda: ([], []))

    async def on_changed(msg: object) -> None:
        now = time.perf_counter()
        note = _changed.decode(msg.data)  # type: ignore[attr-defined]
        if not note.task_id.startswith(tag):
            return
        seqs, times = notified[note.task_id]
        seqs.append(note.seq)
        times.append(now)

    watch = await auth.connect(stack.settings, auth.OPERATOR_ROLE)
    sub = await watch.subscribe(changed_subject(stack.settings.prefix, TENANT, "*"),
                                cb=on_changed)
    acks: list[tuple[str, int, float]] = []
    inflight: set[asyncio.Task[None]] = set()
    conns = agents.clients

    async def one(i: int) -> None:
        task = f"{tag}-{i % p.sweep_tasks}"
        result = await conns[i % len(conns)].append(variable_event(TENANT, task, f"s{i}", i))
        acks.append((task, result.seq, time.perf_counter()))

    await create_tasks(conns, TENANT, (f"{tag}-{i}" for i in range(p.sweep_tasks)))
    start = time.perf_counter()
    end = start + p.sweep_s
    sent = 0
    while (now := time.perf_counter()) < end:
        due = int((now - start) * rate) + 1
        while sent < due and len(inflight) < MAX_IN_FLIGHT:
            t = asyncio.create_task(one(sent))
            inflight.add(t)
            t.add_done_callback(inflight.discard)
            sent += 1
        sent = max(sent, due)  # what could not be offered is not offered later
        await asyncio.sleep(TICK_S)
    accepted = sum(1 for _, _, t in acks if t <= end)
    if inflight:
        await asyncio.gather(*inflight)
    await stack.wait_projected()
    await asyncio.sleep(0.2)  # the last notifications are published after the last commit
    await sub.unsubscribe()
    await watch.close()
    lags = []
    for task, seq, t_ack in acks:
        seqs, times = notified.get(task, ([], []))
        i = bisect.bisect_left(seqs, seq)
        lags.append(max(0.0, (times[i] - t_ack) * 1000) if i < len(seqs) else math.inf)
    return accepted, p.sweep_s, lags


async def bench_sustained(stack: Stack) -> None:
    """Accepted rate and projection lag at each offered rate; the highest sustained rate."""
    p = stack.profile
    best = 0
    async with Agents(stack) as agents:
        for rate in p.sweep_rates:
            await stack.wait_projected()
            accepted, seconds, lags = await _offer(stack, agents, rate)
            value = accepted / seconds
            p50, p99 = pct(lags, 0.5), pct(lags, 0.99)
            ok = value >= ACCEPTED_SHARE * rate and p99 <= p.lag_limit_ms
            if ok:
                best = max(best, rate)
            emit("sustained_rate", value, "events/s", rate, value / rate,
                 baseline_is="offered rate (open loop)", offered=rate,
                 lag_p50_ms=round(p50, 3) if math.isfinite(p50) else None,
                 lag_p99_ms=round(p99, 3) if math.isfinite(p99) else None,
                 target=f"ratio >= {ACCEPTED_SHARE} and lag_p99_ms <= {p.lag_limit_ms:g}",
                 sustained=ok, tasks=p.sweep_tasks, seconds=seconds,
                 connections=len(agents.clients))
    emit("sustained_appends", best, "events/s", None, None,
         value_is=f"highest offered rate with lag p99 <= {p.lag_limit_ms:g} ms",
         rates=list(p.sweep_rates), target=">= 5000")
