"""Properties of the reducer over generated event streams.

The strategy writes plausible streams of one task: mostly legal moves (it peeks
at a scratch fold to start ready steps, finish running ones, use open
reservations) mixed with stale plans, wrong versions and attempts, over-budget
reservations, unknown ids, events after the task closed, and re-deliveries of
earlier events (the same event id again, as a retry after JetStream's dedupe
window would store it).

The state does not carry the ids it consumed: ``Task`` below holds them next to
the state, as the projection's index does, and the transcript the fold appends.
The live projector's shell is modelled too (batches, an index, rows written only
where the reducer reported a change, states evicted and read back from rows), so
a rule that live and replay would apply differently shows up as a difference.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentledger.contracts import events as ev
from agentledger.core.dag import next_ready
from agentledger.core.reducer import Trace, apply, consume, duplicate, fold, reduce
from agentledger.core.state import (
    RECENT_REJECTIONS,
    Changes,
    WorkingMemory,
    decode_state,
    decode_variable,
    encode_core,
    encode_turn,
    encode_variable,
    new_state,
    state_hash,
    view,
)
from agentledger.core.validate import goal_hash

TENANT, TASK = "acme-eng", "task-prop"
STEP_IDS = ["S1", "S2", "S3", "S4", "S5", "S6"]
LIMITS = {"llm_tokens": 1000, "tool_calls": 12}
RESOURCES = [*LIMITS, "gpu_seconds"]  # gpu_seconds has no limit
RESERVATIONS = [f"r{i}" for i in range(6)]
QUESTIONS = ["q1", "q2", "q3"]
ARTIFACTS = [f"s3://bucket/a{i}" for i in range(4)]
GOAL = ev.Goal(text="ship it", acceptance_criteria=["green CI"], goal_hash=goal_hash("ship it", ["green CI"]))
AT = datetime(2025, 6, 12, 9, 0, tzinfo=UTC)
# On a failure hypothesis may shrink for up to five minutes; let it finish so the report
# shows the minimal stream instead of a timeout.
pytestmark = pytest.mark.timeout(900)

STEP_PAYLOADS = (ev.StepStarted, ev.StepSucceeded, ev.StepFailed, ev.StepCancelled)
PROPS = settings(max_examples=80, deadline=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Weighted menu of moves; repeats make the common moves common.
MOVES = (["start"] * 6 + ["succeed"] * 5 + ["fail"] * 2 + ["cancel"] + ["plan"] * 2
         + ["reserve"] * 3 + ["consume"] * 3 + ["release"] * 2 + ["question_open", "question_resolve"]
         + ["turn"] * 2 + ["variable", "artifact", "artifact", "duplicate", "duplicate", "close"])


class Task:
    """One task as a projection holds it: the state, the ids it consumed, the turns appended."""

    def __init__(self) -> None:
        self.state = new_state(TENANT, TASK)
        self.applied: dict[str, int] = {}
        self.changes = Changes()

    def consume(self, e: ev.EventBase, seq: int) -> Trace:
        return consume(self.state, e, seq, self.applied, self.changes)

    def hash(self) -> str:
        return state_hash(self.state, self.changes.turns)


def folded(stream: list[tuple[ev.EventBase, int]]) -> tuple[Task, list[Trace]]:
    task = Task()
    traces = [task.consume(e, seq) for e, seq in stream]
    return task, traces


def event(kind: str, event_id: str, payload: Any) -> ev.EventBase:
    return ev.EVENT_TYPES[kind](event_id=event_id, tenant=TENANT, task_id=TASK, producer="prop",
                                occurred_at=AT, schema_version=1, payload=payload)  # type: ignore[call-arg]


def _plan(draw: st.DrawFn, state: WorkingMemory) -> ev.PlanVersioned:
    current = state.plan_version
    version = draw(st.sampled_from([current + 1] * 4 + [current + 2, current, max(current - 1, 1)]))
    chosen = draw(st.lists(st.sampled_from(STEP_IDS), min_size=1, max_size=len(STEP_IDS), unique=True))
    old = {s.id: s for s in state.steps}
    steps: list[ev.StepDef] = []
    for sid in chosen:
        earlier = [s.id for s in steps]
        keep = old.get(sid)
        if keep is not None and set(keep.depends_on) <= set(earlier) and draw(st.integers(0, 3)):
            steps.append(keep)  # unchanged definition: progress must carry over
            continue
        deps = draw(st.lists(st.sampled_from(earlier), unique=True, max_size=2)) if earlier else []
        steps.append(ev.StepDef(id=sid, title=draw(st.sampled_from(["", "v-a", "v-b"])),
                                depends_on=deps, side_effect=draw(st.booleans())))
    return ev.PlanVersioned(plan_id="plan", version=version, steps=steps)


def _version(draw: st.DrawFn, state: WorkingMemory, sid: str) -> int:
    st_ = state.step_states.get(sid)
    floor = st_.defined_in if st_ else state.plan_version
    options = [state.plan_version] * 6 + [floor, floor - 1, state.plan_version + 1]
    return max(1, draw(st.sampled_from(options)))


def _running_or_any(draw: st.DrawFn, state: WorkingMemory) -> str:
    running = [s for s, x in state.step_states.items() if x.status == "running"]
    if running and draw(st.integers(0, 4)):
        return draw(st.sampled_from(running))
    return draw(st.sampled_from(STEP_IDS))


def _artifact(draw: st.DrawFn, state: WorkingMemory) -> tuple[ev.ArtifactRef, list[str]]:
    """An artifact to cite and the earlier ones it supersedes: mostly ones the task cited,
    sometimes one it never did, or the cited artifact itself (both refused)."""
    i = draw(st.integers(0, len(ARTIFACTS) - 1))
    ref = ev.ArtifactRef(uri=ARTIFACTS[i], blake3=f"{i:064x}", schema="log", producer="ci")
    known = [u for u in state.artifacts if u != ref.uri]
    pool = known * 4 + ARTIFACTS if known else ARTIFACTS
    return ref, draw(st.lists(st.sampled_from(pool), unique=True, max_size=2))


def _move(draw: st.DrawFn, state: WorkingMemory, events: list[ev.EventBase], n: int) -> ev.EventBase:
    eid = f"e{n}"
    if state.status == "new" and draw(st.integers(0, 9)):
        return event("task_created", eid, ev.TaskCreated(goal=GOAL, budget=LIMITS, title="prop"))
    move = draw(st.sampled_from(MOVES))
    if move == "duplicate" and events:
        return draw(st.sampled_from(events))
    if move == "plan" or (not state.steps and move in ("start", "succeed", "fail", "cancel")):
        return event("plan_versioned", eid, _plan(draw, state))
    if move == "start":
        status = {s: x.status for s, x in state.step_states.items()}
        ready = next_ready(state.steps, status) + [s for s, x in status.items() if x == "failed"]
        sid = draw(st.sampled_from(ready)) if ready and draw(st.integers(0, 4)) else draw(
            st.sampled_from(STEP_IDS))
        prior = state.step_states[sid].attempt if sid in state.step_states else 0
        attempt = draw(st.sampled_from([prior + 1] * 4 + [max(prior, 1)]))
        key = None if not draw(st.integers(0, 5)) else f"{TASK}:{sid}:{attempt}"
        return event("step_started", eid, ev.StepStarted(plan_version=_version(draw, state, sid), step_id=sid,
                                                         attempt=attempt, idempotency_key=key))
    if move in ("succeed", "fail"):
        sid = _running_or_any(draw, state)
        cur = state.step_states[sid].attempt if sid in state.step_states else 1
        attempt = max(1, draw(st.sampled_from([cur] * 5 + [cur + 1, cur - 1])))
        version = _version(draw, state, sid)
        if move == "succeed":
            outputs = [ev.Output(name=f"out_{sid}", value=draw(st.integers(0, 9)))]
            ref, supersedes = _artifact(draw, state) if not draw(st.integers(0, 2)) else (None, [])
            return event("step_succeeded", eid, ev.StepSucceeded(
                plan_version=version, step_id=sid, attempt=attempt, outputs=outputs,
                artifacts=[ref] if ref is not None else [], supersedes=supersedes))
        return event("step_failed", eid, ev.StepFailed(plan_version=version, step_id=sid, attempt=attempt,
                                                       error_code="boom"))
    if move == "cancel":
        sid = draw(st.sampled_from(STEP_IDS))
        return event("step_cancelled", eid, ev.StepCancelled(plan_version=_version(draw, state, sid),
                                                             step_id=sid))
    if move in ("reserve", "consume", "release"):
        held = sorted(state.reservations)
        if move != "reserve" and held and draw(st.integers(0, 4)):
            rid = draw(st.sampled_from(held))
        else:
            rid = draw(st.sampled_from(RESERVATIONS))
        res = state.reservations.get(rid)
        resource = res.resource if res is not None and draw(st.integers(0, 5)) else draw(
            st.sampled_from(RESOURCES))
        if move == "reserve":
            return event("budget_reserved", eid, ev.BudgetReserved(reservation_id=rid, resource=resource,
                                                                   amount=draw(st.integers(0, 600))))
        if move == "consume":
            room = res.amount - res.consumed if res is not None else 0
            amount = draw(st.integers(0, room) if room and draw(st.integers(0, 3)) else st.integers(0, 400))
            return event("budget_consumed", eid, ev.BudgetConsumed(reservation_id=rid, resource=resource,
                                                                   amount=amount))
        return event("budget_released", eid, ev.BudgetReleased(reservation_id=rid, resource=resource))
    if move == "question_open":
        qid = draw(st.sampled_from(QUESTIONS))
        return event("question_opened", eid, ev.QuestionOpened(question_id=qid, text="which branch?",
                                                               blocking=draw(st.booleans())))
    if move == "question_resolve":
        return event("question_resolved", eid, ev.QuestionResolved(
            question_id=draw(st.sampled_from(QUESTIONS)), answer="main"))
    if move == "turn":
        expected = state.turns + 1
        ordinal = draw(st.sampled_from([expected] * 5 + [expected + 1, max(expected - 1, 1)]))
        role = draw(st.sampled_from(["user", "assistant", "tool"]))
        return event("turn_appended", eid, ev.TurnAppended(role=role, ordinal=ordinal, content=f"turn {n}"))
    if move == "variable":
        return event("variable_set", eid, ev.VariableSet(name=draw(st.sampled_from(["branch", "pr"])),
                                                         value=draw(st.integers(0, 99))))
    if move == "artifact":
        ref, supersedes = _artifact(draw, state)
        return event("artifact_registered", eid, ev.ArtifactRegistered(artifact=ref, supersedes=supersedes))
    finished = all(x.status in ("succeeded", "cancelled") for x in state.step_states.values())
    if move == "close" and (finished or not draw(st.integers(0, 2))):
        kind = "task_completed" if finished and draw(st.integers(0, 2)) else draw(
            st.sampled_from(["task_completed", "task_failed", "task_cancelled"]))
        payload = {"task_completed": ev.TaskCompleted(), "task_failed": ev.TaskFailed(error_code="gave_up"),
                   "task_cancelled": ev.TaskCancelled()}[kind]
        return event(kind, eid, payload)
    return event("variable_set", eid, ev.VariableSet(name="note", value=n))


@st.composite
def streams(draw: st.DrawFn, max_size: int = 45) -> list[tuple[ev.EventBase, int]]:
    """A plausible ``(event, seq)`` stream of one task, seqs 1..n."""
    scratch = Task()
    events: list[ev.EventBase] = []
    for n in range(1, draw(st.integers(1, max_size)) + 1):
        e = _move(draw, scratch.state, events, n)
        scratch.consume(e, n)
        events.append(e)
    return [(e, i) for i, e in enumerate(events, start=1)]


def encoded(state: WorkingMemory) -> bytes:
    return msgspec.json.encode(state)


def outstanding(state: WorkingMemory) -> dict[str, int]:
    """Reserved-but-unconsumed per resource, recomputed from the (open) reservations."""
    out: dict[str, int] = {}
    for r in state.reservations.values():
        out[r.resource] = out.get(r.resource, 0) + r.amount - r.consumed
    return out


def check_invariants(state: WorkingMemory) -> None:
    """next-ready and budget invariants that must hold after every event."""
    v = view(state, [])
    status = {sid: x.status for sid, x in state.step_states.items()}
    assert [s.id for s in state.steps] == list(state.step_states)
    done = {sid for sid, s in status.items() if s == "succeeded"}
    expected = [s.id for s in state.steps if status[s.id] == "pending" and set(s.depends_on) <= done]
    assert v["next_ready"] == (expected if state.status == "open" else [])
    assert v["done"] == [s.id for s in state.steps if status[s.id] == "succeeded"]

    held = outstanding(state)
    for resource, used in state.budget_used.items():
        assert used >= 0, resource
    for r in state.reservations.values():
        assert 0 <= r.consumed <= r.amount
    for resource, limit in state.budget_limits.items():
        used = state.budget_used.get(resource, 0)
        assert used + held.get(resource, 0) <= limit, (resource, used, held)
        assert v["budget"][resource]["left"] == limit - used - held.get(resource, 0) >= 0
    for resource, b in v["budget"].items():
        assert b["reserved"] == held.get(resource, 0)
        assert b["used"] == state.budget_used.get(resource, 0)


# ---- properties -------------------------------------------------------------------------

@PROPS
@given(streams())
def test_fold_is_deterministic(stream: list[tuple[ev.EventBase, int]]) -> None:
    """Folding the same stream twice gives byte-identical states, equal hashes and traces."""
    a, ta = folded(stream)
    b, tb = folded(stream)
    assert encoded(a.state) == encoded(b.state)
    assert a.hash() == b.hash()
    assert ta == tb
    assert view(a.state, a.changes.turns) == view(b.state, b.changes.turns)


@PROPS
@given(streams(), st.data())
def test_duplicate_is_idempotent(stream: list[tuple[ev.EventBase, int]], data: st.DataObject) -> None:
    """Re-inserting an earlier event anywhere after it changes nothing but the watermark and adds
    a duplicate trace."""
    i = data.draw(st.integers(0, len(stream) - 1), label="copied")
    j = data.draw(st.integers(i + 1, len(stream)), label="inserted at")
    seq = data.draw(st.integers(1, 10**6), label="redelivery seq")
    copy = (stream[i][0], seq)
    base, base_traces = folded(stream)
    dup, dup_traces = folded([*stream[:j], copy, *stream[j:]])
    assert dup.state.watermark == max(base.state.watermark, seq)
    dup.state.watermark = base.state.watermark
    assert encoded(dup.state) == encoded(base.state)
    assert dup.changes.turns == base.changes.turns and dup.applied == base.applied
    extra = dup_traces.pop(j)
    assert dup_traces == base_traces
    assert (extra.outcome, extra.event_id, extra.seq) == ("duplicate", stream[i][0].event_id, seq)


@PROPS
@given(streams())
def test_stepwise_reduce_equals_fold_and_does_not_mutate(stream: list[tuple[ev.EventBase, int]]) -> None:
    """reduce one event at a time equals fold, and never modifies the state it is given."""
    state = new_state(TENANT, TASK)
    applied: dict[str, int] = {}
    changes = Changes()
    traces: list[Trace] = []
    for e, seq in stream:
        before = encoded(state)
        new, trace = reduce(state, e, seq, applied, changes)
        assert encoded(state) == before, "reduce mutated its input"
        assert new is not state
        state = new
        traces.append(trace)
    fold_changes = Changes()
    result, fold_traces = fold(new_state(TENANT, TASK), stream, changes=fold_changes)
    assert encoded(state) == encoded(result)
    assert state_hash(state, changes.turns) == state_hash(result, fold_changes.turns)
    assert traces == fold_traces


def _without_bookkeeping(state: WorkingMemory) -> dict[str, Any]:
    data = msgspec.to_builtins(state)
    for key in ("rejections", "older_rejections", "events_applied", "watermark"):
        del data[key]
    return data


@PROPS
@given(streams())
def test_no_regression(stream: list[tuple[ev.EventBase, int]]) -> None:
    """Plan version never decreases; stale step events never touch the step; refusals change nothing."""
    task = Task()
    state = task.state
    for e, seq in stream:
        before = msgspec.json.decode(encoded(state), type=WorkingMemory)
        trace = task.consume(e, seq)
        assert state.events_applied == before.events_applied + (trace.outcome != "duplicate")
        assert state.plan_version >= before.plan_version
        assert state.watermark >= before.watermark
        if trace.outcome != "applied":
            assert _without_bookkeeping(state) == _without_bookkeeping(before)
            assert (state.older_rejections + len(state.rejections)
                    == before.older_rejections + len(before.rejections) + (trace.outcome == "rejected"))
            assert len(state.rejections) <= RECENT_REJECTIONS
            continue
        p = e.payload  # type: ignore[attr-defined]
        if isinstance(p, STEP_PAYLOADS) and p.step_id in before.step_states:
            assert p.plan_version >= before.step_states[p.step_id].defined_in, "stale step event applied"
        # A finished step only changes when a newer plan redefines or drops it.
        if not isinstance(p, ev.PlanVersioned):
            for step, old in before.step_states.items():
                if old.status in ("succeeded", "cancelled"):
                    assert state.step_states[step] == old, step


@PROPS
@given(streams())
def test_stale_step_events_are_rejected(stream: list[tuple[ev.EventBase, int]]) -> None:
    """A step event for a plan older than the step's definition is refused stale_plan_version."""
    task = Task()
    state = task.state
    for e, seq in stream:
        p = e.payload  # type: ignore[attr-defined]
        if not isinstance(p, STEP_PAYLOADS):
            task.consume(e, seq)
            continue
        before = state.step_states.get(p.step_id)
        stale = (state.status == "open" and e.event_id not in task.applied
                 and before is not None and p.plan_version < before.defined_in)
        before = msgspec.structs.replace(before) if before is not None else None
        trace = task.consume(e, seq)
        if stale:
            assert (trace.outcome, trace.code) == ("rejected", "stale_plan_version")
            assert state.step_states[p.step_id] == before


@PROPS
@given(streams())
def test_invariants_hold_after_every_event(stream: list[tuple[ev.EventBase, int]]) -> None:
    """next-ready matches the DAG and done set, and budget never over-commits, after each event."""
    task = Task()
    check_invariants(task.state)
    for e, seq in stream:
        task.consume(e, seq)
        check_invariants(task.state)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams(max_size=80))
def test_watermark_is_highest_consumed_seq(stream: list[tuple[ev.EventBase, int]]) -> None:
    """The watermark is the highest seq consumed, duplicates included, so it matches the ledger."""
    state, traces = fold(new_state(TENANT, TASK), stream)
    assert len(traces) == len(stream)
    assert state.watermark == max((t.seq for t in traces), default=0)


@PROPS
@given(streams(max_size=60))
def test_superseded_artifacts_are_replaced_and_only_current_ones_listed(
        stream: list[tuple[ev.EventBase, int]]) -> None:
    """An applied event's ``supersedes`` marks those earlier artifacts replaced (at its seq); an
    artifact cited again is current again; an event superseding an artifact the task never
    cited, or the one it cites, is rejected and changes nothing. The view's ``artifacts`` are
    the current ones only, in citation order, and ``replaced_artifacts`` the others: checked
    after every event against a model of the rule kept beside the fold."""
    task = Task()
    cited: dict[str, None] = {}
    replaced: dict[str, int] = {}
    for e, seq in stream:
        before = set(task.state.artifacts)
        trace = task.consume(e, seq)
        p = e.payload  # type: ignore[attr-defined]
        refs = [p.artifact] if trace.kind == "artifact_registered" else getattr(p, "artifacts", [])
        supersedes = getattr(p, "supersedes", [])
        bad = [u for u in supersedes if u not in before or u in {r.uri for r in refs}]
        if bad and trace.outcome != "duplicate":
            assert trace.outcome == "rejected", (e, trace)
        if trace.outcome == "applied" and trace.kind in ("artifact_registered", "step_succeeded"):
            for r in refs:
                cited[r.uri] = None
                replaced.pop(r.uri, None)
            for u in supersedes:
                replaced.setdefault(u, seq)
        v = view(task.state, [])
        assert [a["uri"] for a in v["artifacts"]] == [u for u in task.state.artifacts if u not in replaced]
        assert {a["uri"]: a["replaced_at"] for a in v["replaced_artifacts"]} == replaced
        assert list(task.state.artifacts) == list(cited)  # replaced ones stay cited (checkpoints verify them)


class LiveShell:
    """The projector's batch path over rows, without servers: the ``applied_events`` index, the
    core row, one row per variable, one per turn; a batch writes the core and only the rows the
    reducer reported, and its state is kept or evicted (read back from the rows next time)."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.core: bytes | None = None
        self.variables: dict[str, bytes] = {}
        self.turns: dict[int, bytes] = {}
        self.cached: WorkingMemory | None = None

    def batch(self, items: list[tuple[ev.EventBase, int]], evict: bool) -> None:
        first: dict[str, int] = {}
        for e, seq in items:
            first.setdefault(e.event_id, seq)
        for event_id, seq in first.items():
            first[event_id] = self.index.setdefault(event_id, seq)  # claimed, or consumed before
        state = self.cached
        if state is None:
            state = decode_state(self.core) if self.core is not None else new_state(TENANT, TASK)
            for name, data in self.variables.items():
                state.variables[name] = decode_variable(data)
        changes = Changes()
        for e, seq in items:
            if first[e.event_id] == seq:
                apply(state, e, seq, changes)
            else:
                duplicate(state, e, seq, first[e.event_id])
        self.core = encode_core(state)
        self.variables.update({n: encode_variable(state.variables[n]) for n in changes.variables})
        self.turns.update({t.ordinal: encode_turn(t) for t in changes.turns})
        self.cached = None if evict else state


@PROPS
@given(streams(max_size=60), st.data())
def test_live_batches_over_rows_equal_a_rebuild(stream: list[tuple[ev.EventBase, int]],
                                                data: st.DataObject) -> None:
    """Live == rebuild for any batching, any cache eviction and duplicates in the same batch or
    in a later one (past the dedupe window): the same core row, variable rows, turn rows and
    index as one fold of the whole stream."""
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(stream)), max_size=8), label="cuts")))
    live = LiveShell()
    start = 0
    for end in [*cuts, len(stream)]:
        if end > start:
            live.batch(stream[start:end], evict=data.draw(st.booleans(), label="evict"))
            start = end
    rebuilt, _ = folded(stream)
    assert live.core == encode_core(rebuilt.state)
    assert live.variables == {n: encode_variable(v) for n, v in rebuilt.state.variables.items()}
    assert live.turns == {t.ordinal: encode_turn(t) for t in rebuilt.changes.turns}
    assert live.index == rebuilt.applied
