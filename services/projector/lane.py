"""One partition of the projection: its consumer, its watermark, its batches.

The task space is cut into ``partitions`` partitions by ``ledger.partition_of``
(one partition: the whole ledger). A lane folds the tasks of one partition.

Consumer strategy. A durable pull consumer (AckAll) on the ledger wildcard,
one replica in memory (its position is derived from PostgreSQL, so there is
nothing to replicate: on a cluster its acks cost no raft round, and when the
node holding it dies the lane recreates it on another at once instead of
waiting for an election among replicas),
``projector`` when there is one partition and ``projector-<k>of<n>`` otherwise,
read by ``Puller`` (one open pull request at a time: ``no_wait`` batches while
there is a backlog, a long poll when drained). Every lane reads the whole
stream and passes by the messages of other partitions' tasks (parsing only
their subject): a task's events are delivered in ledger order to exactly one
lane, so per-task order holds. PostgreSQL's watermark row of the partition is
the truth: on start the consumer is kept only if its position agrees with it
(ack floor and last delivered at or below the watermark, so nothing unapplied
was delivered) and is otherwise recreated to start at ``watermark + 1``; after
any failure inside a running process it is always recreated there. Messages at
or below the watermark are skipped, and a batch that would jump over a message
still in the stream is refused.

Each fetched batch is applied in ONE transaction that row-locks the partition's
watermark, skips messages at or below it (a redelivery after a crash is a
no-op), checks that nothing between the watermark and the batch is missing,
claims the batch's event ids in the ``applied_events`` index (a repeat is a
duplicate), applies the events to cached states, writes each touched task's
core row and only the variable and turn rows the reducer changed, inserts
rejection rows and advances the watermark. A warm batch (every task it touches
is cached, so nothing needs reading) is all of that in one statement, one round
trip (``Store.write_batch``): folded first on the assumption that the watermark
is the one this lane committed last and every id is new, written only if both
hold, else refused whole and done the long way. Only after the commit is the batch
acked and ``TaskChanged`` published. Any error drops the state cache and
re-derives the consumer from the watermark, so nothing is skipped or applied
twice.

A watermark that is missing or differs from the one this lane committed last
(its seq, or the watermark table itself: ``agentledger replay`` switches in a
rebuilt projection) means someone dropped or rebuilt the projection: the lane
drops its cache, rebuilds an empty projection from the stream (beside it, in
bounded memory, as ``replay`` does), and carries on from the watermark. A
projection that was re-partitioned ends the lane; the projector starts the new
layout's lanes.

Which process runs which lane is the projector's business (``service``): a
lane runs only while its process holds the partition's advisory lock, and the
watermark check of every batch makes a second lane of the same partition
(a process that lost its lock and has not noticed yet) fail its batch rather
than fold anything twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import asyncpg
import nats.js.errors
import structlog
from nats.aio.client import Client

from agentledger.config import Settings
from agentledger.contracts.api import EventRejected
from agentledger.contracts.codec import encode
from agentledger.contracts.events import AnyEvent
from agentledger.core import ledger_chain
from agentledger.core.checkpoint_policy import task_changed
from agentledger.core.ledger_chain import GENESIS, Head
from agentledger.core.state import Changes, encode_variable
from agentledger.errors import IntegrityViolationError
from agentledger.projection.loop import (
    FETCH_TIMEOUT,
    LOOP_STALL_S,
    LoopEndedError,
    ProjectionChangedError,
    ProjectionLoop,
    safe_detail,
)
from agentledger.projection.stream import (
    bind_consumer,
    consumer_agrees,
    consumer_config,
    first_undelivered,
    stream_seq,
)
from agentledger.security.integrity_keys import keys_of
from agentledger.security.sealing import Keyring
from agentledger.security.task_seal import TaskKeys, task_keys_of
from agentledger.services.projector.cache import StateCache
from agentledger.services.projector.fold import (
    SubjectKeys,
    chain_violation_row,
    decode_message,
    event_id_of,
    fold_event,
    is_service_ledger,
    rejection_row,
    subject_tokens,
)
from agentledger.services.projector.rebuild import replace_live_with
from agentledger.services.projector.rollback_guard import RollbackGuard
from agentledger.services.projector.store import (
    REFUSED,
    Key,
    Position,
    ProjectionMissingError,
    RejectionRow,
    Store,
    TaskRow,
    TurnRow,
    VariableRow,
    check_loaded,
    tag_rejections,
    task_row,
    turn_row,
)
from agentledger.shell import metrics
from agentledger.shell.lifecycle import SERVER_AWAY_ERRORS
from agentledger.stores import db
from agentledger.stores.ledger import chain_head_at, chain_key_of, ledger_wildcard, partition_of, subject_key

# ``LOOP_STALL_S``: the projector's own loop stalls by the lanes' measure.
__all__ = ["DURABLE", "LOOP_STALL_S", "Lane", "LaneEndedError", "LedgerUnusableError", "OutOfOrderError",
           "ProjectionChangedError", "changed_subject", "durable_name", "rejected_subject"]

log = structlog.get_logger()

DURABLE = "projector"
# A consumer that would re-deliver more than this many already-projected messages is recreated.
MAX_SKIP = 100_000
CACHE_MAX = 50_000


def durable_name(partition: int, partitions: int) -> str:
    """The durable consumer of one partition (``projector`` when there is one)."""
    return DURABLE if partitions == 1 else f"{DURABLE}-{partition}of{partitions}"


def changed_subject(prefix: str, tenant: str, task_id: str) -> str:
    return f"{prefix}.wm.changed.{tenant}.{task_id}"


def rejected_subject(prefix: str, tenant: str, task_id: str) -> str:
    """Where a producer learns that the reducer refused an event it appended (after the ack)."""
    return f"{prefix}.rejected.{tenant}.{task_id}"


class OutOfOrderError(Exception):
    """The consumer delivered past a message that was never applied."""


class LedgerUnusableError(Exception):
    """The ledger stream is missing, or numbers below the watermark (it was deleted and
    recreated without continuing its sequence): projecting now would skip or misfile events."""


class LaneEndedError(LoopEndedError):
    """The projection was re-partitioned: this lane's partition is not one of it any more."""


class Lane(ProjectionLoop[TaskRow]):
    """Folds one partition of the ledger into PostgreSQL (see the module docstring).

    The process gives it its connections and what its lanes share: the NATS
    connection, the read pool, the live projection's SQL, the parsed subjects,
    the wake-up of readers waiting for a seq, and what to do when the lane gives up.
    """

    log_name = "projector"
    outage_errors = (*SERVER_AWAY_ERRORS, LedgerUnusableError)
    unusable_errors = (LedgerUnusableError,)
    reset_errors = (ProjectionMissingError, ProjectionChangedError)

    def __init__(self, settings: Settings, nc: Client, pool: asyncpg.Pool, partition: int,
                 partitions: int, *, store: Store, subject_keys: SubjectKeys,
                 progress: asyncio.Event, on_failure: Callable[[BaseException], None],
                 guard: RollbackGuard | None = None, keyring: Callable[[], Keyring] | None = None) -> None:
        super().__init__(settings, nc, pool, logger=log.bind(partition=partition) if partitions > 1 else log)
        self.partition, self.partitions = partition, partitions
        self.name = db.watermark_name(partition, partitions)
        self.durable = durable_name(partition, partitions)
        # Each lane holds its share of the state cache's budget.
        self.cache_bytes = max(1, settings.projector_cache_bytes // partitions)
        self.store = store
        self._subject_keys = subject_keys
        self._progress = progress
        self._on_failure = on_failure
        # What the process's reads compare a row's sequence with (the rows this lane commits).
        self._rollback = guard if guard is not None else RollbackGuard()
        # Whether a subject's task is this partition's, decided once per subject.
        self._mine: dict[str, bool] = {}
        self._cache = StateCache()
        # Rejections committed but not yet announced.
        self._rejected: list[RejectionRow] = []
        # The ledger chain (core.ledger_chain): each task's head as committed; the heads a batch
        # being committed moves on to (kept once it commits); tasks whose head cannot be
        # established (their last folded message is gone), with why.
        self._key_of = chain_key_of(settings)
        self._heads: dict[Key, Head] = {}
        self._pending: dict[Key, Head] = {}
        self._broken: dict[Key, IntegrityViolationError] = {}
        # The keyring sealed task messages are opened with (the service's: a forget's eviction
        # reaches it), and the keys the batch being committed needs.
        if keyring is None:
            own = task_keys_of(nc, settings)
            keyring = lambda: own.keyring  # noqa: E731 - made once, at the first sealed message
        self._keyring = keyring
        self._task_keys = TaskKeys(self._keyring)

    @property
    def cache(self) -> StateCache:
        return self._cache

    async def prime(self) -> None:
        """Initialize now, in the caller (errors reach it); ``start`` then begins with a batch."""
        await self._guarded(self._initialize())

    def start(self) -> None:
        self._spawn(f"projector-{self.durable}")

    def _failed(self, exc: BaseException) -> None:
        self._on_failure(exc)

    def evict(self, tenant: str, task_id: str | None) -> int:
        """Drop the cached states of a tenant (or of one of its tasks); call between batches."""
        states = [k for k in self._cache if k[0] == tenant and (task_id is None or k[1] == task_id)]
        for key in states:
            self._cache.pop(key, None)
        self._forget_heads()
        return len(states)

    def _forget_heads(self) -> None:
        """Drop the chain heads: they are re-read from the ledger at each task's watermark."""
        self._heads.clear()
        self._broken.clear()

    # ---- initialization and consumer ----------------------------------------------------

    async def _initialize(self) -> None:
        """Derive everything from PostgreSQL: rebuild an empty projection, bind the consumer."""
        s = self.settings
        self._cache.clear()
        self._forget_heads()
        self._rollback.clear()  # the projection may have been rebuilt, its rows numbered anew
        self._committed = self._projection = None
        await db.migrate(s.database_url)
        async with self._pool.acquire() as conn:
            position = await self._position(conn)
            wm = position.seq
            try:
                info = await self._nc.jetstream().stream_info(s.stream)
            except nats.js.errors.NotFoundError as exc:
                raise LedgerUnusableError(f"the ledger stream {s.stream} does not exist; the "
                                          "ledger-writer recreates it") from exc
            last = int(info.state.last_seq) if info.state.messages else 0
            # An empty stream recreated to continue numbering has assigned up to first_seq - 1.
            first = int(info.state.first_seq)
            numbered = max(int(info.state.last_seq), first - 1)
            if wm > numbered:
                raise LedgerUnusableError(
                    f"the ledger stream numbers up to {numbered} but the projection is at {wm}: it "
                    "was deleted and recreated from the start; projecting would skip events. "
                    "Rebuild the projection from what the ledger holds now (`agentledger replay "
                    "--allow-shrink`); Working Memory answers `ledger_gap` until then")
            if wm and first > wm + 1:
                # Recreated after the high-water mark, or purged: folding carries on from its first
                # message, and the tasks folded before it answer ``ledger_gap`` (``gaps``).
                self.log.error("projector.ledger_gap", first_missing=wm + 1, last_missing=first - 1,
                               watermark=wm, reason="the ledger starts after the watermark: it was "
                               "deleted and recreated, or purged")
            if wm == 0 and last > 0:
                # Built beside the empty projection in bounded memory and switched in, as
                # `agentledger replay` does (by one lane: the others find it built).
                self.log.info("projector.rebuilding", reason="empty projection", last_seq=last)
                # On a connection of its own: the rebuild holds a session lock, and pooled
                # connections are returned without a session reset (``db.create_pool``).
                rebuild = await db.connect(s.database_url)
                try:
                    await replace_live_with(self._nc, rebuild, s, progress=self._rebuild_progress,
                                            partitions=s.projector_partitions, only_if_empty=True)
                finally:
                    await rebuild.close()
                position = await self._position(conn)
                wm = position.seq
        await self._bind_consumer(wm)
        self._committed, self._projection = wm, position.projection
        self.log.info("projector.initialized", watermark=wm)

    async def _position(self, conn: asyncpg.Connection) -> Position:
        """This partition's watermark; ``LaneEndedError`` if the projection has another layout."""
        position = await self.store.position(conn, self.name)
        if position is not None:
            return position
        layout = await self.store.layout(conn)
        if layout is not None and layout.partitions != self.partitions:
            raise LaneEndedError(f"the projection now has {layout.partitions} partitions")
        raise ProjectionMissingError(f"projector_watermark row {self.name!r} is missing after migrate")

    def _rebuild_progress(self, done: int, total: int) -> None:
        """A rebuild is the loop at work: keep liveness fresh while it folds the stream."""
        self._turned = time.monotonic()

    async def _bind_consumer(self, wm: int) -> None:
        """Make the durable consumer deliver from ``wm + 1`` and attach a fresh ``Puller``.

        Re-binding inside a running process: a pull request of the old puller may still be
        open, so the consumer is always recreated (its open requests die with it); on start
        a consumer whose position agrees with the watermark is kept.
        """
        rebind = self._sub is not None
        if self._sub is not None:
            await self._sub.close()
            self._sub = None
        wildcard = ledger_wildcard(self.settings.prefix)

        def keep(info: Any) -> bool:
            if not rebind and consumer_agrees(info, wildcard, wm, MAX_SKIP):
                return True
            self.log.info("projector.consumer_reset", watermark=wm,
                          ack_floor=info.ack_floor.stream_seq if info.ack_floor else None,
                          delivered=info.delivered.stream_seq if info.delivered else None)
            return False

        self._sub = await bind_consumer(self._nc, self.settings, consumer_config(
            self.durable, wildcard, wm + 1, f"agentledger projector, partition {self.partition} of"
            f" {self.partitions} (position follows PostgreSQL)"), keep=keep)

    # ---- the loop ---------------------------------------------------------------------------

    async def _step(self) -> None:
        """One turn of the loop: initialize, fetch and apply one batch (or check when idle)."""
        if self._committed is None or self._sub is None:
            await self._guarded(self._initialize())
        assert self._sub is not None
        try:
            msgs = await self._sub.fetch(self.settings.projector_batch, FETCH_TIMEOUT,
                                         self.settings.projector_linger_ms / 1000)
        except TimeoutError:
            await self._idle_check()
            return
        await self._guarded(self._process(msgs))

    async def _reset(self) -> None:
        """Forget everything derived: the next iteration re-derives it from PostgreSQL."""
        self._cache.clear()
        self._forget_heads()
        await super()._reset()
        await self._pool.expire_connections()  # drop plans cached against dropped tables

    def _rolled_back(self) -> None:
        self._cache.clear()  # states were folded in memory for a transaction that rolled back

    async def _idle_check(self) -> None:
        """Between batches: notice a dropped or rebuilt projection without waiting for traffic."""
        position = await self.store.position(self._pool, self.name)
        if position is None:
            raise ProjectionMissingError("the projection tables (or this partition's row) are gone")
        self._check_position(position)

    def _check_position(self, position: Position) -> int:
        """The watermark of ``position``; ``ProjectionChangedError`` unless it is the one this
        process committed last, in the same projection (a rebuild may switch in another one
        at the very same watermark, and this process's cache knows nothing of it)."""
        if position.seq != self._committed or position.projection != self._projection:
            raise ProjectionChangedError(
                f"watermark is {position.seq} of projection {position.projection}, this projector"
                f" committed {self._committed} of projection {self._projection}")
        return position.seq

    async def _process(self, msgs: list[Any]) -> None:
        """Apply one fetched batch in one transaction (split if one message fails it), then ack and notify."""
        batch = {stream_seq(msg): msg for msg in msgs}
        rows = await self.commit_bisecting(sorted(batch.items()))
        await self._after_commit(batch[max(batch)], rows)
        if rows:
            self.log.debug("projector.batch", events=len(batch), tasks=len(rows), watermark=self._committed)

    async def _commit_once(self, items: list[tuple[int, Any]]) -> list[TaskRow]:
        """One batch in one transaction: in one statement when every task it touches is
        cached (the lane's own state since the watermark it committed), else the long way."""
        self._task_keys = TaskKeys(self._keyring)
        await self._task_keys.load((key[0], key[1], msg.headers) for _, msg in items
                                   if (key := self._subject_keys[msg.subject]) is not None
                                   and self._ours(msg.subject, key))
        conn = await self._writer.get()
        decoded: tuple[list[tuple[int, Any]], list[tuple[int, Key, AnyEvent]], list[RejectionRow]] | None = None
        wm, projection = self._committed, self._projection
        await self._load_heads(conn, items)
        if wm is not None and projection is not None:
            fresh = [(seq, msg) for seq, msg in items if seq > wm]
            if fresh:
                await self._check_contiguous(wm, [seq for seq, _ in fresh])
                rejected: list[RejectionRow] = []
                events = self._decode(fresh, rejected)
                decoded = (fresh, events, list(rejected))
                if all(key in self._cache for _, key, _ in events):
                    rows = await self._write_fast(conn, fresh, events, rejected)
                    if rows is not None:
                        self._heads.update(self._pending)
                        return rows
        async with conn.transaction():
            wm = self._check_position(await self.store.lock_position(conn, self.name))
            fresh = [(seq, msg) for seq, msg in items if seq > wm]
            if decoded is not None and decoded[0] == fresh:  # checked and decoded above
                events, rejected = decoded[1], list(decoded[2])
            else:
                await self._check_contiguous(wm, [seq for seq, _ in fresh])
                rejected = []
                events = self._decode(fresh, rejected)
            rows = await self._apply(conn, wm, fresh, events, rejected) if fresh else []
        self._heads.update(self._pending)
        self._committed = fresh[-1][0] if fresh else wm
        self._rejected.extend(rejected)  # committed: tell the producers after the ack
        return rows

    async def _write_fast(self, conn: asyncpg.Connection, fresh: list[tuple[int, Any]],
                          events: list[tuple[int, Key, AnyEvent]],
                          rejections: list[RejectionRow]) -> list[TaskRow] | None:
        """Fold ``events`` into the cached states, assuming every id is new, and write the batch
        in one statement (``Store.write_batch``), guarded on the watermark being the one this
        lane committed last, in its projection; None when the guard refused it (nothing was
        written, the cache is dropped: the long way re-reads what it needs)."""
        wm, projection = self._committed, self._projection
        assert wm is not None and projection is not None
        first = _in_batch_firsts(events)
        rows, variables, turns = self._fold(events, first, rejections)
        try:
            await self.store.write_batch(
                conn, name=self.name, expected=wm, projection=projection, watermark=fresh[-1][0],
                claims=[(*k, seq) for k, seq in first.items()], tasks=rows, variables=variables,
                turns=turns, rejections=tag_rejections(keys_of(self.settings), rejections))
        except asyncpg.PostgresError as exc:
            if exc.sqlstate != REFUSED:
                raise
            self.log.info("projector.batch_refused", reason=safe_detail(exc), watermark=wm)
            self._cache.clear()  # folded for a statement that kept nothing
            return None
        self._committed = fresh[-1][0]
        self._rejected.extend(rejections)  # committed: tell the producers after the ack
        return rows

    async def _commit_poison(self, seq: int, msg: Any, exc: BaseException) -> None:
        """Record one message that cannot be written as a rejection row and move past it."""
        key = subject_key(self.settings.prefix, msg.subject) or subject_tokens(msg.subject)
        row = rejection_row((key[0], key[1], seq, event_id_of(msg.headers), "", "projection_error",
                             f"the projection could not store this message ({type(exc).__name__})"))
        conn = await self._writer.get()
        async with conn.transaction():
            wm = self._check_position(await self.store.lock_position(conn, self.name))
            if seq <= wm:
                return
            await self._check_contiguous(wm, [seq])
            await self.store.insert_rejections(conn, tag_rejections(keys_of(self.settings), [row]))
            await self.store.set_watermark(conn, seq, self.name)
        self._committed = seq
        task = subject_key(self.settings.prefix, msg.subject)
        if self._key_of is not None and task is not None and task in self._heads:
            # Moved past, not refused for its chain: the task's chain goes on after it.
            with contextlib.suppress(IntegrityViolationError):
                self._heads[task] = ledger_chain.check(self._heads[task], self._key_of, tenant=task[0],
                                                       task=task[1], seq=seq, body=msg.data,
                                                       headers=msg.headers)

    async def _apply(self, conn: asyncpg.Connection, wm: int, fresh: list[tuple[int, Any]],
                     events: list[tuple[int, Key, AnyEvent]],
                     rejections: list[RejectionRow]) -> list[TaskRow]:
        """Fold ``events`` (decoded from ``fresh``, sorted, past ``wm``) into the cache and write
        what it changed, in the caller's transaction; the rejections it records are appended
        to ``rejections``. Ids are claimed and states loaded first, as the fold needs them."""
        first = await self._first_occurrences(conn, events)
        missing = list({key for _, key, _ in events if key not in self._cache})
        if missing:
            key_of = keys_of(self.settings).mac_key_of
            for loaded in await self.store.load_states(conn, missing):
                check_loaded(loaded, key_of)  # never fold on from (and re-tag) an edited state
                self._cache.load(loaded)
        rows, variables, turns = self._fold(events, first, rejections)
        await self.store.upsert_tasks(conn, rows)
        # The variable, turn and rejection rows and the watermark: one statement, one round trip.
        await self.store.write_rest(conn, variables, turns, tag_rejections(keys_of(self.settings), rejections),
                                    fresh[-1][0], name=self.name)
        return rows

    def _fold(self, events: list[tuple[int, Key, AnyEvent]], first: dict[tuple[str, str, str], int],
              rejections: list[RejectionRow]) -> tuple[list[TaskRow], list[VariableRow], list[TurnRow]]:
        """Apply ``events`` to the cached states (every task's must be there or be new); the
        rows to write: the core row of every task touched, and only the variable and turn
        rows the reducer reported changed. ``first``: each id's first seq."""
        cache = self._cache
        changes: dict[Key, Changes] = {}
        changed: dict[Key, int] = {}
        for seq, key, event in events:
            before = len(rejections)
            first_seq = first[(key[0], key[1], event.event_id)]
            task_changes = changes.get(key)
            if task_changes is None:
                task_changes = changes[key] = Changes()
            fold_event(cache, key, event, seq, first_seq=None if first_seq == seq else first_seq,
                       changes=task_changes, rejections=rejections)
            changed[key] = seq
            if len(rejections) > before:
                self.log.info("projector.rejected", code=rejections[-1][5], tenant=key[0],
                              task=key[1], seq=seq)
        rows: list[TaskRow] = []
        variables: list[VariableRow] = []
        turns: list[TurnRow] = []
        keys = keys_of(self.settings)
        for key, seq in changed.items():
            state = cache[key]
            written: dict[str, bytes] = {}
            for name in changes[key].variables:
                data = written[name] = encode_variable(state.variables[name])
                variables.append((key[0], key[1], name, state.variables[name].seq, data))
            row = task_row(keys, key[0], key[1], seq, state, variables=cache.variable_rows(key, written))
            rows.append(row)
            turns.extend(turn_row(keys, key[0], key[1], t) for t in changes[key].turns)
            cache.touch(key)  # recently changed tasks live at the young end
            cache.note(key, len(row[3]), {name: len(data) for name, data in written.items()})
        return rows, variables, turns

    def _decode(self, fresh: list[tuple[int, Any]],
                rejections: list[RejectionRow]) -> list[tuple[int, Key, AnyEvent]]:
        """The events of ``fresh`` of this partition's tasks filed under their tasks; the
        other messages of this partition become rows, those of other partitions are passed by."""
        events: list[tuple[int, Key, AnyEvent]] = []
        keys = self._subject_keys
        if len(keys) > CACHE_MAX:
            keys.clear()
        if len(self._mine) > CACHE_MAX:
            self._mine.clear()
        self._pending = pending = {}
        for seq, msg in fresh:
            subject = msg.subject
            key = keys[subject]
            if not self._ours(subject, key):
                continue
            if self._key_of is not None and key is not None and not is_service_ledger(key):
                # The chain first: a message that does not link is never decoded nor folded.
                try:
                    broken = self._broken.get(key)
                    if broken is not None:
                        raise broken
                    head = pending[key] if key in pending else self._heads.get(key, GENESIS)
                    pending[key] = ledger_chain.check(head, self._key_of, tenant=key[0], task=key[1],
                                                      seq=seq, body=msg.data, headers=msg.headers)
                except IntegrityViolationError as exc:
                    rejections.append(chain_violation_row(key, seq, msg.headers, exc))
                    self.log.error("projector.integrity_violation", tenant=key[0], task=key[1], seq=seq)
                    continue
            filed = len(rejections)
            event = decode_message(key, msg.data, seq, msg.headers, rejections=rejections,
                                   subject=subject, keys=self._task_keys)
            if event is not None and key is not None:
                events.append((seq, key, event))
            elif len(rejections) == filed:  # a service ledger's, or erased: it only moves the watermark
                continue
            else:
                self.log.info("projector.rejected", code=rejections[-1][5], tenant=key[0] if key else "",
                         task=key[1] if key else "", seq=seq)
        return events

    def _ours(self, subject: str, key: Key | None) -> bool:
        """Whether a subject's messages are this partition's (decided once per subject)."""
        if self.partitions == 1:
            return True
        ours = self._mine.get(subject)
        if ours is None:
            # A subject that names no task is recorded (once) by partition 0.
            ours = self._mine[subject] = (partition_of(key[0], key[1], self.partitions)
                                          if key is not None else 0) == self.partition
        return ours

    async def _load_heads(self, conn: asyncpg.Connection, items: list[tuple[int, Any]]) -> None:
        """Know the chain head of every task of ``items`` this lane folds: a task not known yet
        is read back (its state, if it is not cached) and its head is the one its last folded
        message makes, read from the ledger at the state's watermark (one direct get per task
        not seen since the lane started; a task with no state starts at ``GENESIS``)."""
        if self._key_of is None:
            return
        if len(self._heads) > 2 * CACHE_MAX:
            self._forget_heads()
        keys = self._subject_keys
        wanted = {key for _, msg in items if (key := keys[msg.subject]) is not None
                  and not is_service_ledger(key) and key not in self._heads and key not in self._broken
                  and self._ours(msg.subject, key)}
        if not wanted:
            return
        missing = [key for key in wanted if key not in self._cache]
        if missing:
            for loaded in await self.store.load_states(conn, missing):
                self._cache.load(loaded)

        async def head(key: Key) -> None:
            state = self._cache.get(key)
            if state is None or not state.watermark:
                self._heads[key] = GENESIS
                return
            assert self._key_of is not None
            try:
                self._heads[key] = await chain_head_at(self._nc, self.settings, self._key_of, tenant=key[0],
                                                       task_id=key[1], seq=state.watermark)
            except IntegrityViolationError as exc:
                self._broken[key] = exc

        await asyncio.gather(*(head(key) for key in wanted))

    async def _first_occurrences(self, conn: asyncpg.Connection, events: list[tuple[int, Key, AnyEvent]]
                                 ) -> dict[tuple[str, str, str], int]:
        """The seq of the first occurrence of each (tenant, task, event id) of the batch.

        Idempotency past JetStream's dedupe window: the first occurrence of an id in
        the batch claims it in the ``applied_events`` index; an id the index already
        held keeps its recorded seq. An event whose seq is not its id's first is a
        duplicate (the reducer's rule, which replay applies in memory).
        """
        first = _in_batch_firsts(events)
        claimed = await self.store.claim_events(conn, [(*k, s) for k, s in first.items()])
        if len(claimed) < len(first):  # rare: ids consumed by an earlier batch
            first.update(await self.store.first_seqs(conn, [k for k in first if k not in claimed]))
        return first

    async def _after_commit(self, last: Any, rows: list[TaskRow]) -> None:
        """Ack the batch (AckAll: its highest sequence), notify, trim the cache."""
        try:
            await last.ack()
        except Exception:  # noqa: BLE001 - a lost ack means a redelivery, which is a no-op
            self.log.warning("projector.ack_failed", seq=last.metadata.sequence.stream)
        rejected, self._rejected = self._rejected, []
        metrics.projected(self.partition, self.durable, last)
        metrics.rejected(r[5] for r in rejected)
        for row in rows:
            self._rollback.note((row[0], row[1]), row[2])
        try:
            for tenant, task_id, seq, _, digest, _ in rows:
                await self._nc.publish(changed_subject(self.settings.prefix, tenant, task_id),
                                       encode(task_changed(tenant, task_id, seq, digest,
                                                           self._cache.get((tenant, task_id)))))
            for r in rejected:
                await self._nc.publish(rejected_subject(self.settings.prefix, r[0], r[1]),
                                       encode(EventRejected(tenant=r[0], task_id=r[1], seq=r[2],
                                                            event_id=r[3], kind=r[4], code=r[5],
                                                            reason=r[6])))
        except Exception:  # noqa: BLE001 - notifications are best effort; the rows are the record
            self.log.warning("projector.notify_failed")
        self._progress.set()
        self._cache.trim(CACHE_MAX, self.cache_bytes)

    async def _check_contiguous(self, wm: int, seqs: list[int]) -> None:
        """Raise ``OutOfOrderError`` if a stored message between ``wm`` and the batch was not delivered."""
        missing = await first_undelivered(self._nc, self.settings, ledger_wildcard(self.settings.prefix), wm, seqs)
        if missing is not None:
            raise OutOfOrderError(f"message {missing} was not delivered before the batch {seqs[0]}..{seqs[-1]}")


def _in_batch_firsts(events: list[tuple[int, Key, AnyEvent]]) -> dict[tuple[str, str, str], int]:
    """The seq of each (tenant, task, event id)'s first occurrence within the batch."""
    first: dict[tuple[str, str, str], int] = {}
    for seq, key, event in events:
        first.setdefault((key[0], key[1], event.event_id), seq)
    return first
