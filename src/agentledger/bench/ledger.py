"""Ledger benchmarks: rebuild speed, the reducer in process."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import msgspec
import nats.js.errors

from agentledger.bench.common import Stack, emit, raw_atomic_batch, task_stream
from agentledger.contracts import events as ev
from agentledger.core.reducer import fold
from agentledger.core.state import new_state
from agentledger.security import auth
from agentledger.security.sealing import Keyring, kek_of, marker_key_of
from agentledger.security.task_seal import SEALED, open_body, seal_body, slot
from agentledger.services.projector import rebuild
from agentledger.stores.ledger import ensure_stream, ledger_subject, msg_id

PUBLISH_BATCH = 100


async def bench_rebuild(stack: Stack) -> None:
    """Projector rebuild of a whole stream vs a raw ordered-consumer read that decodes JSON.

    The stream is a private one (prefix ``<prefix>rb``) so that the live projector
    does not fold it meanwhile; it is deleted afterwards.
    """
    p = stack.profile
    s = msgspec.structs.replace(stack.settings, prefix=f"{stack.settings.prefix}rb")
    await ensure_stream(s)
    nc = await auth.connect(s, auth.WRITER)
    per_task = p.rebuild_events // p.rebuild_tasks
    # Sealed under task keys as the writer stores them (``security/task_seal.py``): a rebuild
    # opens every body, and so does the baseline.
    marker_key_of(s)  # task keys are wrapped under it, as the writer makes it
    keyring = Keyring(nc, s.keys_bucket, kek_of(s))
    items, headers, keys = [], [], {}
    for t in range(p.rebuild_tasks):
        task = f"r{t}"
        keys[task] = await keyring.key_for("rb", slot(task), create=True)
        for e in task_stream("rb", task, per_task):
            mid = msg_id("rb", task, e["event_id"])
            items.append((ledger_subject(s.prefix, "rb", task),
                          seal_body(keys[task], "rb", task, mid, msgspec.json.encode(e)), mid))
            headers.append({SEALED: keys[task][0]})
    for b in range(0, len(items), PUBLISH_BATCH):
        await raw_atomic_batch(nc, items[b:b + PUBLISH_BATCH], headers[b:b + PUBLISH_BATCH])
    js = nc.jetstream()
    last = (await js.stream_info(s.stream)).state.last_seq
    done = asyncio.Event()
    count = 0

    async def on_msg(msg: Any) -> None:
        nonlocal count
        task = msg.subject.rsplit(".", 1)[-1]
        msgspec.json.decode(open_body(keys[task], "rb", task, msg.headers, msg.data) or b"")
        count += 1
        if msg.metadata.sequence.stream >= last:
            done.set()

    start = time.perf_counter()
    sub = await js.subscribe(f"{s.prefix}.ledger.>", ordered_consumer=True, cb=on_msg)
    await done.wait()
    baseline = count / (time.perf_counter() - start)
    await sub.unsubscribe()
    try:
        report = await rebuild.rebuild(s, "bench_rebuild")
    finally:
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await js.delete_stream(s.stream)
        await nc.close()
    value = report.events / report.seconds
    emit("rebuild", value, "events/s", baseline, value / baseline,
         baseline_is="raw ordered-consumer read + open + JSON decode of the same stream",
         events=report.events, tasks=report.tasks, target=">= 0.7")


def bench_reducer(events: int) -> None:
    """Events/s through the reducer in process (no I/O), vs decoding alone."""
    decoder = msgspec.json.Decoder(ev.AnyEvent)
    bodies = [msgspec.json.encode(e) for e in task_stream("rd", "t", events)]
    start = time.perf_counter()
    decoded = [decoder.decode(b) for b in bodies]
    decode_rate = len(bodies) / (time.perf_counter() - start)
    # `fold` copies the (empty) start state once, then applies every event in place.
    start = time.perf_counter()
    fold(new_state("rd", "t"), zip(decoded, range(1, len(decoded) + 1), strict=True))
    value = len(decoded) / (time.perf_counter() - start)
    emit("reducer", value, "events/s", decode_rate, value / decode_rate,
         baseline_is="msgspec decode of the same events")
