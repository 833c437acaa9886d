"""The projector against real NATS JetStream and PostgreSQL.

Ledger messages are published straight to the stream (the ledger-writer is
not under test here). The projector must turn them into the right Working
Memory rows, notify, answer reads, survive redelivery without applying
anything twice and never wedge on a message it cannot decode.
"""

from __future__ import annotations

from typing import Any

import asyncpg
import msgspec
import pytest
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from agentledger.client import connect
from agentledger.config import Settings
from agentledger.contracts.api import TaskChanged, WorkingMemoryReply
from agentledger.core.state import WorkingMemory, decode_state, view
from agentledger.core.validate import goal_hash
from agentledger.errors import NotFoundError, UnavailableError
from agentledger.services.ledger_writer.service import LedgerWriter
from agentledger.services.projector.lane import OutOfOrderError
from agentledger.services.projector.service import DURABLE, Projector
from agentledger.services.projector.store import Store
from agentledger.stores.ledger import MSG_ID, ledger_subject, ledger_wildcard, msg_id
from helpers import assert_eventually
from projection_support import project_once
from raw_ledger import Ledger

pytest_plugins = ["projection_fixtures"]

TENANT = "acme"
PROJECTION_TABLES = ("task_state", "task_variables", "task_turns", "applied_events", "rejections")


# ---- helpers shared with test_replay ---------------------------------------------

def event(kind: str, event_id: str, payload: dict[str, Any], task: str = "t1",
          tenant: str = TENANT) -> dict[str, Any]:
    return {"kind": kind, "event_id": event_id, "tenant": tenant, "task_id": task,
            "producer": "test", "occurred_at": "2026-11-29T10:00:00Z", "schema_version": 1,
            "payload": payload}


def task_script(task: str, tenant: str = TENANT) -> list[dict[str, Any]]:
    """A short task history: create, plan A -> B -> C, finish A, a variable, a refused start of C."""
    goal = {"text": "ship it", "acceptance_criteria": ["works"],
            "goal_hash": goal_hash("ship it", ["works"])}
    steps = [{"id": "A"}, {"id": "B", "depends_on": ["A"]}, {"id": "C", "depends_on": ["B"]}]
    return [
        event("task_created", "c1", {"goal": goal, "budget": {"tokens": 1000}}, task, tenant),
        event("plan_versioned", "p1", {"plan_id": "p", "version": 1, "steps": steps}, task, tenant),
        event("step_started", "s1", {"plan_version": 1, "step_id": "A"}, task, tenant),
        event("step_succeeded", "s2", {"plan_version": 1, "step_id": "A",
                                       "outputs": [{"name": "answer", "value": 42}]}, task, tenant),
        event("variable_set", "v1", {"name": "note", "value": "hello"}, task, tenant),
        # Refused by the reducer: C depends on B, which has not succeeded.
        event("step_started", "s3", {"plan_version": 1, "step_id": "C"}, task, tenant),
    ]


async def watermark(settings: Settings) -> int | None:
    conn = await asyncpg.connect(settings.database_url)
    try:
        return await conn.fetchval("SELECT seq FROM projector_watermark WHERE name = 'projector'")
    except asyncpg.UndefinedTableError:
        return None
    finally:
        await conn.close()


async def task_rows(settings: Settings) -> dict[tuple[str, str], asyncpg.Record]:
    conn = await asyncpg.connect(settings.database_url)
    try:
        rows = await conn.fetch("SELECT tenant, task_id, seq, state, state_hash, updated_at FROM task_state")
    finally:
        await conn.close()
    return {(r["tenant"], r["task_id"]): r for r in rows}


async def projected_state(settings: Settings, task: str, tenant: str = TENANT) -> WorkingMemory:
    """A task's state as the projection holds it: its core row with its variable rows."""
    conn = await asyncpg.connect(settings.database_url)
    try:
        loaded = await Store().load_state(conn, tenant, task)
    finally:
        await conn.close()
    assert loaded is not None, f"no row of {tenant}/{task}"
    return loaded.state


async def caught_up(settings: Settings, ledger: Ledger, wait_s: float = 30.0) -> int:
    """Wait until the projection's watermark reaches the stream's last sequence."""
    last = await ledger.last_seq()

    async def reached() -> bool:
        wm = await watermark(settings)
        return wm is not None and wm >= last

    await assert_eventually(reached, timeout=wait_s, message=f"watermark never reached {last}")
    return last


async def wm_get(ledger: Ledger, body: bytes) -> WorkingMemoryReply:
    msg = await ledger.nc.request(f"{ledger.settings.prefix}.wm.get", body, timeout=10)
    return msgspec.json.decode(msg.data, type=WorkingMemoryReply)


# ---- tests ----------------------------------------------------------------------------

async def test_events_become_working_memory_rows_and_notifications(
        settings: Settings, ledger: Ledger, projector: Projector) -> None:
    """Protects the basic projection: events -> the task row's view (done set, next_ready), a
    rejection row for the refused event, and one TaskChanged carrying the committed seq and hash."""
    changes: list[TaskChanged] = []

    async def on_change(msg: Any) -> None:
        changes.append(msgspec.json.decode(msg.data, type=TaskChanged))

    await ledger.nc.subscribe(f"{settings.prefix}.wm.changed.>", cb=on_change)
    await ledger.nc.flush()
    last = await ledger.publish_all(task_script("t1"))
    await caught_up(settings, ledger)

    row = (await task_rows(settings))[(TENANT, "t1")]
    assert row["seq"] == last
    v = view(await projected_state(settings, "t1"), [])
    assert v["status"] == "open"
    assert v["done"] == ["A"]
    assert v["next_ready"] == ["B"]
    assert v["variables"]["answer"]["value"] == 42
    assert [r["code"] for r in v["rejections"]] == ["dependencies_not_done"]
    conn = await asyncpg.connect(settings.database_url)
    try:
        rejections = await conn.fetch("SELECT tenant, task_id, seq, event_id, kind, code FROM rejections")
    finally:
        await conn.close()
    assert [tuple(r) for r in rejections] == [(TENANT, "t1", last, "s3", "step_started",
                                               "dependencies_not_done")]

    def notified() -> bool:
        return any(c.seq == last for c in changes)

    await assert_eventually(notified, message="no TaskChanged for the last seq")
    final = next(c for c in changes if c.seq == last)
    assert (final.tenant, final.task_id, final.state_hash) == (TENANT, "t1", row["state_hash"])
    assert all(c.task_id == "t1" for c in changes)


async def test_read_endpoint_returns_view_not_found_and_typed_errors(
        settings: Settings, ledger: Ledger, projector: Projector) -> None:
    """Protects the wm.get contract: the view with its seq, not_found for an unknown task, and a
    typed error (code and path) for a malformed or invalid TaskRef."""
    last = await ledger.publish_all(task_script("t1"))
    await caught_up(settings, ledger)

    ok = await wm_get(ledger, b'{"tenant": "acme", "task_id": "t1"}')
    assert ok.ok and ok.error is None
    assert ok.seq == last
    assert ok.state["task_id"] == "t1"
    assert ok.state["done"] == ["A"]
    assert ok.state["next_ready"] == ["B"]
    # Nothing personal in this task: revealing changes nothing and needs no key.
    revealed = await wm_get(ledger, b'{"tenant": "acme", "task_id": "t1", "reveal_personal": true}')
    assert revealed.ok and revealed.state == ok.state

    missing = await wm_get(ledger, b'{"tenant": "acme", "task_id": "nope"}')
    assert not missing.ok and missing.error is not None
    assert missing.error.code == "not_found"

    for body, code, path in [
        (b'{"tenant": "acme"', "malformed_json", "$"),
        (b'{"tenant": "acme"}', "missing_field", "$.task_id"),
        (b'{"tenant": "ac.me", "task_id": "t1"}', "invalid_token", "$.tenant"),
        (b'{"tenant": "acme", "task_id": "t1", "extra": 1}', "unknown_field", "$.extra"),
    ]:
        bad = await wm_get(ledger, body)
        assert not bad.ok and bad.error is not None, body
        assert (bad.error.code, bad.error.path) == (code, path), body


async def test_redelivery_after_crash_between_commit_and_ack_applies_nothing_twice(
        settings: Settings, ledger: Ledger) -> None:
    """Protects exactly-once projection: when the consumer re-delivers everything (as after a crash
    between the PostgreSQL commit and the ack), the projector skips what the watermark covers:
    rows are not rewritten, no notification is sent for them, and new events still apply."""
    for task in ("t1", "t2", "t3"):
        await ledger.publish_all(task_script(task))
    first = Projector(settings)
    await first.start()
    try:
        last = await caught_up(settings, ledger)
    finally:
        await first.stop()
    before = await task_rows(settings)

    # Simulate the lost acks: the durable consumer starts over at sequence 1 (in the shape the
    # projector makes, one replica in memory, so it is kept rather than recreated).
    js = ledger.js
    await js.delete_consumer(settings.stream, DURABLE)
    await js.add_consumer(settings.stream, ConsumerConfig(
        name=DURABLE, durable_name=DURABLE, filter_subject=ledger_wildcard(settings.prefix),
        ack_policy=AckPolicy.ALL, deliver_policy=DeliverPolicy.ALL, ack_wait=60,
        num_replicas=1, mem_storage=True))

    changes: list[TaskChanged] = []

    async def on_change(msg: Any) -> None:
        changes.append(msgspec.json.decode(msg.data, type=TaskChanged))

    await ledger.nc.subscribe(f"{settings.prefix}.wm.changed.>", cb=on_change)
    await ledger.nc.flush()
    second = Projector(settings)
    await second.start()
    try:
        new_seq = await ledger.publish(event("variable_set", "v2", {"name": "late", "value": 1}, "t4"))
        await caught_up(settings, ledger)
        info = await js.consumer_info(settings.stream, DURABLE)
        # The consumer really re-delivered the old messages (they were skipped, not avoided).
        assert info.delivered.consumer_seq >= last + 1
        assert info.ack_floor.stream_seq == new_seq
    finally:
        await second.stop()

    after = await task_rows(settings)
    for key, row in before.items():
        assert after[key]["state_hash"] == row["state_hash"], key
        assert after[key]["seq"] == row["seq"], key
        assert after[key]["updated_at"] == row["updated_at"], f"{key} was rewritten"
    assert set(after) == {*before, (TENANT, "t4")}
    state = decode_state(after[(TENANT, "t1")]["state"])
    assert state.events_applied == len(task_script("t1"))
    assert [c.task_id for c in changes] == ["t4"]


async def test_consumer_ahead_of_the_projection_is_moved_back(
        settings: Settings, ledger: Ledger) -> None:
    """Protects "PostgreSQL is the truth": when the consumer's ack floor is past the watermark
    (the projection was restored to an older point behind its back), the projector re-reads from
    watermark + 1 instead of trusting the consumer, so nothing in between is lost."""
    await ledger.publish_all(task_script("t1"))
    p = Projector(settings)
    await p.start()
    try:
        old_wm = await caught_up(settings, ledger)
        conn = await asyncpg.connect(settings.database_url)
        try:
            snapshot = {table: await conn.fetch(f"SELECT * FROM {table}") for table in PROJECTION_TABLES}
        finally:
            await conn.close()
        await ledger.publish_all(task_script("t2"))
        await caught_up(settings, ledger)
    finally:
        await p.stop()
    info = await ledger.js.consumer_info(settings.stream, DURABLE)
    assert info.ack_floor.stream_seq > old_wm

    # Restore the projection as it was at old_wm (a restored backup, say).
    conn = await asyncpg.connect(settings.database_url)
    try:
        async with conn.transaction():
            await conn.execute(f"TRUNCATE {', '.join(PROJECTION_TABLES)}")
            for table, rows in snapshot.items():
                await conn.copy_records_to_table(table, records=[tuple(r) for r in rows])
            await conn.execute("UPDATE projector_watermark SET seq = $1", old_wm)
    finally:
        await conn.close()
    assert set(await task_rows(settings)) == {(TENANT, "t1")}

    await project_once(settings, ledger)
    rows = await task_rows(settings)
    assert set(rows) == {(TENANT, "t1"), (TENANT, "t2")}
    assert decode_state(rows[(TENANT, "t2")]["state"]).status == "open"
    assert decode_state(rows[(TENANT, "t2")]["state"]).events_applied == len(task_script("t2"))


async def test_undecodable_message_is_recorded_and_does_not_wedge(
        settings: Settings, ledger: Ledger, projector: Projector) -> None:
    """Protects liveness: a body that is not a valid event becomes an `undecodable` rejection row
    (tenant and task from the subject) and the events after it are projected."""
    await ledger.publish(task_script("t1")[0])
    bad_seq = (await ledger.js.publish(ledger_subject(settings.prefix, TENANT, "t1"), b'{"kind": "nope"}',
                                       headers={MSG_ID: msg_id(TENANT, "t1", "bad1")})).seq
    await ledger.publish(event("variable_set", "v9", {"name": "after", "value": True}))
    await caught_up(settings, ledger)
    conn = await asyncpg.connect(settings.database_url)
    try:
        rows = await conn.fetch("SELECT tenant, task_id, seq, event_id, code FROM rejections")
    finally:
        await conn.close()
    assert [tuple(r) for r in rows] == [(TENANT, "t1", bad_seq, "bad1", "undecodable")]
    state = await projected_state(settings, "t1")
    assert state.variables["after"].value is True


async def test_many_tasks_in_large_batches(settings: Settings, ledger: Ledger,
                                           projector: Projector) -> None:
    """Protects batching: events of many interleaved tasks, more than one batch's worth, all land,
    each task's row carrying the sequence of its own last event."""
    scripts = {f"m{i}": task_script(f"m{i}") for i in range(150)}
    last_of: dict[str, int] = {}
    for step in range(len(task_script("x"))):
        for task, script in scripts.items():
            last_of[task] = await ledger.publish(script[step])
    await caught_up(settings, ledger)
    rows = await task_rows(settings)
    assert {k[1]: r["seq"] for k, r in rows.items()} == last_of
    hashes = {r["state_hash"] for r in rows.values()}
    assert len(hashes) == len(scripts)  # tenant/task ids differ, so every state differs


async def test_gap_check_tells_a_skipped_message_from_a_deleted_one(
        settings: Settings, ledger: Ledger, projector: Projector) -> None:
    """Protects against silent loss: a batch that starts past a message still in the stream is
    refused (the consumer would have skipped it), while a gap left by a deleted message is fine."""
    await ledger.publish_all(task_script("t1"))  # seqs 1..6
    await projector.lanes[0]._check_contiguous(1, [2, 3, 4])
    with pytest.raises(OutOfOrderError):
        await projector.lanes[0]._check_contiguous(1, [3, 4])
    with pytest.raises(OutOfOrderError):
        await projector.lanes[0]._check_contiguous(1, [2, 3, 5])
    await ledger.nc.jsm().delete_msg(settings.stream, 4)
    await projector.lanes[0]._check_contiguous(1, [2, 3, 5, 6])


async def test_failed_transactions_are_retried_from_the_watermark(
        settings: Settings, ledger: Ledger, projector: Projector) -> None:
    """Protects recovery: while PostgreSQL refuses the projector's writes, nothing is committed or
    acked; once writes work again the projector resumes from its watermark and nothing is lost."""
    await ledger.publish_all(task_script("t1"))
    await caught_up(settings, ledger)
    conn = await asyncpg.connect(settings.database_url)
    try:
        async def rollbacks() -> int:
            return int(await conn.fetchval(
                "SELECT xact_rollback FROM pg_stat_database WHERE datname = current_database()"))

        await conn.execute("ALTER TABLE task_state ADD CONSTRAINT refuse CHECK (seq < 0) NOT VALID")
        start = await rollbacks()
        wm = await watermark(settings)
        await ledger.publish_all(task_script("t2"))

        async def refused_twice() -> bool:
            await conn.execute("SELECT pg_stat_clear_snapshot()")
            return await rollbacks() >= start + 2

        await assert_eventually(refused_twice, timeout=30)
        assert await watermark(settings) == wm
        await conn.execute("ALTER TABLE task_state DROP CONSTRAINT refuse")
    finally:
        await conn.close()
    await caught_up(settings, ledger)
    rows = await task_rows(settings)
    assert set(rows) == {(TENANT, "t1"), (TENANT, "t2")}
    assert decode_state(rows[(TENANT, "t2")]["state"]).events_applied == len(task_script("t2"))
    assert not projector._failed.done()


async def test_personal_values_are_revealed_only_on_request(settings: Settings) -> None:
    """Through the writer, a turn is sealed in the projection; wm.get opens it only when asked,
    and a destroyed subject key leaves it marked erased instead of readable."""
    writer = LedgerWriter(settings)
    await writer.start()
    projector = Projector(settings)
    await projector.start()
    client = await connect(settings)
    try:
        base = {"tenant": TENANT, "task_id": "chat", "producer": "ui", "schema_version": 1,
                "occurred_at": "2026-11-29T10:00:00Z", "data_subject": "subj-1"}
        goal = {"text": "g", "acceptance_criteria": [], "goal_hash": goal_hash("g", [])}
        last = (await client.append_batch([
            {**base, "kind": "task_created", "event_id": "c", "payload": {"goal": goal}},
            {**base, "kind": "turn_appended", "event_id": "t1",
             "payload": {"role": "user", "ordinal": 1, "content": "my address is 3 rue X"}},
            {**base, "kind": "variable_set", "event_id": "v1",
             "payload": {"name": "phone", "value": "+33 6 00", "personal": True}},
        ]))[-1]

        async def caught() -> Any:
            try:
                wm = await client.working_memory(TENANT, "chat")
            except (NotFoundError, UnavailableError):  # not projected yet
                return None
            return wm if wm.seq >= last.seq else None

        sealed = await assert_eventually(caught)
        assert sealed.state["transcript"][0]["content"] is None
        assert sealed.state["transcript"][0]["sealed"]["subject"] == "subj-1"
        opened = await client.working_memory(TENANT, "chat", reveal_personal=True)
        assert opened.state["transcript"][0]["content"] == "my address is 3 rue X"
        assert opened.state["variables"]["phone"]["value"] == "+33 6 00"
        kv = await client.nc.jetstream().key_value(settings.keys_bucket)
        await kv.purge(f"{TENANT}.subj-1")  # keys are per (tenant, subject)
        await projector.stop()  # a reader that has not cached the key
        projector = Projector(settings)
        await projector.start()
        reply = await client.working_memory(TENANT, "chat", reveal_personal=True)
        turn = reply.state["transcript"][0]
        assert (turn["content"], turn["erased"]) == (None, True)
    finally:
        await client.close()
        await projector.stop()
        await writer.stop()
