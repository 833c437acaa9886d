"""Replay: fold the ledger stream into a projection fast, and verify the live one.

``read_stream`` reads the stream with an ordered push consumer (ephemeral,
flow-controlled, gap-checked by nats-py) and a callback that does the least
Python work it can per message: split the reply subject for the stream
sequence, decode the event with msgspec, fold it into the task's state in an
in-memory ``Fold``. ``rebuild`` writes the result with COPY: core rows,
variable rows, turn rows, the applied-event index and the rejections.
``verify`` rebuilds into a scratch schema and compares every part of every
task with the live projection.

``decode_message`` and ``fold_event`` are the one place that turns a ledger
message into a state change; the live projector calls them too, so live and
replay cannot disagree on what a message means. ``decode_message`` files an
event only where its subject and its body agree on tenant and task: anything
else is a recorded rejection, never a crash and never a change to some other
task's state. Whether an event is a duplicate is decided by the caller with the
one rule of ``core.reducer``: replay keeps the ids each task consumed in the
fold (``fold_message``), the live projector asks its ``applied_events`` index.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from typing import Any

import asyncpg
import msgspec
import structlog
from nats.aio.client import Client
from nats.js.api import ConsumerConfig, DeliverPolicy

from agentledger import auth, db
from agentledger.config import Settings
from agentledger.contracts.codec import MAX_DEPTH, contract_error, nesting_path
from agentledger.contracts.events import AnyEvent, kind_of
from agentledger.core.reducer import apply, duplicate
from agentledger.core.state import (
    Changes,
    WorkingMemory,
    core_hash,
    decode_state,
    encode_core,
    encode_state,
    encode_turn,
    encode_variable,
    new_state,
)
from agentledger.errors import UnavailableError
from agentledger.ledger import ledger_subject, ledger_wildcard, subject_key
from agentledger.services.projector.store import (
    AppliedRow,
    RejectionRow,
    Store,
    TaskRow,
    TurnRow,
    VariableRow,
)

log = structlog.get_logger()

Key = tuple[str, str]
Progress = Callable[[int, int], None]

LIVE_SCHEMA = "public"
VERIFY_SCHEMA = "replay_verify"
PROGRESS_EVERY = 10_000

_decoder = msgspec.json.Decoder(AnyEvent)


class RebuildReport(msgspec.Struct, frozen=True):
    events: int
    tasks: int
    last_seq: int
    seconds: float
    rejections: int = 0
    schema: str = LIVE_SCHEMA


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
    """
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

    def copy_task(self, other: Fold, key: Key) -> None:
        """Continue ``other``'s fold of one task here (a copy: ``other`` stays as it is)."""
        if key not in other.states:
            return
        self.states[key] = decode_state(encode_state(other.states[key]))
        self.seqs[key] = other.seqs[key]
        self.applied[key] = dict(other.applied[key])
        changes = self.changes[key] = Changes()
        changes.turns = list(other.changes[key].turns)

    def task_rows(self) -> list[TaskRow]:
        rows: list[TaskRow] = []
        seqs = self.seqs
        for key, state in self.states.items():
            data = encode_core(state)
            rows.append((key[0], key[1], seqs[key], data, core_hash(data)))
        return rows

    def variable_rows(self) -> Iterator[VariableRow]:
        for key, state in self.states.items():
            for name, variable in state.variables.items():
                yield key[0], key[1], name, variable.seq, encode_variable(variable)

    def turn_rows(self) -> Iterator[TurnRow]:
        for key, changes in self.changes.items():
            for turn in changes.turns:
                yield key[0], key[1], turn.ordinal, turn.seq, encode_turn(turn)

    def applied_rows(self) -> Iterator[AppliedRow]:
        for key, applied in self.applied.items():
            for event_id, seq in applied.items():
                yield key[0], key[1], event_id, seq


def fold_message(fold: Fold, key: Key | None, data: bytes, seq: int,
                 headers: dict[str, str] | None, *, subject: str = "") -> bool:
    """Replay's fold of one ledger message into ``fold``; True if a task's state was touched.

    Duplicates follow the reducer's rule over the ids the fold recorded: the
    first occurrence of an event id in a task is consumed, later ones are no-ops
    (the fold must therefore start at the task's first message, or carry the ids
    consumed before, see ``Fold.copy_task``).
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
    continues an earlier fold. Raises ``UnavailableError`` if no message
    arrives for ``idle_timeout`` seconds.
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
            if fold_message(fold, key, msg.data, seq, msg.headers, subject=msg.subject) and key:
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

async def write_fold(conn: asyncpg.Connection, schema: str, fold: Fold,
                     rows: list[TaskRow] | None = None) -> None:
    """Replace the projection in ``schema`` by ``fold``, in one transaction."""
    store = Store(schema)
    rows = fold.task_rows() if rows is None else rows
    async with conn.transaction():
        # Lock the watermark first: a running projector's batch and this never interleave.
        await store.lock_watermark(conn)
        await store.truncate(conn)
        await store.copy_tasks(conn, rows)
        await store.copy_variables(conn, fold.variable_rows())
        await store.copy_turns(conn, fold.turn_rows())
        await store.copy_applied(conn, fold.applied_rows())
        await store.copy_rejections(conn, fold.rejections)
        await store.set_watermark(conn, fold.last_seq)


async def rebuild_with(nc: Client, conn: asyncpg.Connection, settings: Settings, schema: str,
                       progress: Progress | None = None) -> tuple[RebuildReport, Fold, list[TaskRow]]:
    """``rebuild`` on existing connections; also returns the fold and the rows written."""
    started = time.perf_counter()
    if schema != LIVE_SCHEMA:
        await db.drop_schema_conn(conn, schema)
    await db.migrate_conn(conn, schema)
    fold = await read_stream(nc, settings, None, progress=progress)
    rows = fold.task_rows()
    await write_fold(conn, schema, fold, rows)
    report = RebuildReport(events=fold.events, tasks=len(rows), last_seq=fold.last_seq,
                           seconds=round(time.perf_counter() - started, 3),
                           rejections=len(fold.rejections), schema=schema)
    log.info("replay.rebuilt", schema=schema, events=report.events, tasks=report.tasks,
             last_seq=report.last_seq, seconds=report.seconds)
    return report, fold, rows


async def _connect(settings: Settings) -> tuple[Client, asyncpg.Connection]:
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        conn = await db.connect(settings.database_url)
    except BaseException:
        await nc.close()
        raise
    return nc, conn


async def rebuild(settings: Settings, schema: str = LIVE_SCHEMA,
                  progress: Progress | None = None) -> RebuildReport:
    """(Re)create the projection in ``schema`` from the whole ledger stream.

    A scratch schema is dropped and created anew; the live (``public``) schema
    keeps its other tables and has the projection tables replaced atomically.
    """
    db.check_schema(schema)
    nc, conn = await _connect(settings)
    try:
        report, _, _ = await rebuild_with(nc, conn, settings, schema, progress)
        return report
    finally:
        await conn.close()
        await nc.close()


async def drop_projection(settings: Settings) -> None:
    """Drop the live projection tables; a running projector notices and rebuilds."""
    conn = await db.connect(settings.database_url)
    try:
        await db.drop_tables_conn(conn, LIVE_SCHEMA)
    finally:
        await conn.close()
    log.info("replay.dropped", schema=LIVE_SCHEMA)


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
        _, fold, rows = await rebuild_with(nc, conn, settings, VERIFY_SCHEMA, progress)
        last = fold.last_seq
        live_wm = await _wait_watermark(conn, last, wait_s)
        live_store, scratch = Store(LIVE_SCHEMA), Store(VERIFY_SCHEMA)
        replay: dict[Key, tuple[int, str]] = {(r[0], r[1]): (r[2], r[4]) for r in rows}
        refolded = 0
        async with conn.transaction(isolation="repeatable_read"):
            live = await live_store.task_hashes(conn)
            # Tasks the projector advanced past the replayed point: fold them further.
            for key, (live_seq, _) in live.items():
                if live_seq <= last:
                    continue
                refolded += 1
                part = Fold()
                part.copy_task(fold, key)
                await read_stream(nc, settings, live_seq, fold=part, start_seq=last + 1,
                                  subject=ledger_subject(settings.prefix, *key))
                if key in part.states:
                    await scratch.delete_task(conn, key)
                    task_rows = part.task_rows()
                    await scratch.upsert_tasks(conn, task_rows)
                    await scratch.write_parts(conn, list(part.variable_rows()), list(part.turn_rows()))
                    await scratch.copy_applied(conn, part.applied_rows())
                    replay[key] = (task_rows[0][2], task_rows[0][4])
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
            tasks=len(replay), events=fold.events, refolded=refolded, missing=missing,
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
