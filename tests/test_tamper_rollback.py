"""A Working Memory task put back whole at an older version, every row with its then-valid tag.

The tags alone cannot see this edit (each row was once the projector's own). ``wm.get`` must
still refuse it: the projector compares the row's ledger sequence with what it already applied
or served, and a projector that has not met the task since it started compares it with the
task's last ledger message, which the projection's watermark says was folded.
"""

from __future__ import annotations

import asyncpg
import msgspec

from agentledger.config import Settings
from agentledger.services.projector.service import Projector
from test_projector import TENANT, Ledger, caught_up, event, wm_get
from test_tamper_working_memory import audit_names, seed

TABLES = ("task_state", "task_variables", "task_turns")


async def snapshot(conn: asyncpg.Connection, task: str) -> dict[str, list[asyncpg.Record]]:
    return {t: await conn.fetch(f"SELECT * FROM {t} WHERE tenant = $1 AND task_id = $2", TENANT, task)
            for t in TABLES}


async def put_back(conn: asyncpg.Connection, task: str, rows: dict[str, list[asyncpg.Record]]) -> None:
    """Every row of the task replaced by the saved copy (each row keeps its own old tag)."""
    async with conn.transaction():
        for table in TABLES:
            await conn.execute(f"DELETE FROM {table} WHERE tenant = $1 AND task_id = $2", TENANT, task)
            if rows[table]:
                await conn.copy_records_to_table(table, records=[tuple(r) for r in rows[table]],
                                                 columns=list(rows[table][0].keys()))


async def later_events(settings: Settings, ledger: Ledger) -> None:
    await ledger.publish_all([event("variable_set", "v2", {"name": "note", "value": "revised"}, "t1"),
                              event("turn_appended", "u4", {"role": "user", "ordinal": 4, "content": "turn 4"},
                                    "t1")])
    await caught_up(settings, ledger)


async def moved_on(settings: Settings, ledger: Ledger, conn: asyncpg.Connection) -> dict[str, list[asyncpg.Record]]:
    """t1 and t2 seeded, t1's rows saved, then t1 moved on: the saved copy is the older one."""
    await seed(ledger, settings)
    old = await snapshot(conn, "t1")
    await later_events(settings, ledger)
    return old


async def answer(ledger: Ledger, task: str = "t1") -> tuple[str | None, dict[str, object] | None]:
    reply = await wm_get(ledger, msgspec.json.encode({"tenant": TENANT, "task_id": task}))
    if not reply.ok:
        assert reply.error is not None
        return reply.error.code, None
    assert isinstance(reply.state, dict)
    return None, reply.state


async def test_a_task_rolled_back_whole_is_refused_by_the_projector_that_folded_it(
        settings: Settings, ledger: Ledger) -> None:
    """The projector that committed t1's newer rows refuses the older copy put back."""
    p = Projector(settings)
    await p.start()
    conn = await asyncpg.connect(settings.database_url)
    try:
        old = await moved_on(settings, ledger, conn)
        code, state = await answer(ledger)
        assert code is None and state is not None and state["variables"]["note"]["value"] == "revised"
        await put_back(conn, "t1", old)
        code, _ = await answer(ledger)
        assert code == "integrity_violation", "the older copy of the task was served"
        code, _ = await answer(ledger, "t2")
        assert code is None  # the other task is served
        await audit_names(settings, "t1", "task_state.seq")
    finally:
        await conn.close()
        await p.stop()


async def test_a_task_rolled_back_while_the_projector_was_stopped_is_refused_after_a_start(
        settings: Settings, ledger: Ledger) -> None:
    """A fresh process knows nothing of the task: it reads the task's last ledger message once
    and finds the row behind a message the projection's watermark says it folded."""
    p = Projector(settings)
    await p.start()
    conn = await asyncpg.connect(settings.database_url)
    try:
        old = await moved_on(settings, ledger, conn)
        await p.stop()
        await put_back(conn, "t1", old)
        p = Projector(settings)
        await p.start()
        code, _ = await answer(ledger)
        assert code == "integrity_violation", "the older copy of the task was served after a start"
        code, state = await answer(ledger, "t2")
        assert code is None and state is not None
        code, _ = await answer(ledger)  # and it stays refused (the process now knows the task)
        assert code == "integrity_violation"
    finally:
        await conn.close()
        await p.stop()


async def test_untouched_tasks_read_again_after_a_start_are_served(settings: Settings, ledger: Ledger) -> None:
    """Protects against false alarms: a fresh process's first read of an honest task, and a
    task whose rows moved on since this process last served them."""
    p = Projector(settings)
    await p.start()
    try:
        await seed(ledger, settings)
        assert (await answer(ledger))[0] is None
        await p.stop()
        p = Projector(settings)
        await p.start()
        assert (await answer(ledger))[0] is None
        await later_events(settings, ledger)
        code, state = await answer(ledger)
        assert code is None and state is not None and state["variables"]["note"]["value"] == "revised"
    finally:
        await p.stop()
