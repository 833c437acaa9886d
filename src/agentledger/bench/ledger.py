"""Ledger benchmarks: append throughput and latency, rebuild speed, the reducer in process."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec

from agentledger import auth
from agentledger.bench.common import agent_settings, emit, raw_atomic_batches, task_stream, variable_event
from agentledger.client import Client, connect
from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.core.reducer import apply
from agentledger.core.state import new_state
from agentledger.ledger import ledger_subject, msg_id
from agentledger.services.projector import rebuild

APPEND_CLIENTS = 32
APPEND_BATCH = 50
APPEND_EVENTS = 60_000
LATENCY_SAMPLES = 1_000
REBUILD_EVENTS = 200_000
REBUILD_TASKS = 400
REDUCER_EVENTS = 100_000




async def bench_append(s: Settings) -> None:
    """Durable events/s through the writer vs raw atomic batches of 100."""
    nc = await auth.connect(s, auth.WRITER)
    raw = [(ledger_subject(s.prefix, "raw", f"t{i % 100}"),
            msgspec.json.encode(variable_event("raw", f"t{i % 100}", i)),
            msg_id("raw", f"t{i % 100}", f"v{i}")) for i in range(APPEND_EVENTS)]
    baseline = await raw_atomic_batches(nc, raw)
    await nc.close()

    client = await connect(await agent_settings(s, "bench"), timeout=30)
    for per_append in (APPEND_BATCH, 1):
        value = await _clients_append(client, per_append)
        emit("append_throughput" if per_append > 1 else "append_throughput_single", value, "events/s",
             baseline, value / baseline, clients=APPEND_CLIENTS, events_per_append=per_append,
             target=">= 0.8" if per_append > 1 else None)
    await client.close()


async def _clients_append(client: Client, per_append: int) -> float:
    """Events/s of APPEND_CLIENTS concurrent clients, each on its own task, appending
    ``per_append`` events at a time (single events: a tenth of the volume)."""
    per_client = APPEND_EVENTS // APPEND_CLIENTS // (1 if per_append > 1 else 10)
    tag = f"n{per_append}"

    async def one_client(c: int) -> None:
        for b in range(0, per_client, per_append):
            await client.append_batch([variable_event("bench", f"{tag}c{c}", b + j)
                                       for j in range(per_append)])

    start = time.perf_counter()
    await asyncio.gather(*(one_client(c) for c in range(APPEND_CLIENTS)))
    return APPEND_CLIENTS * per_client / (time.perf_counter() - start)


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def bench_latency(s: Settings) -> None:
    """Single append at low load vs a raw sequential durable publish."""
    nc = await auth.connect(s, auth.WRITER)
    js = nc.jetstream()
    raw: list[float] = []
    for i in range(LATENCY_SAMPLES):
        body = msgspec.json.encode(variable_event("lat", "raw", i))
        t = time.perf_counter()
        await js.publish(ledger_subject(s.prefix, "lat", "raw"), body,
                         headers={"Nats-Msg-Id": msg_id("lat", "raw", f"v{i}")})
        raw.append((time.perf_counter() - t) * 1000)
    await nc.close()
    client = await connect(await agent_settings(s, "lat"))
    ours: list[float] = []
    for i in range(LATENCY_SAMPLES):
        event = variable_event("lat", "writer", i)
        t = time.perf_counter()
        await client.append(event)
        ours.append((time.perf_counter() - t) * 1000)
    await client.close()
    for q, name in ((0.5, "p50"), (0.99, "p99")):
        v, b = _pct(ours, q), _pct(raw, q)
        emit(f"append_latency_{name}", v, "ms", b, v / b,
             target="<= 3" if name == "p99" else None)


async def bench_rebuild(s: Settings) -> None:
    """Projector replay of the whole stream vs the raw ordered-consumer read rate."""
    nc = await auth.connect(s, auth.WRITER)
    per_task = REBUILD_EVENTS // REBUILD_TASKS
    items = []
    for t in range(REBUILD_TASKS):
        task = f"r{t}"
        for e in task_stream("rb", task, per_task):
            items.append((ledger_subject(s.prefix, "rb", task), msgspec.json.encode(e),
                          msg_id("rb", task, e["event_id"])))
    await raw_atomic_batches(nc, items)
    js = nc.jetstream()
    info = await js.stream_info(s.stream)
    last = info.state.last_seq
    done = asyncio.Event()
    count = 0

    async def on_msg(msg: Any) -> None:
        nonlocal count
        count += 1
        if msg.metadata.sequence.stream >= last:
            done.set()

    start = time.perf_counter()
    sub = await js.subscribe(f"{s.prefix}.ledger.>", ordered_consumer=True, cb=on_msg)
    await done.wait()
    baseline = count / (time.perf_counter() - start)
    await sub.unsubscribe()
    await nc.close()
    report = await rebuild.rebuild(s, "bench_rebuild")
    value = report.events / report.seconds
    emit("rebuild", value, "events/s", baseline, value / baseline,
         events=report.events, tasks=report.tasks, target=">= 0.3")


def bench_reducer() -> None:
    """Events/s through ``apply`` in process (no I/O), vs decoding alone."""
    decoder = msgspec.json.Decoder(ev.AnyEvent)
    bodies = [msgspec.json.encode(e) for e in task_stream("rd", "t", REDUCER_EVENTS)]
    start = time.perf_counter()
    decoded = [decoder.decode(b) for b in bodies]
    decode_rate = len(bodies) / (time.perf_counter() - start)
    state = new_state("rd", "t")
    start = time.perf_counter()
    for seq, event in enumerate(decoded, 1):
        apply(state, event, seq)
    value = len(decoded) / (time.perf_counter() - start)
    emit("reducer", value, "events/s", decode_rate, value / decode_rate,
         baseline_is="msgspec decode of the same events")


