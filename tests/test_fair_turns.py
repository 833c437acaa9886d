"""A flooding tenant's backlog never stands in front of a quiet tenant's append (issue 49, item 1).

The scheduler alone (``shell.turns``: deficit round robin over per-tenant queues) and then the
real writer with two tenants' agents: one sends hundreds of appends without waiting for any
reply, the other one append; the quiet one's reply comes back before most of the flood's,
where arrival order (one subscription, served first come first served) put it behind all of
them. Nothing here measures time: only who is answered before whom.
"""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from agentledger.config import Settings
from agentledger.contracts.api import AppendReply
from agentledger.errors import ContractError
from agentledger.security import auth
from agentledger.services.ledger_writer.service import LedgerWriter
from agentledger.shell.turns import QUANTUM, Turns, parse_weights, turn_key
from ckpt_support import created, variable
from tenant_agents import agent_client

FLOOD = 400


async def test_turns_serve_a_quiet_key_at_the_next_visit_and_busy_ones_by_weight() -> None:
    """Two busy keys share by weight (3:1 in bytes taken); a key that arrives late is served at
    the next visit, not after the backlog; order within a key is arrival order."""
    served: list[tuple[str, int]] = []

    async def handle(item: tuple[str, int]) -> None:
        served.append(item)
        await asyncio.sleep(0)

    turns = Turns(handle, size=lambda item: QUANTUM // 4, weight=lambda key: 3.0 if key == "a" else 1.0)
    for i in range(200):
        turns.put("a", ("a", i))
        turns.put("b", ("b", i))
    runner = asyncio.create_task(turns.run())
    while len(served) < 40:  # noqa: ASYNC110 - counting the scheduler's own steps
        await asyncio.sleep(0)
    turns.put("quiet", ("quiet", 0))
    while ("quiet", 0) not in served:  # noqa: ASYNC110
        await asyncio.sleep(0)
    at = served.index(("quiet", 0))
    assert at < 40 + 12 + 4  # behind at most one visit of each busy key
    first = served[:160]
    a, b = sum(k == "a" for k, _ in first), sum(k == "b" for k, _ in first)
    assert 2.5 <= a / b <= 3.5, (a, b)
    for key in ("a", "b"):
        mine = [i for k, i in served if k == key]
        assert mine == sorted(mine)
    runner.cancel()


def test_weights_parse_and_bad_ones_are_refused_naming_the_setting() -> None:
    assert parse_weights("acme=3, beta=0.5") == {"acme": 3.0, "beta": 0.5}
    assert parse_weights("") == {}
    for bad in ("acme", "acme=0", "=2", "acme=x"):
        with pytest.raises(ContractError) as info:
            parse_weights(bad)
        assert (info.value.code, info.value.path) == ("invalid_config", "AGENTLEDGER_TENANT_WEIGHTS")


def test_a_request_takes_the_turn_of_its_account_or_of_the_agent_a_service_acts_for() -> None:
    assert turn_key(None) == "operator"
    assert turn_key({"Nats-Request-Info": '{"acc":"ABC","rtt":"1ms"}'}) == "acc:ABC"
    assert turn_key({"Agentledger-On-Behalf-Of": "acme/agent-1"}) == "for:acme"
    assert turn_key({"Nats-Request-Info": "not json"}) == "operator"


async def test_a_quiet_tenants_append_is_not_queued_behind_a_flood(settings: Settings) -> None:
    if settings.auth_dir is None:
        pytest.skip("the NATS server runs without accounts")
    writer = LedgerWriter(settings)
    await writer.start()
    await auth.tenant_add(settings, "flood")
    await auth.tenant_add(settings, "quiet")
    flood = await agent_client(settings, "flood", "agent-1")
    quiet = await agent_client(settings, "quiet", "agent-1")
    try:
        await flood.append(created("f", tenant="flood", producer="agent-1"))
        await quiet.append(created("q", tenant="quiet", producer="agent-1"))
        order: list[str] = []
        subject = f"{settings.prefix}.writer.append"

        async def send(client: object, body: dict[str, object], who: str) -> None:
            msg = await client.nc.request(subject, msgspec.json.encode(body), timeout=120)  # type: ignore[attr-defined]
            reply = msgspec.json.decode(msg.data, type=AppendReply)
            assert reply.ok, reply.error
            order.append(who)

        # Appends the writer takes a while over (their text is scanned for secrets), sent
        # without waiting: a backlog builds in the writer.
        text = " ".join(f"line {i} of the build log, step {i % 13} passed" for i in range(250))
        floods = [asyncio.create_task(send(flood, {"events": [
            variable("f", "x", f"{i} {text}", tenant="flood", producer="agent-1")]}, "flood")) for i in range(FLOOD)]
        while writer._turns.waiting() < FLOOD // 4:
            assert len(order) < FLOOD, "no backlog built"
            await asyncio.sleep(0.001)
        backlog, answered = writer._turns.waiting(), len(order)
        await send(quiet, {"events": [variable("q", "y", 1, tenant="quiet", producer="agent-1")]}, "quiet")
        behind = order.index("quiet") - answered
        await asyncio.gather(*floods)
        # First come first served would answer the whole backlog before it.
        assert behind < backlog // 2, (behind, backlog)
    finally:
        await flood.close()
        await quiet.close()
        await writer.stop()
