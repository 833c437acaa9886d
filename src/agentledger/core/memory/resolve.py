"""The resolution of a key group: which of its records is active, from the whole set.

A group is every record with one scope and canonical key. Its statuses are a
function of the *set* of decisions and feedback it holds, never of their
order, so a replay, a live projection and a second projector that saw events
in another order all agree (property-tested).

Within a group, records compete per *subject*: one per kind, and for the
episodic kinds (``task_result``, ``diagnostic``) one per kind and origin task,
since two tasks' observations are not rival values of one fact. In a subject:

1. a ``revoke`` makes its record ``revoked``; a record of the same value and
   less than user authority is ``superseded`` (``revoked_value``), so a revoked
   value never comes back from a lower authority;
2. a gate-quarantined record (its decision was ``quarantine`` for a rule such
   as ``instruction_in_data``) stays ``quarantined`` unless a user confirms it;
3. a ``confirm`` lifts a record to authority 6; a revoke beats a confirm;
4. the rest rank by (authority, subject version); the top class is the records
   of the highest authority and, among them, the highest subject version.
   Lower authority never supersedes higher, whatever its time or version.
   In the top class:

   - version 1 (the default: no version claimed): the newest observation wins.
     Only records observed at that very same time compete; several values
     there are a tie;
   - an explicit version (2 or more): every record of it competes, so two
     values both claiming version 5 are a tie, however far apart in time.

   One value wins: the records of that value observed after every other
   value's record in the class (its current run) merge into the earliest of
   them, which is ``active``; every other record is ``superseded``
   (``outranked``). A tie: the competing records are all ``quarantined``
   (``needs_clarification``) and the rest ``superseded``.

Promotion: in a project scope, when at least ``PROMOTION_THRESHOLD`` active
``task_result`` records from distinct origin tasks agree on a value, the group
holds one more record, a ``fact`` with a stable id, ``promoted_from`` those
records and the least authority among them; it then competes with the facts.

Forgetting: a group also keeps the *tombstones* of its records that a forget
request reached (``memory_forgotten``): they are in no subject and compete with
nothing, and a forgotten promoted fact is never promoted again. A tombstone
holds only what the forget event itself says (id, kind, whether the record was
active, the event's sequence, time and request id), so a group resolves the same
whether or not the forgotten records' own (erased) events were ever seen. A
forget holds: once the *active* record of a kind was forgotten, every record of
that kind in the group below user-confirmed authority is ``superseded``
(``forgotten_key``), before the forget or after it: the value it had superseded
does not come back, and neither does a lower source's next proposal of the key.
A user's confirmed statement (authority 6) may set it again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime
from typing import Literal

import msgspec
from msgspec import Struct

from agentledger.contracts.events import ArtifactRef, DecisionAction, MemoryKind, MemoryRecordBody, MemoryStatus
from agentledger.core.memory.authority import (
    CONFIRMED_AUTHORITY,
    INFERENCE_REVIEW,
    KIND_RULES,
    LOW_AUTHORITY,
    SENSITIVITY_RANK,
    parse_scope_key,
    promoted_id_for,
)
from agentledger.core.memory.keys import value_identity

PROMOTION_THRESHOLD = 3
# The subject version a proposal has when it claims none (the contracts' default).
UNVERSIONED = 1
PROMOTE_ACTION = "promote"
# A decision quarantined for a tie stays a candidate: a confirm or a higher authority settles it.
TIE_REASON = "needs_clarification"
# Why a record below user authority is not active where its kind's active record was forgotten.
FORGOTTEN_KEY = "forgotten_key"

GroupKey = tuple[str, str]


class GroupEntry(Struct, frozen=True, omit_defaults=True):
    """One decided record of a group, with the decision that admitted it.

    ``action`` is the decision's (``quarantine`` marks a gate quarantine);
    ``seq`` is the ledger sequence of the decision event.
    """

    record: MemoryRecordBody
    action: DecisionAction | Literal["promote"]
    reason: str
    proposal_id: str | None = None
    seq: int = 0


class FeedbackMark(Struct, frozen=True, omit_defaults=True, order=True):
    """A confirm or revoke a user (or an operator for one) gave a record."""

    action: Literal["confirm", "revoke"]
    actor: str
    reason: str = ""


class Tombstone(Struct, frozen=True, omit_defaults=True):
    """A record a forget request reached: all that is left of it (no value, no source).

    ``seq`` / ``at`` are the ``memory_forgotten`` event's ledger sequence and time,
    ``request_id`` the forget request's id.
    """

    kind: MemoryKind
    seq: int
    at: datetime
    request_id: str
    active: bool = False


class KeyGroup(Struct, omit_defaults=True):
    """Every record of one (scope, canonical key), and the feedback given to them.

    ``scope`` is a ``scope_key``. ``feedback`` may name records not (yet) in the
    group, such as the promoted fact before enough episodes agree: it applies
    once they are. ``forgotten``: the tombstones of records forgotten from the
    group (never entries again). It encodes to JSON, so a shell may keep a group
    in one row.
    """

    scope: str
    key: str
    entries: dict[str, GroupEntry] = {}
    feedback: dict[str, list[FeedbackMark]] = {}
    forgotten: dict[str, Tombstone] = {}

    @property
    def group_key(self) -> GroupKey:
        return (self.scope, self.key)

    def with_entry(self, entry: GroupEntry) -> KeyGroup:
        """A copy holding one more record (what ``decide`` resolves before it decides)."""
        return KeyGroup(self.scope, self.key, {**self.entries, entry.record.record_id: entry},
                        dict(self.feedback), dict(self.forgotten))

    def add_feedback(self, record_id: str, mark: FeedbackMark) -> bool:
        """Record a mark; ``False`` if the same mark was there (feedback is a set)."""
        marks = self.feedback.setdefault(record_id, [])
        if mark in marks:
            return False
        marks.append(mark)
        marks.sort()
        return True


class Resolved(Struct, frozen=True, omit_defaults=True):
    """The status of one record in its group, and why.

    ``authority``: after a confirm; ``merged``: the records merged into this one
    (its evidence is theirs too); ``record_version`` is 1 plus the times its
    content changed (a merge, one more promoted episode).
    """

    status: MemoryStatus
    authority: int
    reason: str = ""
    superseded_by: str | None = None
    record_version: int = 1
    merged: tuple[str, ...] = ()


def resolve(group: KeyGroup) -> dict[str, Resolved]:
    """The status of every record of the group, the promoted fact included."""
    subjects: dict[tuple[str, str | None], list[GroupEntry]] = defaultdict(list)
    for entry in group.entries.values():
        subjects[_subject(entry.record)].append(entry)
    # An episodic kind's subjects are one per origin task: one task's forgotten observation
    # holds back no other task's.
    held = {t.kind for t in group.forgotten.values() if t.active and not KIND_RULES[t.kind].episodic}
    out: dict[str, Resolved] = {}
    for subject in sorted(subjects, key=lambda s: (s[0], s[1] or "")):
        if subject[0] != "fact":
            out.update(_resolve_subject(subjects[subject], group.feedback, held=subject[0] in held))
    promoted = promoted_record(group, out)
    facts = subjects.get(("fact", None), [])
    if promoted is not None:
        facts = [*facts, promoted]
    out.update(_resolve_subject(facts, group.feedback, held="fact" in held))
    return out


def promoted_record(group: KeyGroup, resolved: dict[str, Resolved]) -> GroupEntry | None:
    """The fact the group's agreeing episodes promote to, if they reach the threshold.

    ``resolved`` holds the statuses of the group's ``task_result`` records.
    """
    if not group.scope.startswith("project/") or promoted_id_for(group.scope, group.key) in group.forgotten:
        return None
    agreeing: dict[str, list[GroupEntry]] = defaultdict(list)
    for entry in group.entries.values():
        rec = entry.record
        state = resolved.get(rec.record_id)
        if rec.kind == "task_result" and rec.origin_task and state is not None and state.status == "active":
            agreeing[value_identity(rec.value, rec.sealed, rec.value_digest)].append(entry)
    counts = {value: len({e.record.origin_task for e in es}) for value, es in agreeing.items()}
    best = max(counts.values(), default=0)
    winners = [value for value, n in counts.items() if n == best]
    if best < PROMOTION_THRESHOLD or len(winners) != 1:
        return None
    episodes = sorted(agreeing[winners[0]], key=lambda e: (e.record.observed_at, e.record.record_id))
    weakest = min(episodes, key=lambda e: (resolved[e.record.record_id].authority, e.record.record_id))
    authority = resolved[weakest.record.record_id].authority
    first, observed = episodes[0].record, max(e.record.observed_at for e in episodes)
    body = MemoryRecordBody(
        record_id=promoted_id_for(group.scope, group.key), key=group.key, kind="fact",
        scope=parse_scope_key(group.scope), source=weakest.record.source, authority=authority,
        sensitivity=max((e.record.sensitivity for e in episodes), key=SENSITIVITY_RANK.__getitem__),
        observed_at=observed, value=first.value, sealed=first.sealed,
        subject_version=max(e.record.subject_version for e in episodes), specificity=first.specificity,
        review_at=observed + INFERENCE_REVIEW if authority <= LOW_AUTHORITY else None,
        evidence=merge_evidence(e.record.evidence for e in episodes),
        promoted_from=sorted(e.record.record_id for e in episodes))
    return GroupEntry(body, PROMOTE_ACTION, "promoted", seq=max(e.seq for e in episodes))


def merge_evidence(lists: Iterable[list[ArtifactRef]]) -> list[ArtifactRef]:
    """The union of evidence lists, in a canonical order."""
    seen = {(a.uri, a.blake3): a for refs in lists for a in refs}
    return [seen[k] for k in sorted(seen)]


def _subject(record: MemoryRecordBody) -> tuple[str, str | None]:
    episodic = KIND_RULES[record.kind].episodic
    return (record.kind, record.origin_task if episodic else None)


def _resolve_subject(entries: list[GroupEntry], feedback: dict[str, list[FeedbackMark]], *,
                     held: bool = False) -> dict[str, Resolved]:
    """Statuses of one subject's records; ``held``: its active record was forgotten."""
    out: dict[str, Resolved] = {}
    live = _triage(entries, feedback, out)
    if held:
        live = _held_back(live, out)
    if not live:
        return out
    top_class = max((a, e.record.subject_version) for e, a in live)
    klass = [(e, a) for e, a in live if (a, e.record.subject_version) == top_class]
    if top_class[1] > UNVERSIONED:
        contenders = klass  # one explicit version: every value of it claims to be that version
    else:
        newest = max(_observed(e.record) for e, _ in klass)
        contenders = [(e, a) for e, a in klass if _observed(e.record) == newest]
    if len({_identity(e) for e, _ in contenders}) > 1:
        for entry, authority in live:
            out[entry.record.record_id] = (Resolved("quarantined", authority, TIE_REASON)
                                           if (entry, authority) in contenders
                                           else Resolved("superseded", authority, "outranked_by_tie"))
        return out
    value = _identity(contenders[0][0])
    # The winning value's current run: its records newer than any other value's in the class
    # (a value said again after another one replaced it starts a new run).
    other = [_observed(e.record) for e, _ in klass if _identity(e) != value]
    run = [(e, a) for e, a in klass if _identity(e) == value and (not other or _observed(e.record) > max(other))]
    winner, winner_authority = min(run, key=lambda ea: (_observed(ea[0].record), ea[0].record.record_id))
    wid = winner.record.record_id
    in_run = {e.record.record_id for e, _ in run}
    merged: list[str] = []
    for entry, authority in live:
        rid = entry.record.record_id
        if rid == wid:
            continue
        if rid in in_run:
            merged.append(rid)
            out[rid] = Resolved("superseded", authority, f"merged_into:{wid}", wid)
        else:
            out[rid] = Resolved("superseded", authority, "outranked", wid)
    version = 1 + len(merged)
    if winner.action == PROMOTE_ACTION:
        version += len(winner.record.promoted_from) - PROMOTION_THRESHOLD
    out[wid] = Resolved("active", winner_authority, "", None, version, tuple(sorted(merged)))
    return out


def _triage(entries: list[GroupEntry], feedback: dict[str, list[FeedbackMark]],
            out: dict[str, Resolved]) -> list[tuple[GroupEntry, int]]:
    """Settle revoked, gate-quarantined and revoked-value records in ``out``; the rest compete.

    Returns the competing records with their authority after feedback.
    """
    candidates: list[tuple[GroupEntry, int]] = []
    revoked: dict[str, str] = {}
    for entry in entries:
        rid = entry.record.record_id
        marks = feedback.get(rid, [])
        confirmed = any(m.action == "confirm" for m in marks)
        authority = CONFIRMED_AUTHORITY if confirmed else entry.record.authority
        if any(m.action == "revoke" for m in marks):
            out[rid] = Resolved("revoked", authority, "revoked")
            value = _identity(entry)
            revoked[value] = min(revoked.get(value, rid), rid)
        elif is_gated(entry) and not confirmed:
            out[rid] = Resolved("quarantined", authority, entry.reason)
        else:
            candidates.append((entry, authority))
    live: list[tuple[GroupEntry, int]] = []
    for entry, authority in candidates:
        by = revoked.get(_identity(entry))
        if by is not None and authority < CONFIRMED_AUTHORITY:
            out[entry.record.record_id] = Resolved("superseded", authority, "revoked_value", by)
        else:
            live.append((entry, authority))
    return live


def _held_back(live: list[tuple[GroupEntry, int]],
               out: dict[str, Resolved]) -> list[tuple[GroupEntry, int]]:
    """Where the subject's active record was forgotten: only user-confirmed records compete;
    the others are settled ``superseded`` (``forgotten_key``) in ``out``."""
    for entry, authority in live:
        if authority < CONFIRMED_AUTHORITY:
            out[entry.record.record_id] = Resolved("superseded", authority, FORGOTTEN_KEY)
    return [(e, a) for e, a in live if a >= CONFIRMED_AUTHORITY]


def is_gated(entry: GroupEntry) -> bool:
    """Quarantined by a gate of the write path (not by a tie): out until a user confirms it."""
    return entry.action == "quarantine" and entry.reason != TIE_REASON


def _identity(entry: GroupEntry) -> str:
    return value_identity(entry.record.value, entry.record.sealed, entry.record.value_digest)


def _observed(record: MemoryRecordBody) -> datetime:
    observed: datetime = record.observed_at
    return observed


def encode_group(group: KeyGroup) -> bytes:
    """A group as JSON: entries and feedback in a canonical order."""
    canonical = KeyGroup(group.scope, group.key, dict(sorted(group.entries.items())),
                         {k: sorted(v) for k, v in sorted(group.feedback.items())},
                         dict(sorted(group.forgotten.items())))
    return msgspec.json.encode(canonical)


def decode_group(data: bytes) -> KeyGroup:
    return msgspec.json.decode(data, type=KeyGroup)
