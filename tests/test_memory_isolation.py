"""Memory isolation, tried as a hostile tenant would: real NATS users of two tenants and the operator.

Tenants ``acme`` and ``acme-corp`` (one name a prefix of the other), users
``u1`` and ``u10``, projects ``web`` and ``web2``: every pair shares a prefix,
so a scope matched by prefix instead of by exact identity would leak. Records
are written by the operator into every scope; agents read with the
credentials ``agentledger agent add`` issues and the bindings ``agentledger
agent bind`` writes. No read crosses a scope; a record outside the caller's
scopes never appears in its receipt, not even as a rejected candidate.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from agentledger.client import Client
from agentledger.config import Settings
from agentledger.errors import AgentLedgerError
from agentledger.security import auth, bindings
from agentledger.services.memory_policy.service import MemoryPolicy
from tenant_agents import agent_client
from ckpt_support import Stack
from helpers import assert_eventually
from test_memory_service import proposal

SCOPES = [("acme", "user", "u1"), ("acme", "user", "u10"), ("acme", "project", "web"),
          ("acme", "project", "web2"), ("acme-corp", "user", "u1"), ("acme-corp", "project", "web")]


@dataclass
class World:
    settings: Settings
    stack: Stack
    service: MemoryPolicy
    a1: Client  # acme agent bound to user u1 and project web
    a2: Client  # acme agent with no bindings
    corp: Client  # acme-corp agent bound to user u1 and project web
    records: dict[tuple[str, str, str], str]


@pytest.fixture
async def world(admin: Settings) -> AsyncIterator[World]:
    stack = await Stack(admin).start(checkpointer=False)
    service = MemoryPolicy(admin)
    await service.start()
    for tenant in ("acme", "acme-corp"):
        await auth.tenant_add(admin, tenant)
    await bindings.bind_agent(admin, "acme", "a1", ["u1"], ["web"])
    await bindings.bind_agent(admin, "acme-corp", "corp", ["u1"], ["web"])
    records = {}
    for tenant, level, ident in SCOPES:
        value = f"the shared secret word of {tenant} {level} {ident} is marmalade"
        reply = await stack.c.memory_propose(tenant, [proposal(f"{level}-{ident}", value, level=level,
                                                               scope_id=ident, key="secret word")])
        records[(tenant, level, ident)] = reply.decisions[0].record_id
    agents = [await agent_client(admin, "acme", "a1"), await agent_client(admin, "acme", "a2"),
              await agent_client(admin, "acme-corp", "corp")]
    try:
        yield World(admin, stack, service, *agents, records)
    finally:
        for client in agents:
            await client.close()
        await service.stop()
        await stack.stop()


def _seen(reply: object) -> set[str]:
    receipt = reply.receipt  # type: ignore[attr-defined]
    return {c.record_id for c in receipt.candidates} | {i.record_id for i in reply.items}  # type: ignore[attr-defined]


async def _code(coro: object) -> tuple[str, str | None]:
    with pytest.raises(AgentLedgerError) as info:
        await coro  # type: ignore[misc]
    return info.value.code, info.value.path


async def test_no_read_crosses_a_scope_and_no_foreign_hit_reaches_a_receipt(world: World) -> None:
    """An agent bound to u1 and web sees exactly those records of its own tenant, by key, by full text
    and by vector; u10, web2 and everything of acme-corp are absent even from the receipt."""
    mine = {world.records[("acme", "user", "u1")], world.records[("acme", "project", "web")]}

    async def read() -> object:
        return await world.a1.memory_read("acme", "shared secret word marmalade", key="secret word",
                                          user_id="u1", project_id="web", k=20)
    reply = await assert_eventually(read)  # the binding watch may lag the bind by a moment
    assert {i.record_id for i in reply.items} <= mine
    assert _seen(reply) == mine, _seen(reply)
    corp = await world.corp.memory_read("acme-corp", "shared secret word marmalade", key="secret word",
                                        user_id="u1", project_id="web", k=20)
    assert _seen(corp) == {world.records[("acme-corp", "user", "u1")],
                           world.records[("acme-corp", "project", "web")]}
    # An unbound agent of acme sees only tenant, task and session scopes: none of these records.
    bare = await world.a2.memory_read("acme", "shared secret word marmalade", key="secret word", k=20)
    assert _seen(bare) == set()


async def test_an_agent_cannot_name_an_unbound_user_or_project_or_another_tenant(world: World) -> None:
    """Scopes come from the caller: naming u10, web2 or the other tenant is refused, for reads,
    proposals, key lookups and receipts, and nothing is written."""
    c = world.a1
    last = await world.stack.last_seq()
    assert await _code(c.memory_read("acme", "secret", user_id="u10")) == ("scope_not_allowed", "$.user_id")
    assert await _code(c.memory_read("acme", "secret", project_id="web2")) == ("scope_not_allowed", "$.project_id")
    assert (await _code(c.memory_read("acme-corp", "secret")))[0] == "tenant_mismatch"
    assert await _code(c.memory_propose("acme", [proposal("x", "u10 likes tea", kind="preference",
                                                          level="user", scope_id="u10",
                                                          source="user_confirmed")])) == \
        ("scope_not_allowed", "$.proposals[0].scope.id")
    assert (await _code(c.memory_propose("acme-corp", [proposal("y", "v", key="k")])))[0] == "tenant_mismatch"
    assert await _code(c.memory_get("acme", "secret word", "user", "u10")) == ("scope_not_allowed", "$.scope.id")
    assert await _code(c.memory_feedback("acme", world.records[("acme", "user", "u10")], "revoke", "f1")) == \
        ("scope_not_allowed", "$.record_id")
    corp_record = world.records[("acme-corp", "user", "u1")]
    assert (await _code(c.memory_feedback("acme", corp_record, "revoke", "f2")))[0] == "not_found"
    assert await world.stack.last_seq() == last


async def test_receipts_are_the_callers_own(world: World) -> None:
    """An agent lists the receipts of its own reads only; the operator sees every agent's."""
    await world.a1.memory_read("acme", "secret word", key="secret word", user_id="u1", task_id="job1")
    await world.a2.memory_read("acme", "secret word", key="secret word", task_id="job1")
    own = await world.a1.memory_receipts("acme", task_id="job1")
    assert [r.caller for r in own.receipts] == ["a1"]
    every = await world.stack.c.memory_receipts("acme", task_id="job1")
    assert sorted(r.caller for r in every.receipts) == ["a1", "a2"]
    assert (await _code(world.corp.memory_receipts("acme", task_id="job1")))[0] == "tenant_mismatch"
