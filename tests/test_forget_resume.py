"""Resuming a task after a forget erased artifacts it cites, with real agent credentials against
real NATS JetStream and PostgreSQL (the writer, projector, checkpointer, memory-policy,
context-builder and tombstone-fanout in process).

Alice's passport scan is an artifact registered about her (``data_subject``) in a task that
also did other work; the task is checkpointed, then Alice is forgotten, which erases the scan.
The task itself is not closed: a resume must say which artifacts went and why (forgotten, by
which request) instead of ``artifact_missing`` for ever, and continue once the executor
accepts exactly that erasure.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import msgspec
import pytest

from agentledger.client import Client
from agentledger.config import Settings
from agentledger.contracts.resume import ErasedArtifact, ResumeReply
from agentledger.errors import AgentLedgerError
from agentledger.security import auth, bindings
from tenant_agents import agent_client
from ckpt_support import Stack, chain, created, event, plan, started, succeeded

TENANT = "acme"
TASK = "onboarding"
EXECUTOR = "clerk"
SCAN = b"passport scan of Alice Moreau number K44719023"
REPORT = b"onboarding checklist: 4 of 7 items done"
_reply = msgspec.json.Decoder(ResumeReply)


@dataclass
class Env:
    stack: Stack
    clerk: Client


@pytest.fixture
async def env(admin: Settings) -> AsyncIterator[Env]:
    stack = await Stack(admin).start(memory=True, context=True, tombstone=True)
    await auth.tenant_add(admin, TENANT)
    # The clerk serves user s-alice: it may forget her, and it resumes as itself.
    await bindings.bind_agent(admin, TENANT, EXECUTOR, ["s-alice"], [])
    clerk = await agent_client(admin, TENANT, EXECUTOR, timeout=30)
    try:
        yield Env(stack, clerk)
    finally:
        await clerk.close()
        await stack.stop()


async def a_task_citing_alices_scan(env: Env) -> tuple[str, str]:
    """A three-step task: S1 produced a report, an artifact about Alice was registered, S2 is
    next; checkpointed. The URIs of the scan and of the report."""
    c = env.stack.c
    scan = await c.put_artifact(SCAN, schema="text/plain", producer="test", tenant=TENANT)
    report = await c.put_artifact(REPORT, schema="text/plain", producer="test", tenant=TENANT)
    await env.stack.append([
        created(TASK), plan(TASK, chain(3)), started(TASK, "S1"),
        succeeded(TASK, "S1", artifacts=[msgspec.to_builtins(report)]),
        event("artifact_registered", {"artifact": msgspec.to_builtins(scan)}, TASK) | {"data_subject": "s-alice"},
    ])
    await env.stack.projected()
    saved = await c.save_checkpoint(TENANT, TASK)
    assert saved.checkpoint_id is not None
    return scan.uri, report.uri


async def forget_alice(env: Env) -> str:
    reply = await env.clerk.forget(TENANT, {"kind": "subject", "subject": "s-alice"}, reason="erasure request")
    done = await env.clerk.forget_wait(TENANT, reply.request_id, timeout_s=120)
    assert done.receipt is not None
    artifacts = next(i for i in done.receipt.indexes if i.index == "artifacts")
    assert artifacts.counts == {"objects": 1}, artifacts
    return reply.request_id


async def test_resume_after_a_subject_forget_names_the_erased_artifacts_and_continues_once_accepted(
        env: Env) -> None:
    """Before: ``artifact_missing`` on every resume, for ever. Now: ``needs_accept`` naming the
    scan, forgotten by the request; nothing leased. Accepting another request's erasure is not
    accepting this one. Accepting it resumes: S2 is dispatched, the reply lists the erasure, and
    the report (not forgotten) is still verified. A version 1 request is refused
    ``artifact_forgotten`` naming the request, and cannot carry ``accept_erased``."""
    scan_uri, report_uri = await a_task_citing_alices_scan(env)
    request_id = await forget_alice(env)
    erased = [ErasedArtifact(uri=scan_uri, reason="forgotten", request_id=request_id)]

    asked = await env.clerk.resume(TENANT, TASK, EXECUTOR, accept_erased=[])
    assert (asked.status, asked.erased, asked.lease, asked.state) == ("needs_accept", erased, None, None)
    assert [(r.code, r.severity) for r in asked.reasons] == [("artifacts_erased", "reconcile")]
    # Nothing was leased: another executor could take the task now.
    assert (await env.stack.c.working_memory(TENANT, TASK)).state.get("lease") is None

    other = await env.clerk.resume(TENANT, TASK, EXECUTOR, accept_erased=["fg-some-other-request"])
    assert (other.status, other.erased) == ("needs_accept", erased)

    old = await env.clerk.resume(TENANT, TASK, EXECUTOR)
    assert old.status == "rejected" and old.lease is None
    [reason] = old.reasons
    assert (reason.code, reason.uri) == ("artifact_forgotten", scan_uri)
    assert reason.detail == {"erased": [msgspec.to_builtins(e) for e in erased]}
    with pytest.raises(AgentLedgerError) as info:
        await env.clerk._call("resume", {"tenant": TENANT, "task_id": TASK, "executor": EXECUTOR,
                                         "accept_erased": [request_id]}, "checkpointer", _reply)
    assert (info.value.code, info.value.path) == ("unknown_field", "$.accept_erased")

    resumed = await env.clerk.resume(TENANT, TASK, EXECUTOR, accept_erased=[request_id])
    assert resumed.status == "resumable", resumed.reasons
    assert resumed.dispatch == ["S2"] and resumed.erased == erased
    assert ("artifacts_erased", "info") in [(r.code, r.severity) for r in resumed.reasons]
    assert resumed.lease is not None and resumed.lease.holder == EXECUTOR
    assert report_uri in [a["uri"] for a in resumed.state["artifacts"]]


async def test_an_artifact_missing_for_another_reason_is_still_refused(env: Env) -> None:
    """Only what a forget erased can be accepted: the report, deleted behind agentledger's back
    (no forget request names it), stays ``artifact_missing`` even with an acceptance."""
    _, report_uri = await a_task_citing_alices_scan(env)
    request_id = await forget_alice(env)
    store = env.stack.checkpointer.resumer.artifacts  # type: ignore[union-attr]
    assert await store.erase(report_uri)
    reply = await env.clerk.resume(TENANT, TASK, EXECUTOR, accept_erased=[request_id])
    assert reply.status == "rejected"
    assert [(r.code, r.uri) for r in reply.reasons] == [("artifact_missing", report_uri)]
