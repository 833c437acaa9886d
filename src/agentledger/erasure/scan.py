"""Proof that forgotten content is gone: a logical scan and a raw-bytes scan (issue 10 §4).

``agentledger verify-forgotten RECEIPT`` calls ``verify(settings, receipt, needles, raw=)``:
the *needles* are the forgotten content the operator supplies (bytes), to which it adds the
receipt's ids (``receipt_ids``: a task, a data subject or a tenant). Content must be found
nowhere; an id may remain where it is by design — the forget request's own events and rows
(``bookkeeping``), the clear ``subject`` of values sealed under a destroyed key
(``sealed_contexts``) — and those findings are listed as *expected*, apart, not counted.
``verify_forgotten`` and the three steps (``logical_scan``, ``compact_postgres``,
``raw_scan``) take plain needles. Every report says what was checked (each stream with its
message count, each KV bucket and object store, each table of each schema with its row
count and indexes, the column statistics, each log file, each folder with its file and
byte totals) and what was found: the location and the needle's *index*, never the needle
itself (it is personal data; a subject, path or error that contains one is printed with
``<needle N>`` in its place). ``render`` prints a report.

Each needle is searched in several forms, because stores encode text: ``raw``; ``json`` and
``json-ascii`` (a JSON string body: quotes and backslashes escaped, non-ASCII as is or as
``\\uXXXX``, as the ledger's events and structlog lines hold it); ``array`` and ``record``
(PostgreSQL's quoting inside array and composite text); ``lower`` (tsvector lexemes are
lower case); ``hex`` (for needles of at least 8 bytes: a bytea rendered as text). Base64 is
not searched. A tsvector holds *normalized* lexemes: a needle is found there only when it is
a single token the parser does not stem (words with digits are kept whole). An embedding is
found by the bytes pgvector stores (``vector_needle`` of the forgotten text's vector, computed
again with the same embedder: measured identical to what the table and its HNSW index held),
by the raw scan only.

Logical scan (clean at once after a forget):
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

Raw scan (clean after the compaction below): every regular file under the given folders
(the JetStream store, PostgreSQL's data folder, the server logs), read in 1 MiB chunks that
overlap by the longest needle form minus one byte, so a needle across a chunk boundary is
found and no file is read whole. A value PostgreSQL compressed (TOAST, above ~2 kB) may hold
the needle only in compressed form and is not found by its bytes; the logical scan reads it.

What stays on disk, measured on this machine (nats-server 2.15.1, ``sync_interval: always``,
single server R1; embedded PostgreSQL 18.6 with data checksums, ``wal_level = replica``,
default ``min_wal_size`` 80 MB, ``max_wal_size`` 1 GB, ``wal_keep_size`` 0):

JetStream
  * The message-delete API (``agentledger.erasure.erase``) overwrites the whole record — subject,
    headers and data — in the block file at once: the raw scan is clean right after it.
  * A purge (of a subject or up to a sequence), a KV delete or purge, an object store delete
    only drop the index entries: the bytes stay in the block file for as long as the block
    holds any live message (measured: 3,000 purged messages of a 3 MB block were all still
    there after 3 s, a clean stop and a restart). A block is deleted only once every message
    in it is gone (a full stream purge deletes every block: clean at once). JetStream has no
    compaction an operator can trigger, so purge is not a way to forget; erase is.
  * SIGKILL right after erasing, then a restart on the same store: no erased message came
    back, in six layouts (the last message, the first, one in the middle, every message, all
    messages of a whole 8 MB block, the tail of a two-block stream); the raw scan stayed
    clean. Replicated (R3) streams also keep payloads in their raft logs until those
    compact (minutes); the embedded server is not clustered.

PostgreSQL
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
import contextlib
import json
import os
import re
import stat
import struct
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

import asyncpg
import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js.api import ConsumerConfig, DeliverPolicy

from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.errors import PermissionDeniedError, RuntimeStateError
from agentledger.runtime.embedded import nats_homes
from agentledger.runtime.postgres import EmbeddedPostgres, database_url
from agentledger.security import auth
from agentledger.stores.ledger import ledger_subject

CHUNK_BYTES = 1 << 20
# Shorter needles get no hex form: a few hex digits turn up in every digest.
HEX_MIN = 8
# Shorter receipt ids are not searched (``receipt_ids``).
MIN_ID_BYTES = 4
# Findings kept per report; the rest are counted (one needle in a million messages is one fact).
MAX_FINDINGS = 1000
# Findings a printed report lists (the structured report keeps up to MAX_FINDINGS).
PRINTED_FINDINGS = 100
# Rows fetched per cursor round trip.
PREFETCH = 500
# A stream whose consumer delivers nothing for this long is re-inspected (messages erased meanwhile).
IDLE_S = 10.0
LOCK_TIMEOUT_S = 60.0
SETTING_WAIT_S = 10.0
_SEGMENT = re.compile(r"^[0-9A-F]{24}(\.partial)?$")

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
_STAT_CATALOGS = ("pg_catalog.pg_statistic", "pg_catalog.pg_statistic_ext_data")


# --- reports ----------------------------------------------------------------------------------

class Finding(msgspec.Struct, frozen=True, kw_only=True):
    """One place a needle was found: which needle (its index), in which form, where; ``expected``
    says why a finding is by design (the forget request's own records, a value sealed under its
    subject's key) and does not count against clean."""

    store: str  # "jetstream" | "postgres" | "statistics" | "log" | "file"
    location: str
    needle: int
    form: str
    expected: str = ""


class StreamChecked(msgspec.Struct, kw_only=True):
    name: str
    kind: str  # "stream" | "kv" | "object"
    messages: int
    bytes: int
    first_seq: int
    last_seq: int
    scanned: int = 0


class TableChecked(msgspec.Struct, kw_only=True):
    schema: str
    name: str
    kind: str  # "table" | "matview"
    columns: int
    bytea_columns: list[str] = []
    indexes: list[str] = []  # "name (method)"
    rows: int = 0


class FileChecked(msgspec.Struct, kw_only=True):
    path: str
    bytes: int


class RootChecked(msgspec.Struct, kw_only=True):
    path: str
    files: int = 0
    bytes: int = 0


class LogicalReport(msgspec.Struct, kw_only=True):
    """What the logical scan read, and every needle it found there."""

    started_at: datetime
    finished_at: datetime | None = None
    needles: int
    forms: int
    nats: str = ""
    database: str = ""
    analyzed: bool = False
    streams: list[StreamChecked] = []
    tables: list[TableChecked] = []
    statistics: int = 0  # rows of pg_stats / pg_stats_ext / pg_stats_ext_exprs read
    logs: list[FileChecked] = []
    findings: list[Finding] = []
    more_findings: int = 0  # found beyond MAX_FINDINGS, counted only
    expected: list[Finding] = []  # by design (``Finding.expected``): listed, not counted
    more_expected: int = 0
    errors: list[str] = []

    @property
    def clean(self) -> bool:
        return not self.findings and not self.more_findings and not self.errors


class RawReport(msgspec.Struct, kw_only=True):
    """What the raw scan read (folders, file and byte totals), and every needle it found."""

    started_at: datetime
    finished_at: datetime | None = None
    needles: int
    forms: int
    roots: list[RootChecked] = []
    findings: list[Finding] = []
    more_findings: int = 0
    expected: list[Finding] = []
    more_expected: int = 0
    errors: list[str] = []  # files or folders that could not be read: not verified

    @property
    def clean(self) -> bool:
        return not self.findings and not self.more_findings and not self.errors


class CompactionReport(msgspec.Struct, kw_only=True):
    """What ``compact_postgres`` did, and whether every old WAL segment is gone."""

    database: str
    started_at: datetime
    seconds: float = 0.0
    wal_recycle_was: str = ""
    tables: list[str] = []
    catalogs: list[str] = []
    wal_before: list[str] = []
    wal_after: list[str] = []
    current_segment: str = ""
    rounds: int = 0
    held_by: list[str] = []
    complete: bool = False
    errors: list[str] = []


class VerifyReport(msgspec.Struct, kw_only=True):
    """``verify-forgotten``: the logical scan, the compaction if asked, the raw scan if asked."""

    logical: LogicalReport
    compaction: CompactionReport | None = None
    raw: RawReport | None = None
    request_id: str = ""
    # What the needles are, by index: "content" (the operator's) or the receipt field of an id.
    needles: list[str] = []
    errors: list[str] = []

    @property
    def clean(self) -> bool:
        return (self.logical.clean and (self.compaction is None or self.compaction.complete)
                and (self.raw is None or self.raw.clean) and not self.errors)


# --- needles ----------------------------------------------------------------------------------

class Form(NamedTuple):
    needle: int
    name: str
    data: bytes


def needle_forms(needles: Sequence[bytes]) -> list[Form]:
    """Every form each needle is searched in (duplicates dropped); an empty needle is refused."""
    forms: list[Form] = []
    for index, needle in enumerate(needles):
        if not needle:
            raise ValueError(f"needle {index} is empty")
        seen: set[bytes] = set()

        def add(name: str, data: bytes, index: int = index, seen: set[bytes] = seen) -> None:
            if data and data not in seen:
                seen.add(data)
                forms.append(Form(index, name, data))

        add("raw", bytes(needle))
        try:
            text = bytes(needle).decode()
        except UnicodeDecodeError:
            text = None
        if text is not None:
            add("json", json.dumps(text, ensure_ascii=False)[1:-1].encode())
            add("json-ascii", json.dumps(text)[1:-1].encode())
            add("array", text.replace("\\", "\\\\").replace('"', '\\"').encode())
            add("record", text.replace("\\", "\\\\").replace('"', '""').encode())
            add("lower", text.lower().encode())
        if len(needle) >= HEX_MIN:
            add("hex", bytes(needle).hex().encode())
    return forms


def vector_needle(values: Sequence[float]) -> bytes:
    """The bytes pgvector stores for a vector (float4, the server's native byte order): a raw-scan
    needle for the embedding of forgotten text, computed again with the embedder that indexed it.
    The logical scan does not match it (vectors read as text); their rows are found by the rest."""
    return struct.pack(f"={len(values)}f", *values)


# Why a finding does not count: (store, location before masking, needle index) -> reason or None.
Expected = Callable[[str, str, int], "str | None"]
# Needle index -> (reason, byte patterns holding the needle that do not count): an occurrence
# inside one of them only is an expected finding. Used on whole values (messages, columns).
Contexts = Mapping[int, tuple[str, Sequence[bytes]]]


class _Matcher:
    """Searches bytes for every form; masks needles out of text meant for a report."""

    def __init__(self, needles: Sequence[bytes], contexts: Contexts | None = None) -> None:
        self.needles = [bytes(n) for n in needles]
        self.forms = needle_forms(self.needles)
        self.longest = max((len(f.data) for f in self.forms), default=1)
        self.contexts = dict(contexts or {})
        self._masks = sorted({(f.data, f.needle) for f in self.forms}, key=lambda m: -len(m[0]))

    def search(self, data: bytes) -> list[Form]:
        """Every form in ``data`` (contexts not considered: chunks of files)."""
        return [f for f in self.forms if f.data in data]

    def search_value(self, data: bytes) -> list[tuple[Form, str]]:
        """Every form in one whole value, with the reason when it occurs only inside its contexts."""
        out = []
        for form in self.search(data):
            reason = ""
            if form.needle in self.contexts:
                why, patterns = self.contexts[form.needle]
                rest = data
                for pattern in patterns:
                    rest = rest.replace(pattern, b"")
                if form.data not in rest:
                    reason = why
            out.append((form, reason))
        return out

    def mask(self, text: str) -> str:
        """``text`` with every needle form replaced by ``<needle N>``."""
        raw = text.encode(errors="surrogateescape")
        for data, index in self._masks:
            if data in raw:
                raw = raw.replace(data, f"<needle {index}>".encode())
        return raw.decode(errors="replace")


class _Sink:
    """Collects findings (needles masked out of their locations) up to MAX_FINDINGS, counts the rest;
    the expected ones apart."""

    def __init__(self, report: LogicalReport | RawReport, matcher: _Matcher,
                 expected: Expected | None = None) -> None:
        self.report = report
        self.matcher = matcher
        self.expected = expected

    def add(self, store: str, location: str, hits: Iterable[Form | tuple[Form, str]]) -> None:
        for hit in hits:
            form, reason = (hit, "") if isinstance(hit, Form) else hit
            if not reason and self.expected is not None:
                reason = self.expected(store, location, form.needle) or ""
            finding = Finding(store=store, location=self.matcher.mask(location), needle=form.needle,
                              form=form.name, expected=reason)
            if not reason and len(self.report.findings) < MAX_FINDINGS:
                self.report.findings.append(finding)
            elif not reason:
                self.report.more_findings += 1
            elif len(self.report.expected) < MAX_FINDINGS:
                self.report.expected.append(finding)
            else:
                self.report.more_expected += 1

    def close(self) -> None:
        """Mask the errors too (a path or a name may hold a needle), and stamp the end."""
        self.report.errors = [self.matcher.mask(e) for e in self.report.errors]
        self.report.finished_at = _now()


def _now() -> datetime:
    return datetime.now(UTC)


# --- raw files --------------------------------------------------------------------------------

def _scan_file(path: Path, matcher: _Matcher, chunk: int) -> tuple[int, dict[Form, int]]:
    """(bytes read, first offset of each form found) of one file, read in overlapping chunks."""
    found: dict[Form, int] = {}
    overlap = matcher.longest - 1
    total = 0
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb", buffering=0) as src:
        tail, base = b"", 0  # base: file offset of buf[0]
        while block := src.read(chunk):
            total += len(block)
            buf = tail + block
            for form in matcher.forms:
                if form not in found and (at := buf.find(form.data)) >= 0:
                    found[form] = base + at
            keep = min(overlap, len(buf))
            tail = buf[len(buf) - keep:] if keep else b""
            base += len(buf) - keep
    return total, found


def _walk(root: Path, errors: list[str]) -> Iterable[tuple[Path, int]]:
    """(path, size) of every regular file under ``root`` (or ``root`` itself), symlinks not followed."""
    try:
        st = os.lstat(root)
    except OSError as exc:
        errors.append(f"{root}: {exc.strerror or exc}")
        return
    if stat.S_ISREG(st.st_mode):
        yield root, st.st_size
        return
    if not stat.S_ISDIR(st.st_mode):
        return

    def onerror(exc: OSError) -> None:
        errors.append(f"{exc.filename}: {exc.strerror or exc}")

    for folder, _dirs, files in os.walk(root, onerror=onerror, followlinks=False):
        for name in sorted(files):
            path = Path(folder) / name
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue  # removed while walking (a WAL segment, a temp file)
            except OSError as exc:
                errors.append(f"{path}: {exc.strerror or exc}")
                continue
            if stat.S_ISREG(st.st_mode):
                yield path, st.st_size


def raw_scan(paths: Sequence[Path], needles: Sequence[bytes], *, chunk: int = CHUNK_BYTES,
             expected: Expected | None = None) -> RawReport:
    """Search every regular file under each of ``paths`` (folders or files) for every needle form.

    Synchronous file I/O: from async code run it with ``asyncio.to_thread``. A file that
    cannot be read is an error of the report (not verified), never silently skipped.
    ``expected(store, path, needle)`` may name why a finding is by design.
    """
    matcher = _Matcher(needles)
    report = RawReport(started_at=_now(), needles=len(matcher.needles), forms=len(matcher.forms))
    sink = _Sink(report, matcher, expected)
    for root in paths:
        checked = RootChecked(path=matcher.mask(str(root)))
        report.roots.append(checked)
        for path, _size in _walk(Path(root), report.errors):
            try:
                read, found = _scan_file(path, matcher, chunk)
            except FileNotFoundError:
                continue
            except OSError as exc:
                report.errors.append(f"{matcher.mask(str(path))}: {exc.strerror or exc}")
                continue
            checked.files += 1
            checked.bytes += read
            for form, offset in sorted(found.items(), key=lambda item: item[1]):
                sink.add("file", f"{path} at byte {offset}", [form])
    sink.close()
    return report


# --- logical: JetStream -----------------------------------------------------------------------

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


async def _scan_stream(nc: Client, checked: StreamChecked, matcher: _Matcher, sink: _Sink,
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


async def _scan_jetstream(nc: Client, report: LogicalReport, matcher: _Matcher, sink: _Sink) -> None:
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


# --- logical: PostgreSQL ----------------------------------------------------------------------

def safe_dsn(dsn: str) -> str:
    """host:port/database of ``dsn``, nothing that names a credential."""
    parts = urlsplit(dsn)
    return f"{parts.hostname or ''}:{parts.port or ''}{parts.path}"


async def _user_tables(conn: asyncpg.Connection) -> list[asyncpg.Record]:
    return list(await conn.fetch(_TABLES_SQL))


async def _scan_table(conn: asyncpg.Connection, table: asyncpg.Record, matcher: _Matcher,
                      sink: _Sink) -> TableChecked:
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


async def _scan_statistics(conn: asyncpg.Connection, report: LogicalReport, matcher: _Matcher,
                           sink: _Sink) -> None:
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
        names = [t["qname"] for t in await _user_tables(conn)]
        for name in names:
            await conn.execute(f"ANALYZE {name}")
        return names
    finally:
        await conn.close()


async def _scan_postgres(dsn: str, report: LogicalReport, matcher: _Matcher, sink: _Sink) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        for table in await _user_tables(conn):
            try:
                report.tables.append(await _scan_table(conn, table, matcher, sink))
            except asyncpg.UndefinedTableError:
                continue  # dropped since it was listed
        await _scan_statistics(conn, report, matcher, sink)
    finally:
        await conn.close()


# --- logical scan -----------------------------------------------------------------------------

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


def default_raw_roots(settings: Settings) -> list[Path]:
    """What the raw scan reads for the embedded servers of ``settings.data_dir``: the JetStream
    store of every NATS node (the single server, or each node of ``up --cluster``, whose raft
    logs hold recent payloads for minutes), PostgreSQL's data folder, and the servers' logs."""
    data_dir = Path(settings.data_dir)
    pg_home = EmbeddedPostgres(data_dir, server_root=settings.server_root)
    roots = [p for n in nats_homes(data_dir, settings.server_root) for p in (n.dir / "jetstream", n.log_file)]
    roots += [pg_home.pgdata, pg_home.log_file]
    return [p for p in roots if p.exists()]


def embedded_superuser_dsn(settings: Settings) -> str | None:
    """The embedded PostgreSQL's superuser URL for the services' database (what
    ``compact_postgres`` needs); None when there is no embedded server for this data folder."""
    server = EmbeddedPostgres(Path(settings.data_dir), server_root=settings.server_root)
    if server.port is None or not server.superuser_passfile.exists():
        return None
    database = urlsplit(settings.database_url).path.lstrip("/") if settings.database_url else ""
    return database_url(server.url, database or "agentledger")


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
    matcher = _Matcher(needles, contexts)
    dsn = dsn or settings.database_url
    report = LogicalReport(started_at=_now(), needles=len(matcher.needles), forms=len(matcher.forms),
                           nats="" if not jetstream else safe_dsn(settings.nats_url) if nc is None else (
                               nc.connected_url.netloc.rpartition("@")[2] if nc.connected_url else ""),
                           database=safe_dsn(dsn) if dsn and postgres else "")
    sink = _Sink(report, matcher, expected)
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
        try:
            read, found = await asyncio.to_thread(_scan_file, Path(path), matcher, CHUNK_BYTES)
        except FileNotFoundError:
            continue
        except OSError as exc:
            report.errors.append(f"{matcher.mask(str(path))}: {exc.strerror or exc}")
            continue
        report.logs.append(FileChecked(path=matcher.mask(str(path)), bytes=read))
        for form, offset in sorted(found.items(), key=lambda item: item[1]):
            sink.add("log", f"{path} at byte {offset}", [form])
    sink.close()
    return report


# --- compaction -------------------------------------------------------------------------------

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
    report = CompactionReport(database=safe_dsn(dsn), started_at=_now())
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
        for table in await _user_tables(conn):
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


# --- all of it --------------------------------------------------------------------------------

async def verify_forgotten(settings: Settings, needles: Sequence[bytes], *,
                           raw_roots: Sequence[Path] | None = None, compact_dsn: str | None = None,
                           log_files: Sequence[Path] | None = None, nc: Client | None = None,
                           analyze: bool = False) -> VerifyReport:
    """The logical scan; then, with ``compact_dsn``, ``compact_postgres``; then, with
    ``raw_roots`` (``default_raw_roots(settings)`` for the embedded servers), the raw scan."""
    logical = await logical_scan(settings, needles, log_files=log_files, nc=nc, analyze=analyze)
    compaction = await compact_postgres(compact_dsn) if compact_dsn else None
    raw = await asyncio.to_thread(raw_scan, list(raw_roots), needles) if raw_roots is not None else None
    return VerifyReport(logical=logical, compaction=compaction, raw=raw)


def receipt_ids(receipt: ev.DeletionReceipt) -> list[tuple[str, bytes]]:
    """The ids of a receipt worth searching for, as (receipt field, bytes).

    A task, a data subject or a tenant must be gone from everything but the forget request's
    own records. A record id or a canonical key is not searched: the memory tombstone keeps
    both by design (``memory_forgotten``, the tombstone row); the operator's content needles
    are what shows those records are gone. The request id lives only in the request's records.
    An id shorter than MIN_ID_BYTES is not searched either: it would match inside other words.
    """
    selector = receipt.selector
    ids: list[tuple[str, str | None]] = []
    if selector.kind == "task":
        ids.append(("selector.task_id", selector.task_id))
    elif selector.kind == "subject":
        ids.append(("selector.subject", selector.subject))
    elif selector.kind == "tenant":
        ids.append(("tenant", receipt.tenant))
    return [(name, value.encode()) for name, value in ids if value and len(value.encode()) >= MIN_ID_BYTES]


def sealed_contexts(subject: str) -> tuple[str, list[bytes]]:
    """Where a data subject's token is by design once its key is destroyed: the clear ``subject`` of
    every value sealed under that key (ledger JSON and bytea as msgspec writes it, jsonb as
    PostgreSQL prints it) and an event's ``data_subject``. The key itself must be gone: its KV
    entry (``$KV.<keys>.<tenant>.<subject>``) is not a context, so a kept key is a finding."""
    token = json.dumps(subject)
    return ("sealed under the subject's destroyed key", [
        f'"subject":{token},"key_id":'.encode(), f'"subject": {token}, "ciphertext":'.encode(),
        f'"data_subject":{token}'.encode(), f'"data_subject": {token}'.encode()])


def bookkeeping(settings: Settings, tenant: str, first_id: int) -> Expected:
    """Findings of an id (needle index >= ``first_id``) in the forget requests' own records: the
    tenant's ``_forget`` ledger subject (requests and receipts, kept even when the tenant goes)
    and the fan-out's ``forget_*`` tables."""
    forget_subject = f"(subject {ledger_subject(settings.prefix, tenant, ev.FORGET_TASK)})"

    def check(store: str, location: str, needle: int) -> str | None:
        if needle < first_id:
            return None
        if store == "jetstream" and forget_subject in location:
            return "the forget request's own events"
        words = location.split(" ")
        if store == "postgres":  # "<schema>.<table> row ctid ..."
            table = words[0]
        elif store == "statistics" and len(words) > 1:  # "<view> <schema>.<table>.<column>"
            table = words[1]
        else:
            return None
        parts = table.split(".")
        if len(parts) > 1 and parts[1].startswith("forget_"):
            return "the forget request's own rows"
        return None

    return check


async def verify(settings: Settings, receipt: ev.DeletionReceipt, needles: Sequence[bytes], *,
                 raw: bool = False, log_files: Sequence[Path] | None = None,
                 nc: Client | None = None) -> VerifyReport:
    """``agentledger verify-forgotten RECEIPT``: search for the operator's ``needles`` (the
    forgotten content) and the receipt's ids (``receipt_ids``) everywhere.

    Content must be found nowhere. An id may be in the forget request's own records
    (``bookkeeping``) and, for a data subject, in the clear part of values sealed under its
    destroyed key (``sealed_contexts``): those findings are listed as expected. With ``raw``,
    PostgreSQL is compacted (the embedded server's superuser, ``embedded_superuser_dsn``) and
    the embedded servers' folders are searched for the content (not the ids: the request's
    own records hold them on disk too).
    """
    content = [bytes(n) for n in needles if n]
    ids = receipt_ids(receipt)
    all_needles = content + [value for _, value in ids]
    report = VerifyReport(logical=LogicalReport(started_at=_now(), needles=0, forms=0),
                          request_id=receipt.request_id,
                          needles=["content"] * len(content) + [name for name, _ in ids])
    if not all_needles:
        report.errors.append("nothing to search for: give the forgotten content (--needle); a record or "
                             "key selector's ids stay in the memory tombstone by design")
        return report
    contexts = {len(content) + i: sealed_contexts(value.decode())
                for i, (name, value) in enumerate(ids) if name == "selector.subject"}
    report.logical = await logical_scan(settings, all_needles, log_files=log_files, nc=nc, contexts=contexts,
                                        expected=bookkeeping(settings, receipt.tenant, len(content)))
    if raw:
        dsn = embedded_superuser_dsn(settings)
        roots = default_raw_roots(settings)
        if dsn is None:
            report.errors.append("no embedded PostgreSQL for this data folder: compact it with "
                                 "compact_postgres(<superuser URL>) and scan its data folder yourself")
        else:
            report.compaction = await compact_postgres(dsn)
        if not content:
            report.errors.append("the raw scan needs the forgotten content (--needle)")
        elif not roots:
            report.errors.append(f"no embedded server folders under {settings.data_dir}")
        else:
            report.raw = await asyncio.to_thread(raw_scan, roots, content)
    return report


# --- printing ---------------------------------------------------------------------------------

def _verdict(clean: bool) -> str:
    return "CLEAN" if clean else "NOT CLEAN"


def _listed(findings: Sequence[Finding], more: int) -> list[str]:
    lines = [f"    needle {f.needle} ({f.form}) in {f.store}: {f.location}"
             + (f" [{f.expected}]" if f.expected else "") for f in findings[:PRINTED_FINDINGS]]
    if len(findings) + more > PRINTED_FINDINGS:
        lines.append(f"    ... and {len(findings) + more - PRINTED_FINDINGS} more "
                     f"({len(findings)} in the report)")
    return lines


def _findings(report: LogicalReport | RawReport) -> list[str]:
    findings, more, errors = report.findings, report.more_findings, report.errors
    lines = [f"  found: {len(findings) + more}" if findings or more else "  found: nothing"]
    lines += _listed(findings, more)
    if report.expected or report.more_expected:
        lines.append(f"  expected, by design (not counted): {len(report.expected) + report.more_expected}")
        lines += _listed(report.expected, report.more_expected)
    if errors:
        lines.append(f"  not verified ({len(errors)}):")
        lines += [f"    {e}" for e in errors]
    return lines


def _seconds(start: datetime, end: datetime | None) -> str:
    return f"{(end - start).total_seconds():.2f} s" if end else "unfinished"


def render_logical(report: LogicalReport) -> str:
    lines = [f"Logical scan: {report.needles} needles in {report.forms} forms, "
             f"{_seconds(report.started_at, report.finished_at)}"]
    lines.append(f"  JetStream {report.nats or '(not scanned)'}: {len(report.streams)} streams, "
                 f"{sum(s.scanned for s in report.streams)} messages read")
    lines += [f"    {s.kind:<6} {s.name}: {s.messages} messages, {s.bytes} bytes, "
              + (f"seq {s.first_seq}..{s.last_seq}" if s.messages else "empty") + f", read {s.scanned}"
              for s in report.streams]
    lines.append(f"  PostgreSQL {report.database or '(not scanned)'}: {len(report.tables)} tables, "
                 f"{sum(t.rows for t in report.tables)} rows read"
                 + (" (statistics refreshed by ANALYZE first)" if report.analyzed else ""))
    for t in report.tables:
        extra = f"; bytea read as bytes: {', '.join(t.bytea_columns)}" if t.bytea_columns else ""
        lines.append(f"    {t.kind:<7} {t.schema}.{t.name}: {t.rows} rows, {t.columns} columns{extra}")
        if t.indexes:
            lines.append(f"            indexes: {', '.join(t.indexes)}")
    lines.append(f"  column statistics: {report.statistics} rows of pg_stats / pg_stats_ext / pg_stats_ext_exprs")
    lines.append(f"  logs: {len(report.logs)} files, {sum(f.bytes for f in report.logs)} bytes")
    lines += [f"    {f.path}: {f.bytes} bytes" for f in report.logs]
    lines += _findings(report)
    lines.append(f"  logical: {_verdict(report.clean)}")
    return "\n".join(lines)


def render_compaction(report: CompactionReport) -> str:
    lines = [f"PostgreSQL compaction of {report.database}: {report.seconds:.2f} s",
             f"  wal_recycle was {report.wal_recycle_was}, now off",
             f"  VACUUM (FULL, ANALYZE): {len(report.tables)} tables; VACUUM (FULL): {', '.join(report.catalogs)}",
             f"  WAL: {len(report.wal_before)} segments before, {report.rounds} switch+checkpoint rounds, "
             f"now {report.wal_after} (current {report.current_segment})"]
    lines += [f"  held by: {h}" for h in report.held_by]
    lines += [f"  error: {e}" for e in report.errors]
    lines.append(f"  compaction: {'COMPLETE' if report.complete else 'INCOMPLETE'}")
    return "\n".join(lines)


def render_raw(report: RawReport) -> str:
    lines = [f"Raw scan: {report.needles} needles in {report.forms} forms, "
             f"{_seconds(report.started_at, report.finished_at)}"]
    lines += [f"  {r.path}: {r.files} files, {r.bytes} bytes" for r in report.roots]
    lines += _findings(report)
    lines.append(f"  raw: {_verdict(report.clean)}")
    return "\n".join(lines)


def render(report: LogicalReport | CompactionReport | RawReport | VerifyReport) -> str:
    """The printable form of a report: what was checked, what was found, the verdict."""
    if isinstance(report, LogicalReport):
        return render_logical(report)
    if isinstance(report, CompactionReport):
        return render_compaction(report)
    if isinstance(report, RawReport):
        return render_raw(report)
    parts = []
    if report.request_id:
        parts.append(f"Forget request {report.request_id}: needles "
                     + ", ".join(f"{i} = {what}" for i, what in enumerate(report.needles)))
    parts.append(render_logical(report.logical))
    if report.compaction is not None:
        parts.append(render_compaction(report.compaction))
    if report.raw is not None:
        parts.append(render_raw(report.raw))
    parts += [f"error: {e}" for e in report.errors]
    parts.append(f"verify-forgotten: {_verdict(report.clean)}")
    return "\n\n".join(parts)
