"""No message stops the projection, on real NATS and PostgreSQL.

Hostile bytes published straight onto ledger subjects (as only the writer's NATS
user can) become recorded rejections with sanitised, bounded text, and the
events after them are projected; a rebuild and ``replay --verify`` record the
same. A batch whose transaction one message fails is split so the others
commit; a deleted durable consumer is recreated from the watermark; the writer
refuses nesting beyond the limit with ``too_deep``; the checkpointer answers an
out-of-range checkpoint id with ``invalid_value`` and PostgreSQL failures with
``unavailable``.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import asyncpg
import msgspec
import nats.js.errors
import pytest
from structlog.testing import capture_logs

from agentledger.config import Settings
from agentledger.contracts.codec import MAX_DEPTH, check_depth, encode, nesting_path
from agentledger.contracts.resume import ResumeReply
from agentledger.core.state import decode_state
from agentledger.errors import AgentLedgerError, ContractError
from agentledger.projection.puller import ConsumerLostError, Puller
from agentledger.security import auth
from agentledger.services.checkpointer.service import resume_subject
from agentledger.services.projector import rebuild as replay
from agentledger.services.projector.fold import MAX_REASON_CHARS, MAX_TOKEN_CHARS
from agentledger.services.projector.service import DURABLE, Projector
from agentledger.stores.ledger import ledger_subject, stream_config
from ckpt_support import Stack, created
from helpers import assert_eventually
from projection_support import project_once, raw_publish
from test_projector import (
    TENANT,
    Ledger,
    caught_up,
    event,
    projected_state,
    task_rows,
    task_script,
    wm_get,
)


async def raw(ledger: Ledger, body: bytes, event_id: str, task: str = "t1") -> int:
    return await raw_publish(ledger, TENANT, task, body, event_id)


async def rejections(settings: Settings, schema: str = "public") -> list[tuple[Any, ...]]:
    conn = await asyncpg.connect(settings.database_url)
    try:
        rows = await conn.fetch(f"SELECT tenant, task_id, seq, event_id, kind, code, reason"
                                f" FROM {schema}.rejections ORDER BY seq")
    finally:
        await conn.close()
    return [tuple(r) for r in rows]


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def deep_json(depth: int) -> bytes:
    return b"[" * depth + b"1" + b"]" * depth


# ---- the depth helper --------------------------------------------------------------

def test_nesting_path_names_the_first_value_too_deep() -> None:
    """Protects the writer's typed refusal: the path of the first value beyond the limit, strings
    with brackets inside ignored, no recursion however deep the input."""
    body = json.dumps({"payload": {"value": [{"a": "[[[{{{"}, nested(10)]}}).encode()
    assert nesting_path(body, 64) is None
    assert nesting_path(body, 4) == "$.payload.value[1][0]"
    deep = b'{"payload": {"value": ' + deep_json(100_000) + b"}}"
    assert nesting_path(deep).startswith("$.payload.value[0][0]")
    with pytest.raises(ContractError) as info:
        check_depth(deep, "$.events[3]")
    assert info.value.code == "too_deep"
    assert info.value.path is not None and info.value.path.startswith("$.events[3].payload.value[0]")
    assert nesting_path(b"\xff\x00 not json [[[", 1) == "$[0]"


# ---- 1. any bytes become a rejection ------------------------------------------------------

async def test_hostile_messages_are_recorded_and_the_projection_moves_on(
        settings: Settings, ledger: Ledger) -> None:
    """Protects liveness of every tenant: a 10,000-deep event, NUL inside `kind` and inside other
    text, invalid JSON, a non-object, huge strings, each become one rejection row with text that
    PostgreSQL accepts and bounded length; the events after them are projected; a rebuild records
    the same rows and `replay --verify` passes."""
    await ledger.publish_all(task_script("t1"))
    p = Projector(settings)
    await p.start()  # live: the hostile messages arrive in the projector's batches
    deep_body = (b'{"kind": "variable_set", "event_id": "deep", "tenant": "acme", "task_id": "t1",'
                 b' "producer": "test", "occurred_at": "2026-11-29T10:00:00Z", "schema_version": 1,'
                 b' "payload": {"name": "x", "value": ' + deep_json(10_000) + b"}}")
    bad = {
        "too_deep": await raw(ledger, deep_body, "deep"),
        "nul_kind": await raw(ledger, json.dumps(event("variable\x00set", "nul1", {})).encode(), "nul1"),
        "nul_text": await raw(ledger, json.dumps(
            event("step_started", "nul2", {"plan_version": 1, "step_id": "A\x00" + "z" * 5000})).encode(),
            "nul2\x01"),
        "invalid_json": await raw(ledger, b'{"kind": "variable_set", \xff\xfe', "j1"),
        "not_object": await raw(ledger, b"[1, 2, 3]", "j2"),
        "huge_kind": await raw(ledger, json.dumps(event("k" * 300_000, "huge1", {})).encode(), "huge1"),
        "huge_event_id": await raw(ledger, json.dumps(
            event("variable_set", "e\x00" * 20_000, {"name": "x", "value": "v" * 100_000})).encode(),
            "huge2"),
    }
    await ledger.publish(event("variable_set", "after", {"name": "after", "value": True}))
    try:
        await caught_up(settings, ledger)
        live = await rejections(settings)
    finally:
        await p.stop()
    by_seq = {r[2]: r for r in live}
    for name, seq in bad.items():
        assert seq in by_seq, f"{name} (seq {seq}) has no rejection row"
        row = by_seq[seq]
        for text in (row[3], row[4], row[5]):
            assert "\x00" not in text and len(text) <= MAX_TOKEN_CHARS
        assert "\x00" not in row[6] and len(row[6]) <= MAX_REASON_CHARS
    assert by_seq[bad["too_deep"]][5] == "too_deep"
    assert by_seq[bad["too_deep"]][6].endswith("at $.payload.value" + "[0]" * (MAX_DEPTH - 2))
    assert by_seq[bad["invalid_json"]][5] == "undecodable"
    assert by_seq[bad["not_object"]][5] == "undecodable"
    state = await projected_state(settings, "t1")
    assert state.variables["after"].value is True

    # The same messages mean the same in a rebuild and in replay --verify.
    report = await replay.rebuild(settings, "poison_check")
    assert report.rejections == len(live)
    assert await rejections(settings, "poison_check") == live
    verified = await replay.verify(settings, wait_s=30)
    assert verified.ok, verified.summary()


# ---- 2. a failing batch is split -----------------------------------------------------------

async def test_a_batch_failed_by_one_message_is_split_and_the_rest_commits(
        settings: Settings, ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    """Protects against an endless retry of one batch: when writing one message's outcome makes the
    transaction fail, the batch is bisected, the other messages commit, and the failing one becomes a
    `projection_error` rejection row."""
    await ledger.publish(task_script("t0")[0])
    await project_once(settings, ledger)
    # Published while no projector runs: the next one fetches them as one batch.
    await ledger.publish_all(task_script("t1"))
    poison_seq = await ledger.publish(task_script("poison")[0])
    await ledger.publish_all(task_script("t2"))
    p = Projector(settings)
    real_upsert = p.store.upsert_tasks
    attempts = 0

    async def upsert(conn: asyncpg.Connection, rows: Any) -> None:
        nonlocal attempts
        if any(r[1] == "poison" for r in rows):
            attempts += 1
            raise asyncpg.exceptions.CharacterNotInRepertoireError("invalid byte sequence")
        await real_upsert(conn, rows)

    monkeypatch.setattr(p.store, "upsert_tasks", upsert)
    await project_once(settings, ledger, p)
    rows = await task_rows(settings)
    assert set(rows) == {(TENANT, "t0"), (TENANT, "t1"), (TENANT, "t2")}
    assert decode_state(rows[(TENANT, "t2")]["state"]).events_applied == len(task_script("t2"))
    poison = [r for r in await rejections(settings) if r[2] == poison_seq]
    assert [(r[1], r[3], r[5]) for r in poison] == [("poison", "c1", "projection_error")]
    assert attempts < 20  # bisected, not retried


# ---- 3. a deleted consumer is recreated --------------------------------------------------

async def publish_raw_subject(ledger: Ledger, subject: bytes, body: bytes) -> None:
    """A PUB whose subject bytes are not UTF-8: nats-py cannot send one, so write the protocol."""
    transport = ledger.nc._transport
    assert transport is not None
    transport.write(b"PUB " + subject + b" " + str(len(body)).encode() + b"\r\n" + body + b"\r\n")
    await ledger.nc.flush()


async def test_a_subject_that_is_not_utf8_is_a_rejection_not_a_dead_reader(
        settings: Settings, ledger: Ledger) -> None:
    """Protects liveness: a ledger message whose subject is invalid UTF-8 (the server stores it)
    used to end nats-py's read loop, leaving the projector connected, silent and never restarted,
    and made `replay --verify` hang. Now it is one `malformed_subject` rejection, the events after
    it are projected, the projector's reader is still alive, and rebuild and verify agree."""
    await ledger.publish_all(task_script("t1"))
    p = Projector(settings)
    await p.start()
    try:
        await caught_up(settings, ledger)
        subject = f"{settings.prefix}.ledger.{TENANT}.".encode() + b"t\xff\xfe"
        await publish_raw_subject(ledger, subject, json.dumps(event("variable_set", "bad", {})).encode())
        bad_seq = await ledger.last_seq()
        await ledger.publish(event("variable_set", "after", {"name": "after", "value": 7}))
        await caught_up(settings, ledger)
        assert p.alive()
    finally:
        await p.stop()
    rows = {r[2]: r for r in await rejections(settings)}
    assert rows[bad_seq][5] == "malformed_subject"
    assert rows[bad_seq][0] == TENANT and "\udcff" not in rows[bad_seq][1]
    state = await projected_state(settings, "t1")
    assert state.variables["after"].value == 7
    report = await replay.rebuild(settings, "utf8_check")
    assert report.rejections == len(rows)
    verified = await replay.verify(settings, wait_s=30)
    assert verified.ok, verified.summary()


async def test_deleted_consumer_is_recreated_from_the_watermark(settings: Settings,
                                                               ledger: Ledger) -> None:
    """Protects progress: deleting the projector's durable consumer while events are appended makes
    the projector notice, recreate it from its PostgreSQL watermark and project everything."""
    await ledger.publish_all(task_script("t1"))
    p = Projector(settings)
    await p.start()
    op = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        await caught_up(settings, ledger)

        async def appender() -> None:
            for i in range(60):
                await ledger.publish(event("variable_set", f"x{i}", {"name": f"n{i}", "value": i}))
                await asyncio.sleep(0.01)

        task = asyncio.create_task(appender())
        await asyncio.sleep(0.1)
        await op.jetstream().delete_consumer(settings.stream, DURABLE)
        await task
        await caught_up(settings, ledger, wait_s=30)

        async def recreated() -> bool:
            try:
                await op.jetstream().consumer_info(settings.stream, DURABLE)
            except nats.js.errors.NotFoundError:
                return False
            return True

        await assert_eventually(recreated, timeout=10)
        # And it keeps projecting after the recreation.
        await ledger.publish(event("variable_set", "late", {"name": "late", "value": 1}))
        await caught_up(settings, ledger)
    finally:
        await op.close()
        await p.stop()
    state = await projected_state(settings, "t1")
    assert {f"n{i}" for i in range(60)} <= set(state.variables)
    assert state.variables["late"].value == 1


async def test_a_deleted_stream_is_recreated_after_its_last_sequence(settings: Settings) -> None:
    """Protects progress after an operator deletes the ledger stream: the writer notices on the
    next append, recreates the stream numbering after the last sequence it acked (and the
    high-water mark, tests/test_ledger_numbering.py), and the projector carries on from its
    watermark (earlier state kept, later events projected, nothing skipped). A stream recreated
    from sequence 1 behind everyone's back instead is refused: the projector projects nothing (it
    would skip events) and says why."""
    stack = await Stack(settings).start(checkpointer=False)
    op = await auth.connect(settings, auth.OPERATOR_ROLE)
    writer = await auth.connect(settings, auth.WRITER)
    try:
        before = await stack.append([created("t1"), event("variable_set", "v0", {"name": "a", "value": 1})])
        await op.jetstream().delete_stream(settings.stream)

        async def appended() -> int:
            try:
                return (await stack.c.append(event("variable_set", "v1", {"name": "b", "value": 2}))).seq
            except AgentLedgerError as exc:
                assert exc.code == "unavailable" and exc.retryable
                raise AssertionError(exc.message) from exc
        seq = await assert_eventually(appended, timeout=20)
        assert seq > before
        state = (await stack.c.working_memory(TENANT, "t1", min_seq=seq)).state
        assert state is not None and {"a", "b"} <= set(state["variables"])

        # Deleted again and recreated from 1 behind the writer's back: refused, loudly.
        with capture_logs() as logs:
            await op.jetstream().delete_stream(settings.stream)
            await op.jetstream().add_stream(stream_config(settings))
            await writer.jetstream().publish(ledger_subject(settings.prefix, TENANT, "t1"), encode(
                event("variable_set", "v2", {"name": "c", "value": 3})))
            await assert_eventually(lambda: any(
                e["event"] == "projector.waiting_for_servers" and "agentledger replay" in e["reason"]
                for e in logs), timeout=20)
    finally:
        await writer.close()
        await op.close()
        await stack.stop()


async def test_puller_reports_a_missing_consumer_instead_of_spinning(settings: Settings,
                                                                     ledger: Ledger) -> None:
    """Protects against the 86% CPU spin: pull requests for a consumer that does not exist (the
    server answers "no responders") raise ``ConsumerLostError`` instead of being re-sent forever."""
    puller = Puller(ledger.nc, settings.stream, "no-such-consumer")
    await puller.start()
    try:
        with pytest.raises(ConsumerLostError):
            await puller.fetch(10, 5.0)
    finally:
        await puller.close()


# ---- 4. the writer refuses deep input -------------------------------------------------------

async def test_writer_refuses_nesting_beyond_the_limit(settings: Settings) -> None:
    """Protects typed errors: an append nesting deeper than the limit (here 10,000 levels, which used
    to end in RecursionError and an empty 500) is refused with `too_deep` naming the path; nesting
    at the limit is accepted."""
    stack = await Stack(settings).start(checkpointer=False, projector=False)
    try:
        await stack.c.append(created("t1"))
        for depth in (MAX_DEPTH + 1, 10_000):
            body = (b'{"events": [{"kind": "variable_set", "event_id": "d1", "tenant": "acme",'
                    b' "task_id": "t1", "producer": "test", "occurred_at": "2026-11-29T10:00:00Z",'
                    b' "schema_version": 1, "payload": {"name": "x", "value": '
                    + deep_json(depth) + b"}}]}")
            msg = await stack.c.nc.request(f"{settings.prefix}.writer.append", body, timeout=10)
            reply = json.loads(msg.data)
            assert reply["ok"] is False
            error = reply["error"]
            assert (error["code"], error["retryable"]) == ("too_deep", False)
            assert error["path"].startswith("$.events[0].payload.value[0]")
        # An event's own object and payload are two levels: the value may nest MAX_DEPTH - 2.
        ok = await stack.c.append(
            {**created("t1"), "kind": "variable_set", "event_id": "d2",
             "payload": {"name": "x", "value": nested(MAX_DEPTH - 3)}})
        assert ok.seq > 0
    finally:
        await stack.stop()


# ---- 5. checkpointer and wm.get errors ------------------------------------------------------

async def test_out_of_range_checkpoint_id_and_postgres_failures_are_typed(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Protects clients' retry logic: a checkpoint_id of 2^63 is a non-retryable `invalid_value` at
    `$.checkpoint_id`; PostgreSQL failing mid-read answers `unavailable` (retryable), never
    `internal`, on resume and on wm.get."""
    stack = await Stack(settings).start()
    try:
        await stack.c.append(created("t1"))
        body = json.dumps({"tenant": TENANT, "task_id": "t1", "executor": "agent-1",
                           "checkpoint_id": 2**63}).encode()
        msg = await stack.c.nc.request(resume_subject(settings.prefix), body, timeout=10)
        reply = msgspec.json.decode(msg.data, type=ResumeReply)
        assert reply.error is not None
        assert (reply.error.code, reply.error.path, reply.error.retryable) == (
            "invalid_value", "$.checkpoint_id", False)

        async def broken(*_: Any, **__: Any) -> Any:
            raise asyncpg.exceptions.AdminShutdownError("terminating connection due to administrator command")

        assert stack.checkpointer is not None and stack.checkpointer.resumer is not None
        monkeypatch.setattr(stack.checkpointer.store, "locate", broken)
        monkeypatch.setattr(stack.checkpointer.store, "locate_id", broken)
        for extra in ({}, {"checkpoint_id": 5}):
            body = json.dumps({"tenant": TENANT, "task_id": "t1", "executor": "agent-1",
                               **extra}).encode()
            msg = await stack.c.nc.request(resume_subject(settings.prefix), body, timeout=10)
            reply = msgspec.json.decode(msg.data, type=ResumeReply)
            assert reply.error is not None
            assert (reply.error.code, reply.error.retryable) == ("unavailable", True)

        monkeypatch.setattr(stack.projector.store, "get_task", broken)
        got = await wm_get(Ledger(settings, stack.c.nc),
                           json.dumps({"tenant": TENANT, "task_id": "t1"}).encode())
        assert got.error is not None
        assert (got.error.code, got.error.retryable) == ("unavailable", True)
    finally:
        await stack.stop()
