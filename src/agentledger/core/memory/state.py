"""The memory reducer: ledger events of the ``_memory`` subject → key groups → record rows.

``apply_memory_event(state, event, seq)`` is what the live projection and a
replay both run. It keeps every key group, re-resolves only the group an event
touched and returns the keys of the groups whose rows changed, so the shell
rewrites just those (``state.rows[group_key]``).

Idempotency: an event id seen before is a no-op; so is a second
``memory_proposed`` or ``memory_decided`` for a proposal id already indexed
(the first one counts), and a feedback mark already given. Feedback for a
record not seen yet is held and applies when the record arrives; promoted
facts have stable ids, so feedback can name one before it exists.

Rows carry what the projection stores: status, why, the record that replaced
it, ``record_version`` (1 + content changes, order-independent) and
``ledger_seq``, the sequence of the event that last changed the row.

Forgetting (``memory_forgotten``, appended by the tombstone-fanout): each
record it names becomes a tombstone of its group (status ``forgotten``, no
value, no source), its feedback and held feedback go, and the group resolves
from what remains. Every row of a group a tombstone touched gets the
tombstone's sequence, so the rows do not depend on which of the forgotten
records' events (erased from the ledger afterwards) were seen before it; and
every later event that names a forgotten record id (its proposal, decision or
feedback) is ignored.

A group left with tombstones only is **buried**: re-keyed by the keyed digest of its key
(``keys.tombstone_key``, with ``state.key_secret``), so no row keeps the key's words (often
its value's). A later decision of the same key finds it by that digest and takes the
tombstones back under the key it names (the words are in that record anyway), so the forget
still holds. ``memory_forgotten`` names each record's key by the digest only.
"""

from __future__ import annotations

from datetime import datetime

import msgspec
from msgspec import Struct

from agentledger.contracts import events as ev
from agentledger.contracts.events import MemoryRecordBody, MemoryStatus, RuleFired
from agentledger.contracts.memory_api import MemoryItem
from agentledger.core.memory.authority import parse_scope_key, promoted_id_for, record_id_for, scope_key
from agentledger.core.memory.keys import is_tombstone_key, tombstone_key
from agentledger.core.memory.resolve import (
    FeedbackMark,
    GroupEntry,
    GroupKey,
    KeyGroup,
    Resolved,
    Tombstone,
    merge_evidence,
    promoted_record,
    resolve,
)

FORGOTTEN = "forgotten"
# Who a tombstone says it comes from (its source's producer): the service that forgets.
FORGET_PRODUCER = "tombstone-fanout"


class RecordRow(Struct, frozen=True, omit_defaults=True):
    """One record as the projection writes it.

    ``body`` is the effective record: a merge winner carries the evidence of the
    records merged into it and the latest observation time. ``authority`` is
    after feedback (a confirm makes it 6; ``body.authority`` is the source's).
    """

    record_id: str
    scope: str
    key: str
    kind: str
    status: MemoryStatus
    authority: int
    body: MemoryRecordBody
    status_reason: str = ""
    superseded_by: str | None = None
    record_version: int = 1
    ledger_seq: int = 0
    proposal_id: str | None = None
    decision_action: str = ""
    decision_reason: str = ""
    merged_from: list[str] = []
    confirmed: bool = False

    # The fields the read gates and the merge look at (``read.Gateable``, ``read.Mergeable``).
    @property
    def expires_at(self) -> datetime | None:
        value: datetime | None = self.body.expires_at
        return value

    @property
    def review_at(self) -> datetime | None:
        value: datetime | None = self.body.review_at
        return value

    @property
    def observed_at(self) -> datetime:
        value: datetime = self.body.observed_at
        return value

    @property
    def subject_version(self) -> int:
        value: int = self.body.subject_version
        return value

    @property
    def schema_version(self) -> int:
        value: int = self.body.schema_version
        return value

    @property
    def sensitivity(self) -> str:
        value: str = self.body.sensitivity
        return value


class DecisionIndex(Struct, frozen=True, omit_defaults=True):
    """A proposal's decision as the idempotency index keeps it (a repeat returns this)."""

    action: str
    reason: str
    seq: int
    record_id: str | None = None
    group: GroupKey | None = None
    trace: list[RuleFired] = []


class MemoryState(Struct):
    """Every key group of a memory ledger and the indexes the reducer needs.

    ``events``: event id → seq; ``proposals``: proposal id → seq of its
    ``memory_proposed``; ``decisions``: proposal id → its decision;
    ``record_groups``: record id (promoted ids included) → group;
    ``pending``: feedback for records not seen yet (a set kept sorted, as a group's, so the
    order it arrived in changes nothing); ``rows``: the rendered rows.
    """

    events: dict[str, int] = {}
    proposals: dict[str, int] = {}
    decisions: dict[str, DecisionIndex] = {}
    groups: dict[GroupKey, KeyGroup] = {}
    record_groups: dict[str, GroupKey] = {}
    pending: dict[str, list[FeedbackMark]] = {}
    rows: dict[GroupKey, dict[str, RecordRow]] = {}
    watermark: int = 0
    # The installation's marker key: what a buried group's key digest is keyed with.
    key_secret: bytes = b""

    def group_for(self, key: GroupKey) -> KeyGroup:
        """The group ``decide`` needs for ``key``: the stored one, or a new empty one (not stored)."""
        return self.groups.get(key) or KeyGroup(key[0], key[1], {}, {})


def apply_memory_event(state: MemoryState, event: ev.EventBase, seq: int) -> set[GroupKey]:
    """Fold one event into ``state`` in place; the keys of the groups whose rows changed."""
    if event.event_id in state.events:
        return set()
    state.events[event.event_id] = seq
    state.watermark = max(state.watermark, seq)
    if isinstance(event, ev.MemoryForgottenEvent):
        return forget_records(state, event, seq).changed
    changed: set[GroupKey] = set()
    if names_forgotten(state, event):
        return changed  # a forgotten record's proposal, decision or feedback: ignored
    if isinstance(event, ev.MemoryProposedEvent):
        state.proposals.setdefault(event.payload.proposal_id, seq)
    elif isinstance(event, ev.MemoryDecidedEvent):
        changed = _decided(state, event.payload, seq)
    elif isinstance(event, ev.MemoryFeedbackEvent):
        changed = _feedback(state, event.payload, seq)
    return changed


def is_forgotten(state: MemoryState, record_id: str) -> bool:
    """Whether ``record_id`` is a tombstone (a forget request reached it)."""
    gk = state.record_groups.get(record_id)
    group = state.groups.get(gk) if gk is not None else None
    return group is not None and record_id in group.forgotten


def names_forgotten(state: MemoryState, event: ev.EventBase) -> bool:
    """Whether ``event`` is a proposal, decision or feedback of a forgotten record (ignored)."""
    p = ev.payload_of(event)
    if isinstance(p, ev.MemoryProposed | ev.MemoryDecided):
        if is_forgotten(state, record_id_for(event.tenant, p.proposal_id)):
            return True
        return (isinstance(p, ev.MemoryDecided) and p.record is not None
                and is_forgotten(state, p.record.record_id))
    if isinstance(p, ev.MemoryFeedback):
        return is_forgotten(state, p.record_id)
    return False


class Forgot(Struct):
    """What folding one ``memory_forgotten`` did: groups rewritten, records newly forgotten
    (id → its group) and the proposals whose records they were."""

    changed: set[GroupKey]
    records: dict[str, GroupKey]
    proposals: set[str]


def forget_records(state: MemoryState, event: ev.MemoryForgottenEvent, seq: int) -> Forgot:
    """Turn every record the event names into a tombstone (one already forgotten stays as it was).

    Nothing here depends on the record's own earlier events beyond removing what they
    left: the tombstone is made of the event alone, and every row of each touched group
    is re-rendered with ``ledger_seq = seq``. A record is found in the group it is known in,
    else in the group whose key has the event's digest (its proposal was erased), else its
    tombstone goes to the buried group of that digest; a group left with tombstones only is
    buried (the module docstring).
    """
    payload = event.payload
    out = Forgot(set(), {}, set())
    by_digest: dict[GroupKey, GroupKey] | None = None
    for fr in payload.records:
        rid = fr.record_id
        if is_forgotten(state, rid) or rid in out.records:
            continue
        scope = scope_key(fr.scope)
        digest = (scope, fr.key_digest or tombstone_key(scope, fr.key, state.key_secret))
        target = state.record_groups.get(rid)
        if target is None or target not in state.groups:
            if by_digest is None:
                by_digest = {(gk[0], tombstone_key(gk[0], gk[1], state.key_secret)): gk
                             for gk in state.groups if not is_tombstone_key(gk[1])}
            target = by_digest.get(digest, digest)
        group = state.groups.get(target)
        if group is not None:
            entry = group.entries.pop(rid, None)
            if entry is not None and entry.proposal_id is not None:
                out.proposals.add(entry.proposal_id)
            group.feedback.pop(rid, None)
        else:
            group = state.groups[target] = KeyGroup(target[0], target[1], {}, {})
        state.pending.pop(rid, None)
        group.forgotten[rid] = Tombstone(fr.kind, seq, event.occurred_at, payload.request_id, fr.active)
        state.record_groups[rid] = target
        out.records[rid] = target
        out.changed.add(target)
    for pid in out.proposals:
        state.decisions.pop(pid, None)
        state.proposals.pop(pid, None)
    _bury_emptied(state, out)
    for gk in out.changed:
        if gk in state.groups:
            state.rows[gk] = {row.record_id: msgspec.structs.replace(row, ledger_seq=seq)
                              for row in render_rows(state.groups[gk])}
    return out


def _bury_emptied(state: MemoryState, out: Forgot) -> None:
    """Bury each changed group left with tombstones only, its records following it."""
    # The records of each group, found once: a subject's forget names thousands, and looking
    # them up again for every buried group made the forget quadratic.
    members: dict[GroupKey, list[str]] = {}
    for rid, gk in out.records.items():
        members.setdefault(gk, []).append(rid)
    for gk in sorted(out.changed):
        group = state.groups[gk]
        if not is_tombstone_key(gk[1]) and not group.entries:
            buried = _bury(state, group)
            out.changed.add(buried)
            out.records.update(dict.fromkeys(members.get(gk, ()), buried))


def _move(state: MemoryState, group: KeyGroup, to: GroupKey) -> KeyGroup:
    """``group``'s tombstones under the key ``to`` (joining the group there); the old key's
    group is gone, and its rows (so a shell drops them)."""
    state.groups.pop(group.group_key, None)
    state.rows.pop(group.group_key, None)
    # Its entries are none (buried) or it is a buried one: its promoted id is all that is left.
    promoted = promoted_id_for(*group.group_key)
    if state.record_groups.get(promoted) == group.group_key:
        del state.record_groups[promoted]
    there = state.groups.get(to)
    if there is None:
        there = state.groups[to] = KeyGroup(to[0], to[1], {}, {})
    there.forgotten.update(group.forgotten)
    for rid in group.forgotten:
        state.record_groups[rid] = to
    return there


def _bury(state: MemoryState, group: KeyGroup) -> GroupKey:
    """Re-key a group of tombstones only by its key's digest; the buried group's key. Feedback
    it kept for records not in it (its promoted fact's) is held again, as it would be had the
    forgotten records' events never been seen (a fold after their erasure)."""
    to = (group.scope, tombstone_key(group.scope, group.key, state.key_secret))
    for rid, marks in group.feedback.items():
        held = state.pending.setdefault(rid, [])
        held.extend(m for m in marks if m not in held)
        held.sort()
    group.feedback.clear()
    _move(state, group, to)
    return to


def unearth(state: MemoryState, gk: GroupKey) -> set[GroupKey]:
    """Before a record of key ``gk`` joins it: the tombstones buried under its digest come back
    under ``gk``; the group keys whose rows that changed (none when nothing was buried)."""
    if gk in state.groups or is_tombstone_key(gk[1]):
        return set()
    buried = state.groups.get((gk[0], tombstone_key(gk[0], gk[1], state.key_secret)))
    if buried is None:
        return set()
    group = _move(state, buried, gk)
    _register(state, promoted_id_for(*gk), group)
    return {buried.group_key, gk}


def tombstone_row(group: KeyGroup, record_id: str, tomb: Tombstone) -> RecordRow:
    """A forgotten record's row: its id, scope, key and kind; nothing of its value or source.

    The placeholders are the most restrictive a read gate knows (lowest authority,
    personal, expired when forgotten), so even a read that ignored the status would
    pass it by; it is in neither search index (``search_text`` is None).
    """
    body = MemoryRecordBody(
        record_id=record_id, key=group.key, kind=tomb.kind, scope=parse_scope_key(group.scope),
        source=ev.MemorySource(kind="runtime_evidence", ref=f"forget:{tomb.request_id}",
                               producer=FORGET_PRODUCER),
        authority=1, sensitivity="personal", observed_at=tomb.at, expires_at=tomb.at)
    return RecordRow(record_id=record_id, scope=group.scope, key=group.key, kind=tomb.kind, status=FORGOTTEN,
                     authority=1, body=body, status_reason=FORGOTTEN, decision_action="forget",
                     decision_reason=tomb.request_id)


def _decided(state: MemoryState, decision: ev.MemoryDecided, seq: int) -> set[GroupKey]:
    if decision.proposal_id in state.decisions:
        return set()
    record = decision.record
    gk = (scope_key(record.scope), record.key) if record is not None else None
    state.decisions[decision.proposal_id] = DecisionIndex(
        decision.action, decision.reason, seq, record.record_id if record else None, gk, list(decision.trace))
    if record is None or gk is None or record.record_id in state.record_groups:
        return set()
    moved = unearth(state, gk)
    group = state.groups.get(gk)
    if group is None:
        group = state.groups[gk] = KeyGroup(gk[0], gk[1], {}, {})
        _register(state, promoted_id_for(gk[0], gk[1]), group)
    group.entries[record.record_id] = GroupEntry(record, decision.action, decision.reason,
                                                 decision.proposal_id, seq)
    _register(state, record.record_id, group)
    return _refresh(state, group, seq) | moved


def _register(state: MemoryState, record_id: str, group: KeyGroup) -> None:
    state.record_groups[record_id] = group.group_key
    for mark in state.pending.pop(record_id, []):
        group.add_feedback(record_id, mark)


def _feedback(state: MemoryState, feedback: ev.MemoryFeedback, seq: int) -> set[GroupKey]:
    mark = FeedbackMark(feedback.action, feedback.actor, feedback.reason)
    gk = state.record_groups.get(feedback.record_id)
    if gk is None:
        held = state.pending.setdefault(feedback.record_id, [])
        if mark not in held:
            held.append(mark)
            held.sort()  # a set, in one order whatever the order it came in (as a group's)
        return set()
    group = state.groups[gk]
    if not group.add_feedback(feedback.record_id, mark):
        return set()
    return _refresh(state, group, seq)


def _refresh(state: MemoryState, group: KeyGroup, seq: int) -> set[GroupKey]:
    rows, changed = update_rows(state.rows.get(group.group_key, {}), group, seq)
    state.rows[group.group_key] = rows
    return {group.group_key} if changed else set()


def update_rows(previous: dict[str, RecordRow], group: KeyGroup,
                seq: int) -> tuple[dict[str, RecordRow], list[str]]:
    """The group's rows after an event at ``seq``, and the ids of the rows that changed.

    A row whose content did not change keeps its ``ledger_seq``; a changed or
    new one gets ``seq``. Use it to keep a group's rows without ``MemoryState``.
    """
    rows: dict[str, RecordRow] = {}
    changed: list[str] = []
    for row in render_rows(group):
        old = previous.get(row.record_id)
        if old is not None and msgspec.structs.replace(old, ledger_seq=0) == row:
            rows[row.record_id] = old
        else:
            rows[row.record_id] = msgspec.structs.replace(row, ledger_seq=seq)
            changed.append(row.record_id)
    return rows, changed


def render_rows(group: KeyGroup, resolved: dict[str, Resolved] | None = None) -> list[RecordRow]:
    """The group's records as rows (``ledger_seq`` 0), ordered by record id.

    The promoted fact, when the group has one, is a row too
    (``decision_action`` ``promote``, no proposal); so is each tombstone.
    """
    states = resolve(group) if resolved is None else resolved
    entries = dict(group.entries)
    promoted = promoted_id_for(group.scope, group.key)
    if promoted in states and promoted not in entries:
        entry = promoted_record(group, states)
        if entry is not None:
            entries[promoted] = entry
    rows = []
    for rid in sorted(states):
        entry, st = entries[rid], states[rid]
        body = entry.record
        if st.merged:
            merged = [entries[m].record for m in st.merged]
            body = msgspec.structs.replace(
                body, evidence=merge_evidence([body.evidence, *(m.evidence for m in merged)]),
                observed_at=max([body.observed_at, *(m.observed_at for m in merged)]))
        marks = group.feedback.get(rid, [])
        rows.append(RecordRow(
            record_id=rid, scope=group.scope, key=group.key, kind=body.kind, status=st.status,
            authority=st.authority, body=body, status_reason=st.reason, superseded_by=st.superseded_by,
            record_version=st.record_version, proposal_id=entry.proposal_id, decision_action=entry.action,
            decision_reason=entry.reason, merged_from=list(st.merged),
            confirmed=any(m.action == "confirm" for m in marks)))
    if group.forgotten:
        rows.extend(tombstone_row(group, rid, t) for rid, t in group.forgotten.items() if rid not in states)
        rows.sort(key=lambda r: r.record_id)
    return rows


_UNSET: object = object()


def item_of(row: RecordRow, now: datetime, *, value: object = _UNSET, erased: bool = False) -> MemoryItem:
    """A row as a reader sees it. ``value``: the opened value of a sealed row (default: the body's)."""
    body = row.body
    return MemoryItem(
        record_id=row.record_id, key=row.key, kind=row.kind, scope=row.scope, status=row.status,
        authority=row.authority, sensitivity=body.sensitivity, source=body.source.kind,
        observed_at=body.observed_at, value=body.value if value is _UNSET else value, erased=erased,
        subject_version=body.subject_version, record_version=row.record_version, expires_at=body.expires_at,
        review_at=body.review_at, needs_review=body.review_at is not None and body.review_at <= now,
        supersedes=list(body.supersedes), superseded_by=row.superseded_by, promoted_from=list(body.promoted_from),
        status_reason=row.status_reason, ledger_seq=row.ledger_seq)
