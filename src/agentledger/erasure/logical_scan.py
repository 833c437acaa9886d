"""The logical scan: forgotten content searched in everything the stores answer with.

Clean at once after a forget (the raw scan of the same stores needs a compaction first):

  * JetStream: every message of every stream of the account connected to (the services'
    account holds the ledger, every KV bucket as ``KV_<bucket>`` and every object store as
    ``OBJ_<bucket>``; tenant accounts have no JetStream), read through an ordered consumer
    up to the last sequence the stream had when its scan began: subject, headers and data,
    nothing decoded.
  * PostgreSQL: every row of every table and materialized view of every non-system schema,
    streamed with a cursor, each column cast to text except bytea columns, which are read as
    their bytes (a needle inside a bytea JSON value is found as it is stored, not as hex);
    and the column statistics (``pg_stats``, ``pg_stats_ext``, ``pg_stats_ext_exprs``),
    which keep *sampled values* of the columns until the next ANALYZE. An index holds copies
    of its rows' columns: the rows are what the logical scan reads, dead index entries are
    the raw scan's business.
  * Log files (the data folder's ``*.log`` and the embedded servers' logs).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js.api import ConsumerConfig, DeliverPolicy

from agentledger.config import Settings
from agentledger.erasure.needles import Contexts, Expected, Matcher
from agentledger.erasure.raw_scan import scan_into
from agentledger.erasure.reports import FileChecked, LogicalReport, Sink, StreamChecked, TableChecked, now
from agentledger.runtime.embedded import nats_homes
from agentledger.runtime.postgres import EmbeddedPostgres
from agentledger.security import auth

# Rows fetched per cursor round trip.
PREFETCH = 500
# A stream whose consumer delivers nothing for this long is re-inspected (messages erased meanwhile).
IDLE_S = 10.0

# Non-system schemas: users cannot create a schema named pg_* (reserved).
_USER_SCHEMA = "n.nspname <> 'information_schema' AND n.nspname NOT LIKE 'pg\\_%'"
_TABLES_SQL = f"""
SELECT c.oid, n.nspname AS schema, c.relname AS name, c.relkind::text AS kind,
       quote_ident(n.nspname) || '.' || quote_ident(c.relname) AS qname
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relkind IN ('r', 'm') AND {_USER_SCHEMA}
ORDER BY n.nspname, c.relname
"""  # noqa: S608 - constant text
_COLUMNS_SQL = """
SELECT a.attname AS name, quote_ident(a.attname) AS qname,
       (CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END) = 'bytea'::regtype::oid AS is_bytea
FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum
"""
_INDEXES_SQL = """
SELECT c.relname AS name, am.amname AS method
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am am ON am.oid = c.relam
WHERE i.indrelid = $1 ORDER BY c.relname
"""
# Sampled values of the columns, per statistics view; schema filters as for the tables.
_STATS_SQL = (
    ("pg_stats", "SELECT schemaname || '.' || tablename || '.' || attname AS what, "
                 "most_common_vals::text, histogram_bounds::text, most_common_elems::text FROM pg_stats "
                 "WHERE schemaname <> 'information_schema' AND schemaname NOT LIKE 'pg\\_%'"),
    ("pg_stats_ext", "SELECT statistics_schemaname || '.' || statistics_name AS what, "
                     "most_common_vals::text FROM pg_stats_ext "
                     "WHERE statistics_schemaname <> 'information_schema' "
                     "AND statistics_schemaname NOT LIKE 'pg\\_%'"),
    ("pg_stats_ext_exprs", "SELECT statistics_schemaname || '.' || statistics_name || ' ' || expr AS what, "
                           "most_common_vals::text, histogram_bounds::text, most_common_elems::text "
                           "FROM pg_stats_ext_exprs WHERE statistics_schemaname <> 'information_schema' "
                           "AND statistics_schemaname NOT LIKE 'pg\\_%'"),
)


# --- JetStream --------------------------------------------------------------------------------

def _stream_kind(name: str) -> str:
    if name.startswith("KV_"):
        return "kv"
    if name.startswith("OBJ_"):
        return "object"
    return "stream"


def _header_bytes(headers: dict[str, str] | None) -> bytes:
    if not headers:
        return b""
    return b"\r\n".join(f"{k}: {v}".encode() for k, v in headers.items())


async def _scan_stream(nc: Client, checked: StreamChecked, matcher: Matcher, sink: Sink,
                       errors: list[str]) -> None:
    """Every message of one stream up to the last sequence it had when listed."""
    js = nc.jetstream()
    last = checked.last_seq
    state = {"seq": 0}
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def on_msg(msg: Any) -> None:
        if done.done():
            return
        md = msg.metadata
        seq = int(md.sequence.stream)
        if seq <= last:
            state["seq"] = seq
            checked.scanned += 1
            subject = msg.subject or ""
            where = f"{checked.name} seq {seq} (subject {subject})"
            for part, data in (("subject", subject.encode()), ("headers", _header_bytes(msg.headers)),
                               ("data", bytes(msg.data or b""))):
                if data:
                    sink.add("jetstream", f"{where} {part}", matcher.search_value(data))
        if seq >= last or int(md.num_pending) == 0:
            done.set_result(None)

    sub = await js.subscribe(">", stream=checked.name, cb=on_msg, ordered_consumer=True,
                             config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
                             pending_msgs_limit=0, pending_bytes_limit=0)
    try:
        seen = -1
        while not done.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(done), IDLE_S)
            if done.done():
                break
            if state["seq"] == seen:
                # Nothing for IDLE_S: done if what is left was deleted meanwhile, else incomplete.
                now = (await js.stream_info(checked.name)).state
                if now.messages == 0 or int(now.last_seq or 0) <= state["seq"]:
                    break
                errors.append(f"stream {checked.name}: no message for {IDLE_S:.0f} s after seq "
                              f"{state['seq']} of {last}; scan incomplete")
                break
            seen = state["seq"]
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()


async def _scan_jetstream(nc: Client, report: LogicalReport, matcher: Matcher, sink: Sink) -> None:
    jsm = nc.jsm()
    infos = []
    offset = 0
    while batch := await jsm.streams_info(offset):
        infos += batch
        offset += len(batch)
    for info in sorted(infos, key=lambda i: i.config.name or ""):
        name = info.config.name or ""
        st = info.state
        checked = StreamChecked(name=name, kind=_stream_kind(name), messages=int(st.messages or 0),
                                bytes=int(st.bytes or 0), first_seq=int(st.first_seq or 0),
                                last_seq=int(st.last_seq or 0))
        report.streams.append(checked)
        if checked.messages == 0:
            continue
        try:
            await _scan_stream(nc, checked, matcher, sink, report.errors)
        except nats.js.errors.NotFoundError:
            checked.messages = 0  # deleted since it was listed: nothing of it is left to hold content
        except (nats.errors.Error, OSError) as exc:
            report.errors.append(f"stream {name}: {exc!r}")


# --- PostgreSQL -------------------------------------------------------------------------------

def safe_dsn(dsn: str) -> str:
    """host:port/database of ``dsn``, nothing that names a credential."""
    parts = urlsplit(dsn)
    return f"{parts.hostname or ''}:{parts.port or ''}{parts.path}"


async def user_tables(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    return list(await conn.fetch(_TABLES_SQL))


async def _scan_table(conn: asyncpg.Connection, table: asyncpg.Record, matcher: Matcher,
                      sink: Sink) -> TableChecked:
    columns = await conn.fetch(_COLUMNS_SQL, table["oid"])
    indexes = await conn.fetch(_INDEXES_SQL, table["oid"])
    checked = TableChecked(
        schema=table["schema"], name=table["name"], kind="matview" if table["kind"] == "m" else "table",
        columns=len(columns), bytea_columns=[c["name"] for c in columns if c["is_bytea"]],
        indexes=[f"{i['name']} ({i['method']})" for i in indexes])
    if table["kind"] == "m" and not await conn.fetchval(
            "SELECT relispopulated FROM pg_class WHERE oid = $1", table["oid"]):
        return checked  # a materialized view never refreshed holds no rows
    # bytea as its bytes (asyncpg returns bytes); everything else as its text output.
    select = ", ".join(c["qname"] if c["is_bytea"] else f"{c['qname']}::text" for c in columns)
    query = f"SELECT ctid::text, {select} FROM {table['qname']}"  # noqa: S608 - quote_ident'ed names
    where = f"{table['schema']}.{table['name']}"
    async with conn.transaction(readonly=True, isolation="repeatable_read"):
        async for row in conn.cursor(query, prefetch=PREFETCH):
            checked.rows += 1
            for col, value in zip(columns, list(row)[1:], strict=True):
                if value is None:
                    continue
                data = value if isinstance(value, bytes) else str(value).encode()
                hits = matcher.search_value(data)
                if hits:
                    sink.add("postgres", f"{where} row ctid {row[0]} column {col['name']}", hits)
    return checked


async def _scan_statistics(conn: asyncpg.Connection, report: LogicalReport, matcher: Matcher,
                           sink: Sink) -> None:
    for view, query in _STATS_SQL:
        try:
            rows = await conn.fetch(query)
        except asyncpg.UndefinedTableError:
            continue  # an older server without this view
        for row in rows:
            report.statistics += 1
            data = "\n".join(str(v) for v in list(row)[1:] if v is not None).encode()
            hits = matcher.search_value(data)
            if hits:
                sink.add("statistics", f"{view} {row['what']}", hits)


async def analyze_tables(dsn: str) -> list[str]:
    """ANALYZE every table of the non-system schemas (its owner may), so the column statistics
    sample only live rows; the names analyzed."""
    conn = await asyncpg.connect(dsn)
    try:
        names = [t["qname"] for t in await user_tables(conn)]
        for name in names:
            await conn.execute(f"ANALYZE {name}")
        return names
    finally:
        await conn.close()


async def _scan_postgres(dsn: str, report: LogicalReport, matcher: Matcher, sink: Sink) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        for table in await user_tables(conn):
            try:
                report.tables.append(await _scan_table(conn, table, matcher, sink))
            except asyncpg.UndefinedTableError:
                continue  # dropped since it was listed
        await _scan_statistics(conn, report, matcher, sink)
    finally:
        await conn.close()


# --- all three --------------------------------------------------------------------------------

def default_log_files(settings: Settings) -> list[Path]:
    """The data folder's ``*.log`` files and the embedded servers' logs (also when their homes are
    outside the data folder)."""
    found: set[Path] = set()
    data_dir = Path(settings.data_dir)
    if data_dir.is_dir():
        found.update(p for p in data_dir.rglob("*.log") if p.is_file() and not p.is_symlink())
    for log_file in (*(n.log_file for n in nats_homes(data_dir, settings.server_root)),
                     EmbeddedPostgres(data_dir, server_root=settings.server_root).log_file):
        if log_file.is_file():
            found.add(log_file)
    return sorted(found)



async def logical_scan(settings: Settings, needles: Sequence[bytes], *,
                       log_files: Sequence[Path] | None = None, nc: Client | None = None,
                       dsn: str | None = None, analyze: bool = False, jetstream: bool = True,
                       postgres: bool = True, contexts: Contexts | None = None,
                       expected: Expected | None = None) -> LogicalReport:
    """Search every JetStream message, every PostgreSQL row and column statistic, and every log
    file for every needle.

    ``nc``: a connection to use (default: a new one as the operator, whose account holds every
    stream, bucket and object store); ``dsn``: default ``settings.database_url`` (the
    services' role owns every table); ``log_files``: default ``default_log_files``.
    ``analyze`` first refreshes the column statistics (ANALYZE), so they no longer sample
    rows deleted since the last one. ``jetstream`` / ``postgres`` False leave that store out
    (the report then lists none of its streams / tables). ``contexts`` and ``expected`` make
    findings by design (``Finding.expected``) listed apart, not counted against clean.
    """
    matcher = Matcher(needles, contexts)
    dsn = dsn or settings.database_url
    report = LogicalReport(started_at=now(), needles=len(matcher.needles), forms=len(matcher.forms),
                           nats="" if not jetstream else safe_dsn(settings.nats_url) if nc is None else (
                               nc.connected_url.netloc.rpartition("@")[2] if nc.connected_url else ""),
                           database=safe_dsn(dsn) if dsn and postgres else "")
    sink = Sink(report, matcher, expected)
    if jetstream:
        own = nc is None
        if nc is None:
            nc = await auth.connect(settings, auth.OPERATOR_ROLE)
        try:
            await _scan_jetstream(nc, report, matcher, sink)
        finally:
            if own:
                await nc.close()
    if postgres and dsn:
        if analyze:
            await analyze_tables(dsn)
            report.analyzed = True
        await _scan_postgres(dsn, report, matcher, sink)
    elif postgres:
        report.errors.append("no database URL: PostgreSQL not scanned")
    for path in default_log_files(settings) if log_files is None else log_files:
        read = await asyncio.to_thread(scan_into, sink, "log", Path(path))
        if read is not None:
            report.logs.append(FileChecked(path=matcher.mask(str(path)), bytes=read))
    sink.close()
    return report

