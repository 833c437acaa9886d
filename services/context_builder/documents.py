"""The document index: RAG evidence kept as a projection of the ledger.

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

``DocumentProjection`` folds those subjects into PostgreSQL (tables: ``db``
migration 5) with the loop the memory projection runs too
(``agentledger.projection.live``): a durable pull consumer
``context-documents`` positioned from the watermark, each batch applied in ONE
transaction that row-locks the watermark, skips what it already holds and
moves it. Tables:

* ``document_watermark``: the last ledger sequence folded.
* ``documents``: one row per (tenant, doc_id): its current version, source,
  title, chunking, content digest, how many chunks are indexed.
* ``document_versions``: every version seen, ``current`` or ``superseded``
  (and the sequence that superseded it).
* ``document_chunks``: the chunks of each current version: text, the
  ``simple`` full-text vector (GIN) and the 256-dimension embedding (HNSW) of
  the title and text.

Version rules (``fold_documents``, the same code for the live projection and
replay): a newer version replaces the older one's chunks; a part of the
current version adds its chunks (a repeat adds nothing); an older version, or
the current version with other content, is recorded or ignored and indexes
nothing. Search (``DocumentStore.search``) ranks full text and vector
candidates of ONE tenant (the tenant filter is in the SQL that ranks, with
pgvector's iterative scan so a filtered vector query still returns ``k``) and
fuses them by reciprocal rank. Document text is evidence, never instruction:
the builder renders hits as data blocks.
"""

from __future__ import annotations

import asyncio
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
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
from agentledger.projection.live import LedgerProjection
from agentledger.security.identity import Caller
from agentledger.services.memory_policy.fold import Vectors
from agentledger.services.memory_policy.store import vector_text
from agentledger.stores.db import check_schema
from agentledger.stores.ledger import subject_key

log = structlog.get_logger()

DURABLE = "context-documents"
WATERMARK = "documents"
# Tables the projection consists of (what a rebuild empties and refills).
PROJECTION_TABLES = ("documents", "document_versions", "document_chunks")
# How long an ingest waits for the projection to hold what it appended.
CATCH_UP_S = 30.0
# Chunks per event (the contract's limit) and room kept in a writer request for its framing.
MAX_CHUNKS_PER_EVENT = 1000
REQUEST_HEADROOM = 64 * 1024
# Reciprocal rank fusion constant (Cormack et al.): a hit ranked r in a list adds 1 / (RRF_K + r).
RRF_K = 60
MAX_K = 100
DIMS = 256
_MAX_EVENT_ID = 128

_decoder = msgspec.json.Decoder(ev.AnyEvent)
_append_reply = msgspec.json.Decoder(AppendReply)


def documents_filter(prefix: str) -> str:
    """The ledger subjects of every tenant's documents: ``<prefix>.ledger.*._documents``."""
    return f"{prefix}.ledger.*.{ev.DOCUMENTS_TASK}"


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
                                        chunks=items, content_blake3=digest))

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


# ---- the fold (live projection and replay) ----------------------------------------------------

@dataclass
class DocHead:
    """A ``documents`` row: the current version of one document."""

    doc_id: str
    version: int
    source: str
    title: str
    chunking: str
    content_blake3: str | None
    chunks: int
    first_seq: int
    last_seq: int
    ingested_at: datetime


@dataclass(frozen=True)
class ChunkRow:
    doc_id: str
    chunk_index: int
    version: int
    seq: int
    text: str
    title: str

    @property
    def search_text(self) -> str:
        return search_text(self.title, self.text)


@dataclass(frozen=True)
class VersionRow:
    doc_id: str
    version: int
    status: str
    source: str
    chunking: str
    content_blake3: str | None
    first_seq: int
    superseded_seq: int | None = None


@dataclass
class DocFold:
    """One document while a batch is folded: the head, the chunk indexes stored for it, and
    what to write (``replaced``: the stored chunks belong to an older version and go)."""

    head: DocHead | None
    indexes: set[int] = field(default_factory=set)
    replaced: bool = False
    new_chunks: dict[int, ChunkRow] = field(default_factory=dict)
    new_versions: dict[int, VersionRow] = field(default_factory=dict)
    superseded: dict[int, int] = field(default_factory=dict)
    changed: bool = False


def search_text(title: str, text: str) -> str:
    """What the full-text and vector indexes of a chunk are computed from."""
    return f"{title}\n{text}" if title else text


def fold_documents(docs: dict[str, DocFold], events: Sequence[tuple[int, ev.EventBase]]) -> int:
    """Apply the document events of one tenant, in ledger order, to ``docs`` (loaded with the
    stored head of every document they name, or None); how many changed anything."""
    applied = 0
    for seq, event in events:
        p = ev.payload_of(event)
        assert isinstance(p, ev.DocumentIngested)
        doc = docs.setdefault(p.doc_id, DocFold(None))
        head = doc.head
        same = head is not None and (head.content_blake3, head.chunking) == (p.content_blake3, p.chunking)
        if head is None or p.version > head.version:
            if head is not None:
                doc.superseded[head.version] = seq
                doc.replaced = True
            doc.indexes.clear()
            doc.new_chunks.clear()
            doc.head = head = DocHead(p.doc_id, p.version, p.source, p.title, p.chunking, p.content_blake3,
                                      0, seq, seq, event.occurred_at)
            doc.new_versions.setdefault(p.version, VersionRow(p.doc_id, p.version, "current", p.source,
                                                              p.chunking, p.content_blake3, seq))
        elif p.version < head.version or not same:
            # An older version, or the current version with other content: recorded, never indexed.
            if p.version < head.version:
                doc.new_versions.setdefault(p.version, VersionRow(p.doc_id, p.version, "superseded", p.source,
                                                                  p.chunking, p.content_blake3, seq, seq))
            log.info("documents.ignored", doc_id=p.doc_id, version=p.version, current=head.version, seq=seq)
            doc.changed = True
            continue
        added = False
        for chunk in p.chunks:
            if chunk.index not in doc.indexes:
                doc.indexes.add(chunk.index)
                doc.new_chunks[chunk.index] = ChunkRow(p.doc_id, chunk.index, p.version, seq, chunk.text,
                                                       head.title)
                added = True
        head.chunks = len(doc.indexes)
        if added:
            head.last_seq = seq
        doc.changed = True
        applied += 1
    return applied


def decode_document(prefix: str, subject: str, data: bytes, seq: int) -> ev.EventBase | None:
    """The document event a message on a documents subject carries, or None (logged)."""
    key = subject_key(prefix, subject)
    try:
        event = _decoder.decode(data)
    except (msgspec.MsgspecError, RecursionError) as exc:
        log.warning("documents.undecodable", seq=seq, error=type(exc).__name__)
        return None
    if key is None or ev.kind_of(event) not in ev.DOCUMENT_KINDS or (event.tenant, event.task_id) != key:
        log.warning("documents.not_a_document_event", seq=seq, kind=ev.kind_of(event))
        return None
    return event


def by_tenant(events: Sequence[tuple[int, ev.EventBase]]) -> dict[str, list[tuple[int, ev.EventBase]]]:
    out: dict[str, list[tuple[int, ev.EventBase]]] = defaultdict(list)
    for seq, event in events:
        out[event.tenant].append((seq, event))
    return out


# ---- search hits --------------------------------------------------------------------------------

class DocumentHit(msgspec.Struct, frozen=True):
    """One chunk found for a query: where it comes from, and how it ranked.

    ``score``: reciprocal-rank fusion of the full-text rank ``fts_rank`` and the
    vector rank ``vector_rank`` (1-based; None: not a candidate of that list);
    ``distance``: cosine distance to the query vector.
    """

    doc_id: str
    version: int
    chunk_index: int
    text: str
    title: str
    source: str
    chunking: str
    seq: int
    score: float
    fts_rank: int | None = None
    vector_rank: int | None = None
    distance: float | None = None

    @property
    def unit_id(self) -> str:
        return f"doc:{self.doc_id}#{self.chunk_index}"


# ---- PostgreSQL ---------------------------------------------------------------------------------

class DocumentStore:
    """Statements of the document tables in one schema (``public`` for the live service):
    the watermark, the fold's reads and writes, and the ranked search."""

    def __init__(self, schema: str = "public") -> None:
        s = self.schema = check_schema(schema)

        def q(template: str) -> str:
            return template.replace("{s}", s)

        self._lock_wm = q("SELECT seq, tableoid::bigint FROM {s}.document_watermark WHERE name = $1 FOR UPDATE")
        self._get_wm = q("SELECT seq FROM {s}.document_watermark WHERE name = $1")
        self._set_wm = q("INSERT INTO {s}.document_watermark(name, seq) VALUES ($1, $2)"
                         " ON CONFLICT (name) DO UPDATE SET seq = excluded.seq")
        self._heads = q("SELECT doc_id, version, source, title, chunking, content_blake3, chunks, first_seq,"
                        " last_seq, ingested_at FROM {s}.documents WHERE tenant = $1 AND doc_id = ANY($2::text[])")
        self._indexes = q("SELECT doc_id, chunk_index FROM {s}.document_chunks"
                          " WHERE tenant = $1 AND doc_id = ANY($2::text[])")
        self._version = q("SELECT version, status, source, chunking, content_blake3, first_seq, superseded_seq"
                          " FROM {s}.document_versions WHERE tenant = $1 AND doc_id = $2 AND version = $3")
        self._put_heads = q(
            "INSERT INTO {s}.documents(tenant, doc_id, version, source, title, chunking, content_blake3, chunks,"
            " first_seq, last_seq, ingested_at)"
            " SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[],"
            " $8::int[], $9::bigint[], $10::bigint[], $11::timestamptz[])"
            " ON CONFLICT (tenant, doc_id) DO UPDATE SET version = excluded.version, source = excluded.source,"
            " title = excluded.title, chunking = excluded.chunking, content_blake3 = excluded.content_blake3,"
            " chunks = excluded.chunks, first_seq = excluded.first_seq, last_seq = excluded.last_seq,"
            " ingested_at = excluded.ingested_at")
        self._drop_chunks = q("DELETE FROM {s}.document_chunks WHERE tenant = $1 AND doc_id = ANY($2::text[])")
        self._put_chunks = q(
            "INSERT INTO {s}.document_chunks(tenant, doc_id, chunk_index, version, seq, text, tsv, embedding)"
            " SELECT $1, d, i, v, sq, tx, to_tsvector('simple', st), em::vector"
            " FROM unnest($2::text[], $3::int[], $4::bigint[], $5::bigint[], $6::text[], $7::text[], $8::text[])"
            " AS u(d, i, v, sq, tx, st, em)"
            " ON CONFLICT (tenant, doc_id, chunk_index) DO NOTHING")
        self._put_versions = q(
            "INSERT INTO {s}.document_versions(tenant, doc_id, version, status, source, chunking, content_blake3,"
            " first_seq, superseded_seq)"
            " SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::text[],"
            " $8::bigint[], $9::bigint[])"
            " ON CONFLICT (tenant, doc_id, version) DO NOTHING")
        self._supersede = q(
            "UPDATE {s}.document_versions v SET status = 'superseded', superseded_seq = u.sq"
            " FROM unnest($2::text[], $3::bigint[], $4::bigint[]) AS u(d, ver, sq)"
            " WHERE v.tenant = $1 AND v.doc_id = u.d AND v.version = u.ver AND v.status = 'current'")
        self._search_both = q(_search_sql(fts=True, vec=True))
        self._search_fts = q(_search_sql(fts=True, vec=False))
        self._search_vec = q(_search_sql(fts=False, vec=True))

    # ---- watermark ------------------------------------------------------------------------

    async def watermark(self, conn: Any) -> int | None:
        value = await conn.fetchval(self._get_wm, WATERMARK)
        return None if value is None else int(value)

    async def lock_watermark(self, conn: asyncpg.Connection) -> tuple[int, int] | None:
        """(seq, oid of the watermark table), row-locked until the end of the transaction."""
        row = await conn.fetchrow(self._lock_wm, WATERMARK)
        return None if row is None else (int(row[0]), int(row[1]))

    async def set_watermark(self, conn: asyncpg.Connection, seq: int) -> None:
        await conn.execute(self._set_wm, WATERMARK, seq)

    # ---- reads --------------------------------------------------------------------------------

    async def heads(self, conn: Any, tenant: str, doc_ids: Sequence[str]) -> dict[str, DocHead]:
        rows = await conn.fetch(self._heads, tenant, list(doc_ids))
        return {r[0]: DocHead(r[0], int(r[1]), r[2], r[3], r[4], r[5], int(r[6]), int(r[7]), int(r[8]), r[9])
                for r in rows}

    async def version(self, conn: Any, tenant: str, doc_id: str, version: int) -> VersionRow | None:
        r = await conn.fetchrow(self._version, tenant, doc_id, version)
        if r is None:
            return None
        return VersionRow(doc_id, int(r[0]), r[1], r[2], r[3], r[4], int(r[5]),
                          None if r[6] is None else int(r[6]))

    async def load(self, conn: Any, tenant: str, doc_ids: Sequence[str]) -> dict[str, DocFold]:
        """The fold state of ``doc_ids``: heads and the chunk indexes stored for them."""
        ids = sorted(set(doc_ids))
        heads = await self.heads(conn, tenant, ids)
        docs = {d: DocFold(heads.get(d)) for d in ids}
        for r in await conn.fetch(self._indexes, tenant, ids):
            docs[r[0]].indexes.add(int(r[1]))
        return docs

    async def search(self, db_: Any, tenant: str, query: str | None, query_vector: Sequence[float] | None,
                     k: int = 8) -> list[DocumentHit]:
        """The ``k`` best chunks of ``tenant`` for ``query`` (full text) and ``query_vector``
        (cosine), fused by reciprocal rank; either may be None, not both.

        ``db_`` is a connection or a pool. The tenant filter is inside both ranked queries;
        the vector query runs with ``hnsw.iterative_scan`` so a filter never starves it.
        """
        if not 1 <= k <= MAX_K:
            raise ContractError(f"k must be 1..{MAX_K}, not {k}", code="invalid_value", path="$.k")
        text = query.strip() if query else ""
        if query_vector is not None and len(query_vector) != DIMS:
            raise ContractError(f"the query vector has {len(query_vector)} dimensions, the index {DIMS}",
                                code="invalid_value", path="$.query_vector")
        if not text and query_vector is None:
            raise ContractError("a document search needs a query or a query vector", code="missing_field",
                                path="$.document_query")
        pool = k * 4
        args: tuple[Any, ...]
        if text and query_vector is not None:
            sql, args = self._search_both, (tenant, text, vector_text(query_vector), pool, k)
        elif text:
            sql, args = self._search_fts, (tenant, text, pool, k)
        else:
            sql, args = self._search_vec, (tenant, vector_text(query_vector), pool, k)
        if isinstance(db_, asyncpg.Pool):
            async with db_.acquire() as conn:
                rows = await self._ranked(conn, sql, args)
        else:
            rows = await self._ranked(db_, sql, args)
        return [DocumentHit(r[0], int(r[1]), int(r[2]), r[3], r[4], r[5], r[6], int(r[7]), float(r[8]),
                            None if r[9] is None else int(r[9]), None if r[10] is None else int(r[10]),
                            None if r[11] is None else float(r[11])) for r in rows]

    @staticmethod
    async def _ranked(conn: Any, sql: str, args: tuple[Any, ...]) -> list[Any]:
        async with conn.transaction():
            await conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            return list(await conn.fetch(sql, *args))

    # ---- writes ---------------------------------------------------------------------------------

    async def write(self, conn: asyncpg.Connection, tenant: str, docs: dict[str, DocFold],
                    vectors: Vectors) -> int:
        """Write what folding changed; the number of chunk rows written."""
        changed = {d: f for d, f in sorted(docs.items()) if f.changed}
        if not changed:
            return 0
        chunks = [c for f in changed.values() for _, c in sorted(f.new_chunks.items())]
        embeddings = await vectors.of([c.search_text for c in chunks]) if chunks else []
        replaced = [d for d, f in changed.items() if f.replaced]
        if replaced:
            await conn.execute(self._drop_chunks, tenant, replaced)
        heads = [f.head for f in changed.values() if f.head is not None]
        if heads:
            await conn.execute(self._put_heads, tenant, *_columns(
                [(h.doc_id, h.version, h.source, h.title, h.chunking, h.content_blake3, h.chunks, h.first_seq,
                  h.last_seq, h.ingested_at) for h in heads], 10))
        versions = [v for f in changed.values() for _, v in sorted(f.new_versions.items())]
        if versions:
            await conn.execute(self._put_versions, tenant, *_columns(
                [(v.doc_id, v.version, v.status, v.source, v.chunking, v.content_blake3, v.first_seq,
                  v.superseded_seq) for v in versions], 8))
        superseded = [(d, ver, sq) for d, f in changed.items() for ver, sq in sorted(f.superseded.items())]
        if superseded:
            await conn.execute(self._supersede, tenant, *_columns(superseded, 3))
        if chunks:
            await conn.execute(self._put_chunks, tenant, *_columns(
                [(c.doc_id, c.chunk_index, c.version, c.seq, c.text, c.search_text, vector_text(e))
                 for c, e in zip(chunks, embeddings, strict=True)], 7))
        return len(chunks)


# The query's words as a tsquery matching any of them, each also as a prefix ("tuesday" finds
# "tuesdays": the ``simple`` configuration does not stem). plainto_tsquery does the quoting.
_ANY_TERM = (r"regexp_replace(replace(plainto_tsquery('simple', :text)::text, ' & ', ' | '),"
             r" '''( |$)', ''':*\1', 'g')::tsquery")


def _search_sql(*, fts: bool, vec: bool) -> str:
    """The ranked search of one tenant: full-text and/or vector candidates (``:pool`` of each),
    fused by reciprocal rank, the best ``:k`` with their document's metadata."""
    names = ["tenant", *(["text"] if fts else []), *(["vector"] if vec else []), "pool", "k"]
    ctes, ranks = [], []
    if fts:
        ctes.append("fts AS (SELECT c.doc_id, c.chunk_index, row_number() OVER"  # noqa: S608 - constants only
                    " (ORDER BY ts_rank_cd(c.tsv, tq.q) DESC, c.doc_id, c.chunk_index) AS r"
                    " FROM {s}.document_chunks c, (SELECT " + _ANY_TERM + " AS q) tq"
                    " WHERE c.tenant = :tenant AND c.tsv @@ tq.q ORDER BY r LIMIT :pool)")
        ranks.append("fts")
    if vec:
        # MATERIALIZED, then ranked again: an iterative scan returns rows in relaxed order.
        ctes.append("vec AS MATERIALIZED (SELECT doc_id, chunk_index, embedding <=> :vector::vector AS dist"
                    " FROM {s}.document_chunks WHERE tenant = :tenant AND embedding IS NOT NULL"
                    " ORDER BY embedding <=> :vector::vector LIMIT :pool),"
                    " vr AS (SELECT doc_id, chunk_index, dist, row_number() OVER"
                    " (ORDER BY dist, doc_id, chunk_index) AS r FROM vec)")
        ranks.append("vr")
    if fts and vec:
        fused = ("f AS (SELECT doc_id, chunk_index, fts.r AS fr, vr.r AS vr, vr.dist"
                 " FROM fts FULL JOIN vr USING (doc_id, chunk_index))")
    elif fts:
        fused = "f AS (SELECT doc_id, chunk_index, r AS fr, NULL::bigint AS vr, NULL::float8 AS dist FROM fts)"
    else:
        fused = "f AS (SELECT doc_id, chunk_index, NULL::bigint AS fr, r AS vr, dist FROM vr)"
    select = (" SELECT c.doc_id, c.version, c.chunk_index, c.text, d.title, d.source, d.chunking, c.seq,"
              " coalesce(1.0 / (:rrf + f.fr), 0) + coalesce(1.0 / (:rrf + f.vr), 0) AS score,"
              " f.fr, f.vr, f.dist FROM f"
              " JOIN {s}.document_chunks c ON c.tenant = :tenant AND c.doc_id = f.doc_id"
              " AND c.chunk_index = f.chunk_index"
              " JOIN {s}.documents d ON d.tenant = :tenant AND d.doc_id = c.doc_id"
              " ORDER BY score DESC, c.doc_id, c.chunk_index LIMIT :k")
    sql = "WITH " + ", ".join([*ctes, fused]) + select.replace(":rrf", str(RRF_K))
    numbers = {name: f"${i}" for i, name in enumerate(names, 1)}
    return re.sub(r"(?<!:):([a-z]+)\b", lambda m: numbers[m[1]], sql)


def _columns(rows: Sequence[tuple[Any, ...]], width: int) -> list[list[Any]]:
    cols: list[list[Any]] = [[] for _ in range(width)]
    for row in rows:
        for col, value in zip(cols, row, strict=True):
            col.append(value)
    return cols


async def fold_batch(conn: asyncpg.Connection, index: DocumentStore, vectors: Vectors,
                     events: Sequence[tuple[int, ev.EventBase]]) -> int:
    """Fold decoded document events of any tenants into the tables; chunk rows written."""
    rows = 0
    for tenant, items in sorted(by_tenant(events).items()):
        doc_ids = [ev.payload_of(e).doc_id for _, e in items]  # type: ignore[attr-defined]
        docs = await index.load(conn, tenant, doc_ids)
        fold_documents(docs, items)
        rows += await index.write(conn, tenant, docs, vectors)
    return rows


# ---- the live projection ---------------------------------------------------------------------------

class DocumentProjection(LedgerProjection[DocumentStore]):
    """Folds the ``_documents`` subjects into PostgreSQL with the memory projection's loop
    (``agentledger.projection.live``): a durable consumer positioned from the watermark, one
    transaction per batch, rebinding when a replay moved the watermark. ``start()``, ``stop()``,
    ``alive()``, ``wait_for(seq)``, ``failed``."""

    durable = DURABLE
    log_name = "documents"
    noun = "document"
    description = "agentledger document index (position follows PostgreSQL)"

    def __init__(self, settings: Settings, nc: Client, pool: asyncpg.Pool, vectors: Vectors) -> None:
        super().__init__(settings, nc, pool, DocumentStore())
        self._vectors = vectors

    def filter_subject(self) -> str:
        return documents_filter(self.settings.prefix)

    async def apply(self, conn: asyncpg.Connection, fresh: list[tuple[int, Any]]) -> dict[str, int]:
        prefix = self.settings.prefix
        events = []
        for seq, msg in fresh:
            event = decode_document(prefix, msg.subject, msg.data, seq)
            if event is None:
                self.pass_over(seq, "undecodable", "not a document event of this subject's tenant")
            else:
                events.append((seq, event))
        return {"chunks": await fold_batch(conn, self.store, self._vectors, events)}


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
