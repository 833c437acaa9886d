"""PostgreSQL compaction: making deleted rows, their index entries and their WAL leave the disk.

A DELETE only makes a row invisible; its bytes stay in several places until PostgreSQL rewrites
them, and the raw scan (``raw_scan``) would find them. ``compact_postgres`` is the measured
procedure that removes them, and says what it could not reach.

What stays on disk, measured on this machine (embedded PostgreSQL 18.6 with data checksums,
``wal_level = replica``, default ``min_wal_size`` 80 MB, ``max_wal_size`` 1 GB,
``wal_keep_size`` 0; the embedded server now runs with ``max_wal_size`` 128 MB and
``checkpoint_timeout`` 30 s, which only makes passed segments leave sooner):

  * A DELETE leaves the tuple in its heap page and its index entries (btree, GIN, HNSW) until
    the page is rewritten; a plain VACUUM (or autovacuum) frees the space without zeroing it.
    ``VACUUM (FULL)`` writes the table, its TOAST table and every index into new files; the
    old files are truncated at commit and unlinked at the next checkpoint.
  * ANALYZE copies sampled column values into ``pg_statistic`` (measured: a needle in a text
    column was in ``base/<db>/2619``); they stay there until the next ANALYZE, and its old
    row versions until ``pg_statistic`` itself is rewritten.
  * WAL holds every insert, and the DELETE's full-page image (data checksums: the first
    change of a page after a checkpoint logs the whole page, dead tuple included). With the
    default ``wal_recycle = on`` a checkpoint *renames* passed segments to future names
    instead of deleting them, bytes and all. Measured: the needle inserted while ~100 MB of
    WAL was written ended up in 8 segments, 7 of them recycled *future* segments (names above
    the current one); VACUUM FULL + CHECKPOINT + one ``pg_switch_wal()`` + CHECKPOINT left it
    in all 8, three rounds in 6, one round with ``wal_recycle = off`` still in 7 (future
    segments are not removed until they are passed). A switch writes the rest of the
    segment out (zeroed pages), so a segment is clean once it has been passed: 12 rounds
    with recycling on also came out clean. With ``wal_recycle = off`` passed segments are
    unlinked, and new ones are created zero-filled (``wal_init_zero``).
  * ``compact_postgres`` therefore: ``ALTER SYSTEM SET wal_recycle = off`` + reload, waited
    for (left off: every later forget needs it, and it costs only creating segments instead
    of renaming them); ``VACUUM (FULL, ANALYZE)`` of every table and materialized view of
    the non-system schemas; ``VACUUM (FULL)`` of ``pg_statistic`` and
    ``pg_statistic_ext_data``; CHECKPOINT; then ``pg_switch_wal()`` + CHECKPOINT rounds until
    every segment that was in pg_wal before the rounds (future ones included) is gone and
    the current one was created after them: one round per segment that was there. Measured:
    9 segments, 9 rounds, 0.2 s, raw scan clean (it had found the needle in the heap and in
    8 segments); again at once: 1 round, 0.06 s. In the tests: clean heap, btree, GIN and
    HNSW index files, pg_statistic and pg_wal, also after a SIGKILL of every PostgreSQL
    process right after it (crash recovery replays only WAL written after the compaction).
  * What it cannot remove: segments held by a replication slot, ``wal_keep_size`` or an
    archiver that has not copied them (``CompactionReport.held_by`` says so, and the rounds
    stop with ``complete`` false); copies already archived or in base backups; the freed
    blocks of the filesystem (the data folder no longer names them; the disk may still hold
    them until reused); a server log line that quoted a value (the logical scan of the logs
    finds it; logs are rotated or deleted by the operator). ``VACUUM FULL`` takes an ACCESS
    EXCLUSIVE lock per table (``lock_timeout`` bounds the wait) and needs room for a second
    copy of the largest table.
"""

from __future__ import annotations

import asyncio
import re
import time

import asyncpg

from agentledger.erasure.logical_scan import safe_dsn, user_tables
from agentledger.erasure.reports import CompactionReport, now
from agentledger.errors import PermissionDeniedError, RuntimeStateError

LOCK_TIMEOUT_S = 60.0
SETTING_WAIT_S = 10.0
_SEGMENT = re.compile(r"^[0-9A-F]{24}(\.partial)?$")
_STAT_CATALOGS = ("pg_catalog.pg_statistic", "pg_catalog.pg_statistic_ext_data")


async def _wal_segments(conn: asyncpg.Connection) -> list[str]:
    rows = await conn.fetch("SELECT name FROM pg_ls_waldir() ORDER BY name")
    return [r["name"] for r in rows if _SEGMENT.match(r["name"])]


async def _wait_setting(dsn: str, name: str, value: str) -> None:
    """Wait until a new session sees ``name = value``: the postmaster has reloaded, and has
    signalled the checkpointer (which removes segments) before any new session starts."""
    deadline = time.monotonic() + SETTING_WAIT_S
    while True:
        conn = await asyncpg.connect(dsn)
        try:
            if await conn.fetchval("SELECT current_setting($1)", name) == value:
                return
        finally:
            await conn.close()
        if time.monotonic() > deadline:
            raise RuntimeStateError(f"PostgreSQL did not apply {name} = {value} within {SETTING_WAIT_S:.0f} s")
        await asyncio.sleep(0.05)


async def _held_by(conn: asyncpg.Connection) -> list[str]:
    """What keeps old WAL segments in pg_wal past a checkpoint."""
    held: list[str] = []
    slots = await conn.fetch("SELECT slot_name, slot_type FROM pg_replication_slots WHERE restart_lsn IS NOT NULL")
    held += [f"replication slot {s['slot_name']} ({s['slot_type']})" for s in slots]
    keep = await conn.fetchval("SELECT current_setting('wal_keep_size')")
    if keep not in ("0", "0MB", "0kB"):
        held.append(f"wal_keep_size = {keep}")
    if await conn.fetchval("SELECT current_setting('archive_mode')") != "off":
        held.append("archive_mode is on: segments wait for the archiver, and archived copies stay")
    return held


async def compact_postgres(dsn: str, *, lock_timeout_s: float = LOCK_TIMEOUT_S,
                           max_rounds: int | None = None) -> CompactionReport:
    """Make deleted rows, their index entries and the WAL that carried them leave the data folder.

    ``dsn``: a superuser URL of the database to compact (``embedded_superuser_dsn``). Sets
    ``wal_recycle = off`` (persistently: ALTER SYSTEM), rewrites every table and
    materialized view of the non-system schemas and the statistics catalogs with
    ``VACUUM (FULL)``, then switches WAL segments and checkpoints until every segment that
    was in pg_wal before is gone (see the module docstring for what stays). ``complete``
    says whether that was reached; ``held_by`` names what kept segments.
    """
    started = time.monotonic()
    report = CompactionReport(database=safe_dsn(dsn), started_at=now())
    conn = await asyncpg.connect(dsn)
    try:
        if not await conn.fetchval("SELECT rolsuper FROM pg_roles WHERE rolname = current_user"):
            raise PermissionDeniedError("compacting PostgreSQL needs a superuser (VACUUM FULL of the catalogs, "
                                        "ALTER SYSTEM, CHECKPOINT, pg_switch_wal)", code="superuser_required")
        report.wal_recycle_was = str(await conn.fetchval("SELECT current_setting('wal_recycle')"))
        if report.wal_recycle_was != "off":
            await conn.execute("ALTER SYSTEM SET wal_recycle = off")
            await conn.fetchval("SELECT pg_reload_conf()")
            await _wait_setting(dsn, "wal_recycle", "off")
        report.held_by = await _held_by(conn)
        await conn.execute(f"SET lock_timeout = '{int(lock_timeout_s * 1000)}ms'")
        for table in await user_tables(conn):
            try:
                await conn.execute(f"VACUUM (FULL, ANALYZE) {table['qname']}")
                report.tables.append(f"{table['schema']}.{table['name']}")
            except asyncpg.UndefinedTableError:
                continue
            except asyncpg.PostgresError as exc:
                report.errors.append(f"VACUUM FULL {table['schema']}.{table['name']}: {exc}")
        for catalog in _STAT_CATALOGS:
            await conn.execute(f"VACUUM (FULL) {catalog}")
            report.catalogs.append(catalog)
        await conn.execute("CHECKPOINT")
        report.wal_before = await _wal_segments(conn)
        mark = max(s[:24] for s in report.wal_before) if report.wal_before else ""
        limit = max_rounds if max_rounds is not None else len(report.wal_before) + 3
        segments = report.wal_before
        while True:
            report.current_segment = str(await conn.fetchval(
                "SELECT pg_walfile_name(pg_current_wal_lsn())"))
            if report.current_segment > mark and all(s[:24] > mark for s in segments):
                report.complete = not report.errors
                break
            if report.rounds >= limit:
                report.errors.append(f"old WAL segments still in pg_wal after {report.rounds} rounds: "
                                     f"{[s for s in segments if s[:24] <= mark]}")
                break
            await conn.fetchval("SELECT pg_switch_wal()")
            await conn.execute("CHECKPOINT")
            report.rounds += 1
            segments = await _wal_segments(conn)
        report.wal_after = segments
    finally:
        await conn.close()
        report.seconds = round(time.monotonic() - started, 3)
    return report
