"""An executor process for the seeds' scenario, run by test_resume.py as a real OS process.

    python tests/scenario_executor.py --tenant acme --task t1 --executor exec-1 \
        [--hang-at S6:started | S5:effect] [--lease-ttl 2]

It resumes the task (which takes the lease), then:

* reconciles every step the resume lists in ``reconcile`` by querying the
  external sink by idempotency key, recording a ``side_effect_recorded`` receipt
  with what it found, and closing the step (succeeded if applied, else failed and
  retried later);
* closes every ``interrupted`` step (succeeded if its receipt says applied, else
  failed, to be retried with the next attempt);
* runs the remaining steps in plan order: ``step_started`` (with an idempotency
  key ``<task>:<step>:<attempt>`` for side-effecting steps), the side effect for
  S3/S5 (a call to the sink), its receipt, ``step_succeeded``; then
  ``task_completed``.

Every event carries the lease's fencing token and every append its secret; the
lease is renewed in the background. ``--hang-at`` makes the process stop and
wait (to be SIGKILLed) right after ``step_started`` of a step (``S6:started``)
or right after a step's side effect, before its receipt (``S5:effect``).

The sink is two PostgreSQL tables the test creates: ``sink(key primary key,
step_id, applied_at)`` written with INSERT ... ON CONFLICT DO NOTHING (the
external system's own idempotency), and ``sink_calls(key, step_id)``, one row per
call, so the test can tell whether a side effect was ever attempted twice.

Exit codes: 0 the task completed; 4 the resume was rejected; 5 an append failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
from datetime import UTC, datetime
from typing import Any

import asyncpg

from agentledger.client import Client, connect
from agentledger.config import from_env
from agentledger.contracts.api import LeaseBody
from agentledger.errors import AgentLedgerError

SIDE_EFFECT_STEPS = ("S3", "S5")


def say(**fields: Any) -> None:
    print(json.dumps(fields), flush=True)


class Executor:
    def __init__(self, client: Client, sink: asyncpg.Connection, args: argparse.Namespace) -> None:
        self.client = client
        self.sink = sink
        self.tenant = args.tenant
        self.task = args.task
        self.executor = args.executor
        self.ttl = args.lease_ttl
        self.hang_at = tuple(args.hang_at.split(":")) if args.hang_at else None
        self.lease: LeaseBody | None = None
        self.plan_version = 1
        self.attempts: dict[str, int] = {}
        self.status: dict[str, str] = {}

    async def append(self, kind: str, payload: dict[str, Any], tag: str) -> None:
        event = {"kind": kind, "event_id": f"{self.executor}-{tag}", "tenant": self.tenant,
                 "task_id": self.task, "producer": self.executor,
                 "occurred_at": datetime.now(UTC).isoformat(), "schema_version": 1,
                 "payload": payload}
        try:
            await self.client.append(event, lease=self.lease)
        except AgentLedgerError as exc:
            say(event="append_failed", kind=kind, code=exc.code, message=exc.message)
            sys.exit(5)

    async def hang(self, step: str, point: str) -> None:
        if self.hang_at == (step, point):
            say(event="hanging", step=step, point=point)
            await asyncio.Event().wait()

    async def renew_forever(self) -> None:
        while True:
            await asyncio.sleep(self.ttl / 4)
            assert self.lease is not None
            with contextlib.suppress(Exception):  # a failed renewal shows up as refused appends
                self.lease = await self.client.renew_lease(self.tenant, self.task, self.lease,
                                                           ttl_s=self.ttl)

    # ---- the side effect ---------------------------------------------------------------------

    async def call_sink(self, key: str, step: str) -> str:
        await self.sink.execute("INSERT INTO sink_calls(key, step_id) VALUES ($1, $2)", key, step)
        await self.sink.execute("INSERT INTO sink(key, step_id) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                                key, step)
        return f"sink:{key}"

    async def query_sink(self, key: str) -> bool:
        return await self.sink.fetchval("SELECT count(*) FROM sink WHERE key = $1", key) == 1

    # ---- steps -------------------------------------------------------------------------------------

    def payload(self, step: str, **extra: Any) -> dict[str, Any]:
        return {"plan_version": self.plan_version, "step_id": step, "attempt": self.attempts[step],
                **extra}

    async def close(self, step: str, applied: bool, code: str) -> None:
        attempt = self.attempts[step]
        if applied:
            await self.append("step_succeeded", self.payload(
                step, outputs=[{"name": f"{step}_out", "value": f"{step} done"}]),
                f"{step}-{attempt}-succeeded")
            self.status[step] = "succeeded"
        else:
            await self.append("step_failed", self.payload(step, error_code=code, retryable=True),
                              f"{step}-{attempt}-failed")
            self.status[step] = "failed"

    async def run_step(self, step: str) -> None:
        attempt = self.attempts[step] = self.attempts.get(step, 0) + 1
        key = f"{self.task}:{step}:{attempt}" if step in SIDE_EFFECT_STEPS else None
        extra = {"idempotency_key": key} if key else {}
        await self.append("step_started", self.payload(step, **extra), f"{step}-{attempt}-started")
        say(event="started", step=step, attempt=attempt)
        await self.hang(step, "started")
        if key is not None:
            ref = await self.call_sink(key, step)
            await self.hang(step, "effect")
            await self.append("side_effect_recorded", {"step_id": step, "idempotency_key": key,
                                                       "outcome": "applied", "external_ref": ref},
                              f"{step}-{attempt}-receipt")
        await self.close(step, True, "")

    async def run(self) -> int:
        reply = await self.client.resume(self.tenant, self.task, self.executor, lease_ttl_s=self.ttl)
        say(event="resumed", status=reply.status, reasons=[r.code for r in reply.reasons],
            dispatch=reply.dispatch, reconcile=[r.step_id for r in reply.reconcile],
            interrupted=[s.step_id for s in reply.interrupted], checkpoint_id=reply.checkpoint_id)
        if reply.status == "rejected" or reply.lease is None:
            return 4
        self.lease = reply.lease
        renewer = asyncio.create_task(self.renew_forever())
        state = reply.state
        self.plan_version = state["plan"]["version"]
        steps = [s["id"] for s in state["plan"]["steps"]]
        for sid, st in state["steps"].items():
            self.attempts[sid] = st["attempt"]
            self.status[sid] = st["status"]
        # Unknown outcomes first: query by key, record what happened, close the step.
        for item in reply.reconcile:
            applied = await self.query_sink(item.idempotency_key)
            say(event="reconciled", step=item.step_id, applied=applied)
            await self.append("side_effect_recorded", {
                "step_id": item.step_id, "idempotency_key": item.idempotency_key,
                "outcome": "applied" if applied else "not_applied",
                **({"external_ref": f"sink:{item.idempotency_key}"} if applied else {})},
                f"{item.step_id}-{self.attempts[item.step_id]}-reconciled")
            await self.close(item.step_id, applied, "side_effect_not_applied")
        for step in reply.interrupted:
            await self.close(step.step_id, step.receipt == "applied", "executor_lost")
        for sid in steps:
            if self.status.get(sid) != "succeeded":
                await self.run_step(sid)
        await self.append("task_completed", {"summary": "all steps done"}, "completed")
        say(event="completed")
        renewer.cancel()
        return 0


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tenant", required=True)
    parser.add_argument("--task", required=True)
    parser.add_argument("--executor", required=True)
    parser.add_argument("--hang-at", default=None)
    parser.add_argument("--lease-ttl", type=float, default=30.0)
    args = parser.parse_args(argv)
    settings = from_env()
    client = await connect(settings, timeout=30)
    sink = await asyncpg.connect(settings.database_url)
    try:
        return await Executor(client, sink, args).run()
    finally:
        await sink.close()
        await client.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
