"""The Working Memory reducer: every transition, every rejection code, and the seeds' scenario."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from agentledger.contracts import events as ev
from agentledger.core.reducer import Trace, fold, reduce
from agentledger.core.state import Changes, WorkingMemory, new_state, state_hash, view
from agentledger.core.validate import goal_hash

TENANT, TASK = "acme-eng", "task-1"
GOAL_TEXT = "Fix the flaky retry test"
CRITERIA = ["50 green runs"]
GOAL = {"text": GOAL_TEXT, "acceptance_criteria": CRITERIA, "goal_hash": goal_hash(GOAL_TEXT, CRITERIA)}
# Fields a rejected event may change: the refusal itself and the bookkeeping of what was consumed.
BOOKKEEPING = ("rejections", "older_rejections", "events_applied", "watermark")


def make(kind: str, event_id: str, **payload: Any) -> ev.EventBase:
    """A valid event of this test's task, built from plain values through the contract types."""
    return msgspec.convert(
        {"event_id": event_id, "tenant": TENANT, "task_id": TASK, "producer": "test",
         "occurred_at": "2025-06-12T09:00:00Z", "schema_version": 1, "kind": kind,
         "payload": payload},
        ev.AnyEvent,
    )


def without_bookkeeping(state: WorkingMemory) -> dict[str, Any]:
    data = msgspec.to_builtins(state)
    for key in BOOKKEEPING:
        del data[key]
    return data


class Run:
    """Feeds events one by one through ``reduce``, numbering ids and sequences."""

    def __init__(self) -> None:
        self.state = new_state(TENANT, TASK)
        self.seq = 0
        self.events: list[tuple[ev.EventBase, int]] = []
        # The ids consumed so far (the projection's index) and the rows written (the transcript).
        self.applied: dict[str, int] = {}
        self.changes = Changes()

    def view(self) -> dict[str, Any]:
        return view(self.state, self.changes.turns)

    def event(self, kind: str, event_id: str | None = None, **payload: Any) -> Trace:
        self.seq += 1
        event = make(kind, event_id or f"e{self.seq}", **payload)
        self.events.append((event, self.seq))
        self.state, trace = reduce(self.state, event, self.seq, self.applied, self.changes)
        return trace

    def ok(self, kind: str, event_id: str | None = None, **payload: Any) -> None:
        trace = self.event(kind, event_id, **payload)
        assert trace.outcome == "applied", trace

    def rejected(self, code: str, kind: str, event_id: str | None = None, **payload: Any) -> Trace:
        """Apply an event that must be refused with ``code`` and change nothing else."""
        before = self.state
        trace = self.event(kind, event_id, **payload)
        assert (trace.outcome, trace.code) == ("rejected", code), trace
        after = self.state
        assert without_bookkeeping(after) == without_bookkeeping(before)
        assert after.rejections[:-1] == before.rejections
        last = after.rejections[-1]
        assert (last.seq, last.event_id, last.kind, last.code) == (self.seq, trace.event_id, kind, code)
        assert self.applied[trace.event_id] == self.seq
        assert after.events_applied == before.events_applied + 1
        assert after.watermark == self.seq
        return trace

    # -- shorthands -------------------------------------------------------------------
    def create(self, budget: dict[str, int] | None = None) -> None:
        self.ok("task_created", goal=GOAL, budget=budget or {}, title="flaky retry")

    def plan(self, version: int, steps: list[dict[str, Any]], reason: str = "") -> None:
        self.ok("plan_versioned", plan_id="p1", version=version, steps=steps, reason=reason)

    def start(self, step: str, v: int = 1, attempt: int = 1, key: str | None = None) -> None:
        self.ok("step_started", plan_version=v, step_id=step, attempt=attempt, idempotency_key=key)

    def succeed(self, step: str, v: int = 1, attempt: int = 1, **more: Any) -> None:
        self.ok("step_succeeded", plan_version=v, step_id=step, attempt=attempt, **more)

    def status(self, step: str) -> str:
        return self.state.step_states[step].status


LINEAR = [{"id": "S1"}, {"id": "S2", "depends_on": ["S1"]},
          {"id": "S3", "depends_on": ["S2"], "side_effect": True}]


@pytest.fixture
def run() -> Run:
    """A created task with budget limits and plan v1: S1 -> S2 -> S3 (S3 has side effects)."""
    r = Run()
    r.create({"llm_tokens": 1000, "tool_calls": 10})
    r.plan(1, LINEAR)
    return r


# ---- applied transitions ---------------------------------------------------------------

def test_task_created_opens_the_task() -> None:
    """task_created sets status open, the goal contract, title and budget limits."""
    r = Run()
    r.create({"llm_tokens": 500})
    assert (r.state.status, r.state.title) == ("open", "flaky retry")
    assert r.state.budget_limits == {"llm_tokens": 500}
    assert r.state.goal is not None and r.state.goal.goal_hash == GOAL["goal_hash"]
    assert r.view()["budget"] == {"llm_tokens": {"limit": 500, "used": 0, "reserved": 0, "left": 500}}


def test_plan_defines_pending_steps(run: Run) -> None:
    """A plan makes every step pending, defined in its version, and only roots ready."""
    assert run.state.plan_version == 1
    assert {s: (st.status, st.defined_in) for s, st in run.state.step_states.items()} == {
        "S1": ("pending", 1), "S2": ("pending", 1), "S3": ("pending", 1)}
    assert run.view()["next_ready"] == ["S1"]


def test_start_and_succeed(run: Run) -> None:
    """A started step runs; its success records outputs as variables and its artifacts."""
    run.start("S1")
    assert run.status("S1") == "running" and run.view()["running"] == ["S1"]
    art = {"uri": "s3://a/junit.xml", "blake3": "0" * 64, "schema": "junit", "producer": "S1"}
    run.succeed("S1", outputs=[{"name": "flake_rate", "value": 0.2}], artifacts=[art])
    assert run.status("S1") == "succeeded"
    var = run.state.variables["flake_rate"]
    assert (var.value, var.producer_step, var.seq) == (0.2, "S1", run.seq)
    assert list(run.state.artifacts) == ["s3://a/junit.xml"]
    v = run.view()
    assert (v["done"], v["next_ready"]) == (["S1"], ["S2"])


def test_fail_then_retry(run: Run) -> None:
    """A failed step keeps its error and evidence, and may start again with a later attempt."""
    run.start("S1")
    evidence = {"uri": "s3://a/log", "blake3": "1" * 64, "schema": "log", "producer": "S1"}
    run.ok("step_failed", plan_version=1, step_id="S1", error_code="timeout", evidence=evidence)
    st = run.state.step_states["S1"]
    assert (st.status, st.error_code) == ("failed", "timeout")
    assert "s3://a/log" in run.state.artifacts
    assert run.view()["failed"] == ["S1"] and run.view()["next_ready"] == []
    run.start("S1", attempt=2)
    st = run.state.step_states["S1"]
    assert (st.status, st.attempt, st.error_code) == ("running", 2, None)
    run.succeed("S1", attempt=2)
    assert run.status("S1") == "succeeded"


@pytest.mark.parametrize("before", ["pending", "running", "failed"])
def test_cancel(run: Run, before: str) -> None:
    """A pending, running or failed step can be cancelled; a cancelled step never becomes ready."""
    if before != "pending":
        run.start("S1")
    if before == "failed":
        run.ok("step_failed", plan_version=1, step_id="S1", error_code="boom")
    run.ok("step_cancelled", plan_version=1, step_id="S1", reason="not needed")
    assert run.status("S1") == "cancelled"
    v = run.view()
    assert (v["cancelled"], v["next_ready"]) == (["S1"], [])


def test_side_effect_step_records_idempotency_key(run: Run) -> None:
    """A side-effecting step starts with its idempotency key, which the state keeps."""
    run.start("S1"), run.succeed("S1"), run.start("S2"), run.succeed("S2")
    run.start("S3", key="task-1:S3:1")
    assert run.state.step_states["S3"].idempotency_key == "task-1:S3:1"


def test_budget_reserve_consume_release(run: Run) -> None:
    """Reserving holds budget, consuming moves it to used, releasing returns the rest."""
    def llm() -> dict[str, Any]:
        return run.view()["budget"]["llm_tokens"]  # type: ignore[no-any-return]

    run.ok("budget_reserved", reservation_id="r1", resource="llm_tokens", amount=400)
    assert llm() == {"limit": 1000, "used": 0, "reserved": 400, "left": 600}
    run.ok("budget_consumed", reservation_id="r1", resource="llm_tokens", amount=150)
    assert llm() == {"limit": 1000, "used": 150, "reserved": 250, "left": 600}
    run.ok("budget_released", reservation_id="r1", resource="llm_tokens")
    assert llm() == {"limit": 1000, "used": 150, "reserved": 0, "left": 850}


def test_unlimited_resource(run: Run) -> None:
    """A resource with no limit can be reserved freely; its left is None."""
    run.ok("budget_reserved", reservation_id="r1", resource="gpu_seconds", amount=10**9)
    run.ok("budget_consumed", reservation_id="r1", resource="gpu_seconds", amount=7)
    assert run.view()["budget"]["gpu_seconds"] == {
        "limit": None, "used": 7, "reserved": 10**9 - 7, "left": None}


def test_question_open_and_resolve(run: Run) -> None:
    """An open question is listed until it is resolved with an answer."""
    run.ok("question_opened", question_id="q1", text="keep env var?", blocking=True, step_id="S2")
    assert run.view()["open_questions"] == {
        "q1": {"text": "keep env var?", "blocking": True, "step_id": "S2", "status": "open",
               "answer": None}}
    run.ok("question_resolved", question_id="q1", answer="yes")
    assert run.view()["open_questions"] == {}
    q = run.state.questions["q1"]
    assert (q.status, q.answer) == ("resolved", "yes")


def test_variable_and_artifact(run: Run) -> None:
    """variable_set overwrites by name; artifact_registered is keyed by URI."""
    run.ok("variable_set", name="branch", value="fix/a", producer_step="S1")
    run.ok("variable_set", name="branch", value="fix/b")
    branch = run.state.variables["branch"]
    assert (branch.value, branch.producer_step) == ("fix/b", None)
    art = {"uri": "s3://a/ci.log", "blake3": "2" * 64, "schema": "log", "producer": "ci"}
    run.ok("artifact_registered", artifact=art, note="upload")
    assert run.state.artifacts["s3://a/ci.log"].blake3 == "2" * 64


def test_turns_append_in_order(run: Run) -> None:
    """Turns append with consecutive ordinals and record their ledger sequence."""
    run.ok("turn_appended", role="user", ordinal=1, content="hi")
    run.ok("turn_appended", role="assistant", ordinal=2, content="hello")
    assert [(t.role, t.ordinal, t.content, t.seq) for t in run.changes.turns] == [
        ("user", 1, "hi", run.seq - 1), ("assistant", 2, "hello", run.seq)]
    assert run.state.turns == 2 and run.view()["turns_total"] == 2


def test_history_cleared_starts_a_new_epoch_and_never_moves_back(run: Run) -> None:
    """Clearing moves the conversation to a new epoch whose lineage base is the cleared ordinal;
    clearing past the last turn or below the base is refused."""
    for i in range(1, 4):
        run.ok("turn_appended", role="user", ordinal=i, content=f"turn {i}")
    run.rejected("ordinal_mismatch", "history_cleared", through_ordinal=4)
    run.ok("history_cleared", through_ordinal=2)
    assert (run.state.epoch, run.state.lineage_base) == (1, 2)
    run.rejected("lineage_regression", "history_cleared", through_ordinal=1)
    run.ok("history_cleared", through_ordinal=3)
    assert (run.state.epoch, run.state.lineage_base) == (2, 3)
    assert view(run.state, [])["conversation"] == {"epoch": 2, "lineage_base": 3}


def test_task_completed_after_all_steps_done(run: Run) -> None:
    """A task completes once every step succeeded or was cancelled; then nothing is ready."""
    run.start("S1"), run.succeed("S1"), run.start("S2"), run.succeed("S2")
    run.ok("step_cancelled", plan_version=1, step_id="S3")
    run.ok("task_completed", summary="done")
    assert run.state.status == "completed"
    assert run.view()["next_ready"] == []


@pytest.mark.parametrize(("kind", "payload", "status"), [
    ("task_failed", {"error_code": "budget_exhausted"}, "failed"),
    ("task_cancelled", {"reason": "superseded"}, "cancelled"),
])
def test_task_failed_or_cancelled(run: Run, kind: str, payload: dict[str, Any], status: str) -> None:
    """A task can fail or be cancelled with steps outstanding; next-ready is then empty."""
    run.ok(kind, **payload)
    assert run.state.status == status
    assert run.view()["next_ready"] == []


def test_turn_allowed_after_task_closed(run: Run) -> None:
    """The conversation may continue after the task closed."""
    run.ok("task_cancelled")
    run.ok("turn_appended", role="user", ordinal=1, content="why did you stop?")
    assert len(run.changes.turns) == 1 and run.state.turns == 1


def test_duplicate_event_id_is_a_noop(run: Run) -> None:
    """Re-delivering an event id changes nothing but the watermark, and is traced duplicate."""
    run.start("S1")
    first_id = run.events[-1][0].event_id
    before = msgspec.to_builtins(run.state)
    trace = run.event("step_succeeded", first_id, plan_version=1, step_id="S1")
    assert (trace.outcome, trace.code) == ("duplicate", None)
    assert trace.reason == f"event id already applied at seq {run.seq - 1}"
    after = msgspec.to_builtins(run.state)
    assert after.pop("watermark") == run.seq
    before.pop("watermark")
    assert after == before


def test_duplicate_of_a_rejected_event_stays_rejected(run: Run) -> None:
    """A rejected event is consumed: replaying its id later does not apply it."""
    run.rejected("not_started", "step_succeeded", "late", plan_version=1, step_id="S1")
    run.start("S1")
    trace = run.event("step_succeeded", "late", plan_version=1, step_id="S1")
    assert trace.outcome == "duplicate"
    assert run.status("S1") == "running"


def test_replan_keeps_unchanged_steps_and_resets_changed(run: Run) -> None:
    """A new plan version carries over unchanged steps, resets changed ones (keeping their attempt
    count, so attempt-based idempotency keys never repeat), drops removed ones."""
    run.start("S1"), run.succeed("S1"), run.start("S2")
    run.plan(2, [{"id": "S1"}, {"id": "S2", "depends_on": ["S1"], "title": "narrower"},
                 {"id": "S4", "depends_on": ["S1"]}], reason="S3 not needed")
    states = run.state.step_states
    assert list(states) == ["S1", "S2", "S4"]
    assert (states["S1"].status, states["S1"].defined_in) == ("succeeded", 1)
    assert (states["S2"].status, states["S2"].defined_in, states["S2"].attempt) == ("pending", 2, 1)
    assert (states["S4"].status, states["S4"].defined_in) == ("pending", 2)
    assert run.view()["next_ready"] == ["S2", "S4"]


def test_a_step_dropped_and_added_back_keeps_counting_attempts(run: Run) -> None:
    """A step one plan drops and a later plan adds back continues its attempt numbering, so an
    idempotency key built from (step, attempt) never repeats one that may have had effects."""
    run.start("S1"), run.succeed("S1"), run.start("S2")
    run.plan(2, [{"id": "S1"}])
    assert "S2" not in run.state.step_states
    run.plan(3, [{"id": "S1"}, {"id": "S2", "depends_on": ["S1"]}])
    assert run.state.step_states["S2"].attempt == 1
    assert run.state.retired_attempts == {}
    run.rejected("stale_attempt", "step_started", "again", plan_version=3, step_id="S2", attempt=1)
    run.start("S2", v=3, attempt=2)
    assert run.state.step_states["S2"].attempt == 2


def test_replan_resets_dependents_of_a_changed_step(run: Run) -> None:
    """A step whose dependency was redefined loses its progress too: its input is being redone."""
    run.start("S1"), run.succeed("S1"), run.start("S2"), run.succeed("S2")
    run.plan(2, [{"id": "S1", "title": "redone"}, {"id": "S2", "depends_on": ["S1"]},
                 {"id": "S3", "depends_on": ["S2"]}])
    states = run.state.step_states
    assert [(sid, st.status, st.defined_in) for sid, st in states.items()] == [
        ("S1", "pending", 2), ("S2", "pending", 2), ("S3", "pending", 2)]
    assert run.view()["done"] == []
    assert run.view()["next_ready"] == ["S1"]


def test_plan_with_unknown_dependency_is_rejected_not_fatal(run: Run) -> None:
    """A plan that reached the ledger unchecked is refused by the reducer instead of crashing replay."""
    run.rejected("invalid_plan", "plan_versioned", "bad-plan", plan_id="p", version=2,
                 steps=[{"id": "A", "depends_on": ["ghost"]}])
    assert run.state.plan_version == 1


def test_unchanged_step_accepts_events_of_older_plan(run: Run) -> None:
    """A step whose definition did not change still accepts events sent for the older version."""
    run.start("S1")
    run.plan(2, [*LINEAR, {"id": "S9"}])
    run.succeed("S1", v=1)
    assert run.status("S1") == "succeeded"


def test_reduce_does_not_mutate_input(run: Run) -> None:
    """reduce returns a new state and leaves the one it was given untouched."""
    before = msgspec.json.encode(run.state)
    state = run.state
    new, _ = reduce(state, make("step_started", "x1", plan_version=1, step_id="S1"), 99, dict(run.applied))
    assert msgspec.json.encode(state) == before
    assert new.step_states["S1"].status == "running" and state.step_states["S1"].status == "pending"


def test_fold_equals_stepwise_reduce(run: Run) -> None:
    """fold over the same events gives the state reduce built one step at a time."""
    run.start("S1"), run.succeed("S1")
    changes = Changes()
    folded, traces = fold(new_state(TENANT, TASK), run.events, changes=changes)
    assert state_hash(folded, changes.turns) == state_hash(run.state, run.changes.turns)
    assert [t.outcome for t in traces] == ["applied"] * len(run.events)


# ---- rejections ------------------------------------------------------------------------

def test_task_not_created() -> None:
    """Any event before task_created is refused task_not_created."""
    r = Run()
    r.rejected("task_not_created", "plan_versioned", plan_id="p", version=1, steps=[{"id": "S1"}])
    assert r.state.status == "new"


def test_already_created(run: Run) -> None:
    """A second task_created is refused already_created."""
    run.rejected("already_created", "task_created", goal=GOAL)


@pytest.mark.parametrize("closing", ["task_completed", "task_failed", "task_cancelled"])
def test_task_closed(closing: str) -> None:
    """After a task closes, state events are refused task_closed."""
    r = Run()
    r.create()
    r.ok(closing, **({"error_code": "x"} if closing == "task_failed" else {}))
    r.rejected("task_closed", "plan_versioned", plan_id="p", version=1, steps=[{"id": "S1"}])
    r.rejected("task_closed", "budget_reserved", reservation_id="r", resource="x", amount=1)
    r.rejected("task_closed", "task_cancelled")


def test_already_created_after_close() -> None:
    """task_created on a closed task is already_created, not task_closed."""
    r = Run()
    r.create()
    r.ok("task_cancelled")
    r.rejected("already_created", "task_created", goal=GOAL)


def test_stale_plan_same_version(run: Run) -> None:
    """A plan that is not newer than the current one is refused stale_plan_version."""
    run.rejected("stale_plan_version", "plan_versioned", plan_id="p1", version=1,
                 steps=[{"id": "X"}])


def test_stale_plan_older_version(run: Run) -> None:
    """An older plan arriving after a newer one is refused; the newer plan stays."""
    run.plan(3, LINEAR)
    run.rejected("stale_plan_version", "plan_versioned", plan_id="p1", version=2, steps=[{"id": "X"}])
    assert run.state.plan_version == 3


def test_late_event_for_replanned_step(run: Run) -> None:
    """An event for a step under a plan version older than the step's definition is stale."""
    run.start("S1")
    run.plan(2, [{"id": "S1", "title": "changed"}, *LINEAR[1:]])
    run.rejected("stale_plan_version", "step_succeeded", plan_version=1, step_id="S1")
    run.rejected("stale_plan_version", "step_cancelled", plan_version=1, step_id="S1")
    assert run.status("S1") == "pending"


def test_unknown_plan_version(run: Run) -> None:
    """An event for a plan version newer than the current one is refused unknown_plan_version."""
    run.rejected("unknown_plan_version", "step_started", plan_version=2, step_id="S1")


def test_unknown_step(run: Run) -> None:
    """An event for a step not in the current plan is refused unknown_step."""
    run.rejected("unknown_step", "step_started", plan_version=1, step_id="S9")


def test_illegal_start_twice(run: Run) -> None:
    """Starting a running step again is an illegal transition."""
    run.start("S1")
    run.rejected("illegal_transition", "step_started", plan_version=1, step_id="S1", attempt=2)


def test_illegal_start_succeeded(run: Run) -> None:
    """A succeeded step cannot be started again."""
    run.start("S1"), run.succeed("S1")
    run.rejected("illegal_transition", "step_started", plan_version=1, step_id="S1", attempt=2)


def test_illegal_succeed_cancelled(run: Run) -> None:
    """A cancelled step cannot succeed afterwards."""
    run.start("S1")
    run.ok("step_cancelled", plan_version=1, step_id="S1")
    run.rejected("illegal_transition", "step_succeeded", plan_version=1, step_id="S1")


def test_illegal_fail_succeeded(run: Run) -> None:
    """A succeeded step cannot fail afterwards."""
    run.start("S1"), run.succeed("S1")
    run.rejected("illegal_transition", "step_failed", plan_version=1, step_id="S1", error_code="x")


@pytest.mark.parametrize("terminal", ["succeeded", "cancelled"])
def test_illegal_cancel_terminal(run: Run, terminal: str) -> None:
    """A succeeded or already cancelled step cannot be cancelled."""
    if terminal == "succeeded":
        run.start("S1"), run.succeed("S1")
    else:
        run.ok("step_cancelled", plan_version=1, step_id="S1")
    run.rejected("illegal_transition", "step_cancelled", plan_version=1, step_id="S1")


@pytest.mark.parametrize("kind", ["step_succeeded", "step_failed"])
def test_not_started(run: Run, kind: str) -> None:
    """Finishing a step that never started is refused not_started."""
    extra = {"error_code": "x"} if kind == "step_failed" else {}
    run.rejected("not_started", kind, plan_version=1, step_id="S1", **extra)


def test_stale_attempt_on_restart(run: Run) -> None:
    """Restarting a failed step must use a later attempt number."""
    run.start("S1", attempt=2)
    run.ok("step_failed", plan_version=1, step_id="S1", attempt=2, error_code="x")
    run.rejected("stale_attempt", "step_started", plan_version=1, step_id="S1", attempt=2)
    run.rejected("stale_attempt", "step_started", plan_version=1, step_id="S1", attempt=1)


def test_stale_attempt_on_finish(run: Run) -> None:
    """Finishing an attempt other than the running one is refused stale_attempt."""
    run.start("S1", attempt=1)
    run.ok("step_failed", plan_version=1, step_id="S1", error_code="x")
    run.start("S1", attempt=2)
    run.rejected("stale_attempt", "step_succeeded", plan_version=1, step_id="S1", attempt=1)
    run.rejected("stale_attempt", "step_failed", plan_version=1, step_id="S1", attempt=3, error_code="x")


def test_dependencies_not_done(run: Run) -> None:
    """A step cannot start while a dependency has not succeeded."""
    run.rejected("dependencies_not_done", "step_started", plan_version=1, step_id="S2")
    run.start("S1")
    run.rejected("dependencies_not_done", "step_started", plan_version=1, step_id="S2")


def test_missing_idempotency_key(run: Run) -> None:
    """A side-effecting step cannot start without an idempotency key."""
    run.start("S1"), run.succeed("S1"), run.start("S2"), run.succeed("S2")
    run.rejected("missing_idempotency_key", "step_started", plan_version=1, step_id="S3")


def test_duplicate_reservation(run: Run) -> None:
    """An open reservation id cannot be reserved again (for any resource)."""
    run.ok("budget_reserved", reservation_id="r1", resource="llm_tokens", amount=10)
    run.rejected("duplicate_reservation", "budget_reserved", reservation_id="r1",
                 resource="llm_tokens", amount=10)
    run.rejected("duplicate_reservation", "budget_reserved", reservation_id="r1",
                 resource="tool_calls", amount=1)


def test_budget_exceeded(run: Run) -> None:
    """A reservation beyond what is left (limit - used - reserved) is refused budget_exceeded."""
    run.ok("budget_reserved", reservation_id="r1", resource="llm_tokens", amount=600)
    run.ok("budget_consumed", reservation_id="r1", resource="llm_tokens", amount=100)
    run.rejected("budget_exceeded", "budget_reserved", reservation_id="r2", resource="llm_tokens",
                 amount=401)
    run.ok("budget_reserved", reservation_id="r3", resource="llm_tokens", amount=400)
    assert run.view()["budget"]["llm_tokens"]["left"] == 0


@pytest.mark.parametrize("op", ["budget_consumed", "budget_released"])
def test_unknown_reservation(run: Run, op: str) -> None:
    """Consuming or releasing a reservation that does not exist, or is closed, is refused."""
    amount = {"amount": 1} if op == "budget_consumed" else {}
    run.rejected("unknown_reservation", op, reservation_id="nope", resource="llm_tokens", **amount)
    run.ok("budget_reserved", reservation_id="r1", resource="llm_tokens", amount=10)
    run.ok("budget_released", reservation_id="r1", resource="llm_tokens")
    run.rejected("unknown_reservation", op, reservation_id="r1", resource="llm_tokens", **amount)


@pytest.mark.parametrize("op", ["budget_consumed", "budget_released"])
def test_resource_mismatch(run: Run, op: str) -> None:
    """A reservation is used only for the resource it was made for."""
    amount = {"amount": 1} if op == "budget_consumed" else {}
    run.ok("budget_reserved", reservation_id="r1", resource="llm_tokens", amount=10)
    run.rejected("resource_mismatch", op, reservation_id="r1", resource="tool_calls", **amount)


def test_over_reservation(run: Run) -> None:
    """Consuming more than what is left of a reservation is refused over_reservation."""
    run.ok("budget_reserved", reservation_id="r1", resource="llm_tokens", amount=10)
    run.ok("budget_consumed", reservation_id="r1", resource="llm_tokens", amount=7)
    run.rejected("over_reservation", "budget_consumed", reservation_id="r1", resource="llm_tokens",
                 amount=4)


def test_duplicate_question(run: Run) -> None:
    """A question id can be opened once, even after it was resolved."""
    run.ok("question_opened", question_id="q1", text="?")
    run.rejected("duplicate_question", "question_opened", question_id="q1", text="again?")
    run.ok("question_resolved", question_id="q1", answer="a")
    run.rejected("duplicate_question", "question_opened", question_id="q1", text="again?")


def test_unknown_question(run: Run) -> None:
    """Resolving an unknown or already resolved question is refused unknown_question."""
    run.rejected("unknown_question", "question_resolved", question_id="q1", answer="a")
    run.ok("question_opened", question_id="q1", text="?")
    run.ok("question_resolved", question_id="q1", answer="a")
    run.rejected("unknown_question", "question_resolved", question_id="q1", answer="b")


def test_ordinal_mismatch(run: Run) -> None:
    """A turn whose ordinal is not the next one (gap or repeat) is refused ordinal_mismatch."""
    run.rejected("ordinal_mismatch", "turn_appended", role="user", ordinal=2, content="gap")
    run.ok("turn_appended", role="user", ordinal=1, content="hi")
    run.rejected("ordinal_mismatch", "turn_appended", role="user", ordinal=1, content="repeat")


def test_steps_not_done(run: Run) -> None:
    """A task with a pending, running or failed step cannot complete."""
    run.rejected("steps_not_done", "task_completed")
    run.start("S1")
    run.rejected("steps_not_done", "task_completed")
    run.ok("step_failed", plan_version=1, step_id="S1", error_code="x")
    trace = run.rejected("steps_not_done", "task_completed")
    assert trace.reason == "steps not succeeded or cancelled: S1, S2, S3"


# ---- the seeds' scenario ----------------------------------------------------------------

SEED_PLAN_V1 = [
    {"id": "S1", "title": "reproduce"},
    {"id": "S2", "title": "locate", "depends_on": ["S1"]},
    {"id": "S3", "title": "patch", "depends_on": ["S2"], "side_effect": True},
    {"id": "S4", "title": "unit tests", "depends_on": ["S1"]},
    {"id": "S5", "title": "push branch", "depends_on": ["S3", "S4"], "side_effect": True},
    {"id": "S6", "title": "migrate fixtures", "depends_on": ["S5"]},
    {"id": "S7", "title": "integration tests", "depends_on": ["S5"]},
    {"id": "S8", "title": "report", "depends_on": ["S6", "S7"]},
]
SEED_PLAN_V2 = [
    *SEED_PLAN_V1[:6],
    {"id": "S7", "title": "integration tests on migrated fixtures", "depends_on": ["S6"]},
    SEED_PLAN_V1[7],
]


def test_seed_scenario() -> None:
    """Replan v2 changes S7; a late v1 success for S7 is stale; S1-S5 stay done and S6 is next."""
    r = Run()
    r.create({"llm_tokens": 10000, "tool_calls": 20})
    r.plan(1, SEED_PLAN_V1)
    for i, sid in enumerate(["S1", "S2", "S3", "S4", "S5"], start=1):
        r.ok("budget_reserved", reservation_id=f"r{i}", resource="llm_tokens", amount=1000)
        r.start(sid, key=f"task-1:{sid}:1" if sid in ("S3", "S5") else None)
        r.ok("budget_consumed", reservation_id=f"r{i}", resource="llm_tokens", amount=600)
        r.ok("budget_released", reservation_id=f"r{i}", resource="llm_tokens")
        r.succeed(sid)
    r.ok("budget_reserved", reservation_id="r7", resource="tool_calls", amount=5)
    r.start("S7")
    r.plan(2, SEED_PLAN_V2, reason="integration tests must run on migrated fixtures")
    late = r.rejected("stale_plan_version", "step_succeeded", plan_version=1, step_id="S7")
    assert "replanned in v2" in (late.reason or "")

    v = r.view()
    assert v["plan"]["version"] == 2
    assert v["done"] == ["S1", "S2", "S3", "S4", "S5"]
    assert v["running"] == []
    assert v["next_ready"] == ["S6"]
    assert r.state.step_states["S7"].status == "pending"
    assert v["budget"] == {
        "llm_tokens": {"limit": 10000, "used": 3000, "reserved": 0, "left": 7000},
        "tool_calls": {"limit": 20, "used": 0, "reserved": 5, "left": 15},
    }
    assert [rej["code"] for rej in v["rejections"]] == ["stale_plan_version"]
    assert v["watermark"] == r.seq and v["events_applied"] == r.seq


def test_side_effect_receipt_is_kept_by_key(run: Run) -> None:
    """A receipt for the running attempt's key is recorded once; other keys and repeats are refused."""
    run.plan(2, [{"id": "S1", "side_effect": True}])
    run.ok("step_started", plan_version=2, step_id="S1", idempotency_key="k-S1-1")
    run.rejected("unknown_idempotency_key", "side_effect_recorded", step_id="S1",
                 idempotency_key="k-other", outcome="applied")
    run.ok("side_effect_recorded", step_id="S1", idempotency_key="k-S1-1", outcome="applied",
           external_ref="pr-17")
    receipt = run.state.side_effects["k-S1-1"]
    assert (receipt.step_id, receipt.outcome, receipt.external_ref) == ("S1", "applied", "pr-17")
    run.rejected("receipt_exists", "side_effect_recorded", step_id="S1", idempotency_key="k-S1-1",
                 outcome="not_applied")


def test_lease_grant_is_recorded_with_its_sequence_as_token(run: Run) -> None:
    """lease_granted (written by the writer) records holder, token (= its ledger sequence) and the
    grant's expiry; the view shows them and never the secret's hash; a closed task still records
    a grant (bookkeeping, not a state change of the task)."""
    digest = "ab" * 32
    run.ok("lease_granted", holder="exec-1", expires_at=1749722580.0, secret_hash=digest)
    assert run.view()["lease"] == {"holder": "exec-1", "token": run.seq,
                                        "expires_at": 1749722580.0}
    assert digest not in msgspec.json.encode(run.view()).decode()
    run.ok("task_cancelled", reason="stop")
    run.ok("lease_granted", holder="exec-2", expires_at=1749722680.0, secret_hash=digest)
    assert run.view()["lease"]["holder"] == "exec-2"


def test_lease_grant_before_the_task_exists_is_rejected() -> None:
    """A grant on a subject whose task was never created is a rejection like any other event."""
    state, trace = reduce(new_state(TENANT, TASK),
                          make("lease_granted", "g1", holder="x", expires_at=1.0, secret_hash="ab" * 32), 1,
                          {})
    assert (trace.outcome, trace.code, state.lease) == ("rejected", "task_not_created", None)
