"""The context-builder service: budgeted, explained, frozen context, and conversation compaction.

NATS micro service ``agentledger-context-builder``:

* ``<prefix>.context.build``: build the input of one model call (``build.py``): the task's
  Working Memory, the turns of its conversation, memory (through the memory-policy service)
  and documents, selected under the budget, rendered, counted, frozen as a generation
  before any compactor runs; ``generation_id`` returns a frozen generation byte for byte;
* ``<prefix>.context.get`` / ``trace``: a frozen generation, or its trace lines;
* ``<prefix>.context.commit``: the answer of a generation is in the ledger: activate its
  staged checkpoint by compare-and-swap, or refuse it with the reason (``commit.py``);
* ``<prefix>.context.clear``: clear the conversation (a ``history_cleared`` event, a new
  epoch and lineage);
* ``<prefix>.context.ingest``: add a document version to the tenant's RAG index
  (``documents.py``), when that module is installed.

A forget request's eviction (``<prefix>.forget.evict``, ``agentledger.erasure.evict``) drops the
data-subject keys the builder's keyring caches and the embedding cache, and waits (bounded)
for the tenant's builds that were running: what they froze is then in the tables the forget
request's ``generations`` / ``compaction`` steps (``forget.py``) reach.

Every request: the caller is the authenticated connection (``TenantRegistry``), the body's
tenant must be the caller's, user and project scopes must be bound to the agent; a body
that does not decode is a typed ``ContractError`` naming its path. Logs carry codes, ids
and sizes, never content.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import asyncpg
import msgspec
import structlog
from nats.aio.client import Client
from nats.aio.subscription import Subscription
from nats.micro import add_service
from nats.micro.service import Service

from agentledger.config import Settings
from agentledger.contracts.context_api import (
    BuildReply,
    BuildRequest,
    ClearReply,
    ClearRequest,
    CommitReply,
    CommitRequest,
    GenerationRef,
    IngestReply,
    IngestRequest,
    TraceReply,
)
from agentledger.erasure import evict
from agentledger.security import auth
from agentledger.security.bindings import BindingRegistry
from agentledger.security.identity import TenantRegistry
from agentledger.services.context_builder.build import Builder
from agentledger.services.context_builder.commit import Committer
from agentledger.services.context_builder.documents import DocumentIndex
from agentledger.services.context_builder.keys import load_signing_key
from agentledger.services.context_builder.store import ContextStore
from agentledger.shell.endpoints import Endpoint, Endpoints
from agentledger.shell.lifecycle import ServiceShell
from agentledger.stores import artifacts, db
from agentledger.stores.natsclient import reader_alive

log = structlog.get_logger()

SERVICE_NAME = "agentledger-context-builder"
SERVICE_VERSION = "0.1.0"
ROLE = "context-builder"
# How much longer than a compactor may take an eviction waits for the builds running.
EVICT_GRACE_S = 5.0


def context_subject(prefix: str, action: str) -> str:
    return f"{prefix}.context.{action}"


class ContextBuilder(ServiceShell):
    """The service; see the module docstring."""

    name = "context-builder"
    log_name = "context"

    def __init__(self, settings: Settings, *, compactors: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.settings = settings
        # Extra compactors by name (tests register failing ones here); see ``compactors.py``.
        self._extra_compactors = dict(compactors or {})
        self._nc: Client | None = None
        self._pool: asyncpg.Pool | None = None
        self._tenants: TenantRegistry | None = None
        self._bindings: BindingRegistry | None = None
        self._service: Service | None = None
        self._evictions: Subscription | None = None
        self.store: ContextStore | None = None
        self.builder: Builder | None = None
        self.committer: Committer | None = None
        self.documents: DocumentIndex | None = None
        self._requests: Endpoints | None = None

    # ---- lifecycle --------------------------------------------------------------------------

    async def _start(self) -> None:
        s = self.settings
        key = load_signing_key(s.context_key_path)
        self._nc = await auth.connect(s, ROLE, max_reconnect_attempts=-1, error_cb=self._nats_error,
                                      closed_cb=self._nats_closed)
        self._tenants = TenantRegistry(self._nc, s.prefix, s.stream_replicas)
        await self._tenants.start()
        self._bindings = BindingRegistry(self._nc, s.prefix, s.stream_replicas)
        await self._bindings.start()
        await db.migrate(s.database_url)
        self._pool = await db.create_pool(s.database_url, min_size=1, max_size=8)
        self.store = ContextStore(self._pool)
        store = await artifacts.open(self._nc, s)
        self.documents = DocumentIndex(s, self._nc, self._pool)
        await self.documents.start()
        self.builder = Builder(s, self._nc, self.store, store, bindings=self._bindings, key=key,
                               documents=self.documents, compactors=self._extra_compactors)
        self.committer = Committer(s, self._nc, self.store, self.builder, key)
        self._requests = Endpoints(self._tenants, log_name="context", who="context-builder", bind_task=True)
        endpoints = {
            "build": Endpoint(msgspec.json.Decoder(BuildRequest), BuildReply, self.builder.build),
            "get": Endpoint(msgspec.json.Decoder(GenerationRef), BuildReply, self.builder.get),
            "trace": Endpoint(msgspec.json.Decoder(GenerationRef), TraceReply, self.builder.trace),
            "commit": Endpoint(msgspec.json.Decoder(CommitRequest), CommitReply, self.committer.commit),
            "clear": Endpoint(msgspec.json.Decoder(ClearRequest), ClearReply, self.committer.clear),
            "ingest": Endpoint(msgspec.json.Decoder(IngestRequest), IngestReply, self.documents.ingest),
        }
        self._service = await add_service(self._nc, name=SERVICE_NAME, version=SERVICE_VERSION,
                                          description="agentledger context builder: budgeted, frozen "
                                                      "context and conversation compaction")
        for action, endpoint in endpoints.items():
            await self._service.add_endpoint(name=f"context-{action}", subject=context_subject(s.prefix, action),
                                             handler=self._requests.handler(action, endpoint))
        self._evictions = await evict.listen(self._nc, s.prefix, SERVICE_NAME, self._service.id, self._evict)
        await self._nc.flush()
        log.info("context.ready", endpoints=sorted(endpoints), key_id=key.key_id)

    async def _evict(self, e: evict.Eviction) -> dict[str, int]:
        """A forget request reached these: drop cached keys and embeddings, then wait for the
        tenant's builds running now (they may hold what an old key opened) to end."""
        keys, embeddings, builds = 0, 0, 0
        if self.builder is not None:
            keyring = self.builder.sources.cached_keyring()
            keys = evict.keys_of(keyring, e) if keyring is not None else 0
        if self.documents is not None:
            # Keyed by text (a document's chunks, a build's document query), not by tenant: all of it.
            cache = getattr(self.documents.vectors, "_cache", None)
            if cache is not None:
                embeddings = len(cache)
                cache.clear()
        if self.builder is not None:
            builds = await self.builder.settle(e.tenant, self.settings.context_compactor_timeout_s + EVICT_GRACE_S)
        return {"keys": keys, "embeddings": embeddings, "builds": builds}

    def _watched(self) -> list[asyncio.Future[None]]:
        return [self.documents.failed] if self.documents is not None else []

    def alive(self) -> bool:
        """NATS read loop alive, the bindings mirror following, the document projection turning."""
        return (self._nc is not None and reader_alive(self._nc)
                and self._bindings is not None and self._bindings.alive()
                and self.documents is not None and self.documents.alive())

    async def stop(self) -> None:
        """Stop answering, finish in-flight requests, close; idempotent."""
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
        if self.documents is not None:
            with contextlib.suppress(Exception):
                await self.documents.stop()
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

