"""``agentledger mcp``: what the command runs (``cli.main`` declares its options).

Why a module of its own: ``cli.main`` imports it lazily, so the core install, without the
``mcp`` extra, still starts every other command and answers ``agentledger mcp`` with a clear
message instead of an ImportError at start-up.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable

from agentledger.adapters.mcp.server import serve_http, serve_stdio
from agentledger.config import Settings
from agentledger.errors import ContractError


def run(args: argparse.Namespace, connected: Callable[[argparse.Namespace], Settings]) -> int:
    """Serve until the host closes stdin (stdio) or the process is stopped (HTTP).

    ``connected`` resolves the settings (the running stack's URLs) once the options are known to
    be complete, so a missing option is named before a missing stack.
    """
    if args.http:
        if args.tokens is None:
            raise ContractError("--http needs --tokens: a request without a bearer token is refused, "
                                "so the server needs the table that maps tokens onto agents",
                                code="missing_field", path="--tokens")
        asyncio.run(serve_http(connected(args), args.tokens, host=args.host, port=args.port))
        return 0
    if args.tenant is None:
        raise ContractError("stdio serves one agent: pass --tenant with --creds", code="missing_field",
                            path="--tenant")
    asyncio.run(serve_stdio(connected(args), args.tenant))
    return 0
