"""MCP resources: a task's Working Memory and a generation's trace, as JSON documents.

Why resources beside the ``state`` and ``trace`` tools: a host can attach a resource to a
conversation (or show it to a person) without the model spending a tool call; the content is
the same as the tools', read as the same identity. A refusal is a JSON-RPC error whose
``data`` is our ``ErrorBody``, since a resource read has no ``is_error`` result.
"""

from __future__ import annotations

import msgspec
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR, INVALID_PARAMS

from agentledger.adapters.mcp.identity import Identities
from agentledger.adapters.mcp.schemas import decode_arguments
from agentledger.adapters.mcp.tools import StateArgs, TraceArgs, generation_trace
from agentledger.contracts.codec import error_body
from agentledger.errors import AgentLedgerError, ContractError, NotFoundError

WORKING_MEMORY = "agentledger://tasks/{task_id}/working-memory"
TRACE = "agentledger://generations/{generation_id}/trace"
_JSON = "application/json"


def _protocol_error(exc: AgentLedgerError) -> MCPError:
    code = INVALID_PARAMS if isinstance(exc, ContractError | NotFoundError) else INTERNAL_ERROR
    return MCPError(code=code, message=str(exc), data=msgspec.to_builtins(error_body(exc)))


def add_resources(server: MCPServer, identities: Identities) -> None:
    """Register the resource templates on ``server``."""

    @server.resource(WORKING_MEMORY, name="working-memory", mime_type=_JSON,
                     description="A task's Working Memory (as the `state` tool returns it).")
    async def working_memory(task_id: str) -> str:
        try:
            args = decode_arguments(StateArgs, {"task_id": task_id})
            who = await identities.current()
            reply = await who.client.working_memory(who.tenant, args.task_id)  # type: ignore[attr-defined]
        except AgentLedgerError as exc:
            raise _protocol_error(exc) from exc
        return msgspec.json.encode(reply).decode()

    @server.resource(TRACE, name="generation-trace", mime_type=_JSON,
                     description="Every branch's trace of a frozen generation (as the `trace` tool "
                                 "returns it).")
    async def trace(generation_id: str) -> str:
        try:
            args = decode_arguments(TraceArgs, {"generation_id": generation_id})
            reply = await generation_trace(await identities.current(), args.generation_id)  # type: ignore[attr-defined]
        except AgentLedgerError as exc:
            raise _protocol_error(exc) from exc
        return msgspec.json.encode(reply).decode()
