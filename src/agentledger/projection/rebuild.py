"""Rebuild beside and swap, and verify: how any projection is replaced or audited from the ledger.

A projection is replaced without downtime (``replace_live``): it is built in a
schema of its own beside the live one (which keeps serving, its live loop keeps
folding into it), caught up to the ledger's end, then switched in by ONE
transaction that locks the live tables (the watermark first, as every batch
takes it; a lock not granted within ``SWITCH_LOCK_TIMEOUT_MS`` is given up and
tried again, so readers never queue long behind it), folds the last messages,
sets the new watermark and moves the new tables into ``public`` (``ALTER TABLE
… SET SCHEMA``: catalog changes only). A reader waits a few milliseconds at most
and sees the old projection or the new one, never none; the live loop sees
another watermark table, drops what it derived and carries on from the new
watermark. One rebuild of a projection runs at a time (an advisory lock); a
rebuild that dies leaves only its schema behind, which the next one drops, and
the live tables serving as before.

Forgetting must not be undone by a rebuild. A forget request erases the ledger
messages first, then deletes the projection's rows; a build that read those
messages before they were erased would bring the rows back. So the switch
looks at the projection's step in the tombstone-fanout's ``forget_steps``: a
step planned since the build began that has been applied makes the rebuild start
again, one still being applied makes the switch wait. (A step planned before the
build began erased its messages before the build read anything.)

``verify`` builds into a scratch schema and compares it with the live
projection in one snapshot, after the live projection reached what the build
folded; the projection says how to compare.

A projection supplies a ``Rebuildable``: how to fold the ledger into a schema
(``build``, which returns a ``Build`` that can ``catch_up``), how to seal it at the
switch, its tables, and for verify how to wait for the live projection and compare.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

import asyncpg
import structlog
from nats.aio.client import Client

from agentledger.config import Settings
from agentledger.errors import UnavailableError
from agentledger.projection.stream import connect, stream_last_seq
from agentledger.stores import db

log = structlog.get_logger()

LIVE_SCHEMA = "public"
# The switch happens once the build is this close to the stream's end: the rest is folded
# while the live tables are locked, so readers wait for at most this many messages.
SWITCH_GAP = 1_000
# How long the switch waits for the live tables' locks before it lets readers through and
# tries again, and how often it tries.
SWITCH_LOCK_TIMEOUT_MS = 500
SWITCH_ATTEMPTS = 60
# Builds started over because a forget request reached the projection meanwhile.
REBUILD_ATTEMPTS = 3
# Steps applied this long before a build began are older than it whatever the clocks say (the
# saga stamps them with its own clock).
_FORGET_STEPS = (f"SELECT tenant, request_id, result IS NOT NULL FROM {LIVE_SCHEMA}.forget_steps"  # noqa: S608
                 " WHERE index_name = $1 AND plan IS NOT NULL"
                 " AND (result IS NULL OR updated_at > now() - interval '1 hour')")

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


class Build(Protocol):
    """A projection folded into a schema of its own, up to ``last_seq``."""

    @property
    def last_seq(self) -> int:
        """Every ledger message at or below this is folded into the schema."""
        ...

    async def catch_up(self, upto: int | None = None) -> None:
        """Fold what the ledger holds after ``last_seq`` up to ``upto`` (None: its end now) and
        write it to the schema."""
        ...


class Rebuildable(Protocol[T_co]):
    """What ``replace_live`` and ``verify`` need of one projection."""

    # For logs and errors ("memory").
    noun: str
    # Where it is built beside the live one, and where a verify builds it.
    rebuild_schema: str
    verify_schema: str
    # The advisory lock held by its one rebuild.
    lock_key: int
    # Its live tables, the watermark table first.
    tables: tuple[str, ...]
    # The index of the tombstone-fanout's registry that deletes its rows.
    forget_index: str

    async def build(self, nc: Client, conn: asyncpg.Connection, settings: Settings, schema: str) -> Build:
        """Fold the ledger into ``schema`` (freshly migrated, empty)."""
        ...

    async def seal(self, conn: asyncpg.Connection, build: Build, schema: str) -> None:
        """Set the watermark of the projection in ``schema`` to ``build.last_seq`` (in the switch)."""
        ...

    async def wait_live(self, nc: Client, conn: asyncpg.Connection, settings: Settings, build: Build) -> None:
        """Return once the live projection holds at least what ``build`` folded."""
        ...

    async def compare(self, nc: Client, conn: asyncpg.Connection, settings: Settings, build: Build,
                      schema: str) -> T_co:
        """In a repeatable-read snapshot: the live projection against ``build`` in ``schema``."""
        ...


class ForgetMarks(NamedTuple):
    """The projection's forget steps: being applied now, and applied lately (tenant, request id)."""

    in_flight: frozenset[tuple[str, str]]
    applied: frozenset[tuple[str, str]]

    def unsafe_since(self, start: ForgetMarks) -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
        """Of the steps planned after ``start`` was taken: those applied meanwhile, those in flight."""
        known = start.in_flight | start.applied
        return set(self.applied - known), set(self.in_flight - known)


async def forget_marks(conn: asyncpg.Connection, index: str) -> ForgetMarks:
    """The steps of ``index`` with a plan: in flight (no result yet) or applied lately."""
    rows = await conn.fetch(_FORGET_STEPS, index)
    return ForgetMarks(frozenset((r[0], r[1]) for r in rows if not r[2]),
                       frozenset((r[0], r[1]) for r in rows if r[2]))


async def build_in(nc: Client, conn: asyncpg.Connection, settings: Settings, spec: Rebuildable[Any],
                   schema: str) -> Build:
    """``spec``'s projection folded from the ledger into ``schema``, dropped and created anew."""
    await db.drop_schema_conn(conn, schema)
    await db.migrate_conn(conn, schema)
    return await spec.build(nc, conn, settings, schema)


async def replace_live(nc: Client, conn: asyncpg.Connection, settings: Settings, spec: Rebuildable[Any], *,
                       unless: Callable[[asyncpg.Connection], Awaitable[bool]] | None = None) -> Build | None:
    """Rebuild ``spec``'s projection beside the live one and switch to it; the build.

    ``conn`` must not be in a transaction. ``unless``: asked once the rebuild's lock
    is held; True means there is nothing to do (None is returned).
    """
    schema = spec.rebuild_schema
    await conn.execute("SELECT pg_advisory_lock($1)", spec.lock_key)
    try:
        await db.migrate_conn(conn, LIVE_SCHEMA)
        for attempt in range(1, REBUILD_ATTEMPTS + 1):
            if unless is not None and await unless(conn):
                return None
            start = await forget_marks(conn, spec.forget_index)
            build = await build_in(nc, conn, settings, spec, schema)
            # Catch up while the live projection serves, so the switch folds only a few messages.
            while await stream_last_seq(nc, settings) - build.last_seq > SWITCH_GAP:
                await build.catch_up()
            if await _switch(conn, spec, build, start):
                return build
            log.warning("replay.forgotten_meanwhile", projection=spec.noun, attempt=attempt,
                        reason="a forget request reached the projection while it was rebuilt; building again")
        raise UnavailableError(f"forget requests kept reaching the {spec.noun} projection while it was rebuilt; "
                               "the live projection is unchanged, run the rebuild again")
    finally:
        try:
            await db.drop_schema_conn(conn, schema)
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", spec.lock_key)


async def _switch(conn: asyncpg.Connection, spec: Rebuildable[Any], build: Build, start: ForgetMarks) -> bool:
    """Make the rebuilt projection the live one, in one transaction (see the module docstring);
    False when a forget request was applied to the live projection since ``start``."""
    for attempt in range(1, SWITCH_ATTEMPTS + 1):
        tx = conn.transaction()
        await tx.start()
        try:
            await db.lock_tables_conn(conn, LIVE_SCHEMA, spec.tables, SWITCH_LOCK_TIMEOUT_MS)
            applied, in_flight = (await forget_marks(conn, spec.forget_index)).unsafe_since(start)
        except (asyncpg.LockNotAvailableError, asyncpg.DeadlockDetectedError) as exc:
            await tx.rollback()
            log.info("replay.switch_waiting", projection=spec.noun, attempt=attempt, error=type(exc).__name__)
            await asyncio.sleep(min(0.05 * attempt, 1.0))
            continue
        except BaseException:
            await tx.rollback()
            raise
        if applied or in_flight:
            await tx.rollback()
            if applied:
                return False
            log.info("replay.switch_waiting", projection=spec.noun, attempt=attempt, forgets=len(in_flight))
            await asyncio.sleep(min(0.05 * attempt, 1.0))
            continue
        locked = time.perf_counter()
        try:
            await build.catch_up()
            await spec.seal(conn, build, spec.rebuild_schema)
            await db.swap_tables_conn(conn, spec.rebuild_schema, LIVE_SCHEMA, spec.tables)
        except BaseException:
            await tx.rollback()
            raise
        await tx.commit()
        log.info("replay.switched", projection=spec.noun, last_seq=build.last_seq, attempts=attempt,
                 locked_s=round(time.perf_counter() - locked, 4))
        return True
    raise UnavailableError(f"could not lock the live {spec.noun} projection for the switch in {SWITCH_ATTEMPTS}"
                           " attempts; the live projection is unchanged")


async def replace_live_by(settings: Settings, spec: Rebuildable[Any]) -> Build:
    """``replace_live`` on connections of its own (as the operator)."""
    nc, conn = await connect(settings)
    try:
        build = await replace_live(nc, conn, settings, spec)
        assert build is not None  # ``unless`` is not asked for
        return build
    finally:
        await conn.close()
        await nc.close()


@dataclass(frozen=True)
class Verified(Generic[T]):
    """What ``verify`` compared, and the build it compared with."""

    result: T
    build: Build


async def verify(settings: Settings, spec: Rebuildable[T]) -> Verified[T]:
    """Build ``spec``'s projection into its scratch schema, wait for the live one to hold at
    least as much, and compare the two in one snapshot; the scratch schema is dropped after."""
    schema = spec.verify_schema
    nc, conn = await connect(settings)
    try:
        build = await build_in(nc, conn, settings, spec, schema)
        await spec.wait_live(nc, conn, settings, build)
        async with conn.transaction(isolation="repeatable_read"):
            return Verified(await spec.compare(nc, conn, settings, build, schema), build)
    finally:
        try:
            await db.drop_schema_conn(conn, schema)
        finally:
            await conn.close()
            await nc.close()
