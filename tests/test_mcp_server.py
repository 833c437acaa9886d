"""The MCP server through the SDK's in-memory ``Client``: real NATS JetStream and PostgreSQL, the
services in process, the server acting as a tenant agent's credentials.

* Every tool is listed with the contract's schemas (no ``tenant`` anywhere in an input) and each
  one is called, its structured result checked by the SDK client against the advertised output
  schema; a read's receipt and a forget's deletion receipt come back through the tools.
* The resources (a task's Working Memory, a generation's trace) read as the same identity.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import msgspec
import pytest
from mcp import Client
from mcp_types import CallToolResult

from agentledger.adapters.mcp import AgentIdentity, build_server
from agentledger.adapters.mcp.tools import SPECS
from agentledger.config import Settings
from agentledger.contracts.forget_api import RequestProgress
from agentledger.core.forget import verify_receipt
from agentledger.security import auth, bindings
from ckpt_support import Stack, created, event
from helpers import assert_eventually

TENANT = "acme"
OTHER = "globex"
TOOLS = {"recall", "remember", "history", "feedback", "forget", "forget_receipt", "build", "trace",
         "state", "resume"}


def turn(tenant: str, task: str, ordinal: int, text: str) -> dict[str, Any]:
    body = event("turn_appended", {"role": "user" if ordinal % 2 else "assistant", "ordinal": ordinal,
                                   "content": text}, task, tenant=tenant)
    return body | {"data_subject": f"{tenant}-person"}  # a turn is personal content: keyed to its subject


async def seed_task(stack: Stack, tenant: str, task: str) -> None:
    """A task with a conversation of eight turns and a checkpoint, as an agent's run leaves it."""
    await stack.append([created(task, tenant=tenant)]
                       + [turn(tenant, task, i, f"{tenant} turn {i}: we looked at log excerpt {i} and it "
                                                "showed nothing new about the stuck list") for i in range(1, 9)])
    await stack.projected()
    await stack.c.save_checkpoint(tenant, task)


@dataclass
class World:
    settings: Settings
    stack: Stack
    agent: Settings  # acme's agent a1
    other: Settings  # globex's agent g1

    def server(self, settings: Settings | None = None, tenant: str = TENANT) -> Any:
        return build_server(AgentIdentity(settings or self.agent, tenant))


@pytest.fixture
async def world(admin: Settings) -> AsyncIterator[World]:
    stack = await Stack(admin).start(checkpointer=True, memory=True, context=True, tombstone=True)
    try:
        for tenant in (TENANT, OTHER):
            await auth.tenant_add(admin, tenant)
        a1 = await auth.agent_add(admin, TENANT, "a1")
        # The conversation is personal content of its user: the agent must be bound to read it.
        await bindings.bind_agent(admin, TENANT, "a1", users=[f"{TENANT}-person"], projects=[])
        g1 = await auth.agent_add(admin, OTHER, "g1")
        await seed_task(stack, TENANT, "chat")
        yield World(admin, stack, msgspec.structs.replace(admin, nats_creds=a1),
                    msgspec.structs.replace(admin, nats_creds=g1))
    finally:
        await stack.stop()


def ok(result: CallToolResult) -> Any:
    """The structured result of a call that must have succeeded."""
    assert not result.is_error, result.content
    return result.structured_content


def refused(result: CallToolResult) -> tuple[str, str | None]:
    """The typed code and path of a call that must have been refused."""
    assert result.is_error, result.structured_content
    error = result.structured_content["error"]
    assert result.content[0].text.startswith(f"{error['code']}: ")  # type: ignore[union-attr]
    return error["code"], error.get("path")


async def built_once_bound(c: Client, arguments: dict[str, Any]) -> Any:
    """``build``, once the services have seen the agent's binding to the conversation's user (their
    binding watch may lag the bind by a moment; every other refusal fails the test)."""

    async def attempt() -> Any:
        result = await c.call_tool("build", arguments)
        if result.is_error and refused(result)[0] == "subject_not_bound":
            return None
        return ok(result)

    return await assert_eventually(attempt, message="the binding never reached the context-builder")


def fact(pid: str, value: str, **extra: Any) -> dict[str, Any]:
    return {"proposal_id": pid, "kind": "fact", "scope": {"level": "tenant"},
            "source": {"kind": "runtime_evidence"}, "value": value, **extra}


async def test_the_tools_and_resources_are_listed_with_the_contract_schemas(world: World) -> None:
    """Ten tools, each with an object input schema taken from its contract minus the tenant and an
    output schema; the two resource templates."""
    async with Client(world.server(), raise_exceptions=True) as client:
        tools = (await client.list_tools()).tools
        templates = (await client.list_resource_templates()).resource_templates
    assert {t.name for t in tools} == TOOLS
    for tool in tools:
        assert tool.input_schema["type"] == "object", tool.name
        assert "tenant" not in tool.input_schema.get("properties", {}), tool.name
        assert tool.output_schema is not None and tool.output_schema["type"] == "object", tool.name
    by_name = {t.name: t for t in tools}
    # The contract's limits reach the host: ReadRequest.k is 1..100, a Proposal needs its id.
    assert by_name["recall"].input_schema["properties"]["k"]["anyOf"][0] == {
        "type": "integer", "minimum": 1, "maximum": 100}
    assert set(by_name["remember"].input_schema["required"]) == {"proposal_id", "kind", "scope", "source",
                                                                "value"}
    assert by_name["recall"].annotations.read_only_hint is True  # type: ignore[union-attr]
    assert by_name["forget"].annotations.destructive_hint is True  # type: ignore[union-attr]
    assert {t.uri_template for t in templates} == {"agentledger://tasks/{task_id}/working-memory",
                                                   "agentledger://generations/{generation_id}/trace"}
    assert {s.name for s in SPECS} == TOOLS


async def test_every_tool_answers_through_the_in_memory_client(world: World) -> None:
    """remember -> recall (with a receipt the operator can fetch) -> history -> feedback; build ->
    trace; state; resume; forget -> forget_receipt until the signed deletion receipt, after which
    recall no longer returns the record."""
    async with Client(world.server(), raise_exceptions=True) as c:
        decision = ok(await c.call_tool("remember", fact("mcp-1", "The staging cluster runs Kubernetes 1.30",
                                                         key="staging k8s version")))
        assert decision["action"] == "write" and decision["record_id"], decision
        assert decision["trace"], "the rules that fired come back with the decision"
        record = decision["record_id"]

        read = ok(await c.call_tool("recall", {"query": "which kubernetes version runs on staging",
                                               "task_id": "chat"}))
        assert [i["record_id"] for i in read["items"]] == [record]
        assert read["items"][0]["value"] == "The staging cluster runs Kubernetes 1.30"
        [candidate] = [x for x in read["candidates"] if x["record_id"] == record]
        assert candidate["outcome"] == "selected" and all(g["passed"] for g in candidate["gates"])
        receipts = await world.stack.c.memory_receipts(TENANT, task_id="chat")
        assert read["receipt_id"] in {r.receipt_id for r in receipts.receipts}

        hist = ok(await c.call_tool("history", {"key": "staging k8s version", "scope": {"level": "tenant"}}))
        [decided] = [h for h in hist["history"] if h["event"] == "memory_decided"]
        assert decided["record_id"] == record and decided["action"] == "write" and decided["trace"]

        fb = ok(await c.call_tool("feedback", {"record_id": record, "action": "confirm",
                                               "feedback_id": "fb-1"}))
        assert fb["record_id"] == record and fb["seq"] > 0

        built = await built_once_bound(c, {"task_id": "chat", "input_ordinal": 7, "window_tokens": 4000,
                                           "reserve_tokens": 256})
        assert built["messages"] and built["tokens"] <= built["budget_tokens"]
        assert built["accepted_units"] >= 1
        trace = ok(await c.call_tool("trace", {"generation_id": built["generation_id"]}))
        assert trace["selected"] == built["selected"]
        lines = trace["branches"][built["selected"]]
        assert len(lines) == built["accepted_units"] + built["rejected_units"]

        wm = ok(await c.call_tool("state", {"task_id": "chat"}))
        assert wm["state"]["task_id"] == "chat" and wm["seq"] > 0

        resumed = ok(await c.call_tool("resume", {"task_id": "chat", "executor": "a1"}))
        assert resumed["status"] in {"resumable", "needs_reconcile"}, resumed
        assert resumed["lease"]["holder"] == "a1" and resumed["lease"]["secret"]

        asked = ok(await c.call_tool("forget", {"selector": {"kind": "record", "record_id": record},
                                                "reason": "user asked", "request_id": "fg-mcp-1"}))
        assert asked["request_id"] == "fg-mcp-1" and not asked.get("duplicate")

        async def sealed() -> Any:
            got = ok(await c.call_tool("forget_receipt", {"request_id": "fg-mcp-1"}))
            [progress] = got["requests"]
            return got if progress.get("receipt") else None

        got = await assert_eventually(sealed, timeout=60, message="the forget never completed")
        progress = msgspec.convert(got["requests"][0], RequestProgress)
        assert progress.status == "completed" and progress.receipt is not None
        assert verify_receipt(progress.receipt)

        after = ok(await c.call_tool("recall", {"query": "which kubernetes version runs on staging"}))
        assert record not in {i["record_id"] for i in after["items"]}


async def test_the_resources_read_working_memory_and_a_trace(world: World) -> None:
    """The Working Memory resource holds the same view ``state`` returns; the trace resource the same
    trace ``trace`` returns."""
    async with Client(world.server(), raise_exceptions=True) as c:
        built = await built_once_bound(c, {"task_id": "chat", "input_ordinal": 7, "window_tokens": 4000})
        wm = await c.read_resource("agentledger://tasks/chat/working-memory")
        trace = await c.read_resource(f"agentledger://generations/{built['generation_id']}/trace")
        state = ok(await c.call_tool("state", {"task_id": "chat"}))
        via_tool = ok(await c.call_tool("trace", {"generation_id": built["generation_id"]}))
    assert msgspec.json.decode(wm.contents[0].text)["state"] == state["state"]  # type: ignore[union-attr]
    assert msgspec.json.decode(trace.contents[0].text)["branches"] == via_tool["branches"]  # type: ignore[union-attr]
