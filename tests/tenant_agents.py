"""Tenant agents for tests, each with NATS credentials of its own (``from tenant_agents import
agent_client``; not named ``agents``, which is the OpenAI Agents SDK's package).

What a tenant may do is enforced by its NATS account and the agent's user, so a test of
isolation or quotas needs a real agent: credentials issued by the operator (``agent add``) and
a client connected with them, not the operator's client. Use it on the ``admin`` settings
(conftest), which skip the test on a server without accounts.
"""

from __future__ import annotations

import msgspec

from agentledger.client import Client, connect
from agentledger.config import Settings
from agentledger.security import auth


async def agent_client(settings: Settings, tenant: str, name: str, *,
                       timeout: float = 10.0) -> Client:  # noqa: ASYNC109 - the client's connect timeout
    """A client connected as agent ``name`` of ``tenant`` (which must exist), with new credentials."""
    creds = await auth.agent_add(settings, tenant, name)
    return await connect(msgspec.structs.replace(settings, nats_creds=creds), timeout=timeout)
