"""All PostgreSQL I/O of the projector and of replay.

Statements take whole batches as arrays (``unnest``) or go through COPY, so a
batch of hundreds of events costs a handful of round trips, not one per event.
Every function takes the connection to use, so callers decide the transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import asyncpg

from agentledger.db import WATERMARK_NAME, check_schema

# (tenant, task_id, seq, state bytes, state_hash)
TaskRow = tuple[str, str, int, bytes, str]
# (tenant, task_id, seq, event_id, kind, code, reason)
RejectionRow = tuple[str, str, int, str, str, str, str]

TASK_COLUMNS = ("tenant", "task_id", "seq", "state", "state_hash")
REJECTION_COLUMNS = ("tenant", "task_id", "seq", "event_id", "kind", "code", "reason")


# SQL templates; ``{s}`` is the quoted, validated schema name.
_LOCK_WM = "SELECT seq FROM {s}.projector_watermark WHERE name = $1 FOR UPDATE"
_GET_WM = "SELECT seq FROM {s}.projector_watermark WHERE name = $1"
_SET_WM = ("INSERT INTO {s}.projector_watermark(name, seq) VALUES ($1, $2)"
           " ON CONFLICT (name) DO UPDATE SET seq = excluded.seq")
_LOAD = ("SELECT t.tenant, t.task_id, t.seq, t.state FROM {s}.task_state t"
         " JOIN unnest($1::text[], $2::text[]) AS k(tenant, task_id)"
         " ON t.tenant = k.tenant AND t.task_id = k.task_id")
_UPSERT = ("INSERT INTO {s}.task_state AS t (tenant, task_id, seq, state, state_hash)"
           " SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bytea[], $5::text[])"
           " ON CONFLICT (tenant, task_id) DO UPDATE SET seq = excluded.seq,"
           " state = excluded.state, state_hash = excluded.state_hash, updated_at = now()")
_REJECT = ("INSERT INTO {s}.rejections (tenant, task_id, seq, event_id, kind, code, reason)"
           " SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[],"
           " $5::text[], $6::text[], $7::text[]) ON CONFLICT DO NOTHING")
_GET_TASK = "SELECT seq, state FROM {s}.task_state WHERE tenant = $1 AND task_id = $2"
_REJECTIONS_AFTER = ("SELECT seq, event_id, kind, code, reason FROM {s}.rejections"
                     " WHERE tenant = $1 AND task_id = $2 AND seq > $3 ORDER BY seq LIMIT $4")
_HASHES = "SELECT tenant, task_id, seq, state_hash FROM {s}.task_state"
_TRUNCATE = "TRUNCATE {s}.task_state, {s}.rejections"


def _qualify(template: str, quoted_schema: str) -> str:
    return template.replace("{s}", quoted_schema)


class ProjectionMissingError(Exception):
    """The watermark row (or its table) is gone: the projection was dropped."""


class Store:
    """SQL of one projection schema."""

    def __init__(self, schema: str = "public") -> None:
        self.schema = schema
        s = check_schema(schema)
        self._lock_wm = _qualify(_LOCK_WM, s)
        self._get_wm = _qualify(_GET_WM, s)
        self._set_wm = _qualify(_SET_WM, s)
        self._load = _qualify(_LOAD, s)
        self._upsert = _qualify(_UPSERT, s)
        self._reject = _qualify(_REJECT, s)
        self._get_task = _qualify(_GET_TASK, s)
        self._rejections_after = _qualify(_REJECTIONS_AFTER, s)
        self._hashes = _qualify(_HASHES, s)
        self._truncate = _qualify(_TRUNCATE, s)

    # ---- watermark -------------------------------------------------------------

    async def lock_watermark(self, conn: asyncpg.Connection) -> int:
        """The watermark, row-locked until the end of the transaction."""
        try:
            seq = await conn.fetchval(self._lock_wm, WATERMARK_NAME)
        except asyncpg.UndefinedTableError as exc:
            raise ProjectionMissingError("projector_watermark table is missing") from exc
        if seq is None:
            raise ProjectionMissingError("projector_watermark row is missing")
        return int(seq)

    async def watermark(self, conn: asyncpg.Connection | asyncpg.Pool) -> int | None:
        """The watermark, or None when the projection does not exist (yet)."""
        try:
            seq = await conn.fetchval(self._get_wm, WATERMARK_NAME)
        except (asyncpg.UndefinedTableError, asyncpg.InvalidSchemaNameError):
            return None
        return None if seq is None else int(seq)

    async def set_watermark(self, conn: asyncpg.Connection, seq: int) -> None:
        await conn.execute(self._set_wm, WATERMARK_NAME, seq)

    # ---- tasks -------------------------------------------------------------------

    async def load_states(self, conn: asyncpg.Connection,
                          keys: Sequence[tuple[str, str]]) -> list[asyncpg.Record]:
        """Rows (tenant, task_id, seq, state) of those of ``keys`` that exist."""
        if not keys:
            return []
        rows: list[asyncpg.Record] = await conn.fetch(self._load, [k[0] for k in keys],
                                                      [k[1] for k in keys])
        return rows

    async def upsert_tasks(self, conn: asyncpg.Connection, rows: Sequence[TaskRow]) -> None:
        if rows:
            await conn.execute(self._upsert, *_columns(rows, 5))

    async def insert_rejections(self, conn: asyncpg.Connection,
                                rows: Sequence[RejectionRow]) -> None:
        if rows:
            await conn.execute(self._reject, *_columns(rows, 7))

    async def get_task(self, conn: asyncpg.Connection | asyncpg.Pool, tenant: str,
                       task_id: str) -> asyncpg.Record | None:
        """(seq, state) of one task, or None."""
        return await conn.fetchrow(self._get_task, tenant, task_id)

    async def rejections_after(self, conn: asyncpg.Connection | asyncpg.Pool, tenant: str,
                               task_id: str, after_seq: int, limit: int) -> list[asyncpg.Record]:
        """(seq, event_id, kind, code, reason) of the task's rejections after ``after_seq``, in
        ledger order, at most ``limit`` (the primary key makes it one index range scan)."""
        rows: list[asyncpg.Record] = await conn.fetch(self._rejections_after, tenant, task_id,
                                                      after_seq, limit)
        return rows

    async def task_hashes(self, conn: asyncpg.Connection) -> dict[tuple[str, str], tuple[int, str]]:
        """(tenant, task_id) -> (seq, state_hash) of every task row."""
        rows = await conn.fetch(self._hashes)
        return {(r[0], r[1]): (r[2], r[3]) for r in rows}

    # ---- bulk (rebuild) -------------------------------------------------------------

    async def truncate(self, conn: asyncpg.Connection) -> None:
        await conn.execute(self._truncate)

    async def copy_tasks(self, conn: asyncpg.Connection, rows: Iterable[TaskRow]) -> None:
        await conn.copy_records_to_table("task_state", records=rows, columns=TASK_COLUMNS,
                                         schema_name=self.schema)

    async def copy_rejections(self, conn: asyncpg.Connection, rows: Iterable[RejectionRow]) -> None:
        await conn.copy_records_to_table("rejections", records=rows, columns=REJECTION_COLUMNS,
                                         schema_name=self.schema)


def _columns(rows: Sequence[tuple[Any, ...]], width: int) -> list[list[Any]]:
    return [list(col) for col in zip(*rows, strict=True)] if rows else [[] for _ in range(width)]
