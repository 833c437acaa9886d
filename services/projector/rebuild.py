"""Working Memory's rebuild: ``agentledger replay``, ``replay --verify``, and the projector's own
rebuild of an empty projection.

All three fold the whole stream into a schema of their own with the bounded
``spill.SpillingFold`` (``WorkingMemoryRebuild.build``). ``replace_live`` then
switches the new projection in beside the live one as every projection is
(``agentledger.projection.rebuild.replace_live``: catch up, lock the live tables,
fold the last messages, move the tables); the projector notices the other
watermark table, drops its cache and carries on. ``rebuild`` leaves the result
in a scratch schema. ``verify`` compares every part of every task with the live
projection in one snapshot, row by row and column by column: the core row (its sequence,
its bytes and the hash stored beside them), the variables, the turns and the applied-event
index, naming each table and column that differs; tasks the projector advanced
past the replayed point are first folded further, each up to its live row's
sequence. ``agentledger replay`` refuses a rebuild smaller than the live projection
(``shrinks``: after the ledger was deleted and recreated, or purged, it would
silently drop every task the ledger lost) unless it is told ``--allow-shrink``.
"""

from __future__ import annotations

import asyncio
import time

import asyncpg
import msgspec
import structlog
from nats.aio.client import Client

from agentledger.config import Settings
from agentledger.errors import ReplayWouldShrinkError, UnavailableError
from agentledger.projection import rebuild as beside
from agentledger.projection.rebuild import LIVE_SCHEMA, Build
from agentledger.projection.stream import Progress, connect
from agentledger.security.integrity_keys import keys_of
from agentledger.services.projector.fold import Fold, SubjectKeys, fold_message
from agentledger.services.projector.spill import EVENT_OVERHEAD, SpillingFold, read_stream
from agentledger.services.projector.store import Store
from agentledger.stores import db
from agentledger.stores.ledger import chain_key_of, ledger_subject

# Names the projector, the checkpointer, resume and the benchmarks import from here.
__all__ = ["EVENT_OVERHEAD", "LIVE_SCHEMA", "REBUILD_SCHEMA", "VERIFY_SCHEMA", "Fold", "RebuildReport",
           "SubjectKeys", "TaskDiff", "VerifyReport", "fold_message", "read_stream", "rebuild", "replace_live",
           "replace_live_with", "verify"]

log = structlog.get_logger()

VERIFY_SCHEMA = "replay_verify"
# Where ``replace_live`` builds the projection that replaces the live one.
REBUILD_SCHEMA = "replay_rebuild"
# Advisory lock key held by the one rebuild of the live projection running ("agrb").
REBUILD_LOCK = 0x61677262


class RebuildReport(msgspec.Struct, frozen=True):
    events: int
    tasks: int
    last_seq: int
    seconds: float
    rejections: int = 0
    schema: str = LIVE_SCHEMA
    # Times the fold wrote what it held and forgot it; the most it held then; its budget.
    spills: int = 0
    peak_bytes: int = 0
    budget_bytes: int = 0
    # States read back from the new projection because their task came up again after a spill.
    reloads: int = 0


class TaskDiff(msgspec.Struct, frozen=True, omit_defaults=True):
    tenant: str
    task_id: str
    problem: str  # missing | extra | different
    # For ``different``: which parts differ (core, variables, transcript, applied_events), and
    # exactly what: ``<table>.<column>`` (other content in some row) or ``<table> rows`` (a
    # row on one side only).
    parts: list[str] = []
    columns: list[str] = []
    live_seq: int | None = None
    replay_seq: int | None = None
    live_hash: str | None = None
    replay_hash: str | None = None


class VerifyReport(msgspec.Struct, frozen=True):
    ok: bool
    last_seq: int
    live_watermark: int
    tasks: int
    events: int
    refolded: int
    missing: list[TaskDiff]
    extra: list[TaskDiff]
    different: list[TaskDiff]
    seconds: float
    # Tasks whose ledger chain fails (``core.ledger_chain``): the first violation of each, which
    # names the tenant, task and index; such a task is folded only up to its last good event.
    violations: list[str] = []

    def summary(self) -> str:
        """Human-readable lines for the CLI."""
        head = (f"{'OK' if self.ok else 'MISMATCH'}: replayed {self.events} events up to seq"
                f" {self.last_seq} into {self.tasks} tasks; live projection at seq"
                f" {self.live_watermark}; {self.refolded} task(s) followed past the replay point;"
                f" {self.seconds}s")
        lines = [head]
        for diff in (*self.missing, *self.extra, *self.different):
            parts = f" in {', '.join(diff.parts)}" if diff.parts else ""
            if diff.columns:
                parts += f" ({', '.join(diff.columns)})"
            lines.append(f"  {diff.problem}: {diff.tenant}/{diff.task_id}{parts}"
                         f" (live seq {diff.live_seq}, replay seq {diff.replay_seq})")
        lines.extend(f"  integrity_violation: {v}" for v in self.violations)
        return "\n".join(lines)


class WorkingMemoryBuild:
    """The stream folded into a schema by a ``SpillingFold`` (which holds nothing between calls)."""

    def __init__(self, nc: Client, settings: Settings, fold: SpillingFold) -> None:
        self._nc, self._settings = nc, settings
        self.fold = fold

    @property
    def last_seq(self) -> int:
        return self.fold.last_seq

    async def catch_up(self, upto: int | None = None) -> None:
        await read_stream(self._nc, self._settings, upto, fold=self.fold, start_seq=self.fold.last_seq + 1)
        await self.fold.spill()

    def report(self, schema: str, started: float) -> RebuildReport:
        fold = self.fold
        report = RebuildReport(events=fold.events, tasks=fold.tasks, last_seq=fold.last_seq,
                               seconds=round(time.perf_counter() - started, 3), rejections=fold.rejected,
                               schema=schema, spills=fold.spills, peak_bytes=fold.peak_bytes,
                               budget_bytes=fold.budget, reloads=fold.reloads)
        log.info("replay.rebuilt", schema=schema, events=report.events, tasks=report.tasks,
                 last_seq=report.last_seq, seconds=report.seconds, spills=report.spills,
                 peak_bytes=report.peak_bytes)
        return report


class WorkingMemoryRebuild:
    """``projection.rebuild.Rebuildable`` of Working Memory.

    ``partitions``: the new projection's partition count (None: the live one's);
    ``wait_s``: how long a verify waits for the live projector; ``allow_shrink``: build
    even a projection smaller than the live one (else ``shrinks`` refuses it).
    """

    noun = "working memory"
    rebuild_schema = REBUILD_SCHEMA
    verify_schema = VERIFY_SCHEMA
    lock_key = REBUILD_LOCK
    tables: tuple[str, ...] = db.PROJECTION_TABLES
    forget_index = "working_memory"

    def __init__(self, progress: Progress | None = None, *, partitions: int | None = None,
                 wait_s: float = 60.0, allow_shrink: bool = True) -> None:
        self.progress = progress
        self.partitions = partitions
        self.wait_s = wait_s
        self.allow_shrink = allow_shrink
        self.live_watermark = 0
        self.started = time.perf_counter()

    async def build(self, nc: Client, conn: asyncpg.Connection, settings: Settings, schema: str) -> Build:
        """Fold the whole stream into ``schema`` within the rebuild memory budget, all partitions at its end."""
        partitions = self.partitions
        if partitions is None:
            live = await Store(LIVE_SCHEMA).layout(conn)
            partitions = live.partitions if live is not None else 1
        fold = SpillingFold(conn, schema, settings.rebuild_memory_bytes, keys_of(settings),
                            key_of=chain_key_of(settings))
        await read_stream(nc, settings, None, fold=fold, progress=self.progress)
        await fold.spill()
        if not self.allow_shrink:
            await shrinks(nc, conn, settings, fold.store, fold.last_seq)
        await fold.store.set_layout(conn, partitions, fold.last_seq)
        return WorkingMemoryBuild(nc, settings, fold)

    async def seal(self, conn: asyncpg.Connection, build: Build, schema: str) -> None:
        await Store(schema).set_watermark(conn, build.last_seq)

    async def wait_live(self, nc: Client, conn: asyncpg.Connection, settings: Settings, build: Build) -> None:
        store = Store(LIVE_SCHEMA)
        deadline = time.monotonic() + self.wait_s
        while True:
            wm = await store.watermark(conn)
            if wm is not None and wm >= build.last_seq:
                self.live_watermark = wm
                return
            if time.monotonic() >= deadline:
                where = "the live projection does not exist" if wm is None else f"it is at {wm}"
                raise UnavailableError(
                    f"the live projector did not reach ledger seq {build.last_seq} within {self.wait_s}s ({where});"
                    " is the projector running and catching up?", code="projector_behind")
            await asyncio.sleep(0.1)

    async def compare(self, nc: Client, conn: asyncpg.Connection, settings: Settings, build: Build,
                      schema: str) -> VerifyReport:
        assert isinstance(build, WorkingMemoryBuild)
        fold = build.fold
        last, events = fold.last_seq, fold.events
        live_store, scratch = Store(LIVE_SCHEMA), Store(schema)
        refolded = 0
        live = await live_store.task_hashes(conn)
        # Tasks the projector advanced past the replayed point: fold them further (the fold
        # reads each back from the scratch schema, as after any spill).
        for key, (live_seq, _) in live.items():
            if live_seq <= last:
                continue
            refolded += 1
            await read_stream(nc, settings, live_seq, fold=fold, start_seq=last + 1,
                              subject=ledger_subject(settings.prefix, *key))
        await fold.spill()
        replay = await scratch.task_hashes(conn)
        parts = await live_store.part_differences(conn, scratch, last)

        missing, extra, different = [], [], []
        for key, (seq, digest) in replay.items():
            got = live.get(key)
            if got is None:
                missing.append(TaskDiff(key[0], key[1], "missing", replay_seq=seq, replay_hash=digest))
                continue
            differ = [name for name, tasks in parts.items() if key in tasks]
            columns = [c for name in differ for c in parts[name][key]]
            if differ:
                different.append(TaskDiff(key[0], key[1], "different", parts=differ, columns=columns,
                                          live_seq=got[0], replay_seq=seq, live_hash=got[1],
                                          replay_hash=digest))
        extra = [TaskDiff(key[0], key[1], "extra", live_seq=seq, live_hash=digest)
                 for key, (seq, digest) in live.items() if key not in replay]
        violations = [exc.message for exc in fold.violations.values()]
        return VerifyReport(
            ok=not (missing or extra or different or violations), last_seq=last,
            live_watermark=self.live_watermark, tasks=len(replay), events=events, refolded=refolded,
            missing=missing, extra=extra, different=different,
            seconds=round(time.perf_counter() - self.started, 3), violations=violations)


async def shrinks(nc: Client, conn: asyncpg.Connection, settings: Settings, built: Store,
                  last_seq: int) -> None:
    """Refuse (``ReplayWouldShrinkError``, naming what would be dropped) a rebuilt projection
    smaller than the live one: live tasks it lacks, or a ledger that starts after the live
    watermark + 1 or numbers below it (deleted and recreated, or purged: the projection
    answers ``ledger_gap`` for what it lost, ``services/projector/gaps.py``).

    Tasks the live projector folded after ``last_seq`` (the point the rebuild read to) are
    not counted: the rebuild's catch-up folds them.
    """
    live_store = Store(LIVE_SCHEMA)
    live = await live_store.layout(conn)
    if live is None:
        return
    state = (await nc.jetstream().stream_info(settings.stream)).state
    first = int(state.first_seq or 1)
    numbered = max(int(state.last_seq or 0), first - 1)
    folded = max(live.seqs)
    reason = ""
    if folded > numbered:
        reason = (f"the ledger numbers only up to seq {numbered}, below the live watermark {folded}"
                  " (its stream was recreated numbering from 1)")
    elif live.watermark and first > live.watermark + 1:
        reason = (f"the ledger starts at seq {first}, after the live watermark {live.watermark}"
                  f" (seq 1 to {first - 1} are missing: its stream was deleted and recreated, or purged)")
    count, examples = await live_store.tasks_missing_from(conn, built, max(last_seq, folded) if reason
                                                          else last_seq)
    if not (reason or count):
        return
    named = ", ".join(f"{tenant}/{task} (last folded at seq {seq})" for tenant, task, seq in examples)
    raise ReplayWouldShrinkError(
        f"the rebuilt projection would be smaller than the live one: it would drop {count} task(s)"
        + (f", e.g. {named}" if named else "") + (f"; {reason}" if reason else
                                                  "; the ledger no longer holds their events")
        + ". Nothing was changed; `agentledger replay --allow-shrink` rebuilds anyway and drops them")


async def rebuild(settings: Settings, schema: str, progress: Progress | None = None) -> RebuildReport:
    """(Re)create a projection in the scratch schema ``schema`` from the whole ledger stream."""
    db.check_schema(schema)
    started = time.perf_counter()
    nc, conn = await connect(settings)
    try:
        build = await beside.build_in(nc, conn, settings, WorkingMemoryRebuild(progress, partitions=1), schema)
        assert isinstance(build, WorkingMemoryBuild)
        return build.report(schema, started)
    finally:
        await conn.close()
        await nc.close()


async def replace_live_with(nc: Client, conn: asyncpg.Connection, settings: Settings,
                            progress: Progress | None = None, *, partitions: int | None = None,
                            only_if_empty: bool = False, allow_shrink: bool = False) -> RebuildReport | None:
    """``replace_live`` on existing connections (``conn`` must not be in a transaction).

    The new projection has ``partitions`` projector partitions, by default as many
    as the live one. ``only_if_empty``: do nothing (None) if, once the rebuild's lock is
    held, the live projection is past seq 0 (another projector lane rebuilt it meanwhile).
    A projection smaller than the live one is refused (``shrinks``) unless ``allow_shrink``.
    """
    started = time.perf_counter()

    async def not_empty(c: asyncpg.Connection) -> bool:
        live = await Store(LIVE_SCHEMA).layout(c)
        return live is not None and live.watermark > 0

    spec = WorkingMemoryRebuild(progress, partitions=partitions, allow_shrink=allow_shrink)
    build = await beside.replace_live(nc, conn, settings, spec, unless=not_empty if only_if_empty else None)
    if build is None:
        return None
    assert isinstance(build, WorkingMemoryBuild)
    return build.report(LIVE_SCHEMA, started)


async def replace_live(settings: Settings, progress: Progress | None = None,
                       partitions: int | None = None, allow_shrink: bool = False) -> RebuildReport:
    """Rebuild the live projection from the ledger beside it, then switch to it atomically.

    The live projection keeps serving (and the projector keeps projecting into
    it) until the switch; a reader sees the old projection or the new one,
    never none. A running projector notices the switch (its watermark table is
    another one), drops its cache and carries on from the new watermark. A rebuild
    smaller than the live projection is refused unless ``allow_shrink`` (``shrinks``).
    """
    nc, conn = await connect(settings)
    try:
        report = await replace_live_with(nc, conn, settings, progress, partitions=partitions,
                                         allow_shrink=allow_shrink)
        assert report is not None  # only_if_empty is not asked for
        return report
    finally:
        await conn.close()
        await nc.close()


async def verify(settings: Settings, progress: Progress | None = None, wait_s: float = 60.0) -> VerifyReport:
    """Rebuild into a scratch schema and compare every part of every task with the live
    projection: the core row (its seq and hash) and, row by row, the variables, the turns
    and the applied-event index.

    Tasks that changed in the live projection after the replayed point are
    folded further, each up to its live row's sequence, and rewritten in the
    scratch schema. The live rows are read in one snapshot, so the comparison
    is exact while the projector keeps running.
    """
    report: VerifyReport = (await beside.verify(settings, WorkingMemoryRebuild(progress, partitions=1,
                                                                               wait_s=wait_s))).result
    log.info("replay.verified", ok=report.ok, last_seq=report.last_seq, tasks=report.tasks,
             missing=len(report.missing), extra=len(report.extra), different=len(report.different))
    return report
