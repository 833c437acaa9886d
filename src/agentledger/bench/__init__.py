"""``agentledger bench``: throughput and latency against baselines measured in the same run.

Every figure is printed as one JSON line ``{"bench", "value", "unit", "baseline",
"ratio"}``. The benchmark starts its own embedded NATS (``sync_interval:
always``) and PostgreSQL in a temporary folder unless AGENTLEDGER_NATS_URL /
AGENTLEDGER_DATABASE_URL name servers, runs the ledger-writer as a separate
process as in production, and sends traffic to 127.0.0.1 only, bounded in
count.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import nats

from agentledger.client import connect
from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.core.reducer import apply
from agentledger.core.state import new_state
from agentledger.core.validate import goal_hash
from agentledger.ledger import ensure_stream, ledger_subject, msg_id
from agentledger.runtime.embedded import EmbeddedNats, EmbeddedPostgres
from agentledger.services.projector import rebuild

APPEND_CLIENTS = 32
APPEND_BATCH = 50
APPEND_EVENTS = 60_000
LATENCY_SAMPLES = 1_000
REBUILD_EVENTS = 200_000
REBUILD_TASKS = 400
REDUCER_EVENTS = 100_000


def emit(bench: str, value: float, unit: str, baseline: float, ratio: float, **extra: Any) -> None:
    line = {"bench": bench, "value": round(value, 3), "unit": unit,
            "baseline": round(baseline, 3), "ratio": round(ratio, 3), **extra}
    print(json.dumps(line), flush=True)


def _now() -> str:
    return datetime.now(UTC).isoformat()


def variable_event(tenant: str, task: str, i: int) -> dict[str, Any]:
    return {"kind": "variable_set", "event_id": f"v{i}", "tenant": tenant, "task_id": task,
            "producer": "bench", "occurred_at": _now(), "schema_version": 1,
            "payload": {"name": f"x{i % 16}", "value": i}}


def task_stream(tenant: str, task: str, n: int) -> list[dict[str, Any]]:
    """A plausible task history of ``n`` events: plan, steps, budget, variables."""
    steps = [{"id": f"S{i}", "depends_on": [f"S{i - 1}"] if i else []} for i in range(8)]
    out: list[dict[str, Any]] = [
        {"kind": "task_created", "payload": {"goal": {"text": "bench", "acceptance_criteria": [],
                                                     "goal_hash": goal_hash("bench", [])},
                                             "budget": {"tokens": 10**12}}},
        {"kind": "plan_versioned", "payload": {"plan_id": "p", "version": 1, "steps": steps}},
    ]
    for i in range(8):
        out.append({"kind": "step_started", "payload": {"plan_version": 1, "step_id": f"S{i}"}})
        out.append({"kind": "step_succeeded", "payload": {"plan_version": 1, "step_id": f"S{i}"}})
    i = 0
    while len(out) < n:
        r = f"r{i}"
        out += [
            {"kind": "budget_reserved", "payload": {"reservation_id": r, "resource": "tokens", "amount": 100}},
            {"kind": "budget_consumed", "payload": {"reservation_id": r, "resource": "tokens", "amount": 60}},
            {"kind": "budget_released", "payload": {"reservation_id": r, "resource": "tokens"}},
            {"kind": "variable_set", "payload": {"name": f"x{i % 16}", "value": i}},
        ]
        i += 1
    return [{**e, "event_id": f"e{j}", "tenant": tenant, "task_id": task, "producer": "bench",
             "occurred_at": _now(), "schema_version": 1} for j, e in enumerate(out[:n])]


async def raw_atomic_batches(nc: Any, subjects_bodies: list[tuple[str, bytes, str]],
                             size: int = 100) -> float:
    """Publish as JetStream atomic batches of ``size``; return events/s."""
    start = time.perf_counter()
    for b in range(0, len(subjects_bodies), size):
        chunk = subjects_bodies[b:b + size]
        bid = uuid.uuid4().hex
        for i, (subject, body, mid) in enumerate(chunk, 1):
            headers = {"Nats-Batch-Id": bid, "Nats-Batch-Sequence": str(i), "Nats-Msg-Id": mid}
            if i == len(chunk):
                headers["Nats-Batch-Commit"] = "1"
                reply = await nc.request(subject, body, headers=headers, timeout=10)
                if b"error" in reply.data:
                    raise RuntimeError(reply.data.decode())
            else:
                await nc.publish(subject, body, headers=headers)
    return len(subjects_bodies) / (time.perf_counter() - start)


@asynccontextmanager
async def bench_stack(settings: Settings) -> AsyncIterator[Settings]:
    """Embedded servers (unless configured) and a ledger-writer process."""
    with tempfile.TemporaryDirectory(prefix="agentledger-bench-") as tmp:
        root = Path(tmp)
        started: list[Any] = []
        nats_url, db_url = settings.nats_url, settings.database_url
        if not nats_url:
            srv = EmbeddedNats(root / "nats")
            srv.start()
            started.append(srv)
            nats_url = srv.url
        if not db_url:
            pg = EmbeddedPostgres(root / "pg")
            pg.start()
            started.append(pg)
            db_url = pg.url
        s = msgspec.structs.replace(settings, nats_url=nats_url, database_url=db_url,
                                    prefix=f"bench{uuid.uuid4().hex[:8]}", data_dir=root)
        await ensure_stream(s)
        env = {**os.environ, "AGENTLEDGER_NATS_URL": nats_url, "AGENTLEDGER_PREFIX": s.prefix,
               "AGENTLEDGER_DATA_DIR": str(root), "AGENTLEDGER_LOG_LEVEL": "warning"}
        writer = subprocess.Popen([sys.executable, "-m", "agentledger.services.ledger_writer"],
                                  env=env)
        try:
            nc = await nats.connect(nats_url)
            for _ in range(300):
                try:
                    await nc.request("$SRV.PING.agentledger-ledger-writer", b"", timeout=0.2)
                    break
                except Exception:  # noqa: BLE001 - not up yet
                    await asyncio.sleep(0.1)
            await nc.close()
            yield s
        finally:
            writer.terminate()
            writer.wait(timeout=20)
            for srv in reversed(started):
                srv.stop()


async def bench_append(s: Settings) -> None:
    """Durable events/s through the writer vs raw atomic batches of 100."""
    nc = await nats.connect(s.nats_url)
    raw = [(ledger_subject(s.prefix, "raw", f"t{i % 100}"),
            msgspec.json.encode(variable_event("raw", f"t{i % 100}", i)),
            msg_id("raw", f"t{i % 100}", f"v{i}")) for i in range(APPEND_EVENTS)]
    baseline = await raw_atomic_batches(nc, raw)
    await nc.close()

    client = await connect(s, timeout=30)
    per_client = APPEND_EVENTS // APPEND_CLIENTS

    async def one_client(c: int) -> None:
        for b in range(0, per_client, APPEND_BATCH):
            await client.append_batch([variable_event("bench", f"c{c}", b + j)
                                       for j in range(APPEND_BATCH)])

    start = time.perf_counter()
    await asyncio.gather(*(one_client(c) for c in range(APPEND_CLIENTS)))
    value = APPEND_CLIENTS * per_client / (time.perf_counter() - start)
    await client.close()
    emit("append_throughput", value, "events/s", baseline, value / baseline,
         clients=APPEND_CLIENTS, events_per_append=APPEND_BATCH, target=">= 0.8")


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def bench_latency(s: Settings) -> None:
    """Single append at low load vs a raw sequential durable publish."""
    nc = await nats.connect(s.nats_url)
    js = nc.jetstream()
    raw: list[float] = []
    for i in range(LATENCY_SAMPLES):
        body = msgspec.json.encode(variable_event("lat", "raw", i))
        t = time.perf_counter()
        await js.publish(ledger_subject(s.prefix, "lat", "raw"), body,
                         headers={"Nats-Msg-Id": msg_id("lat", "raw", f"v{i}")})
        raw.append((time.perf_counter() - t) * 1000)
    await nc.close()
    client = await connect(s)
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
    nc = await nats.connect(s.nats_url)
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


BENCHES: dict[str, Callable[[Settings], Any]] = {
    "append": bench_append,
    "latency": bench_latency,
    "rebuild": bench_rebuild,
}


async def run_all(settings: Settings, only: list[str] | None = None) -> int:
    names = only or [*BENCHES, "reducer"]
    unknown = set(names) - {*BENCHES, "reducer"}
    if unknown:
        print(f"unknown benchmark(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    if "reducer" in names:
        bench_reducer()
    server_benches = [n for n in names if n in BENCHES]
    if server_benches:
        async with bench_stack(settings) as s:
            for name in server_benches:
                print(f"# {name} ...", file=sys.stderr, flush=True)
                await BENCHES[name](s)
    return 0
