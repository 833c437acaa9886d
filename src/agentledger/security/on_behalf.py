"""A service's append made for an agent is checked as that agent's own append.

The context-builder appends ``history_cleared`` when an agent asks it to clear
a conversation. Sent as the service it is, the append would pass the checks the
writer makes of agents (a leased task's fencing token and secret, the lease's
holder, the producer) and so let an agent do through the service what it may
not do itself. So the service names the agent it acts for in the header
``Agentledger-On-Behalf-Of: <tenant>/<agent>`` and the writer checks the append
as if that agent had sent it.

The writer believes the header only from a caller inside the services' account:
a tenant's request always carries the server-stamped identity header
(``identity.REQUEST_INFO``), and such a request naming anyone in this header is
refused, never followed.
"""

from __future__ import annotations

from collections.abc import Mapping

from agentledger.errors import PermissionDeniedError
from agentledger.security.identity import Caller

ON_BEHALF_OF = "Agentledger-On-Behalf-Of"


def headers_for(caller: Caller) -> dict[str, str]:
    """The headers of an append a service makes for ``caller`` (none for the operator)."""
    if caller.tenant is None or caller.agent is None:
        return {}
    return {ON_BEHALF_OF: f"{caller.tenant}/{caller.agent}"}


def acting_for(caller: Caller, headers: Mapping[str, str] | None) -> Caller:
    """The identity an append is checked as: the agent a service names, else ``caller``."""
    named = headers.get(ON_BEHALF_OF) if headers else None
    if named is None:
        return caller
    if not caller.is_operator:
        raise PermissionDeniedError(f"only a service may name the agent it acts for ({ON_BEHALF_OF})",
                                    code="on_behalf_refused")
    tenant, sep, agent = named.partition("/")
    if not sep or not tenant or not agent:
        raise PermissionDeniedError(f"{ON_BEHALF_OF} must be <tenant>/<agent>", code="on_behalf_refused")
    return Caller(tenant=tenant, agent=agent)
