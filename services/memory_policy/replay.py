"""Replay of the memory projection: rebuild it from the ledger, or verify it against the ledger.

Both fold one tenant at a time: each tenant's ``_memory`` subject is read with
an ordered consumer and folded by the reducer (``core.memory``) into a state
that holds that tenant only, so memory is bounded by the largest tenant, not
the stream. The rows, search text and embeddings come from ``fold``, the same
code the live projection runs.

``rebuild_memory`` empties and refills the projection tables in one
transaction holding the memory watermark's row lock, so the live projection
waits meanwhile and then carries on from the rebuilt watermark (readers see the
old rows or the new ones). Receipts and usage are not projections and stay.

``verify_memory`` waits for the live projection to reach the stream's end,
folds every tenant up to the live watermark, and compares records (rows,
full-text and embedding), groups, history and held feedback in one snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from typing import Any

import asyncpg
import msgspec
import structlog
from nats.aio.client import Client
from nats.js.api import ConsumerConfig, DeliverPolicy

from agentledger import auth, db
from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.core.memory.authority import promoted_id_for
from agentledger.core.memory.resolve import encode_group
from agentledger.core.memory.state import MemoryState
from agentledger.embedding import load_embedder
from agentledger.errors import UnavailableError
from agentledger.ledger import ledger_subject
from agentledger.services.memory_policy.fold import (
    Folded,
    Loaded,
    Vectors,
    encode_marks,
    fold,
    record_writes,
    search_text,
    write_loaded,
)
from agentledger.services.memory_policy.projection import decode_memory, memory_filter
from agentledger.services.memory_policy.store import (
    PROJECTION_TABLES,
    MemoryStore,
    decode_row,
    parse_vector,
)

log = structlog.get_logger()

IDLE_TIMEOUT_S = 30.0
# Embeddings equal within this (they are stored as float4).
VECTOR_TOLERANCE = 1e-5


async def memory_tenants(nc: Client, settings: Settings) -> list[str]:
    """Tenants with at least one message on their memory subject."""
    info = await nc.jetstream().stream_info(settings.stream, subjects_filter=memory_filter(settings.prefix))
    head = f"{settings.prefix}.ledger."
    return sorted({s[len(head):].split(".", 1)[0] for s in (info.state.subjects or {})})


async def read_tenant(nc: Client, settings: Settings, tenant: str,
                      upto: int) -> list[tuple[int, ev.EventBase]]:
    """The memory events of one tenant with sequence at most ``upto``, in ledger order."""
    subject = ledger_subject(settings.prefix, tenant, ev.MEMORY_TASK)
    out: list[tuple[int, ev.EventBase]] = []
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def on_msg(msg: Any) -> None:
        if done.done():
            return
        md = msg.metadata
        seq, pending = int(md.sequence.stream), int(md.num_pending)
        if seq <= upto:
            event = decode_memory(settings.prefix, msg.subject, msg.data, seq)
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
        raise UnavailableError(f"no memory message of tenant {tenant!r} for {IDLE_TIMEOUT_S}s") from exc
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return out


def fold_tenant(events: list[tuple[int, ev.EventBase]]) -> tuple[MemoryState, Folded]:
    state = MemoryState()
    return state, fold(state, events, Folded())


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


async def rebuild_memory(settings: Settings) -> dict[str, int]:
    """Drop and rebuild the memory projection from the ledger; what it wrote."""
    started = time.perf_counter()
    vectors = Vectors(load_embedder(settings))
    nc, conn = await _connect(settings)
    store = MemoryStore()
    counts = {"tenants": 0, "events": 0, "records": 0}
    try:
        await db.migrate_conn(conn)
        async with conn.transaction():
            await store.lock_watermark(conn)  # the live projection waits for the switch
            upto = await _last_seq(nc, settings)
            await conn.execute("TRUNCATE " + ", ".join(PROJECTION_TABLES))
            for tenant in await memory_tenants(nc, settings):
                events = await read_tenant(nc, settings, tenant, upto)
                state, folded = fold_tenant(events)
                loaded = Loaded(state, {}, set())
                folded.groups |= set(state.groups)
                counts["records"] += await write_loaded(conn, store, tenant, loaded, folded=folded,
                                                        vectors=vectors)
                counts["tenants"] += 1
                counts["events"] += len(events)
            await store.set_watermark(conn, upto)
        counts["last_seq"] = upto
    finally:
        await conn.close()
        await nc.close()
    log.info("memory.rebuilt", seconds=round(time.perf_counter() - started, 3), **counts)
    return counts


async def _wait_live(conn: asyncpg.Connection, store: MemoryStore, target: int, wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while (await store.watermark(conn) or 0) < target:
        if time.monotonic() > deadline:
            raise UnavailableError(f"the memory projection did not reach seq {target} within {wait_s}s; "
                                   "is the memory-policy service running?", code="projection_behind")
        await asyncio.sleep(0.1)


async def verify_memory(settings: Settings, wait_s: float = 60.0) -> list[str]:
    """Fold the ledger's memory subjects and compare with the live tables; the differences."""
    vectors = Vectors(load_embedder(settings))
    nc, conn = await _connect(settings)
    store = MemoryStore()
    problems: list[str] = []
    try:
        await _wait_live(conn, store, await _last_seq(nc, settings), wait_s)
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            upto = await store.watermark(conn) or 0
            tenants = set(await memory_tenants(nc, settings))
            tenants |= {r[0] for r in await conn.fetch(
                "SELECT DISTINCT tenant FROM memory_groups UNION SELECT DISTINCT tenant FROM memory_history")}
            for tenant in sorted(tenants):
                state, folded = fold_tenant(await read_tenant(nc, settings, tenant, upto))
                problems += await _compare(conn, tenant, state, folded, vectors)
    finally:
        await conn.close()
        await nc.close()
    log.info("memory.verified", ok=not problems, differences=len(problems))
    return problems


def _diff(tenant: str, what: str, want: dict[Any, Any], got: dict[Any, Any]) -> list[str]:
    out = [f"{tenant}: {what} {k} missing" for k in sorted(want.keys() - got.keys(), key=str)]
    out += [f"{tenant}: {what} {k} extra" for k in sorted(got.keys() - want.keys(), key=str)]
    out += [f"{tenant}: {what} {k} different" for k in sorted(want.keys() & got.keys(), key=str)
            if want[k] != got[k]]
    return out


async def _compare(conn: asyncpg.Connection, tenant: str, state: MemoryState, folded: Folded,
                   vectors: Vectors) -> list[str]:
    rows = {row.record_id: row for group in state.rows.values() for row in group.values()}
    live = {r[0]: (decode_row(r[1]), r[2], r[3]) for r in await conn.fetch(
        "SELECT record_id, row, embedding::text, tsv::text FROM memory_records WHERE tenant = $1", tenant)}
    problems = _diff(tenant, "record", rows, {rid: v[0] for rid, v in live.items()})
    writes = {w.row.record_id: w for w in await record_writes(rows.values(), vectors)}
    texts = {rid: w.text for rid, w in writes.items() if rid in live}
    expected_tsv = {r[0]: r[1] for r in await conn.fetch(
        "SELECT id, CASE WHEN t IS NULL THEN NULL ELSE to_tsvector('simple', t)::text END"
        " FROM unnest($1::text[], $2::text[]) AS u(id, t)", list(texts), list(texts.values()))}
    for rid, w in sorted(writes.items()):
        if rid not in live:
            continue
        _, embedding, tsv = live[rid]
        if expected_tsv.get(rid) != tsv:
            problems.append(f"{tenant}: record {rid} full-text vector different")
        if not _same_vector(w.embedding, parse_vector(embedding)):
            problems.append(f"{tenant}: record {rid} embedding different")
        if (search_text(w.row) is None) != (embedding is None):
            problems.append(f"{tenant}: record {rid} indexed although personal, or not indexed")
    groups = {gk: (promoted_id_for(*gk), encode_group(g)) for gk, g in state.groups.items()}
    live_groups = {(r[0], r[1]): (r[2], bytes(r[3])) for r in await conn.fetch(
        "SELECT scope_key, key, promoted_id, state FROM memory_groups WHERE tenant = $1", tenant)}
    problems += _diff(tenant, "group", groups, live_groups)
    history = {h.event_id: (h.seq, h.event, h.proposal_id, h.record_id, h.scope_key, h.key, h.action,
                            h.reason, msgspec.json.encode(h.trace) if h.trace is not None else None)
               for h in folded.history}
    live_history = {r[0]: (int(r[1]), r[2], r[3], r[4], r[5], r[6], r[7], r[8],
                           bytes(r[9]) if r[9] is not None else None) for r in await conn.fetch(
        "SELECT event_id, seq, event, proposal_id, record_id, scope_key, key, action, reason, trace"
        " FROM memory_history WHERE tenant = $1", tenant)}
    problems += _diff(tenant, "history event", history, live_history)
    held = {rid: encode_marks(marks) for rid, marks in state.pending.items() if marks}
    live_held: dict[str, list[bytes]] = {}
    for r in await conn.fetch("SELECT record_id, mark FROM memory_held WHERE tenant = $1 ORDER BY record_id, n",
                              tenant):
        live_held.setdefault(r[0], []).append(bytes(r[1]))
    problems += _diff(tenant, "held feedback for", held, live_held)
    return problems


def _same_vector(want: list[float] | None, got: list[float] | None) -> bool:
    if want is None or got is None:
        return want is got
    return len(want) == len(got) and all(math.isclose(a, b, abs_tol=VECTOR_TOLERANCE)
                                         for a, b in zip(want, got, strict=True))
