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

import structlog

from agentledger.contracts import memory_api as api
from agentledger.core import detect
from agentledger.erasure import evict
from agentledger.models import tokens
from agentledger.models.embedding import WordLlamaEmbedder, load_embedder
from agentledger.models.judges import make_judge
from agentledger.services.memory_policy.fold import Vectors
from agentledger.services.memory_policy.projection import MemoryProjection
from agentledger.services.memory_policy.propose import Decider
from agentledger.services.memory_policy.reads import Reader
from agentledger.shell.endpoints import Endpoint
from agentledger.shell.parts import Parts
from agentledger.shell.service import Pool, Shape, Shell
from agentledger.stores import artifacts, db

log = structlog.get_logger()

SERVICE_NAME = "agentledger-memory-policy"
# Receipts past their expiry are deleted this often.
EXPIRE_EVERY_S = 600.0


class MemoryPolicy(Shell):
    """The service; see the module docstring."""

    # Iterative HNSW scans (pgvector 0.8) for every read: a filtered vector query returns k.
    shape = Shape(name="memory-policy", micro=SERVICE_NAME, log_name="memory",
                  who="memory-policy service", bindings=True,
                  pool=Pool(max_size=8, reset=True, server_settings={"hnsw.iterative_scan": "relaxed_order"}),
                  description="agentledger memory policy: propose, decide, gated reads with receipts")

    projection: MemoryProjection | None = None
    decider: Decider | None = None
    reader: Reader | None = None
    _vectors: Vectors | None = None

    async def open(self, parts: Parts) -> None:
        s = self.settings
        assert self._nc is not None and self._pool is not None
        vectors = self._vectors = Vectors(load_embedder(s))
        # Loaded once the endpoints answer, so that neither the start nor the first request
        # pays for them: requests wait for them briefly, then answer `unavailable` (Parts.warm).
        parts.warm("tokenizer", tokens.encoding)
        if isinstance(vectors.embedder, WordLlamaEmbedder):
            parts.warm("embedding model", vectors.embedder.load)
        parts.warm("detectors", detect.warm)
        self.projection = await parts.projection(MemoryProjection(s, self._nc, self._pool, vectors))
        self.decider = Decider(s, self._nc, self._pool, self.projection, bindings=self._bindings,
                               artifacts=await artifacts.open(self._nc, s), judge=make_judge(s))
        self.reader = Reader(s, self._nc, self._pool, vectors, self._bindings, reach=self.projection.reach)
        parts.task(self._expire(), name="memory-receipt-expiry")

    def endpoints(self) -> list[Endpoint]:
        assert self.decider is not None and self.reader is not None
        p = self.settings.prefix
        return [
            Endpoint.at(p, "memory.propose", api.ProposeRequest, api.ProposeReply, self.decider.propose),
            Endpoint.at(p, "memory.feedback", api.FeedbackRequest, api.FeedbackReply, self.decider.feedback),
            Endpoint.at(p, "memory.read", api.ReadRequest, api.ReadReply, self.reader.read),
            Endpoint.at(p, "memory.get", api.KeyRequest, api.KeyReply, self.reader.get),
            Endpoint.at(p, "memory.history", api.KeyRequest, api.KeyReply, self.reader.history),
            Endpoint.at(p, "memory.receipts", api.ReceiptsRequest, api.ReceiptsReply, self.reader.receipts),
        ]

    def evictor(self) -> evict.Evictor:
        return self.evict

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

