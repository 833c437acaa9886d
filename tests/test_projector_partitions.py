"""Partitioned projection: several projector instances share the task space.

The pure parts first (which partition folds a task, who takes which partition,
what a layout of watermark rows is), then real projector processes on the test's
NATS and PostgreSQL: one instance alone folds every partition; two more join and
the partitions spread one per instance; one is SIGKILLed while events stream in
and the survivors take its partition; the projection ends equal to a replay,
every event applied exactly once. And a projection built with one partition is
re-partitioned when its partitions are level, never when they are not.
"""

from __future__ import annotations

import asyncio
import collections
import time
from pathlib import Path

import asyncpg
import msgspec
import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from agentledger.config import Settings
from agentledger.core.state import decode_state
from agentledger.errors import ContractError
from agentledger.services.projector import ownership
from agentledger.services.projector import rebuild as replay
from agentledger.services.projector.service import LEADER_LOCK, Projector
from agentledger.services.projector.store import Layout, LayoutError, Store, parse_layout
from agentledger.stores.db import watermark_name
from agentledger.stores.ledger import partition_of
from helpers import assert_eventually
from test_projector import Ledger, task_rows
from test_replay import ProjectorProcess, crash_events

# ---- pure ------------------------------------------------------------------------------------


def test_a_task_has_one_partition_spread_evenly_and_stable() -> None:
    """Protects per-task order: a task's events always go to the same partition (the same
    answer every call), the partitions share the tasks evenly, and one partition takes all."""
    counts = collections.Counter(partition_of("acme", f"task-{i}", 4) for i in range(8000))
    assert set(counts) == {0, 1, 2, 3}
    assert all(1700 < n < 2300 for n in counts.values()), counts
    assert all(partition_of("acme", f"task-{i}", 4) == partition_of("acme", f"task-{i}", 4)
               for i in range(100))
    assert {partition_of("acme", f"task-{i}", 1) for i in range(100)} == {0}
    # The tenant is part of the key: the same task id of two tenants need not share a partition.
    assert any(partition_of("a", f"t{i}", 8) != partition_of("b", f"t{i}", 8) for i in range(50))


def test_partition_and_instance_counts_are_checked() -> None:
    """Protects operators from a typo: a count out of range names its variable."""
    for field, value, var in (("projector_partitions", 0, "AGENTLEDGER_PROJECTOR_PARTITIONS"),
                              ("projector_partitions", 65, "AGENTLEDGER_PROJECTOR_PARTITIONS"),
                              ("instances", 0, "AGENTLEDGER_INSTANCES")):
        with pytest.raises(ContractError) as err:
            Settings(**{field: value})
        assert err.value.path == var


def _converge(instances: list[str], partitions: int, locks: dict[int, str],
              order: list[int]) -> dict[str, set[int]]:
    """Turns of every instance in ``order`` (indexes), sharing one lock table, until stable."""
    held = {i: {k for k, who in locks.items() if who == i} for i in instances}
    for _ in range(4 * partitions + 10):
        changed = False
        for idx in order:
            me = instances[idx % len(instances)]
            decision = ownership.plan(me, partitions, len(instances), held[me])
            if decision.drop is not None:
                held[me].discard(decision.drop)
                del locks[decision.drop]
                changed = True
            for k in decision.take:
                if len(held[me]) >= ownership.share(partitions, len(instances)):
                    break
                if k not in locks:
                    locks[k] = me
                    held[me].add(k)
                    changed = True
        if not changed:
            break
    return held


@hsettings(max_examples=200, deadline=None)
@given(n=st.integers(1, 6), partitions=st.integers(1, 12),
       order=st.lists(st.integers(0, 5), min_size=1, max_size=12), dead=st.integers(0, 5))
def test_instances_end_with_one_owner_per_partition_and_fair_shares(
        n: int, partitions: int, order: list[int], dead: int) -> None:
    """Protects the sharing: whatever order the instances turn in, every partition ends with
    exactly one owner and no instance holds more than its share; when some die (their locks
    freed), the survivors take every partition again."""
    instances = [f"inst-{i}" for i in range(n)]
    locks: dict[int, str] = {}
    held = _converge(instances, partitions, locks, order + list(range(n)))
    assert sorted(k for ks in held.values() for k in ks) == list(range(partitions))
    assert all(len(ks) <= ownership.share(partitions, n) for ks in held.values())
    survivors = instances[:max(1, n - dead)]
    for gone in instances[len(survivors):]:
        for k in held[gone]:
            del locks[k]
    held = _converge(survivors, partitions, locks, list(range(len(survivors))))
    assert sorted(k for i in survivors for k in held[i]) == list(range(partitions))
    assert all(len(held[i]) <= ownership.share(partitions, len(survivors)) for i in survivors)


def test_a_layout_is_the_rows_of_one_partition_count() -> None:
    """Protects the watermark rows from being misread: a layout is exactly the rows of one count
    (a mix is an error, not a guess), its watermark is the lowest, and a task's wait is for its own
    partition's row."""
    assert parse_layout([]) is None
    one = parse_layout([("projector", 7, 1)])
    assert one == Layout((7,), 1) and one.watermark == 7
    rows = [(watermark_name(k, 3), seq, 9) for k, seq in ((2, 30), (0, 10), (1, 20))]
    three = parse_layout(rows)
    assert three is not None and three.seqs == (10, 20, 30) and three.watermark == 10
    task = next(f"t{i}" for i in range(100) if partition_of("acme", f"t{i}", 3) == 2)
    assert three.of_task("acme", task) == 30
    for broken in ([*rows, ("projector", 5, 9)], rows[:2], [(watermark_name(0, 2), 1, 9),
                                                             (watermark_name(1, 3), 1, 9)]):
        with pytest.raises(LayoutError):
            parse_layout(broken)


# ---- real processes ----------------------------------------------------------------------------

async def holders(settings: Settings) -> dict[int, int]:
    """Partition -> PostgreSQL backend pid holding its advisory lock."""
    conn = await asyncpg.connect(settings.database_url)
    try:
        rows = await conn.fetch(
            "SELECT objid, pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 2"
            " AND classid = $1 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            LEADER_LOCK)
    finally:
        await conn.close()
    return {int(r["objid"]): int(r["pid"]) for r in rows}


async def layout_of(settings: Settings) -> Layout | None:
    conn = await asyncpg.connect(settings.database_url)
    try:
        return await Store().layout(conn)
    finally:
        await conn.close()


@pytest.mark.timeout(300)
async def test_projector_instances_share_partitions_and_take_over_a_killed_ones(
        settings: Settings, ledger: Ledger, tmp_path: Path) -> None:
    """Protects scale-out of the projection: with 3 partitions, one projector process folds all
    three; two more join and each ends with one; one of them is SIGKILLed while events stream in,
    and its partition is folded by a survivor within seconds. At the end every partition's
    watermark is the stream's end, the projection equals replay --verify, and every event was
    applied exactly once (no task's events split between two folds, none folded twice)."""
    three = msgspec.structs.replace(settings, projector_partitions=3)
    procs = ProjectorProcess(three, tmp_path)
    events = crash_events(3000, 60)
    try:
        await ledger.publish_all(events[:600])
        procs.start()
        await assert_eventually(lambda: _held_count(three, 3), timeout=60,
                                message="one projector did not take all three partitions")
        assert len(set((await holders(three)).values())) == 1
        procs.start()
        procs.start()
        await assert_eventually(lambda: _spread(three), timeout=60,
                                message="the partitions did not spread over the three instances")
        publisher = asyncio.create_task(ledger.publish_all(events[600:2400]))
        await assert_eventually(lambda: _past(three, 1200), timeout=60)
        before = await holders(three)
        victim = procs.procs[1]
        procs.kill_one(victim)
        killed = time.monotonic()
        await assert_eventually(lambda: _held_count(three, 3), timeout=30,
                                message="the killed projector's partition was not taken over")
        moved_s = time.monotonic() - killed
        after = await holders(three)
        assert set(after.values()) < set(before.values()), "the survivors hold every partition"
        await publisher
        await ledger.publish_all(events[2400:])
        last = await ledger.last_seq()
        await assert_eventually(lambda: _all_at(three, last), timeout=90,
                                message=f"a partition never reached {last}")
        report = await replay.verify(three, wait_s=60)
        assert report.ok, report.summary()
        assert report.tasks == 60 and report.events == len(events)
        rows = await task_rows(three)
        assert sum(decode_state(r["state"]).events_applied for r in rows.values()) == len(events)
        print(f"partition taken over {moved_s:.2f} s after the SIGKILL")
        assert all(p.poll() is None for p in procs.procs if p is not victim)
    finally:
        procs.stop_all()


async def _held_count(settings: Settings, n: int) -> bool:
    return len(await holders(settings)) == n


async def _spread(settings: Settings) -> bool:
    held = await holders(settings)
    return len(held) == 3 and len(set(held.values())) == 3


async def _past(settings: Settings, seq: int) -> bool:
    layout = await layout_of(settings)
    return layout is not None and layout.partitions == 3 and layout.watermark > seq


async def _all_at(settings: Settings, seq: int) -> bool:
    layout = await layout_of(settings)
    return layout is not None and layout.partitions == 3 and set(layout.seqs) == {seq}


async def test_a_level_projection_is_repartitioned_and_one_that_is_not_keeps_its_count(
        settings: Settings, ledger: Ledger) -> None:
    """Protects an exact change of the partition count: a projection built with one partition,
    caught up, gets three when a projector configured for three starts (every row at the same
    seq); the old consumer is deleted; later events are folded by the three lanes; a layout whose
    rows differ is never changed, and a replay gives the count asked for."""
    await ledger.publish_all(crash_events(200, 10))
    one = Projector(settings)
    await one.start()
    last = await ledger.last_seq()
    try:
        await assert_eventually(lambda: _level_at(settings, 1, last), timeout=30)
    finally:
        await one.stop()
    three = msgspec.structs.replace(settings, projector_partitions=3)
    p = Projector(three)
    await p.start()
    try:
        assert p.partitions == [0, 1, 2]
        layout = await layout_of(three)
        assert layout is not None and layout.seqs == (last, last, last)
        js = ledger.nc.jetstream()
        names = {c.name for c in await js.consumers_info(settings.stream)}
        assert "projector" not in names
        await ledger.publish_all(crash_events(400, 10)[200:])
        last = await ledger.last_seq()
        await assert_eventually(lambda: _all_at(three, last), timeout=30)
        report = await replay.verify(three, wait_s=30)
        assert report.ok, report.summary()
    finally:
        await p.stop()
    conn = await asyncpg.connect(settings.database_url)
    try:
        await conn.execute("UPDATE projector_watermark SET seq = seq - 1 WHERE name = $1",
                           watermark_name(1, 3))
        assert await Store().repartition_if_level(conn, 2) is None
        assert (await Store().layout(conn)).partitions == 3  # type: ignore[union-attr]
    finally:
        await conn.close()
    rebuilt = await replay.replace_live(settings, partitions=2)
    layout = await layout_of(settings)
    assert layout is not None and layout.seqs == (rebuilt.last_seq, rebuilt.last_seq)


async def _level_at(settings: Settings, partitions: int, seq: int) -> bool:
    layout = await layout_of(settings)
    return layout is not None and layout.partitions == partitions and set(layout.seqs) == {seq}
