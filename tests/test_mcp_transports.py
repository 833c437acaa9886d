"""``agentledger mcp`` as a real process: over stdio (the host's usual way) and over streamable HTTP
with bearer tokens, against the real stack (services in the test process).

* stdio: the SDK's ``Client`` starts the command, lists the tools and calls each one; stdout
  carries nothing but the protocol (the logs go to stderr).
* HTTP: a request without a bearer token, or with an unknown one, is refused (401) before any
  tool runs; each token acts as its own agent, so globex's token does not see acme's memory.
* A forget's receipt is fetched through ``forget_receipt`` over each transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from agentledger.adapters.mcp import write_token_table
from ckpt_support import end_process, service_env
from helpers import assert_eventually
from test_mcp_server import OTHER, TENANT, TOOLS, World, built_once_bound, fact, ok, world

__all__ = ["world"]  # the fixture, shared with test_mcp_server

CLI = [sys.executable, "-c", "from agentledger.cli.main import main; main()"]


async def call_each_tool(c: Client, tag: str) -> None:
    """Every tool once, each answering (a refusal would fail ``ok``); the forget followed to its receipt."""
    assert {t.name for t in (await c.list_tools()).tools} == TOOLS
    decision = ok(await c.call_tool("remember", fact(f"{tag}-1", f"The {tag} runner uses 8 CPUs",
                                                     key=f"{tag} runner cpus")))
    record = decision["record_id"]
    read = ok(await c.call_tool("recall", {"query": f"how many cpus does the {tag} runner use"}))
    assert record in {i["record_id"] for i in read["items"]} and read["receipt_id"]
    ok(await c.call_tool("history", {"key": f"{tag} runner cpus", "scope": {"level": "tenant"}}))
    ok(await c.call_tool("feedback", {"record_id": record, "action": "confirm", "feedback_id": f"{tag}-fb"}))
    built = await built_once_bound(c, {"task_id": "chat", "input_ordinal": 7, "window_tokens": 4000})
    ok(await c.call_tool("trace", {"generation_id": built["generation_id"]}))
    ok(await c.call_tool("state", {"task_id": "chat"}))
    ok(await c.call_tool("resume", {"task_id": "chat", "executor": "a1", "request_id": f"{tag}-resume"}))
    ok(await c.call_tool("forget", {"selector": {"kind": "record", "record_id": record},
                                    "request_id": f"fg-{tag}"}))

    async def sealed() -> Any:
        [progress] = ok(await c.call_tool("forget_receipt", {"request_id": f"fg-{tag}"}))["requests"]
        return progress.get("receipt")

    receipt = await assert_eventually(sealed, timeout=60, message="the forget never completed")
    assert receipt["request_id"] == f"fg-{tag}" and receipt["indexes"]


async def test_stdio_subprocess_lists_and_calls_every_tool(world: World) -> None:
    """The host's way: ``agentledger mcp --creds A1 --tenant acme`` on stdin / stdout."""
    params = StdioServerParameters(command=CLI[0], args=[*CLI[1:], "mcp", "--creds",
                                                         str(world.agent.nats_creds), "--tenant", TENANT],
                                   env=service_env(world.settings))
    async with Client(params) as c:
        await call_each_tool(c, "stdio")


async def test_stdio_stdout_carries_only_the_protocol(world: World) -> None:
    """With logging at debug, every line on stdout is a JSON-RPC message and the logs are on stderr."""
    env = service_env(world.settings) | {"AGENTLEDGER_LOG_LEVEL": "debug"}
    proc = await asyncio.create_subprocess_exec(*CLI, "mcp", "--creds", str(world.agent.nats_creds),
                                                "--tenant", TENANT, env=env,
                                                stdin=asyncio.subprocess.PIPE,
                                                stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    requests = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw-test", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "state", "arguments": {"task_id": "chat"}}},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "recall", "arguments": {"query": "x", "k": "five"}}},
    ]
    assert proc.stdin is not None and proc.stdout is not None
    answers: dict[int, Any] = {}
    try:
        for request in requests:
            proc.stdin.write(json.dumps(request).encode() + b"\n")
            await proc.stdin.drain()
            while "id" in request and request["id"] not in answers:
                line = await asyncio.wait_for(proc.stdout.readline(), 60)
                assert line, "the server closed stdout"
                message = json.loads(line)  # a log line here would not be JSON-RPC
                assert message["jsonrpc"] == "2.0", message
                if "id" in message:
                    answers[message["id"]] = message
        proc.stdin.close()
        rest, err = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        await end_process(proc)
    assert all(json.loads(line)["jsonrpc"] == "2.0" for line in rest.splitlines() if line.strip())
    assert answers[2]["result"]["structuredContent"]["state"]["task_id"] == "chat"
    assert answers[3]["result"]["isError"] is True
    assert answers[3]["result"]["structuredContent"]["error"]["code"] == "invalid_type"
    logged = [json.loads(line) for line in err.decode().splitlines() if line.startswith("{")]
    assert any(entry.get("event") == "mcp_serving" for entry in logged), err.decode()[-2000:]


async def test_stdio_refuses_to_start_without_agent_credentials(world: World) -> None:
    """Without --creds the command exits at once with the typed error on stderr, stdout empty."""
    proc = await asyncio.create_subprocess_exec(*CLI, "mcp", "--tenant", TENANT,
                                                env=service_env(world.settings),
                                                stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2
    assert out == b""
    assert b"agent_credentials_required" in err


@contextlib.asynccontextmanager
async def http_server(world: World, tokens: Path) -> AsyncIterator[str]:
    """``agentledger mcp --http --port 0``; yields the URL its stderr names."""
    proc = await asyncio.create_subprocess_exec(*CLI, "mcp", "--http", "--port", "0", "--tokens",
                                                str(tokens), env=service_env(world.settings),
                                                stdin=asyncio.subprocess.DEVNULL,
                                                stderr=asyncio.subprocess.PIPE)
    assert proc.stderr is not None
    lines: list[str] = []
    try:
        while True:
            line = (await asyncio.wait_for(proc.stderr.readline(), 60)).decode()
            assert line, f"the server exited before serving: {''.join(lines)}"
            lines.append(line)
            if match := re.match(r"agentledger mcp: serving (\S+)", line):
                break
        # Keep reading its stderr, so a chatty server never blocks on a full pipe.
        drain = asyncio.ensure_future(proc.stderr.read())
        yield match.group(1)
        drain.cancel()
    finally:
        await end_process(proc)


def bearer(token: str | None) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"} if token else {},
                              timeout=httpx2.Timeout(60.0))


async def test_http_with_bearer_tokens(world: World, tmp_path: Path) -> None:
    """No token or a wrong one: 401, nothing runs. acme's token: every tool; globex's token acts as
    globex, so acme's memory is not found and acme's task is not there."""
    tokens = tmp_path / "tokens.json"
    write_token_table(tokens, [("acme-token-1", TENANT, world.agent.nats_creds),  # type: ignore[list-item]
                               ("globex-token-1", OTHER, world.other.nats_creds)])  # type: ignore[list-item]
    async with http_server(world, tokens) as url:
        for token in (None, "not-a-token"):
            async with bearer(token) as http:
                answer = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                                         headers={"Accept": "application/json, text/event-stream"})
            assert answer.status_code == 401, (token, answer.status_code, answer.text)
            assert answer.headers["www-authenticate"].lower().startswith("bearer")
        async with bearer("acme-token-1") as http, Client(streamable_http_client(url, http_client=http)) as c:
            await call_each_tool(c, "http")
            mine = ok(await c.call_tool("remember", fact("http-2", "The http runner has 64 GB",
                                                         key="http runner memory")))
        async with bearer("globex-token-1") as http, Client(streamable_http_client(url, http_client=http)) as g:
            read = ok(await g.call_tool("recall", {"query": "how much memory does the http runner have",
                                                   "key": "http runner memory"}))
            assert mine["record_id"] not in {i["record_id"] for i in read["items"]}
            assert mine["record_id"] not in {x["record_id"] for x in read["candidates"]}
            result = await g.call_tool("feedback", {"record_id": mine["record_id"], "action": "revoke",
                                                    "feedback_id": "g-steal"})
            assert result.is_error and result.structured_content["error"]["code"] == "not_found"
            result = await g.call_tool("state", {"task_id": "chat"})
            assert result.is_error and result.structured_content["error"]["code"] == "not_found"
