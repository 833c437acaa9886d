"""Checkpoints edited outside the services: resume refuses them with ``integrity_violation``.

A checkpoint's own checksum is unkeyed blake3, so whoever edits the body can recompute it;
before the keyed tag such a body was served by ``resume``. Each edit below is plain SQL on the
checkpoint rows (the attacker cannot run code in the services). A projection row edited
before a checkpoint is taken is not certified by it either: the checkpointer refuses to
checkpoint a Working Memory that fails its tag.
"""

from __future__ import annotations

import json

import pytest

from agentledger.config import Settings
from agentledger.core import checkpoint as cp_mod
from agentledger.core.state import decode_state, encode_core
from agentledger.errors import IntegrityViolationError
from ckpt_support import TENANT, running
from test_resume import Case, base_task, settled, variable


def edited_body(body: bytes, **values: str) -> bytes:
    """The body with variables changed and its (unkeyed) checksum recomputed: a valid checkpoint
    to anyone without the key."""
    cp = cp_mod.decode(body)
    state = cp_mod.restore(cp)
    for name, value in values.items():
        state.variables[name].value = value
    rebuilt = cp_mod.build(state, now=cp.created_at, ttl_s=cp.expires_at - cp.created_at)
    assert cp_mod.checksum_ok(cp_mod.decode(cp_mod.encode(rebuilt)))
    return cp_mod.encode(rebuilt)


async def rejected(case: Case, **kw: object) -> None:
    reply = await case.stack.c.resume(TENANT, case.task, "exec-1", **kw)
    assert reply.ok and reply.status == "rejected", reply
    assert [r.code for r in reply.reasons if r.severity == "reject"] == ["integrity_violation"], reply.reasons
    assert reply.lease is None and reply.state is None


@pytest.mark.parametrize("edit", ["body", "moved", "cursor", "forged", "events", "untagged"])
async def test_an_edited_checkpoint_is_refused_by_resume(settings: Settings, edit: str) -> None:
    """Content change (checksum recomputed), a checkpoint moved to another task, its ledger
    cursor moved, a forged row inserted and pointed at, its event count changed, its tag removed."""
    async with running(settings) as stack:
        case = await base_task(stack)
        await settled(stack, case.task)
        db = stack.db
        assert db is not None
        cid = case.checkpoint_id
        row = await db.fetchrow("SELECT * FROM checkpoints WHERE id = $1", cid)
        if edit == "body":
            await db.execute("UPDATE checkpoints SET body = $2 WHERE id = $1", cid,
                             edited_body(row["body"], note="wire the money"))
        elif edit == "moved":
            other = await base_task(stack, "other")
            await settled(stack, "other")
            body = await db.fetchval("SELECT body FROM checkpoints WHERE id = $1", other.checkpoint_id)
            state = cp_mod.restore(cp_mod.decode(body))
            state.task_id = case.task  # the other task's state, re-filed under this one
            moved = cp_mod.build(state, now=row["created_at"].timestamp(), ttl_s=3600)
            mac = await db.fetchval("SELECT mac FROM checkpoints WHERE id = $1", other.checkpoint_id)
            await db.execute("UPDATE checkpoints SET body = $2, mac = $3 WHERE id = $1", cid,
                             cp_mod.encode(moved), mac)
        elif edit == "cursor":
            await db.execute("UPDATE checkpoints SET seq = seq - 1 WHERE id = $1", cid)
        elif edit == "events":
            await db.execute("UPDATE checkpoints SET events = events + 5 WHERE id = $1", cid)
        elif edit == "untagged":
            await db.execute("UPDATE checkpoints SET mac = NULL WHERE id = $1", cid)
        else:
            forged = await db.fetchval(
                "INSERT INTO checkpoints (tenant, task_id, seq, events, body, checksum, created_at, expires_at,"
                " mac) SELECT tenant, task_id, seq, events, $2, checksum, created_at, expires_at, mac"
                " FROM checkpoints WHERE id = $1 RETURNING id", cid, edited_body(row["body"], note="forged"))
            await db.execute("UPDATE checkpoint_pointer SET checkpoint_id = $1 WHERE task_id = $2",
                             forged, case.task)
        await rejected(case)
        if edit != "forged":
            await rejected(case, checkpoint_id=cid)


async def test_a_checkpoint_is_never_taken_of_an_edited_projection(settings: Settings) -> None:
    """The issue's chain: the projection's goal edited, then a checkpoint requested. The
    checkpointer refuses to certify it (``integrity_violation``), and no checkpoint holds it.
    (The task's next event would overwrite the edit anyway: the projector folds it from its own
    state, never from the edited row.)"""
    async with running(settings) as stack:
        case = await base_task(stack)
        await settled(stack, case.task)
        db = stack.db
        assert db is not None
        core = await db.fetchval("SELECT state FROM task_state WHERE task_id = $1", case.task)
        state = decode_state(core)
        state.title = "another goal"
        await db.execute("UPDATE task_state SET state = $2 WHERE task_id = $1", case.task, encode_core(state))
        with pytest.raises(IntegrityViolationError):
            await stack.c.save_checkpoint(TENANT, case.task)
        bodies = [json.loads(r["body"]) for r in await db.fetch("SELECT body FROM checkpoints WHERE task_id = $1",
                                                                case.task)]
        assert all(b.get("title") != "another goal" for b in bodies)



async def test_an_older_checkpoint_put_back_gives_the_same_state(settings: Settings) -> None:
    """Old version: the pointer moved back to an older checkpoint of the same task (its row and
    tag untouched, so valid). Resume replays the ledger after the older cursor with the same
    reducer and idempotency rule, so it answers exactly the live projection's state: an older
    checkpoint costs a longer replay, never a wrong state (docs/security.md)."""
    async with running(settings) as stack:
        case = await base_task(stack)
        newer = await stack.c.save_checkpoint(TENANT, case.task)
        assert newer.checkpoint_id is not None and newer.checkpoint_id != case.checkpoint_id
        await stack.append([variable(case.task, "note", "after the newer checkpoint")])
        await settled(stack, case.task)
        db = stack.db
        assert db is not None
        await db.execute("UPDATE checkpoint_pointer SET checkpoint_id = $1 WHERE task_id = $2",
                         case.checkpoint_id, case.task)
        reply = await stack.c.resume(TENANT, case.task, "exec-1")
        assert reply.ok and reply.status == "resumable", reply.reasons
        last = await stack.projected()
        wm = await stack.c.working_memory(TENANT, case.task)
        assert reply.state == wm.state and reply.watermark == wm.seq == last
        assert reply.state["variables"]["note"]["value"] == "after the newer checkpoint"
