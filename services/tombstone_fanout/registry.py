"""The index registry: every store that can hold a tenant's content, and how each forgets.

A forget request runs every handler of ``HANDLERS`` in order. A handler declares
the PostgreSQL tables and the JetStream stores it answers for; the registry test
(``tests/test_forget_registry.py``) lists every table, stream, KV bucket and
object store a running stack has and fails when one is claimed by no handler and
not listed in ``NOT_CONTENT`` with the reason it holds nothing to forget. So a
new index cannot be added without saying how it forgets.

A handler is a saga step in two halves, each safe to run again:

* ``plan(ctx)``: find what the request reaches in this index (ids, ledger
  sequences, URIs) and return it as JSON-able data, or None when the selector
  does not concern this index (the receipt says ``not_applicable``). The saga
  stores the plan before anything is changed, so a step killed halfway is
  resumed with the same targets even after their rows are gone.
* ``apply(ctx, plan)``: reach every target; return counts for the receipt.
  Running it twice changes nothing more (rows already deleted delete nothing,
  erased messages are not found, destroyed keys stay destroyed).

``ctx.plans`` holds the plans of the steps before (the memory step's records
reach the context step's generations).

A handler that can ask its index again what the selector still reaches there has a third
half, ``remaining(ctx)``: a plan of what is left (something written after the plan was made,
or a listing that came back short), or None when nothing is. The saga asks it after
``apply``, applies what it found, and asks again; the step is done only when the answer is
None (``Saga.recheck``), so a receipt never says done while the index still holds the data.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import asyncpg
from nats.aio.client import Client

from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.erasure import evict
from agentledger.security.bindings import bindings_bucket
from agentledger.security.identity import tenants_bucket
from agentledger.security.sealing import Keyring
from agentledger.stores import numbering
from agentledger.stores.artifacts import ArtifactStore, artifacts_bucket


@dataclass
class ForgetContext:
    """What a handler works with; one per request run (built by the saga)."""

    settings: Settings
    nc: Client
    pool: asyncpg.Pool
    request: ev.ForgetRequested
    tenant: str
    # The ledger sequence of the request's ``forget_requested`` event.
    request_seq: int
    keyring: Keyring
    artifacts: ArtifactStore
    # Append events through the ledger-writer as the tombstone-fanout; their sequences.
    append: Callable[[Sequence[ev.EventBase]], Awaitable[list[int]]]
    # Securely erase ledger messages (by stream sequence); how many were still there.
    erase: Callable[[Iterable[int]], Awaitable[int]]
    # Erase an artifact's object (content and metadata, securely); whether it was there.
    erase_artifact: Callable[[str], Awaitable[bool]]
    # Wait until the projection behind a durable consumer has committed everything it was
    # delivered (durable, watermark table, watermark name).
    wait_watermark: Callable[[str, str, str], Awaitable[None]]
    # Tell every running service instance to drop its caches of what an eviction names, and
    # wait until all have (``agentledger.erasure.evict.broadcast``).
    evict: Callable[[evict.Eviction], Awaitable[list[evict.EvictionAck]]]
    # The plans of the steps that ran before, by index name.
    plans: dict[str, Any] = field(default_factory=dict)

    @property
    def selector(self) -> ev.ForgetSelector:
        return self.request.selector


class Handler(Protocol):
    """One index; see the module docstring."""

    # The receipt entry's name.
    index: str
    # PostgreSQL tables (schema public) this handler answers for.
    tables: tuple[str, ...]
    # JetStream stores it answers for, by role: "ledger", "keys", "leases", "artifacts",
    # "bindings", "tenants" (``stores_of`` maps them to names).
    stores: tuple[str, ...]

    async def plan(self, ctx: ForgetContext) -> Any | None: ...

    async def apply(self, ctx: ForgetContext, plan: Any) -> dict[str, int]: ...


@runtime_checkable
class Rechecked(Handler, Protocol):
    """A handler whose index can be asked again (see the module docstring)."""

    async def remaining(self, ctx: ForgetContext) -> Any | None: ...


# Tables that hold no tenant content, with the reason.
NOT_CONTENT: dict[str, str] = {
    "schema_migrations": "the schema version",
    "projector_watermark": "a ledger sequence",
    "memory_watermark": "a ledger sequence",
    "document_watermark": "a ledger sequence",
    "forget_watermark": "a ledger sequence",
    "forget_requests": "the deletion receipts themselves: pseudonymous ids, counts, digests",
    "forget_steps": "the saga's progress: ids, ledger sequences, counts",
    "projection_rejections": "ledger sequences a projection passed over, with a code and a reason naming no content",
}

# JetStream stores that hold no tenant content, with the reason.
NOT_CONTENT_STORES: dict[str, str] = {
    "tenants": "the tenant registry: account keys and status (revoking a tenant is `agentledger tenant revoke`)",
    "usage": "the writer's quota counters: bytes per tenant, no content",
    "numbering": "the ledger's numbering mark: one sequence, no tenant's anything",
}


def stores_of(settings: Settings) -> dict[str, str]:
    """The stream behind each store role a handler may claim."""
    return {"ledger": settings.stream, "keys": f"KV_{settings.keys_bucket}",
            "leases": f"KV_{settings.leases_bucket}", "artifacts": f"OBJ_{artifacts_bucket(settings)}",
            "bindings": f"KV_{bindings_bucket(settings.prefix)}",
            "tenants": f"KV_{tenants_bucket(settings.prefix)}", "usage": f"KV_{settings.usage_bucket}",
            "numbering": f"KV_{numbering.bucket(settings)}", "reach": settings.reach_stream}
