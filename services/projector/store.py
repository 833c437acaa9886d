"""All PostgreSQL I/O of the projector and of replay.

Statements take whole batches as arrays (``unnest``) or go through COPY, so a
batch of hundreds of events costs a handful of round trips, not one per event.
Every function takes the connection to use, so callers decide the transaction.

A task is stored in parts (see ``core.state``): its core row in ``task_state``,
its variables in ``task_variables``, its turns in ``task_turns``, and the ids
of the events it consumed in ``applied_events``. A batch writes the core row of
each task it touched and only the variable and turn rows it changed; a read
assembles the view in one statement, with the variables and turns joined into
JSON by PostgreSQL, so nothing is decoded that the reply does not need.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import asyncpg

from agentledger.core.projection_tags import (
    KeyOf,
    check_task,
    check_turns,
    rejection_tag,
    task_tag,
    turn_tag,
    variables_digest,
    variables_input,
)
from agentledger.core.state import (
    Turn,
    WorkingMemory,
    core_hash,
    decode_state,
    decode_variable,
    encode_core,
    encode_turn,
    encode_variable,
)
from agentledger.security.integrity_keys import IntegrityKeys
from agentledger.stores.db import WATERMARK_NAME, check_schema, columns, watermark_name
from agentledger.stores.ledger import partition_of

Key = tuple[str, str]
# (tenant, task_id, seq, core bytes, hash of the core bytes, integrity tag)
TaskRow = tuple[str, str, int, bytes, str, str]
# (tenant, task_id, name, seq, variable bytes)
VariableRow = tuple[str, str, str, int, bytes]
# (tenant, task_id, ordinal, seq, turn bytes, integrity tag)
TurnRow = tuple[str, str, int, int, bytes, str]
# (tenant, task_id, event_id, seq of its first occurrence)
AppliedRow = tuple[str, str, str, int]
# (tenant, task_id, seq, event_id, kind, code, reason)
RejectionRow = tuple[str, str, int, str, str, str, str]
# A rejection row as stored: with its tag (``tag_rejections``).
TaggedRejection = tuple[str, str, int, str, str, str, str, str]

TASK_COLUMNS = ("tenant", "task_id", "seq", "state", "state_hash", "mac")
VARIABLE_COLUMNS = ("tenant", "task_id", "name", "seq", "value")
TURN_COLUMNS = ("tenant", "task_id", "ordinal", "seq", "turn", "mac")
APPLIED_COLUMNS = ("tenant", "task_id", "event_id", "seq")
REJECTION_COLUMNS = ("tenant", "task_id", "seq", "event_id", "kind", "code", "reason", "mac")


class Position(NamedTuple):
    """Where a projection is: its watermark, and which projection it is (the oid of its
    watermark table, new whenever a rebuild replaced the projection or it was recreated)."""

    seq: int
    projection: int


class Layout(NamedTuple):
    """A projection's partitions: the watermark of each (by partition), and which projection."""

    seqs: tuple[int, ...]
    projection: int

    @property
    def partitions(self) -> int:
        return len(self.seqs)

    @property
    def watermark(self) -> int:
        """Every message at or below this is folded, in every partition."""
        return min(self.seqs)

    def of_task(self, tenant: str, task_id: str) -> int:
        """The watermark of the partition that folds the task."""
        return self.seqs[partition_of(tenant, task_id, len(self.seqs))]


class LayoutError(Exception):
    """The watermark rows are not the rows of one layout (someone edited them)."""


def parse_layout(rows: Sequence[tuple[str, int, int]]) -> Layout | None:
    """The layout of (name, seq, table oid) rows of the projector's watermark family."""
    if not rows:
        return None
    projection = int(rows[0][2])
    if len(rows) == 1 and rows[0][0] == WATERMARK_NAME:
        return Layout((int(rows[0][1]),), projection)
    count = len(rows)
    seqs: dict[str, int] = {name: int(seq) for name, seq, _ in rows}
    wanted = [watermark_name(k, count) for k in range(count)]
    if sorted(seqs) != sorted(wanted):
        raise LayoutError(f"the projector watermark rows {sorted(seqs)} are not one layout")
    return Layout(tuple(seqs[n] for n in wanted), projection)


class Loaded(NamedTuple):
    """A task's state as read back from its rows, with the size of each row; and what its
    integrity tag is checked over (``check_loaded``): the core bytes, the variable rows."""

    key: Key
    seq: int
    state: WorkingMemory
    core_bytes: int
    variable_bytes: dict[str, int]
    core: bytes = b""
    variables: dict[str, bytes] = {}  # noqa: RUF012 - always given by load_states
    mac: str | None = None


def task_row(keys: IntegrityKeys, tenant: str, task_id: str, seq: int, state: WorkingMemory, *,
             variables: Mapping[str, bytes] | None = None) -> TaskRow:
    """A task's core row, tagged over its core bytes and every variable row it has
    (``variables``: those rows as stored, name -> bytes; None: encoded here)."""
    core = encode_core(state)
    if variables is None:
        variables = {n: encode_variable(v) for n, v in state.variables.items()}
    digest = variables_digest(variables_input(variables))
    return (tenant, task_id, seq, core, core_hash(core),
            task_tag(keys.current, keys.mac_key, tenant, task_id, seq=seq, core=core, digest=digest))


def tag_rejections(keys: IntegrityKeys, rows: Iterable[RejectionRow]) -> list[TaggedRejection]:
    """Rejection rows as stored, each with its tag (``rejection_tag``)."""
    return [(*row, rejection_tag(keys.current, keys.mac_key, row)) for row in rows]


def turn_row(keys: IntegrityKeys, tenant: str, task_id: str, turn: Turn) -> TurnRow:
    """A turn row, tagged."""
    data = encode_turn(turn)
    return (tenant, task_id, turn.ordinal, turn.seq, data,
            turn_tag(keys.current, keys.mac_key, tenant, task_id, ordinal=turn.ordinal, turn=data))


def check_view_row(row: asyncpg.Record, key_of: KeyOf, tenant: str, task_id: str,
                   tail: int | None) -> WorkingMemory:
    """The decoded core of a ``get_task`` row once its rows are the ones the projector wrote:
    the task tag over the core bytes and every variable row, then each turn row read.
    ``IntegrityViolationError`` otherwise."""
    core = row["state"]
    check_task(key_of, tenant, task_id, seq=row["seq"], core=core,
               digest=variables_digest(row["variables_input"]), tag=row["mac"])
    state = decode_state(core)
    check_turns(key_of, tenant, task_id, last=state.turns, ordinals=row["ordinals"] or (),
                turns=row["turns"] or (), tags=row["turn_macs"] or (), tail=tail)
    return state


def check_loaded(loaded: Loaded, key_of: KeyOf) -> None:
    """Raise ``IntegrityViolationError`` unless a loaded task's rows are the ones the projector
    wrote (so a fold never continues from, and re-tags, an edited state)."""
    check_task(key_of, loaded.key[0], loaded.key[1], seq=loaded.seq, core=loaded.core,
               digest=variables_digest(variables_input(loaded.variables)), tag=loaded.mac)


# Tables holding a task's parts, compared row by row and column by column by ``replay
# --verify``: (table, the row's key within the task, the columns compared). Every stored
# column is compared, the core row's bytes included (not only the hash stored beside them);
# the integrity tags are not (a fold under a newer key epoch tags the same rows differently).
PART_TABLES = {"core": ("task_state", (), ("seq", "state", "state_hash"), ""),
               "variables": ("task_variables", ("name",), ("seq", "value"), ""),
               "transcript": ("task_turns", ("ordinal",), ("seq", "turn"), ""),
               "applied_events": ("applied_events", ("event_id",), ("seq",), ""),
               # A rejection up to the replayed point (``$1``): one past it may belong to a task
               # whose row did not move (a message that never reached the reducer), which the
               # replay does not fold further; a ``projection_error`` is the live loop's own
               # record of a message it could not store, which a replay may well store.
               "rejections": ("rejections", ("seq",), ("event_id", "kind", "code", "reason"),
                              "code <> 'projection_error' AND seq <= $1")}


# SQL templates; ``{s}`` is the quoted, validated schema name.
# ``tableoid``: which watermark table answered, so which projection (a switch brings another).
_LOCK_POSITION = ("SELECT seq, tableoid::bigint FROM {s}.projector_watermark WHERE name = $1"
                  " FOR UPDATE")
_GET_POSITION = "SELECT seq, tableoid::bigint FROM {s}.projector_watermark WHERE name = $1"
_SET_WM = ("INSERT INTO {s}.projector_watermark(name, seq) VALUES ($1, $2)"
           " ON CONFLICT (name) DO UPDATE SET seq = excluded.seq")
# The watermark rows of every partition (``db.watermark_name``).
_LAYOUT = ("SELECT name, seq, tableoid::bigint FROM {s}.projector_watermark"
           " WHERE (name = 'projector' OR name LIKE 'projector/%')")
_LOCK_LAYOUT = _LAYOUT + " ORDER BY name FOR UPDATE"
_SET_ALL = ("UPDATE {s}.projector_watermark SET seq = $1"
            " WHERE (name = 'projector' OR name LIKE 'projector/%')")
_DROP_LAYOUT = ("DELETE FROM {s}.projector_watermark"
                " WHERE (name = 'projector' OR name LIKE 'projector/%')")
_NEW_LAYOUT = ("INSERT INTO {s}.projector_watermark(name, seq)"
               " SELECT unnest($1::text[]), $2")
_LOAD = ("SELECT t.tenant, t.task_id, t.seq, t.state, t.mac FROM {s}.task_state t"
         " JOIN unnest($1::text[], $2::text[]) AS k(tenant, task_id)"
         " ON t.tenant = k.tenant AND t.task_id = k.task_id")
_LOAD_VARIABLES = ("SELECT v.tenant, v.task_id, v.name, v.value FROM {s}.task_variables v"
                   " JOIN unnest($1::text[], $2::text[]) AS k(tenant, task_id)"
                   " ON v.tenant = k.tenant AND v.task_id = k.task_id ORDER BY v.name COLLATE \"C\"")
_PUT_VARIABLES = ("INSERT INTO {s}.task_variables AS v (tenant, task_id, name, seq, value)"
                  " SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bytea[])"
                  " ON CONFLICT (tenant, task_id, name) DO UPDATE SET seq = excluded.seq,"
                  " value = excluded.value")
_PUT_TURNS = ("INSERT INTO {s}.task_turns (tenant, task_id, ordinal, seq, turn, mac)"
              " SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[], $5::bytea[],"
              " $6::text[])"
              " ON CONFLICT (tenant, task_id, ordinal) DO UPDATE SET seq = excluded.seq,"
              " turn = excluded.turn, mac = excluded.mac")
# The first occurrence of each id claims it; RETURNING names the ids that were new.
_CLAIM = ("INSERT INTO {s}.applied_events (tenant, task_id, event_id, seq)"
          " SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[])"
          " ON CONFLICT DO NOTHING RETURNING tenant, task_id, event_id")
_FIRST_SEQS = ("SELECT a.tenant, a.task_id, a.event_id, a.seq FROM {s}.applied_events a"
               " JOIN unnest($1::text[], $2::text[], $3::text[]) AS k(tenant, task_id, event_id)"
               " ON a.tenant = k.tenant AND a.task_id = k.task_id AND a.event_id = k.event_id")
_TASK_FIRST_SEQS = ("SELECT event_id, seq FROM {s}.applied_events WHERE tenant = $1 AND task_id = $2"
                    " AND event_id = ANY($3::text[]) AND seq <= $4")
_TURNS_UPTO = ("SELECT ordinal, turn, mac FROM {s}.task_turns WHERE tenant = $1 AND task_id = $2"
               " AND ordinal <= $3 ORDER BY ordinal")
_UPSERT = ("INSERT INTO {s}.task_state AS t (tenant, task_id, seq, state, state_hash, mac)"
           " SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bytea[], $5::text[],"
           " $6::text[])"
           " ON CONFLICT (tenant, task_id) DO UPDATE SET seq = excluded.seq,"
           " state = excluded.state, state_hash = excluded.state_hash, mac = excluded.mac,"
           " updated_at = now()")
_REJECT = ("INSERT INTO {s}.rejections (tenant, task_id, seq, event_id, kind, code, reason, mac)"
           " SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[],"
           " $5::text[], $6::text[], $7::text[], $8::text[]) ON CONFLICT DO NOTHING")
# The live projector's batch as one statement (one round trip, one implicit transaction): the
# partition's watermark moves on from the seq the lane committed last, in the projection it
# knows (the watermark table's oid), and only then are the batch's event ids claimed and its
# core, variable, turn and rejection rows written. If the watermark was elsewhere (another
# process wrote it, or a rebuild was switched in) or an id had been claimed before (a
# duplicate past JetStream's dedupe window, whose first seq must be read first), the final
# ``projector_refuse`` raises ``REFUSED`` and nothing of the statement is kept.
REFUSED = "AL001"
_MOVE_WM = ("UPDATE {s}.projector_watermark SET seq = $1 WHERE name = $2 AND seq = $3"
            " AND tableoid = $4::oid RETURNING 1")
_REFUSE_UNLESS = (" SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM wm)"
                  " THEN {s}.projector_refuse('the watermark is not where this projector left it')"
                  " WHEN (SELECT count(*) FROM claimed) <> $34"
                  " THEN {s}.projector_refuse('an event id of the batch was consumed before') ELSE 0 END")


# One statement (one snapshot) for a whole view: the core row with its tag, the variables as
# the members of a JSON object joined from the rows' bytes (each is its own JSON in the view)
# without decoding them, the same rows as ``name NUL value`` for the task tag's digest
# (``core.projection_tags.variables_input``), and the turns (every one, or the newest
# ``$3``) with their ordinals and tags, oldest first. Names sort by code point ("C"), as
# ``core.state.variables_view`` sorts them.
# The task tag's digest input of the task row ``t`` (``core.projection_tags.variables_input``).
VARIABLES_INPUT = ("(SELECT string_agg(convert_to(v.name, 'UTF8') || '\\x00'::bytea || v.value,"
                   " '\\x00'::bytea ORDER BY v.name COLLATE \"C\") FROM {s}.task_variables v"
                   " WHERE v.tenant = t.tenant AND v.task_id = t.task_id) AS variables_input")
_VARIABLES_JSON = ("(SELECT string_agg(convert_to(to_json(v.name)::text, 'UTF8') || '\\x3a'::bytea"
                   " || v.value, '\\x2c'::bytea ORDER BY v.name COLLATE \"C\") FROM {s}.task_variables v"
                   " WHERE v.tenant = t.tenant AND v.task_id = t.task_id) AS variables, {variables_input}"
                   ).replace("{variables_input}", VARIABLES_INPUT)
_TURN_ARRAYS = (" array_agg(x.turn ORDER BY x.ordinal) AS turns, array_agg(x.ordinal ORDER BY x.ordinal)"
                " AS ordinals, array_agg(x.mac ORDER BY x.ordinal) AS turn_macs")
# ``broken_at``: the first ledger sequence of the task whose chain check failed (the projector's
# ``integrity_violation`` rejection row), or NULL: such a task is refused, not served at its last
# good event as if its ledger were whole.
_BROKEN_AT = ("(SELECT min(r.seq) FROM {s}.rejections r WHERE r.tenant = t.tenant AND r.task_id = t.task_id"
              " AND r.code = 'integrity_violation') AS broken_at")
_GET_TASK = ("SELECT t.seq, t.state, t.mac, {variables}, tu.turns, tu.ordinals, tu.turn_macs, {broken}"
             " FROM {s}.task_state t LEFT JOIN LATERAL (SELECT {turns} FROM {s}.task_turns x"
             " WHERE x.tenant = t.tenant AND x.task_id = t.task_id) tu ON true"
             " WHERE t.tenant = $1 AND t.task_id = $2"
             ).replace("{variables}", _VARIABLES_JSON).replace("{turns}", _TURN_ARRAYS).replace("{broken}", _BROKEN_AT)
_GET_TASK_TAIL = ("SELECT t.seq, t.state, t.mac, {variables}, tu.turns, tu.ordinals, tu.turn_macs, {broken}"
                  " FROM {s}.task_state t LEFT JOIN LATERAL (SELECT {turns} FROM"
                  " (SELECT u.turn, u.ordinal, u.mac FROM {s}.task_turns u WHERE u.tenant = t.tenant"
                  " AND u.task_id = t.task_id ORDER BY u.ordinal DESC LIMIT $3) x) tu ON true"
                  " WHERE t.tenant = $1 AND t.task_id = $2"
                  ).replace("{variables}", _VARIABLES_JSON).replace("{turns}", _TURN_ARRAYS
                            ).replace("{broken}", _BROKEN_AT)
_REJECTIONS_AFTER = ("SELECT seq, event_id, kind, code, reason, mac FROM {s}.rejections"
                     " WHERE tenant = $1 AND task_id = $2 AND seq > $3 ORDER BY seq LIMIT $4")
_HASHES = "SELECT tenant, task_id, seq, state_hash FROM {s}.task_state"
# Keys of tasks whose rows in one part differ between two schemas ({s}: this one, {o}: other),
# with, per column, whether it differs in some row ({flags}); a row on one side only is a row
# missing or extra ({rows}).
_PART_DIFF = ("SELECT coalesce(a.tenant, b.tenant), coalesce(a.task_id, b.task_id),"
              " bool_or(a.tenant IS NULL OR b.tenant IS NULL), {flags}"
              " FROM {a} a FULL JOIN {b} b ON a.tenant = b.tenant"
              " AND a.task_id = b.task_id AND {match}"
              " WHERE a.tenant IS NULL OR b.tenant IS NULL OR {differ}"
              " GROUP BY 1, 2")


def _qualify(template: str, quoted_schema: str) -> str:
    return template.replace("{s}", quoted_schema)


# The rejection codes of a message that never reached the reducer, so did not move its task's row.
UNFOLDED_CODES = ("undecodable", "too_deep", "malformed_subject", "subject_mismatch", "projection_error",
                  "integrity_violation")


class ProjectionMissingError(Exception):
    """The watermark row (or its table) is gone: the projection was dropped."""


class Store:
    """SQL of one projection schema."""

    def __init__(self, schema: str = "public") -> None:
        self.schema = schema
        s = check_schema(schema)
        self._lock_position = _qualify(_LOCK_POSITION, s)
        self._get_position = _qualify(_GET_POSITION, s)
        self._set_wm = _qualify(_SET_WM, s)
        self._layout = _qualify(_LAYOUT, s)
        self._lock_layout = _qualify(_LOCK_LAYOUT, s)
        self._set_all = _qualify(_SET_ALL, s)
        self._drop_layout = _qualify(_DROP_LAYOUT, s)
        self._new_layout = _qualify(_NEW_LAYOUT, s)
        self._load = _qualify(_LOAD, s)
        self._load_variables = _qualify(_LOAD_VARIABLES, s)
        self._put_variables = _qualify(_PUT_VARIABLES, s)
        self._put_turns = _qualify(_PUT_TURNS, s)
        self._claim = _qualify(_CLAIM, s)
        self._first_seqs = _qualify(_FIRST_SEQS, s)
        self._task_first_seqs = _qualify(_TASK_FIRST_SEQS, s)
        self._turns_upto = _qualify(_TURNS_UPTO, s)
        self._get_task_tail = _qualify(_GET_TASK_TAIL, s)
        self._quoted = s
        self._upsert = _qualify(_UPSERT, s)
        self._reject = _qualify(_REJECT, s)
        self._get_task = _qualify(_GET_TASK, s)
        self._rejections_after = _qualify(_REJECTIONS_AFTER, s)
        self._task_seq = _qualify("SELECT seq FROM {s}.task_state WHERE tenant = $1 AND task_id = $2", s)
        self._rejected_at = _qualify("SELECT true FROM {s}.rejections WHERE tenant = $1 AND task_id = $2"
                                     " AND seq = $3 AND code = ANY($4::text[])", s)
        self._hashes = _qualify(_HASHES, s)
        self._write_batch = _qualify(_batch_statement(), s)
        self._write_rest = _combined(self._put_variables, self._put_turns, self._reject,
                                     final=self._set_wm)

    # ---- watermark -------------------------------------------------------------

    async def watermark(self, conn: asyncpg.Connection | asyncpg.Pool) -> int | None:
        """The projection's watermark (the lowest of its partitions': everything at or below
        it is folded), or None when the projection does not exist (yet)."""
        layout = await self.layout(conn)
        return None if layout is None else layout.watermark

    async def layout(self, conn: asyncpg.Connection | asyncpg.Pool) -> Layout | None:
        """Every partition's watermark, in one statement; None when there is no projection."""
        try:
            rows = await conn.fetch(self._layout)
        except (asyncpg.UndefinedTableError, asyncpg.InvalidSchemaNameError):
            return None
        return parse_layout([(r[0], r[1], r[2]) for r in rows])

    async def lock_position(self, conn: asyncpg.Connection, name: str = WATERMARK_NAME) -> Position:
        """One partition's watermark (row ``name``), row-locked until the end of the
        transaction, with the projection it belongs to."""
        try:
            row = await conn.fetchrow(self._lock_position, name)
        except asyncpg.UndefinedTableError as exc:
            raise ProjectionMissingError("projector_watermark table is missing") from exc
        if row is None:
            raise ProjectionMissingError(f"projector_watermark row {name!r} is missing")
        return Position(int(row[0]), int(row[1]))

    async def position(self, conn: asyncpg.Connection | asyncpg.Pool,
                       name: str = WATERMARK_NAME) -> Position | None:
        """One partition's watermark, with the projection it belongs to; None when it has none."""
        try:
            row = await conn.fetchrow(self._get_position, name)
        except (asyncpg.UndefinedTableError, asyncpg.InvalidSchemaNameError):
            return None
        return None if row is None else Position(int(row[0]), int(row[1]))

    async def set_watermark(self, conn: asyncpg.Connection, seq: int,
                            name: str | None = None) -> None:
        """Move one partition's watermark (``name``), or every partition's (None)."""
        if name is None:
            await conn.execute(self._set_all, seq)
        else:
            await conn.execute(self._set_wm, name, seq)

    async def set_layout(self, conn: asyncpg.Connection, partitions: int, seq: int) -> None:
        """Replace the watermark rows by ``partitions`` rows at ``seq`` (in the caller's
        transaction). Exact only where every partition has folded exactly up to ``seq``:
        a rebuild's end, or a projection whose rows all hold ``seq`` and are locked."""
        await conn.execute(self._drop_layout)
        await conn.execute(self._new_layout, [watermark_name(k, partitions) for k in range(partitions)],
                           seq)

    async def repartition_if_level(self, conn: asyncpg.Connection, partitions: int) -> int | None:
        """Give the projection ``partitions`` partitions if every partition's watermark is the
        same (all rows locked while it checks): the seq it did it at, else None."""
        async with conn.transaction():
            rows = await conn.fetch(self._lock_layout)
            layout = parse_layout([(r[0], r[1], r[2]) for r in rows])
            if layout is None or len(set(layout.seqs)) != 1:
                return None
            if layout.partitions != partitions:
                await self.set_layout(conn, partitions, layout.watermark)
            return layout.watermark

    # ---- tasks -------------------------------------------------------------------

    async def load_states(self, conn: asyncpg.Connection, keys: Sequence[Key]) -> list[Loaded]:
        """The states of those of ``keys`` that exist, with their variables (call it inside a
        transaction: the core rows and the variable rows are read by two statements)."""
        if not keys:
            return []
        tenants, tasks = [k[0] for k in keys], [k[1] for k in keys]
        found: dict[Key, Loaded] = {}
        for r in await conn.fetch(self._load, tenants, tasks):
            found[(r[0], r[1])] = Loaded((r[0], r[1]), int(r[2]), decode_state(r[3]), len(r[3]), {},
                                         bytes(r[3]), {}, r[4])
        for r in await conn.fetch(self._load_variables, tenants, tasks):
            loaded = found.get((r[0], r[1]))
            if loaded is None:  # left by a partial restore without the core row: verify reports it
                continue
            loaded.state.variables[r[2]] = decode_variable(r[3])
            loaded.variable_bytes[r[2]] = len(r[3])
            loaded.variables[r[2]] = bytes(r[3])
        return list(found.values())

    async def load_state(self, conn: asyncpg.Connection | asyncpg.Pool, tenant: str,
                         task_id: str) -> Loaded | None:
        """One task's state with its variables, read in one snapshot, or None."""
        async with _snapshot(conn) as c:
            loaded = await self.load_states(c, [(tenant, task_id)])
        return loaded[0] if loaded else None

    async def upsert_tasks(self, conn: asyncpg.Connection, rows: Sequence[TaskRow]) -> None:
        """Insert or rewrite core rows."""
        if rows:
            await conn.execute(self._upsert, *columns(rows, 6))

    async def write_rest(self, conn: asyncpg.Connection, variables: Sequence[VariableRow],
                         turns: Sequence[TurnRow], rejections: Sequence[TaggedRejection],
                         watermark: int, *, name: str = WATERMARK_NAME) -> None:
        """``write_parts``, ``insert_rejections`` and ``set_watermark`` in one statement (one
        round trip instead of four, in the caller's transaction): the live projector's batch."""
        await conn.execute(self._write_rest, *columns(variables, 5), *columns(turns, 6),
                           *columns(rejections, 8), name, watermark)

    async def write_batch(self, conn: asyncpg.Connection, *, name: str, expected: int,
                          projection: int, watermark: int, claims: Sequence[AppliedRow],
                          tasks: Sequence[TaskRow], variables: Sequence[VariableRow],
                          turns: Sequence[TurnRow], rejections: Sequence[TaggedRejection]) -> None:
        """The live projector's whole batch in one statement (``_batch_statement``): the watermark
        row ``name`` moves from ``expected`` (in ``projection``) to ``watermark``, the ids are
        claimed, the rows written. ``asyncpg.PostgresError`` with sqlstate ``REFUSED`` when the
        watermark was elsewhere or an id was claimed before: then nothing was written."""
        try:
            await conn.execute(self._write_batch, watermark, name, expected, projection,
                               *columns(claims, 4), *columns(tasks, 6), *columns(variables, 5),
                               *columns(turns, 6), *columns(rejections, 8), len(claims))
        except asyncpg.UndefinedTableError as exc:
            raise ProjectionMissingError("the projection tables are missing") from exc

    async def write_parts(self, conn: asyncpg.Connection, variables: Sequence[VariableRow],
                          turns: Sequence[TurnRow]) -> None:
        """Upsert the variable rows and the turn rows given (and no others)."""
        if variables:
            await conn.execute(self._put_variables, *columns(variables, 5))
        if turns:
            await conn.execute(self._put_turns, *columns(turns, 6))

    async def claim_events(self, conn: asyncpg.Connection,
                           rows: Sequence[AppliedRow]) -> set[tuple[str, str, str]]:
        """Record each (tenant, task, event id) at its seq unless it is recorded already;
        return the ones that were new (the others were consumed before)."""
        if not rows:
            return set()
        claimed = await conn.fetch(self._claim, *columns(rows, 4))
        return {(r[0], r[1], r[2]) for r in claimed}

    async def first_seqs(self, conn: asyncpg.Connection, ids: Sequence[tuple[str, str, str]]
                         ) -> dict[tuple[str, str, str], int]:
        """The recorded first seq of each of ``ids`` (tenant, task, event id) that is recorded."""
        if not ids:
            return {}
        rows = await conn.fetch(self._first_seqs, *columns(ids, 3))
        return {(r[0], r[1], r[2]): int(r[3]) for r in rows}

    async def task_first_seqs(self, conn: asyncpg.Connection | asyncpg.Pool, tenant: str,
                              task_id: str, event_ids: Sequence[str], upto: int) -> dict[str, int]:
        """Those of one task's ``event_ids`` first consumed at or before ``upto``, with that seq."""
        if not event_ids:
            return {}
        rows = await conn.fetch(self._task_first_seqs, tenant, task_id, list(event_ids), upto)
        return {r[0]: int(r[1]) for r in rows}

    async def turns_upto(self, conn: asyncpg.Connection | asyncpg.Pool, tenant: str, task_id: str,
                         ordinal: int, key_of: KeyOf) -> list[bytes]:
        """The task's turn rows (``encode_turn`` bytes) with ordinals up to ``ordinal``, in order;
        ``IntegrityViolationError`` unless they are turns 1..n, each with its tag (fewer than
        ``ordinal`` is the caller's to judge: a projection still catching up)."""
        rows = await conn.fetch(self._turns_upto, tenant, task_id, ordinal)
        turns = [bytes(r[1]) for r in rows]
        check_turns(key_of, tenant, task_id, last=len(rows), ordinals=[r[0] for r in rows], turns=turns,
                    tags=[r[2] for r in rows], tail=None)
        return turns

    async def insert_rejections(self, conn: asyncpg.Connection,
                                rows: Sequence[TaggedRejection]) -> None:
        if rows:
            await conn.execute(self._reject, *columns(rows, 8))

    async def get_task(self, conn: asyncpg.Connection | asyncpg.Pool, tenant: str, task_id: str,
                       transcript_tail: int | None = None) -> asyncpg.Record | None:
        """(seq, core bytes, mac, variables, variables_input, turns, ordinals, turn_macs,
        broken_at) of one task, or None.

        ``variables`` is the inside of the view's JSON object (members joined by commas),
        ``variables_input`` the same rows for the task tag's digest; ``turns`` every turn
        row (or the newest ``transcript_tail``), oldest first, with their ordinals and tags;
        each is None when there is nothing.
        """
        if transcript_tail is None:
            return await conn.fetchrow(self._get_task, tenant, task_id)
        return await conn.fetchrow(self._get_task_tail, tenant, task_id, transcript_tail)

    async def task_seq(self, conn: asyncpg.Connection | asyncpg.Pool, tenant: str, task_id: str) -> int:
        """The ledger sequence the task's core row is at now (0: no row)."""
        return int(await conn.fetchval(self._task_seq, tenant, task_id) or 0)

    async def rejected_at(self, conn: asyncpg.Connection | asyncpg.Pool, tenant: str, task_id: str,
                          seq: int) -> bool:
        """Whether the task's message at ``seq`` is a rejection row (then it may not have moved
        the task's row: an undecodable message, one refused for its chain)."""
        return bool(await conn.fetchval(self._rejected_at, tenant, task_id, seq, list(UNFOLDED_CODES)))

    async def rejections_after(self, conn: asyncpg.Connection | asyncpg.Pool, tenant: str,
                               task_id: str, after_seq: int, limit: int) -> list[asyncpg.Record]:
        """(seq, event_id, kind, code, reason, mac) of the task's rejections after ``after_seq``, in
        ledger order, at most ``limit`` (the primary key makes it one index range scan); the
        caller checks each tag (``check_rejection``) before it serves the row."""
        rows: list[asyncpg.Record] = await conn.fetch(self._rejections_after, tenant, task_id,
                                                      after_seq, limit)
        return rows

    async def task_hashes(self, conn: asyncpg.Connection) -> dict[tuple[str, str], tuple[int, str]]:
        """(tenant, task_id) -> (seq, state_hash) of every task row."""
        rows = await conn.fetch(self._hashes)
        return {(r[0], r[1]): (r[2], r[3]) for r in rows}

    # ---- bulk (rebuild) -------------------------------------------------------------

    async def copy_tasks(self, conn: asyncpg.Connection, rows: Iterable[TaskRow]) -> None:
        await self._copy(conn, "task_state", TASK_COLUMNS, rows)

    async def copy_variables(self, conn: asyncpg.Connection, rows: Iterable[VariableRow]) -> None:
        await self._copy(conn, "task_variables", VARIABLE_COLUMNS, rows)

    async def copy_turns(self, conn: asyncpg.Connection, rows: Iterable[TurnRow]) -> None:
        await self._copy(conn, "task_turns", TURN_COLUMNS, rows)

    async def copy_applied(self, conn: asyncpg.Connection, rows: Iterable[AppliedRow]) -> None:
        await self._copy(conn, "applied_events", APPLIED_COLUMNS, rows)

    async def copy_rejections(self, conn: asyncpg.Connection, rows: Iterable[TaggedRejection]) -> None:
        await self._copy(conn, "rejections", REJECTION_COLUMNS, rows)

    async def _copy(self, conn: asyncpg.Connection, table: str, names: Sequence[str],
                    rows: Iterable[tuple[Any, ...]]) -> None:
        await conn.copy_records_to_table(table, records=rows, columns=names, schema_name=self.schema)

    async def part_differences(self, conn: asyncpg.Connection, other: Store, upto: int
                               ) -> dict[str, dict[Key, list[str]]]:
        """Per part (``PART_TABLES``), the tasks whose rows differ between this schema and
        ``other``'s, each with what differs: ``<table>.<column>`` for a column with other
        content in some row, ``<table> rows`` for a row on one side only (``upto``: the
        sequence both were folded to, for the parts that compare only rows up to it)."""
        found: dict[str, dict[Key, list[str]]] = {}
        for part, (table, keys, cols, rows_compared) in PART_TABLES.items():
            match = " AND ".join(f"a.{c} = b.{c}" for c in keys) or "true"
            flags = ", ".join(f"bool_or(a.{c} IS DISTINCT FROM b.{c})" for c in cols)
            differ = " OR ".join(f"a.{c} IS DISTINCT FROM b.{c}" for c in cols)
            side = "{x}.{table}" if not rows_compared else "(SELECT * FROM {x}.{table} WHERE {rows})"
            sides = [side.replace("{x}", schema).replace("{rows}", rows_compared) for schema in ("{s}", "{o}")]
            query = (_PART_DIFF.replace("{a}", sides[0]).replace("{b}", sides[1]).replace("{table}", table)
                     .replace("{match}", match)
                     .replace("{flags}", flags).replace("{differ}", differ).replace("{o}", other._quoted))
            args = (upto,) if "$1" in rows_compared else ()
            rows = await conn.fetch(_qualify(query, self._quoted), *args)
            found[part] = {(r[0], r[1]): [f"{table} rows"] * bool(r[2])
                           + [f"{table}.{c}" for c, flagged in zip(cols, r[3:], strict=True)
                              if flagged and not r[2]]
                           for r in rows}
        return found

    async def tasks_missing_from(self, conn: asyncpg.Connection, other: Store, upto: int,
                                 examples: int = 5) -> tuple[int, list[tuple[str, str, int]]]:
        """Tasks of this schema last folded at or below ``upto`` that ``other`` lacks: how
        many, and the first few (tenant, task, seq) by seq."""
        query = _qualify(_MISSING_FROM.replace("{o}", other._quoted), self._quoted)
        rows = await conn.fetch(query, upto, examples)
        count = int(rows[0]["total"]) if rows else 0
        return count, [(r["tenant"], r["task_id"], int(r["seq"])) for r in rows]


# Live tasks a rebuilt projection would drop (``replay`` refuses to shrink the projection).
_MISSING_FROM = """
    SELECT l.tenant, l.task_id, l.seq, count(*) OVER () AS total FROM {s}.task_state l
    WHERE l.seq <= $1 AND NOT EXISTS (
        SELECT 1 FROM {o}.task_state r WHERE r.tenant = l.tenant AND r.task_id = l.task_id)
    ORDER BY l.seq LIMIT $2
"""


@contextlib.asynccontextmanager
async def _snapshot(conn: asyncpg.Connection | asyncpg.Pool) -> AsyncIterator[asyncpg.Connection]:
    """A read-only repeatable-read transaction: statements in it see one snapshot."""
    if isinstance(conn, asyncpg.Pool):
        async with conn.acquire() as c, c.transaction(isolation="repeatable_read", readonly=True):
            yield c
    else:
        async with conn.transaction(isolation="repeatable_read", readonly=True):
            yield conn


def _ctes(statements: Sequence[tuple[str, str]], offset: int = 0) -> tuple[str, int]:
    """``name AS (sql)`` for each ``(name, sql)``, their ``$n`` parameters renumbered to follow
    ``offset`` and one another; with the offset after the last."""
    ctes = []
    for name, sql in statements:
        ctes.append(f"{name} AS ({_renumber(sql, offset)})")
        offset += len(set(re.findall(r"\$(\d+)", sql)))
    return ", ".join(ctes), offset


def _combined(*statements: str, final: str) -> str:
    """The statements as data-modifying CTEs of one statement ending in ``final`` (each writes
    a table of its own, so their order inside the statement does not matter)."""
    ctes, offset = _ctes([(f"w{i}", sql) for i, sql in enumerate(statements)])
    return f"WITH {ctes} {_renumber(final, offset)}"


def _batch_statement() -> str:
    """``_MOVE_WM`` as CTE ``wm``, the claim and the row writes gated on it, and
    ``_REFUSE_UNLESS`` (its ``$34``: how many ids the batch claims)."""
    gated = [(name, sql.replace(" ON CONFLICT", " WHERE EXISTS (SELECT 1 FROM wm) ON CONFLICT", 1))
             for name, sql in (("claimed", _CLAIM), ("tasks", _UPSERT), ("variables", _PUT_VARIABLES),
                               ("turns", _PUT_TURNS), ("rejected", _REJECT))]
    ctes, offset = _ctes([("wm", _MOVE_WM), *gated])
    assert offset == 33
    return f"WITH {ctes}{_REFUSE_UNLESS}"


def _renumber(sql: str, offset: int) -> str:
    return re.sub(r"\$(\d+)", lambda m: f"${int(m[1]) + offset}", sql)
