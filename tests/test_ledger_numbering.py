"""A ledger stream deleted as an operator would, on real NATS and PostgreSQL: numbering goes on
after the high-water mark, Working Memory names the gap, and ``replay`` refuses to shrink.

The stream is deleted between restarts of the writer and the projector (the case the
running writer's own recreation could not cover: a new writer process does not know
where numbering stood), under a running stack, recreated from 1 behind the mark's back,
and purged.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentledger.cli import main as cli
from agentledger.config import Settings
from agentledger.errors import AgentLedgerError, LedgerGapError, NotFoundError, ReplayWouldShrinkError
from agentledger.security import auth
from agentledger.services.projector import rebuild
from agentledger.stores import numbering
from agentledger.stores.ledger import ensure_stream, stream_config
from ckpt_support import TENANT, Stack, created, event
from helpers import assert_eventually

WAIT_S = 60
# The longest a read may wait for its own write (the contract's limit).
WAIT_MS = 30_000


async def delete_ledger(settings: Settings) -> None:
    """As an operator would: the stream, not the mark kept beside it."""
    op = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        await op.jetstream().delete_stream(settings.stream)
    finally:
        await op.close()


async def gap_of(stack: Stack, task: str) -> LedgerGapError:
    """The ``ledger_gap`` a read of ``task`` answers (AssertionError while it answers anything else)."""
    try:
        await stack.c.working_memory(TENANT, task)
    except LedgerGapError as exc:
        return exc
    except AgentLedgerError as exc:
        raise AssertionError(f"{exc.code}: {exc.message}") from exc
    raise AssertionError(f"{task} was answered with a view")


async def old_then_deleted(settings: Settings) -> tuple[int, int]:
    """Task ``old`` appended and projected by one stack, which stops; then the stream is
    deleted. The last seq acked and the high-water mark then."""
    stack = await Stack(settings).start(checkpointer=False)
    try:
        seq = await stack.append([created("old"), event("variable_set", {"name": "a", "value": 1}, "old")])
        assert (await stack.c.working_memory(TENANT, "old", min_seq=seq, wait_ms=WAIT_MS)).ok
    finally:
        await stack.stop()
    op = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        mark = await numbering.read_mark(op, settings)
        await op.jetstream().delete_stream(settings.stream)
    finally:
        await op.close()
    return seq, mark


async def test_a_ledger_deleted_between_restarts_numbers_on_and_names_the_gap(settings: Settings) -> None:
    """Protects numbering and typed errors: a writer restarted after the stream was deleted used
    to number from 1 again (the old acks' sequences handed out a second time) and Working Memory
    answered a retryable `unavailable` that never cleared. Now the new ack comes after the
    high-water mark kept outside the stream, a new task is projected, and the old task answers
    `ledger_gap` (not retryable, naming the missing range)."""
    before, mark = await old_then_deleted(settings)
    assert mark > before
    stack = await Stack(settings).start(checkpointer=False)
    try:
        seq = await stack.append([created("new"), event("variable_set", {"name": "b", "value": 2}, "new")])
        assert seq > mark
        view = await stack.c.working_memory(TENANT, "new", min_seq=seq, wait_ms=WAIT_MS)
        assert view.state is not None and view.state["variables"]["b"]["value"] == 2
        gap = await assert_eventually(lambda: gap_of(stack, "old"), timeout=WAIT_S)
        assert (gap.code, gap.retryable, gap.path) == ("ledger_gap", False, "$.task_id")
        # The recreated stream starts right after the mark: everything up to it is missing.
        assert f"seq 1 to {mark}" in gap.message and f"last folded at seq {before}" in gap.message
    finally:
        await stack.stop()


async def test_a_ledger_deleted_under_a_running_projector_names_the_gap(settings: Settings) -> None:
    """Protects typed errors while everything keeps running: the stream deleted under a running
    writer and projector is recreated after the mark by the writer's next append; the new event is
    projected and the task folded only from the deleted stream answers `ledger_gap`."""
    stack = await Stack(settings).start(checkpointer=False)
    try:
        before = await stack.append([created("old")])
        assert (await stack.c.working_memory(TENANT, "old", min_seq=before, wait_ms=WAIT_MS)).ok
        await delete_ledger(settings)

        async def appended() -> int:
            try:
                return (await stack.c.append(created("new"))).seq
            except AgentLedgerError as exc:
                assert exc.code == "unavailable" and exc.retryable
                raise AssertionError(exc.message) from exc

        seq = await assert_eventually(appended, timeout=WAIT_S)
        assert seq > before + 1  # after the mark, not merely after the last ack
        assert (await stack.c.working_memory(TENANT, "new", min_seq=seq, wait_ms=WAIT_MS)).ok
        gap = await assert_eventually(lambda: gap_of(stack, "old"), timeout=WAIT_S)
        assert not gap.retryable and f"seq 1 to {seq - 1}" in gap.message
    finally:
        await stack.stop()


async def test_a_stream_recreated_from_1_behind_the_marks_back_is_a_gap_for_every_read(
        settings: Settings) -> None:
    """Protects typed errors when the ledger was recreated bypassing the mark (numbering from 1,
    below the projection's watermark): nothing can be folded from it, and every read, of an old
    task or of one appended since, answers `ledger_gap` instead of a retryable `unavailable`."""
    stack = await Stack(settings).start(checkpointer=False, projector=False)
    try:
        await stack.append([created("old"), *(event("variable_set", {"name": f"v{i}", "value": i}, "old")
                                              for i in range(5))])
        await stack.projector.start()
        await stack.c.working_memory(TENANT, "old", min_seq=await stack.last_seq(), wait_ms=WAIT_MS)
        op = await auth.connect(settings, auth.OPERATOR_ROLE)
        try:
            await op.jetstream().delete_stream(settings.stream)
            await op.jetstream().add_stream(stream_config(settings))
        finally:
            await op.close()
        for task in ("old", "fresh"):
            gap = await assert_eventually(lambda t=task: gap_of(stack, t), timeout=WAIT_S)  # type: ignore[misc]
            assert not gap.retryable and "numbering from 1" in gap.message
    finally:
        await stack.stop()


async def test_a_purged_ledger_names_the_gap_and_numbers_on(settings: Settings) -> None:
    """Protects typed errors after a purge (which keeps the stream's numbering): a task whose
    events the purge took answers `ledger_gap` naming the purged range, while appends go on
    numbering after them and are projected."""
    stack = await Stack(settings).start(checkpointer=False)
    try:
        before = await stack.append([created("old")])
        assert (await stack.c.working_memory(TENANT, "old", min_seq=before, wait_ms=WAIT_MS)).ok
        op = await auth.connect(settings, auth.OPERATOR_ROLE)
        try:
            await op.jetstream().purge_stream(settings.stream)
        finally:
            await op.close()
        gap = await assert_eventually(lambda: gap_of(stack, "old"), timeout=WAIT_S)
        assert not gap.retryable and f"seq 1 to {before}" in gap.message
        seq = (await stack.c.append(created("new"))).seq
        assert seq == before + 1
        assert (await stack.c.working_memory(TENANT, "new", min_seq=seq, wait_ms=WAIT_MS)).ok
    finally:
        await stack.stop()


def replay(*argv: str) -> int:
    """``agentledger replay`` itself (without main()'s log setup)."""
    args = cli.build_parser().parse_args(["replay", *argv])
    return int(args.fn(args))


async def test_replay_refuses_to_drop_what_the_ledger_lost_without_allow_shrink(
        settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Protects the projection from its own remedy: `agentledger replay` after the stream was
    deleted used to switch to a rebuild of the new ledger alone, silently dropping every earlier
    task. Now it refuses, naming what would be dropped, and changes nothing; with
    `--allow-shrink` it rebuilds (the old task is gone, the new one served)."""
    for name, value in {"NATS_URL": settings.nats_url, "DATABASE_URL": settings.database_url,
                        "PREFIX": settings.prefix, "DATA_DIR": str(tmp_path),
                        "AUTH_DIR": str(settings.auth_root)}.items():
        monkeypatch.setenv(f"AGENTLEDGER_{name}", value)
    before, mark = await old_then_deleted(settings)
    stack = await Stack(settings).start(checkpointer=False)
    try:
        # The ledger starts after the live watermark (nothing new folded yet) ...
        with pytest.raises(ReplayWouldShrinkError) as refused:
            await asyncio.to_thread(replay)
        message = refused.value.message
        assert f"starts at seq {mark + 1}, after the live watermark {before}" in message
        assert f"drop 1 task(s), e.g. {TENANT}/old (last folded at seq {before})" in message
        assert "--allow-shrink" in message
        # ... and once the projection folded past that: the task the ledger lost.
        seq = await stack.append([created("new")])
        assert (await stack.c.working_memory(TENANT, "new", min_seq=seq, wait_ms=WAIT_MS)).ok
        with pytest.raises(ReplayWouldShrinkError) as refused:
            await asyncio.to_thread(replay)
        assert f"drop 1 task(s), e.g. {TENANT}/old" in refused.value.message
        # Nothing was dropped: the old task still answers from its rows (its gap, not not_found).
        await assert_eventually(lambda: gap_of(stack, "old"), timeout=WAIT_S)

        assert await asyncio.to_thread(replay, "--allow-shrink") == 0

        async def dropped() -> bool:
            try:
                await stack.c.working_memory(TENANT, "old")
            except NotFoundError:
                return True
            return False

        await assert_eventually(dropped, timeout=WAIT_S)
        assert (await stack.c.working_memory(TENANT, "new")).ok
        # The rebuilt projection is the ledger's: replay now has nothing to refuse.
        report = await rebuild.replace_live(settings)
        assert report.tasks == 1
    finally:
        await stack.stop()


async def test_whoever_creates_the_stream_starts_after_the_mark(settings: Settings) -> None:
    """Protects numbering for every creator (`up`, the projector, the writer): ``ensure_stream``
    starts a new stream after the high-water mark, and after a caller's own ``first_seq``."""
    op = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        assert await numbering.raise_mark(op, settings, 5000) == 5000
        assert await numbering.raise_mark(op, settings, 10) == 5000  # the mark never goes down
        await ensure_stream(settings, op)
        assert await numbering.ledger_last_seq(op, settings) == 5000
        await op.jetstream().delete_stream(settings.stream)
        await ensure_stream(settings, op, first_seq=9001)
        assert await numbering.ledger_last_seq(op, settings) == 9000
    finally:
        await op.close()


async def test_the_writer_keeps_the_mark_ahead_of_the_ledger(settings: Settings,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Protects the mark's promise (at or above every sequence the ledger assigned) without an
    append waiting for it: with a chunk of 8, the writer reserves 8 past the last sequence at
    start-up, before it answers, and reserves again as the ledger uses the chunks, so after 20
    appends the mark is ahead of them again."""
    monkeypatch.setattr(numbering, "RESERVE", 8)
    monkeypatch.setattr(numbering, "POLL_S", 0.05)
    stack = await Stack(settings).start(checkpointer=False, projector=False)
    op = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        assert await numbering.read_mark(op, settings) == 8
        seq = 0
        for i in range(20):
            seq = (await stack.c.append(created(f"t{i}"))).seq

        async def ahead() -> bool:
            return await numbering.read_mark(op, settings) >= seq + 4

        await assert_eventually(ahead, timeout=WAIT_S)
    finally:
        await op.close()
        await stack.stop()
