"""What the MCP server refuses, tried through the SDK's in-memory ``Client`` against the real stack.

* Another tenant's ids (a record, a key, a task, a generation, a forget request) through every tool
  that takes one: a typed refusal or nothing of the other tenant, never its data.
* Bad input through every tool: wrong types, unknown ids, a 10 MB value, U+0000, a ``tenant``
  argument. Each is a typed error (code and JSON path), and nothing is stored: the ledger, the
  memory records and receipts, the generations and the forget requests are as they were.
"""

from __future__ import annotations

from typing import Any

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from agentledger.config import Settings
from ckpt_support import Stack
from test_mcp_server import OTHER, TENANT, TOOLS, World, built_once_bound, fact, ok, refused, seed_task, world

__all__ = ["world"]  # the fixture, shared with test_mcp_server

TEN_MB = "x" * (10 * 1024 * 1024)
NUL = "bad\x00value"

# (tool, arguments, expected code, expected path); every tool appears in each kind of bad input.
WRONG_TYPES = [
    ("recall", {"query": "q", "k": "5"}, "invalid_type", "$.k"),
    ("remember", fact("p-wt", "v") | {"subject_version": "two"}, "invalid_type", "$.subject_version"),
    ("history", {"key": 5, "scope": {"level": "tenant"}}, "invalid_type", "$.key"),
    ("feedback", {"record_id": 7, "action": "confirm", "feedback_id": "f"}, "invalid_type", "$.record_id"),
    ("forget", {"selector": "everything"}, "invalid_type", "$.selector"),
    ("forget_receipt", {"request_id": ["fg"]}, "invalid_type", "$.request_id"),
    ("build", {"task_id": "chat", "input_ordinal": 7, "window_tokens": "big"}, "invalid_type",
     "$.window_tokens"),
    ("trace", {"generation_id": 1}, "invalid_type", "$.generation_id"),
    ("state", {"task_id": {"id": "chat"}}, "invalid_type", "$.task_id"),
    ("resume", {"task_id": "chat", "executor": "a1", "lease_ttl_s": "long"}, "invalid_type", "$.lease_ttl_s"),
]
NULS = [
    ("recall", {"query": NUL}, "$.query"),
    ("remember", fact("p-nul", NUL), "$.value"),
    ("history", {"key": NUL, "scope": {"level": "tenant"}}, "$.key"),
    ("feedback", {"record_id": "mem_x", "action": "revoke", "feedback_id": "f", "reason": NUL}, "$.reason"),
    ("forget", {"selector": {"kind": "key", "key": NUL}}, "$.selector.key"),
    ("forget_receipt", {"subject": NUL}, "$.subject"),
    ("build", {"task_id": "chat", "input_ordinal": 7, "window_tokens": 4000, "memory_query": NUL}, "$.memory_query"),
    ("trace", {"generation_id": NUL}, "$.generation_id"),
    ("state", {"task_id": NUL}, "$.task_id"),
    ("resume", {"task_id": "chat", "executor": NUL}, "$.executor"),
]
HUGE = [
    ("recall", {"query": TEN_MB}, "invalid_value", "$.query"),
    ("remember", fact("p-huge", TEN_MB), "request_too_large", "$"),
    ("history", {"key": TEN_MB, "scope": {"level": "tenant"}}, "invalid_value", "$.key"),
    ("feedback", {"record_id": "mem_x", "action": "correct", "feedback_id": "f", "value": TEN_MB},
     "request_too_large", "$"),
    ("forget", {"selector": {"kind": "record", "record_id": "mem_x"}, "reason": TEN_MB}, "invalid_value",
     "$.reason"),
    ("forget_receipt", {"request_id": TEN_MB}, "invalid_value", "$.request_id"),
    ("build", {"task_id": "chat", "input_ordinal": 7, "window_tokens": 4000,
               "system": [{"name": "rules", "text": TEN_MB}]}, "invalid_value", "$.system[0].text"),
    ("trace", {"generation_id": TEN_MB}, "invalid_value", "$.generation_id"),
    ("state", {"task_id": TEN_MB}, "invalid_value", "$.task_id"),
    ("resume", {"task_id": "chat", "executor": "a1", "accept_erased": [TEN_MB]}, "invalid_value",
     "$.accept_erased[0]"),
]
# A valid call of each tool: with a ``tenant`` argument added, each is refused.
VALID: dict[str, dict[str, Any]] = {
    "recall": {"query": "q"}, "remember": fact("p-ok", "v"),
    "history": {"key": "k", "scope": {"level": "tenant"}},
    "feedback": {"record_id": "mem_x", "action": "confirm", "feedback_id": "f"},
    "forget": {"selector": {"kind": "task", "task_id": "chat"}}, "forget_receipt": {"request_id": "fg"},
    "build": {"task_id": "chat", "input_ordinal": 7, "window_tokens": 4000},
    "trace": {"generation_id": "g"}, "state": {"task_id": "chat"},
    "resume": {"task_id": "chat", "executor": "a1"},
}
UNKNOWN_IDS = [
    ("feedback", {"record_id": "mem_000000000000000000000000", "action": "confirm", "feedback_id": "f-u"},
     "not_found"),
    ("forget_receipt", {"request_id": "fg-never"}, "not_found"),
    ("trace", {"generation_id": "gen-never"}, "not_found"),
    ("state", {"task_id": "never"}, "not_found"),
    ("build", {"task_id": "never", "input_ordinal": 1, "window_tokens": 4000}, "not_found"),
    ("resume", {"task_id": "never", "executor": "a1"}, "task_not_found"),
]


async def stored(stack: Stack) -> tuple[int, ...]:
    """What a refused call must not change: the ledger's last sequence and the rows of memory,
    receipts, generations and forget requests."""
    assert stack.db is not None
    counts = [await stack.db.fetchval(f"SELECT count(*) FROM {table}")
              for table in ("memory_records", "memory_receipts", "context_generations", "forget_requests")]
    return (await stack.last_seq(), *counts)


def test_every_tool_is_tried_with_each_kind_of_bad_input() -> None:
    """The tables above cover every tool (a new tool without a bad-input case fails here)."""
    for cases in (WRONG_TYPES, NULS, HUGE, list(VALID.items())):
        assert {c[0] for c in cases} == TOOLS


async def test_bad_input_through_every_tool_is_a_typed_error_and_stores_nothing(world: World) -> None:
    """Wrong types, U+0000, 10 MB values and a ``tenant`` argument, through each tool."""
    async with Client(world.server(), raise_exceptions=True) as c:
        before = await stored(world.stack)
        bad = []
        for tool, arguments, code, path in WRONG_TYPES + HUGE + [(t, a, "invalid_text", p) for t, a, p in NULS]:
            got = refused(await c.call_tool(tool, arguments))
            if got != (code, path):
                bad.append((tool, code, path, got))
        assert not bad, bad
        for tool, arguments in VALID.items():
            assert refused(await c.call_tool(tool, arguments | {"tenant": OTHER})) == \
                ("unknown_field", "$.tenant"), tool
        assert await stored(world.stack) == before


async def test_unknown_ids_are_typed_errors_that_store_nothing(world: World) -> None:
    """A record, forget request, generation or task that does not exist is ``not_found`` (a resume
    of one ``task_not_found``)."""
    async with Client(world.server(), raise_exceptions=True) as c:
        before = await stored(world.stack)
        for tool, arguments, code in UNKNOWN_IDS:
            assert refused(await c.call_tool(tool, arguments))[0] == code, tool
        assert await stored(world.stack) == before


@pytest.fixture
async def foreign(world: World) -> dict[str, str]:
    """globex's record, key, task, generation and forget request, made by the operator."""
    c = world.stack.c
    await seed_task(world.stack, OTHER, "g-chat")
    decision = (await c.memory_propose(OTHER, [fact("g-1", "globex ships on Fridays", key="release day")])).decisions[0]
    generation = await c.build_context(OTHER, "g-chat", 7, window_tokens=4000)
    other = await c.memory_propose(OTHER, [fact("g-2", "globex uses Postgres 16", key="database")])
    request = await c.forget(OTHER, {"kind": "record", "record_id": other.decisions[0].record_id},
                             request_id="fg-globex")
    await c.forget_wait(OTHER, request.request_id)  # its fan-out appends as it goes: let it finish
    await world.stack.projected()
    return {"record": decision.record_id or "", "key": "release day", "task": "g-chat",
            "generation": generation.generation_id, "request": request.request_id}


async def test_another_tenants_ids_are_refused_through_every_tool(world: World, foreign: dict[str, str]) -> None:
    """acme's server, given globex's ids, refuses each with a typed error (or finds nothing of
    globex), and changes nothing of globex."""
    async with Client(world.server(), raise_exceptions=True) as c:
        before = await stored(world.stack)
        assert refused(await c.call_tool("feedback", {"record_id": foreign["record"], "action": "revoke",
                                                      "feedback_id": "steal"}))[0] == "not_found"
        assert refused(await c.call_tool("trace", {"generation_id": foreign["generation"]}))[0] == "not_found"
        assert refused(await c.call_tool("state", {"task_id": foreign["task"]}))[0] == "not_found"
        assert refused(await c.call_tool("resume", {"task_id": foreign["task"],
                                                    "executor": "a1"}))[0] == "task_not_found"
        assert refused(await c.call_tool("forget_receipt", {"request_id": foreign["request"]}))[0] == "not_found"
        assert refused(await c.call_tool("build", {"task_id": foreign["task"], "input_ordinal": 7,
                                                   "window_tokens": 4000}))[0] == "not_found"
        for uri in (f"agentledger://generations/{foreign['generation']}/trace",
                    f"agentledger://tasks/{foreign['task']}/working-memory"):
            with pytest.raises(MCPError) as info:
                await c.read_resource(uri)
            assert (info.value.code, info.value.data["code"]) == (INVALID_PARAMS, "not_found"), uri
        assert await stored(world.stack) == before
        # Reads search acme only: globex's record is neither returned nor a candidate in the receipt.
        hist = ok(await c.call_tool("history", {"key": foreign["key"], "scope": {"level": "tenant"}}))
        assert hist.get("history", []) == [] and hist.get("records", []) == []
        read = ok(await c.call_tool("recall", {"query": "globex ships on Fridays release day",
                                               "key": foreign["key"]}))
        seen = {i["record_id"] for i in read["items"]} | {x["record_id"] for x in read["candidates"]}
        assert foreign["record"] not in seen
    record = await world.stack.c.memory_get(OTHER, foreign["key"], "tenant")
    assert [(r.record_id, r.status) for r in record.records] == [(foreign["record"], "active")]


async def test_a_server_for_one_tenant_cannot_be_pointed_at_another(world: World) -> None:
    """acme's credentials with ``--tenant globex``: every call is refused (``tenant_mismatch``) by
    the services, which trust the connection, not the server's configuration."""
    async with Client(world.server(world.agent, OTHER), raise_exceptions=True) as c:
        before = await stored(world.stack)
        assert refused(await c.call_tool("recall", {"query": "anything"}))[0] == "tenant_mismatch"
        assert refused(await c.call_tool("remember", fact("x-1", "v")))[0] == "tenant_mismatch"
        assert refused(await c.call_tool("state", {"task_id": "chat"}))[0] == "tenant_mismatch"
        assert await stored(world.stack) == before


async def test_operator_credentials_are_not_accepted(admin: Settings) -> None:
    """The server acts as one agent; without agent credentials it does not start."""
    from agentledger.adapters.mcp import AgentIdentity  # noqa: PLC0415
    from agentledger.errors import PermissionDeniedError  # noqa: PLC0415

    with pytest.raises(PermissionDeniedError) as info:
        AgentIdentity(admin, TENANT)
    assert info.value.code == "agent_credentials_required"


async def test_the_agent_still_works_after_the_refusals(world: World) -> None:
    """Refusals leave the session usable: a valid call after them succeeds."""
    async with Client(world.server(), raise_exceptions=True) as c:
        refused(await c.call_tool("state", {"task_id": NUL}))
        built = await built_once_bound(c, {"task_id": "chat", "input_ordinal": 7, "window_tokens": 4000})
        assert built["generation_id"]
