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
full-text, embedding and data subject), groups, history and held feedback in
one snapshot.

After a forget request the ledger holds a ``memory_forgotten`` tombstone and
the forgotten records' own messages are erased (gaps in the sequence): the
fold of a tombstone does not depend on having seen them, so a rebuild gives
the live rows and ``verify_memory`` stays green.

The ledger side (connecting, the tenants, reading a subject, waiting for the
live projection) is ``agentledger.projection.replay``, shared by both replays.
"""

from __future__ import annotations

import time

import asyncpg
import msgspec
import structlog
from nats.aio.client import Client

from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.core.memory.authority import promoted_id_for
from agentledger.core.memory.resolve import encode_group
from agentledger.core.memory.state import MemoryState
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
from agentledger.services.memory_policy.projection import DURABLE, decode_memory, memory_filter
from agentledger.services.memory_policy.store import (
    PROJECTION_TABLES,
    MemoryStore,
    data_subject_of,
    decode_row,
    parse_vector,
)
from agentledger.services.projector.rebuild import stream_last_seq
from agentledger.stores import db

log = structlog.get_logger()


async def read_tenant(nc: Client, settings: Settings, tenant: str, upto: int,
                      skip: frozenset[int] = frozenset()) -> list[tuple[int, ev.EventBase]]:
    """The memory events of one tenant with sequence at most ``upto``, in ledger order (without
    the sequences the live projection passed over, ``skip``)."""
    return await read_subject(nc, settings, tenant, ev.MEMORY_TASK, upto, decode=decode_memory, noun="memory",
                              skip=skip)


def fold_tenant(events: list[tuple[int, ev.EventBase]]) -> tuple[MemoryState, Folded]:
    state = MemoryState()
    return state, fold(state, events, Folded())


async def rebuild_memory(settings: Settings) -> dict[str, int]:
    """Drop and rebuild the memory projection from the ledger; what it wrote."""
    started = time.perf_counter()
    vectors = Vectors(load_embedder(settings))
    nc, conn = await connect(settings)
    store = MemoryStore()
    counts = {"tenants": 0, "events": 0, "records": 0}
    try:
        await db.migrate_conn(conn)
        async with conn.transaction():
            await store.lock_watermark(conn)  # the live projection waits for the switch
            upto = await stream_last_seq(nc, settings)
            await conn.execute("TRUNCATE " + ", ".join(PROJECTION_TABLES))
            skip = await passed_over(conn, DURABLE)
            for tenant in await subject_tenants(nc, settings, memory_filter(settings.prefix)):
                events = await read_tenant(nc, settings, tenant, upto, skip)
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


async def verify_memory(settings: Settings, wait_s: float = 60.0) -> list[str]:
    """Fold the ledger's memory subjects and compare with the live tables; the differences."""
    vectors = Vectors(load_embedder(settings))
    nc, conn = await connect(settings)
    store = MemoryStore()
    problems: list[str] = []
    try:
        target = await subject_last_seq(nc, settings, memory_filter(settings.prefix))
        await wait_live(conn, store, target, wait_s, noun="memory",
                        runner="the memory-policy service")
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            upto = await store.watermark(conn) or 0
            tenants = set(await subject_tenants(nc, settings, memory_filter(settings.prefix)))
            tenants |= {r[0] for r in await conn.fetch(
                "SELECT DISTINCT tenant FROM memory_groups UNION SELECT DISTINCT tenant FROM memory_history")}
            skip = await passed_over(conn, DURABLE)
            for tenant in sorted(tenants):
                state, folded = fold_tenant(await read_tenant(nc, settings, tenant, upto, skip))
                problems += await _compare(conn, tenant, state, folded, vectors)
    finally:
        await conn.close()
        await nc.close()
    log.info("memory.verified", ok=not problems, differences=len(problems))
    return problems


async def _compare(conn: asyncpg.Connection, tenant: str, state: MemoryState, folded: Folded,
                   vectors: Vectors) -> list[str]:
    rows = {row.record_id: row for group in state.rows.values() for row in group.values()}
    live = {r[0]: (decode_row(r[1]), r[2], r[3], r[4]) for r in await conn.fetch(
        "SELECT record_id, row, embedding::text, tsv::text, data_subject FROM memory_records WHERE tenant = $1",
        tenant)}
    problems = diff(tenant, "record", rows, {rid: v[0] for rid, v in live.items()})
    writes = {w.row.record_id: w for w in await record_writes(rows.values(), vectors)}
    texts = {rid: w.text for rid, w in writes.items() if rid in live}
    expected_tsv = {r[0]: r[1] for r in await conn.fetch(
        "SELECT id, CASE WHEN t IS NULL THEN NULL ELSE to_tsvector('simple', t)::text END"
        " FROM unnest($1::text[], $2::text[]) AS u(id, t)", list(texts), list(texts.values()))}
    for rid, w in sorted(writes.items()):
        if rid not in live:
            continue
        _, embedding, tsv, subject = live[rid]
        if data_subject_of(w.row) != subject:
            problems.append(f"{tenant}: record {rid} data subject different")
        if expected_tsv.get(rid) != tsv:
            problems.append(f"{tenant}: record {rid} full-text vector different")
        if not same_vector(w.embedding, parse_vector(embedding)):
            problems.append(f"{tenant}: record {rid} embedding different")
        if (search_text(w.row) is None) != (embedding is None):
            problems.append(f"{tenant}: record {rid} indexed although personal, or not indexed")
    groups = {gk: (promoted_id_for(*gk), encode_group(g)) for gk, g in state.groups.items()}
    live_groups = {(r[0], r[1]): (r[2], bytes(r[3])) for r in await conn.fetch(
        "SELECT scope_key, key, promoted_id, state FROM memory_groups WHERE tenant = $1", tenant)}
    problems += diff(tenant, "group", groups, live_groups)
    history = {h.event_id: (h.seq, h.event, h.proposal_id, h.record_id, h.scope_key, h.key, h.action,
                            h.reason, msgspec.json.encode(h.trace) if h.trace is not None else None)
               for h in folded.history}
    live_history = {r[0]: (int(r[1]), r[2], r[3], r[4], r[5], r[6], r[7], r[8],
                           bytes(r[9]) if r[9] is not None else None) for r in await conn.fetch(
        "SELECT event_id, seq, event, proposal_id, record_id, scope_key, key, action, reason, trace"
        " FROM memory_history WHERE tenant = $1", tenant)}
    problems += diff(tenant, "history event", history, live_history)
    held = {rid: encode_marks(marks) for rid, marks in state.pending.items() if marks}
    live_held: dict[str, list[bytes]] = {}
    for r in await conn.fetch("SELECT record_id, mark FROM memory_held WHERE tenant = $1 ORDER BY record_id, n",
                              tenant):
        live_held.setdefault(r[0], []).append(bytes(r[1]))
    problems += diff(tenant, "held feedback for", held, live_held)
    return problems
