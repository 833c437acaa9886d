"""The memory-policy service: tools and models propose, the policy decides, reads pass gates.

NATS micro service ``agentledger-memory-policy``:

* ``<prefix>.memory.propose``: decide proposals (bulk: up to ``MAX_PROPOSALS``
  per call), append each proposal and its decision to the tenant's memory
  ledger (``propose.py``);
* ``<prefix>.memory.feedback``: confirm, correct or revoke a record;
* ``<prefix>.memory.read``: a gated read with its receipt (``reads.py``);
* ``<prefix>.memory.get`` / ``history``: a key's records / its whole history;
* ``<prefix>.memory.receipts``: receipts of a task or of a record.

Every request: the caller is the authenticated connection (``TenantRegistry``),
the body's tenant must be the caller's, user and project scopes must be bound
to the agent (``bindings``); a body that does not decode is a typed
``ContractError`` naming its path; nothing is written for a refused request.
The service also runs the memory projection (``projection.py``) it reads from.

Forgetting: the tombstone-fanout's handlers (``forget.py``) turn records into
tombstones through the ledger; each instance also answers the fan-out's cache
eviction (``agentledger.erasure.evict``), dropping the data keys it holds for the
subject or tenant and the embedding cache (keyed by record and query text).
"""

from __future__ import annotations

import asyncio
import contextlib

import asyncpg
import msgspec
import structlog
from nats.aio.client import Client
from nats.aio.subscription import Subscription
from nats.micro import add_service
from nats.micro.service import Service

from agentledger.config import Settings
from agentledger.contracts.memory_api import (
    FeedbackReply,
    FeedbackRequest,
    KeyReply,
    KeyRequest,
    ProposeReply,
    ProposeRequest,
    ReadReply,
    ReadRequest,
    ReceiptsReply,
    ReceiptsRequest,
)
from agentledger.erasure import evict
from agentledger.models import tokens
from agentledger.models.embedding import load_embedder
from agentledger.security import auth
from agentledger.security.bindings import BindingRegistry
from agentledger.security.identity import TenantRegistry
from agentledger.services.memory_policy.fold import Vectors
from agentledger.services.memory_policy.projection import MemoryProjection
from agentledger.services.memory_policy.propose import Decider
from agentledger.services.memory_policy.reads import Reader
from agentledger.shell.endpoints import Endpoint, Endpoints
from agentledger.shell.lifecycle import ServiceShell
from agentledger.stores import artifacts, db
from agentledger.stores.natsclient import reader_alive

log = structlog.get_logger()

SERVICE_NAME = "agentledger-memory-policy"
SERVICE_VERSION = "0.1.0"
ROLE = "memory-policy"
# Receipts past their expiry are deleted this often.
EXPIRE_EVERY_S = 600.0


def memory_subject(prefix: str, action: str) -> str:
    return f"{prefix}.memory.{action}"


class MemoryPolicy(ServiceShell):
    """The service; see the module docstring."""

    name = "memory-policy"
    log_name = "memory"

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings
        self._nc: Client | None = None
        self._pool: asyncpg.Pool | None = None
        self._tenants: TenantRegistry | None = None
        self._bindings: BindingRegistry | None = None
        self._service: Service | None = None
        self._evictions: Subscription | None = None
        self._vectors: Vectors | None = None
        self.projection: MemoryProjection | None = None
        self.decider: Decider | None = None
        self.reader: Reader | None = None
        self._requests: Endpoints | None = None
        self._expiry: asyncio.Task[None] | None = None

    # ---- lifecycle --------------------------------------------------------------------------

    async def _start(self) -> None:
        s = self.settings
        vectors = self._vectors = Vectors(load_embedder(s))
        # Load the model and the default encoding now, so the first read does not pay for them.
        await vectors.embedder.embed(["warm up"])
        tokens.encoding(tokens.DEFAULT_ENCODING)
        self._nc = await auth.connect(s, ROLE, max_reconnect_attempts=-1, error_cb=self._nats_error,
                                      closed_cb=self._nats_closed)
        self._tenants = TenantRegistry(self._nc, s.prefix, s.stream_replicas)
        await self._tenants.start()
        self._bindings = BindingRegistry(self._nc, s.prefix, s.stream_replicas)
        await self._bindings.start()
        await db.migrate(s.database_url)
        # Iterative HNSW scans (pgvector 0.8) for every read: a filtered vector query returns k.
        self._pool = await asyncpg.create_pool(
            s.database_url, min_size=1, max_size=8, timeout=db.CONNECT_TIMEOUT_S,
            server_settings={"hnsw.iterative_scan": "relaxed_order"})
        self.projection = MemoryProjection(s, self._nc, self._pool, vectors)
        await self.projection.start()
        self.decider = Decider(s, self._nc, self._pool, self.projection, bindings=self._bindings,
                               artifacts=await artifacts.open(self._nc, s))
        self.reader = Reader(s, self._nc, self._pool, vectors, self._bindings)
        self._requests = Endpoints(self._tenants, log_name="memory", who="memory-policy service")
        endpoints = {
            "propose": Endpoint(msgspec.json.Decoder(ProposeRequest), ProposeReply, self.decider.propose),
            "feedback": Endpoint(msgspec.json.Decoder(FeedbackRequest), FeedbackReply,
                                 self.decider.feedback),
            "read": Endpoint(msgspec.json.Decoder(ReadRequest), ReadReply, self.reader.read),
            "get": Endpoint(msgspec.json.Decoder(KeyRequest), KeyReply, self.reader.get),
            "history": Endpoint(msgspec.json.Decoder(KeyRequest), KeyReply, self.reader.history),
            "receipts": Endpoint(msgspec.json.Decoder(ReceiptsRequest), ReceiptsReply,
                                 self.reader.receipts),
        }
        self._service = await add_service(self._nc, name=SERVICE_NAME, version=SERVICE_VERSION,
                                          description="agentledger memory policy: propose, decide, "
                                                      "gated reads with receipts")
        for action, endpoint in endpoints.items():
            await self._service.add_endpoint(name=f"memory-{action}", subject=memory_subject(s.prefix, action),
                                             handler=self._requests.handler(action, endpoint))
        self._evictions = await evict.listen(self._nc, s.prefix, service=SERVICE_NAME, instance=self._service.id,
                                             evictor=self.evict)
        self._expiry = asyncio.create_task(self._expire(), name="memory-receipt-expiry")
        await self._nc.flush()

    def _watched(self) -> list[asyncio.Future[None]]:
        return [self.projection.failed] if self.projection is not None else []

    def alive(self) -> bool:
        """NATS read loop alive, the bindings mirror following, the projection loop turning."""
        return (self._nc is not None and reader_alive(self._nc)
                and self._bindings is not None and self._bindings.alive()
                and self.projection is not None and self.projection.alive())

    async def stop(self) -> None:
        """Stop answering, finish in-flight requests, stop the projection, close; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self._evictions is not None:
            with contextlib.suppress(Exception):
                await self._evictions.unsubscribe()
        if self._service is not None:
            with contextlib.suppress(Exception):
                await self._service.stop()
        if self._requests is not None:
            await self._requests.drain()
        if self._expiry is not None:
            self._expiry.cancel()
            await asyncio.gather(self._expiry, return_exceptions=True)
        if self.projection is not None:
            await self.projection.stop()
        for registry in (self._bindings, self._tenants):
            if registry is not None:
                await registry.stop()
        if self._nc is not None and not self._nc.is_closed:
            try:
                await self._nc.drain()
            except Exception:  # noqa: BLE001
                await self._nc.close()
        if self._pool is not None:
            await self._pool.close()

    async def evict(self, eviction: evict.Eviction) -> dict[str, int]:
        """Drop what this instance caches of what a forget request reached; counts by cache."""
        keys = 0
        if self.reader is not None:
            if eviction.whole_tenant:
                keys = self.reader.evict_keys(eviction.tenant, None)
            elif eviction.subject is not None:
                keys = self.reader.evict_keys(eviction.tenant, eviction.subject)
        # The embedding cache is keyed by text (a record's search text, a query): a forgotten
        # record's text may be a key. It holds no tenant, so all of it goes; it refills itself.
        vectors = self._vectors.clear() if self._vectors is not None else 0
        return {"keys": keys, "vectors": vectors}

    async def _expire(self) -> None:
        while True:
            await asyncio.sleep(EXPIRE_EVERY_S)
            try:
                assert self.reader is not None
                removed = await self.reader.expire_receipts()
                if removed:
                    log.info("memory.receipts_expired", removed=removed)
            except db.DATABASE_ERRORS as exc:
                log.warning("memory.expiry_failed", error=type(exc).__name__)

