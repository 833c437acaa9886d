"""The checker: judges what the ledger holds against what the clients were told.

Jepsen-style, the verdict comes from two independent views. The clients' view
is the run's ``History``: every event id with its outcome (acknowledged,
definitely refused, unknown). The ledger's view is the WHOLE stream, read
directly with the operator's credentials (an ordered consumer from sequence 1),
each message identified by its ``Nats-Msg-Id``. Then:

* lost: acknowledged but absent; misplaced: stored at another sequence than the
  one acknowledged; duplicated: one event id stored twice; unexpected: stored
  but never attempted (the writer's own ``lease_granted`` events excepted, when
  their holder is one of the run's executors); failed-but-stored: refused
  definitely yet stored; unknown-then-landed / unknown-not-landed: both fine,
  counted; a zombie write acknowledged or stored; a lease grant a client was
  given whose ``lease_granted`` event is not at the token's sequence;
* projection equals replay: ``agentledger replay --verify``'s own ``verify``;
* checkpoints re-derived: each stored checkpoint equals the checkpoint
  ``core.checkpoint.build`` makes of the fold of the ledger up to its cursor
  (the projector's ``fold_message``), apart from when it was made, with a valid
  checksum, and each task's pointer on its newest checkpoint;
* side effects exactly once: per side-effecting step, at most one idempotency
  key applied in the sink, exactly one for a succeeded step and it is the
  step's key, and every receipt in the ledger agrees with the sink;
* resume answers consistent with Working Memory read at their watermark.

The pure parts (``classify``, ``rederive``, ``exactly_once``) take plain data
so they can be tested on synthetic inputs.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

import msgspec
from nats.aio.client import Client as Nats
from nats.js.api import ConsumerConfig, DeliverPolicy

from agentledger.chaos.history import ACKED, FAILED, UNKNOWN, Attempt, Grant, ResumeCheck
from agentledger.chaos.sink import SinkEntry
from agentledger.config import Settings
from agentledger.core import checkpoint as cp_mod
from agentledger.core.state import WorkingMemory
from agentledger.errors import UnavailableError
from agentledger.security import auth
from agentledger.security.task_seal import SEALED, task_keys_of
from agentledger.services.projector.rebuild import Fold, fold_message, verify
from agentledger.stores import db
from agentledger.stores.ledger import MSG_ID, ledger_wildcard, subject_key

Key = tuple[str, str]
READ_IDLE_S = 30.0
# Checkpoint fields that say when it was made, not what it holds (the checksum covers them).
_CP_STAMPS = frozenset({"created_at", "expires_at", "checksum"})


class _Head(msgspec.Struct):
    kind: str = ""
    payload: dict[str, Any] = {}


_head = msgspec.json.Decoder(_Head)


@dataclass(frozen=True)
class StoredMsg:
    """One ledger message as the stream holds it."""

    seq: int
    subject: str
    data: bytes
    headers: dict[str, str] | None

    @property
    def msg_id(self) -> str:
        return (self.headers or {}).get(MSG_ID, "")


@dataclass(frozen=True)
class StoredEvent:
    """What the classification needs of a stored message."""

    seq: int
    msg_id: str
    task_id: str
    kind: str
    holder: str = ""  # lease_granted only


@dataclass
class Classification:
    """Every attempted and every stored event id, classified."""

    attempted: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    by_role: dict[str, dict[str, int]] = field(default_factory=dict)
    stored: int = 0
    writer_grants: int = 0
    lost: list[str] = field(default_factory=list)
    misplaced: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    failed_but_stored: list[str] = field(default_factory=list)
    zombie_accepted: list[str] = field(default_factory=list)
    grants_missing: list[str] = field(default_factory=list)
    unknown_then_landed: int = 0
    unknown_not_landed: int = 0
    acked_after_unknown: int = 0
    # Acknowledged only after at least one attempt with unknown outcome (retried with the same id).
    acked_after_retry: int = 0
    zombie_refused: int = 0

    def violations(self) -> dict[str, int]:
        return {name: len(getattr(self, name)) for name in (
            "lost", "misplaced", "duplicated", "unexpected", "failed_but_stored",
            "zombie_accepted", "grants_missing")}


def classify(attempts: Iterable[Attempt], stored: Iterable[StoredEvent], grants: Iterable[Grant],
             holders: set[str]) -> Classification:
    """Classify the clients' attempts against the stream's events (see the module docstring).

    ``holders`` are the run's executors: a ``lease_granted`` event for one of them is the
    writer's own record of a grant, not an unexpected event.
    """
    result = Classification()
    where: dict[str, list[StoredEvent]] = defaultdict(list)
    by_seq: dict[int, StoredEvent] = {}
    for event in stored:
        by_seq[event.seq] = event
        if event.kind == "lease_granted" and event.holder in holders:
            result.writer_grants += 1
        else:
            result.stored += 1
        where[event.msg_id or f"<no id at seq {event.seq}>"].append(event)
    attempted: dict[str, Attempt] = {}
    outcomes: Counter[str] = Counter()
    roles: dict[str, Counter[str]] = defaultdict(Counter)
    for a in attempts:
        attempted[a.msg_id] = a
        outcomes[a.outcome] += 1
        roles[a.role][a.outcome] += 1
        _judge(result, a, where.get(a.msg_id, []))
    for mid, events in where.items():
        if len(events) > 1:
            result.duplicated.append(mid)
        writer_made = events[0].kind == "lease_granted" and events[0].holder in holders
        if mid not in attempted and not writer_made:
            result.unexpected.append(mid)
    for grant in grants:
        at = by_seq.get(grant.token)
        if at is None or (at.kind, at.holder, at.task_id) != ("lease_granted", grant.holder,
                                                              grant.task_id):
            result.grants_missing.append(f"{grant.task_id} token {grant.token} for {grant.holder}")
    result.attempted = len(attempted)
    result.outcomes = {k: outcomes.get(k, 0) for k in (ACKED, FAILED, UNKNOWN)}
    result.by_role = {role: {k: c.get(k, 0) for k in (ACKED, FAILED, UNKNOWN)}
                      for role, c in sorted(roles.items())}
    return result


def _judge(result: Classification, a: Attempt, landed: list[StoredEvent]) -> None:
    """File one attempted event id under what the stream says about it."""
    outcome = a.outcome
    if a.acked_after_unknown:
        result.acked_after_unknown += 1
    if outcome == ACKED and a.unknowns:
        result.acked_after_retry += 1
    if outcome == ACKED and not landed:
        result.lost.append(a.msg_id)
    elif outcome == ACKED and landed[0].seq != a.acked_seq:
        result.misplaced.append(a.msg_id)
    elif outcome == FAILED and landed:
        result.failed_but_stored.append(a.msg_id)
    elif outcome == UNKNOWN and landed:
        result.unknown_then_landed += 1
    elif outcome == UNKNOWN:
        result.unknown_not_landed += 1
    if a.role == "zombie":
        if outcome == ACKED or landed:
            result.zombie_accepted.append(a.msg_id)
        else:
            result.zombie_refused += 1


def stored_events(messages: Iterable[StoredMsg], prefix: str) -> list[StoredEvent]:
    """The classification's view of the stream's messages."""
    events = []
    for m in messages:
        key = subject_key(prefix, m.subject)
        try:
            head = _head.decode(m.data)
        except msgspec.DecodeError:
            head = _Head()
        holder = str(head.payload.get("holder", "")) if head.kind == "lease_granted" else ""
        events.append(StoredEvent(m.seq, m.msg_id, key[1] if key else "", head.kind, holder))
    return events


# ---- checkpoints ------------------------------------------------------------------------

@dataclass(frozen=True)
class StoredCheckpoint:
    id: int
    tenant: str
    task_id: str
    seq: int
    body: bytes


@dataclass
class CheckpointCheck:
    checked: int = 0
    mismatches: list[str] = field(default_factory=list)


def fold_all(messages: Iterable[StoredMsg], prefix: str,
             checkpoints: Iterable[StoredCheckpoint] = ()) -> tuple[dict[Key, WorkingMemory], CheckpointCheck]:
    """Fold the whole ledger with the projector's fold; compare each checkpoint at its cursor."""
    due: dict[int, list[StoredCheckpoint]] = defaultdict(list)
    for cp in checkpoints:
        due[cp.seq].append(cp)
    check = CheckpointCheck()
    fold = Fold()
    states = fold.states
    for m in messages:
        key = subject_key(prefix, m.subject)
        fold_message(fold, key, m.data, m.seq, m.headers, subject=m.subject)
        for cp in due.pop(m.seq, []):
            check.checked += 1
            problem = _checkpoint_problem(cp, states.get((cp.tenant, cp.task_id)) if key == (
                cp.tenant, cp.task_id) else None)
            if problem:
                check.mismatches.append(f"checkpoint {cp.id} of {cp.tenant}/{cp.task_id} at seq "
                                        f"{cp.seq}: {problem}")
    for cps in due.values():
        for cp in cps:
            check.checked += 1
            check.mismatches.append(f"checkpoint {cp.id} of {cp.tenant}/{cp.task_id}: its cursor "
                                    f"{cp.seq} is no message of the task")
    return states, check


def _checkpoint_problem(stored: StoredCheckpoint, folded: WorkingMemory | None) -> str:
    """Why ``stored`` is not the checkpoint ``core.checkpoint.build`` makes of ``folded`` ('' if it is)."""
    if folded is None:
        return "the message at its cursor is not the task's"
    try:
        cp = cp_mod.decode(stored.body)
    except msgspec.DecodeError:
        return "the body does not decode"
    if not cp_mod.checksum_ok(cp):
        return "checksum mismatch"
    if cp.ledger_cursor != stored.seq:
        return f"body cursor {cp.ledger_cursor} differs from the row's"
    rebuilt = cp_mod.build(folded, now=cp.created_at, ttl_s=cp.expires_at - cp.created_at)
    differing = [f for f in cp_mod.Checkpoint.__struct_fields__
                 if f not in _CP_STAMPS and getattr(rebuilt, f) != getattr(cp, f)]
    if "state" in differing:
        mine, theirs = cp_mod.restore(rebuilt), cp_mod.restore(cp)
        differing.remove("state")
        differing += [f"state.{f}" for f in WorkingMemory.__struct_fields__
                      if getattr(mine, f) != getattr(theirs, f)]
    return f"differs from the checkpoint of the ledger's fold in {', '.join(differing)}" if differing else ""


def pointer_problems(checkpoints: Iterable[StoredCheckpoint], pointers: dict[Key, int]) -> list[str]:
    """Each task's active pointer must name its newest checkpoint."""
    newest: dict[Key, StoredCheckpoint] = {}
    by_id = {}
    for cp in checkpoints:
        by_id[cp.id] = cp
        key = (cp.tenant, cp.task_id)
        if key not in newest or (cp.seq, cp.id) > (newest[key].seq, newest[key].id):
            newest[key] = cp
    problems = []
    for key, cp_id in pointers.items():
        pointed = by_id.get(cp_id)
        if pointed is None:
            problems.append(f"pointer of {key[0]}/{key[1]} names missing checkpoint {cp_id}")
        elif pointed.seq != newest[key].seq:
            problems.append(f"pointer of {key[0]}/{key[1]} at seq {pointed.seq}, newest checkpoint "
                            f"at {newest[key].seq}")
    return problems


# ---- side effects --------------------------------------------------------------------------

@dataclass
class EffectCheck:
    side_effect_steps: int = 0
    succeeded: int = 0
    keys_applied: int = 0
    calls: int = 0
    violations: list[str] = field(default_factory=list)


def exactly_once(states: dict[Key, WorkingMemory], sink: dict[str, SinkEntry]) -> EffectCheck:
    """Compare the ledger's side-effecting steps and receipts with the sink's applications."""
    check = EffectCheck(calls=sum(e.calls for e in sink.values()))
    applied: dict[Key, list[str]] = defaultdict(list)
    for key, entry in sink.items():
        if entry.applications > 1:
            check.violations.append(f"{key} applied {entry.applications} times")
        if entry.applications:
            check.keys_applied += 1
            applied[(entry.task_id, entry.step_id)].append(key)
    tasks = {task for _, task in states}
    check.violations += [f"{keys} applied for {task}/{step}, a task the ledger lacks"
                         for (task, step), keys in applied.items() if task not in tasks]
    for (_, task), state in states.items():
        _steps_once(check, task, state, applied)
        for key, receipt in state.side_effects.items():
            in_sink = key in sink and sink[key].applications > 0
            if (receipt.outcome == "applied") != in_sink:
                check.violations.append(f"{task}: receipt {receipt.outcome} for {key}, sink "
                                        f"{'applied' if in_sink else 'did not apply'} it")
    return check


def _steps_once(check: EffectCheck, task: str, state: WorkingMemory,
                applied: dict[Key, list[str]]) -> None:
    """Per side-effecting step: one key applied if it succeeded (its own), at most one otherwise."""
    for step in state.steps:
        if not step.side_effect:
            continue
        check.side_effect_steps += 1
        st = state.step_states.get(step.id)
        keys = applied.get((task, step.id), [])
        if st is not None and st.status == "succeeded":
            check.succeeded += 1
            if keys != [st.idempotency_key]:
                check.violations.append(f"{task}/{step.id} succeeded with key {st.idempotency_key};"
                                        f" the sink applied {keys}")
        elif len(keys) > 1:
            check.violations.append(f"{task}/{step.id} has {len(keys)} keys applied: {keys}")


# ---- reading the servers -----------------------------------------------------------------------

async def read_ledger(nc: Nats, settings: Settings) -> list[StoredMsg]:
    """Every message of the ledger stream, in order, read with an ordered consumer."""
    js = nc.jetstream()
    info = await js.stream_info(settings.stream)
    last = int(info.state.last_seq) if info.state.messages else 0
    messages: list[StoredMsg] = []
    if last == 0:
        return messages
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def on_msg(msg: Any) -> None:
        seq = int(msg.metadata.sequence.stream)
        messages.append(StoredMsg(seq, msg.subject, msg.data, dict(msg.headers or {})))
        if seq >= last and not done.done():
            done.set_result(None)

    sub = await js.subscribe(ledger_wildcard(settings.prefix), stream=settings.stream, cb=on_msg,
                             ordered_consumer=True, config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
                             pending_msgs_limit=0, pending_bytes_limit=0)
    try:
        seen = -1
        while not done.done():
            if len(messages) == seen:
                raise UnavailableError(f"the ledger stopped delivering at {len(messages)} of {last}")
            seen = len(messages)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(done), READ_IDLE_S)
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return await opened(nc, settings, messages)


async def opened(nc: Nats, settings: Settings, messages: list[StoredMsg]) -> list[StoredMsg]:
    """The messages with every task-sealed body opened (``security.task_seal``), as the
    projector reads them; one whose task key is gone is left out."""
    keys = task_keys_of(nc, settings)
    out = []
    for m in messages:
        key = subject_key(settings.prefix, m.subject)
        if key is None or m.headers is None or SEALED not in m.headers:
            out.append(m)
            continue
        body = await keys.open_one(key[0], key[1], m.headers, m.data)
        if body is not None:
            headers = {k: v for k, v in m.headers.items() if k != SEALED}
            out.append(StoredMsg(m.seq, m.subject, body, headers))
    return out


async def read_checkpoints(settings: Settings) -> tuple[list[StoredCheckpoint], dict[Key, int]]:
    conn = await db.connect(settings.database_url)
    try:
        rows = await conn.fetch("SELECT id, tenant, task_id, seq, body FROM checkpoints")
        pointers = await conn.fetch("SELECT tenant, task_id, checkpoint_id FROM checkpoint_pointer")
    finally:
        await conn.close()
    return ([StoredCheckpoint(r[0], r[1], r[2], r[3], bytes(r[4])) for r in rows],
            {(p[0], p[1]): p[2] for p in pointers})


@dataclass
class Verdict:
    """Everything the checker found; ``ok`` is the correctness verdict (no timing in it)."""

    classification: Classification
    checkpoints: CheckpointCheck
    pointers: list[str]
    effects: EffectCheck
    projection_equals_replay: bool
    projection_summary: str
    resumes: int
    resume_inconsistent: list[str]
    task_status: dict[str, int]

    @property
    def ok(self) -> bool:
        return (not any(self.classification.violations().values()) and not self.checkpoints.mismatches
                and not self.pointers and not self.effects.violations
                and self.projection_equals_replay and not self.resume_inconsistent)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["ok"] = self.ok
        out["violations"] = self.classification.violations()
        return out


async def check(settings: Settings, *, attempts: Iterable[Attempt], grants: Iterable[Grant],
                resumes: list[ResumeCheck], sink: dict[str, SinkEntry], holders: set[str],
                verify_wait_s: float = 60.0) -> Verdict:
    """Read the stream, the checkpoints and the projection, and judge them (see module docstring)."""
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        messages = await read_ledger(nc, settings)
    finally:
        await nc.close()
    classification = classify(attempts, stored_events(messages, settings.prefix), grants, holders)
    checkpoints, pointers = await read_checkpoints(settings)
    states, cp_check = fold_all(messages, settings.prefix, checkpoints)
    replay = await verify(settings, wait_s=verify_wait_s)
    status = Counter(state.status for state in states.values())
    return Verdict(
        classification=classification, checkpoints=cp_check,
        pointers=pointer_problems(checkpoints, pointers), effects=exactly_once(states, sink),
        projection_equals_replay=replay.ok, projection_summary=replay.summary(),
        resumes=len(resumes),
        resume_inconsistent=[f"{r.task_id} by {r.executor} at {r.watermark}: {', '.join(r.differences)}"
                             for r in resumes if r.differences],
        task_status=dict(sorted(status.items())))
