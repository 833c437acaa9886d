"""A data subject's forget reaches the plaintext copies made from their values, which no lineage
names: real agent credentials, real NATS JetStream and PostgreSQL, every service in process.

Alice told a task her phone number and e-mail (sealed under her key). Someone then ingested a
delivery note quoting her phone (and call notes declared about her), a memory read's query
quoted her e-mail, and another task's context generation was built over the delivery note.
Forgetting Alice opens her sealed values with her key (before the key is destroyed), searches
with them, and forgets what holds them:
the document version (erased, the index rebuilt from what remains), the receipt (its query
redacted), the generation (row and artifacts). The test's own scan of every row and every
stream message finds the phone and e-mail before, and nothing after; what quoted neither
(another document, read and generation) is untouched.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import pytest

from agentledger.config import Settings
from agentledger.security import auth, bindings
from agentledger.services.context_builder.docs_replay import verify_documents
from agentledger.services.memory_policy.replay import verify_memory
from agentledger.services.tombstone_fanout.derived import needles_of
from tenant_agents import agent_client
from ckpt_support import Stack, created, event
from test_forget_tombstone_digest import Env, messages_holding, rows_holding

TENANT = "acme"
PHONE = "+33 6 12 34 56 78"
EMAIL = "alice.moreau@example.fr"
NOTE = f"Delivery note of week 12. The parcel for the Lyon office: call the customer on {PHONE} first."
CALL = "Notes of the call about the office move: the customer prefers mornings, the van is booked."
RUNBOOK = "Runbook of the worker: restart it when the queue stalls for more than ten minutes."


@pytest.fixture
async def env(admin: Settings) -> AsyncIterator[Env]:
    stack = await Stack(admin).start(memory=True, context=True, tombstone=True)
    await auth.tenant_add(admin, TENANT)
    await bindings.bind_agent(admin, TENANT, "desk", ["s-alice"], ["p1"])
    agent = await agent_client(admin, TENANT, "desk", timeout=30)
    try:
        yield Env(stack, agent)
    finally:
        await agent.close()
        await stack.stop()


def turn(task: str, ordinal: int, text: str, subject: str | None = None) -> dict[str, object]:
    body = event("turn_appended", {"role": "user", "ordinal": ordinal, "content": text}, task, tenant=TENANT)
    return body | ({"data_subject": subject} if subject else {})


async def test_a_subject_forget_finds_the_plaintext_copies_of_their_values_and_forgets_them(env: Env) -> None:
    c = env.stack.c
    await env.stack.append([created("chat-a", tenant=TENANT),
                            turn("chat-a", 1, f"You can reach me on {PHONE} or at {EMAIL}", "s-alice")])
    await c.ingest_document(TENANT, "delivery-note", 1, NOTE, source="crm")
    await c.ingest_document(TENANT, "runbook", 1, RUNBOOK, source="wiki")
    # Declared about her at ingest: that lineage needs no needle.
    await c.ingest_document(TENANT, "call-notes", 1, CALL, source="crm", data_subjects=["s-alice"])
    quoted = await c.memory_read(TENANT, f"what do we know about {EMAIL}", project_id="p1", task_id="chat-x")
    plain = await c.memory_read(TENANT, "worker restart", project_id="p1", task_id="chat-x")
    await env.stack.append([created("chat-b", tenant=TENANT),
                            turn("chat-b", 1, "Who do we call about the parcel?", "s-bob")])
    await env.stack.append([created("chat-c", tenant=TENANT),
                            turn("chat-c", 1, "The worker queue stalls again.", "s-bob")])
    await env.stack.projected()
    parcel = await c.build_context(TENANT, "chat-b", 1, window_tokens=4000, reserve_tokens=64,
                                   document_query="parcel delivery note call the customer")
    worker = await c.build_context(TENANT, "chat-c", 1, window_tokens=4000, reserve_tokens=64)
    assert PHONE in msgspec.json.encode(await c.get_generation(TENANT, parcel.generation_id)).decode()
    assert PHONE not in msgspec.json.encode(await c.get_generation(TENANT, worker.generation_id)).decode()
    for needle in (PHONE, EMAIL):
        assert await rows_holding(env.db, needle) or await messages_holding(env, needle.encode()), needle
    async with env.db.acquire() as conn:
        await conn.execute("ANALYZE")  # the column statistics sample the copies too, until the forget

    reply = await env.agent.forget(TENANT, {"kind": "subject", "subject": "s-alice"}, reason="erasure request")
    done = await env.agent.forget_wait(TENANT, reply.request_id, timeout_s=180)
    assert done.receipt is not None
    derived = next(i for i in done.receipt.indexes if i.index == "derived")
    assert derived.status == "done", done.receipt.indexes
    counts = dict(derived.counts)
    assert counts.pop("needles") >= 2
    assert counts == {"document_versions": 2, "receipts_redacted": 1, "receipts": 0, "generations": 1}

    for needle in (PHONE, EMAIL, "office move"):
        assert await rows_holding(env.db, needle) == [], needle
        assert await messages_holding(env, needle.encode()) == [], needle
    # What quoted nothing of hers stays: the runbook, the other read, the other generation.
    docs = {r[0] for r in await env.db.fetch("SELECT doc_id FROM documents WHERE tenant = $1", TENANT)}
    assert docs == {"runbook"}
    receipts = {r.receipt_id: r for r in (await c.memory_receipts(TENANT, task_id="chat-x")).receipts}
    assert receipts[plain.receipt.receipt_id].request == plain.receipt.request
    assert "query" not in receipts[quoted.receipt.receipt_id].request
    assert (await c.get_generation(TENANT, worker.generation_id)).generation_id == worker.generation_id
    assert await verify_documents(env.stack.settings) == []
    assert await verify_memory(env.stack.settings) == []


def test_needles_are_long_values_and_the_personal_spans_in_them() -> None:
    """A short phrase someone said is no needle (it would forget whatever else says it); a long
    value is one whole, and each phone number or e-mail the detector finds in it is one too."""
    assert needles_of("thank you, that helps") == set()
    said = f"You can reach me on {PHONE} or at {EMAIL}"
    assert needles_of(said) == {said, PHONE, EMAIL}
    assert needles_of(f"ok: {EMAIL}") == {EMAIL}
