"""Who the MCP server acts as: an agent's NATS credentials, never a tool argument.

Why it is not an argument: the services trust the NATS connection, not a body, so a server that
took ``tenant`` from a tool call would let any model ask for any tenant and rely on the services
to refuse. Here the tenant and the credentials are fixed when the server starts (stdio: one
agent), or by the bearer token of each HTTP request (the token table maps a token's SHA-256 to
an agent's credentials file; the SDK's ``TokenVerifier`` checks it before any tool runs, and a
request without a valid token never reaches one).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import re
from pathlib import Path
from typing import Protocol

import msgspec
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken

from agentledger.client import Client, connect
from agentledger.config import Settings
from agentledger.errors import ContractError, PermissionDeniedError
from agentledger.security.private_files import write_private

_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
# The scope every accepted token carries (the token table grants no finer scopes).
SCOPE = "agentledger"


class Identity(msgspec.Struct, frozen=True):
    """One agent as the tools act for it: its tenant and its authenticated connection."""

    tenant: str
    client: Client
    label: str


class Identities(Protocol):
    """Where a tool call's identity comes from; opened and closed with the server's lifespan."""

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def current(self) -> Identity: ...


def _check_tenant(tenant: str, where: str) -> str:
    if not _TOKEN.match(tenant):
        raise ContractError(f"tenant {tenant!r} must be 1-64 of [A-Za-z0-9_-]", code="invalid_token",
                            path=where)
    return tenant


def _agent_settings(settings: Settings, creds: Path) -> Settings:
    return msgspec.structs.replace(settings, nats_creds=creds)


class AgentIdentity:
    """The stdio server's one identity: the agent of ``settings.nats_creds`` in ``tenant``.

    Operator credentials are refused: an operator may name any tenant, which is exactly what a
    tool call must not be able to do.
    """

    def __init__(self, settings: Settings, tenant: str) -> None:
        if settings.nats_creds is None:
            raise PermissionDeniedError(
                "agentledger mcp acts as one agent: pass --creds with the agent's credentials file "
                "(agentledger agent add TENANT AGENT); operator credentials are not accepted",
                code="agent_credentials_required", path="--creds")
        self.settings = settings
        self.tenant = _check_tenant(tenant, "--tenant")
        self._identity: Identity | None = None

    async def open(self) -> None:
        if self._identity is None:
            client = await connect(self.settings)
            self._identity = Identity(self.tenant, client, f"{self.tenant}:{self.settings.nats_creds}")

    async def close(self) -> None:
        identity, self._identity = self._identity, None
        if identity is not None:
            await identity.client.close()

    async def current(self) -> Identity:
        if self._identity is None:
            raise PermissionDeniedError("the server is not connected", code="unauthenticated")
        return self._identity


class TokenEntry(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One line of the token table: the SHA-256 (hex) of a bearer token and whose it is."""

    sha256: str
    tenant: str
    creds: str


class TokenFile(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    tokens: list[TokenEntry]


def token_digest(token: str) -> str:
    """What the token table stores of a token: its SHA-256, hex (the token itself is never kept)."""
    return hashlib.sha256(token.encode()).hexdigest()


class TokenIdentities:
    """HTTP: a bearer token names an agent (tenant + credentials file) through the token table.

    Also the SDK's ``TokenVerifier``: ``verify_token`` accepts a token whose digest is in the
    table. One NATS connection per agent is opened on its first call and kept until shutdown.
    """

    def __init__(self, settings: Settings, entries: list[TokenEntry]) -> None:
        self.settings = settings
        self._entries: dict[str, TokenEntry] = {}
        for i, entry in enumerate(entries):
            where = f"$.tokens[{i}]"
            if not _SHA256.match(entry.sha256):
                raise ContractError("sha256 must be 64 lower-case hex digits", code="invalid_value",
                                    path=f"{where}.sha256")
            _check_tenant(entry.tenant, f"{where}.tenant")
            if not Path(entry.creds).is_file():
                raise ContractError(f"no credentials file at {entry.creds}", code="not_found",
                                    path=f"{where}.creds")
            self._entries[entry.sha256] = entry
        if not self._entries:
            raise ContractError("the token table holds no token", code="invalid_value", path="$.tokens")
        self._clients: dict[str, Identity] = {}
        self._lock = asyncio.Lock()

    @classmethod
    def load(cls, settings: Settings, path: Path) -> TokenIdentities:
        """Read a token table (``{"tokens": [{"sha256", "tenant", "creds"}]}``); a relative
        ``creds`` path is relative to the table's folder."""
        try:
            table = msgspec.json.decode(Path(path).read_bytes(), type=TokenFile)
        except (OSError, msgspec.MsgspecError) as exc:
            raise ContractError(f"cannot read the token table {path}: {exc}", code="invalid_value",
                                path="--tokens") from exc
        base = Path(path).resolve().parent
        return cls(settings, [msgspec.structs.replace(e, creds=str(base / e.creds)) for e in table.tokens])

    async def verify_token(self, token: str) -> AccessToken | None:
        digest = token_digest(token)
        for known, entry in self._entries.items():
            if hmac.compare_digest(known, digest):
                return AccessToken(token=token, client_id=known, scopes=[SCOPE],
                                   claims={"tenant": entry.tenant})
        return None

    async def open(self) -> None:
        """Nothing to open before the first request: each agent connects on its first call."""

    async def close(self) -> None:
        async with self._lock:
            clients, self._clients = self._clients, {}
        for identity in clients.values():
            with contextlib.suppress(Exception):
                await identity.client.close()

    async def current(self) -> Identity:
        token = get_access_token()
        entry = self._entries.get(token.client_id) if token is not None else None
        if entry is None:
            # The SDK's middleware refuses a request without a valid token before any tool runs;
            # this is the same refusal for a path that somehow got here without one.
            raise PermissionDeniedError("this request carries no valid bearer token",
                                        code="unauthenticated")
        async with self._lock:
            identity = self._clients.get(entry.sha256)
            if identity is None:
                client = await connect(_agent_settings(self.settings, Path(entry.creds)))
                identity = Identity(entry.tenant, client, f"{entry.tenant}:{entry.creds}")
                self._clients[entry.sha256] = identity
        return identity


def write_token_table(path: Path, entries: list[tuple[str, str, Path]]) -> None:
    """Write a token table for ``(token, tenant, creds)`` triples (tests, and the docs' recipe)."""
    doc = {"tokens": [{"sha256": token_digest(t), "tenant": tenant, "creds": str(creds)}
                      for t, tenant, creds in entries]}
    write_private(Path(path), json.dumps(doc, indent=2) + "\n")
