"""Leases and fencing tokens enforced by the ledger-writer, on real NATS.

Exactly one executor holds a task's lease at a time; tokens only grow; guarded
events with a stale token, or without one while the task is leased, are refused.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentledger.client import Client, connect
from agentledger.config import Settings
from agentledger.errors import AgentLedgerError
from agentledger.services.ledger_writer.service import LedgerWriter
from helpers import assert_eventually
from test_writer import created, event


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[Client]:
    w = LedgerWriter(settings)
    await w.start()
    c = await connect(settings)
    yield c
    await c.close()
    await w.stop()


async def lease(client: Client, action: str, **body: Any) -> dict[str, Any]:
    msg = await client.nc.request(f"{client.settings.prefix}.lease.{action}",
                                  json.dumps({"tenant": "acme", "task_id": "t1", **body}).encode())
    return json.loads(msg.data)


async def test_one_executor_wins_the_lease_and_tokens_grow(client: Client) -> None:
    """Two executors asking at once: one lease; after release the next grant has a higher token."""
    a, b = await asyncio.gather(lease(client, "acquire", holder="exec-a", ttl_s=30),
                                lease(client, "acquire", holder="exec-b", ttl_s=30))
    assert sorted([a["ok"], b["ok"]]) == [False, True]
    winner, loser = (a, b) if a["ok"] else (b, a)
    assert loser["error"]["code"] == "lease_held"
    assert winner["lease"]["token"] == 1
    released = await lease(client, "release", holder=winner["lease"]["holder"], token=1)
    assert released["ok"] is True
    again = await lease(client, "acquire", holder=loser_holder(winner), ttl_s=30)
    assert again["lease"]["token"] == 2


def loser_holder(winner: dict[str, Any]) -> str:
    return "exec-b" if winner["lease"]["holder"] == "exec-a" else "exec-a"


async def test_stale_and_missing_fencing_tokens_are_refused(client: Client) -> None:
    """Once leased, guarded events need the live token; an old holder's token is stale."""
    await client.append(created())
    first = (await lease(client, "acquire", holder="exec-a", ttl_s=30))["lease"]
    await client.append(event("v1", fencing_token=first["token"]))
    await lease(client, "release", holder="exec-a", token=first["token"])
    second = (await lease(client, "acquire", holder="exec-b", ttl_s=30))["lease"]
    with pytest.raises(AgentLedgerError) as stale:
        await client.append(event("v2", fencing_token=first["token"]))
    assert (stale.value.code, stale.value.path) == ("stale_fencing_token", "$.events[0].fencing_token")
    with pytest.raises(AgentLedgerError) as missing:
        await client.append(event("v3"))
    assert missing.value.code == "fencing_token_required"
    ok = await client.append(event("v4", fencing_token=second["token"]))
    assert ok.duplicate is False
    turn = event("turn1", "turn_appended", {"role": "user", "ordinal": 1, "content": "hi"},
                 data_subject="u1")
    assert (await client.append(turn)).duplicate is False  # conversation is not guarded


async def test_expired_lease_lapses_and_the_next_executor_takes_over(client: Client) -> None:
    """A dead executor's lease expires; the next one gets a higher token and the old one is refused."""
    await client.append(created())
    dead = (await lease(client, "acquire", holder="exec-a", ttl_s=0.2))["lease"]
    async def taken() -> dict[str, Any] | None:
        reply = await lease(client, "acquire", holder="exec-b", ttl_s=30)
        return reply["lease"] if reply["ok"] else None
    new = await assert_eventually(taken, timeout=10)
    assert new["token"] == dead["token"] + 1
    renewal = await lease(client, "renew", holder="exec-a", token=dead["token"], ttl_s=30)
    assert renewal["error"]["code"] == "lease_lost"
    with pytest.raises(AgentLedgerError) as stale:
        await client.append(event("late", fencing_token=dead["token"]))
    assert stale.value.code == "stale_fencing_token"


async def test_renew_extends_only_the_holders_live_lease(client: Client) -> None:
    """Renewal keeps the token and moves the expiry; a wrong token or holder is refused."""
    got = (await lease(client, "acquire", holder="exec-a", ttl_s=5))["lease"]
    renewed = await lease(client, "renew", holder="exec-a", token=got["token"], ttl_s=60)
    assert renewed["lease"]["token"] == got["token"]
    assert renewed["lease"]["expires_at"] > got["expires_at"]
    wrong = await lease(client, "renew", holder="exec-b", token=got["token"], ttl_s=60)
    assert wrong["error"]["code"] == "lease_lost"
    no_token = await lease(client, "renew", holder="exec-a", ttl_s=60)
    assert (no_token["error"]["code"], no_token["error"]["path"]) == ("missing_field", "$.token")
