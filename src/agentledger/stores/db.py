"""PostgreSQL schema of the projections, and how to connect to it.

The projections are disposable: every table here can be dropped and rebuilt by
replaying the ledger stream. ``migrate`` is idempotent and safe to run from
several processes at once (it holds a PostgreSQL advisory lock while it works),
so every service simply calls it on start.

Tables (in the schema given to ``migrate``, ``public`` for the live projection):

* ``projector_watermark(name, seq)``: the last ledger sequence folded into the
  projection, one row per projector partition (``watermark_name``). The
  projector's consumer positions are derived from them, never the other way
  round.
* ``task_state``: one row per task: the core of its Working Memory state
  (``encode_core`` bytes: everything but the variables, small whatever the
  task's history), its blake3 hash and the sequence of the last ledger message
  of the task that was folded.
* ``task_variables``: one row per variable of a task (``encode_variable``
  bytes, which are also its JSON in the view), rewritten only when it is set.
* ``task_turns``: one row per turn of a task's transcript (``encode_turn``
  bytes, its JSON in the view), by ordinal; written once.
* ``applied_events``: the first ledger sequence of every event id each task
  consumed, the idempotency index that makes a repeated id a duplicate long
  after JetStream's dedupe window (one index entry per event, never read back
  in bulk).
* ``rejections``: one row per event the reducer refused (and per undecodable
  message), keyed by ledger sequence.
* ``schema_migrations``: which migrations ran.

``agentledger replay`` builds each projection (Working Memory, memory, documents)
in a schema of its own and then moves its tables into ``public`` in one
transaction (``lock_tables_conn``, ``swap_tables_conn``; see
``agentledger.projection.rebuild``); a live projection's tables are therefore
replaced, never rewritten in place.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import asyncpg

WATERMARK_NAME = "projector"


# What a PostgreSQL operation raises when the server is away, restarting or refused it: a
# connection lost mid-statement can leave asyncpg's protocol in a state it reports as an
# ``InternalClientError`` ("cannot switch to state ..."). A background loop logs these and tries
# again; none of them may end a process. A request answers ``unavailable`` to the narrower
# ``outages.DATABASE_OUTAGES`` (a constraint violation escaping a handler is a bug: ``internal``).
DATABASE_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError, OSError, TimeoutError)


def watermark_name(partition: int, partitions: int) -> str:
    """The watermark row of one projector partition: ``projector`` when there is one partition
    (the name it always had), else ``projector/<k>of<n>``, so a row names its layout and a
    re-partitioned projection never shares a row with the old one."""
    return WATERMARK_NAME if partitions == 1 else f"{WATERMARK_NAME}/{partition}of{partitions}"
# Arbitrary constant: the advisory lock taken while migrating.
_MIGRATE_LOCK = 0x61676C6D  # "aglm"
# A server that accepts TCP but never answers (stopped, overloaded) fails a connect in this
# long, not in asyncpg's default minute: callers retry, and liveness checks see them turn.
CONNECT_TIMEOUT_S = 5.0
_SCHEMA_RE = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")

# (version, DDL). Append only: a deployed migration never changes.
# The length BM25 normalises by: a tsvector's tokens (each lexeme's positions, at least one).
MEMORY_DOC_LEN = "(SELECT sum(greatest(cardinality(p.positions), 1)) FROM unnest({tsv}) AS p)::int"

_MIGRATIONS: list[tuple[int, str]] = [
    (1, """
        CREATE TABLE IF NOT EXISTS {s}.projector_watermark (
            name text PRIMARY KEY,
            seq  bigint NOT NULL
        );
        CREATE TABLE IF NOT EXISTS {s}.task_state (
            tenant     text NOT NULL,
            task_id    text NOT NULL,
            seq        bigint NOT NULL,
            state      bytea NOT NULL,
            state_hash text NOT NULL,
            updated_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (tenant, task_id)
        );
        CREATE TABLE IF NOT EXISTS {s}.rejections (
            tenant   text NOT NULL,
            task_id  text NOT NULL,
            seq      bigint NOT NULL,
            event_id text NOT NULL,
            kind     text NOT NULL,
            code     text NOT NULL,
            reason   text NOT NULL,
            PRIMARY KEY (tenant, task_id, seq)
        );
    """),
    # The state no longer carries applied event ids and the transcript: they move to rows of
    # their own. Rows of version 1 cannot be split in SQL, so the projection is emptied and the
    # projector rebuilds it from the ledger on start (it is a projection: nothing is lost).
    (2, """
        CREATE TABLE IF NOT EXISTS {s}.task_variables (
            tenant  text NOT NULL,
            task_id text NOT NULL,
            name    text NOT NULL,
            seq     bigint NOT NULL,
            value   bytea NOT NULL,
            PRIMARY KEY (tenant, task_id, name)
        );
        CREATE TABLE IF NOT EXISTS {s}.task_turns (
            tenant  text NOT NULL,
            task_id text NOT NULL,
            ordinal bigint NOT NULL,
            seq     bigint NOT NULL,
            turn    bytea NOT NULL,
            PRIMARY KEY (tenant, task_id, ordinal)
        );
        CREATE TABLE IF NOT EXISTS {s}.applied_events (
            tenant   text NOT NULL,
            task_id  text NOT NULL,
            event_id text NOT NULL,
            seq      bigint NOT NULL,
            PRIMARY KEY (tenant, task_id, event_id)
        );
        TRUNCATE {s}.task_state, {s}.rejections;
        UPDATE {s}.projector_watermark SET seq = 0;
    """),
    # The memory-policy service's tables (services/memory_policy/store.py says what each
    # holds). ``vector`` is created where the database is (it needs a superuser); here it is
    # only checked, so a database without pgvector fails with a clear error.
    (3, """
        CREATE EXTENSION IF NOT EXISTS vector;
        CREATE TABLE IF NOT EXISTS {s}.memory_watermark (
            name text PRIMARY KEY,
            seq  bigint NOT NULL
        );
        INSERT INTO {s}.memory_watermark(name, seq) VALUES ('memory', 0) ON CONFLICT DO NOTHING;
        CREATE TABLE IF NOT EXISTS {s}.memory_groups (
            tenant      text NOT NULL,
            scope_key   text NOT NULL,
            key         text NOT NULL,
            promoted_id text NOT NULL,
            seq         bigint NOT NULL,
            state       bytea NOT NULL,
            PRIMARY KEY (tenant, scope_key, key)
        );
        CREATE INDEX IF NOT EXISTS memory_groups_promoted ON {s}.memory_groups (tenant, promoted_id);
        CREATE TABLE IF NOT EXISTS {s}.memory_records (
            tenant           text NOT NULL,
            record_id        text NOT NULL,
            scope_key        text NOT NULL,
            key              text NOT NULL,
            kind             text NOT NULL,
            status           text NOT NULL,
            authority        smallint NOT NULL,
            sensitivity_rank smallint NOT NULL,
            schema_version   smallint NOT NULL,
            subject_version  int NOT NULL,
            observed_at      timestamptz NOT NULL,
            expires_at       timestamptz,
            ledger_seq       bigint NOT NULL,
            row              bytea NOT NULL,
            tsv              tsvector,
            embedding        vector(256),
            PRIMARY KEY (tenant, record_id)
        );
        CREATE INDEX IF NOT EXISTS memory_records_group ON {s}.memory_records (tenant, scope_key, key);
        CREATE INDEX IF NOT EXISTS memory_records_order ON {s}.memory_records (tenant, scope_key, ledger_seq);
        CREATE INDEX IF NOT EXISTS memory_records_tsv ON {s}.memory_records USING gin (tsv);
        CREATE INDEX IF NOT EXISTS memory_records_embedding ON {s}.memory_records
            USING hnsw (embedding vector_cosine_ops);
        CREATE TABLE IF NOT EXISTS {s}.memory_history (
            tenant      text NOT NULL,
            event_id    text NOT NULL,
            seq         bigint NOT NULL,
            event       text NOT NULL,
            proposal_id text,
            record_id   text,
            scope_key   text,
            key         text,
            action      text,
            reason      text NOT NULL DEFAULT '',
            trace       bytea,
            at          timestamptz NOT NULL,
            PRIMARY KEY (tenant, event_id)
        );
        CREATE INDEX IF NOT EXISTS memory_history_key ON {s}.memory_history (tenant, scope_key, key, seq);
        CREATE INDEX IF NOT EXISTS memory_history_proposal ON {s}.memory_history (tenant, proposal_id, seq)
            WHERE proposal_id IS NOT NULL;
        CREATE INDEX IF NOT EXISTS memory_history_record ON {s}.memory_history (tenant, record_id)
            WHERE record_id IS NOT NULL;
        CREATE TABLE IF NOT EXISTS {s}.memory_held (
            tenant    text NOT NULL,
            record_id text NOT NULL,
            n         int NOT NULL,
            mark      bytea NOT NULL,
            PRIMARY KEY (tenant, record_id, n)
        );
        CREATE TABLE IF NOT EXISTS {s}.memory_receipts (
            receipt_id text PRIMARY KEY,
            tenant     text NOT NULL,
            caller     text NOT NULL,
            task_id    text,
            record_ids text[] NOT NULL,
            created_at timestamptz NOT NULL,
            expires_at timestamptz NOT NULL,
            receipt    bytea NOT NULL
        );
        CREATE INDEX IF NOT EXISTS memory_receipts_task ON {s}.memory_receipts
            (tenant, task_id, created_at DESC, receipt_id DESC);
        CREATE INDEX IF NOT EXISTS memory_receipts_records ON {s}.memory_receipts USING gin (record_ids);
        CREATE INDEX IF NOT EXISTS memory_receipts_expiry ON {s}.memory_receipts (expires_at);
        CREATE TABLE IF NOT EXISTS {s}.memory_usage (
            tenant       text NOT NULL,
            record_id    text NOT NULL,
            last_read_at timestamptz NOT NULL,
            reads        bigint NOT NULL,
            PRIMARY KEY (tenant, record_id)
        );
    """),
    # The context-builder's tables (services/context_builder/store.py says what each holds):
    # frozen generations (their bytes are in the artifact store), compaction checkpoints, and
    # each conversation's epoch, lineage and active checkpoint pointer.
    (4, """
        CREATE TABLE IF NOT EXISTS {s}.context_generations (
            generation_id        text PRIMARY KEY,
            tenant               text NOT NULL,
            task_id              text NOT NULL,
            digest               text NOT NULL,
            artifact_uri         text,
            frozen_digest        text NOT NULL,
            frozen_uri           text NOT NULL,
            input_ordinal        bigint NOT NULL,
            transcript_revision  bigint NOT NULL,
            epoch                bigint NOT NULL,
            lineage              text NOT NULL,
            staged_checkpoint_id text,
            regenerated_from     text,
            user_id              text,
            project_id           text,
            created_at           timestamptz NOT NULL
        );
        CREATE INDEX IF NOT EXISTS context_generations_task
            ON {s}.context_generations (tenant, task_id, input_ordinal);
        CREATE TABLE IF NOT EXISTS {s}.context_checkpoints (
            checkpoint_id    text PRIMARY KEY,
            tenant           text NOT NULL,
            task_id          text NOT NULL,
            generation_id    text NOT NULL,
            epoch            bigint NOT NULL,
            lineage          text NOT NULL,
            coverage_first   bigint NOT NULL,
            coverage_through bigint NOT NULL,
            status           text NOT NULL,
            reason           text NOT NULL DEFAULT '',
            body             bytea NOT NULL,
            created_at       timestamptz NOT NULL,
            updated_at       timestamptz NOT NULL
        );
        CREATE INDEX IF NOT EXISTS context_checkpoints_task
            ON {s}.context_checkpoints (tenant, task_id, coverage_through);
        CREATE TABLE IF NOT EXISTS {s}.context_conversations (
            tenant               text NOT NULL,
            task_id              text NOT NULL,
            epoch                bigint NOT NULL,
            lineage              text NOT NULL,
            lineage_base         bigint NOT NULL,
            active_checkpoint_id text,
            coverage_end         bigint NOT NULL,
            version              bigint NOT NULL,
            PRIMARY KEY (tenant, task_id)
        );
    """),
    # The document index of the context-builder, a projection of the ``_documents`` subjects
    # (services/context_builder/documents.py says what each table holds; rebuilt by replay).
    (5, """
        CREATE EXTENSION IF NOT EXISTS vector;
        CREATE TABLE IF NOT EXISTS {s}.document_watermark (
            name text PRIMARY KEY,
            seq  bigint NOT NULL
        );
        INSERT INTO {s}.document_watermark(name, seq) VALUES ('documents', 0) ON CONFLICT DO NOTHING;
        CREATE TABLE IF NOT EXISTS {s}.documents (
            tenant         text NOT NULL,
            doc_id         text NOT NULL,
            version        bigint NOT NULL,
            source         text NOT NULL,
            title          text NOT NULL,
            chunking       text NOT NULL,
            content_blake3 text,
            chunks         int NOT NULL,
            first_seq      bigint NOT NULL,
            last_seq       bigint NOT NULL,
            ingested_at    timestamptz NOT NULL,
            PRIMARY KEY (tenant, doc_id)
        );
        CREATE TABLE IF NOT EXISTS {s}.document_versions (
            tenant         text NOT NULL,
            doc_id         text NOT NULL,
            version        bigint NOT NULL,
            status         text NOT NULL,
            source         text NOT NULL,
            chunking       text NOT NULL,
            content_blake3 text,
            first_seq      bigint NOT NULL,
            superseded_seq bigint,
            PRIMARY KEY (tenant, doc_id, version)
        );
        CREATE TABLE IF NOT EXISTS {s}.document_chunks (
            tenant      text NOT NULL,
            doc_id      text NOT NULL,
            chunk_index int NOT NULL,
            version     bigint NOT NULL,
            seq         bigint NOT NULL,
            text        text NOT NULL,
            tsv         tsvector NOT NULL,
            embedding   vector(256),
            PRIMARY KEY (tenant, doc_id, chunk_index)
        );
        CREATE INDEX IF NOT EXISTS document_chunks_tsv ON {s}.document_chunks USING gin (tsv);
        CREATE INDEX IF NOT EXISTS document_chunks_embedding ON {s}.document_chunks
            USING hnsw (embedding vector_cosine_ops);
    """),
    # Working Memory gained the conversation's epoch and lineage base (``history_cleared``), so
    # every stored state encodes, and hashes, differently from a fold of the same ledger now.
    # As for version 2, the projection is emptied and the projector rebuilds it from the ledger
    # on start, beside the empty one and in bounded memory (it is a projection: nothing is lost).
    (6, """
        TRUNCATE {s}.task_state, {s}.rejections, {s}.task_variables, {s}.task_turns,
            {s}.applied_events;
        UPDATE {s}.projector_watermark SET seq = 0;
    """),
    # Forgetting (docs/deletion.md). Memory records name their data subject, so a subject's
    # records are found without decoding every row; existing records learn it when the memory
    # projection is rebuilt from the ledger on start (emptied here, as versions 2 and 6 do).
    # Generations and compaction checkpoints record the data subjects and memory records
    # they hold (NULL on rows built before: a forget treats those as holding anything of
    # their tenant). The tombstone-fanout's requests and per-index steps are its own state.
    (7, """
        ALTER TABLE {s}.memory_records ADD COLUMN IF NOT EXISTS data_subject text;
        CREATE INDEX IF NOT EXISTS memory_records_subject ON {s}.memory_records (tenant, data_subject)
            WHERE data_subject IS NOT NULL;
        TRUNCATE {s}.memory_groups, {s}.memory_records, {s}.memory_history, {s}.memory_held;
        UPDATE {s}.memory_watermark SET seq = 0;
        ALTER TABLE {s}.context_generations ADD COLUMN IF NOT EXISTS subjects text[];
        ALTER TABLE {s}.context_generations ADD COLUMN IF NOT EXISTS memory_ids text[];
        ALTER TABLE {s}.context_checkpoints ADD COLUMN IF NOT EXISTS subjects text[];
        CREATE TABLE IF NOT EXISTS {s}.forget_watermark (
            name text PRIMARY KEY,
            seq  bigint NOT NULL
        );
        INSERT INTO {s}.forget_watermark(name, seq) VALUES ('forget', 0) ON CONFLICT DO NOTHING;
        CREATE TABLE IF NOT EXISTS {s}.forget_requests (
            tenant         text NOT NULL,
            request_id     text NOT NULL,
            kind           text NOT NULL,
            subject        text,
            seq            bigint NOT NULL,
            request        bytea NOT NULL,
            requested_at   timestamptz NOT NULL,
            status         text NOT NULL,
            erased_through bigint,
            completed_at   timestamptz,
            receipt        bytea,
            digest         text,
            last_error     text NOT NULL DEFAULT '',
            PRIMARY KEY (tenant, request_id)
        );
        CREATE INDEX IF NOT EXISTS forget_requests_subject ON {s}.forget_requests (tenant, subject)
            WHERE subject IS NOT NULL;
        CREATE INDEX IF NOT EXISTS forget_requests_pending ON {s}.forget_requests (status)
            WHERE status = 'pending';
        CREATE TABLE IF NOT EXISTS {s}.forget_steps (
            tenant     text NOT NULL,
            request_id text NOT NULL,
            index_name text NOT NULL,
            planned    boolean NOT NULL,
            plan       bytea,
            result     bytea,
            updated_at timestamptz NOT NULL,
            PRIMARY KEY (tenant, request_id, index_name)
        );
    """),
    # A forget request that reached a conversation's compaction checkpoints moves it on to a
    # new lineage within its epoch (``core.context.lineage_id``): ``forgets`` counts those
    # moves (back to 0 when a new epoch begins), so nothing staged for the old lineage can
    # be activated (services/context_builder/forget.py).
    (8, """
        ALTER TABLE {s}.context_conversations ADD COLUMN IF NOT EXISTS forgets bigint NOT NULL DEFAULT 0;
    """),
    # The projector's one-statement batch (services/projector/store.py ``write_batch``) ends in
    # this when one of its guards fails, so that nothing of the statement is kept.
    (9, """
        CREATE OR REPLACE FUNCTION {s}.projector_refuse(reason text) RETURNS bigint
            LANGUAGE plpgsql VOLATILE AS $$
        BEGIN
            RAISE EXCEPTION 'projector batch refused: %', reason USING ERRCODE = 'AL001';
        END
        $$;
    """),
    # The ledger messages a projection of a reserved subject (memory, documents, forget requests)
    # passed over because it could not fold them (``agentledger.projection.live``): keyed by
    # the consumer's name and the stream sequence, with a code and a reason that hold no content.
    (10, """
        CREATE TABLE IF NOT EXISTS {s}.projection_rejections (
            projection  text NOT NULL,
            seq         bigint NOT NULL,
            code        text NOT NULL,
            reason      text NOT NULL,
            recorded_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (projection, seq)
        );
    """),
    # Integrity tags (core/integrity.py, core/projection_tags.py): the Working Memory core and
    # turn rows, the memory records, read receipts and generations carry a keyed MAC their
    # reads check. Rows made before
    # had none and would be refused as tampered, so both projections are refolded from the
    # ledger (the watermarks go back to 0; the services rebuild them as they start).
    (11, """
        ALTER TABLE {s}.task_state ADD COLUMN IF NOT EXISTS mac text;
        ALTER TABLE {s}.task_turns ADD COLUMN IF NOT EXISTS mac text;
        ALTER TABLE {s}.memory_records ADD COLUMN IF NOT EXISTS mac text;
        ALTER TABLE {s}.memory_receipts ADD COLUMN IF NOT EXISTS mac text;
        ALTER TABLE {s}.context_generations ADD COLUMN IF NOT EXISTS mac text;
        ALTER TABLE {s}.context_generations ADD COLUMN IF NOT EXISTS finish_mac text;
        TRUNCATE {s}.task_state, {s}.rejections, {s}.task_variables, {s}.task_turns,
            {s}.applied_events;
        UPDATE {s}.projector_watermark SET seq = 0;
        TRUNCATE {s}.memory_groups, {s}.memory_records, {s}.memory_history, {s}.memory_held;
        UPDATE {s}.memory_watermark SET seq = 0;
    """),
    # A memory group's key by its keyed digest (``core.memory.keys.tombstone_key``): a group left
    # with tombstones only is keyed by it (its words go), and a forget whose record's proposal
    # was erased finds the group of its key by it (services/memory_policy/fold.py).
    (12, """
        ALTER TABLE {s}.memory_groups ADD COLUMN IF NOT EXISTS key_digest text;
        CREATE INDEX IF NOT EXISTS memory_groups_digest ON {s}.memory_groups (tenant, scope_key, key_digest);
    """),
    # BM25's document length, stored: the tokens of a memory record's lexical document (the sum
    # of its lexemes' positions), written with its tsvector by the memory projection, so a read
    # scores and averages lengths from a column instead of unnesting every gated tsvector.
    (13, """
        ALTER TABLE {s}.memory_records ADD COLUMN IF NOT EXISTS doc_len int;
        UPDATE {s}.memory_records SET doc_len = {doc_len} WHERE tsv IS NOT NULL AND doc_len IS NULL;
    """.replace("{doc_len}", MEMORY_DOC_LEN.format(tsv="tsv"))),
    # Which derivation of a memory record's index text (``fold.search_text``) its full-text vector,
    # length and embedding were made by (``fold.INDEX_TEXT_VERSION``). Rows written before say
    # nothing and are taken as the first; the memory projection derives them again as it starts
    # (services/memory_policy/reindex.py), so ``replay --verify`` after an upgrade compares like
    # with like.
    (14, """
        ALTER TABLE {s}.memory_records ADD COLUMN IF NOT EXISTS index_version smallint NOT NULL DEFAULT 1;
    """),
    # The traces a read serves carry integrity tags too: a Working Memory task's rejection rows
    # (``wm.get``'s rejections page) and the memory history (``memory.history``). Rows made
    # before have none and would be refused as tampered; as for version 11, both projections
    # are refolded from the ledger (the watermarks go back to 0; the services rebuild them as
    # they start), so no row is tagged as it stands (it may have been edited meanwhile).
    (15, """
        ALTER TABLE {s}.rejections ADD COLUMN IF NOT EXISTS mac text;
        ALTER TABLE {s}.memory_history ADD COLUMN IF NOT EXISTS mac text;
        TRUNCATE {s}.task_state, {s}.rejections, {s}.task_variables, {s}.task_turns,
            {s}.applied_events;
        UPDATE {s}.projector_watermark SET seq = 0;
        TRUNCATE {s}.memory_groups, {s}.memory_records, {s}.memory_history, {s}.memory_held;
        UPDATE {s}.memory_watermark SET seq = 0;
    """),
    # A compacted build erases its frozen input once its row is finished
    # (services/context_builder/build.py): ``frozen_kept`` marks a finished row whose frozen input
    # is not erased yet, so what a process killed between the two left is erased at the next start.
    (16, """
        ALTER TABLE {s}.context_generations ADD COLUMN IF NOT EXISTS frozen_kept boolean NOT NULL DEFAULT false;
        CREATE INDEX IF NOT EXISTS context_generations_frozen_kept ON {s}.context_generations (tenant)
            WHERE frozen_kept;
    """),
]

SCHEMA_VERSION = _MIGRATIONS[-1][0]
# The tables of one projection (its ``schema_migrations`` is the schema's, not the projection's).
PROJECTION_TABLES = ("projector_watermark", "task_state", "task_variables", "task_turns",
                     "applied_events", "rejections")
_DONE = "SELECT coalesce(max(version), 0) FROM {s}.schema_migrations"
_RECORD = "INSERT INTO {s}.schema_migrations(version) VALUES ($1)"
# A projection without watermark rows gets the one row of a single partition; one that has
# rows keeps them (a partitioned projection has a row per partition and no bare one).
_WATERMARK_ROW = ("INSERT INTO {s}.projector_watermark(name, seq) SELECT $1, 0 WHERE NOT EXISTS"
                  " (SELECT 1 FROM {s}.projector_watermark WHERE name = $1 OR name LIKE $1 || '/%')")


def columns(rows: Sequence[Sequence[object]], width: int) -> list[list[object]]:
    """``rows`` as ``width`` column lists, for one ``unnest($1::t[], $2::t[], ...)`` statement."""
    return [list(col) for col in zip(*rows, strict=True)] if rows else [[] for _ in range(width)]


def _sql(template: str, quoted_schema: str) -> str:
    """``template`` with ``{s}`` replaced by an already validated, quoted schema name."""
    return template.replace("{s}", quoted_schema)


def check_schema(schema: str) -> str:
    """Return ``schema`` quoted for SQL, refusing anything but a plain identifier."""
    if not _SCHEMA_RE.match(schema):
        raise ValueError(f"invalid schema name {schema!r}: use [a-z_][a-z0-9_]*")
    return f'"{schema}"'


async def connect(dsn: str) -> asyncpg.Connection:
    """One connection to the projection database."""
    return await asyncpg.connect(dsn, timeout=CONNECT_TIMEOUT_S)


class BatchConnection:
    """The one connection a projection writes its batches on (reads use a pool): opened on
    first use and again after ``drop``, so no pool release resets it per batch. ``drop``
    terminates it at once, with the plans it cached against tables a rebuild replaced."""

    def __init__(self, dsn: str) -> None:
        self._dsn = dsn
        self._conn: asyncpg.Connection | None = None

    async def get(self) -> asyncpg.Connection:
        if self._conn is None or self._conn.is_closed():
            self._conn = await connect(self._dsn)
        return self._conn

    def drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            conn.terminate()


async def _keep_session(conn: asyncpg.Connection) -> None:
    """A pooled connection's reset on release: nothing beyond asyncpg's own (which rolls back
    an open transaction and drops listeners), see ``create_pool``."""


async def create_pool(dsn: str, *, min_size: int = 1, max_size: int = 4) -> asyncpg.Pool:
    """A connection pool to the projection database.

    A connection goes back to the pool without the session reset query (advisory
    unlock, ``CLOSE ALL``, ``UNLISTEN``, ``RESET ALL``): one round trip per read
    saved, a sixth of a ``wm.get``. So its users keep no session state on it
    (session advisory locks, ``SET`` without ``LOCAL``, ``LISTEN``): those take a
    connection of their own (``connect``).
    """
    pool = await asyncpg.create_pool(dsn, min_size=min_size, max_size=max_size,
                                     timeout=CONNECT_TIMEOUT_S, reset=_keep_session)
    assert pool is not None
    return pool


async def migrate_conn(conn: asyncpg.Connection, schema: str = "public") -> None:
    """``migrate`` on an existing connection (must not be inside a transaction)."""
    s = check_schema(schema)
    await conn.execute("SELECT pg_advisory_lock($1)", _MIGRATE_LOCK)
    try:
        async with conn.transaction():
            await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {s}")
            await conn.execute(
                f"CREATE TABLE IF NOT EXISTS {s}.schema_migrations ("
                " version int PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())")
            done = await conn.fetchval(_sql(_DONE, s))
            for version, ddl in _MIGRATIONS:
                if version > done:
                    await conn.execute(_sql(ddl, s))
                    await conn.execute(_sql(_RECORD, s), version)
            await conn.execute(_sql(_WATERMARK_ROW, s), WATERMARK_NAME)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", _MIGRATE_LOCK)


async def migrate(dsn: str, schema: str = "public") -> None:
    """Create or upgrade the projection tables in ``schema``; idempotent, concurrency-safe."""
    conn = await connect(dsn)
    try:
        await migrate_conn(conn, schema)
    finally:
        await conn.close()


async def drop_schema_conn(conn: asyncpg.Connection, schema: str) -> None:
    """Drop ``schema`` and everything in it (scratch schemas of replay/verify)."""
    if schema == "public":
        raise ValueError("refusing to drop the public schema; use drop_tables")
    s = check_schema(schema)
    await conn.execute("SELECT pg_advisory_lock($1)", _MIGRATE_LOCK)
    try:
        await conn.execute(f"DROP SCHEMA IF EXISTS {s} CASCADE")
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", _MIGRATE_LOCK)


async def drop_tables_conn(conn: asyncpg.Connection, schema: str = "public") -> None:
    """Drop the projection tables of ``schema`` (the schema itself stays)."""
    s = check_schema(schema)
    await conn.execute("SELECT pg_advisory_lock($1)", _MIGRATE_LOCK)
    try:
        async with conn.transaction():
            await conn.execute("DROP TABLE IF EXISTS "
                               + ", ".join(f"{s}.{t}" for t in (*PROJECTION_TABLES, "schema_migrations")))
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", _MIGRATE_LOCK)


async def lock_projection_conn(conn: asyncpg.Connection, schema: str, timeout_ms: int) -> None:
    """``lock_tables_conn`` of Working Memory's tables (``PROJECTION_TABLES``)."""
    await lock_tables_conn(conn, schema, PROJECTION_TABLES, timeout_ms)


async def lock_tables_conn(conn: asyncpg.Connection, schema: str, tables: Sequence[str], timeout_ms: int) -> None:
    """Lock ``tables`` of ``schema`` (a projection's) against every reader and writer until the
    end of the caller's transaction, waiting at most ``timeout_ms`` (then ``LockNotAvailableError``:
    while the request waits, readers queue behind it).

    Their order is the lock order: the watermark table first, as every batch of the
    projection locks it first.
    """
    s = check_schema(schema)
    await conn.execute(f"SET LOCAL lock_timeout = {int(timeout_ms)}")
    await conn.execute("LOCK TABLE " + ", ".join(f"{s}.{_table(t)}" for t in tables) + " IN ACCESS EXCLUSIVE MODE")


async def swap_tables_conn(conn: asyncpg.Connection, source: str, target: str,
                           tables: Sequence[str] = PROJECTION_TABLES) -> None:
    """Replace ``tables`` of ``target`` (a projection's; by default Working Memory's) by those of
    ``source``, in the caller's transaction (which should hold ``lock_tables_conn`` on ``target``).

    Catalog changes only, whatever the tables' size. Moved tables keep their
    identity (and their indexes): a prepared statement naming ``target``'s tables is
    planned again against them on its next use (same columns, so it keeps working),
    and the watermark table's oid tells a live projection that the projection changed.
    """
    src, dst = check_schema(source), check_schema(target)
    for table in map(_table, tables):
        await conn.execute(f"DROP TABLE {dst}.{table}")
        await conn.execute(f"ALTER TABLE {src}.{table} SET SCHEMA {dst}")


def _table(name: str) -> str:
    """``name``, refusing anything but a plain identifier (it is spliced into DDL)."""
    if not _SCHEMA_RE.match(name):
        raise ValueError(f"invalid table name {name!r}")
    return name
