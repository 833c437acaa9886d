"""Working Memory's meaning of a ledger message: decode it, fold it into a task's state.

``decode_message`` and ``fold_event`` are the one place that turns a ledger
message into a state change: the live projector (``lane``), a rebuild and a
verify (``spill``, ``rebuild``) and resume all call them, so they cannot
disagree on what a message means. ``decode_message`` files an event only where
its subject and its body agree on tenant and task: anything else is a recorded
rejection, never a crash and never a change to some other task's state. Whether
an event is a duplicate is decided by the caller with the one rule of
``core.reducer``: replay keeps the ids each task consumed in the fold
(``fold_message``; for a task it spilled, its schema's index too), the live
projector asks its ``applied_events`` index.
"""

from __future__ import annotations

from collections.abc import MutableMapping

import msgspec
import structlog

from agentledger.contracts.codec import MAX_DEPTH, contract_error, nesting_path
from agentledger.contracts.events import DOCUMENTS_TASK, FORGET_TASK, GAP_TASK, MEMORY_TASK, AnyEvent, kind_of
from agentledger.core import ledger_chain
from agentledger.core.ledger_chain import GENESIS, Head, KeyOf
from agentledger.core.reducer import apply, duplicate
from agentledger.core.state import Changes, WorkingMemory, new_state
from agentledger.errors import AgentLedgerError, IntegrityViolationError
from agentledger.security.task_seal import SEALED, TaskKeys
from agentledger.services.projector.store import RejectionRow
from agentledger.stores.ledger import subject_key

log = structlog.get_logger()

Key = tuple[str, str]

_decoder = msgspec.json.Decoder(AnyEvent)


def event_id_of(headers: dict[str, str] | None) -> str:
    """The event id from ``Nats-Msg-Id`` (``tenant/task/event_id``), or ''."""
    if not headers:
        return ""
    mid = headers.get("Nats-Msg-Id") or ""
    return mid.rsplit("/", 1)[-1]


def subject_tokens(subject: str) -> Key:
    """Best-effort (tenant, task) of any ledger subject, for a rejection row of a malformed one."""
    rest = subject.split(".ledger.", 1)[1] if ".ledger." in subject else ""
    tenant, _, task = rest.partition(".")
    return tenant, task


class SubjectKeys(dict[str, Key | None]):
    """``subject_key`` of each ledger subject, parsed once per subject."""

    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def __missing__(self, subject: str) -> Key | None:
        key = self[subject] = subject_key(self.prefix, subject)
        return key


# Longest text kept in a rejection row's columns: identifiers and the reason.
MAX_TOKEN_CHARS = 200
MAX_REASON_CHARS = 500


def clean_text(value: object, limit: int = MAX_REASON_CHARS) -> str:
    """Text a PostgreSQL ``text`` column accepts, at most ``limit`` characters.

    NUL becomes U+FFFD, lone surrogates (which UTF-8 cannot carry) become '?',
    and what is longer than ``limit`` is cut with an ellipsis.
    """
    text = value if isinstance(value, str) else str(value)
    if len(text) > limit:
        text = text[: limit - 1] + "\u2026"
    if "\x00" in text:
        text = text.replace("\x00", "\ufffd")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "replace").decode("utf-8")
    return text


def rejection_row(row: RejectionRow) -> RejectionRow:
    """``row`` with its text columns safe for PostgreSQL and bounded."""
    tenant, task, seq, event_id, kind, code, reason = row
    t = MAX_TOKEN_CHARS
    return (clean_text(tenant, t), clean_text(task, t), seq, clean_text(event_id, t),
            clean_text(kind, t), clean_text(code, t), clean_text(reason, MAX_REASON_CHARS))


def _decode(key: Key, data: bytes, seq: int, headers: dict[str, str] | None,
            rejections: list[RejectionRow]) -> AnyEvent | None:
    """The event in ``data``, or None after appending its rejection row."""
    try:
        too_deep = nesting_path(data, MAX_DEPTH)
        if too_deep is None:
            return _decoder.decode(data)
        code = "too_deep"
        reason = f"nested deeper than {MAX_DEPTH} levels of objects and arrays at {too_deep}"
    except msgspec.MsgspecError as exc:
        code, reason = "undecodable", str(contract_error(exc))
    except Exception as exc:  # noqa: BLE001 - e.g. RecursionError: any bytes must end as a row
        code, reason = "undecodable", f"the body does not decode ({type(exc).__name__})"
    rejections.append(rejection_row((key[0], key[1], seq, event_id_of(headers), "", code, reason)))
    return None


def _open(key: Key, data: bytes, seq: int, headers: dict[str, str], *, rejections: list[RejectionRow],
          keys: TaskKeys | None) -> bytes | None:
    """A sealed body opened; None when its task key is destroyed (the task is being forgotten:
    no row) or when it does not open (a ``seal_mismatch`` row)."""
    if keys is None:
        raise RuntimeError("a sealed ledger message reached a reader that loaded no task keys")
    try:
        return keys.open(key[0], key[1], headers, data)
    except AgentLedgerError as exc:
        rejections.append(rejection_row((key[0], key[1], seq, event_id_of(headers), "", exc.code, str(exc))))
        return None


def is_service_ledger(key: Key | None) -> bool:
    """Whether a ledger subject's (tenant, task) is a tenant's memory, document or forget ledger,
    or the numbering's filler (not a task)."""
    return key is not None and key[1] in (MEMORY_TASK, DOCUMENTS_TASK, FORGET_TASK, GAP_TASK)


def decode_message(key: Key | None, data: bytes, seq: int, headers: dict[str, str] | None, *,
                   rejections: list[RejectionRow], subject: str = "",
                   keys: TaskKeys | None = None) -> AnyEvent | None:
    """The event a ledger message carries for the task ``key``, or None after appending the
    rejection row that explains why there is none.

    ``key`` is the (tenant, task) of the message's subject (``ledger.subject_key``),
    None when the subject is not ``<prefix>.ledger.<tenant>.<task>``: that is a
    ``malformed_subject`` rejection row (filed under the subject's own tokens).
    A body nested deeper than ``MAX_DEPTH`` is ``too_deep`` (checked before any
    decoder recurses into it); a body that does not decode is ``undecodable``; a
    body naming another tenant or task than its subject is ``subject_mismatch``.
    A body sealed under its task's key (``security.task_seal``) is opened with ``keys`` (loaded
    by the caller): one whose key is destroyed (its task is being forgotten) is None with no
    row; one that does not open is ``seal_mismatch``.
    None of these touch any state, nor consume an event id. Every text column of
    a row is sanitised and bounded (``rejection_row``), so any bytes on any ledger
    subject end as a row.

    A message on a tenant's memory, document or forget subject (task ``MEMORY_TASK``,
    ``DOCUMENTS_TASK`` or ``FORGET_TASK``) is None with no row: those events are the
    memory-policy service's, the context-builder's and the tombstone-fanout's, not Working Memory, so they
    only move the watermark past them (see ``is_service_ledger``).
    """
    if is_service_ledger(key):
        return None
    if key is None:
        tenant, task = subject_tokens(subject)
        rejections.append(rejection_row((
            tenant, task, seq, event_id_of(headers), "", "malformed_subject",
            f"ledger subject {subject[:300]!r} is not <prefix>.ledger.<tenant>.<task>")))
        return None
    if headers is not None and SEALED in headers:
        opened = _open(key, data, seq, headers, rejections=rejections, keys=keys)
        if opened is None:
            return None
        data = opened
    event = _decode(key, data, seq, headers, rejections)
    if event is None:
        return None
    if event.tenant != key[0] or event.task_id != key[1]:
        rejections.append(rejection_row((
            key[0], key[1], seq, event.event_id, kind_of(event), "subject_mismatch",
            f"the event names {event.tenant[:100]}/{event.task_id[:100]} but was stored on the "
            f"subject of {key[0]}/{key[1]}")))
        return None
    return event


def fold_event(states: MutableMapping[Key, WorkingMemory], key: Key, event: AnyEvent, seq: int, *,
               first_seq: int | None, changes: Changes, rejections: list[RejectionRow]) -> None:
    """Fold one decoded event into ``states[key]``: a duplicate of the event id consumed at
    ``first_seq``, or (``first_seq`` None) the first occurrence, applied.

    An event the reducer refuses becomes a rejection row (and a ``Rejection``
    inside the state, as the reducer records it). Should the reducer itself
    raise, the message becomes a ``reducer_error`` row instead of stopping the
    projection (live and replay record it alike).
    """
    state = states.get(key)
    if state is None:
        state = states[key] = new_state(key[0], key[1])
    if first_seq is not None:
        duplicate(state, event, seq, first_seq)
        return
    try:
        trace = apply(state, event, seq, changes)
    except Exception as exc:  # noqa: BLE001 - a reducer bug must not wedge the projection
        # Deterministic, so replay records the same; visible as a rejection row.
        log.error("projector.reducer_error", tenant=key[0], task=key[1], seq=seq,
                  error=type(exc).__name__)
        rejections.append(rejection_row((key[0], key[1], seq, getattr(event, "event_id", ""), "",
                                         "reducer_error", type(exc).__name__)))
        return
    if trace.outcome == "rejected":
        rejections.append(rejection_row((key[0], key[1], seq, trace.event_id, trace.kind,
                                         trace.code or "", trace.reason or "")))


def chain_violation_row(key: Key, seq: int, headers: dict[str, str] | None,
                        exc: IntegrityViolationError) -> RejectionRow:
    """The rejection row of a message whose chain check failed (``integrity_violation``)."""
    return rejection_row((key[0], key[1], seq, event_id_of(headers), "", exc.code, exc.message))


class Fold:
    """States of many tasks folded from the stream, with what a projection needs: the ids
    each task consumed (its idempotency record), the turns appended and the rejections.

    With ``key_of`` (the integrity keys' lookup) every task message's chain link is checked
    against its task's head before it is decoded (``core.ledger_chain``): one that fails is
    never folded. ``strict`` (resume): it raises ``IntegrityViolationError``; otherwise it is
    an ``integrity_violation`` rejection row, the task's head stays where it was (so every
    later message of the task fails too: the task stays frozen at its last good event) and
    the first violation of each task is kept in ``violations``."""

    def __init__(self, key_of: KeyOf | None = None, *, strict: bool = False,
                 task_keys: TaskKeys | None = None) -> None:
        self.key_of = key_of
        self.strict = strict
        # The task keys sealed messages are opened with (``read_stream`` loads them).
        self.task_keys = task_keys
        # Chain head of each task as folded so far (a task not in it: ``GENESIS``).
        self.heads: dict[Key, Head] = {}
        self.violations: dict[Key, IntegrityViolationError] = {}
        self.states: dict[Key, WorkingMemory] = {}
        # Sequence of the last message folded into each task's state.
        self.seqs: dict[Key, int] = {}
        # Event id -> seq of its first occurrence, per task.
        self.applied: dict[Key, dict[str, int]] = {}
        self.changes: dict[Key, Changes] = {}
        self.rejections: list[RejectionRow] = []
        self.events = 0
        self.last_seq = 0

    def task(self, key: Key) -> tuple[dict[str, int], Changes]:
        """The task's consumed ids and changes, created on first use."""
        applied = self.applied.get(key)
        if applied is None:
            applied = self.applied[key] = {}
            self.changes[key] = Changes()
        return applied, self.changes[key]


    def chained(self, key: Key | None, data: bytes, seq: int, headers: dict[str, str] | None) -> bool:
        """Whether the message links to its task's head (which then moves on); see the class."""
        if self.key_of is None or key is None or is_service_ledger(key):
            return True
        try:
            self.heads[key] = ledger_chain.check(self.heads.get(key, GENESIS), self.key_of, tenant=key[0],
                                                 task=key[1], seq=seq, body=data, headers=headers)
        except IntegrityViolationError as exc:
            if self.strict:
                raise
            self.violations.setdefault(key, exc)
            self.rejections.append(chain_violation_row(key, seq, headers, exc))
            log.error("ledger.integrity_violation", tenant=key[0], task=key[1], seq=seq)
            return False
        return True


def fold_message(fold: Fold, key: Key | None, data: bytes, seq: int,
                 headers: dict[str, str] | None, *, subject: str = "", chained: bool = False) -> bool:
    """Replay's fold of one ledger message into ``fold``; True if a task's state was touched.

    Duplicates follow the reducer's rule over the ids the fold recorded: the
    first occurrence of an event id in a task is consumed, later ones are no-ops
    (the fold must therefore start at the task's first message, or carry the ids
    consumed before, as resume seeds them; a ``SpillingFold`` asks its schema's
    index for a task it read back). The chain is checked first (``Fold.chained``) unless
    the caller did (``chained``).
    """
    if not chained and not fold.chained(key, data, seq, headers):
        return False
    event = decode_message(key, data, seq, headers, rejections=fold.rejections, subject=subject,
                           keys=fold.task_keys)
    if event is None or key is None:
        return False
    applied, changes = fold.task(key)
    first = applied.get(event.event_id)
    if first is None:
        applied[event.event_id] = seq
    fold_event(fold.states, key, event, seq, first_seq=first, changes=changes,
               rejections=fold.rejections)
    return True
