"""Forgetting in the context-builder's indexes (services/context_builder/forget.py), against real
NATS JetStream and PostgreSQL: the writer, the projector, the memory-policy service and the
context-builder run in process; the three handlers are driven directly through a
``ForgetContext`` built here from its pieces, as the tombstone-fanout's saga builds it
(plans go through JSON, as the saga stores them).

Forgetting a data subject removes the generations and the artifacts that hold their turns,
never serves a compaction summary of them again (not from a build that was running, not from a
checkpoint staged for the old lineage), and leaves the next build free to compact again from
what remains; forgetting a task or a tenant removes all of it; a step run twice changes
nothing; another tenant's rows stay as they were.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Any

import msgspec
import nats.js.errors
import pytest

from agentledger.client import raise_error
from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.contracts.api import AppendReply
from agentledger.contracts.codec import encode
from agentledger.contracts.context_api import BuildReply, CompactionCheckpoint, Coverage
from agentledger.core.context import (
    cas_check,
    forgotten_checkpoint,
    lineage_id,
    private_key_from_bytes,
    verify_checkpoint,
)
from agentledger.erasure import evict
from agentledger.erasure.erase import erase_seqs, erase_subject
from agentledger.errors import NotFoundError
from agentledger.security import auth
from agentledger.security.kek_epochs import KekRing
from agentledger.security.sealing import Keyring
from agentledger.services.context_builder.compactors import CompactionInput, structured
from agentledger.services.context_builder.docs_replay import verify_documents
from agentledger.services.context_builder.forget import CompactionHandler, DocumentsHandler, GenerationsHandler
from agentledger.services.tombstone_fanout.registry import ForgetContext, Handler
from agentledger.stores import artifacts
from agentledger.stores.artifacts import ArtifactStore
from ckpt_support import Stack, created, event
from test_context_compaction import COMPACT, commit
from test_context_service import build, call
from test_memory_service import proposal

TENANT = "acme"
OTHER = "globex"
ALICE = "ALICE-SECRET-passport-4711"
BOB = "bob talks about the release"
HANDLERS: tuple[Handler, ...] = (GenerationsHandler(), CompactionHandler(), DocumentsHandler())
_build = msgspec.json.Decoder(BuildReply)
_append = msgspec.json.Decoder(AppendReply)


def turn(ordinal: int, content: str, task: str, subject: str, role: str = "user",
         tenant: str = TENANT) -> dict[str, Any]:
    body = event("turn_appended", {"role": role, "ordinal": ordinal, "content": content}, task, tenant=tenant)
    body["data_subject"] = subject
    return body


def mixed(first: int, last: int, task: str, tenant: str = TENANT) -> list[dict[str, Any]]:
    """Alice asks (odd turns), bob answers (even turns); alice's turns carry her marker."""
    return [turn(i, f"{ALICE} asks question {i} about the outage", task, "alice", "user", tenant) if i % 2 else
            turn(i, f"Noted: {BOB}, item {i}. We decided to keep the cursor fix.", task, "bob", "assistant",
                 tenant)
            for i in range(first, last + 1)]


def bobs(first: int, last: int, task: str, tenant: str = TENANT) -> list[dict[str, Any]]:
    return [turn(i, f"{BOB}: step {i} is confirmed done. We went through the deployment log of step {i} together "
                    "and it showed nothing new about the stuck list.", task, "bob", "user" if i % 2 else "assistant",
                 tenant)
            for i in range(first, last + 1)]


class Gate:
    """A compactor that waits until released (a late compactor result), then compacts."""

    def __init__(self) -> None:
        self.called = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, request: CompactionInput) -> Any:
        self.called.set()
        await self.release.wait()
        return await structured(request)


class Forgets:
    """What the saga gives a handler, built from the test's operator connection."""

    def __init__(self, stack: Stack, nc: Any, store: ArtifactStore, keyring: Keyring) -> None:
        self.stack = stack
        self.settings = stack.settings
        self.nc = nc
        self.artifacts = store
        self.keyring = keyring
        self._n = 0

    def context(self, tenant: str = TENANT, plans: dict[str, Any] | None = None, **selector: Any) -> ForgetContext:
        self._n += 1
        request = ev.ForgetRequested(request_id=f"fr{self._n}", selector=ev.ForgetSelector(**selector),
                                     requested_by="operator/test", operator=True, reason="test")
        assert self.stack.db is not None
        return ForgetContext(settings=self.settings, nc=self.nc, pool=self.stack.db, request=request, tenant=tenant,
                             request_seq=0, keyring=self.keyring, artifacts=self.artifacts, append=self.append,
                             erase=self.erase, erase_artifact=self.artifacts.erase,
                             wait_watermark=self.wait_watermark, evict=self.evict, plans=dict(plans or {}))

    async def evict(self, eviction: evict.Eviction) -> list[evict.EvictionAck]:
        return await evict.broadcast(self.nc, self.settings.prefix, eviction, evict.Instances(self.nc))

    async def append(self, events: Sequence[ev.EventBase]) -> list[int]:
        body = b'{"events":[' + b",".join(encode(e) for e in events) + b"]}"
        msg = await self.nc.request(f"{self.settings.prefix}.writer.append", body, timeout=30)
        reply = _append.decode(msg.data)
        if reply.error is not None:
            raise_error(reply.error)
        return [r.seq for r in reply.results]

    async def erase(self, seqs: Iterable[int]) -> int:
        return await erase_seqs(self.nc.jetstream(), self.settings.stream, seqs)

    async def wait_watermark(self, durable: str, table: str, name: str) -> None:
        try:
            info = await self.nc.jetstream().consumer_info(self.settings.stream, durable)
        except nats.js.errors.NotFoundError:
            return
        target = info.delivered.stream_seq or 0
        deadline = time.monotonic() + 30
        while (await self.stack.db.fetchval(f"SELECT seq FROM {table} WHERE name = $1", name) or 0) < target:
            assert time.monotonic() < deadline, f"{durable} never reached {target}"
            await asyncio.sleep(0.02)

    async def run(self, ctx: ForgetContext, handlers: Sequence[Handler] = HANDLERS) -> dict[str, Any]:
        """Each handler's plan (stored and read back as JSON, as the saga does), then its apply;
        the counts by index (None: not applicable)."""
        out: dict[str, Any] = {}
        for h in handlers:
            plan = await h.plan(ctx)
            plan = msgspec.json.decode(msgspec.json.encode(plan))
            ctx.plans[h.index] = plan
            out[h.index] = None if plan is None else await h.apply(ctx, plan)
        return out

    async def again(self, ctx: ForgetContext, handlers: Sequence[Handler] = HANDLERS) -> dict[str, Any]:
        """Every step applied again with the plan it stored: what a resumed saga does."""
        return {h.index: None if ctx.plans[h.index] is None else await h.apply(ctx, ctx.plans[h.index])
                for h in handlers}

    async def shred(self, subject: str, tenant: str = TENANT) -> None:
        """What the keys and caches steps do: destroy the key, drop every cached copy."""
        await self.keyring.destroy_subject(tenant, subject)
        await evict.broadcast_to(self.nc, self.settings.prefix,
                              evict.Eviction(request_id="shred", tenant=tenant, subject=subject),
                              frozenset({"agentledger-context-builder"}))


@pytest.fixture
async def gate() -> Gate:
    return Gate()


@pytest.fixture
async def stack(settings: Settings, gate: Gate) -> AsyncIterator[Stack]:
    s = await Stack(settings).start(checkpointer=False, memory=True, context=True, compactors={"gated": gate})
    try:
        yield s
    finally:
        gate.release.set()
        await s.stop()


@pytest.fixture
async def forgets(stack: Stack, settings: Settings) -> AsyncIterator[Forgets]:
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        store = await artifacts.open(nc, settings)
        keyring = Keyring(nc, settings.keys_bucket, KekRing.load(settings.kek_path, create=False))
        yield Forgets(stack, nc, store, keyring)
    finally:
        await nc.close()


# ---- helpers -------------------------------------------------------------------------------------------

async def gen_rows(stack: Stack, tenant: str = TENANT) -> dict[str, Any]:
    rows = await stack.db.fetch("SELECT generation_id, task_id, subjects, memory_ids, frozen_uri, artifact_uri"
                                " FROM context_generations WHERE tenant = $1", tenant)
    return {r["generation_id"]: r for r in rows}


async def cp_rows(stack: Stack, tenant: str = TENANT) -> dict[str, Any]:
    rows = await stack.db.fetch("SELECT checkpoint_id, task_id, status, subjects, body, lineage"
                                " FROM context_checkpoints WHERE tenant = $1", tenant)
    return {r["checkpoint_id"]: r for r in rows}


async def exists(store: ArtifactStore, uri: str) -> bool:
    try:
        await store.stat(uri)
    except NotFoundError:
        return False
    return True


async def stored_uris(store: ArtifactStore, tenant: str = TENANT) -> set[str]:
    return set(await store.names(tenant))


def uris_of(rows: Iterable[Any]) -> set[str]:
    return {u for r in rows for u in (r["frozen_uri"], r["artifact_uri"]) if u}


def kept_uris(rows: Iterable[Any]) -> set[str]:
    """The artifacts the rows' generations keep: the final one once finished (a finished
    compacted build erased its frozen input), else the frozen one."""
    return {r["artifact_uri"] or r["frozen_uri"] for r in rows}


async def holds(stack: Stack, needle: str) -> list[str]:
    """Context tables (as text) in which ``needle`` occurs."""
    found = []
    for table in ("context_generations", "context_checkpoints", "context_conversations"):
        text = await stack.db.fetchval(f"SELECT coalesce(string_agg(t::text, ' '), '') FROM {table} t")
        body = await stack.db.fetchval(
            f"SELECT coalesce(string_agg(convert_from(body, 'UTF8'), ' '), '') FROM {table}"
        ) if table == "context_checkpoints" else ""
        if needle in text or needle in body:
            found.append(table)
    return found


async def doc_chunks(stack: Stack, tenant: str) -> list[Any]:
    return await stack.db.fetch("SELECT doc_id, chunk_index, version, seq, text, embedding::text FROM document_chunks"
                                " WHERE tenant = $1 ORDER BY doc_id, chunk_index", tenant)


async def ask(stack: Stack, action: str, body: dict[str, Any]) -> dict[str, Any]:
    return msgspec.json.decode(await call(stack.c, action, body))


# ---- the pure parts ----------------------------------------------------------------------------------------

def test_each_forget_starts_a_new_lineage_and_a_forgotten_body_is_inert() -> None:
    """A forget count of 0 is the lineage of before; each count after is another lineage. A
    forgotten checkpoint's body still decodes, holds no summary, never verifies, never commits."""
    before = lineage_id(TENANT, "t", 2, 5)
    assert before.startswith("L2-") and lineage_id(TENANT, "t", 2, 5, 0) == before
    assert len({lineage_id(TENANT, "t", 2, 5, n) for n in range(5)}) == 5
    assert lineage_id(TENANT, "t", 2, 5, 3).startswith("L2f3-")
    body = forgotten_checkpoint(checkpoint_id="cp9-x", tenant=TENANT, task_id="t", epoch=2, lineage=before,
                                coverage=Coverage(6, 9), generation_id="gx", reason="forgotten: fr1")
    cp = msgspec.json.decode(msgspec.json.encode(body), type=CompactionCheckpoint)
    assert cp.summary.confirmed_facts == [] and cp.source_digest == "" and cp.receipt.signature == ""
    key = private_key_from_bytes(bytes(32))
    assert not verify_checkpoint(cp, key.public_key())
    assert cas_check(cp, expected_checkpoint_id="cp9-x", input_ordinal=10, answer_ordinal=11, transcript_revision=11,
                     epoch=2, lineage=before, lineage_base=5, active_coverage_end=None,
                     public_key=key.public_key()) == "not_staged"


# ---- forgetting a data subject ---------------------------------------------------------------------------------

async def test_forget_a_subject_reaches_generations_and_compaction(stack: Stack, forgets: Forgets) -> None:
    """Alice's turns are in generations and a compaction summary: after forgetting her, those
    generations (rows and both artifacts) are gone and answer not_found, the summary is forgotten
    and never served again, a checkpoint staged for the old lineage is refused, the next build
    compacts again from what remains; bob's own task and another tenant are untouched; a step run
    again changes nothing."""
    await stack.append([created("t1"), *mixed(1, 10, "t1")])
    await stack.append([created("t2"), *bobs(1, 4, "t2")])
    await stack.append([created("t3"), *bobs(1, 10, "t3")])
    await stack.append([created("t1", tenant=OTHER), *mixed(1, 4, "t1", OTHER)])
    g10, _ = await build(stack.c, task_id="t1", input_ordinal=10, window_tokens=2000, reserve_tokens=100,
                         compaction=COMPACT)
    assert g10.selected == "primary", g10.compaction
    await stack.append([turn(11, "Thanks, bob here: answer recorded.", "t1", "bob", "assistant")])
    assert (await commit(stack, g10, 11)).activated
    await stack.append([turn(12, f"{ALICE} once more", "t1", "alice")])
    g12, _ = await build(stack.c, task_id="t1", input_ordinal=12, window_tokens=4000)
    assert g12.branches[0].checkpoint_id == g10.branches[0].checkpoint_id
    b4, b4_raw = await build(stack.c, task_id="t2", input_ordinal=4, window_tokens=2000)
    o4, o4_raw = await build(stack.c, tenant=OTHER, task_id="t1", input_ordinal=4, window_tokens=2000)
    # Task t3 (bob only): an active checkpoint stored before subjects were recorded (NULL: it
    # may hold anything), and a second candidate over the same prefix, staged, never committed.
    g3, _ = await build(stack.c, task_id="t3", input_ordinal=10, window_tokens=2000, reserve_tokens=100,
                        compaction=COMPACT)
    raw = await call(stack.c, "build", {"tenant": TENANT, "task_id": "t3", "input_ordinal": 10,
                                        "window_tokens": 2000, "reserve_tokens": 100, "compaction": COMPACT,
                                        "generation_id": g3.generation_id, "regenerate": True})
    second = _build.decode(raw).generation
    assert second is not None and second.selected == "primary"
    await stack.append([turn(11, "bob: answered", "t3", "bob", "assistant")])
    assert (await commit(stack, g3, 11)).activated
    cp1, cp3, cp3b = (g.branches[0].checkpoint_id for g in (g10, g3, second))
    await stack.db.execute("UPDATE context_checkpoints SET subjects = NULL WHERE checkpoint_id = $1", cp3)

    # What the builder recorded: the subjects of every generation and checkpoint.
    gens = await gen_rows(stack)
    assert list(gens[g10.generation_id]["subjects"]) == ["alice", "bob"]
    assert list(gens[g12.generation_id]["subjects"]) == ["alice", "bob"]
    assert list(gens[b4.generation_id]["subjects"]) == ["bob"]
    assert list(gens[second.generation_id]["subjects"]) == ["bob"]
    assert all(list(r["memory_ids"]) == [] for r in gens.values())
    cps = await cp_rows(stack)
    assert list(cps[cp1]["subjects"]) == ["alice", "bob"] and list(cps[cp3b]["subjects"]) == ["bob"]
    assert (cps[cp1]["status"], cps[cp3]["status"], cps[cp3b]["status"]) == ("active", "active", "staged")
    alice_uris = uris_of(r for r in gens.values() if "alice" in r["subjects"])
    assert len(alice_uris) == 3  # g10 (frozen + final), g12 (direct: one artifact)
    other_before = (await gen_rows(stack, OTHER), await cp_rows(stack, OTHER))

    await forgets.shred("alice")
    ctx = forgets.context(kind="subject", subject="alice")
    counts = await forgets.run(ctx)
    assert counts == {"generations": {"generations": 2, "artifacts": 3},
                      "compaction": {"checkpoints": 2, "conversations": 2}, "documents": None}
    assert ctx.plans["generations"]["tasks"] == ["t1"]

    gens = await gen_rows(stack)
    assert set(gens) == {b4.generation_id, g3.generation_id, second.generation_id}
    for uri in alice_uris:
        assert not await exists(forgets.artifacts, uri), uri
    assert await stored_uris(forgets.artifacts) == kept_uris(gens.values())
    for action in ("get", "trace"):
        reply = await ask(stack, action, {"tenant": TENANT, "generation_id": g10.generation_id})
        assert reply["error"]["code"] == "not_found", reply
    retry = await ask(stack, "build", {"tenant": TENANT, "task_id": "t1", "input_ordinal": 12,
                                       "window_tokens": 4000, "generation_id": g12.generation_id})
    assert retry["error"]["code"] == "not_found"
    # Bob's task is served as before, byte for byte.
    assert await call(stack.c, "get", {"tenant": TENANT, "generation_id": b4.generation_id}) == b4_raw

    cps = await cp_rows(stack)
    for cid in (cp1, cp3):
        body = bytes(cps[cid]["body"]).decode()
        assert cps[cid]["status"] == "forgotten" and list(cps[cid]["subjects"]) == [], cid
        assert ALICE not in body and "cursor" not in body and '"signature":""' in body
    assert cps[cp3b]["status"] == "staged"
    convs = {r["task_id"]: r for r in await stack.db.fetch(
        "SELECT task_id, forgets, lineage, active_checkpoint_id FROM context_conversations WHERE tenant = $1",
        TENANT)}
    for task, old in (("t1", g10.lineage), ("t3", g3.lineage)):
        conv = convs[task]
        assert conv["forgets"] == 1 and conv["active_checkpoint_id"] is None, task
        assert conv["lineage"].startswith("L0f1-") and conv["lineage"] != old
    assert convs["t2"]["forgets"] == 0
    assert await holds(stack, ALICE) == []
    # The candidate staged for the old lineage can never become active (the pointer moved off
    # the checkpoint it would have regressed against: only the lineage stops it now).
    late = await commit(stack, second, 11)
    assert (late.activated, late.reason) == (False, "other_lineage")
    assert (await commit(stack, second, 11)).reason == "other_lineage"
    # A forgotten checkpoint is never served: the next build of t3 starts without one.
    await stack.append([turn(12, "bob: one more", "t3", "bob")])
    again3, _ = await build(stack.c, task_id="t3", input_ordinal=12, window_tokens=4000)
    assert again3.branches[0].checkpoint_id is None and "checkpoint" not in {t.source for t in
                                                                          again3.branches[0].trace}

    # A step run again (a resumed saga) changes nothing and reports the same.
    before = (await gen_rows(stack), await cp_rows(stack))
    assert await forgets.again(ctx) == counts
    assert (await gen_rows(stack), await cp_rows(stack)) == before
    # A new request for the same subject finds nothing left.
    fresh = await forgets.run(forgets.context(kind="subject", subject="alice"))
    assert fresh["generations"] == {"generations": 0, "artifacts": 0}
    assert fresh["compaction"] == {"checkpoints": 0, "conversations": 0}

    # The next build of t1 compacts again, in the new lineage, from what remains (bob's turns).
    await stack.append([turn(13, "bob: what is left to do?", "t1", "bob", "user")])
    g13, _ = await build(stack.c, task_id="t1", input_ordinal=13, window_tokens=2000, reserve_tokens=100,
                         compaction=COMPACT)
    assert g13.lineage == convs["t1"]["lineage"] and g13.selected == "primary", g13.compaction
    assert ALICE not in g13.branches[0].rendered and "cursor fix" in g13.branches[0].rendered
    await stack.append([turn(14, "bob: done.", "t1", "bob", "assistant")])
    activated = await commit(stack, g13, 14)
    assert activated.activated and activated.checkpoint.lineage == convs["t1"]["lineage"]
    assert list((await gen_rows(stack))[g13.generation_id]["subjects"]) == ["bob"]

    # The other tenant, with a subject of the same name, is untouched.
    assert (await gen_rows(stack, OTHER), await cp_rows(stack, OTHER)) == other_before
    assert await call(stack.c, "get", {"tenant": OTHER, "generation_id": o4.generation_id}) == o4_raw


async def test_a_late_compactor_result_of_the_old_lineage_is_never_kept(stack: Stack, gate: Gate,
                                                                        forgets: Forgets) -> None:
    """A build whose compactor is still running when alice is forgotten: its frozen generation is
    deleted under it; when the compactor answers, nothing is staged, nothing of it is kept (its
    artifacts erased), and the caller is told to build again."""
    await stack.append([created("late"), *mixed(1, 10, "late")])
    running = asyncio.create_task(call(stack.c, "build", {
        "tenant": TENANT, "task_id": "late", "input_ordinal": 10, "window_tokens": 2000, "reserve_tokens": 100,
        "compaction": {**COMPACT, "compactor": "gated"}}))
    await asyncio.wait_for(gate.called.wait(), 30)
    [frozen] = (await gen_rows(stack)).values()
    assert frozen["artifact_uri"] is None and list(frozen["subjects"]) == ["alice", "bob"]
    counts = await forgets.run(forgets.context(kind="subject", subject="alice"))
    assert counts["generations"] == {"generations": 1, "artifacts": 1}
    gate.release.set()
    reply = _build.decode(await running)
    assert not reply.ok and reply.error.code == "forgotten", reply
    assert await gen_rows(stack) == {}
    assert await cp_rows(stack) == {}
    assert await stored_uris(forgets.artifacts) == set()
    # Asked again, a fresh build (its key was not destroyed here: the content is still readable).
    gen, _ = await build(stack.c, task_id="late", input_ordinal=10, window_tokens=2000, reserve_tokens=100,
                         compaction=COMPACT)
    assert gen.selected == "primary"


async def test_a_build_overtaken_by_its_conversation_moving_on_keeps_nothing(stack: Stack, gate: Gate,
                                                                             forgets: Forgets) -> None:
    """A build running while a forget request moves its conversation to a new lineage (here the
    compaction step alone, as after a crash between steps): its candidate is not staged."""
    await stack.append([created("mv"), *mixed(1, 10, "mv")])
    g10, _ = await build(stack.c, task_id="mv", input_ordinal=10, window_tokens=2000, reserve_tokens=100,
                         compaction=COMPACT)
    await stack.append([turn(11, "bob: answered.", "mv", "bob", "assistant"), turn(12, "bob again", "mv", "bob")])
    running = asyncio.create_task(call(stack.c, "build", {
        "tenant": TENANT, "task_id": "mv", "input_ordinal": 12, "window_tokens": 2000, "reserve_tokens": 100,
        "compaction": {**COMPACT, "high_watermark": 0.05, "compactor": "gated"}}))
    await asyncio.wait_for(gate.called.wait(), 30)
    counts = await forgets.run(forgets.context(kind="subject", subject="alice"), [CompactionHandler()])
    assert counts["compaction"] == {"checkpoints": 1, "conversations": 1}
    gate.release.set()
    reply = _build.decode(await running)
    assert not reply.ok and reply.error.code == "forgotten", reply
    assert set(await gen_rows(stack)) == {g10.generation_id}
    assert [r["status"] for r in (await cp_rows(stack)).values()] == ["forgotten"]


# ---- forgetting memory records, a task ------------------------------------------------------------------------

async def test_forget_a_task_and_the_memory_it_wrote(stack: Stack, forgets: Forgets) -> None:
    """Forgetting a task deletes its generations, checkpoints and conversation; a generation of
    another task that read a memory record the task wrote (the memory step's plan) goes too;
    the rest stays. A record selector reaches only the generations that read the record."""
    decided = await stack.c.memory_propose(TENANT, [proposal("m1", "The release train leaves on Tuesdays",
                                                             key="release train")])
    record = decided.decisions[0].record_id
    assert record
    await stack.append([created("gone"), *mixed(1, 10, "gone")])
    g10, _ = await build(stack.c, task_id="gone", input_ordinal=10, window_tokens=2000, reserve_tokens=100,
                         compaction=COMPACT)
    await stack.append([turn(11, "bob: ok.", "gone", "bob", "assistant")])
    assert (await commit(stack, g10, 11)).activated
    await stack.append([created("reader"), *bobs(1, 2, "reader")])
    await stack.append([created("plain"), *bobs(1, 2, "plain")])
    read, _ = await build(stack.c, task_id="reader", input_ordinal=2, window_tokens=4000, project_id="p1",
                          memory_query="when does the release train leave")
    assert list((await gen_rows(stack))[read.generation_id]["memory_ids"]) == [record]
    plain, plain_raw = await build(stack.c, task_id="plain", input_ordinal=2, window_tokens=4000)

    # A record selector: only the generation that read it.
    ctx = forgets.context(kind="record", record_id=record, plans={"memory": {"record_ids": [record]}})
    assert await forgets.run(ctx) == {"generations": {"generations": 1, "artifacts": 1}, "compaction": None,
                                      "documents": None}
    assert read.generation_id not in await gen_rows(stack)
    read, _ = await build(stack.c, task_id="reader", input_ordinal=2, window_tokens=4000, project_id="p1",
                          memory_query="when does the release train leave")

    ctx = forgets.context(kind="task", task_id="gone", plans={"memory": {"record_ids": [record]}})
    counts = await forgets.run(ctx)
    assert counts == {"generations": {"generations": 2, "artifacts": 3},
                      "compaction": {"checkpoints": 1, "conversations": 1}, "documents": None}
    assert set(await gen_rows(stack)) == {plain.generation_id}
    assert await cp_rows(stack) == {}
    assert await stack.db.fetch("SELECT task_id FROM context_conversations WHERE task_id = 'gone'") == []
    assert await stored_uris(forgets.artifacts) == kept_uris((await gen_rows(stack)).values())
    assert await call(stack.c, "get", {"tenant": TENANT, "generation_id": plain.generation_id}) == plain_raw
    assert await forgets.again(ctx) == counts
    assert set(await gen_rows(stack)) == {plain.generation_id}


# ---- forgetting a tenant ------------------------------------------------------------------------------------

async def test_forget_a_tenant_with_its_documents(stack: Stack, forgets: Forgets, settings: Settings) -> None:
    """Every generation, checkpoint, conversation and document row of the tenant goes (after the
    ledger step erased its messages), the document replay stays green, another tenant keeps
    everything, and a second run changes nothing."""
    for tenant in (TENANT, OTHER):
        reply = await ask(stack, "ingest", {"tenant": tenant, "doc_id": "runbook", "version": 1,
                                            "source": "wiki://runbook", "text": f"Runbook of {tenant}. " * 40,
                                            "chunk_chars": 200, "overlap_chars": 20})
        assert reply["ok"], reply
        await stack.append([created("t", tenant=tenant), *mixed(1, 10, "t", tenant)])
        gen, _ = await build(stack.c, tenant=tenant, task_id="t", input_ordinal=10, window_tokens=2000,
                             reserve_tokens=100, compaction=COMPACT, document_query="runbook")
        assert gen.selected == "primary"
    other_before = (await gen_rows(stack, OTHER), await cp_rows(stack, OTHER),
                    await doc_chunks(stack, OTHER))
    assert await stack.db.fetchval("SELECT count(*) FROM document_chunks WHERE tenant = $1", TENANT) > 1

    # The ledger step: every message of the tenant erased (its `_forget` subject aside).
    js = forgets.nc.jetstream()
    prefix = settings.prefix
    assert await erase_subject(js, settings.stream, f"{prefix}.ledger.{TENANT}.>") > 0
    ctx = forgets.context(kind="tenant")
    counts = await forgets.run(ctx)
    assert counts["generations"] == {"generations": 1, "artifacts": 2}
    assert counts["compaction"] == {"checkpoints": 1, "conversations": 1}
    assert counts["documents"]["documents"] == 1 and counts["documents"]["chunks"] > 1
    for table in ("context_generations", "context_checkpoints", "context_conversations", "documents",
                  "document_versions", "document_chunks"):
        assert await stack.db.fetchval(f"SELECT count(*) FROM {table} WHERE tenant = $1", TENANT) == 0, table
    assert await stored_uris(forgets.artifacts) == set()
    assert await verify_documents(settings) == []
    assert await forgets.again(ctx) == counts
    assert (await gen_rows(stack, OTHER), await cp_rows(stack, OTHER),
            await doc_chunks(stack, OTHER)) == other_before
    # Search of the other tenant still finds its runbook; of the forgotten one, nothing.
    assert stack.context is not None and stack.context.documents is not None
    index = stack.context.documents
    assert await index.search(stack.db, OTHER, "runbook", await index.embed("runbook"), 3)
    assert await index.search(stack.db, TENANT, "runbook", await index.embed("runbook"), 3) == []
    # Handlers that do not concern a selector say so.
    assert await DocumentsHandler().plan(forgets.context(kind="subject", subject="alice")) is None
    assert await CompactionHandler().plan(forgets.context(kind="key", key="release train")) is None


# ---- the eviction ---------------------------------------------------------------------------------------------

async def test_the_eviction_drops_cached_keys_and_waits_for_running_builds(stack: Stack, gate: Gate,
                                                                            forgets: Forgets) -> None:
    """The context-builder answers an eviction: alice's key leaves its cache (the next build reads
    her turns as erased once the key is destroyed), and it answers only once a build of the
    tenant that was running has ended (what it froze is then where the forget steps find it)."""
    await stack.append([created("ev"), *mixed(1, 10, "ev")])
    await build(stack.c, task_id="ev", input_ordinal=10, window_tokens=4000)
    running = asyncio.create_task(call(stack.c, "build", {
        "tenant": TENANT, "task_id": "ev", "input_ordinal": 10, "window_tokens": 2000, "reserve_tokens": 100,
        "compaction": {**COMPACT, "compactor": "gated"}}))
    await asyncio.wait_for(gate.called.wait(), 30)
    await forgets.keyring.destroy_subject(TENANT, "alice")
    assert stack.context is not None
    evicting = asyncio.create_task(stack.context._evict(evict.Eviction(request_id="e1", tenant=TENANT,
                                                                       subject="alice")))
    await asyncio.sleep(0.3)
    assert not evicting.done() and not running.done()
    gate.release.set()
    counts = await evicting
    assert counts["keys"] == 1 and counts["builds"] == 1, counts
    assert _build.decode(await running).ok
    # Over NATS, as the fan-out's caches step asks: the whole tenant (bob's key is still cached).
    acks = await evict.broadcast_to(forgets.nc, stack.settings.prefix,
                                 evict.Eviction(request_id="e2", tenant=TENANT, whole_tenant=True),
                                 frozenset({"agentledger-context-builder"}))
    [ack] = [a for a in acks if a.service == "agentledger-context-builder"]
    assert ack.evicted == {"keys": 1, "embeddings": ack.evicted["embeddings"], "builds": 0}, ack
    await stack.append([turn(11, "bob: next", "ev", "bob")])
    gen, _ = await build(stack.c, task_id="ev", input_ordinal=11, window_tokens=4000)
    assert ALICE not in gen.branches[0].rendered and BOB in gen.branches[0].rendered
    assert list((await gen_rows(stack))[gen.generation_id]["subjects"]) == ["bob"]


async def test_generation_of_before_subjects_were_recorded_counts_as_holding_anything(
        stack: Stack, forgets: Forgets) -> None:
    """Rows built before migration 7 (NULL subjects and memory ids) are reached by any subject."""
    await stack.append([created("old"), *bobs(1, 4, "old")])
    await stack.append([created("new"), *bobs(1, 4, "new")])
    old, _ = await build(stack.c, task_id="old", input_ordinal=4, window_tokens=2000)
    new, _ = await build(stack.c, task_id="new", input_ordinal=4, window_tokens=2000)
    await stack.db.execute("UPDATE context_generations SET subjects = NULL, memory_ids = NULL"
                           " WHERE generation_id = $1", old.generation_id)
    counts = await forgets.run(forgets.context(kind="subject", subject="carol"))
    assert counts["generations"] == {"generations": 1, "artifacts": 1}
    assert set(await gen_rows(stack)) == {new.generation_id}
    # A record selector whose memory step reached nothing reaches nothing.
    counts = await forgets.run(forgets.context(kind="record", record_id="mem_x", plans={"memory": None}))
    assert counts["generations"] == {"generations": 0, "artifacts": 0}


async def test_documents_ingested_after_the_ledger_step_stay(stack: Stack, forgets: Forgets,
                                                             settings: Settings) -> None:
    """The tenant ingested again after its ledger was erased (before the documents step): the
    index keeps exactly what the ledger still holds, and the document verify stays green."""
    async def ingest(doc_id: str, text: str) -> None:
        reply = await ask(stack, "ingest", {"tenant": TENANT, "doc_id": doc_id, "version": 1,
                                            "source": f"wiki://{doc_id}", "text": text * 30,
                                            "chunk_chars": 200, "overlap_chars": 20})
        assert reply["ok"], reply

    await ingest("old", "The old runbook of the tenant. ")
    erased = await erase_subject(forgets.nc.jetstream(), settings.stream, f"{settings.prefix}.ledger.{TENANT}.>")
    assert erased > 0
    await ingest("new", "The new runbook, written after the forget. ")
    ctx = forgets.context(kind="tenant")
    counts = await forgets.run(ctx, [DocumentsHandler()])
    assert counts["documents"]["documents"] == 2
    docs = await stack.db.fetch("SELECT doc_id FROM documents WHERE tenant = $1", TENANT)
    assert [r["doc_id"] for r in docs] == ["new"]
    assert await stack.db.fetchval("SELECT count(*) FROM document_chunks WHERE tenant = $1 AND doc_id = 'old'",
                                   TENANT) == 0
    assert await verify_documents(settings) == []
