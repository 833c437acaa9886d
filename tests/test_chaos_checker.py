"""The chaos harness's checker, schedule and report on synthetic inputs (no server needed).

These prove the checker can fail: each violation it exists to catch is fed to
it on purpose and must be counted, and a clean history must pass.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

import msgspec
import pytest

from agentledger.chaos.checker import (
    StoredCheckpoint,
    StoredEvent,
    StoredMsg,
    classify,
    exactly_once,
    fold_all,
    pointer_problems,
)
from agentledger.chaos.faults import TARGETS, Injected, base_name, needle, schedule, targets
from agentledger.chaos.history import Attempt, Grant, differing_keys
from agentledger.chaos.probes import Sample, recovery
from agentledger.chaos.profile import CLUSTER, FULL, SHORT, Profile
from agentledger.chaos.sink import IdempotentSink, SinkEntry, SinkUnknownError
from agentledger.chaos.timeline import render
from agentledger.chaos.workload import random_plan
from agentledger.contracts.events import StepDef
from agentledger.core import checkpoint as cp_mod
from agentledger.core.state import SideEffect, StepState, WorkingMemory
from agentledger.core.validate import goal_hash
from agentledger.stores.ledger import MSG_ID

HOLDERS = {"agent-0", "resumer-0"}


def acked(mid: str, seq: int, role: str = "agent") -> Attempt:
    return Attempt(mid, "t1", "variable_set", role, acked_seq=seq)


def stored(mid: str, seq: int, kind: str = "variable_set", holder: str = "") -> StoredEvent:
    return StoredEvent(seq, mid, "t1", kind, holder)


# ---- classification ---------------------------------------------------------------------

def test_a_clean_history_has_no_violations() -> None:
    attempts = [acked("a/t1/e1", 1), acked("a/t1/e2", 3)]
    events = [stored("a/t1/e1", 1), stored("a/t1/g", 2, "lease_granted", "agent-0"),
              stored("a/t1/e2", 3)]
    c = classify(attempts, events, [Grant("a", "t1", "agent-0", 2)], HOLDERS)
    assert c.violations() == dict.fromkeys(c.violations(), 0)
    assert (c.attempted, c.stored, c.writer_grants) == (2, 2, 1)
    assert c.outcomes == {"acked": 2, "failed": 0, "unknown": 0}


def test_an_acked_id_missing_from_the_stream_is_lost() -> None:
    c = classify([acked("a/t1/e1", 1), acked("a/t1/e2", 2)], [stored("a/t1/e1", 1)], [], HOLDERS)
    assert c.lost == ["a/t1/e2"]


def test_an_id_stored_twice_is_duplicated_and_an_unattempted_one_unexpected() -> None:
    c = classify([acked("a/t1/e1", 1)],
                 [stored("a/t1/e1", 1), stored("a/t1/e1", 2), stored("a/t1/x", 3),
                  stored("a/t1/g", 4, "lease_granted", "stranger")], [], HOLDERS)
    assert c.duplicated == ["a/t1/e1"]
    assert c.unexpected == ["a/t1/x", "a/t1/g"]


def test_outcomes_failed_unknown_and_their_landing() -> None:
    refused = Attempt("a/t1/f", "t1", "step_started", "agent", refusals=["stale_fencing_token"])
    refused_but_stored = Attempt("a/t1/fs", "t1", "step_started", "agent", refusals=["conflict"])
    unknown_landed = Attempt("a/t1/u1", "t1", "variable_set", "probe", unknowns=1)
    unknown_lost = Attempt("a/t1/u2", "t1", "variable_set", "probe", unknowns=1)
    # Refused after an unknown attempt: the outcome stays open.
    mixed = Attempt("a/t1/m", "t1", "variable_set", "agent", refusals=["lease_expired"], unknowns=1)
    retried = Attempt("a/t1/r", "t1", "variable_set", "agent", acked_seq=5, unknowns=2,
                      acked_after_unknown=True)
    assert [a.outcome for a in (refused, unknown_landed, mixed, retried)] == [
        "failed", "unknown", "unknown", "acked"]
    c = classify([refused, refused_but_stored, unknown_landed, unknown_lost, mixed, retried],
                 [stored("a/t1/fs", 1), stored("a/t1/u1", 2), stored("a/t1/m", 3),
                  stored("a/t1/r", 5)], [], HOLDERS)
    assert c.failed_but_stored == ["a/t1/fs"]
    assert (c.unknown_then_landed, c.unknown_not_landed) == (2, 1)
    assert (c.acked_after_retry, c.acked_after_unknown) == (1, 1)
    assert c.outcomes == {"acked": 1, "failed": 2, "unknown": 3}
    assert c.by_role["probe"] == {"acked": 0, "failed": 0, "unknown": 2}


def test_acked_at_another_seq_zombie_writes_and_missing_grants_are_violations() -> None:
    zombie_refused = Attempt("a/t1/z1", "t1", "variable_set", "zombie", refusals=["stale_fencing_token"])
    zombie_landed = Attempt("a/t1/z2", "t1", "variable_set", "zombie", unknowns=1)
    c = classify([acked("a/t1/e1", 7), zombie_refused, zombie_landed],
                 [stored("a/t1/e1", 1), stored("a/t1/z2", 2),
                  stored("a/t1/g", 3, "lease_granted", "resumer-0")],
                 [Grant("a", "t1", "agent-0", 3), Grant("a", "t1", "resumer-0", 3)], HOLDERS)
    assert c.misplaced == ["a/t1/e1"]
    assert c.zombie_accepted == ["a/t1/z2"]
    assert c.zombie_refused == 1
    assert c.grants_missing == ["t1 token 3 for agent-0"]


# ---- checkpoints re-derived -------------------------------------------------------------

def _msg(seq: int, kind: str, payload: dict[str, object], task: str = "t1") -> StoredMsg:
    event = {"kind": kind, "event_id": f"e{seq}", "tenant": "a", "task_id": task, "producer": "p",
             "occurred_at": "2026-01-01T00:00:00Z", "schema_version": 1, "payload": payload}
    return StoredMsg(seq, f"x.ledger.a.{task}", msgspec.json.encode(event),
                     {MSG_ID: f"a/{task}/e{seq}"})


def _ledger() -> list[StoredMsg]:
    goal = {"text": "g", "acceptance_criteria": [], "goal_hash": goal_hash("g", [])}
    return [_msg(1, "task_created", {"goal": goal, "budget": {}, "title": "t"}),
            _msg(2, "plan_versioned", {"plan_id": "p", "version": 1, "steps": [{"id": "S1"}]}),
            _msg(3, "task_created", {"goal": goal, "budget": {}, "title": "other"}, task="t2"),
            _msg(4, "step_started", {"plan_version": 1, "step_id": "S1"})]


def _checkpoint(state: WorkingMemory, cp_id: int, seq: int) -> StoredCheckpoint:
    cp = cp_mod.build(state, now=0.0, ttl_s=60.0)
    return StoredCheckpoint(cp_id, state.tenant, state.task_id, seq, cp_mod.encode(cp))


def test_checkpoints_equal_to_the_fold_pass_and_others_are_caught() -> None:
    ledger = _ledger()
    at2 = fold_all(ledger[:2], "x")[0][("a", "t1")]
    good = _checkpoint(at2, 1, 2)
    forged = _checkpoint(msgspec.structs.replace(at2, title="forged"), 2, 2)
    wrong_cursor = _checkpoint(at2, 3, 4)  # the body says cursor 2
    wrong_task = _checkpoint(at2, 4, 3)  # seq 3 is a message of t2
    nowhere = _checkpoint(at2, 5, 99)
    states, check = fold_all(ledger, "x", [good, forged, wrong_cursor, wrong_task, nowhere])
    assert states[("a", "t1")].step_states["S1"].status == "running"
    assert check.checked == 5
    assert len(check.mismatches) == 4
    text = "\n".join(check.mismatches)
    assert "checkpoint 1 " not in text
    assert re.search(r"checkpoint 2 .*differs from the checkpoint of the ledger's fold in state.title", text)
    assert re.search(r"checkpoint 3 .*body cursor 2", text)
    assert re.search(r"checkpoint 4 .*not the task's", text)
    assert re.search(r"checkpoint 5 .*cursor 99 is no message", text)


def test_a_pointer_must_name_the_newest_checkpoint() -> None:
    body = b""
    cps = [StoredCheckpoint(1, "a", "t1", 5, body), StoredCheckpoint(2, "a", "t1", 9, body)]
    assert pointer_problems(cps, {("a", "t1"): 2}) == []
    assert pointer_problems(cps, {("a", "t1"): 1}) == ["pointer of a/t1 at seq 5, newest checkpoint at 9"]
    assert "missing checkpoint 7" in pointer_problems(cps, {("a", "t1"): 7})[0]


# ---- side effects exactly once ------------------------------------------------------------

def _state(status: str, key: str, receipt: str | None) -> dict[tuple[str, str], WorkingMemory]:
    state = WorkingMemory(tenant="a", task_id="t1", steps=[StepDef(id="S1", side_effect=True)],
                          step_states={"S1": StepState(status=status, attempt=2, idempotency_key=key)})
    if receipt is not None:
        state.side_effects[key] = SideEffect(step_id="S1", outcome=receipt, external_ref=None, seq=3)
    return {("a", "t1"): state}


def test_side_effects_exactly_once() -> None:
    once = {"t1:S1:2": SinkEntry("t1", "S1", calls=2, applications=1)}
    assert exactly_once(_state("succeeded", "t1:S1:2", "applied"), once).violations == []
    # A retry under a new key although the first call had applied: twice.
    twice = once | {"t1:S1:1": SinkEntry("t1", "S1", calls=1, applications=1)}
    assert len(exactly_once(_state("succeeded", "t1:S1:2", "applied"), twice).violations) == 1
    assert len(exactly_once(_state("failed", "t1:S1:2", None), twice).violations) == 1
    # Succeeded without its effect, and a receipt that contradicts the sink.
    assert exactly_once(_state("succeeded", "t1:S1:2", "applied"), {}).violations == [
        "t1/S1 succeeded with key t1:S1:2; the sink applied []",
        "t1: receipt applied for t1:S1:2, sink did not apply it"]
    assert exactly_once(_state("running", "t1:S1:2", "not_applied"), once).violations == [
        "t1: receipt not_applied for t1:S1:2, sink applied it"]
    orphan = {"k": SinkEntry("nope", "S1", calls=1, applications=1)}
    assert "a task the ledger lacks" in exactly_once({}, orphan).violations[0]


def test_the_sink_applies_a_key_once_and_flakes_on_purpose(tmp_path: Path) -> None:
    sink = IdempotentSink(tmp_path / "sink.jsonl", random.Random(3), flake_share=0.5)
    outcomes = []
    for _ in range(40):
        try:
            sink.call("k", "t1", "S1")
            outcomes.append("ok")
        except SinkUnknownError:
            outcomes.append("unknown")
    sink.close()
    assert {"ok", "unknown"} == set(outcomes)
    assert sink.applied("k") and not sink.applied("other")
    assert (sink.entries["k"].calls, sink.entries["k"].applications) == (40, 1)
    assert len((tmp_path / "sink.jsonl").read_text().splitlines()) == 40


# ---- recovery, schedule, plans, picture -----------------------------------------------------

def test_recovery_is_measured_from_the_fault_end_to_the_lane_answering_for_good() -> None:
    samples = [Sample("wm", 0.0, 0.1, True), Sample("wm", 1.0, 2.0, False),
               Sample("wm", 1.5, 1.6, True), Sample("wm", 2.0, 3.0, False),
               Sample("wm", 3.1, 3.2, True), Sample("append", 1.0, 1.1, True)]
    r = recovery(samples, "wm", start=1.0, end=1.0, until=10.0)
    assert (r.first_failure, r.back_at, r.seconds) == (1.0, 3.2, 2.2)
    assert recovery(samples, "append", 1.0, 1.0, 10.0).seconds == 0.0
    assert recovery(samples[:4], "wm", 1.0, 1.0, 10.0).seconds is None


@pytest.mark.parametrize("profile", [SHORT, FULL, CLUSTER])
def test_the_schedule_is_seeded_and_hits_every_target_alone_first(profile: Profile) -> None:
    faults = schedule(profile, 7)
    assert faults == schedule(profile, 7)
    assert faults != schedule(profile, 8)
    every = targets(profile)
    assert {f.targets[0] for f in faults[: len(every)]} == set(every)
    assert all(len(f.targets) == 1 for f in faults[: len(every)])
    pairs = [f for f in faults if len(f.targets) == 2]
    assert len(pairs) == profile.pair_faults
    assert all(a != b for a, b in (f.targets for f in pairs))
    assert all((f.pause_s > 0) == (f.kind == "stop") for f in faults)


def test_the_cluster_profile_hits_each_node_and_each_instance() -> None:
    """Protects the cluster run's coverage: every NATS node and every writer and projector
    instance is a target of each fault kind, and their processes are recognised by command line."""
    every = targets(CLUSTER)
    assert {"nats-1", "nats-2", "nats-3", "postgres", "ledger-writer", "ledger-writer-2",
            "projector", "projector-2", "tombstone-fanout-2"} <= set(every)
    assert len(every) == 16
    assert "nats" not in every
    singles = {(f.targets[0], f.kind) for f in schedule(CLUSTER, 1) if len(f.targets) == 1}
    assert singles >= {(t, k) for t in every for k in ("kill", "stop")}
    assert needle("nats-2") == "nats-server" and needle("projector-2") == needle("projector")
    assert base_name("ledger-writer-2") == "ledger-writer" and base_name("nats-2") == "nats-2"


def test_full_covers_both_kinds_on_every_target_alone() -> None:
    singles = {(f.targets[0], f.kind) for f in schedule(FULL, 1) if len(f.targets) == 1}
    assert singles >= {(t, k) for t in TARGETS for k in ("kill", "stop")}


def test_random_plans_are_dags_over_earlier_steps() -> None:
    rng = random.Random(5)
    for _ in range(50):
        plan = random_plan(rng, SHORT)
        ids = [s["id"] for s in plan]
        assert SHORT.steps[0] <= len(plan) <= SHORT.steps[1]
        for i, step in enumerate(plan):
            assert set(step["depends_on"]) <= set(ids[:i])


def test_the_timeline_has_one_band_per_fault() -> None:
    faults = schedule(SHORT, 2)[:3]
    injected = [Injected(f, 1.0 + 3 * i, 1.5 + 3 * i, {}) for i, f in enumerate(faults)]
    svg = render([Sample("append", 0.5, 0.6, True), Sample("wm", 1.2, 2.0, False)], injected, 12.0, "t")
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert svg.count('fill-opacity="0.35"') == 3
    for f in faults:
        assert f">{f.index} {f.label}</text>" in svg


def test_a_resume_answer_differing_from_working_memory_names_the_keys() -> None:
    answer = {"status": "open", "next_ready": ["S2"], "watermark": 9}
    assert differing_keys(answer, dict(answer)) == []
    assert differing_keys(answer, answer | {"next_ready": ["S1"], "lease": {"holder": "x"}}) == [
        "lease", "next_ready"]
