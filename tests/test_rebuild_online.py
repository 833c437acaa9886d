"""Replay without downtime, in bounded memory.

``agentledger replay`` builds a new projection beside the live one and switches
to it in one transaction: Working Memory must answer every read throughout,
the projector must keep projecting new appends, and the result must be the
projection a fresh rebuild gives. A rebuild holds at most its memory budget,
spilling to the new projection and reading states back: whatever the budget,
the rows must be the same.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import asyncpg
import msgspec
import pytest

from agentledger.config import Settings
from agentledger.core.state import decode_variable
from agentledger.security.integrity_keys import keys_of
from agentledger.services.projector import rebuild as replay
from agentledger.services.projector.service import Projector
from agentledger.services.projector.store import Position, Store
from agentledger.stores import db
from test_history_free import republish
from test_projector import TENANT, Ledger, caught_up, event, task_script, wm_get

pytest_plugins = ["projection_fixtures"]

# Every row of a projection, in a stable order (``updated_at`` is wall-clock, not content).
ROWS = {
    "task_state": "SELECT tenant, task_id, seq, state, state_hash FROM {s}.task_state ORDER BY 1, 2",
    "task_variables": "SELECT * FROM {s}.task_variables ORDER BY 1, 2, 3",
    "task_turns": "SELECT * FROM {s}.task_turns ORDER BY 1, 2, 3",
    "applied_events": "SELECT * FROM {s}.applied_events ORDER BY 1, 2, 3",
    "rejections": "SELECT * FROM {s}.rejections ORDER BY 1, 2, 3",
    "projector_watermark": "SELECT * FROM {s}.projector_watermark",
}


def history(task: str, n: int) -> list[dict[str, Any]]:
    """A task's script, then ``n`` events: variables set over and over, and turns."""
    out = task_script(task)
    for i in range(n):
        if i % 3:
            out.append(event("variable_set", f"h{i}", {"name": f"var{i % 7}", "value": f"v{i}"}, task))
        else:
            out.append(event("turn_appended", f"u{i}", {"role": "user", "ordinal": i // 3 + 1,
                                                       "content": f"turn {i}"}, task))
    return out


def interleaved(tasks: int, per_task: int) -> list[dict[str, Any]]:
    """Histories of ``tasks`` tasks, interleaved, so every task comes up again and again."""
    scripts = [history(f"k{i}", per_task) for i in range(tasks)]
    return [script[step] for step in range(max(map(len, scripts))) for script in scripts
            if step < len(script)]


async def publish(ledger: Ledger, events: list[dict[str, Any]]) -> None:
    """Publish in order, a window of acks in flight at a time."""
    for start in range(0, len(events), 100):
        await asyncio.gather(*(ledger.js.publish(
            f"{ledger.settings.prefix}.ledger.{e['tenant']}.{e['task_id']}", msgspec.json.encode(e),
            headers={"Nats-Msg-Id": f"{e['tenant']}/{e['task_id']}/{e['event_id']}"})
            for e in events[start:start + 100]))


async def projection_rows(conn: asyncpg.Connection, schema: str) -> dict[str, list[tuple[Any, ...]]]:
    return {table: [tuple(r) for r in await conn.fetch(query.replace("{s}", schema))]
            for table, query in ROWS.items()}


async def live_position(settings: Settings) -> Position:
    conn = await db.connect(settings.database_url)
    try:
        position = await Store().position(conn)
    finally:
        await conn.close()
    assert position is not None
    return position


@pytest.mark.timeout(240)
async def test_working_memory_answers_every_read_throughout_a_replay(
        settings: Settings, ledger: Ledger, projector: Projector) -> None:
    """Protects `agentledger replay` against downtime: while it rebuilds thousands of events of many
    tasks (spilling, with a small budget) beside the live projection and switches to it, every
    wm.get answers ok, every read the checkpointer's way (``Store`` over a pool of prepared
    statements) answers, and appends made meanwhile are projected (read-your-writes). Afterwards
    the projection is a new one, verify passes and it equals a fresh rebuild row for row."""
    tasks = 40
    await publish(ledger, interleaved(tasks, 60))
    await caught_up(settings, ledger, wait_s=60)
    before = await live_position(settings)
    small = msgspec.structs.replace(settings, rebuild_memory_bytes=64 << 10)

    replaying = asyncio.Event()
    stop = asyncio.Event()
    outcomes: collections.Counter[str] = collections.Counter()
    seen: set[int] = set()
    appended: list[int] = []

    async def wm_reader(offset: int) -> None:
        n = offset
        while not stop.is_set():
            n += 1
            body = msgspec.json.encode({"tenant": TENANT, "task_id": f"k{n % tasks}"})
            reply = await wm_get(ledger, body)
            outcomes["ok" if reply.ok else f"wm.get {reply.error.code if reply.error else '?'}"] += 1

    async def store_reader() -> None:
        pool = await db.create_pool(settings.database_url, min_size=2, max_size=2)
        store = Store()
        n = 0
        try:
            while not stop.is_set():
                n += 1
                try:
                    position = await store.position(pool)
                    loaded = await store.load_state(pool, TENANT, f"k{n % tasks}")
                    turns = await store.turns_upto(pool, TENANT, f"k{n % tasks}", 3,
                                                   keys_of(settings).mac_key_of)
                except (asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
                    outcomes[f"store {type(exc).__name__}"] += 1
                    continue
                ok = position is not None and loaded is not None and len(turns) == 3
                outcomes["ok" if ok else "store missing"] += 1
                if position is not None:
                    seen.add(position.projection)
        finally:
            await pool.close()

    async def writer() -> None:
        await replaying.wait()
        n = 0
        while not stop.is_set():
            n += 1
            seq = await ledger.publish(event("variable_set", f"w{n}", {"name": "live", "value": n},
                                             task=f"k{n % tasks}"))
            body = msgspec.json.encode({"tenant": TENANT, "task_id": f"k{n % tasks}",
                                        "min_seq": seq, "wait_ms": 10_000})
            reply = await wm_get(ledger, body)
            outcomes["ok" if reply.ok and (reply.seq or 0) >= seq else f"append {reply.error}"] += 1
            appended.append(seq)

    readers = [asyncio.create_task(wm_reader(i)) for i in range(3)]
    readers += [asyncio.create_task(store_reader()), asyncio.create_task(writer())]
    try:
        replaying.set()
        report = await replay.replace_live(small)
    finally:
        stop.set()
        await asyncio.gather(*readers)

    assert set(outcomes) == {"ok"}, outcomes
    assert outcomes["ok"] > 100
    assert appended, "no append was made during the replay"
    assert report.spills > 1 and report.reloads > 0, report
    after = await live_position(settings)
    assert after.projection != before.projection
    assert {before.projection, after.projection} <= seen

    await caught_up(settings, ledger, wait_s=60)
    verified = await replay.verify(settings, wait_s=30)
    assert verified.ok, verified.summary()
    fresh = await replay.rebuild(settings, "rebuild_fresh")
    conn = await db.connect(settings.database_url)
    try:
        assert await projection_rows(conn, "public") == await projection_rows(conn, "rebuild_fresh")
        assert await conn.fetchval("SELECT count(*) FROM pg_namespace WHERE nspname = $1",
                                   replay.REBUILD_SCHEMA) == 0
    finally:
        await conn.close()
    assert fresh.tasks == tasks


async def test_a_tiny_budget_spills_and_reads_back_to_the_same_projection(
        settings: Settings, ledger: Ledger) -> None:
    """Protects the bounded fold: a rebuild with a tiny memory budget spills many times and reads
    states back, never holding much more than the budget by its own count, and writes exactly the
    rows of a rebuild that holds everything (states, variables, turns, the applied-event index with
    event ids repeated after a spill as duplicates, rejections, the watermark)."""
    tasks, budget = 30, 32 << 10
    events = interleaved(tasks, 40)
    await publish(ledger, events)
    # Past the dedupe window: every task's early ids stored again, long after their first time.
    for i in range(tasks):
        script = task_script(f"k{i}")
        await republish(ledger, {**script[4], "payload": {"name": "note", "value": "changed"}}, "-late")
        await republish(ledger, script[2], "-late")

    big = await replay.rebuild(settings, "rebuild_big")
    tiny = await replay.rebuild(msgspec.structs.replace(settings, rebuild_memory_bytes=budget),
                                "rebuild_tiny")
    assert big.spills == 1 and big.peak_bytes > 10 * budget
    assert tiny.spills > 10 and tiny.reloads > tasks, tiny
    # Over the budget by at most the message that crossed it.
    largest = max(len(msgspec.json.encode(e)) for e in events) + replay.EVENT_OVERHEAD
    assert budget < tiny.peak_bytes <= budget + largest, tiny
    assert (tiny.events, tiny.tasks, tiny.last_seq, tiny.rejections) == \
        (big.events, big.tasks, big.last_seq, big.rejections) == \
        (len(events) + 2 * tasks, tasks, len(events) + 2 * tasks, tasks)
    conn = await db.connect(settings.database_url)
    try:
        assert await projection_rows(conn, "rebuild_tiny") == await projection_rows(conn, "rebuild_big")
        # The repeats were duplicates: no index entry of their own, the first value kept.
        assert await conn.fetchval("SELECT count(*) FROM rebuild_tiny.applied_events") == len(events)
        notes = await conn.fetch("SELECT value FROM rebuild_tiny.task_variables WHERE name = 'note'")
        assert [decode_variable(r[0]).value for r in notes] == ["hello"] * tasks
    finally:
        await conn.close()


async def test_a_damaged_row_is_never_folded_on_and_a_replay_repairs_it(
        settings: Settings, ledger: Ledger) -> None:
    """Protects the projection from laundering an edit: the projector refuses to read a damaged
    row back (it fails its integrity tag), so it never folds on from it and re-tags it as its
    own; ``replay`` rebuilds the task from the ledger, and the projector, seeing another
    watermark table, drops its cache and carries on from the repaired projection."""
    await publish(ledger, interleaved(3, 5))
    first = Projector(settings)
    await first.start()
    await caught_up(settings, ledger)
    await first.stop()
    conn = await db.connect(settings.database_url)
    try:
        await conn.execute("UPDATE task_state SET state_hash = 'damaged', state = convert_to(replace("
                           "convert_from(state, 'UTF8'), 'ship it', 'shop it'), 'UTF8')"
                           " WHERE task_id = 'k1'")
    finally:
        await conn.close()
    projector = Projector(settings)
    await projector.start()
    try:
        # The projector must read the damaged row back to fold this event: it refuses to.
        wm = await ledger.publish(event("variable_set", "x1", {"name": "x", "value": 1}, task="k1"))
        report = await replay.replace_live(settings)
        assert report.last_seq == wm
        await ledger.publish(event("variable_set", "x2", {"name": "x", "value": 2}, task="k1"))
        await caught_up(settings, ledger)
        verified = await replay.verify(settings, wait_s=30)
        assert verified.ok, verified.summary()
    finally:
        await projector.stop()
