"""The checkpointer: its save policy, its PostgreSQL store, the service, and crash safety.

The policy is pure and tested on reducer states. Everything else runs against
the test's real NATS and PostgreSQL with a ledger-writer, a projector and a
checkpointer in process (or, for the crash test, the checkpointer as a real
process that is SIGKILLed mid-save).
"""

from __future__ import annotations

import asyncio
import random
import signal
from typing import Any

import asyncpg
import msgspec
import pytest

from agentledger.config import Settings
from agentledger.contracts.codec import decode_event, encode
from agentledger.core import checkpoint as cp_mod
from agentledger.core import checkpoint_policy as policy
from agentledger.core.reducer import apply
from agentledger.core.state import Changes, WorkingMemory, new_state
from agentledger.errors import ContractError, NotFoundError
from agentledger.security.integrity_keys import keys_of
from agentledger.services.checkpointer.service import save_subject
from agentledger.services.checkpointer.store import CheckpointStore, migrate_checkpoints
from ckpt_support import (
    TENANT,
    Stack,
    budget_cycle,
    chain,
    created,
    event,
    plan,
    running,
    spawn_service,
    started,
    succeeded,
    variable,
    wait_for_service,
)
from helpers import assert_eventually


def fold(events: list[dict[str, Any]], state: WorkingMemory | None = None,
         first_seq: int = 1) -> WorkingMemory:
    state = state or new_state(TENANT, events[0]["task_id"])
    for i, e in enumerate(events):
        apply(state, decode_event(encode(e)), first_seq + i, Changes())
    return state


# ---- policy (pure) ---------------------------------------------------------------------------

def test_policy_counts_events_of_the_task_since_the_last_checkpoint() -> None:
    """A checkpoint is due once N events of the task were applied since the last one, not before;
    a task without a checkpoint counts from zero."""
    history = [created("t"), *[variable("t", "x", i) for i in range(98)]]
    state = fold(history)  # 99 events
    assert policy.due_for_state(state, None, every_n=100) is None
    fold([variable("t", "x", 99)], state, first_seq=100)  # 100 events
    assert policy.due_for_state(state, None, every_n=100) == "every_n_events"
    last = policy.of_state(state)
    assert (last.seq, last.events, last.task_status) == (100, 100, "open")
    assert policy.due_for_state(state, last, every_n=100) is None
    fold([variable("t", "x", i) for i in range(99)], state, first_seq=101)
    assert policy.due_for_state(state, last, every_n=100) is None
    fold([variable("t", "x", 1000)], state, first_seq=200)
    assert policy.due_for_state(state, last, every_n=100) == "every_n_events"


def test_policy_saves_when_a_step_ends_or_the_task_ends() -> None:
    """A step reaching succeeded / failed / cancelled after the last checkpoint makes one due, as
    does the task ending; a step starting does not, and an old terminal step does not count twice."""
    state = fold([created("t"), plan("t", chain(3)), started("t", "S1")])
    assert policy.due_for_state(state, None) is None
    fold([succeeded("t", "S1")], state, first_seq=4)
    assert policy.due_for_state(state, None) == "step_terminal"
    last = policy.of_state(state)
    fold([started("t", "S2")], state, first_seq=5)
    assert policy.due_for_state(state, last) is None
    fold([event("step_failed", {"plan_version": 1, "step_id": "S2", "error_code": "boom"}, "t")],
         state, first_seq=6)
    assert policy.due_for_state(state, last) == "step_terminal"
    last = policy.of_state(state)
    fold([event("step_cancelled", {"plan_version": 1, "step_id": "S3"}, "t")], state, first_seq=7)
    assert policy.due_for_state(state, last) == "step_terminal"
    last = policy.of_state(state)
    fold([event("task_cancelled", {"reason": "stop"}, "t")], state, first_seq=8)
    assert policy.due_for_state(state, last) == "task_ended"
    last = policy.of_state(state)
    assert last.task_status == "cancelled"
    # A turn after the end changes the state but is neither a step end nor a new task end.
    fold([event("turn_appended", {"role": "user", "ordinal": 1, "content": "hi"}, "t")], state,
         first_seq=9)
    assert policy.due_for_state(state, last) is None


def test_policy_never_saves_a_state_that_is_not_past_the_last_checkpoint() -> None:
    """Nothing is due for a state at or behind the last checkpoint's sequence (a late notification)."""
    state = fold([created("t"), plan("t", chain(1)), started("t", "S1"), succeeded("t", "S1")])
    last = policy.LastCheckpoint(seq=state.watermark, events=0, task_status="new")
    assert policy.due_for_state(state, last, every_n=1) is None


# ---- store -----------------------------------------------------------------------------------

@pytest.fixture
async def store(settings: Settings) -> Any:
    await migrate_checkpoints(settings.database_url)
    await migrate_checkpoints(settings.database_url)  # idempotent
    pool = await asyncpg.create_pool(settings.database_url, min_size=1, max_size=12)
    yield CheckpointStore(pool, keys_of(settings), keep=3)
    await pool.close()


def checkpoint_at(task: str, seq: int, value: Any = 0, tenant: str = TENANT) -> cp_mod.Checkpoint:
    state = fold([created(task, tenant=tenant), variable(task, "v", value, tenant=tenant)])
    state.watermark = seq
    return cp_mod.build(state, now=1_000_000.0, ttl_s=3600)


async def test_store_saves_moves_the_pointer_and_keeps_the_newest_three(store: CheckpointStore) -> None:
    """Each save becomes the active checkpoint; retention keeps the newest K=3 rows per task and
    leaves other tasks alone; get / active return what was saved."""
    ids = [await store.save(checkpoint_at("t1", seq, seq), events=seq) for seq in (10, 20, 30, 40, 50)]
    other = await store.save(checkpoint_at("t2", 5))
    active = await store.active(TENANT, "t1")
    assert active is not None and active.id == ids[-1]
    assert cp_mod.decode(active.body).ledger_cursor == 50
    assert await store.get(ids[0]) is None and await store.get(ids[1]) is None
    for kept in ids[2:]:
        got = await store.get(kept)
        assert got is not None and (got.tenant, got.task_id) == (TENANT, "t1")
    located = await store.locate(TENANT, "t1")
    assert located is not None and (located.seq, located.events) == (50, 50)
    assert (await store.active(TENANT, "t2")).id == other  # type: ignore[union-attr]
    assert await store.active(TENANT, "nope") is None


async def test_store_pointer_never_moves_backwards(store: CheckpointStore) -> None:
    """A save of an older ledger position (a slow saver) is kept as history but does not become
    active; retention prunes by sequence, so it is the first to go."""
    newest = await store.save(checkpoint_at("t1", 100))
    older = await store.save(checkpoint_at("t1", 50))
    assert (await store.active(TENANT, "t1")).id == newest  # type: ignore[union-attr]
    assert await store.get(older) is not None
    for seq in (101, 102):
        await store.save(checkpoint_at("t1", seq))
    assert await store.get(older) is None


async def test_store_concurrent_saves_end_on_the_highest_sequence(store: CheckpointStore,
                                                                  settings: Settings) -> None:
    """Forty concurrent saves of one task race on the pointer's compare-and-swap: the pointer ends
    on the highest sequence, every move is counted in its version, and three rows remain."""
    seqs = random.Random(7).sample(range(1, 1000), 40)
    await asyncio.gather(*(store.save(checkpoint_at("race", s)) for s in seqs))
    active = await store.active(TENANT, "race")
    assert active is not None and cp_mod.decode(active.body).ledger_cursor == max(seqs)
    conn = await asyncpg.connect(settings.database_url)
    try:
        version = await conn.fetchval("SELECT version FROM checkpoint_pointer WHERE task_id = 'race'")
        count = await conn.fetchval("SELECT count(*) FROM checkpoints WHERE task_id = 'race'")
    finally:
        await conn.close()
    assert 1 <= version <= len(seqs)
    assert count == 3


# ---- the service -----------------------------------------------------------------------------

async def test_service_saves_every_n_events(settings: Settings) -> None:
    """With N=100 a task is checkpointed when its 100th and 200th events are projected, and not in
    between; the checkpoint covers the ledger up to the event that made it due."""
    async with running(settings) as stack:
        first = await stack.append([created("t1"), *[variable("t1", f"x{i % 5}", i) for i in range(98)]])
        await stack.projected()
        await stack.evaluated("t1", first)
        assert await stack.pointer("t1") is None  # 99 events: not yet

        seq100 = await stack.append([variable("t1", "x0", "hundred")])
        await assert_eventually(lambda: stack.pointer("t1"), message="no checkpoint at 100 events")
        row = await stack.pointer("t1")
        assert (row["seq"], row["events"], row["version"]) == (seq100, 100, 1)

        mid = await stack.append([variable("t1", "x1", i) for i in range(99)])
        await stack.projected()
        await stack.evaluated("t1", mid)
        assert (await stack.pointer("t1"))["version"] == 1  # 199 events: no second save yet

        seq200 = await stack.append([variable("t1", "x2", "two hundred")])

        async def second() -> bool:
            row = await stack.pointer("t1")
            return row is not None and row["version"] == 2

        await assert_eventually(second, message="no checkpoint at 200 events")
        row = await stack.pointer("t1")
        assert (row["seq"], row["events"]) == (seq200, 200)
        cp = cp_mod.decode(bytes(row["body"]))
        assert cp_mod.checksum_ok(cp)
        assert cp.ledger_cursor == seq200
        assert cp.variables["x2"]["value"] == "two hundred"


async def test_service_saves_when_steps_and_the_task_end(settings: Settings) -> None:
    """A step succeeding, a step failing and the task completing each cause a checkpoint at that
    event; a step starting does not."""
    async with running(settings) as stack:
        seq = await stack.append([created("t1"), plan("t1", chain(2)), started("t1", "S1")])
        await stack.projected()
        await stack.evaluated("t1", seq)
        assert await stack.pointer("t1") is None

        async def at(seq: int) -> bool:
            row = await stack.pointer("t1")
            return row is not None and row["seq"] == seq

        seq = await stack.append([succeeded("t1", "S1")])
        await assert_eventually(lambda: at(seq), message="no checkpoint after S1 succeeded")
        assert (await stack.active("t1")).done == ["S1"]  # type: ignore[union-attr]

        seq = await stack.append([started("t1", "S2")])
        await stack.projected()
        await stack.evaluated("t1", seq)
        assert (await stack.pointer("t1"))["version"] == 1

        seq = await stack.append([event("step_failed", {"plan_version": 1, "step_id": "S2",
                                                        "error_code": "flaky", "retryable": True},
                                        "t1")])
        await assert_eventually(lambda: at(seq), message="no checkpoint after S2 failed")

        seq = await stack.append([started("t1", "S2", attempt=2), succeeded("t1", "S2", attempt=2),
                                  event("task_completed", {"summary": "done"}, "t1")])
        await assert_eventually(lambda: at(seq), message="no checkpoint after the task completed")
        cp = await stack.active("t1")
        assert cp is not None and cp_mod.restore(cp).status == "completed"


async def test_save_on_request_and_retention(settings: Settings) -> None:
    """checkpoint.save checkpoints the latest ledger event (waiting for the projection), returns the
    active checkpoint when nothing changed, refuses an unknown task and a malformed request, and
    the task keeps only its newest three checkpoints."""
    async with running(settings) as stack:
        ids = []
        for i in range(5):
            batch = [created("t1")] if i == 0 else []
            seq = await stack.append([*batch, variable("t1", "n", i)])
            # No waiting for the projector here: the endpoint waits for it.
            reply = await stack.c.save_checkpoint(TENANT, "t1")
            assert reply.ok and reply.created and reply.seq == seq
            ids.append(reply.checkpoint_id)
        again = await stack.c.save_checkpoint(TENANT, "t1")
        assert (again.checkpoint_id, again.created) == (ids[-1], False)
        rows = await stack.rows("t1")
        assert [r["id"] for r in rows] == ids[:1:-1]
        cp = await stack.active("t1")
        assert cp is not None and cp.variables["n"]["value"] == 4

        with pytest.raises(NotFoundError):
            await stack.c.save_checkpoint(TENANT, "missing")
        bad = await stack.c.nc.request(save_subject(settings.prefix), b'{"tenant": "acme"}', timeout=10)
        reply = msgspec.json.decode(bad.data)
        assert reply["ok"] is False
        assert (reply["error"]["code"], reply["error"]["path"]) == ("missing_field", "$.task_id")
        with pytest.raises(ContractError):
            await stack.c.save_checkpoint(TENANT, "a.b")


async def test_checkpoint_size_does_not_grow_with_history(settings: Settings) -> None:
    """A task of 10,000 events has a checkpoint (as stored in PostgreSQL) at most 1.1x the size of
    a task of 100 events with the same state shape: checkpoints carry state, not history."""
    sizes = {}
    async with running(settings, checkpointer=True, every_n=10**9) as stack:
        for task, n in (("small", 100), ("large", 10_000)):
            events = [created(task), plan(task, chain(4)),
                      *[e for i in range(n // 4) for e in budget_cycle(task, i)]][:n]
            assert len(events) == n
            await stack.append(events, chunk=1000)
            reply = await stack.c.save_checkpoint(TENANT, task)
            row = await stack.pointer(task)
            assert row is not None and row["checkpoint_id"] == reply.checkpoint_id
            assert row["events"] == n
            sizes[task] = len(row["body"])
    ratio = sizes["large"] / sizes["small"]
    print(f"checkpoint bytes: 100 events {sizes['small']}, 10,000 events {sizes['large']}, "
          f"ratio {ratio:.3f}")
    assert ratio <= 1.1, sizes


# ---- crash safety ------------------------------------------------------------------------------

async def rolled_back(stack: Any) -> int:
    """Transactions of the test's database that ended in a rollback (a killed save is one)."""
    await stack.db.execute("SELECT pg_stat_clear_snapshot()")
    return await stack.db.fetchval(
        "SELECT xact_rollback FROM pg_stat_database WHERE datname = current_database()")


BLOB = "z" * 20_000  # makes each save a sizeable write


async def drive_saves(stack: Stack, task: str, tag: str) -> None:
    """Append to the task and ask for a checkpoint of it, until cancelled."""
    n = 0
    while True:
        n += 1
        await stack.append([variable(task, f"b{n % 8}", f"{BLOB}{tag}-{n}")])
        await stack.c.save_checkpoint(TENANT, task)


async def pointer_versions(stack: Stack, above: int = -1) -> int:
    """How often the checkpoint pointers moved in all (0 when that is not above ``above``)."""
    assert stack.db is not None
    versions = int(await stack.db.fetchval("SELECT coalesce(sum(version), 0) FROM checkpoint_pointer"))
    return versions if versions > above else 0


async def test_sigkill_during_saves_never_leaves_a_bad_pointer(settings: Settings) -> None:
    """Ten rounds: a checkpointer process saves large checkpoints of eight busy tasks (policy and
    on request) and is SIGKILLed at a random moment. After every kill each task's pointer names a
    checkpoint whose checksum verifies, of that task, at or below the ledger's last sequence; and
    the saves really happened (the pointers moved)."""
    tasks = [f"k{i}" for i in range(8)]
    rng = random.Random(2026)
    async with running(settings, checkpointer=False) as stack:
        assert stack.db is not None
        for task in tasks:
            await stack.append([created(task), *[variable(task, f"b{j}", BLOB) for j in range(8)]])
        moves = 0
        rollbacks = await rolled_back(stack)
        for round_no in range(10):
            proc = await spawn_service(settings, "checkpointer")
            try:
                await wait_for_service(stack.c.nc, save_subject(settings.prefix), proc)
                drivers = [asyncio.create_task(drive_saves(stack, t, str(round_no))) for t in tasks]
                # Killed while it saves: once this round's first save moved a pointer (on a busy
                # host that can take seconds; a fixed delay killed it before it saved anything),
                # then at a random moment.
                await assert_eventually(lambda m=moves: pointer_versions(stack, above=m), timeout=120,
                                        interval=0.01)
                await asyncio.sleep(rng.uniform(0.0, 0.4))
                proc.send_signal(signal.SIGKILL)
                await proc.wait()
                for driver in drivers:
                    driver.cancel()  # a request to the dead process would only time out
                await asyncio.gather(*drivers, return_exceptions=True)
            finally:
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
            assert proc.returncode == -signal.SIGKILL

            last = await stack.last_seq()
            for task in tasks:
                row = await stack.pointer(task)
                if row is None:
                    continue
                cp = cp_mod.decode(bytes(row["body"]))
                assert cp_mod.checksum_ok(cp), (round_no, task)
                assert (cp.tenant, cp.task_id) == (TENANT, task)
                assert cp.ledger_cursor == row["seq"] <= last, (round_no, task)
            versions = await pointer_versions(stack)
            assert versions > moves
            moves = versions
        assert moves >= 10, "the checkpointer hardly saved anything; the test proved nothing"
        cut = await rolled_back(stack) - rollbacks
        print(f"pointer moves over 10 killed rounds: {moves}; transactions rolled back: {cut}")
