"""State that does not carry its history, against real NATS and PostgreSQL.

The task row holds the current state only; the ids of consumed events live in the
``applied_events`` index, variables and turns in rows of their own. These tests
pin what that must not change (a repeated event id is a duplicate long after
JetStream's dedupe window, live, in a rebuild and in a resume; reads return the
same view) and what it is for (the core row does not grow with history; a batch
writes only the rows it changed; a reader can ask for the transcript's tail).
"""

from __future__ import annotations

from typing import Any

import asyncpg
import msgspec
import pytest

from agentledger.client import connect
from agentledger.config import Settings
from agentledger.contracts.codec import decode_event, encode
from agentledger.core import checkpoint as cp_mod
from agentledger.core import ledger_chain
from agentledger.core.reducer import fold
from agentledger.core.state import Changes, encode_state, new_state, view
from agentledger.security.integrity_keys import keys_of
from agentledger.services.projector import rebuild as replay
from agentledger.services.projector.service import Projector
from agentledger.services.projector.store import REFUSED, Store
from agentledger.stores.db import WATERMARK_NAME
from agentledger.stores.ledger import MSG_ID, ledger_subject, msg_id
from ckpt_support import TENANT as CK_TENANT
from ckpt_support import created, running, variable
from ckpt_support import event as ck_event
from raw_ledger import Ledger
from test_projector import TENANT, caught_up, event, projected_state, task_script, wm_get

pytest_plugins = ["projection_fixtures"]


async def republish(ledger: Ledger, ev: dict[str, Any], tag: str) -> int:
    """Store ``ev`` again under a message id JetStream has not seen: what a retry after the dedupe
    window does (the event id inside is the same). Linked into its task's chain as the writer
    links every message (an unchained message in a chained task is refused as a forgery); left
    unchained in a task published raw, unchained (events written before chaining)."""
    tenant, task = ev["tenant"], ev["task_id"]
    subject = ledger_subject(ledger.settings.prefix, tenant, task)
    last = await ledger.js.get_msg(ledger.settings.stream, subject=subject)
    keys = keys_of(ledger.settings)
    head = ledger_chain.own_head(keys.mac_key_of, tenant=tenant, task=task, seq=int(last.seq or 0),
                                 body=last.data or b"", headers=last.headers)
    body = encode(ev)
    headers = {MSG_ID: msg_id(tenant, task, ev["event_id"]) + tag}
    if head is not None:
        headers[ledger_chain.CHAIN] = ledger_chain.link(keys.current, keys.mac_key, head, tenant=tenant, task=task,
                                                        body=body, headers=headers)[0]
    ack = await ledger.js.publish(subject, body, headers=headers)
    return int(ack.seq)


async def fetch(settings: Settings, query: str, *args: Any) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(settings.database_url)
    try:
        return await conn.fetch(query, *args)
    finally:
        await conn.close()


def turns(task: str, n: int, first: int = 1) -> list[dict[str, Any]]:
    return [event("turn_appended", f"u{i}", {"role": "user", "ordinal": i, "content": f"turn {i} " + "x" * 40},
                  task) for i in range(first, first + n)]


def history(task: str, n: int) -> list[dict[str, Any]]:
    """``n`` events after the task's head: 20 variables set over and over, and turns."""
    out: list[dict[str, Any]] = []
    for i in range(n):
        if i % 2:
            out.extend(turns(task, 1, first=i // 2 + 1))
        else:
            out.append(event("variable_set", f"h{i}", {"name": f"var{i % 20}", "value": f"value {i}"}, task))
    return out


def turn(task: str, ordinal: int) -> dict[str, Any]:
    """A turn as the writer takes it (personal content, so with a data subject)."""
    return {**ck_event("turn_appended", {"role": "user", "ordinal": ordinal, "content": f"turn {ordinal}"},
                       task), "data_subject": "subj-1"}


# ---- idempotency past the dedupe window -----------------------------------------------------

async def test_a_repeated_event_id_is_a_duplicate_live_and_in_a_rebuild(
        settings: Settings, ledger: Ledger, projector: Projector) -> None:
    """Protects idempotency without ids in the state: an event id stored again (other message id,
    other content, as past the dedupe window) is a no-op live, whether it arrives in a later batch
    or in the same batch as its first occurrence, and a rebuild agrees row for row."""
    script = task_script("t1")
    await ledger.publish_all(script)
    await caught_up(settings, ledger)
    retry = {**script[4], "payload": {"name": "note", "value": "changed"}}  # the event id v1 again
    late = await republish(ledger, retry, "-late")
    await caught_up(settings, ledger)
    # t2: the first occurrence and its repeat reach the projector in one batch.
    await projector.stop()
    script2 = task_script("t2")
    await ledger.publish_all(script2)
    await republish(ledger, {**script2[4], "payload": {"name": "note", "value": "changed"}}, "-late")
    again = Projector(settings)
    await again.start()
    try:
        await caught_up(settings, ledger)
        for task in ("t1", "t2"):
            state = await projected_state(settings, task)
            assert state.variables["note"].value == "hello", task
            assert state.events_applied == len(script), task
        assert (await projected_state(settings, "t1")).watermark == late
        index = await fetch(settings, "SELECT task_id, seq FROM applied_events WHERE event_id = 'v1'"
                                      " ORDER BY task_id")
        assert [r["task_id"] for r in index] == ["t1", "t2"]
        assert index[0]["seq"] == 5  # the first occurrence, never the repeat
        report = await replay.verify(settings, wait_s=30)
        assert report.ok, report.summary()
    finally:
        await again.stop()


async def test_the_one_statement_batch_keeps_nothing_when_a_guard_fails(
        settings: Settings, ledger: Ledger, projector: Projector) -> None:
    """Protects the projector's one-round-trip batch: it is written only where the watermark is
    the one the lane committed last, in the projection it knows, and every id it claims is new.
    A failed guard leaves the watermark, the rows and the id index as they were (the lane then
    takes the long way); held guards write it all."""
    script = task_script("t1")
    await ledger.publish_all(script)
    await caught_up(settings, ledger)
    await projector.stop()
    store = Store()
    conn = await asyncpg.connect(settings.database_url)
    try:
        pos = await store.position(conn)
        assert pos is not None
        tables = "SELECT tenant, task_id, seq, state FROM task_state ORDER BY task_id"
        before = await conn.fetch(tables)
        new_id = (TENANT, "t9", "fresh-id", pos.seq + 1)
        old_id = (TENANT, "t1", script[0]["event_id"], pos.seq + 1)

        async def write(expected: int, projection: int, claims: list[tuple[str, str, str, int]]) -> None:
            await store.write_batch(conn, name=WATERMARK_NAME, expected=expected, projection=projection,
                                    watermark=pos.seq + 1, claims=claims,
                                    tasks=[(TENANT, "t9", pos.seq + 1, b"{}", "h", "1:" + "0" * 64)],
                                    variables=[(TENANT, "t9", "x", pos.seq + 1, b"1")], turns=[],
                                    rejections=[])

        for expected, projection, claims in ((pos.seq - 1, pos.projection, [new_id]),
                                             (pos.seq, pos.projection + 1, [new_id]),
                                             (pos.seq, pos.projection, [new_id, old_id])):
            with pytest.raises(asyncpg.PostgresError) as refused:
                await write(expected, projection, claims)
            assert refused.value.sqlstate == REFUSED, refused.value
            assert await store.position(conn) == pos
            assert await conn.fetch(tables) == before
            assert not await conn.fetch("SELECT 1 FROM applied_events WHERE event_id = 'fresh-id'")
            assert not await conn.fetch("SELECT 1 FROM task_variables WHERE task_id = 't9'")
        await write(pos.seq, pos.projection, [new_id])
        assert await store.position(conn) == (pos.seq + 1, pos.projection)
        assert [r["task_id"] for r in await conn.fetch(tables)] == ["t1", "t9"]
        assert await conn.fetchval("SELECT seq FROM applied_events WHERE event_id = 'fresh-id'") == pos.seq + 1
    finally:
        await conn.close()


async def test_a_repeated_event_id_after_the_checkpoint_is_a_duplicate_in_resume(
        settings: Settings, ledger: Ledger) -> None:
    """Protects resume agreeing with the live projection: the checkpoint holds no event ids, yet
    an id consumed before the checkpoint and stored again after it is a duplicate in the replay
    (the projection's index says so), and so is a repeat of an id first seen in the replay; the
    resumed state, transcript included, is the live view at the same sequence."""
    async with running(settings) as stack:
        task = "r1"
        head = [created(task), variable(task, "note", "hello", event_id="n1"), turn(task, 1)]
        await stack.append(head)
        saved = await stack.c.save_checkpoint(CK_TENANT, task)
        assert saved.ok
        after = variable(task, "later", 1, event_id="n2")
        await stack.append([after, turn(task, 2)])
        await republish(ledger, {**head[1], "payload": {"name": "note", "value": "changed"}}, "-late")
        await republish(ledger, {**after, "payload": {"name": "later", "value": 2}}, "-late")
        reply = await stack.c.resume(CK_TENANT, task, "exec-1")
        assert reply.status == "resumable", reply.reasons
        assert reply.checkpoint_id == saved.checkpoint_id
        state = reply.state
        assert state["variables"]["note"]["value"] == "hello"
        assert state["variables"]["later"]["value"] == 1
        assert [t["ordinal"] for t in state["transcript"]] == [1, 2]
        live = await stack.c.working_memory(CK_TENANT, task, min_seq=reply.watermark)
        assert live.seq == reply.watermark
        assert state == live.state


# ---- the row does not grow with history, a batch writes what changed ---------------------------

async def test_the_core_row_does_not_grow_with_history(settings: Settings, ledger: Ledger,
                                                     projector: Projector) -> None:
    """Protects the point of the split: a task of 6,000 events has a core row about as large as
    one of 500 (only its counters have more digits), while its history lives in rows written once."""
    sizes = {}
    for task, n in (("short", 500), ("long", 6000)):
        await ledger.publish_all(task_script(task)[:5] + history(task, n))
        await caught_up(settings, ledger, 120)
        (row,) = await fetch(settings, "SELECT octet_length(state) AS size FROM task_state"
                                       " WHERE task_id = $1", task)
        sizes[task] = row["size"]
    assert sizes["long"] - sizes["short"] <= 32, sizes
    (count,) = await fetch(settings, "SELECT count(*) AS n FROM task_turns WHERE task_id = 'long'")
    assert count["n"] == 3000


async def test_a_batch_writes_only_the_rows_it_changed(settings: Settings, ledger: Ledger,
                                                      projector: Projector) -> None:
    """Protects write amplification: setting one variable rewrites the core row and that variable's
    row, no other variable row and no turn row (PostgreSQL's xmin tells a row rewritten)."""
    await ledger.publish_all([*task_script("t1"), *turns("t1", 3),
                              event("variable_set", "w1", {"name": "other", "value": 1})])
    await caught_up(settings, ledger)
    xmins = ("SELECT 'core' AS name, xmin::text AS x FROM task_state WHERE task_id = 't1'"
             " UNION ALL SELECT name, xmin::text FROM task_variables WHERE task_id = 't1'"
             " UNION ALL SELECT 'turn ' || ordinal, xmin::text FROM task_turns WHERE task_id = 't1'")
    before = {r["name"]: r["x"] for r in await fetch(settings, xmins)}
    await ledger.publish(event("variable_set", "w2", {"name": "note", "value": "bye"}))
    await caught_up(settings, ledger)
    after = {r["name"]: r["x"] for r in await fetch(settings, xmins)}
    assert set(after) == set(before) == {"core", "answer", "note", "other", "turn 1", "turn 2", "turn 3"}
    assert {name for name in after if after[name] != before[name]} == {"core", "note"}


# ---- reads -------------------------------------------------------------------------------------

async def test_the_view_assembled_from_rows_is_the_reducers_view(settings: Settings, ledger: Ledger,
                                                                projector: Projector) -> None:
    """Protects readers: wm.get splices the variable and turn rows into the view without decoding
    them, and what it returns is exactly ``view`` of a pure fold of the same events; the transcript
    tail is the newest turns and ``turns_total`` counts them all."""
    events = [*task_script("t1"), *turns("t1", 5),
              event("variable_set", "q1", {"name": "quote\"d \u00e9", "value": {"nested": [1, "\u2028"]}})]
    seq = await ledger.publish_all(events)
    await caught_up(settings, ledger)
    changes = Changes()
    state, _ = fold(new_state(TENANT, "t1"),
                    [(decode_event(encode(e)), i) for i, e in enumerate(events, start=1)], changes=changes)
    expected = msgspec.json.decode(msgspec.json.encode(view(state, changes.turns)))
    body = {"tenant": TENANT, "task_id": "t1"}
    whole = await wm_get(ledger, msgspec.json.encode(body))
    assert (whole.seq, whole.state) == (seq, expected)
    tail = await wm_get(ledger, msgspec.json.encode({**body, "transcript_tail": 2}))
    assert tail.state["transcript"] == expected["transcript"][-2:]
    assert tail.state["turns_total"] == 5
    none = await wm_get(ledger, msgspec.json.encode({**body, "transcript_tail": 0}))
    assert none.state == {**expected, "transcript": []}


async def test_a_long_transcript_comes_in_chunks_and_its_tail_in_one_reply(settings: Settings,
                                                                          ledger: Ledger) -> None:
    """Protects the chunked reply with parts: a view larger than the reply budget is put together
    by the client, and a tail request (the same field on every chunk request) fits in one."""
    small = msgspec.structs.replace(settings, max_reply_bytes=16 * 1024)
    p = Projector(small)
    await p.start()
    try:
        await ledger.publish_all([*task_script("t1"), *turns("t1", 400)])
        await caught_up(settings, ledger)
        client = await connect(small)
        try:
            first = await wm_get(ledger, b'{"tenant": "acme", "task_id": "t1"}')
            assert first.chunk is not None and first.chunk.count > 1
            whole = await client.working_memory(TENANT, "t1")
            assert len(whole.state["transcript"]) == 400
            tail = await wm_get(ledger, b'{"tenant": "acme", "task_id": "t1", "transcript_tail": 3}')
            assert tail.chunk is None and tail.state["transcript"] == whole.state["transcript"][-3:]
            chunked_tail = await client.working_memory(TENANT, "t1", transcript_tail=150)
            assert chunked_tail.state["transcript"] == whole.state["transcript"][-150:]
        finally:
            await client.close()
    finally:
        await p.stop()


async def test_the_state_cache_counts_variable_rows(settings: Settings, ledger: Ledger,
                                                   projector: Projector) -> None:
    """Protects the byte bound of the state cache now that variables are not in the core row: a
    held state is sized by its core row plus every variable row, also those not written since."""
    big = "v" * 50_000
    await ledger.publish_all([*task_script("t1"), event("variable_set", "b1", {"name": "big", "value": big})])
    await caught_up(settings, ledger)
    await ledger.publish(event("variable_set", "b2", {"name": "small", "value": 1}))
    await caught_up(settings, ledger)
    rows = await fetch(settings, "SELECT octet_length(state) AS n FROM task_state WHERE task_id = 't1'"
                                 " UNION ALL SELECT octet_length(value) FROM task_variables WHERE task_id = 't1'")
    assert projector.lanes[0].cache.total_bytes == sum(r["n"] for r in rows)
    assert projector.lanes[0].cache.total_bytes > len(big)


# ---- checkpoints of the first state version ---------------------------------------------------

def test_a_checkpoint_of_state_version_1_is_upcast() -> None:
    """Protects resuming from checkpoints saved before the split: their state kept the transcript
    and no event counter; restore turns the transcript into its last ordinal and takes the count
    from the checkpoint row, so the next turn and the policy's count carry on."""
    changes = Changes()
    events = [*task_script("t1"), *turns("t1", 2)]
    state, _ = fold(new_state(TENANT, "t1"),
                    [(decode_event(encode(e)), i) for i, e in enumerate(events, start=1)], changes=changes)
    legacy = msgspec.json.decode(encode_state(state))
    del legacy["turns"], legacy["events_applied"]
    legacy |= {"state_version": 1, "transcript": msgspec.to_builtins(changes.turns), "applied": {}}
    cp = msgspec.structs.replace(cp_mod.build(state, now=0.0, ttl_s=60.0),
                                 state=msgspec.json.encode(legacy))
    restored = cp_mod.restore(cp, events=len(events))
    assert (restored.state_version, restored.turns, restored.events_applied) == (2, 2, len(events))
    assert cp_mod.restore(cp_mod.build(state, now=0.0, ttl_s=60.0), events=99) == state
