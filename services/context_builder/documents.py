"""Ingesting documents into the index, and the index as the context-builder runs it.

A document version is ingested through the ledger, never written to PostgreSQL
directly. ``DocumentIngester.ingest`` (the ``context.ingest`` endpoint) cuts the
text into overlapping chunks (``chunk_text``; the cut is recorded as
``chunking``, e.g. ``chars:1200/200``) and appends ``document_ingested``
events to the tenant's reserved ``<prefix>.ledger.<tenant>._documents``
subject through the ledger-writer, as a service caller (the writer accepts
that kind from a service only, on that task only). A version too large for
one event is several events (parts) of the same version, each with its slice
of chunks; the parts go in as few atomic appends as the request size allows,
usually one. The call returns once the projection holds the version
(read-your-writes), so a build right after an ingest finds it.

The index itself (its fold, tables, search and live projection) is
``docs_projection``; ``DocumentIndex`` runs it with ingest and search.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import asyncpg
import blake3
import msgspec
import structlog
from nats.aio.client import Client

from agentledger.client import raise_error
from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.contracts.api import AppendReply
from agentledger.contracts.codec import encode
from agentledger.contracts.context_api import IngestReply, IngestRequest
from agentledger.errors import ConflictError, ContractError, UnavailableError
from agentledger.models.embedding import load_embedder
from agentledger.security.identity import Caller
from agentledger.services.context_builder.docs_projection import (
    DURABLE,
    PROJECTION_TABLES,
    DocumentHit,
    DocumentProjection,
    DocumentStore,
)
from agentledger.services.memory_policy.fold import Vectors

# Names the context-builder's forget handlers and its tests import from here.
__all__ = ["DURABLE", "PROJECTION_TABLES", "DocumentHit", "DocumentIndex", "DocumentIngester", "DocumentStore",
           "chunk_text", "doc_event_id", "document_events"]

log = structlog.get_logger()

# How long an ingest waits for the projection to hold what it appended.
CATCH_UP_S = 30.0
# Chunks per event (the contract's limit) and room kept in a writer request for its framing.
MAX_CHUNKS_PER_EVENT = 1000
REQUEST_HEADROOM = 64 * 1024
_MAX_EVENT_ID = 128

_append_reply = msgspec.json.Decoder(AppendReply)


# ---- chunking -------------------------------------------------------------------------------

# Where a chunk prefers to end, best first: a paragraph, a line, a sentence, a word.
_BREAKS = ("\n\n", "\n", ". ", " ")


def chunking_name(chunk_chars: int, overlap_chars: int) -> str:
    return f"chars:{chunk_chars}/{overlap_chars}"


def chunk_text(text: str, chunk_chars: int, overlap_chars: int) -> list[str]:
    """``text`` cut into chunks of at most ``chunk_chars`` characters, each starting
    ``overlap_chars`` before the previous one ended.

    A chunk ends at the last paragraph, line, sentence or word break in its second
    half when there is one, so chunks rarely cut a word. Deterministic: the same
    text and sizes always give the same chunks. Whitespace-only chunks are dropped.
    """
    if chunk_chars < 1:
        raise ContractError("chunk_chars must be positive", code="invalid_value", path="$.chunk_chars")
    if not 0 <= overlap_chars < chunk_chars:
        raise ContractError(f"overlap_chars ({overlap_chars}) must be smaller than chunk_chars "
                            f"({chunk_chars})", code="invalid_value", path="$.overlap_chars")
    out: list[str] = []
    n, start = len(text), 0
    while start < n:
        end = min(start + chunk_chars, n)
        if end < n:
            floor = start + chunk_chars // 2
            for sep in _BREAKS:
                at = text.rfind(sep, floor, end)
                if at >= 0:
                    end = at + len(sep)
                    break
        piece = text[start:end]
        if piece.strip():
            out.append(piece)
        if end >= n:
            break
        start = max(end - overlap_chars, start + 1)
    return out


def content_digest(text: str) -> str:
    return blake3.blake3(text.encode()).hexdigest()


def doc_event_id(doc_id: str, version: int, part: int) -> str:
    """``doc:<doc_id>:<version>:<part>``; a doc id an event id cannot hold (``.``, length) is
    replaced by its blake3, so the id is still deterministic (a retry is a duplicate)."""
    candidate = f"doc:{doc_id}:{version}:{part}"
    if len(candidate) <= _MAX_EVENT_ID and "." not in doc_id:
        return candidate
    return f"doc:h{blake3.blake3(doc_id.encode()).hexdigest()[:48]}:{version}:{part}"


def document_events(tenant: str, request: IngestRequest, chunks: Sequence[str], *, producer: str,
                    occurred_at: datetime, max_event_bytes: int) -> list[bytes]:
    """The encoded ``document_ingested`` events (parts) of one version, each at most
    ``max_event_bytes`` and ``MAX_CHUNKS_PER_EVENT`` chunks, in chunk order."""
    chunking = chunking_name(request.chunk_chars, request.overlap_chars)
    digest = content_digest(request.text)

    def event(part: int, items: list[ev.DocumentChunk]) -> ev.DocumentIngestedEvent:
        return ev.DocumentIngestedEvent(
            event_id=doc_event_id(request.doc_id, request.version, part), tenant=tenant,
            task_id=ev.DOCUMENTS_TASK, producer=producer, occurred_at=occurred_at, schema_version=1,
            payload=ev.DocumentIngested(doc_id=request.doc_id, version=request.version,
                                        source=request.source, title=request.title, chunking=chunking,
                                        chunks=items, content_blake3=digest,
                                        data_subjects=list(request.data_subjects)))

    items = [ev.DocumentChunk(index=i, text=t) for i, t in enumerate(chunks)]
    # An empty part's size plus each chunk's encoded size (and a comma) is the part's exact size;
    # the id of part 9999 is as long as any part's here.
    base = len(encode(event(9999, [])))
    out: list[bytes] = []
    part: list[ev.DocumentChunk] = []
    size = base
    for item in items:
        grow = len(encode(item)) + (1 if part else 0)
        if base + grow > max_event_bytes:
            raise ContractError(f"chunk {item.index} alone makes an event over the limit of "
                                f"{max_event_bytes} bytes; use a smaller chunk_chars",
                                code="event_too_large", path="$.chunk_chars")
        if part and (size + grow > max_event_bytes or len(part) >= MAX_CHUNKS_PER_EVENT):
            out.append(encode(event(len(out), part)))
            part, size, grow = [], base, grow - 1
        part.append(item)
        size += grow
    out.append(encode(event(len(out), part)))
    return out


def writer_requests(events: Sequence[bytes], *, max_events: int, max_bytes: int) -> list[bytes]:
    """``{"events": [...]}`` bodies of at most ``max_events`` events and ``max_bytes`` bytes each."""
    bodies: list[bytes] = []
    batch: list[bytes] = []
    size = 0
    for data in events:
        if batch and (len(batch) >= max_events or size + len(data) + 1 > max_bytes):
            bodies.append(b'{"events":[' + b",".join(batch) + b"]}")
            batch, size = [], 0
        batch.append(data)
        size += len(data) + 1
    if batch:
        bodies.append(b'{"events":[' + b",".join(batch) + b"]}")
    return bodies


# ---- ingest ------------------------------------------------------------------------------------------

class DocumentIngester:
    """``context.ingest``: chunk a document version and append it through the writer; see the
    module docstring. One ingest per (tenant, doc_id) at a time."""

    def __init__(self, settings: Settings, nc: Client, pool: asyncpg.Pool,
                 projection: DocumentProjection) -> None:
        self.settings = settings
        self._nc = nc
        self._pool = pool
        self._projection = projection
        self.store = projection.store
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    async def ingest(self, caller: Caller, request: IngestRequest) -> IngestReply:
        caller.require_tenant(request.tenant, "$.tenant")
        tenant = request.tenant
        chunks = chunk_text(request.text, request.chunk_chars, request.overlap_chars)
        if not chunks:
            raise ContractError("the document has no text to index (only whitespace)", code="invalid_value",
                                path="$.text")
        chunking = chunking_name(request.chunk_chars, request.overlap_chars)
        digest = content_digest(request.text)
        key = (tenant, request.doc_id)
        lock = self._locks.setdefault(key, asyncio.Lock())
        try:
            async with lock:
                return await self._ingest(caller, request, chunks, chunking, digest)
        finally:
            if not lock.locked() and self._locks.get(key) is lock:
                del self._locks[key]

    async def _ingest(self, caller: Caller, request: IngestRequest, chunks: list[str], chunking: str,
                      digest: str) -> IngestReply:
        tenant, doc_id, version = request.tenant, request.doc_id, request.version
        head = (await self.store.heads(self._pool, tenant, [doc_id])).get(doc_id)
        seen = await self.store.version(self._pool, tenant, doc_id, version)
        occurred_at = datetime.now(UTC)
        if seen is not None:
            if (seen.content_blake3, seen.chunking) != (digest, chunking):
                raise ConflictError(f"document {doc_id!r} version {version} was ingested with other content "
                                    "or chunking; ingest a new version", code="version_exists", path="$.version")
            current = head is not None and head.version == version
            if head is None or not current or head.chunks >= len(chunks):
                return IngestReply(ok=True, doc_id=doc_id, version=version, chunks=len(chunks),
                                   seq=head.last_seq if head is not None and current else seen.first_seq,
                                   duplicate=True)
            # A version whose parts did not all arrive (an earlier ingest failed half way):
            # the same events again, byte for byte, so the writer answers the stored ones as
            # duplicates.
            occurred_at = head.ingested_at
        elif head is not None and head.version > version:
            raise ConflictError(f"document {doc_id!r} is at version {head.version}; a version must be newer",
                                code="stale_version", path="$.version")
        events = document_events(tenant, request, chunks, producer=caller.agent or "operator",
                                 occurred_at=occurred_at, max_event_bytes=self.settings.max_event_bytes)
        max_bytes = max(REQUEST_HEADROOM, (self._nc.max_payload or 1 << 20) - REQUEST_HEADROOM)
        last, fresh = 0, False
        for body in writer_requests(events, max_events=self.settings.max_batch_events, max_bytes=max_bytes):
            try:
                msg = await self._nc.request(f"{self.settings.prefix}.writer.append", body, timeout=30)
            except Exception as exc:
                raise UnavailableError("the ledger-writer did not answer; retry (the same version again "
                                       "is a duplicate)") from exc
            reply = _append_reply.decode(msg.data)
            if reply.error is not None:
                raise_error(reply.error)
            for r in reply.results:
                last = max(last, r.seq)
                fresh = fresh or not r.duplicate
        if last:
            await self._projection.wait_for(last, CATCH_UP_S)
        log.info("documents.ingested", tenant=tenant, doc_id=doc_id, version=version, chunks=len(chunks),
                 parts=len(events), seq=last)
        return IngestReply(ok=True, doc_id=doc_id, version=version, chunks=len(chunks), seq=last,
                           duplicate=not fresh)


class DocumentIndex:
    """The document index as the context-builder runs it: the projection loop, ingest and search.

    ``start()`` / ``stop()`` / ``alive()`` / ``failed`` run the projection
    (``DocumentProjection``); ``ingest(caller, request)`` is the ``context.ingest``
    endpoint; ``search(db, tenant, query, query_vector, k)`` the ranked search
    (``DocumentStore.search``); ``embed(query)`` the query's vector, from the same
    embedder the chunks were indexed with.
    """

    def __init__(self, settings: Settings, nc: Client, pool: asyncpg.Pool,
                 vectors: Vectors | None = None) -> None:
        self.settings = settings
        self.vectors = vectors if vectors is not None else Vectors(load_embedder(settings))
        self.projection = DocumentProjection(settings, nc, pool, self.vectors)
        self.store = self.projection.store
        self.ingester = DocumentIngester(settings, nc, pool, self.projection)
        self.failed = self.projection.failed

    async def start(self) -> None:
        await self.projection.start()

    async def stop(self) -> None:
        await self.projection.stop()

    def alive(self) -> bool:
        return self.projection.alive()

    async def ingest(self, caller: Caller, request: IngestRequest) -> IngestReply:
        return await self.ingester.ingest(caller, request)

    async def embed(self, query: str) -> list[float]:
        return (await self.vectors.of([query]))[0]

    async def search(self, db_: Any, tenant: str, query: str | None, query_vector: Sequence[float] | None,
                     k: int = 8) -> list[DocumentHit]:
        return await self.store.search(db_, tenant, query, query_vector, k)
