"""The ledger-writer against a real NATS JetStream server.

Bad input gets its typed error and leaves the stream untouched; duplicates and
retries after a lost ack are answered without a second copy or a false
conflict; coalesced batches isolate the one bad append and store the rest once.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from agentledger.client import Client
from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.contracts.codec import decode_event
from agentledger.core.validate import goal_hash
from agentledger.errors import AgentLedgerError, ConflictError, DuplicateError
from agentledger.security import auth
from agentledger.security.kek_epochs import KekRing
from agentledger.security.sealing import Keyring, unseal
from agentledger.security.task_seal import task_keys_of
from agentledger.services.ledger_writer.service import LedgerWriter, append_subject
from agentledger.stores.ledger import ledger_subject
from writer_support import ledger_messages, running_writer


def event(event_id: str, kind: str = "variable_set", payload: dict[str, Any] | None = None,
          task: str = "t1", **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "event_id": event_id, "tenant": "acme", "task_id": task,
            "producer": "agent-1", "occurred_at": "2026-11-29T10:00:00Z", "schema_version": 1,
            "payload": payload if payload is not None else {"name": "x", "value": 1}, **extra}


def created(event_id: str = "c1", task: str = "t1") -> dict[str, Any]:
    return event(event_id, "task_created",
                 {"goal": {"text": "g", "acceptance_criteria": ["a"], "goal_hash": goal_hash("g", ["a"])}},
                 task=task)


@pytest.fixture
async def writer(settings: Settings) -> AsyncIterator[tuple[LedgerWriter, Client]]:
    async with running_writer(settings, max_event_bytes=4096, max_batch_events=50) as stack:
        yield stack


async def stored(settings: Settings) -> list[tuple[int, dict[str, Any]]]:
    """Every message in the ledger stream, in order."""
    return [(seq, json.loads(data)) for seq, data, _ in await ledger_messages(settings)]


async def raw_request(client: Client, settings: Settings, body: bytes) -> dict[str, Any]:
    msg = await client.nc.request(append_subject(settings.prefix), body, timeout=10)
    return json.loads(msg.data)


def _steps_with_bad_id() -> dict[str, Any]:
    return {"plan_id": "p", "version": 1, "steps": [{"id": "S1"}, {"id": "S2"}, {"id": 3}]}


BAD_INPUT = [
    ("malformed json", b'{"events": [', "malformed_json", "$"),
    ("not an object", b"[1, 2]", "invalid_type", "$"),
    ("missing events", b"{}", "missing_field", "$.events"),
    ("empty events", b'{"events": []}', "invalid_value", "$.events"),
    ("unknown request field", b'{"events": [{}], "x": 1}', "unknown_field", "$.x"),
    ("unknown kind", {"events": [event("e1", "teleported")]}, "unknown_kind", "$.events[0].kind"),
    ("unknown schema version", {"events": [{**event("e1"), "schema_version": 7}]},
     "unknown_schema_version", "$.events[0].schema_version"),
    ("missing field", {"events": [{k: v for k, v in event("e1").items() if k != "producer"}]},
     "missing_field", "$.events[0].producer"),
    ("extra field", {"events": [{**event("e1"), "color": "red"}]}, "unknown_field", "$.events[0].color"),
    ("extra nested field", {"events": [event("e1", payload={"name": "x", "value": 1, "why": 2})]},
     "unknown_field", "$.events[0].payload.why"),
    ("wrong type deep", {"events": [event("e1", "plan_versioned", _steps_with_bad_id())]},
     "invalid_type", "$.events[0].payload.steps[2].id"),
    ("wrong timestamp", {"events": [{**event("e1"), "occurred_at": "yesterday"}]},
     "invalid_value", "$.events[0].occurred_at"),
    ("oversize event", {"events": [event("e1", payload={"name": "x", "value": "y" * 5000})]},
     "event_too_large", "$.events[0]"),
    ("invalid tenant", {"events": [{**event("e1"), "tenant": "acme.eu"}]}, "invalid_token",
     "$.events[0].tenant"),
    ("invalid task", {"events": [{**event("e1"), "task_id": "a*b"}]}, "invalid_token",
     "$.events[0].task_id"),
    ("wildcard task", {"events": [{**event("e1"), "task_id": ">"}]}, "invalid_token",
     "$.events[0].task_id"),
    ("invalid event id", {"events": [{**event("e1"), "event_id": "a/b"}]}, "invalid_token",
     "$.events[0].event_id"),
    ("batch with one bad event", {"events": [event("e1"), {**event("e2"), "tenant": 5}]},
     "invalid_type", "$.events[1].tenant"),
    ("mixed tasks", {"events": [event("e1"), event("e2", task="t2")]}, "mixed_task_batch",
     "$.events[1].task_id"),
    ("repeated id in batch", {"events": [event("e1"), event("e1")]}, "duplicate_event_id",
     "$.events[1].event_id"),
    ("goal hash mismatch", {"events": [event("e1", "task_created", {"goal": {
        "text": "g", "acceptance_criteria": [], "goal_hash": "0" * 64}})]},
     "goal_hash_mismatch", "$.events[0].payload.goal.goal_hash"),
    ("plan cycle", {"events": [event("e1", "plan_versioned", {"plan_id": "p", "version": 1, "steps": [
        {"id": "A", "depends_on": ["B"]}, {"id": "B", "depends_on": ["A"]}]})]},
     "invalid_plan", "$.events[0].payload.steps[0].depends_on"),
    ("personal without subject", {"events": [event("e1", "turn_appended",
                                                   {"role": "user", "ordinal": 1, "content": "hi"})]},
     "missing_data_subject", "$.events[0].data_subject"),
    ("client-sealed value", {"events": [event("e1", "variable_set", {"name": "x", "sealed": {
        "subject": "u", "key_id": "k", "nonce": "n", "ciphertext": "c"}})]},
     "sealed_not_allowed", "$.events[0].payload.sealed"),
    ("too many events", {"events": [event(f"e{i}") for i in range(51)]}, "batch_too_large", "$.events"),
    ("negative expectation", {"events": [event("e1")], "expected_last_seq": -1}, "invalid_value",
     "$.expected_last_seq"),
    # A sequence no stream can reach (JetStream numbers in a signed 64-bit range).
    ("expectation past any sequence", {"events": [event("e1")], "expected_last_seq": 2**64}, "invalid_value",
     "$.expected_last_seq"),
]


@pytest.mark.parametrize(("body", "code", "path"), [b[1:] for b in BAD_INPUT],
                         ids=[b[0] for b in BAD_INPUT])
async def test_bad_input_is_refused_with_its_typed_error(writer: tuple[LedgerWriter, Client],
                                                         settings: Settings, body: Any, code: str,
                                                         path: str) -> None:
    """Each kind of bad input gets its code and path, stores nothing, and the writer keeps serving."""
    _, client = writer
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    reply = await raw_request(client, settings, payload)
    assert reply["ok"] is False
    assert (reply["error"]["code"], reply["error"].get("path")) == (code, path)
    assert reply["error"]["retryable"] is False
    assert await stored(settings) == []
    ok = await client.append(created())
    assert (ok.seq, ok.duplicate) == (1, False)


async def test_duplicate_event_id_is_answered_with_the_original_sequence(
        writer: tuple[LedgerWriter, Client], settings: Settings) -> None:
    """Sending the same event twice stores it once and tells the caller it was a duplicate."""
    _, client = writer
    first = await client.append(created())
    again = await client.append(created())
    assert (first.seq, first.duplicate) == (1, False)
    assert (again.seq, again.duplicate) == (1, True)
    assert len(await stored(settings)) == 1


async def test_same_event_id_in_two_tasks_is_two_events(writer: tuple[LedgerWriter, Client],
                                                        settings: Settings) -> None:
    """Event ids are scoped to their task: another task may reuse one without being deduplicated."""
    _, client = writer
    a = await client.append(created("c1", task="a"))
    b = await client.append(created("c1", task="b"))
    assert (a.duplicate, b.duplicate) == (False, False)
    assert a.seq != b.seq


async def test_conflict_carries_the_current_sequence(writer: tuple[LedgerWriter, Client],
                                                     settings: Settings) -> None:
    """A stale expected_last_seq is a conflict naming where the task really is, and stores nothing."""
    _, client = writer
    await client.append(created(), expected_last_seq=0)
    await client.append(event("e2"), expected_last_seq=1)
    with pytest.raises(ConflictError) as info:
        await client.append(event("e3"), expected_last_seq=1)
    assert info.value.current_seq == 2
    assert info.value.path == "$.expected_last_seq"
    assert [m["event_id"] for _, m in await stored(settings)] == ["c1", "e2"]


async def test_retry_after_lost_ack_with_expectation_is_a_duplicate_not_a_conflict(
        writer: tuple[LedgerWriter, Client], settings: Settings) -> None:
    """The server answers 10071 to such a retry; the writer must still report the stored sequence."""
    _, client = writer
    await client.append(created())
    first = await client.append(event("e2"), expected_last_seq=1)
    retry = await client.append(event("e2"), expected_last_seq=1)
    assert (retry.seq, retry.duplicate) == (first.seq, True)
    batch = [event("e3"), event("e4")]
    stored_batch = await client.append_batch(batch, expected_last_seq=2)
    retried_batch = await client.append_batch(batch, expected_last_seq=2)
    assert [r.seq for r in retried_batch] == [r.seq for r in stored_batch]
    assert all(r.duplicate for r in retried_batch)
    assert len(await stored(settings)) == 4


async def test_batch_mixing_stored_and_new_ids_is_refused_whole(
        writer: tuple[LedgerWriter, Client], settings: Settings) -> None:
    """An atomic append cannot be half a retry: it is refused, naming the stored event."""
    _, client = writer
    await client.append_batch([created(), event("e2")])
    with pytest.raises(DuplicateError) as info:
        await client.append_batch([event("e3"), event("e2")])
    assert info.value.path == "$.events[1].event_id"
    assert [m["event_id"] for _, m in await stored(settings)] == ["c1", "e2"]


async def test_coalesced_batch_isolates_the_offenders(settings: Settings) -> None:
    """Concurrent appends share atomic batches; a stale expectation or a resent id among them
    gets its own answer while every other append is stored exactly once."""
    async with running_writer(settings, max_inflight_batches=1) as (_, client):
        await client.append(created("c0", task="busy"))
        await client.append(event("old", task="busy"))

        async def attempt(coro: Any) -> Any:
            try:
                return await coro
            except AgentLedgerError as exc:
                return exc

        for round_ in range(5):
            calls = [client.append(event(f"r{round_}-{i}", task=f"k{i % 7}")) for i in range(60)]
            calls.insert(17, client.append(event(f"stale{round_}", task="busy"), expected_last_seq=1))
            calls.insert(33, client.append(event("old", task="busy")))
            calls.insert(45, client.append_batch([event(f"b{round_}-1", task="atom"),
                                                  event(f"b{round_}-2", task="atom")]))
            results = await asyncio.gather(*(attempt(c) for c in calls))
            assert isinstance(results[17], ConflictError)
            assert results[33].duplicate is True and results[33].seq == 2
            assert [r.duplicate for r in results[45]] == [False, False]
            assert all(not isinstance(r, AgentLedgerError) for i, r in enumerate(results) if i != 17)
        messages = await stored(settings)
        counts = Counter((m["task_id"], m["event_id"]) for _, m in messages)
        assert max(counts.values()) == 1
        assert len(messages) == 2 + 5 * (60 + 2)
        assert not any(m["event_id"].startswith("stale") for _, m in messages)


async def test_personal_content_is_sealed_at_rest(writer: tuple[LedgerWriter, Client],
                                                  settings: Settings) -> None:
    """Turn text never reaches the log in clear; the subject's key opens it, bound to its task."""
    _, client = writer
    secret = "my card number is 4111 1111 1111 1111"
    await client.append_batch([
        created(),
        event("turn1", "turn_appended", {"role": "user", "ordinal": 1, "content": secret},
              data_subject="subj-42"),
        event("out1", "variable_set", {"name": "address", "value": {"city": "Lyon"}, "personal": True},
              data_subject="subj-42"),
    ])
    nc = await auth.connect(settings, auth.WRITER)
    js = nc.jetstream()
    msgs = [await js.get_msg(settings.stream, seq) for seq in (2, 3)]
    assert all(secret.encode() not in m.data and b"Lyon" not in m.data for m in msgs)
    # Under the task's seal (task_seal), the personal value is sealed again under its subject's key.
    opened = [await task_keys_of(nc, settings).open_one("acme", "t1", m.headers, m.data) for m in msgs]
    assert all(o is not None and secret.encode() not in o and b"Lyon" not in o for o in opened)
    assert opened[0] is not None
    turn = decode_event(opened[0])
    assert isinstance(turn, ev.TurnAppendedEvent)
    assert turn.payload.content is None and turn.payload.sealed is not None
    keyring = Keyring(nc, settings.keys_bucket, KekRing.load(settings.kek_path))
    assert await unseal(turn.payload.sealed, "acme", "t1", keyring) == secret.encode()
    with pytest.raises(AgentLedgerError) as info:
        await unseal(turn.payload.sealed, "acme", "other-task", keyring)
    assert info.value.code == "seal_mismatch"
    await nc.close()


async def test_writer_answers_micro_service_discovery(writer: tuple[LedgerWriter, Client],
                                                      settings: Settings) -> None:
    """$SRV.PING and $SRV.INFO name the writer, its append, lease and artifact endpoint subjects."""
    _, client = writer
    ping = json.loads((await client.nc.request("$SRV.PING.agentledger-ledger-writer", b"")).data)
    info = json.loads((await client.nc.request("$SRV.INFO.agentledger-ledger-writer", b"")).data)
    assert ping["name"] == "agentledger-ledger-writer"
    assert [e["subject"] for e in info["endpoints"]] == [
        append_subject(settings.prefix),
        *(f"{settings.prefix}.lease.{a}" for a in ("acquire", "renew", "release")),
        *(f"{settings.prefix}.artifact.{a}" for a in ("put", "get", "stat"))]


async def test_subject_is_tenant_and_task(writer: tuple[LedgerWriter, Client], settings: Settings) -> None:
    """Events land on <prefix>.ledger.<tenant>.<task>, the subject per-task concurrency uses."""
    _, client = writer
    await client.append(created(task="job-7"))
    nc = await auth.connect(settings, auth.WRITER)
    msg = await nc.jetstream().get_last_msg(settings.stream, ledger_subject(settings.prefix, "acme", "job-7"))
    assert msg.seq == 1
    await nc.close()


async def test_terminal_event_citing_an_artifact_needs_it_stored_first(
        writer: tuple[LedgerWriter, Client], settings: Settings) -> None:
    """A step_succeeded whose artifact is not durable (or differs) is refused; after the put it lands."""
    _, client = writer
    report = b"12 passed, 0 failed"
    ref = await client.put_artifact(report, schema="pytest-report/v1", producer="agent-1", tenant="acme")
    missing = {**json.loads(msgspec.json.encode(ref)),
                "uri": ref.uri[:-64] + "0" * 64, "blake3": "0" * 64}
    plan = {"plan_id": "p", "version": 1, "steps": [{"id": "S1"}]}
    await client.append_batch([created(), event("p1", "plan_versioned", plan),
                               event("s1", "step_started", {"plan_version": 1, "step_id": "S1"})])
    done = {"plan_version": 1, "step_id": "S1"}
    with pytest.raises(AgentLedgerError) as info:
        await client.append(event("ok1", "step_succeeded", {**done, "artifacts": [missing]}))
    assert (info.value.code, info.value.path) == ("artifact_missing", "$.events[0].payload.artifacts[0]")
    wrong = {**json.loads(msgspec.json.encode(ref)), "size": len(report) + 1}
    with pytest.raises(AgentLedgerError) as info:
        await client.append(event("ok1", "step_succeeded", {**done, "artifacts": [wrong]}))
    assert info.value.code == "artifact_hash_mismatch"
    assert len(await stored(settings)) == 3
    good = json.loads(msgspec.json.encode(ref))
    assert (await client.append(event("ok1", "step_succeeded", {**done, "artifacts": [good]}))).seq == 4
