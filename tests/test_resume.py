"""Resume against real NATS JetStream and PostgreSQL: faults, the seeds' crash scenario, races.

The fault table injects one fault per case into a real task (a stored
checkpoint altered in PostgreSQL, an artifact replaced in the object store, a
plan upgraded after the checkpoint, ...) and checks the status and the reason
code resume answers, that a rejected resume takes no lease, and that nothing
moved the task's checkpoint pointer. The scenario runs a real executor process
(tests/scenario_executor.py), SIGKILLs it mid-task and resumes with a second
one; side effects land in a PostgreSQL "external system" exactly once.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import nats.js.errors
import pytest
from nats.js.api import ObjectMeta

from agentledger.cli.main import resume_command
from agentledger.client import connect
from agentledger.config import Settings
from agentledger.contracts.api import LeaseBody
from agentledger.contracts.events import Goal
from agentledger.contracts.resume import ReconcileItem, ResumeReply
from agentledger.core import checkpoint as cp_mod
from agentledger.core.checkpoint_tags import checkpoint_tag
from agentledger.core.validate import goal_hash
from agentledger.errors import AgentLedgerError, ContractError
from agentledger.security.integrity_keys import keys_of
from agentledger.security.task_seal import task_keys_of
from agentledger.services.checkpointer.service import resume_subject
from agentledger.stores import artifacts
from agentledger.stores.ledger import ensure_stream, ledger_subject
from ckpt_support import (
    TENANT,
    Stack,
    chain,
    created,
    event,
    plan,
    processes,
    running,
    service_env,
    started,
    succeeded,
    variable,
)
from helpers import assert_eventually

EXECUTOR = Path(__file__).resolve().parent / "scenario_executor.py"


# ---- the fault table ------------------------------------------------------------------------------

@dataclass
class Case:
    """A task after ``inject`` ran; ``resume_kw`` extends the resume request."""

    stack: Stack
    task: str
    checkpoint_id: int
    artifact_uri: str
    resume_kw: dict[str, Any]


async def base_task(stack: Stack, task: str = "t1", *, plan_versions: int = 1) -> Case:
    """Create a task whose S1 produced an artifact, checkpoint it, then append a short tail."""
    ref = await stack.c.put_artifact(b"test report: 12 passed", schema="text/plain", producer="S1",
                                     tenant=TENANT)
    head = [created(task), *[plan(task, chain(3), version=v) for v in range(1, plan_versions + 1)],
            started(task, "S1", version=plan_versions),
            succeeded(task, "S1", version=plan_versions, artifacts=[msgspec.to_builtins(ref)]),
            variable(task, "note", "at checkpoint")]
    await stack.append(head)
    saved = await stack.c.save_checkpoint(TENANT, task)
    await stack.append([variable(task, "note", "after checkpoint"), variable(task, "k", 1)])
    return Case(stack, task, saved.checkpoint_id or 0, ref.uri, {})


async def save_altered(case: Case, **changes: Any) -> int:
    """Store (with a valid checksum) a copy of the active checkpoint with ``changes``."""
    assert case.stack.checkpointer is not None and case.stack.checkpointer.store is not None
    cp = await case.stack.active(case.task)
    assert cp is not None
    state = cp_mod.restore(cp)
    now = changes.pop("now", time.time())
    ttl = changes.pop("ttl_s", 3600.0)
    for name, value in changes.items():
        setattr(state, name, value)
    altered = cp_mod.build(state, now=now, ttl_s=ttl)
    return await case.stack.checkpointer.store.save(altered)


async def fault_none(case: Case) -> None:
    """No fault: the baseline the other rows differ from."""


async def fault_plan_upgraded(case: Case) -> None:
    """Plan v3 at the checkpoint; v4 (S2 kept, S2b added) appended after it."""
    steps = [*chain(3), {"id": "S2b", "depends_on": ["S1"]}]
    await case.stack.append([plan(case.task, steps, version=4)])


async def fault_artifact_replaced(case: Case) -> None:
    """Other bytes under the same object name, metadata kept, through the raw Object Store API."""
    address = artifacts.parse_uri(case.artifact_uri)
    obs = await case.stack.c.nc.jetstream().object_store(address.bucket)
    name = address.name
    headers = (await obs.get_info(name)).headers
    await obs.put(name, b"test report: 0 passed", meta=ObjectMeta(name=name, headers=headers))


async def fault_artifact_missing(case: Case) -> None:
    """The artifact deleted from the object store."""
    address = artifacts.parse_uri(case.artifact_uri)
    obs = await case.stack.c.nc.jetstream().object_store(address.bucket)
    await obs.delete(address.name)


async def fault_no_checkpoint(case: Case) -> None:
    """The task's checkpoints are gone (never saved)."""
    assert case.stack.db is not None
    await case.stack.db.execute("DELETE FROM checkpoint_pointer WHERE task_id = $1", case.task)
    await case.stack.db.execute("DELETE FROM checkpoints WHERE task_id = $1", case.task)


async def fault_checksum(case: Case) -> None:
    """A value inside the stored body changed (still valid JSON): bit rot or tampering."""
    assert case.stack.db is not None
    body = json.loads(await case.stack.db.fetchval("SELECT body FROM checkpoints WHERE id = $1",
                                                   case.checkpoint_id))
    body["variables"]["note"]["value"] = "tampered"
    await case.stack.db.execute("UPDATE checkpoints SET body = $2 WHERE id = $1", case.checkpoint_id,
                                json.dumps(body).encode())


async def fault_other_task(case: Case) -> None:
    """The checkpoint of another task of the same tenant is presented for this one."""
    other = await base_task(case.stack, "other")
    case.resume_kw["checkpoint_id"] = other.checkpoint_id


async def fault_schema_version(case: Case) -> None:
    """The stored body says schema version 2 (written, and tagged, by a newer checkpointer)."""
    assert case.stack.db is not None
    row = await case.stack.db.fetchrow("SELECT tenant, task_id, seq, events, body FROM checkpoints"
                                       " WHERE id = $1", case.checkpoint_id)
    body = json.loads(row["body"])
    body["schema_version"] = 2
    data = json.dumps(body).encode()
    keys = keys_of(case.stack.settings)
    await case.stack.db.execute("UPDATE checkpoints SET body = $2, mac = $3 WHERE id = $1", case.checkpoint_id,
                                data, checkpoint_tag(keys.current, keys.mac_key, case.checkpoint_id,
                                                     row["tenant"], row["task_id"], seq=row["seq"],
                                                     events=row["events"], body=data))


async def fault_watermark_ahead(case: Case) -> None:
    """A checksummed checkpoint claiming a ledger cursor past the stream's last sequence."""
    await save_altered(case, watermark=await case.stack.last_seq() + 1000)


async def fault_watermark_elsewhere(case: Case) -> None:
    """A checksummed checkpoint whose cursor is an event of another task (presented by id)."""
    seq = (await case.stack.c.append(variable("elsewhere", "x", 1))).seq
    cp = await case.stack.active(case.task)
    assert cp is not None
    case.resume_kw["checkpoint_id"] = await save_altered(case, watermark=seq)


async def fault_expired(case: Case) -> None:
    """A checkpoint saved eight days ago with the default seven-day lifetime."""
    await save_altered(case, now=time.time() - 8 * 86400, ttl_s=7 * 86400)


async def fault_goal_changed(case: Case) -> None:
    """A checksummed checkpoint whose goal is not the one the ledger's task_created pinned."""
    text = "a different goal"
    await save_altered(case, goal=Goal(text=text, acceptance_criteria=[],
                                       goal_hash=goal_hash(text, [])))


async def fault_head_deleted(case: Case) -> None:
    """The task's task_created was deleted from the ledger after the checkpoint covered it."""
    js = case.stack.c.nc.jetstream()
    first = await js.get_msg(case.stack.settings.stream, seq=1,
                             subject=ledger_subject(case.stack.settings.prefix, TENANT, case.task),
                             next=True)
    keys = task_keys_of(case.stack.c.nc, case.stack.settings)
    opened = await keys.open_one(TENANT, case.task, first.headers, first.data)
    assert opened is not None and json.loads(opened)["kind"] == "task_created"
    await js.delete_msg(case.stack.settings.stream, first.seq)


async def fault_unknown_checkpoint(case: Case) -> None:
    """An operator names a checkpoint id that does not exist."""
    case.resume_kw["checkpoint_id"] = 10**9


async def fault_task_closed(case: Case) -> None:
    """The task completed after the checkpoint."""
    t = case.task
    await case.stack.append([started(t, "S2"), succeeded(t, "S2"), started(t, "S3"), succeeded(t, "S3"),
                             event("task_completed", {}, t)])


FAULTS: list[tuple[str, Callable[[Case], Awaitable[None]], str, str | None, int]] = [
    # (case, inject, status, reason code, plan versions before the checkpoint)
    ("intact", fault_none, "resumable", None, 1),
    ("plan upgraded v3 -> v4", fault_plan_upgraded, "resumable", "plan_upgraded", 3),
    ("artifact replaced under its uri", fault_artifact_replaced, "rejected", "artifact_hash_mismatch", 1),
    ("artifact deleted", fault_artifact_missing, "rejected", "artifact_missing", 1),
    ("no checkpoint at all", fault_no_checkpoint, "resumable", "no_checkpoint", 1),
    ("corrupted body", fault_checksum, "rejected", "integrity_violation", 1),
    ("checkpoint of another task", fault_other_task, "rejected", "task_mismatch", 1),
    ("unknown schema version", fault_schema_version, "rejected", "unknown_schema_version", 1),
    ("watermark past the ledger", fault_watermark_ahead, "rejected", "watermark_ahead_of_ledger", 1),
    ("watermark on another task", fault_watermark_elsewhere, "rejected", "watermark_not_found", 1),
    ("expired checkpoint", fault_expired, "rejected", "checkpoint_expired", 1),
    ("goal changed", fault_goal_changed, "rejected", "goal_changed", 1),
    ("task_created deleted from the ledger", fault_head_deleted, "resumable", "goal_unverified", 1),
    ("unknown checkpoint id", fault_unknown_checkpoint, "rejected", "checkpoint_not_found", 1),
    ("task already completed", fault_task_closed, "rejected", "task_closed", 1),
]


async def lease_of(stack: Stack, task: str) -> Any:
    try:
        kv = await stack.c.nc.jetstream().key_value(stack.settings.leases_bucket)
    except nats.js.errors.BucketNotFoundError:
        return None
    try:
        return (await kv.get(f"{TENANT}.{task}")).value
    except nats.js.errors.KeyNotFoundError:
        return None


async def settled(stack: Stack, task: str) -> None:
    """Wait until the projection and the checkpointer's policy have seen all of the task."""
    await stack.projected()
    wm = await stack.c.working_memory(TENANT, task)
    await stack.evaluated(task, wm.seq)


@pytest.mark.parametrize(("inject", "status", "code", "plan_versions"), [f[1:] for f in FAULTS],
                         ids=[f[0] for f in FAULTS])
async def test_fault_table(settings: Settings, inject: Callable[[Case], Awaitable[None]], status: str,
                           code: str | None, plan_versions: int) -> None:
    """Each injected fault gives its status and reason code. A rejected resume takes no lease and
    returns its reasons only (no state, next-ready or watermark); no resume moves the task's
    checkpoint pointer. A resumable one holds the lease (with its secret, which the state never
    shows), and its replayed state, the lease's own grant folded in, is exactly the projector's."""
    async with running(settings) as stack:
        case = await base_task(stack, plan_versions=plan_versions)
        await inject(case)
        await settled(stack, "t1")
        before = await stack.pointer("t1")
        reply = await stack.c.resume(TENANT, "t1", "exec-1", **case.resume_kw)

        assert reply.ok and reply.status == status, reply.reasons
        codes = [r.code for r in reply.reasons]
        if code is None:
            assert codes == []
        else:
            assert code in codes
        after = await stack.pointer("t1")
        assert (before and (before["checkpoint_id"], before["version"])) == \
               (after and (after["checkpoint_id"], after["version"]))

        if status == "rejected":
            assert reply.lease is None and reply.dispatch == []
            assert (reply.state, reply.next_ready, reply.watermark) == (None, [], 0)
            assert await lease_of(stack, "t1") is None
            assert [r.severity for r in reply.reasons if r.code == code] == ["reject"]
            return
        assert reply.lease is not None and reply.lease.holder == "exec-1"
        assert reply.lease.secret is not None
        assert reply.state["lease"]["token"] == reply.lease.token == reply.watermark
        assert reply.lease.secret not in json.dumps(reply.state)
        # The state resume rebuilt from checkpoint + ledger tail equals the live projection.
        last = await stack.projected()
        wm = await stack.c.working_memory(TENANT, "t1")
        assert reply.state == wm.state
        assert reply.watermark == wm.seq == last
        assert reply.state["variables"]["note"]["value"] == "after checkpoint"
        assert reply.dispatch == reply.next_ready


async def test_fault_details(settings: Settings) -> None:
    """Reasons carry what an operator needs: the artifact's uri, the plan versions, the replay size."""
    async with running(settings) as stack:
        case = await base_task(stack, plan_versions=3)
        await fault_plan_upgraded(case)
        reply = await stack.c.resume(TENANT, "t1", "exec-1")
        upgraded = next(r for r in reply.reasons if r.code == "plan_upgraded")
        assert (upgraded.severity, upgraded.detail) == ("info", {"from": 3, "to": 4})
        assert reply.next_ready == ["S2", "S2b"]  # from the replayed v4, not the checkpoint's v3
        assert reply.checkpoint_id == case.checkpoint_id
        assert reply.replayed_events == 4  # two variables, plan v4 and the lease's own grant

        await fault_artifact_replaced(case)
        reply = await stack.c.resume(TENANT, "t1", "exec-1")
        bad = next(r for r in reply.reasons if r.code == "artifact_hash_mismatch")
        assert bad.uri == case.artifact_uri
        assert reply.state is None

        fresh = await base_task(stack, "fresh")
        await fault_no_checkpoint(fresh)
        reply = await stack.c.resume(TENANT, "fresh", "exec-1")
        assert (reply.status, reply.checkpoint_id, reply.replayed_events) == ("resumable", None, 8)

        reply = await stack.c.resume(TENANT, "nobody", "exec-1")
        assert (reply.status, [r.code for r in reply.reasons]) == ("rejected",
                                                                   ["no_checkpoint", "task_not_found"])


def printed_json(out: str) -> Any:
    """The indented JSON document in ``out`` (the in-process services log to stdout too)."""
    return json.JSONDecoder().raw_decode(out[out.index("{\n"):])[0]


async def test_resume_command_prints_the_reply(settings: Settings, capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI hook prints the reply as JSON and exits 0 for resumable, 1 for rejected."""
    async with running(settings) as stack:
        await base_task(stack)
        capsys.readouterr()
        code = await asyncio.to_thread(resume_command, settings, TENANT, "t1", "cli")
        out = printed_json(capsys.readouterr().out)
        assert (code, out["status"], out["lease"]["holder"]) == (0, "resumable", "cli")
        assert out["dispatch"] == ["S2"]
        code = await asyncio.to_thread(resume_command, settings, TENANT, "t1", "other")
        out = printed_json(capsys.readouterr().out)
        assert (code, out["status"], out["lease"]) == (1, "rejected", None)
        assert [r["code"] for r in out["reasons"]] == ["lease_held"]
        assert (out["state"], out["next_ready"], out["watermark"]) == (None, [], 0)


async def test_bad_resume_requests_get_typed_errors(settings: Settings) -> None:
    """A malformed request is an error with code and path, not a status."""
    async with running(settings) as stack:
        for body, code, path in [
            (b'{"tenant": "acme", "task_id": "t1"}', "missing_field", "$.executor"),
            (b'{"tenant": "acme", "task_id": "t1", "executor": "e", "x": 1}', "unknown_field", "$.x"),
            (b'{"tenant": "acme", "task_id": "t1", "executor": "e", "checkpoint_id": 0}',
             "invalid_value", "$.checkpoint_id"),
            (b'{"tenant": "acme", "task_id": "t1", "executor": "e", "lease_ttl_s": 601}',
             "invalid_value", "$.lease_ttl_s"),
            (b'{"tenant": "ac.me", "task_id": "t1", "executor": "e"}', "invalid_token", "$.tenant"),
        ]:
            msg = await stack.c.nc.request(resume_subject(settings.prefix), body, timeout=10)
            reply = msgspec.json.decode(msg.data, type=ResumeReply)
            assert not reply.ok and reply.error is not None, body
            assert (reply.error.code, reply.error.path) == (code, path), body
        with pytest.raises(ContractError):
            await stack.c.resume(TENANT, "t1", "")


# ---- the seeds' scenario: kill the executor, resume, side effects exactly once ---------------------

async def spawn_executor(settings: Settings, executor: str, *extra: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, str(EXECUTOR), "--tenant", TENANT, "--task", "t1", "--executor", executor,
        *extra, env=service_env(settings), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT)


async def resume_once_free(stack: Stack, executor: str) -> ResumeReply:
    """Resume as soon as the dead executor's lease has lapsed; any other rejection fails at once."""

    async def attempt() -> ResumeReply | None:
        reply = await stack.c.resume(TENANT, "t1", executor)
        if reply.status == "rejected":
            codes = [r.code for r in reply.reasons if r.severity == "reject"]
            if codes != ["lease_held"]:
                raise AgentLedgerError(f"unexpected rejection {codes}")
            return None
        return reply

    return await assert_eventually(attempt, timeout=30, interval=0.1,
                                   message="the killed executor's lease never lapsed")


@dataclass(frozen=True)
class Kill:
    """Where the first executor dies, and what resume and the second executor must then do."""

    hang_at: str
    status: str
    done: int  # S1..S<done> succeeded when resuming
    reconcile: list[ReconcileItem]
    dispatch: list[str]
    continues_at: str  # first step the second executor starts
    attempts: dict[str, int]  # steps that needed a second attempt
    receipts: dict[str, str]


KILLS = {
    "killed during S6": Kill(
        "S6:started", "resumable", 5, [], ["S6"], "S6", {"S6": 2},
        {"t1:S3:1": "applied", "t1:S5:1": "applied"}),
    "killed between S5's side effect and its receipt": Kill(
        "S5:effect", "needs_reconcile", 4, [ReconcileItem("S5", "t1:S5:1")], [], "S6", {},
        {"t1:S3:1": "applied", "t1:S5:1": "applied"}),
    "killed after S5 started, before its side effect": Kill(
        "S5:started", "needs_reconcile", 4, [ReconcileItem("S5", "t1:S5:1")], [], "S5", {"S5": 2},
        {"t1:S3:1": "applied", "t1:S5:1": "not_applied", "t1:S5:2": "applied"}),
}


@pytest.mark.parametrize("kill", KILLS.values(), ids=KILLS.keys())
async def test_seed_scenario_kill_executor_and_resume(settings: Settings, kill: Kill) -> None:
    """Plan S1..S8, S3 and S5 side-effecting. A real executor process is SIGKILLed: during S6;
    after S5's side effect but before its receipt; or after S5 started but before its side
    effect. Resume from the checkpoint says resumable and dispatches S6, or needs_reconcile
    naming S5's key and dispatching nothing. A second executor process then reconciles by
    querying the sink by key (applied: record the receipt and finish S5; not applied: record
    that and run S5 again under a new key), continues where the first stopped and completes the
    task. Every side effect happened exactly once and was never attempted twice."""
    async with running(settings) as stack:
        assert stack.db is not None
        await stack.db.execute("CREATE TABLE sink (key text PRIMARY KEY, step_id text NOT NULL,"
                               " applied_at timestamptz NOT NULL DEFAULT now())")
        await stack.db.execute("CREATE TABLE sink_calls (key text NOT NULL, step_id text NOT NULL)")
        await stack.append([created("t1"), plan("t1", chain(8, side_effects=("S3", "S5")))])

        first = await spawn_executor(settings, "exec-1", "--hang-at", kill.hang_at, "--lease-ttl", "2")
        lines: list[str] = []
        try:
            async def until_hanging() -> None:
                assert first.stdout is not None
                while line := (await first.stdout.readline()).decode():
                    lines.append(line)
                    if '"event": "hanging"' in line:
                        return
                raise AssertionError("the executor exited before reaching " + kill.hang_at)

            await asyncio.wait_for(until_hanging(), 60)
        finally:
            first.kill()  # SIGKILL
            lines.append((await first.communicate())[0].decode())
        assert first.returncode == -signal.SIGKILL, lines
        hung_step, point = kill.hang_at.split(":")
        effects = await stack.db.fetchval("SELECT count(*) FROM sink WHERE step_id = $1", hung_step)
        assert effects == (1 if point == "effect" else 0)
        await stack.projected()
        wm = await stack.c.working_memory(TENANT, "t1")
        assert wm.state["steps"][hung_step]["status"] == "running"
        # Receipts exist for the side effects of the steps before the one it died in.
        assert set(wm.state["side_effects"]) == {f"t1:{s}:1" for s in ("S3", "S5")
                                                 if int(s[1:]) < int(hung_step[1:])}

        reply = await resume_once_free(stack, "exec-2")
        assert reply.status == kill.status, reply.reasons
        # Whenever the checkpointer caught up, resume replays exactly the tail after it
        # (this stream holds one task, so the tail is the sequence distance).
        assert reply.checkpoint_id is not None
        assert reply.replayed_events == reply.watermark - reply.checkpoint_seq
        assert reply.lease is not None and reply.lease.holder == "exec-2"
        assert reply.state["done"] == [f"S{i}" for i in range(1, kill.done + 1)]
        assert reply.reconcile == kill.reconcile
        assert reply.dispatch == kill.dispatch
        if kill.status == "resumable":
            assert [s.step_id for s in reply.interrupted] == [hung_step]
        else:
            unconfirmed = [r for r in reply.reasons if r.code == "side_effect_unconfirmed"]
            assert [r.severity for r in unconfirmed] == ["reconcile"]

        second = await spawn_executor(settings, "exec-2")
        out = (await asyncio.wait_for(second.communicate(), 120))[0].decode()
        assert second.returncode == 0, out
        events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert next(e for e in events if e["event"] == "resumed")["status"] == kill.status
        # Continued where the first executor stopped: nothing before it ran again.
        assert next(e for e in events if e["event"] == "started")["step"] == kill.continues_at

        await stack.projected()
        wm = await stack.c.working_memory(TENANT, "t1")
        assert wm.state["status"] == "completed"
        assert wm.state["done"] == [f"S{i}" for i in range(1, 9)]
        assert [r["code"] for r in wm.state["rejections"]] == []
        attempts = {sid: st["attempt"] for sid, st in wm.state["steps"].items()}
        assert attempts == {**{f"S{i}": 1 for i in range(1, 9)}, **kill.attempts}
        applied = await stack.db.fetch("SELECT step_id, count(*) AS n FROM sink GROUP BY step_id")
        calls = await stack.db.fetch("SELECT step_id, count(*) AS n FROM sink_calls GROUP BY step_id")
        assert {r["step_id"]: r["n"] for r in applied} == {"S3": 1, "S5": 1}
        assert {r["step_id"]: r["n"] for r in calls} == {"S3": 1, "S5": 1}
        assert {k: v["outcome"] for k, v in wm.state["side_effects"].items()} == kill.receipts


# ---- two executors racing to resume one task ------------------------------------------------------

TRIALS = 1000


async def test_concurrent_resume_exactly_one_executor_wins(settings: Settings) -> None:
    """1000 trials, each on its own task that a dead executor held (a real grant, expired): two
    executors resume at the same moment. Exactly one gets the lease each time, with a token above
    the dead executor's; the loser's step events are refused by the writer, both with the dead
    executor's token and secret (stale_fencing_token) and with the winner's token, which anyone can
    read, without its secret (lease_secret_invalid), while the winner's are accepted. The writer
    and the checkpointer run as processes of their own."""
    tasks = [f"r{i}" for i in range(TRIALS)]
    await ensure_stream(settings)
    async with processes(settings, "ledger_writer", "checkpointer"), \
            await connect(settings, timeout=30) as c:
        dead: dict[str, LeaseBody] = {}

        async def setup(task: str) -> None:
            await c.append_batch([created(task), plan(task, chain(2))])
            dead[task] = await c.acquire_lease(TENANT, task, "dead", ttl_s=0.01)

        for i in range(0, TRIALS, 100):
            await asyncio.gather(*(setup(task) for task in tasks[i:i + 100]))

        gate = asyncio.Semaphore(64)

        async def refused(task: str, lease: LeaseBody, tag: str) -> str:
            try:
                await c.append(started(task, "S1", event_id=f"loser-{tag}"), lease=lease)
            except AgentLedgerError as exc:
                return exc.code
            return "accepted"

        async def trial(task: str) -> tuple[str, str, str]:
            async with gate:
                a, b = await asyncio.gather(c.resume(TENANT, task, f"a-{task}"),
                                            c.resume(TENANT, task, f"b-{task}"))
                winners = [r for r in (a, b) if r.status == "resumable"]
                losers = [r for r in (a, b) if r.status == "rejected"]
                assert len(winners) == 1 and len(losers) == 1, (a.status, b.status)
                assert [r.code for r in losers[0].reasons if r.severity == "reject"] == ["lease_held"]
                assert losers[0].lease is None and losers[0].state is None
                win = winners[0].lease
                assert win is not None and win.token > dead[task].token and win.secret
                stale = await refused(task, dead[task], "stale")
                forged = await refused(task, msgspec.structs.replace(win, secret="x" * 43), "forged")
                await c.append(started(task, "S1"), lease=win)  # the winner writes
                return win.holder[0], stale, forged

        results = await asyncio.gather(*(trial(task) for task in tasks))
    assert {(r[1], r[2]) for r in results} == {("stale_fencing_token", "lease_secret_invalid")}
    by = {h: sum(1 for r in results if r[0] == h) for h in "ab"}
    print(f"race winners over {TRIALS} trials: {by}")
    assert by["a"] + by["b"] == TRIALS
