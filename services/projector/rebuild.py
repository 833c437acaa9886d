"""Replay: fold the ledger stream into a projection fast, in bounded memory; replace the live
projection without downtime; verify it.

``read_stream`` reads the stream with an ordered push consumer (ephemeral,
flow-controlled, gap-checked by nats-py) and a callback that does the least
Python work it can per message: split the reply subject for the stream
sequence, decode the event with msgspec, fold it into the task's state in an
in-memory ``Fold``. A rebuild folds into a ``SpillingFold``, which writes what
it holds to its schema with COPY (core rows, variable rows, turn rows, the
applied-event index and the rejections) whenever it passes the rebuild memory
budget, and at the end: its memory is bounded by the budget, not by the
stream, and is gone when the rebuild ends.

``replace_live`` builds a new projection in a schema beside the live one
(which keeps serving, the projector keeps projecting into it), catches up to
the stream's end and switches in one transaction that locks the live tables:
a reader sees the old projection or the new one, never none. ``verify``
rebuilds into a scratch schema and compares every part of every task with the
live projection.

``decode_message`` and ``fold_event`` are the one place that turns a ledger
message into a state change; the live projector calls them too, so live and
replay cannot disagree on what a message means. ``decode_message`` files an
event only where its subject and its body agree on tenant and task: anything
else is a recorded rejection, never a crash and never a change to some other
task's state. Whether an event is a duplicate is decided by the caller with the
one rule of ``core.reducer``: replay keeps the ids each task consumed in the
fold (``fold_message``; for a task it spilled, its schema's index too), the live
projector asks its ``applied_events`` index.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import asyncpg
import msgspec
import structlog
from nats.aio.client import Client
from nats.js.api import ConsumerConfig, DeliverPolicy

from agentledger.config import Settings
from agentledger.contracts.codec import MAX_DEPTH, contract_error, nesting_path
from agentledger.contracts.events import DOCUMENTS_TASK, FORGET_TASK, MEMORY_TASK, AnyEvent, kind_of
from agentledger.core.reducer import apply, duplicate
from agentledger.core.state import (
    Changes,
    WorkingMemory,
    core_hash,
    encode_core,
    encode_turn,
    encode_variable,
    new_state,
)
from agentledger.errors import UnavailableError
from agentledger.security import auth
from agentledger.services.projector.cache import StateCache
from agentledger.services.projector.store import (
    RejectionRow,
    Store,
    TaskRow,
    TurnRow,
    VariableRow,
)
from agentledger.stores import db
from agentledger.stores.ledger import ledger_subject, ledger_wildcard, subject_key

log = structlog.get_logger()

Key = tuple[str, str]
Progress = Callable[[int, int], None]

LIVE_SCHEMA = "public"
VERIFY_SCHEMA = "replay_verify"
# Where ``replace_live`` builds the projection that replaces the live one.
REBUILD_SCHEMA = "replay_rebuild"
# Advisory lock key held by the one rebuild of the live projection running ("agrb").
REBUILD_LOCK = 0x61677262
# The switch happens once the rebuild is this close to the stream's end: the rest is folded
# while the live tables are locked, so readers wait for at most this many messages.
SWITCH_GAP = 1_000
# How long the switch waits for the live tables' locks before it lets readers through and
# tries again, and how often it tries.
SWITCH_LOCK_TIMEOUT_MS = 500
SWITCH_ATTEMPTS = 60
PROGRESS_EVERY = 10_000

_decoder = msgspec.json.Decoder(AnyEvent)


class RebuildReport(msgspec.Struct, frozen=True):
    events: int
    tasks: int
    last_seq: int
    seconds: float
    rejections: int = 0
    schema: str = LIVE_SCHEMA
    # Times the fold wrote what it held and forgot it; the most it held then; its budget.
    spills: int = 0
    peak_bytes: int = 0
    budget_bytes: int = 0
    # States read back from the new projection because their task came up again after a spill.
    reloads: int = 0


class TaskDiff(msgspec.Struct, frozen=True, omit_defaults=True):
    tenant: str
    task_id: str
    problem: str  # missing | extra | different
    # For ``different``: which parts differ (core, variables, transcript, applied_events).
    parts: list[str] = []
    live_seq: int | None = None
    replay_seq: int | None = None
    live_hash: str | None = None
    replay_hash: str | None = None


class VerifyReport(msgspec.Struct, frozen=True):
    ok: bool
    last_seq: int
    live_watermark: int
    tasks: int
    events: int
    refolded: int
    missing: list[TaskDiff]
    extra: list[TaskDiff]
    different: list[TaskDiff]
    seconds: float

    def summary(self) -> str:
        """Human-readable lines for the CLI."""
        head = (f"{'OK' if self.ok else 'MISMATCH'}: replayed {self.events} events up to seq"
                f" {self.last_seq} into {self.tasks} tasks; live projection at seq"
                f" {self.live_watermark}; {self.refolded} task(s) followed past the replay point;"
                f" {self.seconds}s")
        lines = [head]
        for diff in (*self.missing, *self.extra, *self.different):
            parts = f" in {', '.join(diff.parts)}" if diff.parts else ""
            lines.append(f"  {diff.problem}: {diff.tenant}/{diff.task_id}{parts}"
                         f" (live seq {diff.live_seq}, replay seq {diff.replay_seq})")
        return "\n".join(lines)


# ---- the fold ------------------------------------------------------------------

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


def is_service_ledger(key: Key | None) -> bool:
    """Whether a ledger subject's (tenant, task) is a tenant's memory, document or forget ledger
    (not a task)."""
    return key is not None and key[1] in (MEMORY_TASK, DOCUMENTS_TASK, FORGET_TASK)


def decode_message(key: Key | None, data: bytes, seq: int, headers: dict[str, str] | None, *,
                   rejections: list[RejectionRow], subject: str = "") -> AnyEvent | None:
    """The event a ledger message carries for the task ``key``, or None after appending the
    rejection row that explains why there is none.

    ``key`` is the (tenant, task) of the message's subject (``ledger.subject_key``),
    None when the subject is not ``<prefix>.ledger.<tenant>.<task>``: that is a
    ``malformed_subject`` rejection row (filed under the subject's own tokens).
    A body nested deeper than ``MAX_DEPTH`` is ``too_deep`` (checked before any
    decoder recurses into it); a body that does not decode is ``undecodable``; a
    body naming another tenant or task than its subject is ``subject_mismatch``.
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


class Fold:
    """States of many tasks folded from the stream, with what a projection needs: the ids
    each task consumed (its idempotency record), the turns appended and the rejections."""

    def __init__(self) -> None:
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


def fold_message(fold: Fold, key: Key | None, data: bytes, seq: int,
                 headers: dict[str, str] | None, *, subject: str = "") -> bool:
    """Replay's fold of one ledger message into ``fold``; True if a task's state was touched.

    Duplicates follow the reducer's rule over the ids the fold recorded: the
    first occurrence of an event id in a task is consumed, later ones are no-ops
    (the fold must therefore start at the task's first message, or carry the ids
    consumed before, as resume seeds them; a ``SpillingFold`` asks its schema's
    index for a task it read back).
    """
    event = decode_message(key, data, seq, headers, rejections=fold.rejections, subject=subject)
    if event is None or key is None:
        return False
    applied, changes = fold.task(key)
    first = applied.get(event.event_id)
    if first is None:
        applied[event.event_id] = seq
    fold_event(fold.states, key, event, seq, first_seq=first, changes=changes,
               rejections=fold.rejections)
    return True


# Bytes a folded event is counted for beyond its body: its entry in the fold's index of
# consumed ids and the dict slots around it (measured: ~100 bytes an event on a bench stream,
# whose bodies the fold keeps far less of than their size, so body + this is an upper bound).
EVENT_OVERHEAD = 100
# Messages of spilled tasks held before their states are read back and folded: one
# PostgreSQL round trip pays for this many (or for an eighth of the budget, if less).
DEFER_EVENTS = 2000


class SpillingFold(Fold):
    """A ``Fold`` into a projection schema that holds at most about ``budget`` bytes.

    Each message is counted (its body plus ``EVENT_OVERHEAD``; a state read
    back by the bytes of its rows, as the projector's ``StateCache`` counts
    them). Past the budget, ``spill`` writes everything folded so far to the
    schema (COPY, or upsert for tasks whose rows are there already) and
    forgets it. A task seen again after that is read back from its rows, as
    the live projector reads back an evicted state, and its later event ids are
    checked against the schema's ``applied_events`` index, so duplicates follow
    the reducer's one rule across spills. Its messages are deferred meanwhile
    and folded a batch at a time (``settle``), one round trip per batch; tasks
    that have not been spilled are folded as each message arrives, as ``Fold``
    does, so a stream that fits in the budget costs what it did.

    The budget is exceeded by at most one message, and by what one deferred
    batch's states weigh beyond the largest state read back before; ``peak_bytes``
    is the most the fold held (it holds the most just before it writes).
    """

    def __init__(self, conn: asyncpg.Connection, schema: str, budget: int) -> None:
        super().__init__()
        self.conn = conn
        self.store = Store(schema)
        self.budget = max(budget, 1)
        self.states: StateCache = StateCache()
        # Held tasks whose rows are in the schema (read back): their rows are upserted.
        self.stored: set[Key] = set()
        # Set by the first spill: from then on a task that is not held may have rows.
        self.spilled = False
        self.deferred: list[tuple[int, Key, bytes, dict[str, str] | None]] = []
        self.deferred_bytes = 0
        # Bytes counted for the messages folded or deferred since the last spill.
        self.used = 0
        self.peak_bytes = 0
        # Bytes of the largest state read back so far: what reading back one more may cost.
        self.largest_state = 0
        self.spills = 0
        self.reloads = 0
        self.tasks = 0
        self.rejected = 0

    async def add(self, key: Key | None, data: bytes, seq: int, headers: dict[str, str] | None,
                  subject: str) -> None:
        """Fold one ledger message (or defer it, if its task may have rows); spill past the budget."""
        size = len(data) + EVENT_OVERHEAD
        self.used += size
        if self.spilled and key is not None and (key not in self.states or key in self.stored):
            self.deferred.append((seq, key, data, headers))
            self.deferred_bytes += size
            if len(self.deferred) >= DEFER_EVENTS or self.deferred_bytes * 8 >= self.budget:
                await self.settle()
        elif fold_message(self, key, data, seq, headers, subject=subject) and key:
            self.seqs[key] = seq
        if self.used + self.states.total_bytes > self.budget:
            await self.spill()

    async def settle(self) -> None:
        """Fold the deferred messages: read back the states of their tasks that have rows,
        ask the index which of their ids those tasks consumed before, apply in order."""
        if not self.deferred:
            return
        deferred, self.deferred = self.deferred, []
        batch_bytes, self.deferred_bytes = self.deferred_bytes, 0
        events: list[tuple[int, Key, AnyEvent]] = []
        for seq, key, data, headers in deferred:
            event = decode_message(key, data, seq, headers, rejections=self.rejections)
            if event is not None:
                events.append((seq, key, event))
        conn, states = self.conn, self.states
        missing = list({key for _, key, _ in events if key not in states})
        # Reading the states back must not take the fold past its budget: if they would not
        # fit (each sized as the largest read back so far), write what it holds first.
        if missing and (self.used + states.total_bytes + len(missing) * self.largest_state
                        > self.budget):
            await self._write()
            self.used = batch_bytes  # the batch is still held, and about to be folded
            missing = list({key for _, key, _ in events})
        async with conn.transaction():  # the core rows and the variable rows in one snapshot
            for loaded in await self.store.load_states(conn, missing):
                states.load(loaded)
                self.stored.add(loaded.key)
                self.seqs[loaded.key] = loaded.seq
                self.reloads += 1
                self.largest_state = max(self.largest_state,
                                         loaded.core_bytes + sum(loaded.variable_bytes.values()))
        unknown = list({(key[0], key[1], event.event_id) for _, key, event in events
                        if key in self.stored and event.event_id not in self.applied.get(key, ())})
        earlier = await self.store.first_seqs(conn, unknown)
        for seq, key, event in events:
            applied, changes = self.task(key)
            first = applied.get(event.event_id)
            if first is None:
                first = earlier.get((key[0], key[1], event.event_id))
                if first is None:
                    applied[event.event_id] = seq
            fold_event(states, key, event, seq, first_seq=first, changes=changes,
                       rejections=self.rejections)
            self.seqs[key] = seq

    async def spill(self) -> None:
        """Fold what is deferred, write everything held to the schema and forget it."""
        await self.settle()
        await self._write()

    async def _write(self) -> None:
        """Write the states held, their new rows and the rejections, in one transaction, and
        forget them (deferred messages stay deferred)."""
        self.peak_bytes = max(self.peak_bytes, self.used + self.states.total_bytes)
        fresh: list[TaskRow] = []
        stored: list[TaskRow] = []
        variables: list[VariableRow] = []
        turns: list[TurnRow] = []
        for key, state in self.states.items():
            core = encode_core(state)
            row = (key[0], key[1], self.seqs[key], core, core_hash(core))
            if key in self.stored:
                stored.append(row)
                changes = self.changes[key]
                variables.extend((key[0], key[1], name, state.variables[name].seq,
                                  encode_variable(state.variables[name]))
                                 for name in changes.variables)
                turns.extend((key[0], key[1], t.ordinal, t.seq, encode_turn(t)) for t in changes.turns)
            else:
                fresh.append(row)
        fresh_keys = {(r[0], r[1]) for r in fresh}
        store, conn = self.store, self.conn
        async with conn.transaction():
            await store.copy_tasks(conn, fresh)
            await store.copy_variables(conn, (
                (key[0], key[1], name, variable.seq, encode_variable(variable))
                for key in fresh_keys for name, variable in self.states[key].variables.items()))
            await store.copy_turns(conn, (
                (key[0], key[1], t.ordinal, t.seq, encode_turn(t))
                for key in fresh_keys for t in self.changes[key].turns))
            await store.upsert_tasks(conn, stored)
            await store.write_parts(conn, variables, turns)
            await store.copy_applied(conn, (
                (key[0], key[1], event_id, seq)
                for key, applied in self.applied.items() for event_id, seq in applied.items()))
            await store.copy_rejections(conn, self.rejections)
        self.tasks += len(fresh)
        self.rejected += len(self.rejections)
        self.spills += 1
        self.spilled = True
        # Cleared in place: ``read_stream`` holds on to ``seqs``.
        self.states.clear()
        self.stored.clear()
        self.seqs.clear()
        self.applied.clear()
        self.changes.clear()
        self.rejections.clear()
        self.used = 0


def stream_seq(msg: Any) -> int:
    """Stream sequence of a JetStream message, from its ack reply subject."""
    tokens = msg.reply.split(".")
    if len(tokens) == 9:  # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>
        return int(tokens[5])
    return int(msg.metadata.sequence.stream)


def _seq_pending(msg: Any) -> tuple[int, int]:
    """Stream sequence and pending count from the ack reply subject."""
    tokens = msg.reply.split(".")
    if len(tokens) == 9:  # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<dseq>.<ts>.<pending>
        return int(tokens[5]), int(tokens[8])
    md = msg.metadata
    return md.sequence.stream, md.num_pending


async def stream_last_seq(nc: Client, settings: Settings) -> int:
    """The ledger stream's last sequence (0 when empty)."""
    info = await nc.jetstream().stream_info(settings.stream)
    return int(info.state.last_seq) if info.state.messages else 0


async def _ordered_subscribe(nc: Client, settings: Settings, subject: str | None, start_seq: int,
                             cb: Callable[[Any], Awaitable[None]]) -> Any:
    """An ordered push consumer (ephemeral, flow-controlled) from ``start_seq``."""
    config = ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
    if start_seq > 1:
        config = ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start_seq)
    # Unlimited pending: a slow-consumer drop would silently lose a message.
    return await nc.jetstream().subscribe(
        subject or ledger_wildcard(settings.prefix), stream=settings.stream, cb=cb,
        ordered_consumer=True, config=config, pending_msgs_limit=0, pending_bytes_limit=0)


async def _until_done(done: asyncio.Future[None], count: list[int], upto: int,
                      idle_timeout: float) -> None:
    """Wait for the fold to finish while messages keep arriving."""
    seen = -1
    while True:
        try:
            await asyncio.wait_for(asyncio.shield(done), timeout=idle_timeout)
        except TimeoutError:
            if count[0] == seen:
                raise UnavailableError(
                    f"no ledger message for {idle_timeout}s while replaying at seq {count[1]}"
                    f" of {upto}") from None
            seen = count[0]
        else:
            return


async def read_stream(nc: Client, settings: Settings, upto: int | None = None, *,
                      fold: Fold | None = None, subject: str | None = None, start_seq: int = 1,
                      progress: Progress | None = None, idle_timeout: float = 30.0) -> Fold:
    """Fold the ledger from ``start_seq`` up to ``upto`` (default: the last sequence now).

    ``subject`` narrows the read to one task's subject. Passing ``fold``
    continues an earlier fold; a ``SpillingFold`` spills as it passes its
    budget (what it still holds or defers at the end is the caller's to
    ``spill``). Raises ``UnavailableError`` if no message arrives for
    ``idle_timeout`` seconds.
    """
    js = nc.jetstream()
    info = await js.stream_info(settings.stream)
    last = int(info.state.last_seq) if info.state.messages else 0
    upto = last if upto is None else min(upto, last)
    fold = fold if fold is not None else Fold()
    if upto < max(start_seq, 1):
        return fold
    total = upto - start_seq + 1

    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    seqs = fold.seqs
    spill = fold if isinstance(fold, SpillingFold) else None
    keys = SubjectKeys(settings.prefix)
    count = [0, 0]  # messages folded, last sequence folded

    async def on_msg(msg: Any) -> None:
        if done.done():
            return
        try:
            tokens = msg.reply.split(".")
            if len(tokens) == 9:
                seq = int(tokens[5])
                pending = int(tokens[8])
            else:
                seq, pending = _seq_pending(msg)
            if seq > upto:
                done.set_result(None)
                return
            key = keys[msg.subject]
            if spill is not None:
                await spill.add(key, msg.data, seq, msg.headers, msg.subject)
            elif fold_message(fold, key, msg.data, seq, msg.headers, subject=msg.subject) and key:
                seqs[key] = seq
            n = count[0] = count[0] + 1
            count[1] = seq
            if progress is not None and n % PROGRESS_EVERY == 0:
                progress(n, total)
            if seq >= upto or pending == 0:
                done.set_result(None)
        except BaseException as exc:  # noqa: BLE001 - a callback error would otherwise be lost
            if not done.done():
                done.set_exception(exc)

    sub = await _ordered_subscribe(nc, settings, subject, start_seq, on_msg)
    try:
        await _until_done(done, count, upto, idle_timeout)
    finally:
        with contextlib.suppress(Exception):  # best effort: the consumer is ephemeral
            await sub.unsubscribe()
    fold.events += count[0]
    fold.last_seq = max(fold.last_seq, count[1])
    if progress is not None:
        progress(count[0], total)
    return fold


# ---- rebuild ---------------------------------------------------------------------

async def build(nc: Client, conn: asyncpg.Connection, settings: Settings, schema: str,
                progress: Progress | None = None, *, partitions: int = 1) -> SpillingFold:
    """Fold the whole stream into ``schema`` (dropped and created anew) within the settings'
    rebuild memory budget, with ``partitions`` projector partitions all at its end; the fold
    it returns holds nothing (it spilled at the end)."""
    await db.drop_schema_conn(conn, schema)
    await db.migrate_conn(conn, schema)
    fold = SpillingFold(conn, schema, settings.rebuild_memory_bytes)
    await read_stream(nc, settings, None, fold=fold, progress=progress)
    await fold.spill()
    await fold.store.set_layout(conn, partitions, fold.last_seq)
    return fold


def _report(fold: SpillingFold, schema: str, started: float) -> RebuildReport:
    report = RebuildReport(events=fold.events, tasks=fold.tasks, last_seq=fold.last_seq,
                           seconds=round(time.perf_counter() - started, 3),
                           rejections=fold.rejected, schema=schema, spills=fold.spills,
                           peak_bytes=fold.peak_bytes, budget_bytes=fold.budget,
                           reloads=fold.reloads)
    log.info("replay.rebuilt", schema=schema, events=report.events, tasks=report.tasks,
             last_seq=report.last_seq, seconds=report.seconds, spills=report.spills,
             peak_bytes=report.peak_bytes)
    return report


async def _connect(settings: Settings) -> tuple[Client, asyncpg.Connection]:
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        conn = await db.connect(settings.database_url)
    except BaseException:
        await nc.close()
        raise
    return nc, conn


async def rebuild(settings: Settings, schema: str, progress: Progress | None = None) -> RebuildReport:
    """(Re)create a projection in the scratch schema ``schema`` from the whole ledger stream."""
    db.check_schema(schema)
    started = time.perf_counter()
    nc, conn = await _connect(settings)
    try:
        return _report(await build(nc, conn, settings, schema, progress), schema, started)
    finally:
        await conn.close()
        await nc.close()


async def replace_live_with(nc: Client, conn: asyncpg.Connection, settings: Settings,
                            progress: Progress | None = None, *, partitions: int | None = None,
                            only_if_empty: bool = False) -> RebuildReport | None:
    """``replace_live`` on existing connections (``conn`` must not be in a transaction).

    One rebuild at a time (an advisory lock), so the rebuild schema is this
    one's alone; a schema left by a rebuild that died is dropped by the next.
    The new projection has ``partitions`` projector partitions, by default as
    many as the live one. ``only_if_empty``: do nothing (None) if, once the lock
    is held, the live projection is past seq 0 (another projector lane rebuilt
    it meanwhile).
    """
    started = time.perf_counter()
    await conn.execute("SELECT pg_advisory_lock($1)", REBUILD_LOCK)
    try:
        await db.migrate_conn(conn, LIVE_SCHEMA)
        live = await Store(LIVE_SCHEMA).layout(conn)
        if only_if_empty and live is not None and live.watermark > 0:
            return None
        if partitions is None:
            partitions = live.partitions if live is not None else 1
        fold = await build(nc, conn, settings, REBUILD_SCHEMA, progress, partitions=partitions)
        # Catch up while the live projection serves, so the switch folds only a few messages.
        while await stream_last_seq(nc, settings) - fold.last_seq > SWITCH_GAP:
            await read_stream(nc, settings, None, fold=fold, start_seq=fold.last_seq + 1)
            await fold.spill()
        await _switch(nc, conn, settings, fold)
        return _report(fold, LIVE_SCHEMA, started)
    finally:
        try:
            await db.drop_schema_conn(conn, REBUILD_SCHEMA)
        finally:
            await conn.execute("SELECT pg_advisory_unlock($1)", REBUILD_LOCK)


async def _switch(nc: Client, conn: asyncpg.Connection, settings: Settings,
                  fold: SpillingFold) -> None:
    """Make the rebuilt projection the live one, in one transaction.

    It locks the live tables (the watermark first, as every projector batch
    takes it first), so no batch commits in between and a reader waits a few
    milliseconds instead of seeing no projection; folds the messages that
    arrived since the catch-up; then drops the live tables and moves the new
    ones into their place. A lock not granted within ``SWITCH_LOCK_TIMEOUT_MS``
    (a long reader ahead in the queue, a deadlock) is given up and tried again,
    so readers never queue long behind the switch.
    """
    store = Store(REBUILD_SCHEMA)
    for attempt in range(1, SWITCH_ATTEMPTS + 1):
        tx = conn.transaction()
        await tx.start()
        try:
            await db.lock_projection_conn(conn, LIVE_SCHEMA, SWITCH_LOCK_TIMEOUT_MS)
        except (asyncpg.LockNotAvailableError, asyncpg.DeadlockDetectedError) as exc:
            await tx.rollback()
            log.info("replay.switch_waiting", attempt=attempt, error=type(exc).__name__)
            await asyncio.sleep(min(0.05 * attempt, 1.0))
            continue
        except BaseException:
            await tx.rollback()
            raise
        locked = time.perf_counter()
        try:
            await read_stream(nc, settings, None, fold=fold, start_seq=fold.last_seq + 1)
            await fold.spill()
            await store.set_watermark(conn, fold.last_seq)
            await db.swap_tables_conn(conn, REBUILD_SCHEMA, LIVE_SCHEMA)
        except BaseException:
            await tx.rollback()
            raise
        await tx.commit()
        log.info("replay.switched", last_seq=fold.last_seq, attempts=attempt,
                 locked_s=round(time.perf_counter() - locked, 4))
        return
    raise UnavailableError(f"could not lock the live projection for the switch in {SWITCH_ATTEMPTS}"
                           " attempts; the live projection is unchanged")


async def replace_live(settings: Settings, progress: Progress | None = None,
                       partitions: int | None = None) -> RebuildReport:
    """Rebuild the live projection from the ledger beside it, then switch to it atomically.

    The live projection keeps serving (and the projector keeps projecting into
    it) until the switch; a reader sees the old projection or the new one,
    never none. A running projector notices the switch (its watermark table is
    another one), drops its cache and carries on from the new watermark.
    """
    nc, conn = await _connect(settings)
    try:
        report = await replace_live_with(nc, conn, settings, progress, partitions=partitions)
        assert report is not None  # only_if_empty is not asked for
        return report
    finally:
        await conn.close()
        await nc.close()


# ---- verify ------------------------------------------------------------------------

async def _wait_watermark(conn: asyncpg.Connection, target: int, wait_s: float) -> int:
    store = Store(LIVE_SCHEMA)
    deadline = time.monotonic() + wait_s
    wm: int | None = None
    while True:
        wm = await store.watermark(conn)
        if wm is not None and wm >= target:
            return wm
        if time.monotonic() >= deadline:
            where = "the live projection does not exist" if wm is None else f"it is at {wm}"
            raise UnavailableError(
                f"the live projector did not reach ledger seq {target} within {wait_s}s ({where});"
                " is the projector running and catching up?", code="projector_behind")
        await asyncio.sleep(0.1)


async def verify(settings: Settings, progress: Progress | None = None,
                 wait_s: float = 60.0) -> VerifyReport:
    """Rebuild into a scratch schema and compare every part of every task with the live
    projection: the core row (its seq and hash) and, row by row, the variables, the turns
    and the applied-event index.

    Tasks that changed in the live projection after the replayed point are
    folded further, each up to its live row's sequence, and rewritten in the
    scratch schema. The live rows are read in one snapshot, so the comparison
    is exact while the projector keeps running.
    """
    started = time.perf_counter()
    nc, conn = await _connect(settings)
    try:
        fold = await build(nc, conn, settings, VERIFY_SCHEMA, progress)
        last, events = fold.last_seq, fold.events
        live_wm = await _wait_watermark(conn, last, wait_s)
        live_store, scratch = Store(LIVE_SCHEMA), Store(VERIFY_SCHEMA)
        refolded = 0
        async with conn.transaction(isolation="repeatable_read"):
            live = await live_store.task_hashes(conn)
            # Tasks the projector advanced past the replayed point: fold them further (the
            # fold reads each back from the scratch schema, as after any spill).
            for key, (live_seq, _) in live.items():
                if live_seq <= last:
                    continue
                refolded += 1
                await read_stream(nc, settings, live_seq, fold=fold, start_seq=last + 1,
                                  subject=ledger_subject(settings.prefix, *key))
            await fold.spill()
            replay = await scratch.task_hashes(conn)
            parts = await live_store.part_differences(conn, scratch)

        missing, extra, different = [], [], []
        for key, (seq, digest) in replay.items():
            got = live.get(key)
            if got is None:
                missing.append(TaskDiff(key[0], key[1], "missing", replay_seq=seq, replay_hash=digest))
                continue
            differ = [name for name, keys in parts.items() if key in keys]
            if got[1] != digest or got[0] != seq:
                differ.insert(0, "core")
            if differ:
                different.append(TaskDiff(key[0], key[1], "different", parts=differ,
                                          live_seq=got[0], replay_seq=seq, live_hash=got[1],
                                          replay_hash=digest))
        for key, (seq, digest) in live.items():
            if key not in replay:
                extra.append(TaskDiff(key[0], key[1], "extra", live_seq=seq, live_hash=digest))
        report = VerifyReport(
            ok=not (missing or extra or different), last_seq=last, live_watermark=live_wm,
            tasks=len(replay), events=events, refolded=refolded, missing=missing,
            extra=extra, different=different, seconds=round(time.perf_counter() - started, 3))
        log.info("replay.verified", ok=report.ok, last_seq=last, tasks=report.tasks,
                 missing=len(missing), extra=len(extra), different=len(different))
        return report
    finally:
        try:
            await db.drop_schema_conn(conn, VERIFY_SCHEMA)
        finally:
            await conn.close()
            await nc.close()
