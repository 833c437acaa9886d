"""PostgreSQL state of the tombstone-fanout (migration 7 in ``agentledger.stores.db``).

* ``forget_requests``: one row per request, keyed (tenant, request_id), written by the
  ``_forget`` projection from the ``forget_requested`` event (status ``pending``) and
  completed from the ``forget_completed`` event (the receipt and its digest). So the
  list of requests and receipts is a projection of the ledger; ``erased_through`` and
  ``last_error`` are the saga's notes.
* ``forget_steps``: the saga's progress, one row per (request, index): the plan once
  made (``planned``; a NULL plan is "not applicable") and the index's receipt entry once
  applied. A step with a plan and no result is resumed with that plan.
* ``forget_watermark``: the ``_forget`` projection's position, in the same transaction
  as its rows.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

import asyncpg
import msgspec

from agentledger.contracts import events as ev

_request = msgspec.json.Decoder(ev.ForgetRequested)
_receipt = msgspec.json.Decoder(ev.DeletionReceipt)
_index = msgspec.json.Decoder(ev.IndexReceipt)
WATERMARK = "forget"


class RequestRow(NamedTuple):
    tenant: str
    request_id: str
    seq: int
    request: ev.ForgetRequested
    requested_at: datetime
    status: str
    completed_at: datetime | None
    receipt: ev.DeletionReceipt | None
    last_error: str


class Step(NamedTuple):
    planned: bool
    plan: Any
    result: ev.IndexReceipt | None


_SELECT = ("SELECT tenant, request_id, seq, request, requested_at, status, completed_at, receipt, last_error"
           " FROM forget_requests")
_ONE = _SELECT + " WHERE tenant = $1 AND request_id = $2"
_BY_SUBJECT = _SELECT + " WHERE tenant = $1 AND subject = $2 ORDER BY seq LIMIT $3"
_PENDING = _SELECT + " WHERE status = 'pending' ORDER BY seq"
# The artifacts step's plans that name one of the URIs: who erased each (the first request).
_ERASED = ("SELECT DISTINCT ON (u.uri) u.uri, s.request_id FROM forget_steps s"
           " JOIN forget_requests r USING (tenant, request_id)"
           " CROSS JOIN LATERAL jsonb_array_elements_text(convert_from(s.plan, 'UTF8')::jsonb -> 'uris') AS u(uri)"
           " WHERE s.tenant = $1 AND s.index_name = 'artifacts' AND s.plan IS NOT NULL"
           " AND u.uri = ANY($2::text[]) ORDER BY u.uri, r.seq")


def _row(r: asyncpg.Record) -> RequestRow:
    return RequestRow(r[0], r[1], int(r[2]), _request.decode(bytes(r[3])), r[4], r[5], r[6],
                      None if r[7] is None else _receipt.decode(bytes(r[7])), r[8])


class ForgetStore:
    """The tables above; every method takes a connection or the pool."""

    # ---- watermark (LedgerProjection's WatermarkStore) ---------------------------------------

    async def watermark(self, conn: Any) -> int | None:
        value = await conn.fetchval("SELECT seq FROM forget_watermark WHERE name = $1", WATERMARK)
        return None if value is None else int(value)

    async def lock_watermark(self, conn: asyncpg.Connection) -> tuple[int, int] | None:
        row = await conn.fetchrow("SELECT seq, tableoid::bigint FROM forget_watermark WHERE name = $1"
                                  " FOR UPDATE", WATERMARK)
        return None if row is None else (int(row[0]), int(row[1]))

    async def set_watermark(self, conn: asyncpg.Connection, seq: int) -> None:
        await conn.execute("UPDATE forget_watermark SET seq = $2 WHERE name = $1", WATERMARK, seq)

    # ---- requests -----------------------------------------------------------------------------

    async def add_request(self, conn: Any, tenant: str, seq: int, request: ev.ForgetRequested,
                          requested_at: datetime) -> None:
        await conn.execute(
            "INSERT INTO forget_requests(tenant, request_id, kind, subject, seq, request, requested_at, status)"
            " VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending') ON CONFLICT DO NOTHING",
            tenant, request.request_id, request.selector.kind, request.selector.subject, seq,
            msgspec.json.encode(request), requested_at)

    async def complete(self, conn: Any, receipt: ev.DeletionReceipt) -> None:
        await conn.execute(
            "UPDATE forget_requests SET status = 'completed', completed_at = $3, receipt = $4, digest = $5,"
            " last_error = '' WHERE tenant = $1 AND request_id = $2",
            receipt.tenant, receipt.request_id, receipt.completed_at, msgspec.json.encode(receipt),
            receipt.digest)

    async def request(self, conn: Any, tenant: str, request_id: str) -> RequestRow | None:
        r = await conn.fetchrow(_ONE, tenant, request_id)
        return None if r is None else _row(r)

    async def by_subject(self, conn: Any, tenant: str, subject: str, limit: int) -> list[RequestRow]:
        rows = await conn.fetch(_BY_SUBJECT, tenant, subject, limit)
        return [_row(r) for r in rows]

    async def pending(self, conn: Any) -> list[RequestRow]:
        rows = await conn.fetch(_PENDING)
        return [_row(r) for r in rows]

    async def note_error(self, conn: Any, tenant: str, request_id: str, error: str) -> None:
        await conn.execute("UPDATE forget_requests SET last_error = $3 WHERE tenant = $1 AND request_id = $2",
                           tenant, request_id, error[:500])

    async def erased_artifacts(self, conn: Any, tenant: str, uris: list[str]) -> dict[str, str]:
        """Which of ``uris`` a forget request of ``tenant`` erases (or erased): URI -> request id.

        Read by resume (``services/checkpointer/resume.py``), which then names the request
        instead of answering ``artifact_missing`` for what will never come back. A stack whose
        fan-out never started has no such table, and no request erased anything.
        """
        if not uris or not await conn.fetchval("SELECT to_regclass('forget_steps') IS NOT NULL"):
            return {}
        return {r[0]: r[1] for r in await conn.fetch(_ERASED, tenant, uris)}

    # ---- steps ----------------------------------------------------------------------------------

    async def steps(self, conn: Any, tenant: str, request_id: str) -> dict[str, Step]:
        rows = await conn.fetch("SELECT index_name, planned, plan, result FROM forget_steps"
                                " WHERE tenant = $1 AND request_id = $2", tenant, request_id)
        return {r[0]: Step(r[1], None if r[2] is None else msgspec.json.decode(bytes(r[2])),
                           None if r[3] is None else _index.decode(bytes(r[3]))) for r in rows}

    async def save_plan(self, conn: Any, tenant: str, request_id: str, index: str, plan: Any, *,
                        now: datetime) -> None:
        """Keep the first plan made for a step (a concurrent or repeated planner keeps that one)."""
        await conn.execute(
            "INSERT INTO forget_steps(tenant, request_id, index_name, planned, plan, updated_at)"
            " VALUES ($1, $2, $3, true, $4, $5) ON CONFLICT DO NOTHING",
            tenant, request_id, index, None if plan is None else msgspec.json.encode(plan), now)

    async def save_result(self, conn: Any, tenant: str, request_id: str, result: ev.IndexReceipt) -> None:
        await conn.execute(
            "UPDATE forget_steps SET result = $4, updated_at = $5 WHERE tenant = $1 AND request_id = $2"
            " AND index_name = $3 AND result IS NULL",
            tenant, request_id, result.index, msgspec.json.encode(result), result.completed_at)
