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
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from typing import Any

import asyncpg
import structlog
from nats.aio.client import Client
from nats.js.api import ConsumerConfig, DeliverPolicy

from agentledger import auth, db
from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.embedding import load_embedder
from agentledger.errors import UnavailableError
from agentledger.ledger import ledger_subject
from agentledger.services.context_builder.documents import (
    PROJECTION_TABLES,
    DocFold,
    DocumentStore,
    decode_document,
    documents_filter,
    fold_documents,
)
from agentledger.services.memory_policy.fold import Vectors
from agentledger.services.memory_policy.store import parse_vector

log = structlog.get_logger()

IDLE_TIMEOUT_S = 30.0
# Embeddings equal within this (they are stored as float4).
VECTOR_TOLERANCE = 1e-5


async def document_tenants(nc: Client, settings: Settings) -> list[str]:
    """Tenants with at least one message on their documents subject."""
    info = await nc.jetstream().stream_info(settings.stream, subjects_filter=documents_filter(settings.prefix))
    head = f"{settings.prefix}.ledger."
    return sorted({s[len(head):].split(".", 1)[0] for s in (info.state.subjects or {})})


async def read_tenant(nc: Client, settings: Settings, tenant: str,
                      upto: int) -> list[tuple[int, ev.EventBase]]:
    """The document events of one tenant with sequence at most ``upto``, in ledger order."""
    subject = ledger_subject(settings.prefix, tenant, ev.DOCUMENTS_TASK)
    out: list[tuple[int, ev.EventBase]] = []
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def on_msg(msg: Any) -> None:
        if done.done():
            return
        md = msg.metadata
        seq, pending = int(md.sequence.stream), int(md.num_pending)
        if seq <= upto:
            event = decode_document(settings.prefix, msg.subject, msg.data, seq)
            if event is not None:
                out.append((seq, event))
        if seq >= upto or pending == 0:
            done.set_result(None)

    sub = await nc.jetstream().subscribe(subject, stream=settings.stream, cb=on_msg, ordered_consumer=True,
                                         config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
                                         pending_msgs_limit=0, pending_bytes_limit=0)
    try:
        await asyncio.wait_for(done, IDLE_TIMEOUT_S)
    except TimeoutError as exc:
        raise UnavailableError(f"no document message of tenant {tenant!r} for {IDLE_TIMEOUT_S}s") from exc
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return out


def fold_tenant(events: list[tuple[int, ev.EventBase]]) -> dict[str, DocFold]:
    """The tenant's documents folded from nothing (every one ``changed``: all of it is written)."""
    docs: dict[str, DocFold] = {}
    fold_documents(docs, events)
    return docs


async def _connect(settings: Settings) -> tuple[Client, asyncpg.Connection]:
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        conn = await db.connect(settings.database_url)
    except BaseException:
        await nc.close()
        raise
    return nc, conn


async def _last_seq(nc: Client, settings: Settings) -> int:
    info = await nc.jetstream().stream_info(settings.stream)
    return int(info.state.last_seq) if info.state.messages else 0


async def rebuild_documents(settings: Settings) -> dict[str, int]:
    """Drop and rebuild the document index from the ledger; what it wrote."""
    started = time.perf_counter()
    vectors = Vectors(load_embedder(settings))
    nc, conn = await _connect(settings)
    store = DocumentStore()
    counts = {"tenants": 0, "events": 0, "documents": 0, "chunks": 0}
    try:
        await db.migrate_conn(conn)
        async with conn.transaction():
            await store.lock_watermark(conn)  # the live projection waits for the switch
            upto = await _last_seq(nc, settings)
            await conn.execute("TRUNCATE " + ", ".join(PROJECTION_TABLES))
            for tenant in await document_tenants(nc, settings):
                events = await read_tenant(nc, settings, tenant, upto)
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


async def _wait_live(conn: asyncpg.Connection, store: DocumentStore, target: int, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while (await store.watermark(conn) or 0) < target:
        if time.monotonic() > deadline:
            raise UnavailableError(f"the document projection did not reach seq {target} within {wait_s}s; "
                                   "is the context-builder running?", code="projection_behind")
        await asyncio.sleep(0.1)


async def verify_documents(settings: Settings, wait_s: float = 60.0) -> list[str]:
    """Fold the ledger's documents subjects and compare with the live tables; the differences."""
    vectors = Vectors(load_embedder(settings))
    nc, conn = await _connect(settings)
    store = DocumentStore()
    problems: list[str] = []
    try:
        await _wait_live(conn, store, await _last_seq(nc, settings), wait_s)
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            upto = await store.watermark(conn) or 0
            tenants = set(await document_tenants(nc, settings))
            tenants |= {r[0] for r in await conn.fetch(
                "SELECT DISTINCT tenant FROM documents UNION SELECT DISTINCT tenant FROM document_chunks"
                " UNION SELECT DISTINCT tenant FROM document_versions")}
            for tenant in sorted(tenants):
                docs = fold_tenant(await read_tenant(nc, settings, tenant, upto))
                problems += await _compare(conn, tenant, docs, vectors)
    finally:
        await conn.close()
        await nc.close()
    log.info("documents.verified", ok=not problems, differences=len(problems))
    return problems


def _diff(tenant: str, what: str, want: dict[Any, Any], got: dict[Any, Any]) -> list[str]:
    out = [f"{tenant}: {what} {k} missing" for k in sorted(want.keys() - got.keys(), key=str)]
    out += [f"{tenant}: {what} {k} extra" for k in sorted(got.keys() - want.keys(), key=str)]
    out += [f"{tenant}: {what} {k} different" for k in sorted(want.keys() & got.keys(), key=str)
            if want[k] != got[k]]
    return out


async def _compare(conn: asyncpg.Connection, tenant: str, docs: dict[str, DocFold],
                   vectors: Vectors) -> list[str]:
    heads = {d: (h.version, h.source, h.title, h.chunking, h.content_blake3, h.chunks, h.first_seq, h.last_seq,
                 h.ingested_at) for d, f in docs.items() if (h := f.head) is not None}
    live_heads = {r[0]: (int(r[1]), r[2], r[3], r[4], r[5], int(r[6]), int(r[7]), int(r[8]), r[9])
                  for r in await conn.fetch(
        "SELECT doc_id, version, source, title, chunking, content_blake3, chunks, first_seq, last_seq, ingested_at"
        " FROM documents WHERE tenant = $1", tenant)}
    problems = _diff(tenant, "document", heads, live_heads)
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
    problems += _diff(tenant, "document version", versions, live_versions)
    chunks = {(d, i): c for d, f in docs.items() for i, c in f.new_chunks.items()}
    live = {(r[0], int(r[1])): (int(r[2]), int(r[3]), r[4], r[5], r[6]) for r in await conn.fetch(
        "SELECT doc_id, chunk_index, version, seq, text, tsv::text, embedding::text FROM document_chunks"
        " WHERE tenant = $1", tenant)}
    problems += _diff(tenant, "chunk", {k: (c.version, c.seq, c.text) for k, c in chunks.items()},
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
        if not _same_vector(embedding, parse_vector(live[key][4])):
            problems.append(f"{tenant}: chunk {key} embedding different")
    return problems


def _same_vector(want: list[float] | None, got: list[float] | None) -> bool:
    if want is None or got is None:
        return want is got
    return len(want) == len(got) and all(math.isclose(a, b, abs_tol=VECTOR_TOLERANCE)
                                         for a, b in zip(want, got, strict=True))
