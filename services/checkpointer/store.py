"""PostgreSQL storage of checkpoints and of each task's active-checkpoint pointer.

Tables (created by ``migrate_checkpoints``, idempotent and safe to run from
several processes at once: it holds an advisory lock while it works):

* ``checkpoints(id, tenant, task_id, seq, events, body, checksum, created_at,
  expires_at, mac)``: one row per saved checkpoint. ``seq`` is the ledger cursor the
  checkpoint covers, ``events`` how many events of the task the state had
  applied (the policy counts from it), ``body`` the encoded ``Checkpoint``,
  ``mac`` its keyed tag (``core.checkpoint_tags``), checked on every read.
* ``checkpoint_pointer(tenant, task_id, checkpoint_id, version)``: the task's
  active checkpoint. It only ever moves by compare-and-swap on ``version`` and
  never to a checkpoint with a lower ``seq`` than the one it points at.

``save`` inserts the row, moves the pointer and prunes old rows in ONE
transaction, so the pointer never names a partial checkpoint, even when the
process is killed in the middle of a save: PostgreSQL either commits all three
or none. The pointer has a foreign key to its row, so pruning can never leave it
dangling either.
"""

from __future__ import annotations

from typing import NamedTuple

import asyncpg

from agentledger.core import checkpoint as cp_mod
from agentledger.core.checkpoint_policy import KEEP_PER_TASK
from agentledger.core.checkpoint_tags import check_checkpoint, checkpoint_tag
from agentledger.security.integrity_keys import IntegrityKeys

# Advisory lock held while migrating ("agck").
_MIGRATE_LOCK = 0x6167636B
# A lost compare-and-swap is retried this many times before giving up (each retry re-reads).
_CAS_ATTEMPTS = 100

_MIGRATIONS: list[tuple[int, str]] = [
    (1, """
        CREATE TABLE IF NOT EXISTS checkpoints (
            id          bigserial PRIMARY KEY,
            tenant      text NOT NULL,
            task_id     text NOT NULL,
            seq         bigint NOT NULL,
            events      bigint NOT NULL DEFAULT 0,
            body        bytea NOT NULL,
            checksum    text NOT NULL,
            created_at  timestamptz NOT NULL,
            expires_at  timestamptz NOT NULL
        );
        CREATE INDEX IF NOT EXISTS checkpoints_task_seq
            ON checkpoints (tenant, task_id, seq DESC, id DESC);
        CREATE TABLE IF NOT EXISTS checkpoint_pointer (
            tenant         text NOT NULL,
            task_id        text NOT NULL,
            checkpoint_id  bigint NOT NULL REFERENCES checkpoints (id),
            version        bigint NOT NULL,
            PRIMARY KEY (tenant, task_id)
        );
    """),
    # A keyed tag per checkpoint (``checkpoint_tag``): the unkeyed checksum inside the body can
    # be recomputed by whoever edits the body. Checkpoints saved before have none and are
    # refused by resume; the checkpointer saves a fresh one on the task's next change.
    (2, """
        ALTER TABLE checkpoints ADD COLUMN IF NOT EXISTS mac text;
    """),
]

_DONE = "SELECT coalesce(max(version), 0) FROM checkpoint_schema_migrations"
# The id is drawn first: the tag binds it, so a body copied to another row fails.
_NEXT_ID = "SELECT nextval(pg_get_serial_sequence('checkpoints', 'id'))"
_INSERT = ("INSERT INTO checkpoints (id, tenant, task_id, seq, events, body, checksum, created_at,"
           " expires_at, mac) VALUES ($9, $1, $2, $3, $4, $5, $6, to_timestamp($7), to_timestamp($8),"
           " $10)")
_POINTER = ("SELECT p.checkpoint_id, p.version, c.seq FROM checkpoint_pointer p"
            " JOIN checkpoints c ON c.id = p.checkpoint_id"
            " WHERE p.tenant = $1 AND p.task_id = $2")
_CREATE_POINTER = ("INSERT INTO checkpoint_pointer (tenant, task_id, checkpoint_id, version)"
                   " VALUES ($1, $2, $3, 1) ON CONFLICT (tenant, task_id) DO NOTHING")
_MOVE_POINTER = ("UPDATE checkpoint_pointer SET checkpoint_id = $3, version = version + 1"
                 " WHERE tenant = $1 AND task_id = $2 AND version = $4")
_PRUNE = ("DELETE FROM checkpoints WHERE tenant = $1 AND task_id = $2"
          " AND id <> (SELECT checkpoint_id FROM checkpoint_pointer WHERE tenant = $1 AND task_id = $2)"
          " AND id NOT IN (SELECT id FROM checkpoints WHERE tenant = $1 AND task_id = $2"
          " ORDER BY seq DESC, id DESC LIMIT $3)")
_ACTIVE = ("SELECT c.id, c.tenant, c.task_id, c.seq, c.events, c.body, c.mac FROM checkpoint_pointer p"
           " JOIN checkpoints c ON c.id = p.checkpoint_id WHERE p.tenant = $1 AND p.task_id = $2")
_GET = "SELECT c.id, c.tenant, c.task_id, c.seq, c.events, c.body, c.mac FROM checkpoints c WHERE c.id = $1"


class LostRaceError(Exception):
    """The pointer kept changing under us for ``_CAS_ATTEMPTS`` re-reads."""


class Active(NamedTuple):
    id: int
    body: bytes


class Stored(NamedTuple):
    tenant: str
    task_id: str
    body: bytes


class Located(NamedTuple):
    """A checkpoint row with what resume and the policy need besides the body."""

    id: int
    tenant: str
    task_id: str
    seq: int
    events: int
    body: bytes


async def migrate_checkpoints_conn(conn: asyncpg.Connection) -> None:
    """``migrate_checkpoints`` on an existing connection (not inside a transaction)."""
    await conn.execute("SELECT pg_advisory_lock($1)", _MIGRATE_LOCK)
    try:
        async with conn.transaction():
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS checkpoint_schema_migrations ("
                " version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())")
            done = await conn.fetchval(_DONE)
            for version, ddl in _MIGRATIONS:
                if version > done:
                    await conn.execute(ddl)
                    await conn.execute(
                        "INSERT INTO checkpoint_schema_migrations(version) VALUES ($1)", version)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", _MIGRATE_LOCK)


async def migrate_checkpoints(dsn: str) -> None:
    """Create or upgrade the checkpoint tables; idempotent and concurrency-safe."""
    conn = await asyncpg.connect(dsn)
    try:
        await migrate_checkpoints_conn(conn)
    finally:
        await conn.close()


class CheckpointStore:
    """Save checkpoints and read them back, on a connection pool."""

    def __init__(self, pool: asyncpg.Pool, keys: IntegrityKeys, keep: int = KEEP_PER_TASK) -> None:
        if keep < 1:
            raise ValueError("keep must be at least 1")
        self.pool = pool
        self.keys = keys  # every row is tagged on save and checked on every read
        self.keep = keep

    async def save(self, cp: cp_mod.Checkpoint, events: int = 0) -> int:
        """Insert ``cp``, move the task's pointer to it unless a newer one is active, prune.

        One transaction. Returns the new row's id (also when the pointer stayed
        on a checkpoint with a higher ``seq``, saved concurrently).
        """
        body = cp_mod.encode(cp)
        keys = self.keys
        async with self.pool.acquire() as conn, conn.transaction():
            new_id: int = await conn.fetchval(_NEXT_ID)
            await conn.execute(_INSERT, cp.tenant, cp.task_id, cp.ledger_cursor, events, body, cp.checksum,
                               cp.created_at, cp.expires_at, new_id,
                               checkpoint_tag(keys.current, keys.mac_key, new_id, cp.tenant, cp.task_id,
                                              seq=cp.ledger_cursor, events=events, body=body))
            await _move_pointer(conn, cp.tenant, cp.task_id, new_id, cp.ledger_cursor)
            await conn.execute(_PRUNE, cp.tenant, cp.task_id, self.keep)
        return new_id

    async def active(self, tenant: str, task_id: str) -> Active | None:
        """(id, body) of the task's active checkpoint, or None."""
        found = await self.locate(tenant, task_id)
        return Active(found.id, found.body) if found else None

    async def get(self, checkpoint_id: int) -> Stored | None:
        """(tenant, task_id, body) of one checkpoint by id, or None."""
        found = await self.locate_id(checkpoint_id)
        return Stored(found.tenant, found.task_id, found.body) if found else None

    async def locate(self, tenant: str, task_id: str) -> Located | None:
        """The task's active checkpoint row, or None; ``IntegrityViolationError`` when the row
        fails its tag."""
        return self._checked(await self.pool.fetchrow(_ACTIVE, tenant, task_id))

    async def locate_id(self, checkpoint_id: int) -> Located | None:
        """One checkpoint row by id (whatever task it belongs to), or None; checked as ``locate``."""
        if not 0 < checkpoint_id < 2**63:  # not a bigint: no such row
            return None
        return self._checked(await self.pool.fetchrow(_GET, checkpoint_id))

    def _checked(self, row: asyncpg.Record | None) -> Located | None:
        if row is None:
            return None
        found = Located(row[0], row[1], row[2], row[3], row[4], bytes(row[5]))
        check_checkpoint(self.keys.mac_key_of, found.id, found.tenant, found.task_id, seq=found.seq,
                         events=found.events, body=found.body, tag=row[6])
        return found


async def _move_pointer(conn: asyncpg.Connection, tenant: str, task_id: str, new_id: int,
                        seq: int) -> bool:
    """CAS the pointer to ``new_id``; False if it stays on a checkpoint with a higher seq."""
    for _ in range(_CAS_ATTEMPTS):
        current = await conn.fetchrow(_POINTER, tenant, task_id)
        if current is None:
            if await conn.fetchval(_CREATE_POINTER + " RETURNING 1", tenant, task_id, new_id):
                return True
            continue  # created concurrently: re-read and compare
        if current[2] > seq:
            return False  # never backwards
        if await conn.execute(_MOVE_POINTER, tenant, task_id, new_id, current[1]) == "UPDATE 1":
            return True
    raise LostRaceError(f"the checkpoint pointer of {tenant}/{task_id} kept moving; gave up")
