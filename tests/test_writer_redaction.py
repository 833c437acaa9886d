"""The ledger-writer redacts secrets before the append, and keeps the memory ledger reserved.

Against the session's real NATS server: secrets sent in every kind of free text never reach
the stream (bodies or headers), the stored goal still verifies, a retried append is still a
duplicate, and tenant callers (real credentials) cannot write the reserved ``_memory`` task
or memory events.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import blake3
import pytest

from agentledger.client import Client
from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.contracts.codec import decode_event
from agentledger.core.detect import derive_marker_key, marker
from agentledger.core.validate import check_event, goal_hash
from agentledger.errors import AgentLedgerError
from agentledger.security import auth
from agentledger.security.kek_epochs import KekRing
from agentledger.security.sealing import Keyring, load_kek, unseal
from agentledger.services.ledger_writer.service import LedgerWriter
from tenant_agents import agent_client
from writer_support import ledger_messages, running_writer

AWS = "AKIAQ3EGRIT5KZ7XW4NB"
GHP = "ghp_" + "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5"
SLACK = "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
PASSWORD = "Tr0ub4dor&3x"
SECRETS = (AWS, GHP, SLACK, PASSWORD)


def event(event_id: str, kind: str, payload: dict[str, Any], task: str = "t1", tenant: str = "acme",
          producer: str = "agent-1", **extra: Any) -> dict[str, Any]:
    return {"kind": kind, "event_id": event_id, "tenant": tenant, "task_id": task, "producer": producer,
            "occurred_at": "2026-11-29T10:00:00Z", "schema_version": 1, "payload": payload, **extra}


def goal_event(text: str) -> dict[str, Any]:
    return event("c1", "task_created", {"goal": {"text": text, "acceptance_criteria": ["done"],
                                                 "goal_hash": goal_hash(text, ["done"])}})


def memory_event(event_id: str, task: str = ev.MEMORY_TASK, tenant: str = "acme",
                 producer: str = "memory-policy") -> dict[str, Any]:
    return event(event_id, "memory_proposed", {
        "proposal_id": event_id, "kind": "fact", "scope": {"level": "tenant", "tenant": tenant},
        "source": {"kind": "user_confirmed"}, "value": f"the deploy token is {GHP}"},
        task=task, tenant=tenant, producer=producer)


@pytest.fixture
async def writer(settings: Settings) -> AsyncIterator[tuple[LedgerWriter, Client]]:
    async with running_writer(settings) as stack:
        yield stack


async def stored_raw(settings: Settings) -> list[tuple[bytes, dict[str, str]]]:
    """Every message of the ledger stream: body and headers."""
    return [(body, headers) for _, body, headers in await ledger_messages(settings)]


async def test_no_secret_reaches_the_stream(writer: tuple[LedgerWriter, Client], settings: Settings) -> None:
    """A fake AWS key in a goal, a ghp_ token in a failure, password= in a question, a Slack token
    in a side-effect reference, secrets in a turn and a variable: stored with markers only."""
    _, client = writer
    await client.append(goal_event(f"deploy the site with key {AWS}"))
    await client.append_batch([
        event("e2", "step_failed", {"plan_version": 1, "step_id": "S1", "error_code": "auth",
                                    "message": f"bad credentials: {GHP}"}),
        event("e3", "question_opened", {"question_id": "q1", "text": f"is password={PASSWORD} right?"}),
        event("e4", "side_effect_recorded", {"step_id": "S1", "idempotency_key": "k1", "outcome": "applied",
                                             "external_ref": f"slack {SLACK}"}),
        event("e5", "variable_set", {"name": "env", "value": {"AWS_ACCESS_KEY_ID": AWS, "n": 1}}),
        event("e6", "turn_appended", {"role": "user", "ordinal": 1, "content": f"my token is {GHP}"},
              data_subject="u1"),
    ])
    messages = await stored_raw(settings)
    assert len(messages) == 6
    for body, headers in messages:
        for secret in SECRETS:
            assert secret.encode() not in body
            assert not any(secret in v for v in headers.values())
    events = [decode_event(body, "$") for body, _ in messages]
    check_event(events[0], "$")  # the redacted goal's recomputed hash verifies
    goal = events[0].payload.goal  # type: ignore[attr-defined]
    assert goal.text.startswith("deploy the site with key [REDACTED:aws_access_key:")
    assert "[REDACTED:github_token:" in events[1].payload.message  # type: ignore[attr-defined]
    assert "password=[REDACTED:credential:" in events[2].payload.text  # type: ignore[attr-defined]
    assert "[REDACTED:slack_token:" in events[3].payload.external_ref  # type: ignore[attr-defined]
    assert events[4].payload.value["n"] == 1  # type: ignore[attr-defined]
    # The turn is sealed; what was sealed is the redacted text.
    turn = events[5]
    keyring = Keyring(client.nc, settings.keys_bucket, KekRing.load(settings.kek_path))
    plain = await unseal(turn.payload.sealed, "acme", "t1", keyring)  # type: ignore[attr-defined]
    assert plain is not None and GHP.encode() not in plain and b"[REDACTED:github_token:" in plain


async def test_names_are_redacted_ids_refused_and_markers_keyed(writer: tuple[LedgerWriter, Client],
                                                                 settings: Settings) -> None:
    """Protects issue 26 item 8 through the real writer: a token in a trace id, a step's tool,
    an error code or a variable name never reaches the stream; a token in an event id refuses
    the append (nothing stored); markers carry the hash keyed with the installation's marker
    key (derived from the key-encryption key, outside the data folder), which a dictionary of
    guesses cannot check without it."""
    _, client = writer
    await client.append_batch([
        event("n1", "plan_versioned", {"plan_id": "p", "version": 1, "steps": [{"id": "S1", "tool": GHP}]},
              trace_id=f"trace {AWS}"),
        event("n2", "step_failed", {"plan_version": 1, "step_id": "S1", "error_code": SLACK, "message": "x"}),
        event("n3", "variable_set", {"name": f"db_{GHP}", "value": 1}),
    ])
    with pytest.raises(AgentLedgerError) as info:
        await client.append(event(GHP, "variable_set", {"name": "x", "value": 1}))
    assert (info.value.code, info.value.path) == ("secret_in_identifier", "$.events[0].event_id")
    messages = await stored_raw(settings)
    assert len(messages) == 3
    bodies = b"".join(body for body, _ in messages)
    for secret in (AWS, GHP, SLACK):
        assert secret.encode() not in bodies
    key = derive_marker_key(load_kek(settings.kek_path))
    assert marker("github_token", GHP, key).encode() in bodies
    assert marker("slack_token", SLACK, key).encode() in bodies
    assert f":{blake3.blake3(GHP.encode()).hexdigest()[:8]}]".encode() not in bodies


async def test_a_retried_append_is_still_a_duplicate(writer: tuple[LedgerWriter, Client],
                                                     settings: Settings) -> None:
    """The digest is of the redacted event, which is deterministic: a retry is recognised."""
    _, client = writer
    first = await client.append(goal_event(f"use {AWS}"))
    again = await client.append(goal_event(f"use {AWS}"))
    assert (again.seq, again.duplicate) == (first.seq, True)
    fast = event("e2", "step_failed", {"plan_version": 1, "step_id": "S1", "error_code": "x",
                                       "message": f"token {GHP}"})
    a = await client.append(fast)
    b = await client.append(fast)
    assert (b.seq, b.duplicate) == (a.seq, True)
    # The same id with another secret is another event: a conflict, not a silent duplicate.
    other = {**fast, "payload": {**fast["payload"], "message": f"token {GHP[:-1]}Q"}}
    with pytest.raises(AgentLedgerError) as info:
        await client.append(other)
    assert info.value.code == "event_id_conflict"
    assert len(await stored_raw(settings)) == 2


async def test_redaction_can_be_turned_off_for_the_benchmark(settings: Settings) -> None:
    async with running_writer(settings, redact_secrets=False) as (_, client):
        await client.append(goal_event(f"use {AWS}"))
    [(body, _)] = await stored_raw(settings)
    assert AWS.encode() in body


# ---- the reserved memory ledger --------------------------------------------------------------

@pytest.fixture
async def tenant_client(admin: Settings, writer: tuple[LedgerWriter, Client]) -> AsyncIterator[Client]:
    await auth.tenant_add(admin, "acme")
    client = await agent_client(admin, "acme", "agent-1", timeout=5)
    yield client
    await client.close()


async def _refused(client: Client, body: dict[str, Any]) -> tuple[str, str | None]:
    with pytest.raises(AgentLedgerError) as info:
        await client.append(body)
    return info.value.code, info.value.path


async def test_a_tenant_cannot_write_the_memory_ledger(tenant_client: Client, settings: Settings) -> None:
    assert await _refused(tenant_client, event("v1", "variable_set", {"name": "x", "value": 1},
                                               task=ev.MEMORY_TASK)) == ("reserved_task", "$.events[0].task_id")
    assert await _refused(tenant_client, event("v2", "variable_set", {"name": "x", "value": 1},
                                               task="_other")) == ("reserved_task", "$.events[0].task_id")
    assert await _refused(tenant_client, memory_event("m1", producer="agent-1")) == (
        "reserved_task", "$.events[0].task_id")
    assert await _refused(tenant_client, memory_event("m2", task="t1", producer="agent-1")) == (
        "reserved_kind", "$.events[0].kind")
    with pytest.raises(AgentLedgerError) as info:
        await tenant_client.acquire_lease("acme", ev.MEMORY_TASK, "agent-1")
    assert info.value.code == "reserved_task"
    # Ordinary appends of the tenant still work.
    ok = await tenant_client.append(event("v3", "variable_set", {"name": "x", "value": 1}))
    assert ok.duplicate is False
    assert len(await stored_raw(settings)) == 1


async def test_a_service_writes_memory_events_to_the_memory_task_only(
        writer: tuple[LedgerWriter, Client], settings: Settings) -> None:
    _, operator = writer
    ok = await operator.append(memory_event("m1"))
    assert ok.duplicate is False
    assert await _refused(operator, memory_event("m2", task="t1")) == ("reserved_kind", "$.events[0].kind")
    assert await _refused(operator, event("v1", "variable_set", {"name": "x", "value": 1},
                                          task=ev.MEMORY_TASK)) == ("reserved_task", "$.events[0].task_id")
    [(body, _)] = await stored_raw(settings)
    assert GHP.encode() not in body and b"[REDACTED:github_token:" in body
    assert json.loads(body)["task_id"] == ev.MEMORY_TASK
