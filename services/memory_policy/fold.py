"""Memory events → rows: the one place the live projection and replay turn events into writes.

The reducer (``core.memory.state``) folds events into key groups and renders
their record rows. This module adds what the projection stores besides:
a history row per new event, and for every record row that is written its
search text and embedding (computed here, by the configured embedder, so a
replay computes the same vectors). A personal record gets neither: it is
found by exact key only, and destroying its subject's key leaves no plaintext
in an index. Nor does a tombstone (a forgotten record).

A ``memory_forgotten`` event's history is one row of its own plus one per
record it forgot; the history rows of the forgotten records' own events are
dropped (from the batch and from the table), and a later event naming a
forgotten record leaves no history row, as it changes nothing.

``load_state`` reads back from PostgreSQL exactly the part of a tenant's
memory state that a batch of its events can touch (the events' ids, their
proposals' decisions, their groups and rows, held feedback), so the live
projection never holds a tenant's whole state in memory.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from agentledger.contracts import events as ev
from agentledger.core.memory.authority import promoted_id_for, record_id_for, scope_key
from agentledger.core.memory.keys import is_tombstone_key, key_repeats_value, text_of, tombstone_key
from agentledger.core.memory.resolve import FeedbackMark, GroupKey, KeyGroup, decode_group, encode_group
from agentledger.core.memory.state import (
    FORGOTTEN,
    DecisionIndex,
    MemoryState,
    RecordRow,
    apply_memory_event,
    forget_records,
    names_forgotten,
)
from agentledger.models.embedding import Embedder
from agentledger.security.integrity_keys import IntegrityKeys
from agentledger.services.memory_policy.store import HistoryRow, MemoryStore, RecordWrite
from agentledger.shell.bounded import ByteLRU

_mark_decoder = msgspec.json.Decoder(FeedbackMark)
# Embeddings kept per text (a status change rewrites a row with the same text).
EMBED_CACHE_BYTES = 8 << 20


# The derivation ``search_text`` implements, stored with each row's index (``index_version``).
# Raise it whenever ``search_text`` would give a stored record another text: rows of an older
# derivation are derived again when the projection starts (``reindex``). 1: the key's words and
# the value's text; 2: the value's text alone when the key only repeats its words; 3: the
# full-text vector made with ``store.TEXT_CONFIG`` (English stemming and stop words), not ``simple``.
INDEX_TEXT_VERSION = 3


def search_text(row: RecordRow) -> str | None:
    """What full-text and vector search see of a record: its key's words and its value's text,
    the value's text alone when every word of the key is one of its words (a key derived from
    the content words: indexed again, they would count twice in BM25's term frequencies, and
    the first eight of them in alphabetical order are not the record's most telling).

    None for a personal or sealed record: it is in neither index.
    """
    body = row.body
    if row.status == FORGOTTEN or body.sensitivity == "personal" or body.sealed is not None:
        return None
    words = row.key.replace("_", " ")
    text = text_of(body.value) if body.value is not None else ""
    if text and key_repeats_value(row.key, body.value):
        return text
    return f"{words}\n{text}" if text else words


def history_row(event: ev.EventBase, seq: int) -> HistoryRow | None:
    """The history row of one memory event (None: not a memory event)."""
    p = ev.payload_of(event)
    at = event.occurred_at
    if isinstance(p, ev.MemoryProposed):
        # A proposal's row keeps its fingerprint where a decision keeps its reason: what tells
        # a repeat of the proposal from its id used again (``propose._check_reuse``).
        return HistoryRow(event.event_id, seq, "memory_proposed", p.proposal_id, None,
                          scope_key(p.scope), None, None, p.fingerprint or "", None, at)
    if isinstance(p, ev.MemoryDecided):
        rec = p.record
        return HistoryRow(event.event_id, seq, "memory_decided", p.proposal_id,
                          rec.record_id if rec else None, scope_key(rec.scope) if rec else None,
                          rec.key if rec else None, p.action, p.reason, list(p.trace), at)
    if isinstance(p, ev.MemoryFeedback):
        return HistoryRow(event.event_id, seq, "memory_feedback", None, p.record_id, None, None,
                          p.action, p.reason, None, at)
    if isinstance(p, ev.MemoryForgotten):
        return HistoryRow(event.event_id, seq, "memory_forgotten", None, None, None, None, "forget",
                          p.request_id, None, at)
    return None


def tombstone_history(event: ev.EventBase, seq: int, record_id: str, group: GroupKey) -> HistoryRow:
    """The history row of one record a ``memory_forgotten`` event forgot (shown in its key's history)."""
    p = ev.payload_of(event)
    assert isinstance(p, ev.MemoryForgotten)
    return HistoryRow(f"{event.event_id}/{record_id}", seq, "memory_forgotten", None, record_id, group[0],
                      group[1], "forget", p.request_id, None, event.occurred_at)


class Vectors:
    """The embedder, with the vectors of recent texts kept (same text, same vector)."""

    def __init__(self, embedder: Embedder) -> None:
        self.embedder = embedder
        self._cache: ByteLRU[str, list[float]] = ByteLRU(EMBED_CACHE_BYTES)

    def clear(self) -> int:
        """Drop every kept vector (their keys are record and query texts); how many."""
        n = len(self._cache)
        self._cache.clear()
        return n

    async def of(self, texts: Sequence[str]) -> list[list[float]]:
        missing = sorted({t for t in texts if self._cache.get(t) is None})
        if missing:
            for text, vector in zip(missing, await self.embedder.embed(missing), strict=True):
                self._cache.put(text, vector, len(text) + 8 * len(vector) + 64)
        out = []
        for t in texts:
            got = self._cache.get(t)
            if got is None:  # evicted by this very call (a batch larger than the cache)
                got = (await self.embedder.embed([t]))[0]
            out.append(got)
        return out


async def record_writes(rows: Iterable[RecordRow], vectors: Vectors) -> list[RecordWrite]:
    """The rows with their search text and embedding."""
    listed = list(rows)
    texts = [search_text(r) for r in listed]
    wanted = [t for t in texts if t is not None]
    embedded = iter(await vectors.of(wanted)) if wanted else iter(())
    return [RecordWrite(r, t, next(embedded) if t is not None else None, INDEX_TEXT_VERSION)
            for r, t in zip(listed, texts, strict=True)]


@dataclass
class Loaded:
    """The part of one tenant's memory state a batch needs, as read back, and what it was."""

    state: MemoryState
    rows_before: dict[GroupKey, dict[str, RecordRow]]
    held_ids: set[str] = field(default_factory=set)


def _touches(events: Sequence[tuple[int, ev.EventBase]],
             secret: bytes) -> tuple[list[str], list[str], set[GroupKey]]:
    """Proposal ids decided, record ids named (a proposal's own included, to see whether it was
    forgotten) and groups decided or forgotten into by ``events``: a decided key's digest too
    (its buried tombstones), a forgotten record's key by its digest only."""
    proposals, records, groups = [], [], set()
    for _, event in events:
        p = ev.payload_of(event)
        if isinstance(p, ev.MemoryProposed):
            records.append(record_id_for(event.tenant, p.proposal_id))
        elif isinstance(p, ev.MemoryDecided):
            proposals.append(p.proposal_id)
            records.append(record_id_for(event.tenant, p.proposal_id))
            if p.record is not None:
                records.append(p.record.record_id)
                scope = scope_key(p.record.scope)
                groups |= {(scope, p.record.key), (scope, tombstone_key(scope, p.record.key, secret))}
        elif isinstance(p, ev.MemoryFeedback):
            records.append(p.record_id)
        elif isinstance(p, ev.MemoryForgotten):
            for fr in p.records:
                records.append(fr.record_id)
                scope = scope_key(fr.scope)
                groups.add((scope, fr.key_digest or tombstone_key(scope, fr.key, secret)))
    return proposals, records, groups


async def load_state(conn: Any, store: MemoryStore, tenant: str,
                     events: Sequence[tuple[int, ev.EventBase]], secret: bytes) -> Loaded:
    """What the reducer needs to fold ``events`` (of ``tenant``) as if it held the whole state;
    ``secret`` keys the digests of buried keys (``state.key_secret``)."""
    proposals, records, groups = _touches(events, secret)
    state = MemoryState(events=await store.seen_events(conn, tenant, [e.event_id for _, e in events]),
                        key_secret=secret)
    for pid, d in (await store.decisions(conn, tenant, proposals)).items():
        group = (d.scope_key, d.key) if d.scope_key is not None and d.key is not None else None
        state.decisions[pid] = DecisionIndex(d.action, d.reason, d.seq, d.record_id, group, d.trace)
    known = await store.record_groups(conn, tenant, records)
    state.record_groups.update(known)
    keys = sorted(groups | set(known.values()))
    stored, rows = await store.groups(conn, tenant, keys)
    for gk, data in stored.items():
        state.groups[gk] = decode_group(data)
    keys = sorted(set(keys) | set(stored))
    rows_before: dict[GroupKey, dict[str, RecordRow]] = {}
    for row in rows:
        rows_before.setdefault((row.scope, row.key), {})[row.record_id] = row
    state.rows = {gk: dict(rs) for gk, rs in rows_before.items()}
    held_ids = set(records) | {promoted_id_for(*gk) for gk in keys}
    for rid, marks in (await store.held(conn, tenant, sorted(held_ids))).items():
        state.pending[rid] = [_mark_decoder.decode(m) for m in marks]
    return Loaded(state, rows_before, held_ids)


@dataclass
class Folded:
    """What folding a batch into a loaded state changed, ready to write."""

    history: list[HistoryRow] = field(default_factory=list)
    groups: set[GroupKey] = field(default_factory=set)
    changed: set[GroupKey] = field(default_factory=set)
    # Records forgotten by this batch, and their proposals: their older history goes.
    forgotten: set[str] = field(default_factory=set)
    forgotten_proposals: set[str] = field(default_factory=set)


def _forget(state: MemoryState, event: ev.MemoryForgottenEvent, seq: int, out: Folded) -> None:
    state.events[event.event_id] = seq
    state.watermark = max(state.watermark, seq)
    forgot = forget_records(state, event, seq)
    records, proposals = set(forgot.records), forgot.proposals
    out.history = [h for h in out.history if h.event == "memory_forgotten"
                   or not (h.record_id in records or h.proposal_id in proposals)]
    row = history_row(event, seq)
    assert row is not None
    out.history.append(row)
    out.history.extend(tombstone_history(event, seq, rid, gk) for rid, gk in sorted(forgot.records.items()))
    out.forgotten |= records
    out.forgotten_proposals |= proposals
    out.changed |= forgot.changed
    out.groups |= forgot.changed


def fold(state: MemoryState, events: Sequence[tuple[int, ev.EventBase]], out: Folded | None = None) -> Folded:
    """Apply ``events`` (in ledger order) with the reducer; note history and touched groups."""
    out = out or Folded()
    for seq, event in events:
        if event.event_id in state.events:
            continue
        if isinstance(event, ev.MemoryForgottenEvent):
            _forget(state, event, seq, out)
            continue
        if names_forgotten(state, event):
            state.events[event.event_id] = seq  # changes nothing, and leaves no history
            continue
        row = history_row(event, seq)
        if row is not None:
            out.history.append(row)
        before = set(state.groups)
        out.changed |= apply_memory_event(state, event, seq)
        p = ev.payload_of(event)
        if isinstance(p, ev.MemoryDecided) and p.record is not None:
            out.groups.add((scope_key(p.record.scope), p.record.key))
        elif isinstance(p, ev.MemoryFeedback):
            gk = state.record_groups.get(p.record_id)
            if gk is not None:
                out.groups.add(gk)
        out.groups |= set(state.groups) - before
    return out


def encode_marks(marks: list[FeedbackMark]) -> list[bytes]:
    return [msgspec.json.encode(m) for m in marks]


async def write_loaded(conn: Any, store: MemoryStore, tenant: str, loaded: Loaded, *, folded: Folded,
                       vectors: Vectors, keys: IntegrityKeys) -> int:
    """Write what ``folded`` changed in ``loaded``: groups, changed rows, history, held feedback.

    Returns the number of record rows written.
    """
    state = loaded.state
    await store.put_history(conn, tenant, folded.history, keys)
    await store.drop_history(conn, tenant, folded.forgotten, folded.forgotten_proposals)
    touched = sorted(folded.groups | folded.changed)
    await store.drop_groups(conn, tenant, [gk for gk in touched if gk not in state.groups])
    await store.put_groups(conn, tenant, [
        (gk[0], gk[1], promoted_id_for(*gk), group_seq(state.groups[gk]), encode_group(state.groups[gk]),
         gk[1] if is_tombstone_key(gk[1]) else tombstone_key(gk[0], gk[1], state.key_secret))
        for gk in touched if gk in state.groups])
    written: list[RecordRow] = []
    dropped: list[str] = []
    for gk in sorted(folded.changed | folded.groups):
        before = loaded.rows_before.get(gk, {})
        after = state.rows.get(gk, {})
        written.extend(row for rid, row in sorted(after.items()) if before.get(rid) != row)
        dropped.extend(rid for rid in sorted(before) if rid not in after)
    await store.drop_records(conn, tenant, dropped)
    await store.put_records(conn, tenant, await record_writes(written, vectors), keys)
    pending = {rid: encode_marks(marks) for rid, marks in state.pending.items()}
    await store.replace_held(conn, tenant, pending, loaded.held_ids | set(state.pending) | folded.forgotten)
    return len(written)


def group_seq(group: KeyGroup) -> int:
    """The group row's ``seq``: the latest decision or tombstone in it."""
    return max([*(e.seq for e in group.entries.values()), *(t.seq for t in group.forgotten.values())],
               default=0)
