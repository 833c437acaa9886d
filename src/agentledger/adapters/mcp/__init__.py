"""An MCP server over agentledger (``agentledger mcp``; the ``agentledger[mcp]`` extra).

Memory reads with receipts, proposals with their decisions, forgets with receipts, budgeted
context and task state, for any MCP host, acting as one agent's credentials. ``server`` builds
it, ``tools`` and ``resources`` map it onto the async client, ``schemas`` derives the tool
schemas from the contracts, ``identity`` says whom it acts for; docs/mcp.md.
"""

from agentledger.adapters.mcp.identity import AgentIdentity, TokenIdentities, write_token_table
from agentledger.adapters.mcp.server import build_server, serve_http, serve_stdio

__all__ = ["AgentIdentity", "TokenIdentities", "build_server", "serve_http", "serve_stdio",
           "write_token_table"]
