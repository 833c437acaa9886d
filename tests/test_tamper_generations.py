"""Generation rows edited outside the services: ``context.get`` refuses them.

A generation row names the frozen input and the answer's artifacts by uri and digest; a
reader fetches them by what the row says. Before its tags, a row pointed at another
generation's artifacts (same tenant), re-filed under another task, or given a digest of the
attacker's choosing was served as this generation. Each edit below is plain SQL.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agentledger.config import Settings
from agentledger.core.context import frozen_form
from agentledger.errors import IntegrityViolationError, NotFoundError
from ckpt_support import Stack, created, running
from helpers import assert_eventually
from test_context_service import TASK, TENANT, build, some_turns


@pytest.fixture
async def stack(settings: Settings) -> AsyncIterator[Stack]:
    async with running(settings, checkpointer=False, memory=True, context=True) as s:
        yield s


EDITS = {
    "content": "UPDATE context_generations SET digest = b.digest, artifact_uri = b.artifact_uri,"
               " frozen_digest = b.frozen_digest, frozen_uri = b.frozen_uri FROM context_generations b"
               " WHERE context_generations.generation_id = $1 AND b.generation_id = $2",
    "moved": "UPDATE context_generations SET task_id = 'other' WHERE generation_id = $1 AND $2 <> ''",
    "metadata": "UPDATE context_generations SET input_ordinal = input_ordinal - 1, epoch = epoch + 1"
                " WHERE generation_id = $1 AND $2 <> ''",
    "forged": "UPDATE context_generations SET mac = b.mac, finish_mac = b.finish_mac FROM context_generations b"
              " WHERE context_generations.generation_id = $1 AND b.generation_id = $2",
}


@pytest.mark.parametrize("edit", sorted(EDITS))
async def test_an_edited_generation_is_refused(stack: Stack, edit: str) -> None:
    """Content (another generation's artifacts), moved to another task, metadata changed, or
    given another row's tags: ``context.get`` answers ``integrity_violation`` instead of a
    generation. (Put back to its unfinished version: the test after this one.)"""
    await stack.append([created(TASK), *some_turns(1, 5)])
    first, _ = await build(stack.c, input_ordinal=3, window_tokens=4096)
    second, _ = await build(stack.c, input_ordinal=5, window_tokens=4096)
    assert await stack.c.get_generation(TENANT, first.generation_id) == first
    assert stack.db is not None
    await stack.db.execute(EDITS[edit], first.generation_id, second.generation_id)
    with pytest.raises(IntegrityViolationError):
        await stack.c.get_generation(TENANT, first.generation_id)
    assert await stack.c.get_generation(TENANT, second.generation_id) == second


async def test_a_generation_put_back_to_its_unfinished_row_is_refused(stack: Stack) -> None:
    """Old version: a finished generation's row put back to what it was when frozen (its frozen
    tag valid, no answer columns). A reader would serve the frozen input as the final answer
    (for a compacted build: the fallback instead of the answer given); the service that
    finished it refuses the row instead."""
    await stack.append([created(TASK), *some_turns(1, 5)])
    first, _ = await build(stack.c, input_ordinal=3, window_tokens=4096)
    second, _ = await build(stack.c, input_ordinal=5, window_tokens=4096)
    assert stack.db is not None
    await stack.db.execute("UPDATE context_generations SET digest = frozen_digest, artifact_uri = NULL,"
                           " staged_checkpoint_id = NULL, finish_mac = NULL WHERE generation_id = $1",
                           first.generation_id)
    with pytest.raises(IntegrityViolationError):
        await stack.c.get_generation(TENANT, first.generation_id)
    assert await stack.c.get_generation(TENANT, second.generation_id) == second


async def test_every_instance_refuses_a_generation_another_one_finished_put_back(stack: Stack) -> None:
    """Two context-builder instances: whichever finished a build tells the other
    (``finished_notes``), so each refuses the row put back to its frozen version, not only the
    one that finished it. Before, the other instance served the frozen input as the answer."""
    from agentledger.services.context_builder.service import ContextBuilder  # noqa: PLC0415

    other = ContextBuilder(stack.settings)
    await other.start()
    try:
        await stack.append([created(TASK), *some_turns(1, 5)])
        builds = [(await build(stack.c, input_ordinal=n, window_tokens=4096))[0] for n in (3, 4, 5)]
        assert stack.context is not None and stack.context.store is not None and other.store is not None
        stores = (stack.context.store, other.store)

        async def known_everywhere() -> bool:
            return all(s.is_finished(TENANT, g.generation_id) for s in stores for g in builds)

        await assert_eventually(known_everywhere, timeout=30, message="an instance never learnt a finished build")
        assert stack.db is not None
        for gen in builds:
            await stack.db.execute("UPDATE context_generations SET digest = frozen_digest, artifact_uri = NULL,"
                                   " staged_checkpoint_id = NULL, finish_mac = NULL WHERE generation_id = $1",
                                   gen.generation_id)
            for store in stores:
                with pytest.raises(IntegrityViolationError):
                    await store.generation(TENANT, gen.generation_id)
    finally:
        await other.stop()


PUT_BACK = ("UPDATE context_generations SET digest = frozen_digest, artifact_uri = NULL,"
            " staged_checkpoint_id = NULL, finish_mac = NULL WHERE generation_id = $1")


async def test_a_compacted_generation_put_back_is_refused_by_an_instance_started_after_it_finished(
        stack: Stack) -> None:
    """A compacted build's row put back to its frozen version would serve the fallback instead
    of the answer given, its staged checkpoint gone. An instance started after the finish never
    heard of it (no note, nothing in memory), and refuses the row all the same: a compacted
    build erases its frozen input once finished. Before, it served the frozen fallback as final.
    A row whose frozen input is there (a direct build: frozen and final are one) is served."""
    from agentledger.services.context_builder.service import ContextBuilder  # noqa: PLC0415
    from test_context_compaction import staged  # noqa: PLC0415

    gen = await staged(stack, "compacted")
    assert stack.db is not None
    frozen_digest = await stack.db.fetchval("SELECT frozen_digest FROM context_generations WHERE generation_id = $1",
                                            gen.generation_id)
    assert frozen_form(gen).digest == frozen_digest  # what was frozen, re-derived from the answer
    await stack.append([created(TASK), *some_turns(1, 3)])
    direct, _ = await build(stack.c, input_ordinal=3, window_tokens=4096)
    later = ContextBuilder(stack.settings)
    await later.start()
    try:
        assert later.store is not None and later.builder is not None
        assert not later.store.is_finished(TENANT, gen.generation_id)
        for put_back in (gen, direct):
            await stack.db.execute(PUT_BACK, put_back.generation_id)
        with pytest.raises(IntegrityViolationError):
            await later.builder.stored(TENANT, gen.generation_id)
        row, _ = await later.builder.stored(TENANT, direct.generation_id)
        assert row.digest == direct.digest
    finally:
        await later.stop()


async def test_a_frozen_input_left_by_a_build_that_died_is_erased_at_the_next_start(
        stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """A compacted build finishes its row, then erases its frozen input. Its process killed (or
    its erase failing) between the two used to leave the frozen input for good: a row put back
    to frozen was then served, as the fallback, by every instance that had not heard the finish.
    The row now carries the erase as still due (``frozen_kept``, set in the finish's
    transaction), and the next instance to start erases what was left: a row put back then is
    refused by it, as if the build had completed."""
    from agentledger.services.context_builder.service import ContextBuilder  # noqa: PLC0415
    from test_context_compaction import staged  # noqa: PLC0415

    assert stack.context is not None and stack.context.builder is not None

    async def dies(uri: str) -> bool:
        raise ConnectionResetError("the process died here")

    monkeypatch.setattr(stack.context.builder.artifacts, "erase", dies)
    gen = await staged(stack, "compacted")
    monkeypatch.undo()
    assert stack.db is not None
    row = await stack.db.fetchrow("SELECT frozen_uri, frozen_kept FROM context_generations WHERE generation_id = $1",
                                  gen.generation_id)
    assert row["frozen_kept"]
    frozen = row["frozen_uri"]
    assert await stack.context.builder.artifacts.get(frozen, tenant=TENANT)  # left behind
    later = ContextBuilder(stack.settings)
    await later.start()
    try:
        assert later.store is not None and later.builder is not None

        async def erased() -> bool:
            return not await stack.db.fetchval(  # type: ignore[union-attr]
                "SELECT frozen_kept FROM context_generations WHERE generation_id = $1", gen.generation_id)

        await assert_eventually(erased, timeout=30, message="the next start never erased the frozen input left")
        with pytest.raises(NotFoundError):
            await later.builder.artifacts.get(frozen, tenant=TENANT)
        await stack.db.execute(PUT_BACK, gen.generation_id)
        with pytest.raises(IntegrityViolationError):
            await later.builder.stored(TENANT, gen.generation_id)
    finally:
        await later.stop()
