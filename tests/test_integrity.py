"""Integrity of what is stored: re-sent event ids and ledger subjects, on real NATS and PostgreSQL.

An event id re-sent with other content is ``event_id_conflict``, never a silent
duplicate that keeps the first sender's content; the same content is a
duplicate as before (even for sealed personal content, whose stored bytes
differ on every attempt). The projector, a rebuild and ``replay --verify`` file
an event only where its subject and its body agree: a subject with a token too
many or too few, or a body naming another task, is a recorded rejection and the
projection moves on.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import msgspec
import pytest

from agentledger.client import Client
from agentledger.config import Settings
from agentledger.contracts.codec import encode
from agentledger.errors import AgentLedgerError, EventIdConflictError
from agentledger.security import auth
from agentledger.services.projector import rebuild as replay
from agentledger.services.projector.service import Projector
from agentledger.stores.ledger import DIGEST, MSG_ID, ledger_subject, msg_id, subject_key
from test_projector import (
    TENANT,
    Ledger,
    caught_up,
    event,
    projected_state,
    task_rows,
    task_script,
)
from test_writer import created, stored
from test_writer import event as wevent
from writer_support import running_writer


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[Client]:
    async with running_writer(settings) as (_, started):
        yield started


async def test_resent_id_with_other_content_is_a_conflict(client: Client, settings: Settings) -> None:
    """Same id, other value: event_id_conflict naming the event, not retryable, and the ledger
    keeps exactly the first content. Same id, same content: a duplicate, as always."""
    await client.append(created())
    first = await client.append(wevent("e1", payload={"name": "x", "value": 1}))
    with pytest.raises(EventIdConflictError) as info:
        await client.append(wevent("e1", payload={"name": "x", "value": 2}))
    assert (info.value.code, info.value.path, info.value.retryable) == (
        "event_id_conflict", "$.events[0].event_id", False)
    again = await client.append(wevent("e1", payload={"name": "x", "value": 1}))
    assert (again.seq, again.duplicate) == (first.seq, True)
    # With an expectation the server answers differently (wrong last sequence); same outcome.
    with pytest.raises(EventIdConflictError):
        await client.append(wevent("e1", payload={"name": "x", "value": 3}), expected_last_seq=1)
    messages = await stored(settings)
    assert [(m["event_id"], m["payload"].get("value")) for _, m in messages] == [("c1", None), ("e1", 1)]


async def test_conflict_inside_an_atomic_batch_names_the_event(client: Client,
                                                               settings: Settings) -> None:
    """A batch re-sending a stored id with other content is refused whole, naming that event;
    a batch re-sent unchanged is all duplicates."""
    await client.append(created())
    batch = [wevent("b1"), wevent("b2", payload={"name": "y", "value": "a"})]
    stored_batch = await client.append_batch(batch)
    retried = await client.append_batch(batch)
    assert [r.duplicate for r in retried] == [True, True]
    assert [r.seq for r in retried] == [r.seq for r in stored_batch]
    changed = [wevent("b1"), wevent("b2", payload={"name": "y", "value": "b"})]
    with pytest.raises(EventIdConflictError) as info:
        await client.append_batch(changed)
    assert info.value.path == "$.events[1].event_id"
    with pytest.raises(EventIdConflictError) as mixed:
        await client.append_batch([wevent("new"), wevent("b2", payload={"name": "y", "value": "c"})])
    assert mixed.value.path == "$.events[1].event_id"
    assert len(await stored(settings)) == 3


async def test_sealed_content_retried_unchanged_is_a_duplicate(client: Client,
                                                               settings: Settings) -> None:
    """The digest is taken before sealing: a turn sealed under a fresh nonce on each attempt is
    still a duplicate of itself, and a changed turn is still a conflict."""
    await client.append(created())
    turn = wevent("t1", "turn_appended", {"role": "user", "ordinal": 1, "content": "my address"},
                  data_subject="u1")
    first = await client.append(turn)
    again = await client.append(turn)
    assert (again.seq, again.duplicate) == (first.seq, True)
    with pytest.raises(EventIdConflictError):
        await client.append({**turn, "payload": {**turn["payload"], "content": "other"}})
    messages = await stored(settings)
    assert len(messages) == 2


async def test_conflicts_among_concurrent_appends_are_answered_alone(client: Client,
                                                                     settings: Settings) -> None:
    """A conflicting re-send sharing a group commit with others gets its conflict; the others are
    stored once."""
    await client.append(created())
    await client.append(wevent("old", payload={"name": "x", "value": "first"}))

    async def attempt(coro: Any) -> Any:
        try:
            return await coro
        except AgentLedgerError as exc:
            return exc

    calls = [client.append(wevent(f"c{i}", task=f"k{i % 5}")) for i in range(40)]
    calls.insert(20, client.append(wevent("old", payload={"name": "x", "value": "second"})))
    results = await asyncio.gather(*(attempt(c) for c in calls))
    assert isinstance(results[20], EventIdConflictError)
    assert all(not isinstance(r, AgentLedgerError) for i, r in enumerate(results) if i != 20)
    assert len(await stored(settings)) == 2 + 40


async def test_every_message_carries_its_digest(client: Client, settings: Settings) -> None:
    """The writer stamps Agentledger-Digest on what it commits, its own lease_granted included."""
    await client.append(created())
    await client.acquire_lease("acme", "t1", "exec-a", 30)
    nc = await auth.connect(settings, auth.WRITER)
    try:
        for seq in (1, 2):
            msg = await nc.jetstream().get_msg(settings.stream, seq, direct=True)
            assert len((msg.headers or {}).get(DIGEST, "")) == 64
    finally:
        await nc.close()


def test_subject_key_takes_exactly_tenant_and_task() -> None:
    """Only <prefix>.ledger.<tenant>.<task> parses; a token more or less does not."""
    assert subject_key("p", "p.ledger.acme.t1") == ("acme", "t1")
    for bad in ("p.ledger.acme", "p.ledger.acme.t1.x", "p.ledger..t1", "q.ledger.acme.t1",
                "p.ledger.acme."):
        assert subject_key("p", bad) is None, bad


async def publish_raw(ledger: Ledger, subject: str, body: dict[str, Any]) -> int:
    ack = await ledger.js.publish(subject, encode(body),
                                  headers={MSG_ID: msg_id(body["tenant"], body["task_id"],
                                                          body["event_id"])})
    return int(ack.seq)


async def rejection_rows(settings: Settings, schema: str = "public") -> list[tuple[Any, ...]]:
    conn = await asyncpg.connect(settings.database_url)
    try:
        rows = await conn.fetch(f"SELECT tenant, task_id, seq, event_id, code FROM {schema}.rejections"
                                " ORDER BY seq")
    finally:
        await conn.close()
    return [tuple(r) for r in rows]


async def test_projector_files_an_event_only_where_subject_and_body_agree(
        settings: Settings, ledger: Ledger) -> None:
    """A message on a subject with an extra token, one with a token missing, and one whose body
    names another task than its subject are rejection rows (malformed_subject, subject_mismatch);
    the task they name is untouched; the projection moves on; a rebuild records the same and
    replay --verify passes."""
    p = Projector(settings)
    await p.start()
    try:
        await ledger.publish_all(task_script("t1"))
        prefix = settings.prefix
        victim = event("variable_set", "evil1", {"name": "note", "value": "overwritten"})
        extra = await publish_raw(ledger, f"{ledger_subject(prefix, TENANT, 't1')}.x", victim)
        short = await publish_raw(ledger, f"{prefix}.ledger.{TENANT}",
                                  {**victim, "event_id": "evil2"})
        other = await publish_raw(ledger, ledger_subject(prefix, TENANT, "t2"),
                                  {**victim, "event_id": "evil3"})
        await ledger.publish(event("variable_set", "v9", {"name": "after", "value": True}))
        await caught_up(settings, ledger)
        rows = [r for r in await rejection_rows(settings) if r[4] != "dependencies_not_done"]
        assert rows == [(TENANT, "t1.x", extra, "evil1", "malformed_subject"),
                        (TENANT, "", short, "evil2", "malformed_subject"),
                        (TENANT, "t2", other, "evil3", "subject_mismatch")]
        tasks = await task_rows(settings)
        assert set(tasks) == {(TENANT, "t1")}
        state = await projected_state(settings, "t1")
        assert state.variables["note"].value == "hello"
        assert state.variables["after"].value is True

        report = await replay.rebuild(settings, "integrity_check")
        assert report.rejections == len(await rejection_rows(settings, "integrity_check"))
        assert await rejection_rows(settings, "integrity_check") == await rejection_rows(settings)
        verified = await replay.verify(settings, wait_s=30)
        assert verified.ok, verified.summary()
    finally:
        await p.stop()


async def test_resume_replay_ignores_a_body_of_another_task(settings: Settings,
                                                            ledger: Ledger) -> None:
    """The fold the projector shares with resume refuses, on a task's own subject, a body that
    names another task: it changes nothing and is reported, not applied."""
    fold = replay.Fold()
    body = msgspec.json.encode(event("variable_set", "e1", {"name": "n", "value": 1}, task="t2"))
    assert not replay.fold_message(fold, (TENANT, "t1"), body, 7, None)
    assert fold.states == {} and fold.applied == {}
    assert [r[5] for r in fold.rejections] == ["subject_mismatch"]
