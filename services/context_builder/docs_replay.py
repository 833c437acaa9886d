"""Replay of the document index: rebuild it from the ledger, or verify it against the ledger.

Both fold one tenant at a time: each tenant's ``_documents`` subject is read
with an ordered consumer and folded from nothing by ``fold_documents``, the
code the live projection runs, so memory is bounded by the largest tenant.

``rebuild_documents`` empties and refills the index tables in one transaction
holding the document watermark's row lock, so the live projection waits
meanwhile and then carries on from the rebuilt watermark (readers see the old
rows or the new ones).

``verify_documents`` waits for the live projection to reach the stream's end,
folds every tenant up to the live watermark, and compares documents, versions
and chunks (text, full-text vector and embedding) in one snapshot.

The ledger side (connecting, the tenants, reading a subject, waiting for the
live projection) is ``agentledger.projection.replay``, shared by both replays.
"""

from __future__ import annotations

import time

import asyncpg
import structlog
from nats.aio.client import Client

from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.models.embedding import load_embedder
from agentledger.projection.live import passed_over
from agentledger.projection.replay import (
    connect,
    diff,
    read_subject,
    same_vector,
    subject_last_seq,
    subject_tenants,
    wait_live,
)
from agentledger.services.context_builder.documents import (
    DURABLE,
    PROJECTION_TABLES,
    DocFold,
    DocumentStore,
    decode_document,
    documents_filter,
    fold_documents,
)
from agentledger.services.memory_policy.fold import Vectors
from agentledger.services.memory_policy.store import parse_vector
from agentledger.services.projector.rebuild import stream_last_seq
from agentledger.stores import db

log = structlog.get_logger()


async def read_tenant(nc: Client, settings: Settings, tenant: str, upto: int,
                      skip: frozenset[int] = frozenset()) -> list[tuple[int, ev.EventBase]]:
    """The document events of one tenant with sequence at most ``upto``, in ledger order (without
    the sequences the live projection passed over, ``skip``)."""
    return await read_subject(nc, settings, tenant, ev.DOCUMENTS_TASK, upto, decode=decode_document, noun="document",
                              skip=skip)


def fold_tenant(events: list[tuple[int, ev.EventBase]]) -> dict[str, DocFold]:
    """The tenant's documents folded from nothing (every one ``changed``: all of it is written)."""
    docs: dict[str, DocFold] = {}
    fold_documents(docs, events)
    return docs


async def rebuild_documents(settings: Settings) -> dict[str, int]:
    """Drop and rebuild the document index from the ledger; what it wrote."""
    started = time.perf_counter()
    vectors = Vectors(load_embedder(settings))
    nc, conn = await connect(settings)
    store = DocumentStore()
    counts = {"tenants": 0, "events": 0, "documents": 0, "chunks": 0}
    try:
        await db.migrate_conn(conn)
        async with conn.transaction():
            await store.lock_watermark(conn)  # the live projection waits for the switch
            upto = await stream_last_seq(nc, settings)
            await conn.execute("TRUNCATE " + ", ".join(PROJECTION_TABLES))
            skip = await passed_over(conn, DURABLE)
            for tenant in await subject_tenants(nc, settings, documents_filter(settings.prefix)):
                events = await read_tenant(nc, settings, tenant, upto, skip)
                docs = fold_tenant(events)
                counts["chunks"] += await store.write(conn, tenant, docs, vectors)
                counts["documents"] += len(docs)
                counts["tenants"] += 1
                counts["events"] += len(events)
            await store.set_watermark(conn, upto)
        counts["last_seq"] = upto
    finally:
        await conn.close()
        await nc.close()
    log.info("documents.rebuilt", seconds=round(time.perf_counter() - started, 3), **counts)
    return counts


async def verify_documents(settings: Settings, wait_s: float = 60.0) -> list[str]:
    """Fold the ledger's documents subjects and compare with the live tables; the differences."""
    vectors = Vectors(load_embedder(settings))
    nc, conn = await connect(settings)
    store = DocumentStore()
    problems: list[str] = []
    try:
        target = await subject_last_seq(nc, settings, documents_filter(settings.prefix))
        await wait_live(conn, store, target, wait_s, noun="document",
                        runner="the context-builder")
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            upto = await store.watermark(conn) or 0
            tenants = set(await subject_tenants(nc, settings, documents_filter(settings.prefix)))
            tenants |= {r[0] for r in await conn.fetch(
                "SELECT DISTINCT tenant FROM documents UNION SELECT DISTINCT tenant FROM document_chunks"
                " UNION SELECT DISTINCT tenant FROM document_versions")}
            skip = await passed_over(conn, DURABLE)
            for tenant in sorted(tenants):
                docs = fold_tenant(await read_tenant(nc, settings, tenant, upto, skip))
                problems += await _compare(conn, tenant, docs, vectors)
    finally:
        await conn.close()
        await nc.close()
    log.info("documents.verified", ok=not problems, differences=len(problems))
    return problems


async def _compare(conn: asyncpg.Connection, tenant: str, docs: dict[str, DocFold],
                   vectors: Vectors) -> list[str]:
    heads = {d: (h.version, h.source, h.title, h.chunking, h.content_blake3, h.chunks, h.first_seq, h.last_seq,
                 h.ingested_at) for d, f in docs.items() if (h := f.head) is not None}
    live_heads = {r[0]: (int(r[1]), r[2], r[3], r[4], r[5], int(r[6]), int(r[7]), int(r[8]), r[9])
                  for r in await conn.fetch(
        "SELECT doc_id, version, source, title, chunking, content_blake3, chunks, first_seq, last_seq, ingested_at"
        " FROM documents WHERE tenant = $1", tenant)}
    problems = diff(tenant, "document", heads, live_heads)
    versions = {}
    for d, f in docs.items():
        for ver, v in f.new_versions.items():
            status, superseded = v.status, v.superseded_seq
            if status == "current" and ver in f.superseded:
                status, superseded = "superseded", f.superseded[ver]
            versions[(d, ver)] = (status, v.source, v.chunking, v.content_blake3, v.first_seq, superseded)
    live_versions = {(r[0], int(r[1])): (r[2], r[3], r[4], r[5], int(r[6]), None if r[7] is None else int(r[7]))
                     for r in await conn.fetch(
        "SELECT doc_id, version, status, source, chunking, content_blake3, first_seq, superseded_seq"
        " FROM document_versions WHERE tenant = $1", tenant)}
    problems += diff(tenant, "document version", versions, live_versions)
    chunks = {(d, i): c for d, f in docs.items() for i, c in f.new_chunks.items()}
    live = {(r[0], int(r[1])): (int(r[2]), int(r[3]), r[4], r[5], r[6]) for r in await conn.fetch(
        "SELECT doc_id, chunk_index, version, seq, text, tsv::text, embedding::text FROM document_chunks"
        " WHERE tenant = $1", tenant)}
    problems += diff(tenant, "chunk", {k: (c.version, c.seq, c.text) for k, c in chunks.items()},
                      {k: v[:3] for k, v in live.items()})
    both = sorted(chunks.keys() & live.keys())
    if not both:
        return problems
    texts = [chunks[k].search_text for k in both]
    expected_tsv = [r[0] for r in await conn.fetch(
        "SELECT to_tsvector('simple', t)::text FROM unnest($1::text[]) WITH ORDINALITY AS u(t, n) ORDER BY n",
        texts)]
    embeddings = await vectors.of(texts)
    for key, tsv, embedding in zip(both, expected_tsv, embeddings, strict=True):
        if live[key][3] != tsv:
            problems.append(f"{tenant}: chunk {key} full-text vector different")
        if not same_vector(embedding, parse_vector(live[key][4])):
            problems.append(f"{tenant}: chunk {key} embedding different")
    return problems
