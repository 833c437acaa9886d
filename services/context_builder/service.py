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

from typing import Any

import structlog

from agentledger.config import Settings
from agentledger.contracts import context_api as api
from agentledger.erasure import evict
from agentledger.models import tokens
from agentledger.models.embedding import WordLlamaEmbedder
from agentledger.services.context_builder import finished_notes
from agentledger.services.context_builder.build import Builder
from agentledger.services.context_builder.commit import Committer
from agentledger.services.context_builder.documents import DocumentIndex
from agentledger.services.context_builder.keys import SigningKey, load_signing_key
from agentledger.services.context_builder.store import ContextStore
from agentledger.shell.endpoints import Endpoint
from agentledger.shell.parts import Parts
from agentledger.shell.service import Pool, Shape, Shell
from agentledger.stores import artifacts

log = structlog.get_logger()

SERVICE_NAME = "agentledger-context-builder"
# How much longer than a compactor may take an eviction waits for the builds running.
EVICT_GRACE_S = 5.0


class ContextBuilder(Shell):
    """The service; see the module docstring."""

    shape = Shape(name="context-builder", micro=SERVICE_NAME, log_name="context", bindings=True,
                  pool=Pool(max_size=8), bind_task=True,
                  description="agentledger context builder: budgeted, frozen context and conversation compaction")

    store: ContextStore | None = None
    builder: Builder | None = None
    committer: Committer | None = None
    documents: DocumentIndex | None = None
    _key: SigningKey | None = None

    def __init__(self, settings: Settings, *, compactors: dict[str, Any] | None = None) -> None:
        super().__init__(settings)
        # Extra compactors by name (tests register failing ones here); see ``compactors.py``.
        self._extra_compactors = dict(compactors or {})

    async def open(self, parts: Parts) -> None:
        s = self.settings
        assert self._nc is not None and self._pool is not None
        key = self._key = load_signing_key(s.context_key_path)
        self.store = ContextStore(self._pool, self.settings)
        nc = self._nc
        # Every instance refuses a generation another one finished, put back to unfinished.
        self.store.announce = lambda tenant, gid, finished: finished_notes.publish(nc, s.prefix, tenant, gid, finished)
        await finished_notes.listen(nc, s.prefix, self.store.noted)
        store = await artifacts.open(self._nc, s)
        self.documents = await parts.projection(DocumentIndex(s, self._nc, self._pool))
        # Loaded once the endpoints answer (Parts.warm): builds count tokens, queries embed.
        parts.warm("tokenizer", tokens.encoding)
        if isinstance(self.documents.vectors.embedder, WordLlamaEmbedder):
            parts.warm("embedding model", self.documents.vectors.embedder.load)
        self.builder = Builder(s, self._nc, self.store, store, bindings=self._bindings, key=key,
                               documents=self.documents, compactors=self._extra_compactors)
        self.committer = Committer(s, self._nc, self.store, self.builder, key)
        parts.task(self._erase_frozen_left(), name="context-frozen-sweep")

    async def _erase_frozen_left(self) -> None:
        """``Builder.erase_frozen_left`` beside the service; a failure (NATS or PostgreSQL away)
        is logged, and the next start tries again."""
        assert self.builder is not None
        try:
            await self.builder.erase_frozen_left()
        except Exception as exc:  # noqa: BLE001 - builds and reads go on without it
            log.warning("context.frozen_sweep_failed", error=type(exc).__name__)

    def endpoints(self) -> list[Endpoint]:
        assert self.builder is not None and self.committer is not None and self.documents is not None
        p = self.settings.prefix
        return [
            Endpoint.at(p, "context.build", api.BuildRequest, api.BuildReply, self.builder.build),
            Endpoint.at(p, "context.get", api.GenerationRef, api.BuildReply, self.builder.get),
            Endpoint.at(p, "context.trace", api.GenerationRef, api.TraceReply, self.builder.trace),
            Endpoint.at(p, "context.commit", api.CommitRequest, api.CommitReply, self.committer.commit),
            Endpoint.at(p, "context.clear", api.ClearRequest, api.ClearReply, self.committer.clear),
            Endpoint.at(p, "context.ingest", api.IngestRequest, api.IngestReply, self.documents.ingest),
        ]

    def evictor(self) -> evict.Evictor:
        return self._evict

    async def serving(self, parts: Parts) -> None:
        assert self._key is not None
        log.info("context.ready", endpoints=sorted(e.action for e in self.endpoints()), key_id=self._key.key_id)

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
