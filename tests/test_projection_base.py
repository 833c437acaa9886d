"""The projection base, on real NATS and PostgreSQL: rebuild beside and swap for every projection.

Memory and the document index are rebuilt the way Working Memory is: beside the live
tables, which keep answering reads (and keep being folded into) until one short
transaction switches the new tables in. A rebuild that dies leaves the live tables
serving; one that a forget request overtakes starts again rather than bring back what
was forgotten. The fold is all a projection writes, so it must not depend on how the
stream is cut into batches; bisecting a poisoned batch must commit exactly the rest.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

import asyncpg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.erasure.erase import erase_seqs, subject_seqs
from agentledger.projection import subject
from agentledger.projection.poison import POISON_ERRORS, bisect
from agentledger.projection.rebuild import ForgetMarks
from agentledger.runtime.state import settings_env
from agentledger.services.context_builder.docs_projection import DocumentStore
from agentledger.services.context_builder.docs_replay import rebuild_documents, verify_documents
from agentledger.services.memory_policy.replay import rebuild_memory, verify_memory
from agentledger.stores.ledger import ledger_subject
from ckpt_support import Stack, running
from projection_support import EmbeddingGate, table_rows
from test_memory_service import proposal

MEMORY_TABLES = ("memory_watermark", "memory_groups", "memory_records", "memory_history", "memory_held")
DOCUMENT_TABLES = ("document_watermark", "documents", "document_versions", "document_chunks")
# A read that waits this long is blocked, not slow (they take milliseconds).
READ_WAIT_S = 2.0


@pytest.fixture
async def memory(settings: Settings) -> AsyncIterator[Stack]:
    """Writer, projector and memory-policy, with records of two tenants."""
    async with running(settings, checkpointer=False, memory=True) as stack:
        await stack.c.memory_propose("acme", [
            proposal("a1", "builds are cached", key="build cache"),
            proposal("a2", "db host is db-1", key="db host"),
            proposal("a3", "call me on +44 20 7946 0958", level="user", scope_id="u1", key="phone")])
        await stack.c.memory_propose("globex", [proposal("g1", "globex ships on Fridays", key="ship day")])
        yield stack


@pytest.fixture
async def documents(settings: Settings) -> AsyncIterator[Stack]:
    """Writer, projector and context-builder, with documents of two tenants."""
    async with running(settings, checkpointer=False, context=True) as stack:
        c = stack.c
        await c.ingest_document("acme", "deploy.md", 1, "Deploys happen on Tuesdays after review.", source="d.md")
        await c.ingest_document("acme", "oncall.md", 1, "The on-call rota changes on Mondays.", source="o.md")
        await c.ingest_document("globex", "guide.md", 1, "Globex deploys on Fridays.", source="g.md")
        yield stack


async def oid_of(db: asyncpg.Pool, table: str) -> int:
    """The oid of the table a read of ``table`` finds (a read that a lock on it holds up waits)."""
    return int(await asyncio.wait_for(db.fetchval(f"SELECT tableoid::bigint FROM {table} LIMIT 1"), READ_WAIT_S))


async def read_throughout(rebuild: Coroutine[Any, Any, dict[str, int]], gate: EmbeddingGate,
                          read: Callable[[], Awaitable[None]]) -> dict[str, int]:
    """Run ``rebuild``; while it is held inside its fold, ``read`` must answer (three times, each
    within ``READ_WAIT_S``). What the rebuild returned."""
    task = asyncio.create_task(rebuild)
    try:
        await gate.held()
        for _ in range(3):
            await asyncio.wait_for(read(), READ_WAIT_S)
    finally:
        gate.open()
        counts = await task
    return counts


async def test_memory_reads_are_answered_from_the_old_tables_during_a_rebuild_then_from_the_new(
        settings: Settings, memory: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """Protects memory reads against a rebuild: while ``agentledger replay`` rebuilds the memory
    projection (held inside its fold), exact-key reads through the service and reads of the tables
    answer at once, from the live tables; after the switch they answer from the new tables, which
    hold the same rows, and verify finds them equal to the ledger."""
    db, c = memory.db, memory.c
    assert db is not None
    before = await table_rows(db, MEMORY_TABLES[1:])
    old = await oid_of(db, "memory_records")

    async def read() -> None:
        got = await c.memory_get("acme", "build cache", "project", "p1")
        assert [r.value for r in got.records] == ["builds are cached"]
        assert await oid_of(db, "memory_records") == old
        assert await table_rows(db, MEMORY_TABLES[1:]) == before

    counts = await read_throughout(rebuild_memory(settings), EmbeddingGate(monkeypatch), read)
    assert counts["tenants"] == 2 and counts["memory_records"] == len(before["memory_records"]), counts
    assert await oid_of(db, "memory_records") != old
    assert await table_rows(db, MEMORY_TABLES[1:]) == before
    got = await c.memory_get("acme", "build cache", "project", "p1")
    assert [r.value for r in got.records] == ["builds are cached"]
    # The live projection follows the switch and keeps folding.
    reply = await c.memory_propose("acme", [proposal("a4", "the linter is ruff", key="linter")])
    assert reply.decisions[0].action == "write"
    assert await verify_memory(settings) == []


async def test_document_searches_are_answered_from_the_old_tables_during_a_rebuild_then_from_the_new(
        settings: Settings, documents: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """Protects document search against a rebuild: while the document index is rebuilt (held inside
    its fold), searches answer at once from the live tables; after the switch from the new ones,
    with the same rows; verify finds them equal to the ledger."""
    db = documents.db
    assert db is not None
    store = DocumentStore()
    before = await table_rows(db, DOCUMENT_TABLES[1:])
    old = await oid_of(db, "document_chunks")

    async def read() -> None:
        hits = await store.search(db, "acme", "deploys tuesdays", None, 3)
        assert [h.doc_id for h in hits][:1] == ["deploy.md"]
        assert await oid_of(db, "document_chunks") == old

    counts = await read_throughout(rebuild_documents(settings), EmbeddingGate(monkeypatch), read)
    assert (counts["tenants"], counts["documents"], counts["document_chunks"]) == (2, 3, 3), counts
    assert await oid_of(db, "document_chunks") != old
    assert await table_rows(db, DOCUMENT_TABLES[1:]) == before
    assert [h.doc_id for h in await store.search(db, "acme", "deploys tuesdays", None, 3)][:1] == ["deploy.md"]
    later = await documents.c.ingest_document("globex", "later.md", 1, "The drawer holds the phone.", source="l.md")
    assert later.chunks == 1 and not later.duplicate
    assert await verify_documents(settings) == []


# A memory rebuild that hangs inside its fold (the embedder never answers), as a separate process.
_HANGING_REBUILD = """
import asyncio
from agentledger import config
from agentledger.services.memory_policy import fold
from agentledger.services.memory_policy.replay import rebuild_memory

async def hang(vectors, texts):
    print("folding", flush=True)
    await asyncio.Event().wait()

fold.Vectors.of = hang
asyncio.run(rebuild_memory(config.from_env()))
"""


@pytest.mark.timeout(180)
async def test_a_crashed_memory_rebuild_leaves_the_live_tables_serving(settings: Settings, memory: Stack) -> None:
    """Protects the live projection from a rebuild that dies: while a rebuild process hangs inside
    its fold, reads answer and the live projection keeps folding; after it is SIGKILLed the live
    tables are the ones they were (with the new record), and the next rebuild drops what the dead
    one left and switches in a projection equal to the ledger."""
    db, c = memory.db, memory.c
    assert db is not None
    old = await oid_of(db, "memory_records")
    records = await db.fetchval("SELECT count(*) FROM memory_records")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _HANGING_REBUILD, env={**os.environ, **settings_env(settings)},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        while (line := await asyncio.wait_for(proc.stdout.readline(), 60)) != b"folding\n":
            assert line, "the rebuild process ended before it folded anything"
        got = await asyncio.wait_for(c.memory_get("acme", "db host", "project", "p1"), READ_WAIT_S)
        assert [r.value for r in got.records] == ["db host is db-1"]
        reply = await asyncio.wait_for(c.memory_propose("acme", [proposal("a5", "tests use pytest", key="tests")]),
                                       10)
        assert reply.decisions[0].action == "write"
    finally:
        if proc.returncode is None:
            os.kill(proc.pid, signal.SIGKILL)
        await proc.wait()
    assert await oid_of(db, "memory_records") == old
    assert await db.fetchval("SELECT count(*) FROM memory_records") == records + 1
    counts = await rebuild_memory(settings)
    assert counts["memory_records"] == records + 1
    assert await db.fetchval("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'replay_%'") == 0
    assert await verify_memory(settings) == []


async def _forget_acme_documents(stack: Stack, request_id: str) -> None:
    """What a forget request of tenant ``acme`` does to the document index before its step is
    done: the ledger step erases the tenant's ``_documents`` messages, the documents step is
    planned, then deletes the tenant's rows holding the watermark lock."""
    settings, db = stack.settings, stack.db
    assert db is not None
    js = stack.c.nc.jetstream()
    subject_name = ledger_subject(settings.prefix, "acme", ev.DOCUMENTS_TASK)
    await erase_seqs(js, settings.stream, await subject_seqs(js, settings.stream, subject_name))
    await db.execute("INSERT INTO forget_steps(tenant, request_id, index_name, planned, plan, updated_at)"
                     " VALUES ('acme', $1, 'documents', true, '{}', now())", request_id)
    async with db.acquire() as conn, conn.transaction():
        await DocumentStore().lock_watermark(conn)
        for table in DOCUMENT_TABLES[1:]:
            await conn.execute(f"DELETE FROM {table} WHERE tenant = 'acme'")


async def test_a_forget_request_that_overtakes_a_rebuild_is_not_undone(
        settings: Settings, documents: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """Protects forgetting from a rebuild: a tenant's documents forgotten while the rebuild that had
    already read them is folding (their messages erased, their rows deleted) are not brought back by
    the switch. While the forget step is being applied the switch waits; once it is applied the
    rebuild starts again from what the ledger still holds."""
    db = documents.db
    assert db is not None
    gate = EmbeddingGate(monkeypatch)
    with capture_logs() as logs:
        rebuild = asyncio.create_task(rebuild_documents(settings))
        try:
            await gate.held()  # the build read every message and is folding them
            await _forget_acme_documents(documents, "f-acme")
        finally:
            gate.open()

        async def waiting() -> bool:
            return any(e["event"] == "replay.switch_waiting" and e.get("forgets") == 1 for e in logs)

        while not await waiting():
            assert not rebuild.done(), rebuild.result()
            await asyncio.sleep(0.02)
        await db.execute("UPDATE forget_steps SET result = '{}', updated_at = now() WHERE request_id = 'f-acme'")
        counts = await rebuild
    events = [e["event"] for e in logs]
    assert "replay.forgotten_meanwhile" in events and "replay.switched" in events, events
    assert (counts["tenants"], counts["documents"]) == (1, 1), counts
    assert await db.fetchval("SELECT count(*) FROM document_chunks WHERE tenant = 'acme'") == 0
    assert await db.fetchval("SELECT count(*) FROM document_chunks WHERE tenant = 'globex'") == 1
    assert await verify_documents(settings) == []


async def test_the_fold_does_not_depend_on_how_the_stream_is_cut(
        settings: Settings, memory: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """Protects the one-fold rule: the live projection folded the memory subjects in its batches; a
    verify that folds them one message per batch finds the same rows."""
    await memory.c.memory_feedback("acme", (await memory.c.memory_get("acme", "db host", "project", "p1"))
                                   .records[0].record_id, "confirm", "fb1")
    monkeypatch.setattr(subject, "REBUILD_BATCH_EVENTS", 1)
    assert await verify_memory(settings) == []
    assert await verify_memory(settings, wait_s=5.0) == []


# ---- pure parts --------------------------------------------------------------------------------------

@given(st.lists(st.booleans(), max_size=40))
def test_bisect_commits_everything_but_the_poison_in_order(poison: list[bool]) -> None:
    """Protects the poison rule every projection shares: whatever messages of a batch fail their
    transaction, bisecting commits every other message exactly once, in order, and hands each
    failing one to ``poisoned`` exactly once; an attempt holding one is never committed."""
    items = list(range(len(poison)))
    committed: list[int] = []
    poisoned: list[int] = []

    async def commit(part: list[int]) -> list[int]:
        if any(poison[i] for i in part):
            raise asyncpg.DataError("invalid input")
        committed.extend(part)
        return part

    async def hand(item: int, exc: BaseException) -> None:
        assert isinstance(exc, POISON_ERRORS)
        poisoned.append(item)

    returned = asyncio.run(bisect(items, commit, hand))
    assert committed == returned == [i for i in items if not poison[i]]
    assert poisoned == [i for i in items if poison[i]]


_steps = st.frozensets(st.tuples(st.sampled_from(["acme", "globex"]), st.sampled_from(["r1", "r2", "r3", "r4"])))


@given(_steps, _steps, _steps, _steps)
def test_forget_steps_known_when_a_build_began_never_hold_up_its_switch(
        in_flight: Any, applied: Any, later_in_flight: Any, later_applied: Any) -> None:
    """Protects rebuilds from waiting on forget steps that cannot affect them: a step planned before
    the build began erased its messages before the build read anything, so only steps new since
    then count, as applied (start again) or in flight (wait)."""
    start = ForgetMarks(in_flight, applied)
    now = ForgetMarks(in_flight | later_in_flight, applied | later_applied | in_flight)
    new_applied, new_in_flight = now.unsafe_since(start)
    known = in_flight | applied
    assert new_applied == set(later_applied | in_flight) - known
    assert new_in_flight == set(in_flight | later_in_flight) - known
