"""The chaos workload: agents running random plans, crashing, resuming, and zombies.

Faults only mean something under traffic that uses every guarantee the stack
makes, so the workload does what a real executor does, through
``agentledger.client`` with a tenant agent's own credentials:

* each agent runs tasks one after another: ``task_created`` and
  ``plan_versioned`` (a random DAG), a lease, then the steps in dependency
  order (``step_started``, the side effect into the idempotent sink with the
  step's idempotency key, its ``side_effect_recorded`` receipt,
  ``step_succeeded``; some attempts fail and are retried with the next
  attempt), ``task_completed``; the lease is renewed all along;
* an append whose outcome is unknown is retried with the same event ids (the
  writer turns a landed one into ``duplicate``); a sink call whose outcome is
  unknown is answered by asking the sink before calling again;
* some tasks' executors crash on purpose (after ``step_started``, after the
  side effect but before its receipt, or between steps) and keep their lease;
  tasks whose executor lost its lease or gave up on an append end up in the
  same hand-off queue. A second executor resumes them with ``client.resume``
  (reconciling unconfirmed side effects by asking the sink) and finishes them;
* once the second executor holds the lease, the crashed one writes again with
  its old lease: a zombie, whose writes must all be refused.

Every attempt is recorded in the run's ``History`` for the checker.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog

from agentledger.chaos.history import Grant, History, ResumeCheck, differing_keys, is_definite
from agentledger.chaos.profile import Profile
from agentledger.chaos.sink import IdempotentSink, SinkUnknownError
from agentledger.client import Client
from agentledger.contracts.api import AppendResult, LeaseBody
from agentledger.contracts.resume import ResumeReply
from agentledger.core.validate import goal_hash
from agentledger.errors import AgentLedgerError
from agentledger.stores.ledger import msg_id

log = structlog.get_logger(__name__)

TENANT = "chaos"
GOAL = "Run a random plan to completion under faults"
CRITERIA = ["every step succeeded", "every side effect applied exactly once"]
# How often a task may be handed from executor to executor before the workload gives it up.
MAX_HANDOFFS = 4
SINK_ATTEMPTS = 20


class GaveUpError(Exception):
    """An append stayed without a definite answer for the profile's append deadline."""


class CrashedError(Exception):
    """The executor crashes here on purpose (the task goes to another executor)."""


@dataclass
class Stats:
    """What the workload did, for the report."""

    tasks_started: int = 0
    tasks_completed: int = 0
    crashes: int = 0
    handoffs: int = 0
    resumed: int = 0
    needs_reconcile: int = 0
    reconciled_applied: int = 0
    reconciled_not_applied: int = 0
    interrupted_closed: int = 0
    zombie_writes: int = 0
    gave_up: int = 0
    lease_lost: int = 0
    dropped: int = 0
    sink_unknown: int = 0
    step_failures: int = 0


@dataclass
class TaskRun:
    """One executor's view of one task it holds the lease of."""

    task_id: str
    plan: list[dict[str, Any]]
    lease: LeaseBody
    status: dict[str, str] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)

    def runnable(self) -> list[dict[str, Any]]:
        """Steps to run now: pending or failed, every dependency succeeded, in plan order."""
        return [s for s in self.plan if self.status.get(s["id"], "pending") in ("pending", "failed")
                and all(self.status.get(d) == "succeeded" for d in s["depends_on"])]

    def finished(self) -> bool:
        return all(self.status.get(s["id"]) == "succeeded" for s in self.plan)


@dataclass
class Zombie:
    """A crashed executor that still has its client and its old lease."""

    executor: Executor
    lease: LeaseBody
    step_id: str


@dataclass
class Handoff:
    """A task for another executor to resume, and why."""

    task_id: str
    reason: str  # crashed | gave_up | lease_lost
    zombie: Zombie | None = None
    times: int = 1


@dataclass
class Workload:
    """State shared by every executor of one run."""

    profile: Profile
    history: History
    sink: IdempotentSink
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    handoffs: asyncio.Queue[Handoff] = field(default_factory=asyncio.Queue)
    # Hand-offs queued or being worked on; resumers finish when it is 0 and the agents are done.
    outstanding: int = 0
    agents_done: asyncio.Event = field(default_factory=asyncio.Event)
    stats: Stats = field(default_factory=Stats)

    def hand_off(self, handoff: Handoff) -> None:
        self.outstanding += 1
        self.stats.handoffs += 1
        self.handoffs.put_nowait(handoff)


def random_plan(rng: random.Random, profile: Profile) -> list[dict[str, Any]]:
    """A random DAG: each step depends on up to two earlier ones, some have side effects."""
    steps: list[dict[str, Any]] = []
    for i in range(1, rng.randint(*profile.steps) + 1):
        earlier = [s["id"] for s in steps]
        deps = sorted(rng.sample(earlier, k=min(len(earlier), rng.choice((0, 1, 1, 2)))))
        steps.append({"id": f"S{i}", "title": f"step {i}", "depends_on": deps,
                      "side_effect": rng.random() < profile.side_effect_share})
    return steps


def crash_point(rng: random.Random, plan: list[dict[str, Any]]) -> tuple[str, str]:
    """Where an executor crashes: (step, "started" | "effect" | "done")."""
    phase = rng.choice(("started", "effect", "done"))
    candidates = [s for s in plan if s["side_effect"]] if phase == "effect" else plan
    if not candidates:
        candidates, phase = plan, "started"
    return rng.choice(candidates)["id"], phase


class Executor:
    """One agent identity: its client, its event ids, and the executor protocol."""

    def __init__(self, work: Workload, client: Client, name: str, role: str,
                 rng: random.Random) -> None:
        self.work = work
        self.client = client
        self.name = name
        self.role = role
        self.rng = rng
        self._ids = itertools.count(1)

    # ---- the wire -------------------------------------------------------------------------

    def event(self, task_id: str, kind: str, payload: dict[str, Any]) -> dict[str, Any]:
        return {"kind": kind, "event_id": f"{self.name}-{next(self._ids):06d}", "tenant": TENANT,
                "task_id": task_id, "producer": self.name,
                "occurred_at": datetime.now(UTC).isoformat(), "schema_version": 1,
                "payload": payload}

    async def append(self, task_id: str, events: list[dict[str, Any]], lease: LeaseBody | None,
                     role: str | None = None) -> list[AppendResult]:
        """Append atomically, retrying an unknown outcome with the same ids until the deadline.

        Raises the ``AgentLedgerError`` of a definite refusal, or ``GaveUpError``.
        """
        history = self.work.history
        tried = [history.attempt(msg_id(TENANT, task_id, e["event_id"]), task_id, e["kind"],
                                 role or self.role) for e in events]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.work.profile.append_deadline_s
        delay = 0.1
        while True:
            try:
                results = await self.client.append_batch(events, lease=lease)
            except AgentLedgerError as exc:
                if is_definite(exc):
                    for t in tried:
                        t.refusals.append(exc.code)
                    raise
                for t in tried:
                    t.unknowns += 1
            except asyncio.CancelledError:
                for t in tried:
                    t.unknowns += 1
                raise
            except Exception as exc:  # noqa: BLE001 - any other failure leaves the outcome open
                log.warning("chaos.append_error", executor=self.name, error=type(exc).__name__)
                for t in tried:
                    t.unknowns += 1
            else:
                for t, result in zip(tried, results, strict=True):
                    history.acked(t, result.seq, result.duplicate)
                return results
            if loop.time() + delay > deadline:
                raise GaveUpError(f"{task_id}: no definite answer within the append deadline")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)

    async def _retrying(self, what: str, call: Any) -> Any:
        """Run ``call()`` until it answers definitely (value or definite error) or the deadline."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.work.profile.append_deadline_s
        while True:
            try:
                return await call()
            except AgentLedgerError as exc:
                if is_definite(exc):
                    raise
            if loop.time() > deadline:
                raise GaveUpError(f"{what}: no definite answer within the deadline")
            await asyncio.sleep(0.25)

    async def acquire(self, task_id: str) -> LeaseBody:
        ttl = self.work.profile.lease_ttl_s
        lease: LeaseBody = await self._retrying(
            f"lease of {task_id}", lambda: self.client.acquire_lease(TENANT, task_id, self.name, ttl))
        self.work.history.grants.append(Grant(TENANT, task_id, self.name, lease.token))
        return lease

    async def renew_forever(self, run: TaskRun) -> None:
        """Keep the lease alive; stops quietly once it is definitely lost (appends then fail)."""
        ttl = self.work.profile.lease_ttl_s
        while True:
            await asyncio.sleep(ttl / 5)
            try:
                run.lease = await self.client.renew_lease(TENANT, run.task_id, run.lease, ttl_s=ttl)
            except AgentLedgerError as exc:
                if is_definite(exc):
                    return

    # ---- one task -----------------------------------------------------------------------

    async def start_task(self, task_id: str, plan: list[dict[str, Any]],
                         crash: tuple[str, str] | None) -> None:
        """Create a task with ``plan`` and run it (an agent's job), crashing at ``crash``."""
        self.work.stats.tasks_started += 1
        try:
            await self.append(task_id, [
                self.event(task_id, "task_created", {
                    "goal": {"text": GOAL, "acceptance_criteria": CRITERIA,
                             "goal_hash": goal_hash(GOAL, CRITERIA)},
                    "budget": {}, "title": f"chaos task {task_id}"}),
                self.event(task_id, "plan_versioned", {"plan_id": "plan", "version": 1,
                                                       "steps": plan}),
            ], None)
            lease = await self.acquire(task_id)
        except (AgentLedgerError, GaveUpError) as exc:
            self._lost(task_id, exc)
            return
        await self.execute(TaskRun(task_id, plan, lease), crash)

    def _lost(self, task_id: str, exc: Exception, times: int = 0) -> None:
        """The task slipped from this executor (its ``times``-th): hand it to a resumer."""
        reason = "gave_up" if isinstance(exc, GaveUpError) else "lease_lost"
        if reason == "gave_up":
            self.work.stats.gave_up += 1
        else:
            self.work.stats.lease_lost += 1
        log.info("chaos.task_handed_off", task=task_id, executor=self.name, reason=reason,
                 code=getattr(exc, "code", None))
        self.work.hand_off(Handoff(task_id, reason, times=times + 1))

    async def execute(self, run: TaskRun, crash: tuple[str, str] | None, times: int = 0) -> None:
        """Run the task's remaining steps under ``run.lease``, then complete it."""
        renewer = asyncio.create_task(self.renew_forever(run))
        try:
            while not run.finished():
                ready = run.runnable()
                if not ready:
                    raise AgentLedgerError(f"{run.task_id}: nothing runnable but not finished",
                                           code="chaos_stuck")
                await self.run_step(run, ready[0], crash)
            await self.append(run.task_id, [self.event(run.task_id, "task_completed",
                                                       {"summary": "all steps done"})], run.lease)
            self.work.stats.tasks_completed += 1
            renewer.cancel()
            with contextlib.suppress(AgentLedgerError):
                await self.client.release_lease(TENANT, run.task_id, run.lease)
        except CrashedError as crashed:
            self.work.stats.crashes += 1
            log.info("chaos.executor_crashed", task=run.task_id, executor=self.name, at=str(crashed))
            self.work.hand_off(Handoff(run.task_id, "crashed",
                                       Zombie(self, run.lease, str(crashed).split(":")[0]),
                                       times + 1))
        except (AgentLedgerError, GaveUpError) as exc:
            if times + 1 >= MAX_HANDOFFS:
                self.work.stats.dropped += 1
                log.warning("chaos.task_dropped", task=run.task_id, executor=self.name)
            else:
                self._lost(run.task_id, exc, times)
        finally:
            renewer.cancel()

    async def think(self) -> None:
        await asyncio.sleep(self.rng.uniform(*self.work.profile.think_s))

    async def run_step(self, run: TaskRun, step: dict[str, Any], crash: tuple[str, str] | None) -> None:
        sid = step["id"]
        attempt = run.attempts[sid] = run.attempts.get(sid, 0) + 1
        key = f"{run.task_id}:{sid}:{attempt}" if step["side_effect"] else None
        start: dict[str, Any] = {"plan_version": 1, "step_id": sid, "attempt": attempt}
        if key is not None:
            start["idempotency_key"] = key
        await self.append(run.task_id, [self.event(run.task_id, "step_started", start)], run.lease)
        run.status[sid] = "running"
        if crash == (sid, "started"):
            raise CrashedError(f"{sid}:started")
        await self.think()
        if self.rng.random() < self.work.profile.step_fail_share:
            self.work.stats.step_failures += 1
            await self.close_step(run, sid, applied=False, code="flaky_tool")
            return
        if key is not None:
            ref = self.side_effect(key, run.task_id, sid)
            if crash == (sid, "effect"):
                raise CrashedError(f"{sid}:effect")
            await self.append(run.task_id, [self.event(run.task_id, "side_effect_recorded", {
                "step_id": sid, "idempotency_key": key, "outcome": "applied",
                "external_ref": ref})], run.lease)
        await self.close_step(run, sid, applied=True, code="")
        if crash == (sid, "done"):
            raise CrashedError(f"{sid}:done")

    def side_effect(self, key: str, task_id: str, step_id: str) -> str:
        """Call the sink; after an unknown outcome ask it before calling again (same key)."""
        sink = self.work.sink
        for _ in range(SINK_ATTEMPTS):
            try:
                return sink.call(key, task_id, step_id)
            except SinkUnknownError:
                self.work.stats.sink_unknown += 1
                if sink.applied(key):
                    return f"sink:{key}"
        raise GaveUpError(f"the sink never answered for {key}")

    async def close_step(self, run: TaskRun, sid: str, *, applied: bool, code: str) -> None:
        payload: dict[str, Any] = {"plan_version": 1, "step_id": sid, "attempt": run.attempts[sid]}
        if applied:
            payload["outputs"] = [{"name": f"{sid}_out", "value": f"{run.task_id} {sid} done"}]
            await self.append(run.task_id, [self.event(run.task_id, "step_succeeded", payload)],
                              run.lease)
            run.status[sid] = "succeeded"
        else:
            payload |= {"error_code": code, "retryable": True}
            await self.append(run.task_id, [self.event(run.task_id, "step_failed", payload)],
                              run.lease)
            run.status[sid] = "failed"

    # ---- resuming a task another executor left ----------------------------------------------

    async def resume_task(self, handoff: Handoff) -> None:
        """Take over a handed-off task: resume, check against WM, zombie, reconcile, finish."""
        reply = await self._resume(handoff.task_id)
        if reply is None:
            return
        lease = reply.lease
        assert lease is not None
        self.work.stats.resumed += 1
        self.work.history.grants.append(Grant(TENANT, handoff.task_id, self.name, lease.token))
        await self.check_resume(handoff.task_id, reply)
        if handoff.zombie is not None:
            await self.zombie_writes(handoff.task_id, handoff.zombie)
        state = reply.state
        # The view leaves default fields out of a step definition.
        plan = [{"id": s["id"], "depends_on": s.get("depends_on", []),
                 "side_effect": s.get("side_effect", False)} for s in state["plan"]["steps"]]
        run = TaskRun(handoff.task_id, plan, lease,
                      status={sid: st["status"] for sid, st in state["steps"].items()},
                      attempts={sid: st["attempt"] for sid, st in state["steps"].items()})
        try:
            if reply.status == "needs_reconcile":
                self.work.stats.needs_reconcile += 1
            for item in reply.reconcile:
                applied = self.work.sink.applied(item.idempotency_key)
                receipt: dict[str, Any] = {"step_id": item.step_id,
                                           "idempotency_key": item.idempotency_key,
                                           "outcome": "applied" if applied else "not_applied"}
                if applied:
                    receipt["external_ref"] = f"sink:{item.idempotency_key}"
                    self.work.stats.reconciled_applied += 1
                else:
                    self.work.stats.reconciled_not_applied += 1
                await self.append(run.task_id, [self.event(run.task_id, "side_effect_recorded",
                                                           receipt)], lease)
                await self.close_step(run, item.step_id, applied=applied, code="side_effect_not_applied")
            for step in reply.interrupted:
                self.work.stats.interrupted_closed += 1
                await self.close_step(run, step.step_id, applied=step.receipt == "applied",
                                      code="executor_lost")
        except (AgentLedgerError, GaveUpError) as exc:
            if handoff.times + 1 >= MAX_HANDOFFS:
                self.work.stats.dropped += 1
            else:
                self._lost(run.task_id, exc, handoff.times)
            return
        await self.execute(run, None, handoff.times)

    async def _resume(self, task_id: str) -> ResumeReply | None:
        """``client.resume`` until it grants the lease; None when the task is not resumable."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.work.profile.lease_ttl_s + 3 * self.work.profile.append_deadline_s
        # One id for every retry of this resume: a retry after a timeout gets the first
        # attempt's answer and lease, not a second grant superseding it.
        request_id = uuid.uuid4().hex
        while loop.time() < deadline:
            try:
                reply = await self.client.resume(TENANT, task_id, self.name,
                                                 lease_ttl_s=self.work.profile.lease_ttl_s,
                                                 request_id=request_id)
            except AgentLedgerError as exc:
                if is_definite(exc):
                    log.warning("chaos.resume_error", task=task_id, code=exc.code)
                    self.work.stats.dropped += 1
                    return None
                await asyncio.sleep(0.5)
                continue
            codes = [r.code for r in reply.reasons]
            if reply.status != "rejected":
                return reply
            if "lease_held" not in codes:
                # Never created (its first append gave up unanswered) or already closed.
                log.info("chaos.resume_rejected", task=task_id, codes=codes)
                self.work.stats.dropped += 1
                return None
            await asyncio.sleep(0.5)
        self.work.stats.dropped += 1
        return None

    async def check_resume(self, task_id: str, reply: ResumeReply) -> None:
        """Read Working Memory at the resume's watermark and compare it with the answer."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.work.profile.append_deadline_s
        while True:
            try:
                wm = await self.client.working_memory(TENANT, task_id, min_seq=reply.watermark,
                                                      wait_ms=1_000)
                diffs = differing_keys(reply.state, wm.state)
                break
            except AgentLedgerError as exc:
                if is_definite(exc) or loop.time() > deadline:
                    diffs = [f"unreadable: {exc.code}"]
                    break
                await asyncio.sleep(0.25)
        assert reply.status is not None
        self.work.history.resume_checked(ResumeCheck(task_id, self.name, reply.status,
                                                     reply.watermark, diffs))

    async def zombie_writes(self, task_id: str, zombie: Zombie) -> None:
        """The crashed executor wakes up and writes with its old lease: each must be refused."""
        old = zombie.executor
        events = [
            [old.event(task_id, "step_succeeded", {"plan_version": 1, "step_id": zombie.step_id,
                                                   "attempt": 99})],
            [old.event(task_id, "variable_set", {"name": "zombie", "value": old.name})],
        ]
        for batch in events:
            self.work.stats.zombie_writes += 1
            with contextlib.suppress(AgentLedgerError, GaveUpError):
                await old.append(task_id, batch, zombie.lease, role="zombie")


async def run_agent(executor: Executor) -> None:
    """An agent: tasks one after another until the profile's count or the stop signal."""
    work = executor.work
    for n in range(work.profile.tasks_per_agent):
        if work.stop.is_set():
            return
        plan = random_plan(executor.rng, work.profile)
        crash = (crash_point(executor.rng, plan)
                 if executor.rng.random() < work.profile.crash_share else None)
        await executor.start_task(f"{executor.name}-t{n:03d}", plan, crash)
        await executor.think()


async def run_resumer(executor: Executor) -> None:
    """A second executor: resumes handed-off tasks until the agents are done and none is left."""
    work = executor.work
    while not (work.agents_done.is_set() and work.outstanding == 0):
        try:
            handoff = await asyncio.wait_for(work.handoffs.get(), timeout=0.5)
        except TimeoutError:
            continue
        try:
            await executor.resume_task(handoff)
        finally:
            work.outstanding -= 1
