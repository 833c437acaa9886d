"""Who is asking: the caller of a service request, as NATS authenticated it.

Tenants are NATS accounts and agents are users in them (see ``auth``). A
request from a tenant reaches the services' account through a service import
that shares the requester's identity: the server stamps a ``Nats-Request-Info``
header with the requester's account and user public keys and the user JWT's
name (``name_tag``), replacing any header of that name the client set. So the
header is trustworthy exactly when it is there, and it is there for every
request that crossed from another account.

A request without it came from inside the services' account: another service
or the operator. Those are trusted with any tenant a body names.

The services map a tenant account's public key to its tenant name through the
tenant registry, a KV bucket only the operator writes (``agentledger tenant
add``); each service mirrors it in memory through a watch, so establishing the
caller costs a header decode and a dict lookup, not a round trip.
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec
from nats.aio.client import Client

from agentledger.errors import PermissionDeniedError
from agentledger.stores.buckets import KVMirror

REQUEST_INFO = "Nats-Request-Info"
ACTIVE = "active"
REVOKED = "revoked"



class Caller(msgspec.Struct, frozen=True):
    """The authenticated identity behind one request.

    ``tenant is None`` marks a trusted caller inside the services' account (a
    service or the operator); otherwise ``tenant`` and ``agent`` come from the
    NATS account and user that sent the request, never from its body.
    """

    tenant: str | None = None
    agent: str | None = None
    # Public keys of the NATS account and user (tenant callers only).
    account: str | None = None
    user: str | None = None

    @property
    def is_operator(self) -> bool:
        return self.tenant is None

    def require_tenant(self, tenant: str, path: str) -> None:
        """Refuse a body naming a tenant other than the caller's (``tenant_mismatch``)."""
        if self.tenant is not None and tenant != self.tenant:
            raise PermissionDeniedError(
                f"this connection is authenticated for tenant {self.tenant!r}; the request names "
                "another tenant", code="tenant_mismatch", path=path)

    def require_operator(self, what: str) -> None:
        """Refuse an operator-only action to a tenant caller."""
        if self.tenant is not None:
            raise PermissionDeniedError(f"{what} needs the operator identity",
                                        code="operator_only")


OPERATOR = Caller()


class TenantEntry(msgspec.Struct, frozen=True, kw_only=True):
    """Registry value, keyed by the tenant account's public key."""

    tenant: str
    status: str = ACTIVE
    prefix: str = ""


class _RequestInfo(msgspec.Struct):
    acc: str
    user: str = ""
    name_tag: str = ""


_info_decoder = msgspec.json.Decoder(_RequestInfo)


def tenants_bucket(prefix: str) -> str:
    """KV bucket of the tenant registry: ``<PREFIX>_TENANTS``."""
    return f"{prefix.upper().replace('-', '_')}_TENANTS"


class TenantRegistry(KVMirror[TenantEntry]):
    """In-memory mirror of the tenant registry bucket; resolves request headers to callers."""

    def __init__(self, nc: Client, prefix: str, replicas: int = 1) -> None:
        super().__init__(nc, tenants_bucket(prefix), TenantEntry, "tenant-registry", replicas)
        self._prefix = prefix

    async def caller(self, headers: Mapping[str, str] | None) -> Caller:
        """The caller behind a request with these headers; refuses unknown or revoked tenants."""
        raw = headers.get(REQUEST_INFO) if headers else None
        if raw is None:
            return OPERATOR
        try:
            info = _info_decoder.decode(raw)
        except msgspec.DecodeError as exc:
            raise PermissionDeniedError("the request's identity header is unreadable",
                                        code="unauthenticated") from exc
        entry = await self.lookup(info.acc)
        if entry is None or entry.prefix not in ("", self._prefix):
            raise PermissionDeniedError("this NATS account is not a registered tenant",
                                        code="unknown_tenant")
        if entry.status != ACTIVE:
            raise PermissionDeniedError(f"tenant {entry.tenant!r} is revoked", code="tenant_revoked")
        if not info.name_tag:
            raise PermissionDeniedError("the connection's user has no agent name",
                                        code="unauthenticated")
        return Caller(tenant=entry.tenant, agent=info.name_tag, account=info.acc, user=info.user)
