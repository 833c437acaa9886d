"""How memory forgets: the tombstone-fanout's handlers for the memory projection and its reads.

Two indexes of ``services/tombstone_fanout/registry.py`` (see ``docs/memory.md``,
"Forgetting"):

* ``MemoryHandler`` (``memory``): the projection tables. For a record, key,
  subject or task selector the plan is the records reached (id, scope, the
  keyed digest of the key, kind) and the ledger sequences of every ``_memory`` message that carried
  them (their proposals, decisions and feedback, found through
  ``memory_history``). The apply appends ``memory_forgotten`` (one event per
  10,000 records; event ids and time come from the plan, so a re-run is a
  duplicate), waits until the memory projection has folded it (each record is
  then a tombstone: no value, no index entry, no data subject, its group
  resolved from what remains), and only then securely erases those messages:
  the live rows and a replay of what remains of the ledger agree at every
  point. For a tenant the ledger step has erased the tenant's ``_memory``
  already; the apply waits until the projection has committed what its
  consumer was delivered, then deletes every row of the tenant.
* ``ReadReceiptsHandler`` (``read_receipts``): every receipt of a forgotten task
  and everything of a forgotten tenant are deleted; a receipt of another task that
  names a reached record (the memory step's plan) is **redacted**: the reached
  candidates, and the request's query and key (which may quote them), are taken out
  and the rest of what that read saw stays (``ReadReceipt.forgotten`` counts what
  went); one that named nothing else is deleted. Usage rows of reached records go.

Both are idempotent: a plan names ids and sequences only, a repeated append is
a duplicate, an erased message is not found again, a deleted row deletes
nothing; the counts they return come from the plan, so a resumed step reports
what an uninterrupted one would.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from typing import Any

import msgspec
import nats.js.errors

from agentledger.contracts import events as ev
from agentledger.contracts.memory_api import ReadReceipt
from agentledger.core.forget import selector_key_digest
from agentledger.core.memory.authority import parse_scope_key
from agentledger.core.memory.keys import normalise_key, tombstone_key
from agentledger.core.memory.state import FORGET_PRODUCER
from agentledger.core.memory.tags import check_receipt, receipt_tag
from agentledger.errors import UnavailableError
from agentledger.security.integrity_keys import keys_of
from agentledger.security.sealing import marker_key_of
from agentledger.services.memory_policy import reach_log
from agentledger.services.memory_policy.projection import DURABLE
from agentledger.services.memory_policy.store import PROJECTION_TABLES, WATERMARK, MemoryStore
from agentledger.services.tombstone_fanout.registry import ForgetContext
from agentledger.stores.ledger import ledger_subject

WATERMARK_TABLE = "memory_watermark"
# Records per ``memory_forgotten`` event (the contract's bound) and room left for its envelope.
RECORDS_PER_EVENT = 10_000
ENVELOPE_BYTES = 4096
# How long a step waits for the memory projection before it fails (and the saga retries it).
PROJECTION_WAIT_S = 60.0

_SELECT = ("SELECT record_id, scope_key, key, kind, status FROM memory_records WHERE tenant = $1"
           " AND status <> 'forgotten' AND ")
_BY_KIND = {
    "record": _SELECT + "record_id = $2 ORDER BY record_id",
    "key": _SELECT + "key = ANY($2::text[]) AND ($3::text IS NULL OR scope_key = $3) ORDER BY record_id",
    "subject": _SELECT + "data_subject = $2 ORDER BY record_id",
    # A task's records: those it produced (their origin task) and those scoped to it.
    "task": _SELECT + ("(convert_from(row, 'UTF8')::jsonb #>> '{body,origin_task}' = $2 OR scope_key = $3)"
                       " ORDER BY record_id"),
}
# Every ``_memory`` message that carried a record: its decision and feedback (by record id) and
# its proposal (by the decision's proposal id); never a ``memory_forgotten`` (the tombstone stays).
_HISTORY_SEQS = (
    "SELECT DISTINCT seq FROM memory_history WHERE tenant = $1 AND event <> 'memory_forgotten'"
    " AND (record_id = ANY($2::text[]) OR proposal_id IN (SELECT proposal_id FROM memory_history"
    " WHERE tenant = $1 AND record_id = ANY($2::text[]) AND proposal_id IS NOT NULL)) ORDER BY seq")
# Every key of the tenant's records (in a scope), for a key selector's digests to pick from.
_KEYS = "SELECT DISTINCT key FROM memory_records WHERE tenant = $1 AND ($2::text IS NULL OR scope_key = $2)"
_COUNT = {t: f"SELECT count(*) FROM {t} WHERE tenant = $1" for t in PROJECTION_TABLES}  # noqa: S608 - names
_DELETE = {t: f"DELETE FROM {t} WHERE tenant = $1" for t in PROJECTION_TABLES}  # noqa: S608 - names

_RECEIPTS = ("SELECT receipt_id, coalesce(task_id = $3, false) OR record_ids <@ $2::text[] AS whole"
             " FROM memory_receipts WHERE tenant = $1"
             " AND (record_ids && $2::text[] OR task_id = $3) ORDER BY receipt_id")
_REDACTED = "SELECT receipt, mac FROM memory_receipts WHERE tenant = $1 AND receipt_id = $2"
_REDACT = ("UPDATE memory_receipts SET receipt = $3, record_ids = array(SELECT unnest(record_ids)"
           " EXCEPT SELECT unnest($4::text[])), mac = $5 WHERE tenant = $1 AND receipt_id = $2")
_USAGE = "SELECT record_id FROM memory_usage WHERE tenant = $1 AND record_id = ANY($2::text[]) ORDER BY record_id"
_DELETE_RECEIPTS = "DELETE FROM memory_receipts WHERE tenant = $1 AND receipt_id = ANY($2::text[])"
_DELETE_USAGE = "DELETE FROM memory_usage WHERE tenant = $1 AND record_id = ANY($2::text[])"
_COUNT_RECEIPTS = "SELECT count(*) FROM memory_receipts WHERE tenant = $1"
_COUNT_USAGE = "SELECT count(*) FROM memory_usage WHERE tenant = $1"
_receipts = msgspec.json.Decoder(ReadReceipt)


def forgotten_events(ctx: ForgetContext, plan: dict[str, Any]) -> list[ev.MemoryForgottenEvent]:
    """The ``memory_forgotten`` events of a plan: deterministic (ids, time and chunks from the plan)."""
    request_id = ctx.request.request_id
    at = datetime.fromisoformat(plan["at"])
    limit = max(ctx.settings.max_event_bytes - ENVELOPE_BYTES, 1024)
    chunks: list[list[ev.ForgottenRecord]] = [[]]
    size = 0
    for r in plan["records"]:
        fr = ev.ForgottenRecord(record_id=r["record_id"], scope=parse_scope_key(r["scope"]),
                                key_digest=r["key_digest"], kind=r["kind"], active=bool(r.get("active")))
        n = len(msgspec.json.encode(fr)) + 1
        if chunks[-1] and (size + n > limit or len(chunks[-1]) >= RECORDS_PER_EVENT):
            chunks.append([])
            size = 0
        chunks[-1].append(fr)
        size += n
    return [ev.MemoryForgottenEvent(
        event_id=f"forget:{request_id}:{i}", tenant=ctx.tenant, task_id=ev.MEMORY_TASK,
        producer=FORGET_PRODUCER, occurred_at=at, schema_version=1, correlation_id=request_id,
        payload=ev.MemoryForgotten(request_id=request_id, records=chunk))
        for i, chunk in enumerate(chunks) if chunk]


async def applied(ctx: ForgetContext, seq: int, timeout_s: float = PROJECTION_WAIT_S) -> None:
    """Wait until the memory projection's watermark is at ``seq`` (``projection_behind`` after
    ``timeout_s``: the saga retries the step)."""
    deadline = time.monotonic() + timeout_s
    while True:
        at = await ctx.pool.fetchval(f"SELECT seq FROM {WATERMARK_TABLE} WHERE name = $1",  # noqa: S608
                                     WATERMARK)
        if (at or 0) >= seq:
            return
        if time.monotonic() > deadline:
            raise UnavailableError(f"the memory projection is at {at}, not yet at {seq}",
                                   code="projection_behind")
        await asyncio.sleep(0.05)


async def memory_caught_up(ctx: ForgetContext) -> None:
    """Wait until the memory projection holds every ``_memory`` message of the tenant there is."""
    js = ctx.nc.jetstream()
    try:
        last = await js.get_last_msg(ctx.settings.stream, ledger_subject(ctx.settings.prefix, ctx.tenant,
                                                                         ev.MEMORY_TASK))
    except nats.js.errors.NotFoundError:
        return
    if last.seq:
        await applied(ctx, int(last.seq))


async def delivered_committed(ctx: ForgetContext) -> None:
    """Wait until the memory projection has committed everything its consumer was delivered
    (so a batch fetched before the ledger step's erase cannot write rows afterwards): the
    saga's ``wait_watermark``."""
    await ctx.wait_watermark(DURABLE, WATERMARK_TABLE, WATERMARK)


async def _keys_of(ctx: ForgetContext, sel: ev.ForgetSelector, scope: str | None) -> list[str]:
    """The stored keys a key selector names: those whose keyed digest it holds (a request
    appended before selectors kept digests names the key and its canonical form itself)."""
    if sel.key is not None:
        return sorted({sel.key, normalise_key(sel.key)})
    secret = marker_key_of(ctx.settings)
    wanted = set(sel.key_digests)
    return [k for (k,) in await ctx.pool.fetch(_KEYS, ctx.tenant, scope) if selector_key_digest(k, secret) in wanted]


class MemoryHandler:
    """The memory projection's tables; see the module docstring."""

    index = "memory"
    tables = PROJECTION_TABLES
    # The put-back reference (``reach_log``): ids and sequences only, dropped with a whole tenant.
    stores: tuple[str, ...] = ("reach",)

    async def plan(self, ctx: ForgetContext) -> dict[str, Any] | None:
        sel = ctx.selector
        tenant = ctx.tenant
        await memory_caught_up(ctx)
        if sel.kind == "tenant":
            counts = {t: int(await ctx.pool.fetchval(sql, tenant)) for t, sql in _COUNT.items()}
            return {"kind": "tenant", "records": [], "record_ids": [], "seqs": [], "rows": counts}
        if sel.kind == "record":
            args: tuple[Any, ...] = (sel.record_id,)
        elif sel.kind == "key":
            scope = None
            if sel.scope is not None:
                scope = f"{sel.scope.level}/{tenant}/{sel.scope.id or ''}"
            args = (await _keys_of(ctx, sel, scope), scope)
        elif sel.kind == "subject":
            args = (sel.subject,)
        else:
            args = (sel.task_id, f"task/{tenant}/{sel.task_id}")
        rows = await ctx.pool.fetch(_BY_KIND[sel.kind], tenant, *args)
        # Whether each was active: then its kind stays forgotten in its group (core.memory.resolve).
        # The key by its keyed digest only: the plan is stored, and the key may be the value's words.
        secret = marker_key_of(ctx.settings)
        records = [{"record_id": r[0], "scope": r[1], "key_digest": tombstone_key(r[1], r[2], secret),
                    "kind": r[3], **({"active": True} if r[4] == "active" else {})} for r in rows]
        ids = [r["record_id"] for r in records]
        seqs = [int(r[0]) for r in await ctx.pool.fetch(_HISTORY_SEQS, tenant, ids)] if ids else []
        # A data subject's records are its personal ones, whose values every message holds sealed
        # under the key the keys step destroyed: those messages are unreadable already, and
        # erasing them one by one (an fsync each) would only add time. Any other record's value
        # is plaintext in its messages: they are erased.
        return {"kind": sel.kind, "at": datetime.now(UTC).isoformat(), "records": records, "record_ids": ids,
                "seqs": seqs, "erase": sel.kind != "subject"}

    async def apply(self, ctx: ForgetContext, plan: Any) -> dict[str, int]:
        if plan["kind"] == "tenant":
            return await self._forget_tenant(ctx, plan)
        ids = list(plan["record_ids"])
        if not ids:
            return {"records": 0, "messages": 0}
        # Messages of the records appended since the plan (feedback) are erased too; the receipt
        # counts the plan's, so a resumed step reports what an uninterrupted one did.
        late = [int(r[0]) for r in await ctx.pool.fetch(_HISTORY_SEQS, ctx.tenant, ids)]
        last = 0
        for event in forgotten_events(ctx, plan):
            last = max([last, *await ctx.append([event])])
        await applied(ctx, last)
        if not plan.get("erase", True):
            return {"records": len(ids), "sealed_messages_unreadable": len(plan["seqs"])}
        await ctx.erase(sorted({*plan["seqs"], *late}))
        return {"records": len(ids), "messages": len(plan["seqs"])}

    async def _forget_tenant(self, ctx: ForgetContext, plan: dict[str, Any]) -> dict[str, int]:
        await delivered_committed(ctx)
        async with ctx.pool.acquire() as conn, conn.transaction():
            # The projection's batches take this lock too: none commits while the rows go.
            await MemoryStore().lock_watermark(conn)
            for sql in _DELETE.values():
                await conn.execute(sql, ctx.tenant)
        # The put-back reference's entries of the tenant (ids and sequences only).
        await reach_log.purge(ctx.nc, ctx.settings, reach_log.tenant_subjects(ctx.settings.prefix, ctx.tenant))
        rows = plan["rows"]
        return {"records": int(rows["memory_records"]), "groups": int(rows["memory_groups"]),
                "history": int(rows["memory_history"]), "held": int(rows["memory_held"])}


class ReadReceiptsHandler:
    """Receipts and usage of reads that named what was forgotten; see the module docstring."""

    index = "read_receipts"
    tables = ("memory_receipts", "memory_usage")
    stores: tuple[str, ...] = ()

    async def plan(self, ctx: ForgetContext) -> dict[str, Any] | None:
        sel = ctx.selector
        tenant = ctx.tenant
        if sel.kind == "tenant":
            return {"kind": "tenant", "receipts": int(await ctx.pool.fetchval(_COUNT_RECEIPTS, tenant)),
                    "usage": int(await ctx.pool.fetchval(_COUNT_USAGE, tenant))}
        memory = ctx.plans.get(MemoryHandler.index)
        if memory is None:
            memory = await MemoryHandler().plan(ctx) or {}
        ids = list(memory.get("record_ids", []))
        task = sel.task_id if sel.kind == "task" else None
        found = await ctx.pool.fetch(_RECEIPTS, tenant, ids, task)
        usage = [r[0] for r in await ctx.pool.fetch(_USAGE, tenant, ids)] if ids else []
        return {"kind": sel.kind, "record_ids": ids, "task_id": task,
                "receipt_ids": [r[0] for r in found], "redacted_ids": [r[0] for r in found if not r[1]],
                "usage_ids": usage}

    async def apply(self, ctx: ForgetContext, plan: Any) -> dict[str, int]:
        tenant = ctx.tenant
        if plan["kind"] == "tenant":
            async with ctx.pool.acquire() as conn, conn.transaction():
                await conn.execute("DELETE FROM memory_receipts WHERE tenant = $1", tenant)
                await conn.execute("DELETE FROM memory_usage WHERE tenant = $1", tenant)
            return {"receipts": int(plan["receipts"]), "usage": int(plan["usage"])}
        ids = list(plan["record_ids"])
        redacted = list(plan.get("redacted_ids", []))
        whole = sorted(set(plan["receipt_ids"]) - set(redacted))
        keys = keys_of(ctx.settings)
        async with ctx.pool.acquire() as conn, conn.transaction():
            await conn.execute(_DELETE_RECEIPTS, tenant, whole)
            for receipt_id in redacted:
                found = await conn.fetchrow(_REDACTED, tenant, receipt_id)
                if found is not None:
                    # Re-tagged as redacted only if it was the service's own (never launder an edit).
                    check_receipt(keys.mac_key_of, receipt_id, tenant, found[0], found[1])
                    data = msgspec.json.encode(redact_receipt(_receipts.decode(found[0]), ids))
                    await conn.execute(_REDACT, tenant, receipt_id, data, ids,
                                       receipt_tag(keys.current, keys.mac_key, receipt_id, tenant, data))
            await conn.execute(_DELETE_USAGE, tenant, sorted({*ids, *plan["usage_ids"]}))
        counts = {"receipts": len(whole), "usage": len(plan["usage_ids"])}
        return {**counts, "receipts_redacted": len(redacted)} if redacted else counts


def redact_receipt(receipt: ReadReceipt, forgotten: list[str]) -> ReadReceipt:
    """``receipt`` without the candidates of ``forgotten`` records and without the request's
    query and key (the words that found them); the same receipt again when it names none
    of them, so a step run twice redacts once."""
    gone = set(forgotten)
    kept = [c for c in receipt.candidates if c.record_id not in gone]
    if len(kept) == len(receipt.candidates):
        return receipt
    request = {k: v for k, v in receipt.request.items() if k not in ("query", "key")}
    return msgspec.structs.replace(
        receipt, candidates=kept, selected=[r for r in receipt.selected if r not in gone],
        request=request, forgotten=receipt.forgotten + len(receipt.candidates) - len(kept))


HANDLERS = (MemoryHandler(), ReadReceiptsHandler())
