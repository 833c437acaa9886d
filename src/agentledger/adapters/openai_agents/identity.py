"""Which agent a session call acts as: the session's client, or credentials the run carries.

The Runner hands every session call its ``RunContextWrapper`` (``wrapper=``). A run may put
``AgentCredentials`` on its context (the context itself, its ``agentledger`` attribute, or the
``"agentledger"`` key of a dict context): the call then goes over a connection made with that
credentials file, so the services see that agent, and check the session's tenant against its
account (``tenant_mismatch`` for another tenant's agent). Nothing on the context names a
tenant to be believed: a tenant is only ever what the connection authenticates.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from agentledger.client import Client, connect
from agentledger.config import Settings
from agentledger.errors import ContractError


@dataclass(frozen=True)
class AgentCredentials:
    """A NATS credentials file of one agent (``agentledger agent add``): who a run acts as."""

    creds: Path


def credentials_on(wrapper: object) -> AgentCredentials | None:
    """The credentials a run context carries, or None (then the session's own client acts)."""
    if wrapper is None:
        return None
    context = getattr(wrapper, "context", None)
    if isinstance(context, Mapping):
        found: Any = context.get("agentledger")
    elif isinstance(context, AgentCredentials):
        found = context
    else:
        found = getattr(context, "agentledger", None)
    if found is None or isinstance(found, AgentCredentials):
        return found
    raise ContractError(f"the run context's agentledger entry is AgentCredentials, not "
                        f"{type(found).__name__}", code="invalid_type", path="$.wrapper.context.agentledger")


def agent_name(client: Client) -> str | None:
    """The agent a client is connected as: the ``name`` of its credentials' user JWT (what the
    services authenticate and every event's ``producer`` must be); None for a connection
    without agent credentials (the operator's)."""
    creds = client.settings.nats_creds
    if creds is None:
        return None
    text = Path(creds).read_text()
    match = re.search(r"-----BEGIN NATS USER JWT-----\s*(\S+)\s*------END", text)
    if match is None:
        return None
    payload = match.group(1).split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    name = claims.get("name")
    return name if isinstance(name, str) else None


class Connections:
    """The session's default client and one client per credentials file a run brought.

    Connections made here are closed by ``close``; the default client is the caller's.
    """

    def __init__(self, client: Client, settings: Settings | None) -> None:
        self.default = client
        self._settings = settings if settings is not None else client.settings
        self._made: dict[Path, Client] = {}
        self._lock = asyncio.Lock()

    async def for_call(self, wrapper: object) -> Client:
        creds = credentials_on(wrapper)
        if creds is None:
            return self.default
        path = Path(creds.creds)
        async with self._lock:
            client = self._made.get(path)
            if client is None or client.nc.is_closed:
                if not path.is_file():  # noqa: ASYNC240 - one stat of a local file per credentials
                    raise ContractError(f"no credentials file at {path}", code="invalid_value",
                                        path="$.wrapper.context.agentledger.creds")
                client = await connect(msgspec.structs.replace(self._settings, nats_creds=path),
                                       timeout=self.default.timeout)
                self._made[path] = client
            return client

    async def close(self) -> None:
        made, self._made = list(self._made.values()), {}
        for client in made:
            await client.close()
