"""An upgrade that changes how a memory record's index text is derived (``fold.INDEX_TEXT_VERSION``).

Rows written the old way (the key's words before the value's text, also for a key derived from
those very words), marked as made by that older derivation (``index_version`` 1, as migration 14
marked every row it found), are derived again when the memory-policy service starts:
``replay --verify`` is clean afterwards, and an index column edited by hand is still reported,
before and after another start. (An upgrade from a schema before 15 refolds the whole memory
projection from the ledger instead, so these rows are what a later change of the derivation
meets.) Real NATS and PostgreSQL, the service in process.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agentledger.config import Settings
from agentledger.core.memory.keys import text_of
from agentledger.models.embedding import load_embedder
from agentledger.services.memory_policy.fold import INDEX_TEXT_VERSION, Vectors
from agentledger.services.memory_policy.reindex import reindex_old_rows
from agentledger.services.memory_policy.replay import verify_memory
from agentledger.services.memory_policy.service import MemoryPolicy
from agentledger.services.memory_policy.store import MemoryStore, decode_row, vector_text
from agentledger.stores.db import MEMORY_DOC_LEN
from ckpt_support import running
from test_memory_service import TENANT, Mem, proposal, stored_evidence


@pytest.fixture
async def mem(settings: Settings) -> AsyncIterator[Mem]:
    async with running(settings, checkpointer=False, memory=True) as stack:
        assert stack.memory is not None
        yield Mem(stack, stack.memory, await stored_evidence(stack.c, TENANT))


def first_derivation(key: str, value: object) -> str:
    """What the index held before version 2: the key's words, then the value's text."""
    return f"{key.replace('_', ' ')}\n{text_of(value)}"


async def write_the_old_way(mem: Mem) -> list[str]:
    """Every record's index as the first derivation made it, marked as made by it
    (``index_version`` 1); the ids of the records whose index text that changes."""
    db = mem.stack.db
    assert db is not None
    embedder = load_embedder(mem.stack.settings)
    changed = []
    for record_id, data in await db.fetch("SELECT record_id, row FROM memory_records WHERE tsv IS NOT NULL"):
        row = decode_row(bytes(data))
        old = first_derivation(row.key, row.body.value)
        [vector] = await embedder.embed([old])
        tsv = "to_tsvector('simple', $2::text)"
        await db.execute(f"UPDATE memory_records SET tsv = {tsv}, doc_len = {MEMORY_DOC_LEN.format(tsv=tsv)},"
                         " embedding = $3::vector WHERE record_id = $1", record_id, old, vector_text(vector))
        if old != text_of(row.body.value) and row.key.replace("_", " ") in old.split("\n")[0]:
            changed.append(record_id)
    await db.execute("UPDATE memory_records SET index_version = 1")
    return changed


async def restart(mem: Mem) -> MemoryPolicy:
    """The memory-policy service stopped and a new one (the upgraded version) started."""
    await mem.service.stop()
    service = MemoryPolicy(mem.stack.settings)
    await service.start()
    return service


async def test_rows_indexed_by_an_older_version_are_derived_again_at_start(mem: Mem) -> None:
    c = mem.c
    reply = await c.memory_propose(TENANT, [
        proposal("derived", "The build uses Python and uv"),  # its key is derived from these words
        proposal("explicit", "deploys go through the merge queue", key="deploy process"),
        proposal("pii", "call me on +44 20 7946 0958", level="user", scope_id="u1", key="phone"),
    ])
    assert [d.action for d in reply.decisions] == ["write", "write", "write"], reply.decisions
    derived_id = reply.decisions[0].record_id
    assert await verify_memory(mem.stack.settings) == []
    changed = await write_the_old_way(mem)
    assert derived_id in changed
    # Before the upgraded service starts, verify sees the old rows.
    stale = await verify_memory(mem.stack.settings)
    assert any(derived_id in p and "full-text vector different" in p for p in stale), stale

    service = await restart(mem)
    try:
        db = mem.stack.db
        assert db is not None
        versions = {r[0] for r in await db.fetch("SELECT DISTINCT index_version FROM memory_records")}
        assert versions == {INDEX_TEXT_VERSION}
        assert await verify_memory(mem.stack.settings) == []
        # The derived key's words are not indexed twice any more; a read still finds the record.
        read = await c.memory_read(TENANT, "which python does the build use", project_id="p1")
        assert derived_id in [i.record_id for i in read.items]

        # An honest audit: an index edited by hand keeps the current version, so it is not
        # derived again and verify reports it, also after the service starts once more.
        await db.execute("UPDATE memory_records SET tsv = to_tsvector('simple', 'nothing to see')"
                         " WHERE record_id = $1", derived_id)
        edited = await verify_memory(mem.stack.settings)
        assert any(derived_id in p and "full-text vector different" in p for p in edited), edited
        await service.stop()
        service = MemoryPolicy(mem.stack.settings)
        await service.start()
        again = await verify_memory(mem.stack.settings)
        assert any(derived_id in p and "full-text vector different" in p for p in again), again
        # The version marker is compared too: a row put back to "old" by hand is reported.
        await db.execute("UPDATE memory_records SET index_version = 1 WHERE record_id <> $1", derived_id)
        marked = await verify_memory(mem.stack.settings)
        assert any("full-text vector different" in p and derived_id not in p for p in marked), marked
    finally:
        await service.stop()


async def test_the_rederivation_goes_in_batches_and_does_nothing_twice(mem: Mem) -> None:
    """Batches of one row each reach every old row once (the key order carries on from the last
    row of the batch before); a second pass finds nothing left to derive."""
    reply = await mem.c.memory_propose(TENANT, [proposal(f"b{i}", f"the runner pool {i} uses arm hosts")
                                                for i in range(4)])
    assert all(d.action == "write" for d in reply.decisions), reply.decisions
    await write_the_old_way(mem)
    assert mem.stack.db is not None
    vectors = Vectors(load_embedder(mem.stack.settings))
    async with mem.stack.db.acquire() as conn:
        assert await reindex_old_rows(conn, MemoryStore(), vectors, batch=1) == 4
        assert await reindex_old_rows(conn, MemoryStore(), vectors, batch=1) == 0
    assert await verify_memory(mem.stack.settings) == []
