"""Replay of the memory projection: drop it, rebuild it from the ledger, verify it equal.

Runs the writer, the Working Memory projector and the memory-policy service in
process; the rebuild and the verification read the real stream.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agentledger.config import Settings
from agentledger.services.memory_policy.replay import rebuild_memory, verify_memory
from agentledger.services.memory_policy.service import MemoryPolicy
from ckpt_support import created, running
from helpers import assert_eventually
from projection_support import table_rows
from test_memory_service import TENANT, Mem, proposal, stored_evidence

TABLES = ("memory_records", "memory_groups", "memory_history", "memory_held")


@pytest.fixture
async def mem(settings: Settings) -> AsyncIterator[Mem]:
    async with running(settings, checkpointer=False, memory=True) as stack:
        assert stack.memory is not None
        yield Mem(stack, stack.memory, await stored_evidence(stack.c, TENANT))


async def _snapshot(mem: Mem) -> dict[str, list[tuple[str, ...]]]:
    assert mem.stack.db is not None
    return await table_rows(mem.stack.db, TABLES)


async def _history(mem: Mem) -> None:
    """Two tenants: writes, a supersession, a tie and its confirmation, a revoke, promoted episodes,
    feedback held for a record that does not exist yet, a personal value."""
    c = mem.c
    await c.memory_propose(TENANT, [
        proposal("a1", "deploys go through the release train", key="deploy process", source="model_inference"),
        proposal("a2", "deploys go through the merge queue", key="deploy process"),
        proposal("t1", "db host is db-1", key="db host"), proposal("t2", "db host is db-2", key="db host"),
        proposal("pii", "call me on +44 20 7946 0958", level="user", scope_id="u1", key="phone"),
        *[proposal(f"ep{i}", "test:no19 passed", kind="task_result", key="test:no19", origin_task=f"task{i}",
                   evidence=[mem.evidence]) for i in range(4)],
    ])
    got = await c.memory_get(TENANT, "db host", "project", "p1")
    await c.memory_feedback(TENANT, got.records[0].record_id, "confirm", "fb1")
    deploy = await c.memory_get(TENANT, "deploy process", "project", "p1")
    await c.memory_feedback(TENANT, deploy.records[0].record_id, "revoke", "fb2")
    await c.memory_propose("acme-corp", [proposal("b1", "the cluster is in eu-west-1", key="cluster region")])


async def test_rebuild_reproduces_the_projection_and_verify_finds_it_equal(mem: Mem) -> None:
    """Dropping every memory row and rebuilding from the ledger gives the same rows, embeddings
    included; verify agrees, and finds a row that was tampered with."""
    await _history(mem)
    assert await verify_memory(mem.stack.settings) == []
    before = await _snapshot(mem)
    assert before["memory_records"]
    assert mem.stack.db is not None
    await mem.stack.db.execute("TRUNCATE " + ", ".join(TABLES))
    counts = await rebuild_memory(mem.stack.settings)
    assert counts["tenants"] == 2
    assert await _snapshot(mem) == before
    assert await verify_memory(mem.stack.settings) == []
    # The live service carries on from the rebuilt watermark.
    reply = await mem.c.memory_propose(TENANT, [proposal("after", "the linter is ruff", key="linter")])
    assert reply.decisions[0].action == "write"
    assert await verify_memory(mem.stack.settings) == []
    await mem.stack.db.execute("UPDATE memory_records SET status = 'active', embedding = NULL"
                               " WHERE record_id = $1", reply.decisions[0].record_id)
    problems = await verify_memory(mem.stack.settings)
    assert any(reply.decisions[0].record_id in p and "embedding" in p for p in problems), problems


async def test_the_live_projection_follows_a_rebuild(mem: Mem) -> None:
    """A rebuild while the service runs: the service notices the new watermark and keeps deciding."""
    await mem.c.memory_propose(TENANT, [proposal("r1", "builds are cached", key="build cache")])
    await rebuild_memory(mem.stack.settings)
    reply = await mem.c.memory_propose(TENANT, [proposal("r2", "builds are not cached", key="build cache",
                                                         subject_version=2)])
    assert reply.decisions[0].action == "supersede", reply.decisions[0]

    async def applied() -> bool:
        return await verify_memory(mem.stack.settings) == []
    await assert_eventually(applied, timeout=20)


async def test_verify_does_not_wait_for_task_events_after_the_last_memory_event(mem: Mem) -> None:
    """The memory projection only sees memory subjects: verify waits for the last memory message,
    not the stream's last message (a task event appended after it), and finds the rows equal."""
    await _history(mem)
    await mem.stack.append([created("after-memory")])
    assert await verify_memory(mem.stack.settings, wait_s=5.0) == []


async def test_a_second_instance_waits_as_a_standby_and_takes_over(mem: Mem) -> None:
    """Protects several memory-policy instances: one folds the memory projection, the other is a
    standby (proposals reach either, and every one is decided and projected once); when the
    folding one stops, the standby takes its lock over and carries on from the watermark."""
    second = MemoryPolicy(mem.stack.settings)
    await second.start()
    try:
        assert mem.service.projection is not None and second.projection is not None
        assert mem.service.projection.leader and not second.projection.leader
        for i in range(8):
            reply = await mem.c.memory_propose(TENANT, [proposal(f"s{i}", f"fact number {i}", key=f"k{i}")])
            assert reply.decisions[0].action == "write"
        await mem.service.stop()
        await assert_eventually(lambda: second.projection is not None and second.projection.leader,
                                timeout=15, message="the standby never took the projection over")
        reply = await mem.c.memory_propose(TENANT, [proposal("after", "the linter is ruff", key="linter")])
        assert reply.decisions[0].action == "write"
        assert await verify_memory(mem.stack.settings) == []
        assert mem.stack.db is not None
        assert await mem.stack.db.fetchval("SELECT count(*) FROM memory_records") == 9
    finally:
        await second.stop()
