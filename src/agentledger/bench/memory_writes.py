"""Memory-policy write figures: decisions per second, propose latency and projection lag.

A proposal costs the policy's decision and its projection on top of the ledger append; the
baseline is that append alone, so the ratio is what the policy costs over the ledger.

* **Writes** (``memory_decisions_per_s``, ``memory_propose_latency_p50`` / ``_p99``): 20 tenants
  proposing one proposal at a time in a closed loop, and bulk calls of 1000 proposals, through
  the running service (each call waits until the service's projection holds its decisions). The
  baseline appends the very events the service appended (read back from the stream, new event
  ids) straight to the writer with the same concurrency and chunking while the memory-policy
  process is SIGSTOPped.
* **Projection lag** (``lag_p50_ms`` / ``lag_p99_ms``): the time a decision was stored in the
  stream (JetStream's timestamp) to the time a 2 ms poll of ``memory_watermark`` first saw it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import asyncpg
import msgspec

from agentledger.bench.common import ServiceProcess, Stack, emit, pct
from agentledger.bench.memory_corpus import Sizes, tenant_proposals
from agentledger.client import Client
from agentledger.contracts import events as ev

WATERMARK_POLL_S = 0.002
_WATERMARK_SQL = "SELECT seq FROM memory_watermark WHERE name = 'memory'"


def api_proposal(p: ev.MemoryProposed, run: str, evidence: ev.ArtifactRef | None = None) -> dict[str, Any]:
    """The request body of a proposal (what an agent sends), its id made unique to the run; an
    episode cites ``evidence`` (a report stored for its tenant: the policy looks it up)."""
    body: dict[str, Any] = {"proposal_id": f"{run}-{p.proposal_id}", "kind": p.kind,
                            "scope": {"level": p.scope.level}, "source": {"kind": p.source.kind},
                            "value": p.value, "key": p.key}
    if p.scope.id is not None:
        body["scope"]["id"] = p.scope.id
    if p.observed_at is not None:
        body["observed_at"] = p.observed_at.isoformat()
    if p.origin_task is not None:
        body["origin_task"] = p.origin_task
    if p.evidence:
        body["evidence"] = msgspec.to_builtins([evidence] if evidence is not None else p.evidence)
    return body


class Watermark:
    """Polls ``memory_watermark`` every 2 ms: when each value was first seen (wall clock)."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self._conn = conn
        self.seen: list[tuple[int, float]] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Watermark:
        self._task = asyncio.create_task(self._poll())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _poll(self) -> None:
        last = -1
        while True:
            wm = int(await self._conn.fetchval(_WATERMARK_SQL) or 0)
            if wm != last:
                self.seen.append((wm, time.time()))
                last = wm
            await asyncio.sleep(WATERMARK_POLL_S)

    def first_at_or_past(self, seq: int) -> float | None:
        for wm, at in self.seen:
            if wm >= seq:
                return at
        return None


def _stored_at(stored: datetime | str) -> float:
    """JetStream's store time of a message (nats-py gives a datetime) as a POSIX time."""
    if isinstance(stored, str):
        stored = datetime.fromisoformat(stored.replace("Z", "+00:00")[:26] + "+00:00")
    return (stored if stored.tzinfo else stored.replace(tzinfo=UTC)).timestamp()


async def lags_ms(nc: Any, stream: str, wm: Watermark, seqs: Sequence[int]) -> list[float]:
    js = nc.jetstream()
    out = []
    for seq in seqs:
        msg = await js.get_msg(stream, seq)
        seen = wm.first_at_or_past(seq)
        if seen is not None and msg.time:
            out.append(max(0.0, (seen - _stored_at(msg.time)) * 1000))
    return out


async def appended_pairs(nc: Any, stream: str, seqs: Sequence[int], run: str) -> list[list[bytes]]:
    """The proposal and decision events the service appended (decision at ``seq``, proposal just
    before it in the same atomic batch), with new event ids for the raw baseline."""
    js = nc.jetstream()
    out = []
    for seq in seqs:
        pair = []
        for s in (seq - 1, seq):
            event = json.loads((await js.get_msg(stream, s)).data)
            event["event_id"] = f"{event['event_id']}-{run}"
            pair.append(msgspec.json.encode(event))
        if not pair[0].startswith(b'{"kind":"memory_proposed"') and b'"memory_proposed"' not in pair[0]:
            raise RuntimeError(f"seq {seq - 1} is not the proposal of decision {seq}")
        out.append(pair)
    return out


async def raw_append(nc: Any, prefix: str, events: Sequence[bytes]) -> int:
    """Append ``events`` atomically straight to the writer (as the memory-policy service does)."""
    body = b'{"events":[' + b",".join(events) + b"]}"
    reply = json.loads((await nc.request(f"{prefix}.writer.append", body, timeout=60)).data)
    if reply.get("error"):
        raise RuntimeError(f"raw append failed: {reply['error']}")
    return max(int(r["seq"]) for r in reply["results"])


# Calls each closed loop of the single-proposal figure completes inside its window at least.
MIN_WINDOW_CALLS = 3


@dataclass
class Call:
    """One propose call: when it ended (monotonic), its latency, its decisions' seqs."""

    ended: float
    ms: float
    seqs: list[int]


async def _propose(client: Client, tenant: str, proposals: list[dict[str, Any]]) -> Call:
    t = time.perf_counter()
    reply = await client.memory_propose(tenant, proposals)
    ms = (time.perf_counter() - t) * 1000
    return Call(time.monotonic(), ms, [d.seq for d in reply.decisions if d.seq])


async def _raw_run(nc: Any, prefix: str, work: list[list[bytes]], workers: int) -> tuple[float, list[float], int]:
    """Append each item of ``work`` (one atomic append each) with ``workers`` closed loops;
    (seconds, latencies ms, highest seq)."""
    queue = list(reversed(work))
    lat: list[float] = []
    top = 0

    async def worker() -> None:
        nonlocal top
        while queue:
            events = queue.pop()
            t = time.perf_counter()
            top = max(top, await raw_append(nc, prefix, events))
            lat.append((time.perf_counter() - t) * 1000)

    t = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(workers)))
    return time.perf_counter() - t, lat, top


async def _catch_up(conn: asyncpg.Connection, seq: int, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while int(await conn.fetchval(_WATERMARK_SQL) or 0) < seq:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the memory projection did not reach seq {seq} in {timeout_s} s")
        await asyncio.sleep(0.02)


@dataclass
class Writes:
    """What the write figures share: the stack, the service process, connections, sizes."""

    stack: Stack
    service: ServiceProcess
    client: Client
    conn: asyncpg.Connection
    poll: asyncpg.Connection
    nc: Any
    sizes: Sizes
    rng: random.Random
    run: str

    async def proposals(self, tenant: str, count: int) -> list[dict[str, Any]]:
        report = await self.client.put_artifact(f"run report of {tenant}".encode(), schema="run-report",
                                                producer="bench", tenant=tenant)
        return [api_proposal(p, self.run, report)
                for p in tenant_proposals(tenant, count, self.rng, datetime.now(UTC))]

    async def raw(self, decision_seqs: Sequence[int]) -> list[list[bytes]]:
        return await appended_pairs(self.nc, self.stack.settings.stream, decision_seqs, f"raw{self.run}")

    async def lags(self, wm: Watermark, seqs: Sequence[int]) -> list[float]:
        return await lags_ms(self.nc, self.stack.settings.stream, wm, seqs)


async def writes_single(w: Writes) -> None:
    """One proposal per call, one closed loop per tenant; the raw baseline with as many loops."""
    sizes, prefix = w.sizes, w.stack.settings.prefix
    tenants = [f"w{i:02d}" for i in range(sizes.write_tenants)]
    # More than a loop can propose in the window (each call takes several ms).
    pools = {t: await w.proposals(t, int(400 * (sizes.write_warmup_s + sizes.write_window_s)) + 10)
             for t in tenants}
    calls: list[Call] = []
    start = time.monotonic()
    t0, t1 = start + sizes.write_warmup_s, start + sizes.write_warmup_s + sizes.write_window_s

    async def loop(tenant: str) -> None:
        done = 0
        for body in pools[tenant]:
            # A window no call ended in measures nothing (a busy machine, a tiny profile): each
            # loop goes on past it until it has MIN_WINDOW_CALLS, and the rate is taken over the
            # span really measured.
            if time.monotonic() >= t1 and done >= MIN_WINDOW_CALLS:
                return
            call = await _propose(w.client, tenant, [body])
            if call.ended >= t0:
                calls.append(call)
                done += 1

    async with Watermark(w.poll) as wm:
        await asyncio.gather(*(loop(t) for t in tenants))
    seqs = sorted(q for c in calls for q in c.seqs)
    lag = await w.lags(wm, seqs)
    work = await w.raw(seqs)
    w.service.pause()
    try:
        raw_s, raw_lat, top = await _raw_run(w.nc, prefix, work, len(tenants))
    finally:
        w.service.resume()
    await _catch_up(w.conn, top)
    window_s = max(sizes.write_window_s, max(c.ended for c in calls) - t0)
    _emit_writes("single", (len(seqs) / window_s, len(work) / raw_s), ([c.ms for c in calls], raw_lat),
                 lag, {"tenants": len(tenants), "proposals_per_call": 1, "window_s": round(window_s, 3),
                       "decisions": len(seqs)})


async def writes_bulk(w: Writes) -> None:
    """Calls of ``bulk_size`` proposals, one at a time, each for a tenant of its own; the raw
    baseline appends each call's events in the service's chunks, one after the other."""
    sizes, s = w.sizes, w.stack.settings
    bodies = [(f"wb{c:02d}", await w.proposals(f"wb{c:02d}", sizes.bulk_size)) for c in range(sizes.bulk_calls)]
    bulk: list[Call] = []
    started = time.perf_counter()
    async with Watermark(w.poll) as wm:
        for tenant, proposals in bodies:
            bulk.append(await _propose(w.client, tenant, proposals))
    bulk_s = time.perf_counter() - started
    per_chunk = max(1, s.max_batch_events // 2)
    chunks: list[list[list[bytes]]] = []
    lag: list[float] = []
    for call in bulk:
        seqs = sorted(call.seqs)
        lag += await w.lags(wm, seqs)
        pairs = await w.raw(seqs)
        chunks.append([[e for pair in pairs[i:i + per_chunk] for e in pair]
                       for i in range(0, len(pairs), per_chunk)])
    decisions = sum(len(c.seqs) for c in bulk)
    raw_ms: list[float] = []
    top = 0
    w.service.pause()
    try:
        for work in chunks:  # one call's chunks in order, as the service sends them
            sec, _, top = await _raw_run(w.nc, s.prefix, work, 1)
            raw_ms.append(sec * 1000)
    finally:
        w.service.resume()
    await _catch_up(w.conn, top)
    _emit_writes("bulk", (decisions / bulk_s, decisions / (sum(raw_ms) / 1000)), ([c.ms for c in bulk], raw_ms),
                 lag, {"tenants": len(bodies), "proposals_per_call": sizes.bulk_size, "calls": len(bulk),
                       "decisions": decisions, "chunk_events": 2 * per_chunk})


def _emit_writes(mode: str, rates: tuple[float, float], latencies: tuple[list[float], list[float]],
                 lag: list[float], ctx: dict[str, Any]) -> None:
    """``rates``: (service, raw) decisions/s; ``latencies``: (service, raw) ms per call."""
    (rate, raw_rate), (ms, raw_ms) = rates, latencies
    lag_ctx = {"lag_p50_ms": round(pct(lag, 0.5), 3) if lag else None,
               "lag_p99_ms": round(pct(lag, 0.99), 3) if lag else None, "lag_samples": len(lag)}
    emit("memory_decisions_per_s", rate, "decisions/s", raw_rate, rate / raw_rate, mode=mode,
         baseline_is="the same proposal+decision events appended straight to the writer, same "
                     "concurrency and chunks, memory-policy paused", **lag_ctx, **ctx)
    for name, q in (("p50", 0.5), ("p99", 0.99)):
        v, b = pct(ms, q), pct(raw_ms, q)
        emit(f"memory_propose_latency_{name}", v, "ms", b, v / b, mode=mode,
             baseline_is="raw append of the same events (per call)", **ctx)

