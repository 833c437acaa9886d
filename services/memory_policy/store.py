"""All PostgreSQL I/O of the memory-policy service (tables: ``db`` migration 3).

The projection of the ``_memory`` subjects (rebuilt by replay):

* ``memory_watermark``: the last ledger sequence folded, written in the same
  transaction as the rows it covers.
* ``memory_groups``: one row per key group (scope, canonical key): the group's
  entries and feedback as ``core.memory.encode_group`` bytes, and the id its
  promoted fact would have (so feedback naming it finds the group).
* ``memory_records``: one row per record: the ``RecordRow`` the reducer
  rendered (``row``, msgspec JSON) and, for the gates in SQL, its scope key,
  status, authority, sensitivity rank, versions and expiry; the ``simple``
  full-text vector and the 256-dimension embedding of its text, both NULL for
  a personal (sealed) record, so no index holds a personal value; which
  derivation of the index text made them (``index_version``, see ``reindex``); and
  ``data_subject``, the subject a personal record's value is sealed under (so a
  forget request finds a subject's records). A forgotten record is a tombstone
  row: status ``forgotten``, no value, no index entry, no data subject.
* ``memory_history``: one row per memory event (proposal, decision, feedback):
  ``memory.history`` and the proposal idempotency index. A ``memory_forgotten``
  event has one row of its own (event id) and one per record it forgot
  (``<event id>/<record id>``); the rows of a forgotten record's earlier events go.
* ``memory_held``: feedback naming a record not seen yet.

Not projections (replay leaves them alone; they are what reads did):

* ``memory_receipts``: one row per read, until it expires;
* ``memory_usage``: when each record was last read, and how often.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any, NamedTuple

import asyncpg
import msgspec

from agentledger.contracts.events import RuleFired
from agentledger.core.memory.authority import SENSITIVITY_RANK
from agentledger.core.memory.state import RecordRow
from agentledger.core.memory.tags import history_tag, record_tag
from agentledger.projection.spec import WatermarkRow
from agentledger.security.integrity_keys import IntegrityKeys
from agentledger.stores.db import MEMORY_DOC_LEN, columns

WATERMARK = "memory"
# Tables the projection consists of (what a rebuild empties and refills).
PROJECTION_TABLES = ("memory_groups", "memory_records", "memory_history", "memory_held")

_row_decoder = msgspec.json.Decoder(RecordRow)
_trace_decoder = msgspec.json.Decoder(list[RuleFired])
_encode = msgspec.json.encode

GroupKey = tuple[str, str]

# The text search configuration of the full-text index and of every query against it. English
# (Snowball stemming, English stop words dropped): on real conversations (LoCoMo) BM25 over it
# holds .72 / .77 of the evidence at 1k / 2k tokens where ``simple`` held .64 / .70. Text in
# another language is indexed word by word as ``simple`` would, bar the odd English ending.
# Changing it changes every row's index: raise ``fold.INDEX_TEXT_VERSION`` with it.
TEXT_CONFIG = "english"


class RecordWrite(NamedTuple):
    """A record row as written: the reducer's row, its search text and embedding (None: personal),
    and the version of the derivation that made them (``fold.INDEX_TEXT_VERSION``)."""

    row: RecordRow
    text: str | None
    embedding: list[float] | None
    index_version: int


class HistoryRow(NamedTuple):
    event_id: str
    seq: int
    event: str
    proposal_id: str | None
    record_id: str | None
    scope_key: str | None
    key: str | None
    action: str | None
    reason: str
    trace: list[RuleFired] | None
    at: datetime


class DecisionRow(NamedTuple):
    """A proposal's first decision, as ``memory.propose`` returns it again for a repeat."""

    proposal_id: str
    seq: int
    action: str
    reason: str
    record_id: str | None
    scope_key: str | None
    key: str | None
    trace: list[RuleFired]


def vector_text(vector: Sequence[float] | None) -> str | None:
    """pgvector's text form (``[x,y,...]``), cast with ``::vector`` in SQL."""
    if vector is None:
        return None
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def data_subject_of(row: RecordRow) -> str | None:
    """The data subject a record's value is sealed under (None: not personal, or a tombstone)."""
    sealed = row.body.sealed
    return sealed.subject if sealed is not None else None


def decode_row(data: bytes) -> RecordRow:
    return _row_decoder.decode(data)


def decode_trace(data: bytes | None) -> list[RuleFired]:
    return _trace_decoder.decode(data) if data else []


class MemoryStore(WatermarkRow):
    """Statements of the memory tables in one schema (``public`` for the live service)."""

    def __init__(self, schema: str = "public") -> None:
        super().__init__(schema, "memory_watermark", WATERMARK)
        q = self.sql
        self._events = q("SELECT event_id, seq FROM {s}.memory_history"
                        " WHERE tenant = $1 AND event_id = ANY($2::text[])")
        self._decisions = q(
            "SELECT DISTINCT ON (proposal_id) proposal_id, seq, action, reason, record_id, scope_key, key,"
            " trace"
            " FROM {s}.memory_history WHERE tenant = $1 AND event = 'memory_decided'"
            " AND proposal_id = ANY($2::text[]) ORDER BY proposal_id, seq")
        self._fingerprints = q(
            "SELECT proposal_id, reason FROM {s}.memory_history WHERE tenant = $1"
            " AND event = 'memory_proposed' AND proposal_id = ANY($2::text[])")
        self._record_groups = q(
            "SELECT record_id, scope_key, key FROM {s}.memory_records"
            " WHERE tenant = $1 AND record_id = ANY($2::text[])"
            " UNION ALL SELECT promoted_id, scope_key, key FROM {s}.memory_groups"
            " WHERE tenant = $1 AND promoted_id = ANY($2::text[])")
        # A key asked for finds its group by the key or by the key's digest (a buried group's).
        self._groups = q("SELECT DISTINCT g.scope_key, g.key, g.state FROM {s}.memory_groups g"
                        " JOIN unnest($2::text[], $3::text[]) AS k(scope_key, key)"
                        " ON g.scope_key = k.scope_key AND (g.key = k.key OR g.key_digest = k.key)"
                        " WHERE g.tenant = $1")
        self._drop_groups = q("DELETE FROM {s}.memory_groups g USING unnest($2::text[], $3::text[])"
                             " AS k(scope_key, key) WHERE g.tenant = $1 AND g.scope_key = k.scope_key"
                             " AND g.key = k.key")
        self._rows = q("SELECT r.row FROM {s}.memory_records r"
                      " JOIN unnest($2::text[], $3::text[]) AS k(scope_key, key)"
                      " ON r.scope_key = k.scope_key AND r.key = k.key WHERE r.tenant = $1")
        self._held = q("SELECT record_id, mark FROM {s}.memory_held"
                      " WHERE tenant = $1 AND record_id = ANY($2::text[]) ORDER BY record_id, n")
        self._put_groups = q(
            "INSERT INTO {s}.memory_groups(tenant, scope_key, key, promoted_id, seq, state, key_digest)"
            " SELECT $1, * FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[], $6::bytea[],"
            " $7::text[]) ON CONFLICT (tenant, scope_key, key) DO UPDATE SET seq = excluded.seq,"
            " state = excluded.state, key_digest = excluded.key_digest")
        self._put_records = q(
            "INSERT INTO {s}.memory_records(tenant, record_id, scope_key, key, kind, status, authority,"
            " sensitivity_rank, schema_version, subject_version, observed_at, expires_at, ledger_seq,"
            " row, tsv, doc_len, embedding, data_subject, mac, index_version)"
            " SELECT $1, r, sk, k, kd, st, au, sr, sv, subv, oa, ea, ls, rw, t.tsv,"
            " {doc_len}, em::vector, ds, mc, iv"
            " FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::smallint[],"
            " $8::smallint[], $9::smallint[], $10::int[], $11::timestamptz[], $12::timestamptz[],"
            " $13::bigint[], $14::bytea[], $15::text[], $16::text[], $17::text[], $18::text[],"
            " $19::smallint[])"
            " AS u(r, sk, k, kd, st, au, sr, sv, subv, oa, ea, ls, rw, tx, em, ds, mc, iv)"
            " CROSS JOIN LATERAL (SELECT CASE WHEN tx IS NULL THEN NULL"
            " ELSE to_tsvector('{config}', tx) END AS tsv) AS t"
            " ON CONFLICT (tenant, record_id) DO UPDATE SET scope_key = excluded.scope_key,"
            " key = excluded.key, kind = excluded.kind, status = excluded.status,"
            " authority = excluded.authority, sensitivity_rank = excluded.sensitivity_rank,"
            " schema_version = excluded.schema_version, subject_version = excluded.subject_version,"
            " observed_at = excluded.observed_at, expires_at = excluded.expires_at,"
            " ledger_seq = excluded.ledger_seq, row = excluded.row, tsv = excluded.tsv, doc_len = excluded.doc_len,"
            " embedding = excluded.embedding, data_subject = excluded.data_subject, mac = excluded.mac,"
            " index_version = excluded.index_version"
            .replace("{doc_len}", MEMORY_DOC_LEN.format(tsv="t.tsv")).replace("{config}", TEXT_CONFIG))
        # Rows whose index a derivation older than $3 made, after ($1, $2) in key order.
        self._old_index = q(
            "SELECT tenant, record_id, row FROM {s}.memory_records WHERE (tenant, record_id) > ($1, $2)"
            " AND index_version < $3 ORDER BY tenant, record_id LIMIT $4 FOR UPDATE")
        self._put_index = q(
            "UPDATE {s}.memory_records m SET tsv = t.tsv, doc_len = {doc_len}, embedding = u.em::vector,"
            " index_version = u.iv"
            " FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::smallint[]) AS u(tn, r, tx, em, iv)"
            " CROSS JOIN LATERAL (SELECT CASE WHEN u.tx IS NULL THEN NULL"
            " ELSE to_tsvector('{config}', u.tx) END AS tsv) AS t"
            " WHERE m.tenant = u.tn AND m.record_id = u.r"
            .replace("{doc_len}", MEMORY_DOC_LEN.format(tsv="t.tsv")).replace("{config}", TEXT_CONFIG))
        self._drop_records = q("DELETE FROM {s}.memory_records WHERE tenant = $1"
                              " AND record_id = ANY($2::text[])")
        self._put_history = q(
            "INSERT INTO {s}.memory_history(tenant, event_id, seq, event, proposal_id, record_id,"
            " scope_key, key, action, reason, trace, at, mac)"
            " SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[],"
            " $7::text[], $8::text[], $9::text[], $10::text[], $11::bytea[], $12::timestamptz[],"
            " $13::text[])"
            " ON CONFLICT (tenant, event_id) DO NOTHING")
        # The rows of a forgotten record's events (its decision and feedback, its proposal's
        # ``memory_proposed``), never a ``memory_forgotten`` row.
        self._drop_history = q(
            "DELETE FROM {s}.memory_history WHERE tenant = $1 AND event <> 'memory_forgotten'"
            " AND (record_id = ANY($2::text[]) OR proposal_id = ANY($3::text[])"
            " OR proposal_id IN (SELECT proposal_id FROM {s}.memory_history WHERE tenant = $1"
            " AND record_id = ANY($2::text[]) AND proposal_id IS NOT NULL))")
        self._forgotten = q("SELECT record_id FROM {s}.memory_records WHERE tenant = $1"
                            " AND record_id = ANY($2::text[]) AND status = 'forgotten'")
        self._drop_held = q("DELETE FROM {s}.memory_held WHERE tenant = $1"
                           " AND record_id = ANY($2::text[])")
        self._put_held = q("INSERT INTO {s}.memory_held(tenant, record_id, n, mark)"
                          " SELECT $1, * FROM unnest($2::text[], $3::int[], $4::bytea[])")

    # ---- what the reducer needs of one tenant -------------------------------------------

    async def seen_events(self, conn: Any, tenant: str, event_ids: Sequence[str]) -> dict[str, int]:
        if not event_ids:
            return {}
        return {r[0]: int(r[1]) for r in await conn.fetch(self._events, tenant, list(event_ids))}

    async def decisions(self, conn: Any, tenant: str,
                        proposal_ids: Sequence[str]) -> dict[str, DecisionRow]:
        """The first decision of each proposal id that has one."""
        if not proposal_ids:
            return {}
        rows = await conn.fetch(self._decisions, tenant, list(proposal_ids))
        return {r[0]: DecisionRow(r[0], int(r[1]), r[2], r[3], r[4], r[5], r[6], decode_trace(r[7]))
                for r in rows}

    async def fingerprints(self, conn: Any, tenant: str, proposal_ids: Sequence[str]) -> dict[str, str | None]:
        """The fingerprint of each proposal id's ``memory_proposed`` (None: kept before they were)."""
        if not proposal_ids:
            return {}
        return {r[0]: r[1] or None for r in await conn.fetch(self._fingerprints, tenant, list(proposal_ids))}

    async def record_groups(self, conn: Any, tenant: str,
                            record_ids: Sequence[str]) -> dict[str, GroupKey]:
        """The group of each record id known (promoted fact ids included)."""
        if not record_ids:
            return {}
        return {r[0]: (r[1], r[2]) for r in await conn.fetch(self._record_groups, tenant,
                                                               list(record_ids))}

    async def groups(self, conn: Any, tenant: str,
                     keys: Sequence[GroupKey]) -> tuple[dict[GroupKey, bytes], list[RecordRow]]:
        """The stored state of each group of ``keys`` that exists, and its record rows; a key may
        be a key's digest (``tombstone_key``): then the group with that digest is found too."""
        if not keys:
            return {}, []
        scopes, names = [k[0] for k in keys], [k[1] for k in keys]
        groups = {(r[0], r[1]): bytes(r[2]) for r in await conn.fetch(self._groups, tenant, scopes, names)}
        found = sorted(groups)
        rows = [decode_row(r[0]) for r in await conn.fetch(self._rows, tenant, [k[0] for k in found],
                                                           [k[1] for k in found])] if found else []
        return groups, rows

    async def held(self, conn: Any, tenant: str, record_ids: Sequence[str]) -> dict[str, list[bytes]]:
        if not record_ids:
            return {}
        out: dict[str, list[bytes]] = {}
        for r in await conn.fetch(self._held, tenant, list(record_ids)):
            out.setdefault(r[0], []).append(bytes(r[1]))
        return out

    # ---- writes ---------------------------------------------------------------------------

    async def put_groups(self, conn: asyncpg.Connection, tenant: str,
                         groups: Sequence[tuple[str, str, str, int, bytes, str]]) -> None:
        """Write groups: (scope key, key, promoted id, seq, state, the key's digest)."""
        if groups:
            await conn.execute(self._put_groups, tenant, *columns(groups, 6))

    async def drop_groups(self, conn: asyncpg.Connection, tenant: str, keys: Sequence[GroupKey]) -> None:
        """Delete the rows of groups that moved to another key (buried, or back from burial)."""
        if keys:
            await conn.execute(self._drop_groups, tenant, [k[0] for k in keys], [k[1] for k in keys])

    async def put_records(self, conn: asyncpg.Connection, tenant: str,
                          records: Sequence[RecordWrite], keys: IntegrityKeys) -> None:
        """Write record rows, each tagged over its tenant and bytes (``record_tag``)."""
        if not records:
            return
        cols: list[list[Any]] = [[] for _ in range(18)]
        for w in records:
            row, body = w.row, w.row.body
            data = _encode(row)
            values = (row.record_id, row.scope, row.key, row.kind, row.status, row.authority,
                      SENSITIVITY_RANK[body.sensitivity], body.schema_version, body.subject_version,
                      body.observed_at, body.expires_at, row.ledger_seq, data, w.text,
                      vector_text(w.embedding), data_subject_of(row),
                      record_tag(keys.current, keys.mac_key, tenant, data), w.index_version)
            for col, value in zip(cols, values, strict=True):
                col.append(value)
        await conn.execute(self._put_records, tenant, *cols)

    async def old_index(self, conn: asyncpg.Connection, after: tuple[str, str], version: int,
                        limit: int) -> list[tuple[str, str, bytes]]:
        """Up to ``limit`` rows (tenant, record id, row bytes) after ``after`` whose index an older
        derivation than ``version`` made, row-locked until the end of the transaction."""
        return [(r[0], r[1], bytes(r[2])) for r in await conn.fetch(self._old_index, *after, version, limit)]

    async def put_index(self, conn: asyncpg.Connection, rows: Sequence[tuple[str, RecordWrite]]) -> None:
        """Replace the full-text vector, length and embedding of existing rows (tenant, write)."""
        if rows:
            await conn.execute(self._put_index, [t for t, _ in rows], [w.row.record_id for _, w in rows],
                               [w.text for _, w in rows], [vector_text(w.embedding) for _, w in rows],
                               [w.index_version for _, w in rows])

    async def drop_records(self, conn: asyncpg.Connection, tenant: str, record_ids: Sequence[str]) -> None:
        if record_ids:
            await conn.execute(self._drop_records, tenant, list(record_ids))

    async def drop_history(self, conn: asyncpg.Connection, tenant: str, record_ids: Iterable[str],
                           proposal_ids: Iterable[str]) -> None:
        """Delete the history of forgotten records (what their own events left)."""
        records, proposals = sorted(set(record_ids)), sorted(set(proposal_ids))
        if records or proposals:
            await conn.execute(self._drop_history, tenant, records, proposals)

    async def forgotten(self, conn: Any, tenant: str, record_ids: Sequence[str]) -> set[str]:
        """Which of ``record_ids`` are tombstones."""
        if not record_ids:
            return set()
        return {r[0] for r in await conn.fetch(self._forgotten, tenant, list(record_ids))}

    async def put_history(self, conn: asyncpg.Connection, tenant: str,
                          rows: Sequence[HistoryRow], keys: IntegrityKeys) -> None:
        """Write history rows, each tagged over its tenant and every column (``history_tag``)."""
        if not rows:
            return
        prepared = [(*r[:8], r.reason, _encode(r.trace) if r.trace is not None else None, r.at)
                    for r in rows]
        tagged = [(*row, history_tag(keys.current, keys.mac_key, tenant, row)) for row in prepared]
        await conn.execute(self._put_history, tenant, *columns(tagged, 12))

    async def replace_held(self, conn: asyncpg.Connection, tenant: str,
                           held: dict[str, list[bytes]], touched: Iterable[str]) -> None:
        """Make the held feedback of the ``touched`` record ids exactly ``held``'s."""
        ids = sorted(set(touched))
        if not ids:
            return
        await conn.execute(self._drop_held, tenant, ids)
        rows = [(rid, n, mark) for rid in ids for n, mark in enumerate(held.get(rid, []))]
        if rows:
            await conn.execute(self._put_held, tenant, *columns(rows, 3))
