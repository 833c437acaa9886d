"""The read path's shell: allowed scopes → gated SQL candidates → merge, score, budget → receipt.

The scopes come from the caller (``core.memory.allowed_scopes`` with the
agent's bindings), never from what the request claims. Each candidate source
is ONE SQL statement whose WHERE clause holds the scope gate (``scope_key =
ANY(...)``: exact equality) and, for full-text and vector search, every other
gate too, so similarity only ranks what already passed: a record outside the
caller's scopes is never fetched, so it can never appear in a receipt, and a
stale one never reaches a ranking. The exact-key source also returns the key's
records in the caller's scopes that a gate stops, each gate's result computed
by PostgreSQL, so the receipt says why they were not read; a forgotten record
(a tombstone) is not even such a candidate: no read, receipt or usage row
names it again. ``get`` and ``history`` show a tombstone as it is: status
``forgotten``, no value.

Then, in Python with the core: fuse the sources' rankings (RRF) into each
candidate's relevance, score, merge across scopes, keep ``k`` if the request set
one, pack into the token budget (tiktoken) best first until it is spent, open
personal values (only when the request allows ``personal``), persist the receipt
and the records' usage in one statement, and reply.
"""

from __future__ import annotations

import functools
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import msgspec
import structlog
from nats.aio.client import Client

from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.contracts.memory_api import (
    GateResult,
    HistoryEntry,
    KeyReply,
    KeyRequest,
    MemoryItem,
    ReadReceipt,
    ReadReply,
    ReadRequest,
    ReceiptCandidate,
    ReceiptsReply,
    ReceiptsRequest,
)
from agentledger.core.detect import redact_secrets
from agentledger.core.memory.authority import LOW_AUTHORITY, SENSITIVITY_RANK, scope_key
from agentledger.core.memory.keys import (
    MULTI_VALUED,
    attribute_prefix,
    key_repeats_value,
    known_attribute,
    lookup_keys,
    named_attributes,
    normalise_key,
    tombstone_key,
)
from agentledger.core.memory.read import (
    NEIGHBOUR_WINDOW,
    Bindings,
    allowed_scopes,
    candidate_cap,
    fuse,
    idle,
    merge_candidates,
    needs_review,
    read_order,
    score,
    select_within_budget,
    time_fits,
    with_neighbours,
)
from agentledger.core.memory.state import RecordRow
from agentledger.core.memory.tags import KeyOf, check_history, check_receipt, receipt_tag, record_matches
from agentledger.core.memory.when import usable, when_of
from agentledger.errors import ContractError, IntegrityViolationError
from agentledger.models import tokens
from agentledger.security.bindings import BindingRegistry
from agentledger.security.identity import Caller
from agentledger.security.integrity_keys import keys_of
from agentledger.security.sealing import Keyring, kek_of, marker_key_of, unseal
from agentledger.services.memory_policy.fold import Vectors, search_text
from agentledger.services.memory_policy.propose import binding_of, check_scope
from agentledger.services.memory_policy.record_reach import PUT_BACK, RecordReach
from agentledger.services.memory_policy.store import TEXT_CONFIG, decode_row, decode_trace, vector_text
from agentledger.shell import metrics

log = structlog.get_logger()
_receipt_decoder = msgspec.json.Decoder(ReadReceipt)
_GATES = "status", "ttl", "version", "privacy", "source", "kind"
# Candidates each search source returns at most, per requested result.
OVERFETCH = 3

# Every gate but the scope's, in SQL: $3 now, $4 least subject version, $5 most sensitive rank,
# $6 least authority, $7 kinds (empty: any).
_G_STATUS = "status = 'active'"
_G_TTL = "(expires_at IS NULL OR expires_at > $3)"
_G_VERSION = "(schema_version = 1 AND ($4::int IS NULL OR subject_version >= $4))"
_G_PRIVACY = "sensitivity_rank <= $5"
_G_SOURCE = "authority >= $6"
_G_KIND = "(cardinality($7::text[]) = 0 OR kind = ANY($7::text[]))"
_ALL_GATES = " AND ".join((_G_STATUS, _G_TTL, _G_VERSION, _G_PRIVACY, _G_SOURCE, _G_KIND))
_SCOPE = "tenant = $1 AND scope_key = ANY($2::text[])"

_GATED = {"{scope}": _SCOPE, "{gates}": _ALL_GATES, "{columns}": ", ".join(
    (_G_STATUS, _G_TTL, _G_VERSION, _G_PRIVACY, _G_SOURCE, _G_KIND))}


def _sql(template: str, parts: dict[str, str] | None = None) -> str:
    for name, clause in (*_GATED.items(), *(parts or {}).items()):
        template = template.replace(name, clause)
    return template


# A key, or (a multi-valued attribute: ``keys.MULTI_VALUED``) every per-value key of it: $9 the
# ``LIKE`` patterns (``keys.attribute_prefix``).
EXACT_SQL = _sql("SELECT row, {columns}, mac FROM memory_records WHERE {scope}"
                 " AND (key = $8 OR key LIKE ANY($9::text[])) AND status <> 'forgotten'")
# The records of the attributes a question names (``keys.named_attributes``), every gate in the
# WHERE clause: how a question finds a personal record, which is in no search index.
ATTRIBUTE_SQL = _sql("SELECT row, mac FROM memory_records WHERE {scope} AND {gates}"
                     " AND (key = ANY($8::text[]) OR key LIKE ANY($9::text[]))"
                     " ORDER BY observed_at DESC, record_id LIMIT $10")
# Full text: BM25 (k1 1.2, b 0.75) over the caller's gated records only. The query's words are
# the lexemes PostgreSQL's ``simple`` configuration makes of it, each quoted as a tsquery lexeme
# (a quote or backslash in one doubled) and OR-ed, so no text of the request is ever parsed as
# tsquery syntax and a record needs only one of the words. ``hits``: the gated records holding
# any of them (the gates in the WHERE clause of the match itself); ``stats``: the number of
# gated records and their mean length (tokens); ``df``: per word, the hits holding it (every
# gated record holding a word is a hit, so that is its document frequency over the gated set).
# idf = ln(1 + (N - df + 0.5) / (df + 0.5)); a record's score is the sum over its query words of
# idf · tf·(k1 + 1) / (tf + k1·(1 - b + b·len/avg_len)). ``len`` is the stored ``doc_len`` (the
# projection writes it with the tsvector), so the statistics read one small column of the gated
# rows, never their tsvectors.
_QUOTED = r"'''' || replace(replace(lexeme, '\', '\\'), '''', '''''') || ''''"
_TEXT = (
    "WITH terms AS MATERIALIZED (SELECT DISTINCT t.lexeme FROM unnest(to_tsvector('{config}', {query})) AS t),"
    " q AS (SELECT string_agg({quoted}, ' | ')::tsquery AS q FROM terms),"
    " hits AS MATERIALIZED (SELECT record_id, row, mac, tsv, doc_len::float8 AS dl FROM memory_records"
    " WHERE {where} AND tsv @@ (SELECT q FROM q)),"
    " stats AS (SELECT count(*)::float8 AS n, coalesce(avg(doc_len), 1)::float8 AS avgdl"
    " FROM memory_records WHERE {where} AND tsv IS NOT NULL),"
    " tf AS (SELECT h.record_id, t.lexeme, greatest(cardinality(t.positions), 1)::float8 AS f, h.dl"
    " FROM hits h CROSS JOIN LATERAL unnest(h.tsv) AS t WHERE t.lexeme IN (SELECT lexeme FROM terms)),"
    " df AS (SELECT lexeme, count(*)::float8 AS df FROM tf GROUP BY lexeme),"
    " bm AS (SELECT tf.record_id, sum(ln(1 + (s.n - df.df + 0.5) / (df.df + 0.5)) * tf.f * 2.2"
    " / (tf.f + 1.2 * (0.25 + 0.75 * tf.dl / greatest(s.avgdl, 1)))) AS rel"
    " FROM tf JOIN df USING (lexeme) CROSS JOIN stats s GROUP BY tf.record_id)"
    " SELECT h.row, bm.rel, h.mac FROM bm JOIN hits h USING (record_id) ORDER BY bm.rel DESC, h.record_id"
    " LIMIT {limit}")


def text_sql(where: str, query: str, limit: str) -> str:
    """The BM25 statement over the records ``where`` selects (the bench runs it ungated, with
    ``true``, as the baseline of the gated one); ``query`` and ``limit``: their parameters."""
    return _sql(_TEXT, {"{where}": where, "{query}": query, "{limit}": limit, "{quoted}": _QUOTED,
                        "{config}": TEXT_CONFIG})


TEXT_SQL = text_sql(_sql("{scope} AND {gates}"), "$8", "$9")
# ``hnsw.iterative_scan`` (pgvector 0.8) is set for the pool's connections: the index scan goes on
# until ``k`` rows passed the WHERE clause, so a selective filter still returns its ``k``.
VECTOR_SQL = _sql("SELECT row, embedding <=> $8::vector AS dist, mac FROM memory_records"
                  " WHERE {scope} AND {gates} AND embedding IS NOT NULL"
                  " ORDER BY embedding <=> $8::vector LIMIT $9")
# The records said right before and after each of $8 (record ids, in scopes $9 at ledger
# sequences $10) in its scope, every gate in the WHERE clause; their times are compared in Python
# (``NEIGHBOUR_WINDOW``). Index ``memory_records_order``.
NEIGHBOUR_SQL = _sql(
    "SELECT c.rid, n.row, n.mac FROM unnest($8::text[], $9::text[], $10::bigint[]) AS c(rid, sk, seq)"
    " CROSS JOIN LATERAL ((SELECT row, mac FROM memory_records WHERE tenant = $1 AND scope_key = c.sk"
    " AND scope_key = ANY($2::text[]) AND {gates} AND ledger_seq < c.seq ORDER BY ledger_seq DESC LIMIT 1)"
    " UNION ALL (SELECT row, mac FROM memory_records WHERE tenant = $1 AND scope_key = c.sk"
    " AND scope_key = ANY($2::text[]) AND {gates} AND ledger_seq > c.seq ORDER BY ledger_seq LIMIT 1)) AS n")
SAVE_SQL = (
    "WITH r AS (INSERT INTO memory_receipts(receipt_id, tenant, caller, task_id, record_ids,"
    " created_at, expires_at, receipt, mac) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $10))"
    # Usage rows are upserted in record id order: two reads that selected the same records in
    # other orders would otherwise lock them crosswise, and one would die of a deadlock.
    " INSERT INTO memory_usage(tenant, record_id, last_read_at, reads)"
    " SELECT $2, r, $6, 1 FROM unnest($9::text[]) AS r ORDER BY r"
    " ON CONFLICT (tenant, record_id) DO UPDATE SET last_read_at = excluded.last_read_at,"
    " reads = memory_usage.reads + 1")
# By a key and its digest (``tombstone_key``): the tombstones of a key whose records are all forgotten.
KEY_SQL = "SELECT row, mac FROM memory_records WHERE tenant = $1 AND scope_key = $2 AND key = ANY($3::text[])"
# Which of a looked-up key's canonical forms the scope holds (records, or decisions without one).
KEYS_HELD_SQL = (
    "SELECT key FROM memory_records WHERE tenant = $1 AND scope_key = $2 AND key = ANY($3::text[])"
    " UNION SELECT key FROM memory_history WHERE tenant = $1 AND scope_key = $2"
    " AND key = ANY($3::text[])")
HISTORY_SQL = (
    "SELECT event_id, seq, event, proposal_id, record_id, scope_key, key, action, reason, trace, at, mac"
    " FROM memory_history h"
    " WHERE tenant = $1 AND ((scope_key = $2 AND key = ANY($3::text[]))"
    " OR proposal_id IN (SELECT proposal_id FROM memory_history WHERE tenant = $1 AND scope_key = $2"
    " AND key = ANY($3::text[]) AND proposal_id IS NOT NULL)"
    " OR record_id IN (SELECT record_id FROM memory_records WHERE tenant = $1 AND scope_key = $2"
    " AND key = ANY($3::text[]))) ORDER BY seq")
RECEIPTS_SQL = (
    "SELECT receipt_id, receipt, mac FROM memory_receipts WHERE tenant = $1 AND expires_at > now()"
    " AND ($2::text IS NULL OR task_id = $2) AND ($3::text IS NULL OR record_ids @> ARRAY[$3::text])"
    " AND ($4::text IS NULL OR caller = $4) AND ($5::text IS NULL OR receipt_id < $5)"
    " ORDER BY receipt_id DESC LIMIT $6")
LAST_READ_SQL = ("SELECT record_id, last_read_at FROM memory_usage WHERE tenant = $1"
                 " AND record_id = ANY($2::text[])")
EXPIRE_SQL = "DELETE FROM memory_receipts WHERE expires_at <= now()"


@dataclass
class Candidate:
    """A record a read found: how, each gate, its relevance and score (``Mergeable`` for the core)."""

    row: RecordRow
    found_by: list[str] = field(default_factory=list)
    gates: list[GateResult] = field(default_factory=list)
    relevance: float = 0.0
    score: float = 0.0
    review: bool = False
    value: Any = None
    erased: bool = False
    # The stored bytes and tag it was read with: checked (``Checked``) once it would be returned.
    stored: tuple[bytes, str | None] = (b"", None)

    @property
    def record_id(self) -> str:
        return self.row.record_id

    @property
    def key(self) -> str:
        return self.row.key

    @property
    def kind(self) -> str:
        return self.row.kind

    @property
    def scope(self) -> str:
        return self.row.scope

    @property
    def authority(self) -> int:
        return self.row.authority

    @property
    def subject_version(self) -> int:
        return self.row.body.subject_version

    @property
    def observed_at(self) -> datetime:
        return self.row.body.observed_at

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates)


def passed_all(kinds: bool) -> list[GateResult]:
    names = ("scope", *_GATES[:-1], *(("kind",) if kinds else ()))
    return [GateResult(name, True) for name in names]


def _gate_results(passed: Sequence[bool], request: ReadRequest, row: RecordRow) -> list[GateResult]:
    reasons = {"status": row.status, "ttl": "expired",
               "version": f"subject version {row.body.subject_version} < {request.min_subject_version}",
               "privacy": f"{row.body.sensitivity} above {request.max_sensitivity}",
               "source": f"authority {row.authority} < {request.min_authority}",
               "kind": f"{row.kind} not requested"}
    out = [GateResult("scope", True)]
    for name, ok in zip(_GATES, passed, strict=True):
        if name == "kind" and not request.kinds:
            continue
        out.append(GateResult(name, True) if ok else GateResult(name, False, reasons[name]))
    return out


def _exact_gates(record: asyncpg.Record, request: ReadRequest, row: RecordRow) -> list[GateResult]:
    """Each gate's result as PostgreSQL computed it from the gate columns."""
    return _gate_results([bool(record[i]) for i in range(1, len(_GATES) + 1)], request, row)


def row_passes(row: RecordRow, request: ReadRequest, now: datetime) -> list[bool]:
    """Each gate's result but the scope's (``_GATES`` order; ``kind`` only when the request
    names kinds) computed from the record's own (verified) bytes, as ``_ALL_GATES`` computes
    it from the columns: where the two differ, a column was edited."""
    body = row.body
    passes = [row.status == "active",
              body.expires_at is None or body.expires_at > now,
              body.schema_version == 1 and (request.min_subject_version is None
                                            or body.subject_version >= request.min_subject_version),
              SENSITIVITY_RANK[body.sensitivity] <= SENSITIVITY_RANK[request.max_sensitivity],
              row.authority >= request.min_authority]
    if request.kinds:
        passes.append(row.kind in request.kinds)
    return passes


def _tampered(row: RecordRow, data: bytes, tag: str | None, *, tenant: str, scopes: Sequence[str],
              key_of: KeyOf, gates: Sequence[GateResult], request: ReadRequest, now: datetime) -> str | None:
    """Why a candidate PostgreSQL returned must not be read (None: it may): its bytes fail their
    tag, or the record they hold is outside the caller's scopes or fails a gate that the
    columns let it through (``gates``: what PostgreSQL said, the scope's first)."""
    if not record_matches(key_of, tenant, data, tag):
        return "its bytes fail their integrity tag" if tag else "it has no integrity tag"
    if row.scope not in scopes:
        return "its scope column does not match the scope its record holds"
    if row_passes(row, request, now) != [g.passed for g in gates[1:]]:
        return "a gate column does not match its record"
    return None


def _prefixes(attributes: Sequence[str]) -> list[str]:
    """The ``LIKE`` patterns of the per-value keys of those of ``attributes`` that hold several."""
    return [attribute_prefix(a) for a in attributes if a in MULTI_VALUED]


def render_value(value: Any) -> str:
    return value if isinstance(value, str) else msgspec.json.encode(value).decode()


def render(c: Candidate, *, dated: bool = False) -> str:
    """One item as the budget counts it and the reply renders it: ``[kind:key] value``, or
    ``[kind] value`` when the key only repeats the value's words (a derived content key);
    ``dated`` (the query names a time: ``core.memory.when``): the day it was observed first,
    ``[kind] 2026-03-09 value`` (7 cl100k tokens more). A record whose words came from outside
    (``LOW_AUTHORITY`` or less: a page, a document, mail, a model's inference, unconfirmed) says so,
    ``[outside fact:key] value``, as the context builder's ``origin="outside"`` block does."""
    day = f"{c.observed_at:%Y-%m-%d} " if dated else ""
    kind = f"outside {c.kind}" if c.row.authority <= LOW_AUTHORITY else c.kind
    if c.erased:
        return f"[{kind}:{c.key}] {day}(erased)"
    if key_repeats_value(c.key, c.value):
        return f"[{kind}] {day}{render_value(c.value)}"
    return f"[{kind}:{c.key}] {day}{render_value(c.value)}"


def item_of(row: RecordRow, now: datetime, *, value: Any = None, erased: bool = False,
            score_: float | None = None, tokens_: int | None = None, review: bool = False) -> MemoryItem:
    body = row.body
    return MemoryItem(
        record_id=row.record_id, key=row.key, kind=row.kind, scope=row.scope, status=row.status,
        authority=row.authority, sensitivity=body.sensitivity, source=body.source.kind,
        observed_at=body.observed_at, value=value, erased=erased, subject_version=body.subject_version,
        record_version=row.record_version, expires_at=body.expires_at, review_at=body.review_at,
        needs_review=review or needs_review(body.review_at, now), supersedes=list(body.supersedes),
        superseded_by=row.superseded_by, promoted_from=list(body.promoted_from),
        status_reason=row.status_reason, score=score_, tokens=tokens_, ledger_seq=row.ledger_seq)


def receipt_id() -> str:
    """Time-ordered (newest sorts last), unique: ``r<ns since epoch><random>``."""
    return f"r{time.time_ns():020d}{secrets.token_hex(4)}"


class Reader:
    """Answers ``memory.read``, ``get``, ``history`` and ``receipts``."""

    def __init__(self, settings: Settings, nc: Client, pool: asyncpg.Pool, vectors: Vectors,
                 bindings: BindingRegistry, *, reach: RecordReach | None = None) -> None:
        self.settings = settings
        # The record versions this process's projection committed (an older one is refused).
        self._reach = reach if reach is not None else RecordReach()
        self._nc = nc
        self._pool = pool
        self._vectors = vectors
        self._bindings = bindings
        self._keys: Keyring | None = None
        # Stored rows refused because they failed their integrity check (each also logged).
        self.integrity_violations = 0

    # ---- read ---------------------------------------------------------------------------------

    async def read(self, caller: Caller, request: ReadRequest) -> ReadReply:
        started = time.perf_counter()
        tenant = request.tenant
        bound = await binding_of(self._bindings, caller, tenant)
        scopes = [scope_key(s) for s in allowed_scopes(caller.tenant, bound is None, bound or Bindings(),
                                                        request)]
        if request.key is None and not request.query.strip():
            raise ContractError("a read needs a query or a key", code="missing_field", path="$.query")
        try:
            tokens.count("", request.encoding)
        except Exception as exc:
            raise ContractError(str(exc), code="invalid_value", path="$.encoding") from exc
        now = datetime.now(UTC)
        gate_args = (tenant, scopes, now, request.min_subject_version,
                     SENSITIVITY_RANK[request.max_sensitivity], request.min_authority, list(request.kinds))
        found: dict[str, Candidate] = {}
        # An explicit k overfetches (merging across scopes drops losers); filling the budget
        # fetches the cap itself per source, every winner a budget candidate. A k read fetches
        # at least what the same read without k would: a record's relevance depends on the
        # neighbours found with it, so the first k are the first k of the read without k.
        cap = candidate_cap(request.k, request.budget_tokens)
        limit = max(cap * OVERFETCH if request.k is not None else cap, candidate_cap(None, request.budget_tokens))
        rankings: list[list[str]] = []
        query_vector = None
        if request.query.strip():
            query_vector = vector_text((await self._vectors.of([request.query]))[0])
        check = Checked(tenant, scopes, keys_of(self.settings).mac_key_of, request, now,
                        reached=self._reach.reached, mark=self._reach.mark(),
                        enabled=self.settings.integrity)
        async with self._pool.acquire() as conn:
            if request.key is not None:
                key = normalise_key(request.key)
                for r in await conn.fetch(EXACT_SQL, *gate_args, key, _prefixes((known_attribute(request.key)
                                                                                 or key,))):
                    row = decode_row(r[0])
                    c = found.setdefault(row.record_id, Candidate(row))
                    c.found_by.append("key")
                    c.gates = _exact_gates(r, request, row)
                    c.stored = (r[0], r["mac"])
            if request.query.strip():
                for sql, arg, source in ((TEXT_SQL, request.query, "text"),
                                         (VECTOR_SQL, query_vector, "vector")):
                    ranking = []
                    for r in await conn.fetch(sql, *gate_args, arg, limit):
                        c = self._found(found, decode_row(r[0]), source, request)
                        c.stored = (r[0], r["mac"])
                        ranking.append(c.record_id)
                    rankings.append(ranking)
                named = named_attributes(request.query)
                if named:
                    ranking = []
                    for r in await conn.fetch(ATTRIBUTE_SQL, *gate_args, list(named), _prefixes(named), limit):
                        c = self._found(found, decode_row(r[0]), "attribute", request)
                        c.stored = (r[0], r["mac"])
                        ranking.append(c.record_id)
                    rankings.append(ranking)
            relevance = fuse(rankings)
            if relevance:
                relevance = with_neighbours(relevance, await self._neighbours(
                    conn, gate_args, found, relevance, limit=limit, request=request))
            # A record of the key asked for, or of an attribute the question names, is what was
            # asked: the best relevance, whatever the searches said.
            relevance.update((rid, 1.0) for rid, c in found.items()
                             if "key" in c.found_by or "attribute" in c.found_by)
            for rid, rel in relevance.items():
                found[rid].relevance = rel
            return await self._finish(conn, caller, request, scopes=scopes, found=list(found.values()),
                                      now=now, started=started, check=check)

    async def _neighbours(self, conn: asyncpg.Connection, gate_args: tuple[Any, ...], found: dict[str, Candidate],
                          relevance: dict[str, float], *, limit: int, request: ReadRequest) -> dict[str, list[str]]:
        """The records said right before and after each of the ``limit`` most relevant ones
        (``core.memory.read.with_neighbours``), added to ``found`` as ``neighbour`` candidates
        when no search found them (and marked ``neighbour`` when one did): by record id, its
        neighbours' ids."""
        top = sorted(relevance, key=lambda rid: (-relevance[rid], rid))[:limit]
        rows = [found[rid].row for rid in top]
        out: dict[str, list[str]] = {}
        for r in await conn.fetch(NEIGHBOUR_SQL, *gate_args, [row.record_id for row in rows],
                                  [row.scope for row in rows], [row.ledger_seq for row in rows]):
            near, of = decode_row(r[1]), found[r[0]].row
            # The next line of the same conversation or note: its kind, its kind of source, its hour.
            if (near.kind != of.kind or near.body.source.kind != of.body.source.kind
                    or abs(near.body.observed_at - of.body.observed_at) > NEIGHBOUR_WINDOW):
                continue
            if near.record_id not in found:
                self._found(found, near, "neighbour", request).stored = (r[1], r["mac"])
            elif "neighbour" not in found[near.record_id].found_by:
                found[near.record_id].found_by.append("neighbour")  # the receipt says why it rose
            out.setdefault(r[0], []).append(near.record_id)
        return out

    def _found(self, found: dict[str, Candidate], row: RecordRow, source: str, request: ReadRequest) -> Candidate:
        """Adds a search hit to ``found`` (the gates passed, as PostgreSQL says)."""
        c = found.get(row.record_id)
        if c is None:
            c = found[row.record_id] = Candidate(row, gates=passed_all(bool(request.kinds)))
        c.found_by.append(source)
        return c

    def _refused(self, refused: dict[str, str]) -> None:
        """Count and log the candidates refused as tampered (ids only)."""
        for record_id, reason in refused.items():
            self.integrity_violations += 1
            log.error("memory.integrity_violation", record=record_id, reason=reason)

    async def _finish(self, conn: asyncpg.Connection, caller: Caller, request: ReadRequest, *,
                      scopes: list[str], found: list[Candidate], now: datetime,
                      started: float, check: Checked) -> ReadReply:
        """Score, merge by key, take the first ``k`` (or all) winners and fill the budget.

        Integrity is checked where it decides what is returned: every winner about to be
        taken is verified (``check``); one that fails is refused (its gates become one failed
        ``integrity`` gate) and the merge runs again without it, so a forged or edited row can
        neither be returned nor keep out the record it would have overridden. Losers and
        records below ``k`` are not checked (they change nothing returned): about ``k`` tags a
        read instead of one per candidate."""
        passed = [c for c in found if c.passed]
        last_read = dict(await conn.fetch(LAST_READ_SQL, request.tenant, [c.record_id for c in passed]))
        when = usable(when_of(request.query), [search_text(c.row) or "" for c in passed])
        fits = time_fits(when, passed, lambda c: search_text(c.row) or "")
        for c in passed:
            body = c.row.body
            c.review = needs_review(body.review_at, now) or idle(
                c.authority, body.confidence, last_read.get(c.record_id) or body.observed_at, now)
            c.score = score(c.relevance, c.authority, c.observed_at, c.kind, now, review=c.review,
                            fit=fits.get(c.record_id))
        while True:
            winners, overridden = merge_candidates(passed)
            winners.sort(key=lambda c: read_order("key" in c.found_by, c.score, c.observed_at, c.record_id))
            cap = request.k if request.k is not None else len(winners)
            chosen, below = winners[:cap], winners[cap:]
            verdicts = [check(c, *c.stored) for c in chosen]  # every one checked, not up to the first
            if all(verdicts):
                break
            passed = [c for c in passed if c.record_id not in check.refused]
        self._refused(check.refused)
        for c in chosen:
            c.value, c.erased = await self._open(c.row, request.tenant)
        selection = select_within_budget(chosen, request.budget_tokens,
                                         lambda text: tokens.count(text, request.encoding),
                                         functools.partial(render, dated=when is not None))
        picked = [chosen[i] for i in selection.selected]
        cost = dict(zip([c.record_id for c in picked], selection.unit_tokens, strict=True))
        outcome: dict[str, tuple[str, str]] = {c.record_id: ("selected", "") for c in picked}
        outcome.update({chosen[i].record_id: ("over_budget", "") for i in selection.over_budget})
        outcome.update({c.record_id: ("below_k", "") for c in below})
        outcome.update({rid: ("overridden", f"by {winner}") for rid, winner in overridden.items()})
        candidates = []
        for c in sorted(found, key=lambda c: (not c.passed, -c.score, c.record_id)):
            fate, reason = outcome.get(c.record_id, ("gated", ""))
            if fate == "gated":
                reason = "; ".join(f"{g.gate}: {g.reason}" for g in c.gates if not g.passed)
            candidates.append(ReceiptCandidate(
                record_id=c.record_id, key=c.key, found_by=c.found_by, gates=c.gates, outcome=fate,  # type: ignore[arg-type]
                score=round(c.score, 6) if c.passed else None, relevance=round(c.relevance, 6),
                tokens=cost.get(c.record_id), reason=reason))
        created = datetime.now(UTC)
        receipt = ReadReceipt(
            receipt_id=receipt_id(), tenant=request.tenant, caller=caller.agent or "operator", scopes=scopes,
            request=_kept_request(request, marker_key_of(self.settings)), candidates=candidates,
            selected=[c.record_id for c in picked],
            tokens=selection.tokens, budget_tokens=request.budget_tokens,
            latency_ms=round((time.perf_counter() - started) * 1000, 3), created_at=created,
            expires_at=created + timedelta(seconds=self.settings.memory_receipt_ttl_s), task_id=request.task_id)
        data = msgspec.json.encode(receipt)
        keys = keys_of(self.settings)
        await conn.execute(SAVE_SQL, receipt.receipt_id, receipt.tenant, receipt.caller, receipt.task_id,
                           [c.record_id for c in found], created, receipt.expires_at, data,
                           sorted(set(receipt.selected)),
                           receipt_tag(keys.current, keys.mac_key, receipt.receipt_id, receipt.tenant, data))
        metrics.memory_read(receipt)
        items = [item_of(c.row, now, value=c.value, erased=c.erased, score_=round(c.score, 6), review=c.review,
                         tokens_=cost[c.record_id]) for c in picked]
        return ReadReply(ok=True, items=items, receipt=receipt, rendered=selection.rendered)

    async def _open(self, row: RecordRow, tenant: str) -> tuple[Any, bool]:
        """A record's value for a reader (a sealed one opened; ``erased`` once its key is gone)."""
        sealed = row.body.sealed
        if row.status == "forgotten":
            return None, False
        if sealed is None:
            return row.body.value, False
        plain = await unseal(sealed, tenant, ev.MEMORY_TASK, self._keyring())
        if plain is None:
            return None, True
        return msgspec.json.decode(plain), False

    def evict_keys(self, tenant: str, subject: str | None) -> int:
        """Drop the cached data keys of ``subject`` of ``tenant`` (None: all of the tenant's)."""
        return self._keys.evict(tenant, subject) if self._keys is not None else 0

    def _keyring(self) -> Keyring:
        if self._keys is None:
            self._keys = Keyring(self._nc, self.settings.keys_bucket,
                                 kek_of(self.settings, create=False),
                                 cache_bytes=self.settings.key_cache_bytes)
        return self._keys

    # ---- get, history, receipts ----------------------------------------------------------------

    async def get(self, caller: Caller, request: KeyRequest) -> KeyReply:
        skey, key = await self._key_scope(caller, request)
        now = datetime.now(UTC)
        key_of = keys_of(self.settings).mac_key_of
        rows = []
        mark = self._reach.mark()
        for r in await self._pool.fetch(KEY_SQL, request.tenant, skey, self._with_digest(skey, key)):
            row = decode_row(r[0])
            if not record_matches(key_of, request.tenant, r[0], r[1]) or row.scope != skey \
                    or row.ledger_seq < self._reach.reached(mark, request.tenant, row.record_id):
                self._refused({row.record_id: "its bytes fail their integrity tag or are an older version"})
                raise IntegrityViolationError(f"memory record {row.record_id} of tenant {request.tenant}"
                                              " was changed outside the services", where="memory")
            rows.append(row)
        rows.sort(key=lambda r: (r.status != "active", r.record_id))
        items = []
        for row in rows:
            value, erased = await self._open(row, request.tenant)
            items.append(item_of(row, now, value=value, erased=erased))
        return KeyReply(ok=True, records=items)

    async def history(self, caller: Caller, request: KeyRequest) -> KeyReply:
        skey, key = await self._key_scope(caller, request)
        key_of = keys_of(self.settings).mac_key_of
        entries = []
        for r in await self._pool.fetch(HISTORY_SQL, request.tenant, skey, self._with_digest(skey, key)):
            row = tuple(r[:11])
            try:  # a row edited, forged or moved from another tenant is refused, not served
                check_history(key_of, request.tenant, row, r[11])
            except IntegrityViolationError:
                log.error("memory.integrity_violation", where="history", seq=r[1])
                self.integrity_violations += 1
                raise
            entries.append(HistoryEntry(seq=int(r[1]), event=r[2], proposal_id=r[3], record_id=r[4], action=r[7],
                                        reason=r[8] or "", trace=decode_trace(r[9]), at=r[10]))
        return KeyReply(ok=True, history=entries)

    def _with_digest(self, skey: str, key: str) -> list[str]:
        """``key`` and the digest its tombstones are kept under once all its records are forgotten."""
        return [key, tombstone_key(skey, key, marker_key_of(self.settings))]

    async def _key_scope(self, caller: Caller, request: KeyRequest) -> tuple[str, str]:
        bound = await binding_of(self._bindings, caller, request.tenant)
        check_scope(request.scope, bound, "$.scope")
        skey = scope_key(ev.Scope(level=request.scope.level, tenant=request.tenant, id=request.scope.id))
        return skey, await self._canonical_key(request.tenant, skey, request.key)

    async def _canonical_key(self, tenant: str, skey: str, key: str) -> str:
        """The key as a proposal would have been keyed: the first of its canonical forms
        (``core.memory.lookup_keys``: normal form, the lexicon's subject, content words) that
        the scope holds, else its normal form. ``answer language`` finds the
        ``response_language`` record that ``answer in Chinese`` was stored under."""
        forms = lookup_keys(key)
        if len(forms) < 2:  # one form (or none): nothing to choose between
            return forms[0] if forms else normalise_key(key)
        digests = {k: tombstone_key(skey, k, marker_key_of(self.settings)) for k in forms}
        held = {r[0] for r in await self._pool.fetch(KEYS_HELD_SQL, tenant, skey,
                                                     [*forms, *digests.values()])}
        return next((k for k in forms if k in held or digests[k] in held), forms[0])

    async def receipts(self, caller: Caller, request: ReceiptsRequest) -> ReceiptsReply:
        # A tenant agent sees the receipts of its own reads: another agent's may name records of
        # users or projects it is not bound to.
        own = None if caller.is_operator else caller.agent
        rows = await self._pool.fetch(RECEIPTS_SQL, request.tenant, request.task_id, request.record_id,
                                      own, request.before, request.limit + 1)
        key_of = keys_of(self.settings).mac_key_of
        receipts = []
        for r in rows[:request.limit]:
            check_receipt(key_of, r[0], request.tenant, r[1], r[2])
            receipt = _receipt_decoder.decode(r[1])
            if not _listed(receipt, request, own):
                raise IntegrityViolationError(f"read receipt {r[0]} of tenant {request.tenant}: its columns"
                                              " do not match its bytes", where="receipt")
            receipts.append(receipt)
        more = len(rows) > request.limit
        return ReceiptsReply(ok=True, receipts=receipts,
                             next_before=receipts[-1].receipt_id if more and receipts else None)

    async def expire_receipts(self) -> int:
        status = await self._pool.execute(EXPIRE_SQL)
        return int(status.split()[-1])


def _listed(receipt: ReadReceipt, request: ReceiptsRequest, caller: str | None) -> bool:
    """Whether a (verified) receipt is one ``RECEIPTS_SQL`` should have listed for ``request``:
    the filters applied again to its bytes."""
    return (receipt.tenant == request.tenant
            and (request.task_id is None or receipt.task_id == request.task_id)
            and (request.record_id is None or any(c.record_id == request.record_id for c in receipt.candidates))
            and (caller is None or receipt.caller == caller)
            and (request.before is None or receipt.receipt_id < request.before))


class Checked:
    """The integrity check of one read's candidates (``_tampered``); what it refused, by id."""

    def __init__(self, tenant: str, scopes: Sequence[str], key_of: KeyOf, request: ReadRequest,
                 now: datetime, *, reached: Callable[[int, str, str], int], mark: int,
                 enabled: bool = True) -> None:
        self.tenant, self.scopes, self.key_of, self.request, self.now = tenant, scopes, key_of, request, now
        # Off (``AGENTLEDGER_INTEGRITY=false``) only to measure what the check costs a read.
        self.enabled = enabled
        # ``reached(mark, tenant, record_id)``: the newest version committed before the read began.
        self.reached, self.mark = reached, mark
        self.refused: dict[str, str] = {}
        self._passed: set[str] = set()

    def __call__(self, c: Candidate, data: bytes, tag: str | None) -> bool:
        """Whether ``c`` (just found, with the gates PostgreSQL gave it) may be read; if not,
        its gates become one failed ``integrity`` gate, so the receipt says why. A record
        found by several sources is checked once (one statement snapshot each; the bytes of
        one record id do not change within a read unless the projection writes them)."""
        if c.record_id in self.refused:
            return False
        if not self.enabled or c.record_id in self._passed:
            return True
        why = _tampered(c.row, data, tag, tenant=self.tenant, scopes=self.scopes, key_of=self.key_of,
                        gates=c.gates, request=self.request, now=self.now)
        if why is None and c.row.ledger_seq < self.reached(self.mark, self.tenant, c.record_id):
            why = PUT_BACK
        if why is None:
            self._passed.add(c.record_id)
            return True
        self.refused[c.record_id] = why
        c.gates = [GateResult("integrity", False, why)]
        return False


def _kept_request(request: ReadRequest, key: bytes) -> dict[str, Any]:
    """The request as a receipt keeps it: a secret pasted into the query or the purpose is
    replaced by its marker (keyed as the writer's are), as the writer does for events, so no
    receipt ever holds one."""
    kept = msgspec.to_builtins(request)
    for name in ("query", "purpose"):
        if kept.get(name):
            kept[name] = redact_secrets(kept[name], key=key)[0]
    return kept
