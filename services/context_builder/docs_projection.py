"""The document index as a projection of the ``_documents`` subjects: its fold, its tables, its search.

Tables (``db`` migration 5; rebuilt by replay):

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
nothing. ``DocumentFold`` is all the projection writes
(``agentledger.projection.spec``): a batch's documents read back
(``DocumentStore.load``), folded, what changed written. ``DocumentProjection``
runs it live (a durable consumer ``context-documents`` positioned from the
watermark, one transaction per batch, poison messages recorded in
``projection_rejections``); ``docs_replay`` rebuilds it beside the live tables
and verifies it.

Search (``DocumentStore.search``) ranks full text and vector candidates of ONE
tenant (the tenant filter is in the SQL that ranks, with pgvector's iterative
scan so a filtered vector query still returns ``k``) and fuses them by
reciprocal rank. Document text is evidence, never instruction: the builder
renders hits as data blocks.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import asyncpg
import msgspec
import structlog
from nats.aio.client import Client

from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.errors import ContractError
from agentledger.projection.live import SubjectProjection
from agentledger.projection.spec import Rows, SubjectFold, WatermarkRow
from agentledger.services.memory_policy.fold import Vectors
from agentledger.services.memory_policy.store import vector_text
from agentledger.stores.db import columns

log = structlog.get_logger()

DURABLE = "context-documents"
WATERMARK = "documents"
# Tables the projection consists of, besides its watermark.
PROJECTION_TABLES = ("documents", "document_versions", "document_chunks")
# Reciprocal rank fusion constant (Cormack et al.): a hit ranked r in a list adds 1 / (RRF_K + r).
RRF_K = 60
MAX_K = 100
DIMS = 256


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

class DocumentStore(WatermarkRow):
    """Statements of the document tables in one schema (``public`` for the live service):
    the watermark, the fold's reads and writes, and the ranked search."""

    def __init__(self, schema: str = "public") -> None:
        super().__init__(schema, "document_watermark", WATERMARK)
        q = self.sql
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
            await conn.execute(self._put_heads, tenant, *columns(
                [(h.doc_id, h.version, h.source, h.title, h.chunking, h.content_blake3, h.chunks, h.first_seq,
                  h.last_seq, h.ingested_at) for h in heads], 10))
        versions = [v for f in changed.values() for _, v in sorted(f.new_versions.items())]
        if versions:
            await conn.execute(self._put_versions, tenant, *columns(
                [(v.doc_id, v.version, v.status, v.source, v.chunking, v.content_blake3, v.first_seq,
                  v.superseded_seq) for v in versions], 8))
        superseded = [(d, ver, sq) for d, f in changed.items() for ver, sq in sorted(f.superseded.items())]
        if superseded:
            await conn.execute(self._supersede, tenant, *columns(superseded, 3))
        if chunks:
            await conn.execute(self._put_chunks, tenant, *columns(
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


# ---- the projection ------------------------------------------------------------------------------

class DocumentFold(SubjectFold[DocumentStore]):
    """Document events → the document tables; see the module docstring."""

    durable = DURABLE
    task = ev.DOCUMENTS_TASK
    kinds = ev.DOCUMENT_KINDS
    log_name = "documents"
    noun = "document"
    description = "agentledger document index (position follows PostgreSQL)"
    runner = "the context-builder"
    forget_index = "documents"
    tables = ("document_watermark", *PROJECTION_TABLES)
    rows = (
        Rows("documents", "document", ("doc_id",), (
            ("", ("version", "source", "title", "chunking", "content_blake3", "chunks", "first_seq", "last_seq",
                  "ingested_at")),)),
        Rows("document_versions", "document version", ("doc_id", "version"), (
            ("", ("status", "source", "chunking", "content_blake3", "first_seq", "superseded_seq")),)),
        Rows("document_chunks", "chunk", ("doc_id", "chunk_index"), (
            ("", ("version", "seq", "text")), ("full-text vector", ("tsv",)), ("embedding", ("embedding",))),
            vectors=frozenset({"embedding"})),
    )

    store_type = DocumentStore

    def __init__(self, vectors: Vectors) -> None:
        self.vectors = vectors

    async def fold_tenant(self, conn: asyncpg.Connection, store: DocumentStore, tenant: str,
                          events: Sequence[tuple[int, ev.EventBase]]) -> dict[str, int]:
        """The tenant's documents the events name read back, folded, and what changed written."""
        docs = await store.load(conn, tenant, [ev.payload_of(e).doc_id for _, e in events])
        fold_documents(docs, events)
        return {"chunks": await store.write(conn, tenant, docs, self.vectors)}


decode_document = DocumentFold.decode


class DocumentProjection(SubjectProjection[DocumentStore]):
    """The document index, live: ``start()``, ``stop()``, ``alive()``, ``wait_for(seq)``, ``failed``."""

    def __init__(self, settings: Settings, nc: Client, pool: asyncpg.Pool, vectors: Vectors) -> None:
        super().__init__(settings, nc, pool, DocumentFold(vectors))
