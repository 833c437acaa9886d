"""The seeds' scenario as `make run` shows it, against real servers and real processes."""

from __future__ import annotations

from agentledger.config import Settings
from agentledger.demo.context import render_compaction, run_compaction
from agentledger.demo.memory import FAKE_TOKEN, render_lab, run_lab
from agentledger.demo.scenario import render, render_resume, run_demo
from ckpt_support import running


async def test_demo_shows_done_next_ready_budget_rejection_and_resume(settings: Settings) -> None:
    """After the agent process is SIGKILLed and the plan changes S7, Working Memory shows S1-S5 done,
    S6 next, the budget left, the late plan-v1 event refused, and a new executor gets S6 and the lease."""
    async with running(settings):
        wm, resumed = await run_demo(settings)
    state = wm.state
    assert state["done"] == ["S1", "S2", "S3", "S4", "S5"]
    assert state["next_ready"] == ["S6"]
    assert state["plan"]["version"] == 2
    assert state["budget"]["tokens"] == {"limit": 200_000, "used": 52_500, "reserved": 0, "left": 147_500}
    assert [(r["kind"], r["code"]) for r in state["rejections"]] == [("step_succeeded", "stale_plan_version")]
    assert (resumed.status, resumed.dispatch) == ("resumable", ["S6"])
    assert resumed.lease is not None and resumed.lease.holder == "agent-2"
    assert "next-ready S6" in render(wm)
    assert "dispatch S6" in render_resume(resumed)


async def test_policy_lab_decides_each_candidate_and_reads_with_a_receipt(settings: Settings) -> None:
    """The seed's five candidates: preference and task result written, the diagnostic kept to its
    task for two days, the pasted token denied, the uploaded rule quarantined; the read as the
    lab's bound agent returns the preference and the task result, with a receipt."""
    async with running(settings, memory=True):
        decided, read = await run_lab(settings)
    by_name = {d.proposal_id.split("-", 2)[-1]: d for d in decided.decisions}
    assert {n: d.action for n, d in by_name.items()} == {
        "preference": "write", "task-result": "write", "diagnostic": "write", "token": "deny",
        "uploaded-rule": "quarantine"}
    assert by_name["token"].record_id is None
    assert [r.rule for r in by_name["token"].trace if r.outcome == "deny"] or \
        by_name["token"].reason == "secret_detected"
    kinds = sorted(item.kind for item in read.items)
    assert kinds == ["preference", "task_result"]
    assert all(FAKE_TOKEN not in str(item.value) for item in read.items)
    assert read.receipt is not None and set(read.receipt.selected) == {i.record_id for i in read.items}
    assert "policy lab" in render_lab(decided, read)


async def test_compaction_walk_through_activates_cp30_then_cp42(settings: Settings) -> None:
    """Seed 002 as the demo prints it: CP-30 active after turn 32; turn 49 compacts 31..42 and
    keeps 43..48 verbatim; the committed answer (turn 50) activates CP-42 over 1..42."""
    async with running(settings, memory=True, context=True):
        g31, c31, g49, c49 = await run_compaction(settings)
    assert c31.activated and c31.checkpoint is not None
    assert (c31.checkpoint.coverage.first, c31.checkpoint.coverage.through) == (1, 30)
    plan = g49.compaction
    assert plan is not None and plan.outcome == "compacted" and g49.selected == "primary"
    assert (plan.compacted.first, plan.compacted.through) == (31, 42)
    assert (plan.recent_exact.first, plan.recent_exact.through) == (43, 48)
    assert c49.activated and c49.checkpoint is not None
    assert (c49.checkpoint.coverage.first, c49.checkpoint.coverage.through) == (1, 42)
    text = render_compaction(g31, c31, g49, c49)
    assert "turns 31…42 compacted, 43…48 verbatim, 49 current" in text
    assert "CP-42 active (coverage 1…42)" in text
