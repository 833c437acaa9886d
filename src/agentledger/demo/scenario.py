"""The seeds' scenario, run against a live stack by ``agentledger demo``.

An agent process runs plan v1 (S1..S8; S3 and S5 have side effects), finishes
S1-S5 and is SIGKILLed before S6. A new executor replans (v2 changes S7); a
straggler from the dead agent then reports S7 under plan v1, which the reducer
refuses. The Working Memory printed at the end is rebuilt from the ledger alone:
done S1-S5, next-ready S6, the budget left, and the refusal with its reason.
Finally a new executor resumes the task: it is dispatched S6 and gets the lease.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from typing import Any

import msgspec

from agentledger.client import Client, connect
from agentledger.config import Settings, from_env
from agentledger.contracts.api import WorkingMemoryReply
from agentledger.contracts.resume import ResumeReply
from agentledger.core.validate import goal_hash
from agentledger.security import auth

TENANT = "demo"
AGENTS = ("agent-1", "agent-2")
GOAL = "Ship the CSV export feature with tests passing"
CRITERIA = ["export endpoint returns valid CSV", "all tests green"]


def plan(version: int) -> list[dict[str, Any]]:
    steps = []
    for i in range(1, 9):
        step: dict[str, Any] = {"id": f"S{i}", "title": f"step {i}",
                                "depends_on": [f"S{i - 1}"] if i > 1 else []}
        if i in (3, 5):
            step["side_effect"] = True
        if i == 7 and version == 2:
            step["title"] = "step 7, rewritten after review"
        steps.append(step)
    return steps


class EventFactory:
    """Builds wire events for one task with fresh ids and the current time."""

    def __init__(self, task_id: str, producer: str) -> None:
        self.task_id = task_id
        self.producer = producer

    def __call__(self, kind: str, payload: dict[str, Any], **extra: Any) -> dict[str, Any]:
        return {"kind": kind, "event_id": uuid.uuid4().hex, "tenant": TENANT,
                "task_id": self.task_id, "producer": self.producer,
                "occurred_at": datetime.now(UTC).isoformat(), "schema_version": 1,
                "payload": payload, **extra}


async def run_agent(client: Client, task_id: str) -> None:
    """The first executor: S1-S5, then hang until killed."""
    ev = EventFactory(task_id, "agent-1")
    await client.append_batch([
        ev("task_created", {"goal": {"text": GOAL, "acceptance_criteria": CRITERIA,
                                     "goal_hash": goal_hash(GOAL, CRITERIA)},
                            "budget": {"tokens": 200_000}, "title": "CSV export"}),
        ev("plan_versioned", {"plan_id": "plan", "version": 1, "steps": plan(1)}),
    ])
    for i in range(1, 6):
        step = f"S{i}"
        start: dict[str, Any] = {"plan_version": 1, "step_id": step}
        if i in (3, 5):
            start["idempotency_key"] = f"{task_id}:{step}:1"
        await client.append_batch([
            ev("budget_reserved", {"reservation_id": f"r{i}", "resource": "tokens", "amount": 20_000}),
            ev("step_started", start),
        ])
        await client.append_batch([
            ev("budget_consumed", {"reservation_id": f"r{i}", "resource": "tokens",
                                   "amount": 9_000 + 500 * i}),
            ev("budget_released", {"reservation_id": f"r{i}", "resource": "tokens"}),
            ev("step_succeeded", {"plan_version": 1, "step_id": step,
                                  "outputs": [{"name": f"{step.lower()}_result", "value": i}]}),
        ])
    print("agent: S1-S5 done, about to start S6", flush=True)
    await asyncio.Event().wait()


async def enroll(settings: Settings) -> dict[str, Settings]:
    """The demo tenant and its two agents, each with credentials of its own (operator action)."""
    if not auth.auth_store(settings).initialized:
        return {name: settings for name in AGENTS}  # a server without accounts: no identities
    await auth.tenant_add(settings, TENANT)
    return {name: msgspec.structs.replace(settings, nats_creds=await auth.agent_add(settings, TENANT, name))
            for name in AGENTS}


async def run_demo(settings: Settings) -> tuple[WorkingMemoryReply, ResumeReply]:
    task_id = f"csv-export-{uuid.uuid4().hex[:8]}"
    agents = await enroll(settings)
    print(f"task {TENANT}/{task_id}: starting agent process (tenant {TENANT}, agent-1)")
    env = {**os.environ, "AGENTLEDGER_NATS_URL": settings.nats_url,
           "AGENTLEDGER_PREFIX": settings.prefix}
    if agents["agent-1"].nats_creds is not None:
        env["AGENTLEDGER_NATS_CREDS"] = str(agents["agent-1"].nats_creds)
    agent = subprocess.Popen([sys.executable, "-m", "agentledger.demo.scenario", "agent", task_id],
                             stdout=subprocess.PIPE, text=True, env=env)
    assert agent.stdout is not None
    line = await asyncio.to_thread(agent.stdout.readline)
    print(line.strip())
    agent.send_signal(signal.SIGKILL)
    agent.wait()
    print(f"agent process {agent.pid} killed with SIGKILL")

    async with await connect(agents["agent-2"]) as client, \
            await connect(agents["agent-1"]) as zombie:
        ev = EventFactory(task_id, "agent-2")
        await client.append(ev("plan_versioned", {"plan_id": "plan", "version": 2,
                                                  "steps": plan(2), "reason": "review asked to rewrite S7"}))
        # The killed agent's last words, sent with its own credentials.
        late = EventFactory(task_id, "agent-1")
        last = await zombie.append(late("step_succeeded", {"plan_version": 1, "step_id": "S7"}))
        print("a straggler reported S7 under plan v1; waiting for the projection")
        for _ in range(200):
            wm = await client.working_memory(TENANT, task_id)
            if wm.seq >= last.seq:
                # A new executor takes over: checks, replay after the checkpoint, lease.
                return wm, await client.resume(TENANT, task_id, "agent-2")
            await asyncio.sleep(0.05)
    raise TimeoutError("the projector did not catch up; see `agentledger up` logs")


def render_resume(reply: ResumeReply) -> str:
    lease = f"lease token {reply.lease.token} for {reply.lease.holder}" if reply.lease else "no lease"
    reasons = ", ".join(r.code for r in reply.reasons) or "none"
    return (f"Resume by agent-2: {reply.status}; dispatch {', '.join(reply.dispatch) or '-'}; "
            f"{lease}; checkpoint {reply.checkpoint_id} + {reply.replayed_events} replayed events; "
            f"reasons: {reasons}")


def render(wm: WorkingMemoryReply) -> str:
    s = wm.state
    lines = [
        f"Working Memory of {s['tenant']}/{s['task_id']} at ledger seq {wm.seq}",
        f"  status     {s['status']}   plan v{s['plan']['version']}",
        f"  done       {', '.join(s['done']) or '-'}",
        f"  next-ready {', '.join(s['next_ready']) or '-'}",
    ]
    for res, b in s["budget"].items():
        lines.append(f"  budget     {res}: used {b['used']}, reserved {b['reserved']}, "
                     f"left {b['left']} of {b['limit']}")
    lines.append("  rejections")
    lines += [f"    seq {r['seq']} {r['kind']}: {r['code']} ({r['reason']})" for r in s["rejections"]]
    return "\n".join(lines)


def main() -> None:
    settings = from_env()
    if len(sys.argv) == 3 and sys.argv[1] == "agent":
        async def agent() -> None:
            async with await connect(settings) as client:
                await run_agent(client, sys.argv[2])
        asyncio.run(agent())


if __name__ == "__main__":
    main()
