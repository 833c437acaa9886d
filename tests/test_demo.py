"""The seeds' scenario as `make run` shows it, against real servers and real processes."""

from __future__ import annotations

from agentledger.config import Settings
from agentledger.demo import render, render_resume, run_demo
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
