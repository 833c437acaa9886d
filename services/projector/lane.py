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
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

import asyncpg
import msgspec
import nats
import nats.js.errors
import structlog
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig, ConsumerInfo, DeliverPolicy

from agentledger.config import Settings
from agentledger.contracts.api import EventRejected
from agentledger.contracts.codec import encode
from agentledger.contracts.events import AnyEvent
from agentledger.core.checkpoint_policy import task_changed
from agentledger.core.state import Changes, core_hash, encode_core, encode_turn, encode_variable
from agentledger.services.projector.cache import StateCache
from agentledger.services.projector.puller import ConsumerLostError, Puller
from agentledger.services.projector.rebuild import (
    SubjectKeys,
    decode_message,
    fold_event,
    is_service_ledger,
    rejection_row,
    replace_live_with,
    stream_seq,
    subject_tokens,
)
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
)
from agentledger.shell.lifecycle import SERVER_AWAY_ERRORS
from agentledger.stores import db
from agentledger.stores.ledger import ledger_wildcard, partition_of, subject_key

log = structlog.get_logger()

DURABLE = "projector"
FETCH_TIMEOUT = 1.0
ACK_WAIT = 60.0
MAX_ACK_PENDING = 100_000
# A consumer that would re-deliver more than this many already-projected messages is recreated.
MAX_SKIP = 100_000
CACHE_MAX = 50_000
MAX_FAILURES = 30
# The loop turns at least once per fetch timeout; not turning for this long means it is stuck
# (an await that never returns, e.g. on a PostgreSQL that stopped answering): not alive.
LOOP_STALL_S = 30.0
# While PostgreSQL or NATS is away the loop retries this often, without counting failures.
OUTAGE_RETRY_S = 0.5


def durable_name(partition: int, partitions: int) -> str:
    """The durable consumer of one partition (``projector`` when there is one)."""
    return DURABLE if partitions == 1 else f"{DURABLE}-{partition}of{partitions}"


def changed_subject(prefix: str, tenant: str, task_id: str) -> str:
    return f"{prefix}.wm.changed.{tenant}.{task_id}"


def rejected_subject(prefix: str, tenant: str, task_id: str) -> str:
    """Where a producer learns that the reducer refused an event it appended (after the ack)."""
    return f"{prefix}.rejected.{tenant}.{task_id}"


class ProjectionChangedError(Exception):
    """The watermark is not the one this process committed: someone else wrote it."""


class OutOfOrderError(Exception):
    """The consumer delivered past a message that was never applied."""


class LedgerUnusableError(Exception):
    """The ledger stream is missing, or numbers below the watermark (it was deleted and
    recreated without continuing its sequence): projecting now would skip or misfile events."""


class LaneEndedError(Exception):
    """The projection was re-partitioned: this lane's partition is not one of it any more."""


# Errors a message's content can cause while its batch is written (a value PostgreSQL
# cannot store, a row too large, a state that does not encode): the batch is split so the
# other messages commit and the one that fails alone becomes a rejection row. Anything else
# (connection loss, a dropped projection, a constraint an operator added) fails the batch,
# which is retried as a whole from the watermark.
POISON_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.DataError, asyncpg.ProgramLimitExceededError, ValueError, TypeError, OverflowError,
    RecursionError, msgspec.MsgspecError)


class Lane:
    """Folds one partition of the ledger into PostgreSQL (see the module docstring).

    The process gives it its connections and what its lanes share: the NATS
    connection, the read pool, the live projection's SQL, the parsed subjects,
    the wake-up of readers waiting for a seq, and what to do when the lane gives up.
    """

    def __init__(self, settings: Settings, nc: Client, pool: asyncpg.Pool, partition: int,
                 partitions: int, *, store: Store, subject_keys: SubjectKeys,
                 progress: asyncio.Event, on_failure: Callable[[BaseException], None]) -> None:
        self.settings = settings
        self.partition, self.partitions = partition, partitions
        self.name = db.watermark_name(partition, partitions)
        self.durable = durable_name(partition, partitions)
        # Each lane holds its share of the state cache's budget.
        self.cache_bytes = max(1, settings.projector_cache_bytes // partitions)
        self.store = store
        self.log = log.bind(partition=partition) if partitions > 1 else log
        self._nc, self._pool = nc, pool
        self._subject_keys = subject_keys
        self._progress = progress
        self._on_failure = on_failure
        # Whether a subject's task is this partition's, decided once per subject.
        self._mine: dict[str, bool] = {}
        self._cache = StateCache()
        self._sub: Puller | None = None
        # The batches' own connection (reads use the pool): no pool release reset per batch.
        self._writer = db.BatchConnection(settings.database_url)
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        # True while a batch or an initialization is in flight (stop lets it finish).
        self._busy = False
        # Rejections committed but not yet announced.
        self._rejected: list[RejectionRow] = []
        # Watermark this lane committed last (None: not initialized), and in which
        # projection (the oid of its watermark table: ``replay`` switches in another one).
        self._committed: int | None = None
        self._projection: int | None = None
        self._turned = time.monotonic()
        self._outage: str | None = None

    @property
    def cache(self) -> StateCache:
        return self._cache

    @property
    def busy(self) -> bool:
        return self._busy

    @property
    def watermark(self) -> int | None:
        """The watermark this lane committed last."""
        return self._committed

    async def prime(self) -> None:
        """Initialize now, in the caller (errors reach it); ``start`` then begins with a batch."""
        await self._guarded(self._initialize())

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"projector-{self.durable}")

    @property
    def done(self) -> bool:
        return self._task is not None and self._task.done()

    def alive(self) -> bool:
        return self._task is not None and not self._task.done() and (
            time.monotonic() - self._turned < LOOP_STALL_S)

    async def stop(self) -> None:
        """Stop fetching, let the in-flight batch commit or roll back; idempotent."""
        self._stopping = True
        if self._task is not None:
            if not self._busy:
                self._task.cancel()  # idle in a fetch or a sleep: nothing to finish
            try:
                await asyncio.wait_for(asyncio.shield(self._task), timeout=15)
            except (TimeoutError, asyncio.CancelledError):
                self._task.cancel()
                await asyncio.gather(self._task, return_exceptions=True)
            except Exception as exc:  # noqa: BLE001 - already reported through on_failure
                log.debug("projector.run_ended", error=type(exc).__name__)
        if self._sub is not None:
            await self._sub.close()
            self._sub = None
        self._writer.drop()

    def evict(self, tenant: str, task_id: str | None) -> int:
        """Drop the cached states of a tenant (or of one of its tasks); call between batches."""
        states = [k for k in self._cache if k[0] == tenant and (task_id is None or k[1] == task_id)]
        for key in states:
            self._cache.pop(key, None)
        return len(states)

    # ---- initialization and consumer ----------------------------------------------------

    async def _initialize(self) -> None:
        """Derive everything from PostgreSQL: rebuild an empty projection, bind the consumer."""
        s = self.settings
        self._cache.clear()
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
            numbered = max(int(info.state.last_seq), int(info.state.first_seq) - 1)
            if wm > numbered:
                raise LedgerUnusableError(
                    f"the ledger stream numbers up to {numbered} but the projection is at {wm}: it "
                    "was deleted and recreated from the start; projecting would skip events. "
                    "Rebuild the projection from what the ledger holds now (`agentledger replay`)")
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
        """Make the durable consumer deliver from ``wm + 1`` and attach a fresh ``Puller``."""
        js = self._nc.jetstream()
        stream = self.settings.stream
        # Re-binding inside a running process: a pull request of the old puller may still be
        # open, so the consumer is always recreated (its open requests die with it).
        rebind = self._sub is not None
        if self._sub is not None:
            await self._sub.close()
            self._sub = None
        try:
            info: ConsumerInfo | None = await js.consumer_info(stream, self.durable)
        except nats.js.errors.NotFoundError:
            info = None
        if info is not None and (rebind or not self._consumer_agrees(info, wm)):
            self.log.info("projector.consumer_reset", watermark=wm,
                     ack_floor=info.ack_floor.stream_seq if info.ack_floor else None,
                     delivered=info.delivered.stream_seq if info.delivered else None)
            await js.delete_consumer(stream, self.durable)
            info = None
        if info is None:
            await js.add_consumer(stream, ConsumerConfig(
                name=self.durable, durable_name=self.durable, filter_subject=ledger_wildcard(self.settings.prefix),
                ack_policy=AckPolicy.ALL, deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=wm + 1, ack_wait=ACK_WAIT, max_ack_pending=MAX_ACK_PENDING,
                max_waiting=16, num_replicas=1, mem_storage=True,
                description=f"agentledger projector, partition {self.partition} of"
                f" {self.partitions} (position follows PostgreSQL)"))
        self._sub = Puller(self._nc, stream, self.durable)
        await self._sub.start()

    def _consumer_agrees(self, info: ConsumerInfo, wm: int) -> bool:
        cfg = info.config
        if (cfg.filter_subject != ledger_wildcard(self.settings.prefix)
                or cfg.ack_policy != AckPolicy.ALL
                or cfg.deliver_subject or cfg.num_replicas != 1 or not cfg.mem_storage):
            return False
        floor = info.ack_floor.stream_seq if info.ack_floor else 0
        delivered = info.delivered.stream_seq if info.delivered else 0
        # Beyond the watermark nothing may be delivered-but-unapplied (it would be skipped),
        # and re-delivering a long stretch of applied messages is wasted work.
        return floor <= wm and delivered <= wm and wm - floor <= MAX_SKIP

    # ---- the loop ---------------------------------------------------------------------------

    async def _run(self) -> None:
        failures = 0
        try:
            while not self._stopping:
                self._turned = time.monotonic()
                try:
                    if await self._step():
                        failures = 0
                        self._servers_back()
                except asyncio.CancelledError:
                    raise
                except (*SERVER_AWAY_ERRORS, LedgerUnusableError) as exc:
                    if self._stopping:
                        break
                    await self._wait_out(exc)
                except LaneEndedError as exc:
                    self.log.info("projector.partition_ended", reason=str(exc))
                    return
                except (ProjectionMissingError, ProjectionChangedError) as exc:
                    # Someone dropped or rebuilt the projection: start over from PostgreSQL.
                    self.log.info("projector.projection_reset", reason=str(exc))
                    await self._reset()
                except Exception as exc:
                    if self._stopping:
                        break
                    failures += 1
                    # A deleted consumer is recreated from the watermark by the reset below.
                    self.log.warning("projector.consumer_lost" if isinstance(exc, ConsumerLostError)
                                else "projector.batch_failed", failures=failures,
                                error=type(exc).__name__, detail=_safe(exc), watermark=self._committed)
                    await self._reset()
                    if failures >= MAX_FAILURES:
                        raise
                    await asyncio.sleep(min(0.05 * 2 ** failures, 5.0))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self.log.error("projector.failed", error=type(exc).__name__, detail=_safe(exc))
            self._on_failure(exc)
            raise

    async def _step(self) -> bool:
        """One turn of the loop: initialize, fetch and apply one batch (or check when idle).

        True when the turn reached the servers and found them well.
        """
        if self._committed is None or self._sub is None:
            await self._guarded(self._initialize())
        assert self._sub is not None
        try:
            msgs = await self._sub.fetch(self.settings.projector_batch, FETCH_TIMEOUT,
                                         self.settings.projector_linger_ms / 1000)
        except TimeoutError:
            await self._idle_check()
            return True
        await self._guarded(self._process(msgs))
        return True

    async def _wait_out(self, exc: BaseException) -> None:
        """A server is away, or the ledger unusable: wait without counting failures (restarting
        the process would not fix it sooner), then start over from PostgreSQL.

        Reads keep answering from the rows meanwhile. One log line per change of reason,
        not one per retry; an unusable ledger is an error an operator must see.
        """
        unusable = isinstance(exc, LedgerUnusableError)
        reason = f"{type(exc).__name__}: {_safe(exc)}"
        if reason != self._outage:
            self.log.log(logging.ERROR if unusable else logging.WARNING,
                    "projector.waiting_for_servers", reason=reason, watermark=self._committed)
            self._outage = reason
        await self._reset()
        await asyncio.sleep(OUTAGE_RETRY_S * (4 if unusable else 1))

    def _servers_back(self) -> None:
        if self._outage is not None:
            self.log.info("projector.servers_back", watermark=self._committed)
            self._outage = None

    async def _guarded(self, work: Coroutine[Any, Any, None]) -> None:
        """Run work that ``stop`` lets finish rather than cancel."""
        self._busy = True
        try:
            await work
        finally:
            self._busy = False

    async def _reset(self) -> None:
        """Forget everything derived: the next iteration re-derives it from PostgreSQL."""
        self._cache.clear()
        self._committed = self._projection = None
        self._writer.drop()  # plans cached against dropped tables go with it
        await self._pool.expire_connections()  # drop plans cached against dropped tables



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
        rows = await self._commit(sorted(batch.items()))
        await self._after_commit(batch[max(batch)], rows)
        if rows:
            self.log.debug("projector.batch", events=len(batch), tasks=len(rows), watermark=self._committed)

    async def _commit(self, items: list[tuple[int, Any]]) -> list[TaskRow]:
        """Commit ``items`` (sorted); a transaction that a message's content fails is bisected.

        The halves commit on their own; a single message that still fails becomes a
        ``projection_error`` rejection row, so the same batch is never retried forever.
        """
        try:
            return await self._commit_once(items)
        except POISON_ERRORS as exc:
            self._cache.clear()  # states were folded in memory for a transaction that rolled back
            if len(items) > 1:
                self.log.warning("projector.batch_split", events=len(items), first=items[0][0],
                            last=items[-1][0], error=type(exc).__name__)
                mid = len(items) // 2
                return await self._commit(items[:mid]) + await self._commit(items[mid:])
            seq, msg = items[0]
            self.log.error("projector.poison_message", seq=seq, error=type(exc).__name__,
                      detail=_safe(exc))
            await self._commit_poison(seq, msg, exc)
            return []

    async def _commit_once(self, items: list[tuple[int, Any]]) -> list[TaskRow]:
        """One batch in one transaction: in one statement when every task it touches is
        cached (the lane's own state since the watermark it committed), else the long way."""
        conn = await self._writer.get()
        decoded: tuple[list[tuple[int, Any]], list[tuple[int, Key, AnyEvent]], list[RejectionRow]] | None = None
        wm, projection = self._committed, self._projection
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
                turns=turns, rejections=rejections)
        except asyncpg.PostgresError as exc:
            if exc.sqlstate != REFUSED:
                raise
            self.log.info("projector.batch_refused", reason=_safe(exc), watermark=wm)
            self._cache.clear()  # folded for a statement that kept nothing
            return None
        self._committed = fresh[-1][0]
        self._rejected.extend(rejections)  # committed: tell the producers after the ack
        return rows

    async def _commit_poison(self, seq: int, msg: Any, exc: BaseException) -> None:
        """Record one message that cannot be written as a rejection row and move past it."""
        key = subject_key(self.settings.prefix, msg.subject) or subject_tokens(msg.subject)
        headers = msg.headers or {}
        mid = headers.get("Nats-Msg-Id") or ""
        row = rejection_row((key[0], key[1], seq, mid.rsplit("/", 1)[-1], "", "projection_error",
                             f"the projection could not store this message ({type(exc).__name__})"))
        conn = await self._writer.get()
        async with conn.transaction():
            wm = self._check_position(await self.store.lock_position(conn, self.name))
            if seq <= wm:
                return
            await self._check_contiguous(wm, [seq])
            await self.store.insert_rejections(conn, [row])
            await self.store.set_watermark(conn, seq, self.name)
        self._committed = seq

    async def _apply(self, conn: asyncpg.Connection, wm: int, fresh: list[tuple[int, Any]],
                     events: list[tuple[int, Key, AnyEvent]],
                     rejections: list[RejectionRow]) -> list[TaskRow]:
        """Fold ``events`` (decoded from ``fresh``, sorted, past ``wm``) into the cache and write
        what it changed, in the caller's transaction; the rejections it records are appended
        to ``rejections``. Ids are claimed and states loaded first, as the fold needs them."""
        first = await self._first_occurrences(conn, events)
        missing = list({key for _, key, _ in events if key not in self._cache})
        if missing:
            for loaded in await self.store.load_states(conn, missing):
                self._cache.load(loaded)
        rows, variables, turns = self._fold(events, first, rejections)
        await self.store.upsert_tasks(conn, rows)
        # The variable, turn and rejection rows and the watermark: one statement, one round trip.
        await self.store.write_rest(conn, variables, turns, rejections, fresh[-1][0], name=self.name)
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
        for key, seq in changed.items():
            state = cache[key]
            core = encode_core(state)
            rows.append((key[0], key[1], seq, core, core_hash(core)))
            written: dict[str, int] = {}
            for name in changes[key].variables:
                data = encode_variable(state.variables[name])
                variables.append((key[0], key[1], name, state.variables[name].seq, data))
                written[name] = len(data)
            turns.extend((key[0], key[1], t.ordinal, t.seq, encode_turn(t)) for t in changes[key].turns)
            cache.touch(key)  # recently changed tasks live at the young end
            cache.note(key, len(core), written)
        return rows, variables, turns

    def _decode(self, fresh: list[tuple[int, Any]],
                rejections: list[RejectionRow]) -> list[tuple[int, Key, AnyEvent]]:
        """The events of ``fresh`` of this partition's tasks filed under their tasks; the
        other messages of this partition become rows, those of other partitions are passed by."""
        events: list[tuple[int, Key, AnyEvent]] = []
        keys, mine = self._subject_keys, self._mine
        if len(keys) > CACHE_MAX:
            keys.clear()
        if len(mine) > CACHE_MAX:
            mine.clear()
        for seq, msg in fresh:
            subject = msg.subject
            key = keys[subject]
            if self.partitions > 1:
                ours = mine.get(subject)
                if ours is None:
                    # A subject that names no task is recorded (once) by partition 0.
                    ours = mine[subject] = (partition_of(key[0], key[1], self.partitions)
                                            if key is not None else 0) == self.partition
                if not ours:
                    continue
            event = decode_message(key, msg.data, seq, msg.headers, rejections=rejections,
                                   subject=subject)
            if event is not None and key is not None:
                events.append((seq, key, event))
            elif not is_service_ledger(key):  # memory and document events only move the watermark
                self.log.info("projector.rejected", code=rejections[-1][5], tenant=key[0] if key else "",
                         task=key[1] if key else "", seq=seq)
        return events

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
        try:
            for tenant, task_id, seq, _, digest in rows:
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
        expected = wm + 1
        for seq in seqs:
            if seq != expected:
                try:
                    nxt = await self._nc.jetstream().get_msg(
                        self.settings.stream, seq=expected, subject=ledger_wildcard(self.settings.prefix),
                        next=True)
                except nats.js.errors.NotFoundError:
                    nxt = None
                if nxt is not None and nxt.seq is not None and nxt.seq < seq:
                    raise OutOfOrderError(f"message {nxt.seq} was not delivered before {seq}")
            expected = seq + 1


def _in_batch_firsts(events: list[tuple[int, Key, AnyEvent]]) -> dict[tuple[str, str, str], int]:
    """The seq of each (tenant, task, event id)'s first occurrence within the batch."""
    first: dict[tuple[str, str, str], int] = {}
    for seq, key, event in events:
        first.setdefault((key[0], key[1], event.event_id), seq)
    return first


def _safe(exc: BaseException) -> str:
    """An exception's text, bounded (our errors never carry event content)."""
    return str(exc)[:300]
