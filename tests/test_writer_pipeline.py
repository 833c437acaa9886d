"""Appends of one task without a lease or an expectation are pipelined, in arrival order.

The writer hands such appends to the group committer without taking the task's
lease lock; these tests pin what that must not change: per-task order in the
ledger is the order the writer received the requests in (also when a
coalesced batch is split because one caller resent a stored id), and a lease
granted while unlocked appends are in flight never has an unfenced event of a
tenant agent stored after it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from agentledger.client import Client, connect
from agentledger.config import Settings
from agentledger.security import auth
from agentledger.services.ledger_writer.service import LedgerWriter, append_subject
from test_writer import created, event, stored


@pytest.fixture
async def writer(settings: Settings) -> AsyncIterator[tuple[LedgerWriter, Client]]:
    w = LedgerWriter(settings)
    await w.start()
    c = await connect(settings, timeout=30)
    yield w, c
    await c.close()
    await w.stop()


async def send_in_order(client: Client, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Send every append request before awaiting any reply: they reach the writer in list order
    (one connection), so that is their arrival order. The replies, in the same order."""
    subject = append_subject(client.settings.prefix)
    requests = [asyncio.ensure_future(client.nc.request(subject, json.dumps(b).encode(), timeout=30))
                for b in bodies]
    return [json.loads(m.data) for m in await asyncio.gather(*requests)]


async def test_concurrent_appends_of_one_task_are_stored_in_arrival_order(
        writer: tuple[LedgerWriter, Client], settings: Settings) -> None:
    """Rounds of 200 single events of one task sent at once, one of them a resend of a stored id
    (which sinks the atomic batch it is coalesced into, so the batch is split and its units are
    committed again): the new events are stored once each, in the order they were sent, and the
    resend answers duplicate with the original sequence."""
    _, client = writer
    await client.append(created())
    original = await client.append(event("kept"))
    for r in range(5):
        bodies: list[dict[str, Any]] = [{"events": [event(f"r{r}e{i}")]} for i in range(200)]
        bodies[60 + r] = {"events": [event("kept")]}
        replies = await send_in_order(client, bodies)
        assert all(reply["ok"] for reply in replies), [r for r in replies if not r["ok"]][:1]
        assert replies[60 + r]["results"] == [{"event_id": "kept", "seq": original.seq,
                                                "duplicate": True}]
    ids = [body["event_id"] for _, body in await stored(settings)]
    expected = ["c1", "kept"] + [f"r{r}e{i}" for r in range(5) for i in range(200) if i != 60 + r]
    assert ids == expected


async def test_a_grant_never_lands_before_unfenced_appends_accepted_without_the_lock(
        writer: tuple[LedgerWriter, Client], settings: Settings) -> None:
    """A tenant agent streams unfenced appends while another agent of the tenant takes the lease,
    200 times on fresh tasks: every grant succeeds, every append is either stored before the grant
    or refused ``fencing_token_required``, and none without a token is stored after a grant."""
    if settings.auth_dir is None:
        pytest.skip("the NATS server runs without accounts")
    _, operator = writer
    await auth.tenant_add(settings, "acme")
    agents = []
    for name in ("agent-1", "agent-2"):
        creds = await auth.agent_add(settings, "acme", name)
        agents.append(await connect(msgspec.structs.replace(settings, nats_creds=creds), timeout=30))
    appender, executor = agents
    try:
        outcomes: set[str] = set()
        for trial in range(200):
            task = f"t{trial}"
            await operator.append({**created(task=task), "producer": "agent-1"})
            bodies = [{"events": [event(f"e{i}", task=task)]} for i in range(12)]
            appends = asyncio.ensure_future(send_in_order(appender, bodies))
            grant = await executor.acquire_lease("acme", task, "agent-2")
            for reply in await appends:
                outcomes.add("stored" if reply["ok"] else reply["error"]["code"])
            assert outcomes <= {"stored", "fencing_token_required"}
        ledger = await stored(settings)
        granted_at: dict[str, int] = {}
        for seq, body in ledger:
            if body["kind"] == "lease_granted":
                granted_at[body["task_id"]] = seq
        assert len(granted_at) == 200
        late = [(seq, body["event_id"]) for seq, body in ledger
                if body["kind"] == "variable_set" and seq > granted_at[body["task_id"]]]
        assert late == []
        assert grant.token == granted_at["t199"]
    finally:
        for c in agents:
            await c.close()
