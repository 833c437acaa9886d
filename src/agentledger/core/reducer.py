"""The Working Memory reducer: ``apply(state, event, seq, changes) -> trace``.

Deterministic and free of I/O, clocks and randomness: the same events in the
same order give the same state, byte for byte. An event that would make an
illegal transition leaves the state unchanged except for a ``Rejection`` entry,
so a refusal is visible and explainable rather than silently dropped (the state
keeps the newest ``RECENT_REJECTIONS`` and counts the older ones; the projection's
``rejections`` table keeps them all).

Idempotency is decided outside the state, which does not carry the ids of the
events it applied (they grow with history, not with state): the caller knows
whether an event id was consumed before and calls ``duplicate`` instead of
``apply`` for a repeat. The rule is the same everywhere: the first occurrence
of an event id in a task's ledger is consumed (applied or rejected); every later
one is a duplicate, a no-op but for the watermark. The live projector asks its
``applied_events`` index; replay and the pure helpers here keep the ids in a
dict (``consume``).

``apply`` mutates a state the caller owns and records in ``changes`` which
variable rows and turns it wrote, so the projector writes only those.
``reduce`` and ``fold`` copy their input and are what callers and tests use.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, MutableMapping
from typing import Any

from msgspec import Struct

from agentledger.contracts import events as ev
from agentledger.core.dag import validate_plan
from agentledger.core.state import (
    RECENT_REJECTIONS,
    Changes,
    LeaseState,
    Question,
    Rejection,
    Reservation,
    SideEffect,
    StepState,
    Turn,
    Variable,
    WorkingMemory,
    decode_state,
    encode_state,
)
from agentledger.errors import ContractError

TERMINAL_TASK = frozenset({"completed", "failed", "cancelled"})


class Trace(Struct, frozen=True, omit_defaults=True):
    """What the reducer did with one event: applied, rejected or duplicate."""

    seq: int
    event_id: str
    kind: str
    outcome: str
    code: str | None = None
    reason: str | None = None


class _Reject(Exception):  # noqa: N818 - control flow inside this module only
    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def reduce(state: WorkingMemory, event: ev.EventBase, seq: int, applied: MutableMapping[str, int],
           changes: Changes | None = None) -> tuple[WorkingMemory, Trace]:
    """Pure transition: a new state and the trace line; ``state`` is not modified.

    ``applied`` maps the ids of the task's events consumed so far to their
    sequence (updated in place); ``changes`` collects the rows written.
    """
    new = decode_state(encode_state(state))
    return new, consume(new, event, seq, applied, Changes() if changes is None else changes)


def fold(state: WorkingMemory, events: Iterable[tuple[ev.EventBase, int]], *,
         applied: MutableMapping[str, int] | None = None,
         changes: Changes | None = None) -> tuple[WorkingMemory, list[Trace]]:
    """Apply ``(event, seq)`` pairs in order to a copy of ``state``.

    ``applied``: the ids consumed before ``state`` (none when omitted, which is
    right for a new task), updated in place; ``changes`` collects the rows
    written (among them the transcript's turns).
    """
    new = decode_state(encode_state(state))
    seen: MutableMapping[str, int] = {} if applied is None else applied
    acc = Changes() if changes is None else changes
    return new, [consume(new, e, s, seen, acc) for e, s in events]


def consume(state: WorkingMemory, event: ev.EventBase, seq: int,
            applied: MutableMapping[str, int], changes: Changes) -> Trace:
    """The idempotency rule over an in-memory record of consumed ids, then ``apply``."""
    first = applied.get(event.event_id)
    if first is not None:
        return duplicate(state, event, seq, first)
    applied[event.event_id] = seq
    return apply(state, event, seq, changes)


def duplicate(state: WorkingMemory, event: ev.EventBase, seq: int, first_seq: int) -> Trace:
    """A repeat of an event id first consumed at ``first_seq``: consumed without effect; the
    watermark still moves so it matches the ledger."""
    state.watermark = max(state.watermark, seq)
    return Trace(seq, event.event_id, ev.kind_of(event), "duplicate",
                 reason=f"event id already applied at seq {first_seq}")


def apply(state: WorkingMemory, event: ev.EventBase, seq: int, changes: Changes) -> Trace:
    """Apply one event seen for the first time to ``state`` in place; return its trace line."""
    kind = ev.kind_of(event)
    # A rejected event is consumed too: replaying it must not apply it later.
    state.events_applied += 1
    state.watermark = max(state.watermark, seq)
    try:
        _check_task_status(state, kind)
        _HANDLERS[kind](state, ev.payload_of(event), seq, changes)
    except _Reject as r:
        _record_rejection(state, Rejection(seq, event.event_id, kind, r.code, r.reason))
        return Trace(seq, event.event_id, kind, "rejected", r.code, r.reason)
    return Trace(seq, event.event_id, kind, "applied")


def _record_rejection(state: WorkingMemory, rejection: Rejection) -> None:
    """Keep the newest ``RECENT_REJECTIONS`` in the state and count the rest (bounded state)."""
    kept = state.rejections
    kept.append(rejection)
    if len(kept) > RECENT_REJECTIONS:
        dropped = len(kept) - RECENT_REJECTIONS
        del kept[:dropped]
        state.older_rejections += dropped


def _check_task_status(state: WorkingMemory, kind: str) -> None:
    if kind == "task_created":
        if state.status != "new":
            raise _Reject("already_created", "task_created for a task that already exists")
        return
    if state.status == "new":
        raise _Reject("task_not_created", f"{kind} before task_created")
    # A closed task still records conversation and the writer's own lease bookkeeping.
    if state.status in TERMINAL_TASK and kind not in ("turn_appended", "lease_granted"):
        raise _Reject("task_closed", f"{kind} after the task was {state.status}")


# ---- task -------------------------------------------------------------------

def _task_created(state: WorkingMemory, p: ev.TaskCreated, seq: int, changes: Changes) -> None:
    state.status = "open"
    state.goal = p.goal
    state.title = p.title
    state.budget_limits = dict(p.budget)


def _task_completed(state: WorkingMemory, p: ev.TaskCompleted, seq: int, changes: Changes) -> None:
    unfinished = [s.id for s in state.steps
                  if state.step_states[s.id].status not in ("succeeded", "cancelled")]
    if unfinished:
        raise _Reject("steps_not_done", "steps not succeeded or cancelled: " + ", ".join(unfinished))
    state.status = "completed"


def _task_failed(state: WorkingMemory, p: ev.TaskFailed, seq: int, changes: Changes) -> None:
    state.status = "failed"


def _task_cancelled(state: WorkingMemory, p: ev.TaskCancelled, seq: int, changes: Changes) -> None:
    state.status = "cancelled"


# ---- plan and steps -----------------------------------------------------------

def _plan_versioned(state: WorkingMemory, p: ev.PlanVersioned, seq: int, changes: Changes) -> None:
    if p.version <= state.plan_version:
        raise _Reject("stale_plan_version",
                      f"plan v{p.version} is not newer than the current v{state.plan_version}")
    try:  # the writer checks plans; a ledger written some other way must not wedge replay
        validate_plan(p.steps)
    except ContractError as exc:
        raise _Reject("invalid_plan", f"{exc.message} at {exc.path}") from None
    old_defs = {s.id: s for s in state.steps}
    # A step keeps its progress only if its definition is unchanged and nothing it
    # depends on (transitively) was redefined: a redone dependency invalidates it.
    reset = {s.id for s in p.steps if s.id not in state.step_states or old_defs.get(s.id) != s}
    changed = True
    while changed:
        changed = False
        for step in p.steps:
            if step.id not in reset and any(d in reset for d in step.depends_on):
                reset.add(step.id)
                changed = True
    new_states: dict[str, StepState] = {}
    for step in p.steps:
        old = state.step_states.get(step.id)
        if step.id not in reset and old is not None:
            new_states[step.id] = old
        else:
            # Attempts keep counting across plans, also through a plan that dropped the step,
            # so an idempotency key built from (step, attempt) never repeats an earlier one.
            attempt = old.attempt if old else state.retired_attempts.pop(step.id, 0)
            new_states[step.id] = StepState(attempt=attempt, plan_version=p.version,
                                            defined_in=p.version, seq=seq)
    for step_id, old_state in state.step_states.items():
        if step_id not in new_states and old_state.attempt:
            state.retired_attempts[step_id] = old_state.attempt
    state.plan_id = p.plan_id
    state.plan_version = p.version
    state.steps = list(p.steps)
    state.step_states = new_states


def _step(state: WorkingMemory, step_id: str, plan_version: int) -> StepState:
    """The step's state, if an event for ``plan_version`` may still act on it."""
    if plan_version > state.plan_version:
        raise _Reject("unknown_plan_version",
                      f"event for plan v{plan_version}, current plan is v{state.plan_version}")
    st = state.step_states.get(step_id)
    if st is None:
        raise _Reject("unknown_step", f"step {step_id!r} is not in plan v{state.plan_version}")
    if plan_version < st.defined_in:
        raise _Reject("stale_plan_version",
                      f"step {step_id!r} was replanned in v{st.defined_in}; "
                      f"event for plan v{plan_version} no longer applies")
    return st


def _step_started(state: WorkingMemory, p: ev.StepStarted, seq: int, changes: Changes) -> None:
    st = _step(state, p.step_id, p.plan_version)
    if st.status not in ("pending", "failed"):
        raise _Reject("illegal_transition", f"step {p.step_id!r} is {st.status}, cannot start")
    if p.attempt <= st.attempt:
        raise _Reject("stale_attempt", f"attempt {p.attempt} is not after attempt {st.attempt}")
    definition = next(s for s in state.steps if s.id == p.step_id)
    waiting = [d for d in definition.depends_on if state.step_states[d].status != "succeeded"]
    if waiting:
        raise _Reject("dependencies_not_done", "waiting for " + ", ".join(waiting))
    if definition.side_effect and p.idempotency_key is None:
        raise _Reject("missing_idempotency_key",
                      f"step {p.step_id!r} has side effects and needs an idempotency key")
    st.status, st.attempt, st.plan_version, st.seq = "running", p.attempt, p.plan_version, seq
    st.idempotency_key, st.error_code = p.idempotency_key, None


def _running(state: WorkingMemory, step_id: str, plan_version: int, attempt: int) -> StepState:
    st = _step(state, step_id, plan_version)
    if st.status != "running":
        code = "not_started" if st.status == "pending" else "illegal_transition"
        raise _Reject(code, f"step {step_id!r} is {st.status}, not running")
    if attempt != st.attempt:
        raise _Reject("stale_attempt", f"attempt {attempt} is not the running attempt {st.attempt}")
    return st


def _step_succeeded(state: WorkingMemory, p: ev.StepSucceeded, seq: int, changes: Changes) -> None:
    st = _running(state, p.step_id, p.plan_version, p.attempt)
    _check_supersedes(state, p.supersedes, p.artifacts)
    st.status, st.seq = "succeeded", seq
    for out in p.outputs:
        state.variables[out.name] = Variable(out.value, out.sealed, p.step_id, seq)
        changes.variables.add(out.name)
    _cite(state, p.artifacts, p.supersedes, seq)


def _step_failed(state: WorkingMemory, p: ev.StepFailed, seq: int, changes: Changes) -> None:
    st = _running(state, p.step_id, p.plan_version, p.attempt)
    st.status, st.error_code, st.seq = "failed", p.error_code, seq
    if p.evidence is not None:
        _cite(state, [p.evidence], [], seq)


def _step_cancelled(state: WorkingMemory, p: ev.StepCancelled, seq: int, changes: Changes) -> None:
    st = _step(state, p.step_id, p.plan_version)
    if st.status in ("succeeded", "cancelled"):
        raise _Reject("illegal_transition", f"step {p.step_id!r} is {st.status}, cannot cancel")
    st.status, st.seq = "cancelled", seq


# ---- budget -------------------------------------------------------------------

def _budget_reserved(state: WorkingMemory, p: ev.BudgetReserved, seq: int, changes: Changes) -> None:
    if p.reservation_id in state.reservations:
        raise _Reject("duplicate_reservation", f"reservation {p.reservation_id!r} exists")
    limit = state.budget_limits.get(p.resource)
    if limit is not None:
        committed = state.budget_used.get(p.resource, 0) + state.budget_reserved.get(p.resource, 0)
        if committed + p.amount > limit:
            raise _Reject("budget_exceeded",
                          f"{p.resource}: reserving {p.amount} exceeds what is left "
                          f"({limit - committed} of {limit})")
    state.reservations[p.reservation_id] = Reservation(p.resource, p.amount)
    state.budget_reserved[p.resource] = state.budget_reserved.get(p.resource, 0) + p.amount


def _reservation(state: WorkingMemory, reservation_id: str, resource: str) -> Reservation:
    res = state.reservations.get(reservation_id)
    if res is None:
        raise _Reject("unknown_reservation", f"no open reservation {reservation_id!r}")
    if res.resource != resource:
        raise _Reject("resource_mismatch",
                      f"reservation {reservation_id!r} is for {res.resource!r}, not {resource!r}")
    return res


def _budget_consumed(state: WorkingMemory, p: ev.BudgetConsumed, seq: int, changes: Changes) -> None:
    res = _reservation(state, p.reservation_id, p.resource)
    if res.consumed + p.amount > res.amount:
        raise _Reject("over_reservation",
                      f"consuming {p.amount} exceeds reservation {p.reservation_id!r} "
                      f"({res.amount - res.consumed} of {res.amount} left)")
    res.consumed += p.amount
    state.budget_used[p.resource] = state.budget_used.get(p.resource, 0) + p.amount
    state.budget_reserved[p.resource] -= p.amount


def _budget_released(state: WorkingMemory, p: ev.BudgetReleased, seq: int, changes: Changes) -> None:
    res = _reservation(state, p.reservation_id, p.resource)
    state.budget_reserved[p.resource] -= res.amount - res.consumed
    del state.reservations[p.reservation_id]


# ---- questions, variables, artifacts, conversation ---------------------------------

def _question_opened(state: WorkingMemory, p: ev.QuestionOpened, seq: int, changes: Changes) -> None:
    if p.question_id in state.questions:
        raise _Reject("duplicate_question", f"question {p.question_id!r} exists")
    state.questions[p.question_id] = Question(p.text, p.blocking, p.step_id)


def _question_resolved(state: WorkingMemory, p: ev.QuestionResolved, seq: int, changes: Changes) -> None:
    q = state.questions.get(p.question_id)
    if q is None or q.status != "open":
        raise _Reject("unknown_question", f"no open question {p.question_id!r}")
    q.status, q.answer = "resolved", p.answer


def _variable_set(state: WorkingMemory, p: ev.VariableSet, seq: int, changes: Changes) -> None:
    state.variables[p.name] = Variable(p.value, p.sealed, p.producer_step, seq)
    changes.variables.add(p.name)


def _check_supersedes(state: WorkingMemory, supersedes: list[str], cited: list[ev.ArtifactRef]) -> None:
    """An event may replace only artifacts this task cited before, and not one it cites itself."""
    own = {a.uri for a in cited}
    for uri in supersedes:
        if uri in own:
            raise _Reject("invalid_supersedes", f"{uri} cannot supersede itself")
        if uri not in state.artifacts:
            raise _Reject("invalid_supersedes", f"{uri} is not an artifact of this task")


def _cite(state: WorkingMemory, cited: list[ev.ArtifactRef], supersedes: list[str], seq: int) -> None:
    """Add ``cited`` to the manifest (an artifact cited again is current again) and mark the
    ones ``supersedes`` names replaced, at ``seq``."""
    for art in cited:
        state.artifacts[art.uri] = art
        state.replaced_artifacts.pop(art.uri, None)
    for uri in supersedes:
        state.replaced_artifacts.setdefault(uri, seq)


def _artifact_registered(state: WorkingMemory, p: ev.ArtifactRegistered, seq: int, changes: Changes) -> None:
    _check_supersedes(state, p.supersedes, [p.artifact])
    _cite(state, [p.artifact], p.supersedes, seq)


def _side_effect_recorded(state: WorkingMemory, p: ev.SideEffectRecorded, seq: int, changes: Changes) -> None:
    st = state.step_states.get(p.step_id)
    if st is None:
        raise _Reject("unknown_step", f"step {p.step_id!r} is not in plan v{state.plan_version}")
    if st.idempotency_key != p.idempotency_key:
        raise _Reject("unknown_idempotency_key",
                      f"step {p.step_id!r} did not start with key {p.idempotency_key!r}")
    if p.idempotency_key in state.side_effects:
        raise _Reject("receipt_exists", f"a receipt for {p.idempotency_key!r} is already recorded")
    state.side_effects[p.idempotency_key] = SideEffect(p.step_id, p.outcome, p.external_ref, seq)


def _turn_appended(state: WorkingMemory, p: ev.TurnAppended, seq: int, changes: Changes) -> None:
    expected = state.turns + 1
    if p.ordinal != expected:
        raise _Reject("ordinal_mismatch", f"turn ordinal {p.ordinal}, expected {expected}")
    state.turns = p.ordinal
    changes.turns.append(Turn(p.role, p.ordinal, seq, p.content, p.sealed))


def _lease_granted(state: WorkingMemory, p: ev.LeaseGranted, seq: int, changes: Changes) -> None:
    # The fencing token is the grant's own ledger sequence (see agentledger.stores.leases).
    state.lease = LeaseState(p.holder, seq, p.expires_at)


def _history_cleared(state: WorkingMemory, p: ev.HistoryCleared, seq: int, changes: Changes) -> None:
    if p.through_ordinal > state.turns:
        raise _Reject("ordinal_mismatch", f"clearing through turn {p.through_ordinal}, but the last "
                                          f"turn is {state.turns}")
    if p.through_ordinal < state.lineage_base:
        raise _Reject("lineage_regression", f"history is already cleared through turn "
                                            f"{state.lineage_base}")
    state.epoch += 1
    state.lineage_base = p.through_ordinal


def _memory_event(state: WorkingMemory, p: Any, seq: int, changes: Changes) -> None:
    # Memory events belong to the tenant's memory ledger (``_memory``), which the Working
    # Memory projection skips; one found on a task's subject changes nothing of the task.
    raise _Reject("memory_event_on_task", "memory events belong to the tenant's memory ledger")


def _document_event(state: WorkingMemory, p: Any, seq: int, changes: Changes) -> None:
    # Documents belong to the tenant's ``_documents`` ledger, which Working Memory skips.
    raise _Reject("document_event_on_task", "document events belong to the tenant's document ledger")


def _forget_event(state: WorkingMemory, p: Any, seq: int, changes: Changes) -> None:
    # Forget requests and receipts belong to the tenant's ``_forget`` ledger, which Working
    # Memory skips.
    raise _Reject("forget_event_on_task", "forget events belong to the tenant's forget ledger")


_HANDLERS: dict[str, Callable[[WorkingMemory, Any, int, Changes], None]] = {
    "task_created": _task_created,
    "plan_versioned": _plan_versioned,
    "step_started": _step_started,
    "step_succeeded": _step_succeeded,
    "step_failed": _step_failed,
    "step_cancelled": _step_cancelled,
    "budget_reserved": _budget_reserved,
    "budget_consumed": _budget_consumed,
    "budget_released": _budget_released,
    "question_opened": _question_opened,
    "question_resolved": _question_resolved,
    "variable_set": _variable_set,
    "side_effect_recorded": _side_effect_recorded,
    "artifact_registered": _artifact_registered,
    "task_completed": _task_completed,
    "task_failed": _task_failed,
    "task_cancelled": _task_cancelled,
    "turn_appended": _turn_appended,
    "lease_granted": _lease_granted,
    "memory_proposed": _memory_event,
    "memory_decided": _memory_event,
    "memory_feedback": _memory_event,
    "history_cleared": _history_cleared,
    "document_ingested": _document_event,
    "forget_requested": _forget_event,
    "forget_completed": _forget_event,
    "memory_forgotten": _memory_event,
}
assert set(_HANDLERS) == set(ev.EVENT_TYPES), "every event kind needs a handler"
