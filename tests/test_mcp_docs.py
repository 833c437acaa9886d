"""docs/mcp.md stays true: its Python example is this file's code and runs against the real stack
through a real ``agentledger mcp`` process; its host configuration parses into the command; its
tool table names every tool; what it says of a forget that finds nothing holds."""

from __future__ import annotations

import inspect
import json
import re
import sys
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters

from agentledger.adapters.mcp.tools import SPECS
from agentledger.cli.main import build_parser
from agentledger.config import from_env
from ckpt_support import service_env
from helpers import assert_eventually
from test_mcp_server import TENANT, World, ok, world

__all__ = ["world"]  # the fixture, shared with test_mcp_server

PAGE = Path(__file__).resolve().parents[1] / "docs" / "mcp.md"


def doc_block(marker: str) -> str:
    """The fenced block right after ``<!-- marker -->`` in docs/mcp.md."""
    found = re.search(rf"<!-- {marker} -->\n```\w*\n(.*?)\n```", PAGE.read_text(), flags=re.S)
    assert found, f"docs/mcp.md has no block marked {marker}"
    return found.group(1)


async def remember_and_recall(creds: str, tenant: str, command: str = "agentledger",
                              env: dict[str, str] | None = None) -> dict[str, Any]:
    """Start `agentledger mcp` as the agent of `creds`, propose a memory, recall it with its receipt."""
    server = StdioServerParameters(command=command, args=["mcp", "--creds", creds, "--tenant", tenant],
                                   env=env)
    async with Client(server) as client:
        decided = await client.call_tool("remember", {
            "proposal_id": "build-python-1", "kind": "fact", "scope": {"level": "tenant"},
            "source": {"kind": "runtime_evidence"}, "value": "The build uses Python 3.11",
            "key": "build python version"})
        read = await client.call_tool("recall", {"query": "which python does the build use"})
        refused = await client.call_tool("recall", {"query": "python", "k": "five"})
    return {"decision": decided.structured_content, "read": read.structured_content,
            "error": refused.structured_content["error"]}


def test_the_python_example_is_this_files_code() -> None:
    """The page shows exactly ``remember_and_recall`` as it is defined (and run) here."""
    assert doc_block("mcp-python-example") == inspect.getsource(remember_and_recall).rstrip("\n")


async def test_the_python_example_runs_as_the_page_says(world: World) -> None:
    """Through a real stdio process: a ``write`` decision with its rules, the record recalled with a
    receipt id, and the bad ``k`` refused as ``invalid_type`` at ``$.k``."""
    command = str(Path(sys.executable).parent / "agentledger")
    got = await remember_and_recall(str(world.agent.nats_creds), TENANT, command,
                                    env=service_env(world.settings))
    assert got["decision"]["action"] == "write" and got["decision"]["trace"]
    assert got["decision"]["record_id"] in {i["record_id"] for i in got["read"]["items"]}
    assert got["read"]["receipt_id"]
    assert (got["error"]["code"], got["error"]["path"]) == ("invalid_type", "$.k")


def test_the_host_configuration_starts_the_command_it_shows() -> None:
    """The stdio host entry is JSON whose args parse into ``agentledger mcp`` with the agent's
    credentials and tenant, and whose env names a setting ``from_env`` reads."""
    config = json.loads(doc_block("mcp-host-config"))["mcpServers"]["agentledger"]
    assert config["command"] == "agentledger"
    args = build_parser().parse_args(config["args"])
    assert args.command == "mcp" and args.fn.__name__ == "cmd_mcp"
    assert (args.creds, args.tenant, args.http) == (Path("/home/me/agent-7.creds"), "acme", False)
    assert from_env(config["env"]).data_dir == Path(config["env"]["AGENTLEDGER_DATA_DIR"])


def test_the_tool_table_names_every_tool() -> None:
    """One row per tool, in the order the server lists them."""
    rows = re.findall(r"^\| `([a-z_]+)` \|", PAGE.read_text().split("## Tools", 1)[1].split("## Errors")[0],
                      flags=re.M)
    assert rows == [s.name for s in SPECS]


async def test_a_forget_that_finds_nothing_still_ends_in_a_receipt(world: World) -> None:
    """docs/mcp.md, Limits: forgetting a record that does not exist is a request with a receipt."""
    async with Client(world.server(), raise_exceptions=True) as c:
        asked = ok(await c.call_tool("forget", {"selector": {"kind": "record",
                                                             "record_id": "mem_000000000000000000000000"},
                                                "request_id": "fg-nothing"}))
        assert asked["request_id"] == "fg-nothing"

        async def sealed() -> Any:
            [progress] = ok(await c.call_tool("forget_receipt", {"request_id": "fg-nothing"}))["requests"]
            return progress.get("receipt")

        receipt = await assert_eventually(sealed, timeout=60, message="the forget never completed")
    assert receipt["request_id"] == "fg-nothing"
