"""Agent bindings: which users and projects an agent acts for, as the operator declared them.

A tenant agent's memory scopes come from who it is, never from what a request
claims: a read or a proposal may name a user or project scope only if the
operator bound the agent to it (``agentledger agent bind``). Bindings live in a
KV bucket only the operator writes, ``<PREFIX>_BINDINGS``, one key per agent
(``<tenant>.<agent>``: tenant and agent names never contain a dot), value
``{"users": [...], "projects": [...], "roles": [...]}``. The memory-policy service mirrors the
bucket in memory through a watch (as ``identity.TenantRegistry`` mirrors the
tenant registry), so checking a scope costs a dict lookup.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import msgspec
from nats.aio.client import Client
from nats.js.errors import KeyNotFoundError

from agentledger.config import Settings
from agentledger.core.memory.read import ROLES, Bindings
from agentledger.errors import ContractError
from agentledger.security import auth
from agentledger.stores.buckets import KVMirror, open_kv

# The users and projects one agent acts for (exact ids, never prefixes).
Binding = Bindings
NONE = Bindings()


def bindings_bucket(prefix: str) -> str:
    """KV bucket of the agent bindings: ``<PREFIX>_BINDINGS``."""
    return f"{prefix.upper().replace('-', '_')}_BINDINGS"


def binding_key(tenant: str, agent: str) -> str:
    return f"{tenant}.{agent}"


async def bind_agent(settings: Settings, tenant: str, agent: str, users: Sequence[str],
                     projects: Sequence[str], *, roles: Sequence[str] = ()) -> Binding:
    """Bind ``agent`` of ``tenant`` to exactly these users, projects and roles (replacing earlier ones)."""
    auth.check_name(tenant, "tenant")
    auth.check_name(agent, "agent")
    for user in users:
        auth.check_name(user, "user")
    for project in projects:
        auth.check_name(project, "project")
    for role in roles:
        if role not in ROLES:
            raise ContractError(f"unknown role {role!r}; roles: {', '.join(sorted(ROLES))}", code="invalid_value",
                                path="role")
    binding = Binding(users=frozenset(users), projects=frozenset(projects), roles=frozenset(roles))
    nc = await auth.connect(settings, auth.OPERATOR_ROLE, allow_reconnect=False, connect_timeout=5)
    try:
        kv = await open_kv(nc.jetstream(), bindings_bucket(settings.prefix),
                           replicas=settings.stream_replicas)
        await kv.put(binding_key(tenant, agent),
                     msgspec.json.encode({"users": sorted(users), "projects": sorted(projects),
                                          "roles": sorted(roles)}))
    finally:
        await nc.close()
    return binding


async def unbind_agent(settings: Settings, tenant: str, agent: str) -> None:
    """Remove every binding of ``agent``: it keeps only its tenant, task and session scopes."""
    auth.check_name(tenant, "tenant")
    auth.check_name(agent, "agent")
    nc = await auth.connect(settings, auth.OPERATOR_ROLE, allow_reconnect=False, connect_timeout=5)
    try:
        kv = await open_kv(nc.jetstream(), bindings_bucket(settings.prefix),
                           replicas=settings.stream_replicas)
        with contextlib.suppress(KeyNotFoundError):
            await kv.delete(binding_key(tenant, agent))
    finally:
        await nc.close()


class BindingRegistry(KVMirror[Binding]):
    """In-memory mirror of the bindings bucket (an unreadable value: no user or project scope)."""

    def __init__(self, nc: Client, prefix: str, replicas: int = 1) -> None:
        super().__init__(nc, bindings_bucket(prefix), Binding, "binding-registry", replicas)

    async def get(self, tenant: str, agent: str) -> Binding:
        """The agent's binding; a miss asks the bucket once (the watch may lag a bind)."""
        return await self.lookup(binding_key(tenant, agent)) or NONE
