"""The tombstone-fanout service end to end: real NATS JetStream and PostgreSQL, the other services in
process, the fan-out as its own OS process (so it can be SIGKILLed at any step of the saga).

* A tenant forget, with the fan-out killed right after each step's plan is stored (every step
  in turn), resumes after a restart and ends with the same receipt as an uninterrupted run.
* Who may forget what: a tenant agent forgets inside its tenant only; a whole tenant is the
  operator's; a request names exactly the field its kind needs.
* Forgetting one task while agents keep writing to others loses and changes nothing of theirs.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from agentledger.client import Client, connect
from agentledger.config import Settings
from agentledger.contracts.forget_api import RequestProgress
from agentledger.core.forget import verify_receipt
from agentledger.errors import AgentLedgerError
from agentledger.security import auth, bindings
from agentledger.services.tombstone_fanout.handlers import HANDLERS
from ckpt_support import Stack, created, end_process, event, running, service_env, variable, wait_for_service
from test_memory_service import proposal
from writer_support import ledger_messages


def turn(tenant: str, task: str, ordinal: int, text: str, subject: str | None = None) -> dict[str, Any]:
    body = event("turn_appended", {"role": "user" if ordinal % 2 else "assistant", "ordinal": ordinal,
                                   "content": text}, task, tenant=tenant)
    if subject is not None:
        body["data_subject"] = subject
    return body


async def populate(stack: Stack, tenant: str, subject: str) -> None:
    """Everything a tenant can hold: turns, a variable, memory and a read receipt, a compacted
    context with generations, a document, an artifact, a lease, a checkpoint, a binding."""
    c = stack.c
    await stack.append([created("chat", tenant=tenant)]
                       + [turn(tenant, "chat", i, f"{tenant} turn {i}: we looked at log excerpt {i} and "
                                                  "it showed nothing new about the stuck list", subject)
                          for i in range(1, 13)]
                       + [variable("chat", "city", "Lyon", tenant=tenant) | {"data_subject": subject}])
    ref = await c.put_artifact(f"{tenant} upload".encode(), schema="text/plain", producer="test",
                               tenant=tenant)
    await stack.append([event("artifact_registered", {"artifact": msgspec_builtins(ref)}, "chat",
                              tenant=tenant) | {"data_subject": subject}])
    await c.memory_propose(tenant, [proposal("m1", "The build uses Python 3.11", level="tenant",
                                             scope_id=None),
                                    proposal("m2", "prefers answers in French", kind="preference",
                                             level="user", scope_id="u1", source="user_confirmed",
                                             key="preference.language", personal=True,
                                             data_subject=subject)])
    await c.memory_read(tenant, "python build", task_id="chat")
    gen = await c.build_context(tenant, "chat", 11, window_tokens=700, reserve_tokens=64,
                                compaction={"high_watermark": 0.5, "recent_exact_tokens": 1})
    await c.commit_generation(tenant, gen.generation_id, 12)
    await c.ingest_document(tenant, "runbook", 1, f"{tenant} runbook: restart the worker", source="wiki")
    await c.acquire_lease(tenant, "chat", "worker-1")
    await c.save_checkpoint(tenant, "chat")
    await bindings.bind_agent(stack.settings, tenant, "agent-1", users=["u1"], projects=[])
    await stack.projected()


def msgspec_builtins(obj: Any) -> Any:
    return msgspec.to_builtins(obj)


class Fanout:
    """The tombstone-fanout as an OS process; ``kill_at`` makes it SIGKILL itself at that step."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self, nc: Any, kill_at: str | None = None) -> None:
        env = service_env(self.settings)
        if kill_at is not None:
            env["AGENTLEDGER_FORGET_KILL_AT"] = kill_at
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "agentledger.services.tombstone_fanout", env=env)
        await wait_for_service(nc, f"{self.settings.prefix}.forget.receipt", self.proc)

    async def stop(self) -> None:
        if self.proc is not None:
            await end_process(self.proc)


@pytest.fixture
async def stack(settings: Settings) -> AsyncIterator[Stack]:
    async with running(settings, checkpointer=True, memory=True, context=True) as s:
        yield s


def shape(p: RequestProgress) -> list[tuple[str, str, dict[str, int]]]:
    """A receipt's content without its ids and times: what a resumed run must reproduce."""
    assert p.receipt is not None and verify_receipt(p.receipt)
    return [(i.index, i.status, dict(i.counts)) for i in p.receipt.indexes]


async def forget_tenant(c: Client, tenant: str, request_id: str) -> str:
    reply = await c.forget(tenant, {"kind": "tenant"}, reason="offboarding", legal_basis="contract end",
                           request_id=request_id)
    assert reply.status == "pending" and not reply.duplicate
    return reply.request_id


async def test_a_fanout_killed_after_any_step_resumes_to_the_same_receipt(settings: Settings,
                                                                          stack: Stack) -> None:
    nc = stack.c.nc
    fanout = Fanout(settings)
    await populate(stack, "base", "s-base")
    await fanout.start(nc)
    try:
        await forget_tenant(stack.c, "base", "fg-base")
        expected = shape(await stack.c.forget_wait("base", "fg-base", timeout_s=120))
    finally:
        await fanout.stop()
    # Every index holds something of a tenant, but the plaintext copies of one data subject's
    # values: a tenant's go with the rest of it.
    assert all(status == ("not_applicable" if index == "derived" else "done")
               for index, status, _ in expected), expected
    for i, handler in enumerate(HANDLERS):
        tenant, point = f"k{i}", f"{handler.index}:planned"
        await populate(stack, tenant, f"s-{tenant}")
        await fanout.start(nc, kill_at=point)
        await forget_tenant(stack.c, tenant, f"fg-{tenant}")
        assert fanout.proc is not None
        assert await asyncio.wait_for(fanout.proc.wait(), 120) == -9, f"not killed at {point}"
        assert stack.db is not None
        assert await stack.db.fetchval("SELECT status FROM forget_requests WHERE tenant = $1",
                                       tenant) == "pending"
        await fanout.start(nc)
        try:
            done = await stack.c.forget_wait(tenant, f"fg-{tenant}", timeout_s=120)
        finally:
            await fanout.stop()
        assert shape(done) == expected, f"killed at {point}"
        assert stack.db is not None
        left = await stack.db.fetchval(
            "SELECT count(*) FROM task_turns WHERE tenant = $1", tenant)
        assert left == 0


async def test_who_may_forget_what(settings: Settings, stack: Stack, tmp_path: Any) -> None:
    """A tenant agent forgets in its own tenant; not another's, not a whole tenant; a selector
    names exactly what its kind needs; the same request id with another selector conflicts."""
    fanout = Fanout(settings)
    await fanout.start(stack.c.nc)
    try:
        for tenant in ("acme", "other"):
            await auth.tenant_add(settings, tenant)
        creds = await auth.agent_add(settings, "acme", "bot", tmp_path / "bot.creds")
        await bindings.bind_agent(settings, "acme", "bot", ["s1", "s2"], [])
        [decided] = (await stack.c.memory_propose("acme", [
            {"proposal_id": "u9-city", "kind": "fact", "scope": {"level": "user", "id": "u9"},
             "source": {"kind": "user_confirmed"}, "value": "I live in Lisbon"}])).decisions
        other_record = decided.record_id
        async with await connect(msgspec.structs.replace(settings, nats_creds=creds), timeout=30) as agent:
            with pytest.raises(AgentLedgerError) as info:
                await agent.forget("other", {"kind": "subject", "subject": "s1"})
            assert info.value.code == "tenant_mismatch"
            with pytest.raises(AgentLedgerError) as info:
                await agent.forget("acme", {"kind": "tenant"})
            assert info.value.code == "permission_denied"
            with pytest.raises(AgentLedgerError) as info:
                await agent.forget("acme", {"kind": "subject"})
            assert (info.value.code, info.value.path) == ("missing_field", "$.selector.subject")
            with pytest.raises(AgentLedgerError) as info:
                await agent.forget("acme", {"kind": "task", "task_id": "t1", "subject": "s1"})
            assert (info.value.code, info.value.path) == ("unknown_field", "$.selector.subject")
            # Issue 49, item 5: a key or a record only within the agent's bindings.
            for body, want in (
                    ({"kind": "key", "key": "home city", "scope": {"level": "user", "tenant": "acme", "id": "u9"}},
                     ("scope_not_allowed", "$.selector.scope.id")),
                    ({"kind": "key", "key": "home city"}, ("scope_required", "$.selector.scope")),
                    ({"kind": "record", "record_id": other_record}, ("scope_not_allowed", "$.selector.record_id"))):
                with pytest.raises(AgentLedgerError) as info:
                    await agent.forget("acme", body)
                assert (info.value.code, info.value.path) == want, body
            assert [r.status for r in (await stack.c.memory_get("acme", "home city", "user", "u9")).records] == [
                "active"]
            own = await agent.forget("acme", {"kind": "key", "key": "home city",
                                              "scope": {"level": "user", "tenant": "acme", "id": "s1"}})
            assert own.request_id
            reply = await agent.forget("acme", {"kind": "subject", "subject": "s1"}, request_id="r1",
                                       reason="user request")
            again = await agent.forget("acme", {"kind": "subject", "subject": "s1"}, request_id="r1")
            assert again.duplicate and again.request_id == reply.request_id
            with pytest.raises(AgentLedgerError) as info:
                await agent.forget("acme", {"kind": "subject", "subject": "s2"}, request_id="r1")
            assert info.value.code == "conflict"
            done = await agent.forget_wait("acme", "r1")
            assert done.receipt is not None and done.receipt.requested_by == "acme/bot"
            # The other tenant cannot read acme's receipts, even by id.
            with pytest.raises(AgentLedgerError) as info:
                await agent.forget_receipts("other", request_id="r1")
            assert info.value.code == "tenant_mismatch"
            by_subject = await agent.forget_receipts("acme", subject="s1")
            assert [p.request_id for p in by_subject] == ["r1"]
    finally:
        await fanout.stop()


async def test_forgetting_a_task_while_others_keep_writing_changes_nothing_of_theirs(
        settings: Settings, stack: Stack) -> None:
    fanout = Fanout(settings)
    await fanout.start(stack.c.nc)
    try:
        await stack.append([created("gone")] + [turn("acme", "gone", i, f"gone {i}", "s-gone") for i in range(1, 6)])
        for n in range(4):
            await stack.append([created(f"w{n}")])
        stop = asyncio.Event()
        written: dict[str, int] = {f"w{n}": 0 for n in range(4)}

        async def writer(task: str) -> None:
            while not stop.is_set():
                written[task] += 1
                await stack.append([turn("acme", task, written[task], f"{task} line {written[task]}",
                                         "s-keep")])

        writers = [asyncio.create_task(writer(t)) for t in written]
        await asyncio.sleep(0.3)
        # A data subject who wrote in the tasks that keep going, then the task of another.
        await stack.append([event("variable_set", {"name": "leaving", "value": "a note of s-leaving",
                                                   "personal": True}, "w0", tenant="acme")
                            | {"data_subject": "s-leaving"}])
        leaving = await stack.c.forget("acme", {"kind": "subject", "subject": "s-leaving"})
        reply = await stack.c.forget("acme", {"kind": "task", "task_id": "gone"})
        done = await stack.c.forget_wait("acme", reply.request_id, timeout_s=120)
        assert (await stack.c.forget_wait("acme", leaving.request_id, timeout_s=120)).receipt is not None
        await asyncio.sleep(0.3)
        stop.set()
        await asyncio.gather(*writers)
        await stack.projected()
        assert done.receipt is not None
        for task, n in written.items():
            view = (await stack.c.working_memory("acme", task, reveal_personal=True)).state
            assert [t["content"] for t in view["transcript"]] == [f"{task} line {i}" for i in range(1, n + 1)]
            if task == "w0":
                assert view["variables"]["leaving"].get("erased") is True
        with pytest.raises(AgentLedgerError) as info:
            await stack.c.working_memory("acme", "gone", wait_ms=0)
        assert info.value.code == "not_found"
    finally:
        await fanout.stop()



async def test_a_key_forget_keeps_no_word_of_the_key(settings: Settings, stack: Stack) -> None:
    """A memory key is often made of its value's words. The request names the key, but what the
    service appends to the ``_forget`` ledger, keeps in ``forget_requests`` and answers in the
    receipt holds keyed digests of it, never its words; the key's records are forgotten all the
    same, and the same request again is a duplicate, not a conflict."""
    fanout = Fanout(settings)
    await fanout.start(stack.c.nc)
    try:
        c = stack.c
        key = "vault hint heronsong"
        await c.memory_propose("acme", [proposal("k1", "the vault hint is the grey bird", key=key)])
        assert [r.status for r in (await c.memory_get("acme", key, "project", "p1")).records] == ["active"]
        body = {"kind": "key", "key": key}
        reply = await c.forget("acme", body, request_id="fg-key-1", reason="asked", legal_basis="consent")
        done = await c.forget_wait("acme", reply.request_id, timeout_s=120)
        assert done.receipt is not None and done.selector.key is None and len(done.selector.key_digests) == 2
        assert not [r for r in (await c.memory_get("acme", key, "project", "p1")).records if r.status == "active"]
        again = await c.forget("acme", body, request_id="fg-key-1", reason="asked", legal_basis="consent")
        assert again.duplicate
        assert b"heronsong" not in msgspec.json.encode(done)
        assert not [seq for seq, body, headers in await ledger_messages(settings)
                    if b"heronsong" in body + "".join(headers.values()).encode()]
        assert stack.db is not None
        rows = await stack.db.fetch("SELECT request, receipt FROM forget_requests WHERE tenant = 'acme'")
        assert rows and not [r for r in rows if b"heronsong" in bytes(r[0]) + bytes(r[1] or b"")]
    finally:
        await fanout.stop()
