"""The live loop of a projection of a reserved per-tenant ledger subject.

The memory projection (``_memory``) and the document index (``_documents``)
each fold one reserved task of every tenant into their own tables, with the
same machinery: a durable pull consumer (AckAll) filtered on
``<prefix>.ledger.*.<task>``, always (re)created to deliver from PostgreSQL's
``watermark + 1``; each fetched batch applied in ONE transaction that row-locks
the watermark, skips messages at or below it (a redelivery is a no-op), checks
that no message of the subject between the watermark and the batch was left
out, writes the rows and moves the watermark; then the batch is acked. A
watermark this process did not write (a replay rebuilt the projection) makes
it start over from the new one; a server away is waited out without counting
failures.

One instance folds at a time: the projection runs only in the process that
holds its PostgreSQL advisory lock (``leader``; a key derived from the durable's
name), on a connection of its own; other instances of the service wait as
standbys, retry the lock every second and take over when the holder's session
ends. Their endpoints serve meanwhile (reads wait for the committed watermark).
The watermark check of every batch keeps even a second folder exact.

No message can stop a projection (every tenant's memory, documents and
forget requests wait behind the one that does). A message no fold can store
(a string holding U+0000, nesting deeper than the contracts allow) is taken
out of its batch before ``apply`` sees it, and a message whose batch still
fails on its content (a PostgreSQL data error, a value the fold cannot take)
is found by bisecting the batch, the rest committing; either becomes a row of
``projection_rejections`` (the consumer's name, the sequence, a code and a
reason without content) written with the watermark that passes it. A rebuild
and ``replay --verify`` pass over the same messages (``unfoldable`` and the
recorded sequences), so they still equal the live rows.

Only what a batch does to the rows differs, so ``LedgerProjection`` is the
rest and each projection supplies its subject filter, its store and ``apply``:
a fix to the loop is made once for all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import asyncpg
import blake3
import nats.js.errors
import structlog
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from agentledger.config import Settings
from agentledger.contracts.codec import MAX_DEPTH, nesting_path, nul_path
from agentledger.errors import UnavailableError
from agentledger.services.projector.lane import POISON_ERRORS
from agentledger.services.projector.puller import Puller
from agentledger.services.projector.rebuild import stream_seq
from agentledger.shell.lifecycle import SERVER_AWAY_ERRORS
from agentledger.stores import db

log = structlog.get_logger()

FETCH_TIMEOUT = 1.0
ACK_WAIT = 60.0
# The loop turns at least once per fetch timeout; not turning for this long: not alive.
LOOP_STALL_S = 30.0
OUTAGE_RETRY_S = 0.5
MAX_FAILURES = 30
# A standby retries the leadership lock this often.
LEADER_RETRY_S = 1.0


_RECORD_REJECTION = ("INSERT INTO projection_rejections(projection, seq, code, reason)"
                     " SELECT $1, u.seq, u.code, u.reason FROM unnest($2::bigint[], $3::text[], $4::text[])"
                     " AS u(seq, code, reason) ON CONFLICT DO NOTHING")


def unfoldable(data: bytes) -> tuple[str, str] | None:
    """(code, reason) when no fold can store this message's body, else None.

    The same answer for the same bytes, so the live projection, a rebuild and a verify
    pass over the same messages. The reason names no content (not even the path, whose
    keys are the sender's).
    """
    if nesting_path(data, MAX_DEPTH) is not None:
        return "too_deep", f"nested deeper than {MAX_DEPTH} levels of objects and arrays"
    if nul_path(data) is not None:
        return "invalid_text", "a string holds U+0000, which PostgreSQL cannot store"
    return None


async def record_rejections(conn: asyncpg.Connection, projection: str,
                            rejected: list[tuple[int, str, str]]) -> None:
    """Record (seq, code, reason) as messages ``projection`` passed over."""
    await conn.execute(_RECORD_REJECTION, projection, [r[0] for r in rejected], [r[1] for r in rejected],
                       [r[2] for r in rejected])


async def passed_over(conn: Any, projection: str) -> frozenset[int]:
    """The sequences ``projection`` recorded as passed over."""
    rows = await conn.fetch("SELECT seq FROM projection_rejections WHERE projection = $1", projection)
    return frozenset(int(r[0]) for r in rows)


def leader_key(durable: str) -> int:
    """The advisory lock (a signed 64-bit key) of the projection behind ``durable``."""
    return int.from_bytes(blake3.blake3(f"agentledger-projection/{durable}".encode()).digest(8),
                          "big", signed=True)


class WatermarkStore(Protocol):
    """The watermark row a projection keeps in the same transaction as its rows."""

    async def watermark(self, conn: Any) -> int | None: ...

    async def lock_watermark(self, conn: asyncpg.Connection) -> tuple[int, int] | None:
        """(seq, oid of the watermark table), row-locked until the end of the transaction."""
        ...

    async def set_watermark(self, conn: asyncpg.Connection, seq: int) -> None: ...


StoreT = TypeVar("StoreT", bound=WatermarkStore)


class ProjectionChangedError(Exception):
    """The watermark is not the one this process committed: a rebuild replaced the projection."""


class LedgerProjection(Generic[StoreT]):
    """Folds one reserved ledger subject into PostgreSQL; see the module docstring.

    ``start()``, ``stop()``, ``alive()``, ``wait_for(seq)``, ``failed``, and
    ``applied`` (the highest seq known applied, for read-your-writes). A
    projection sets the class attributes and implements ``filter_subject`` and
    ``apply``.
    """

    # The durable consumer's name.
    durable: ClassVar[str]
    # The namespace of the log events ("memory" → "memory.batch").
    log_name: ClassVar[str]
    # The word for it in messages ("memory" → "the memory projection is at seq ...").
    noun: ClassVar[str]
    # The consumer's description on the server.
    description: ClassVar[str]

    def __init__(self, settings: Settings, nc: Client, pool: asyncpg.Pool, store: StoreT) -> None:
        self.settings = settings
        self.store = store
        self._nc = nc
        self._pool = pool
        self._sub: Puller | None = None
        self._writer = db.BatchConnection(settings.database_url)
        # Holds the leadership lock while this instance folds (``leader``).
        self._lock_conn: asyncpg.Connection | None = None
        self.leader = False
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._busy = False
        # Committed watermark and projection (the watermark table's oid); None: not bound.
        self._committed: int | None = None
        self._projection: int | None = None
        self._progress = asyncio.Event()
        self._turned = time.monotonic()
        self._outage: str | None = None
        self.failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Highest seq known applied (read-your-writes), kept across rebinds.
        self.applied = 0
        # What ``apply`` passed over in the batch being committed (``pass_over``).
        self._passed: list[tuple[int, str, str]] = []

    def filter_subject(self) -> str:
        """The subject filter of the consumer: ``<prefix>.ledger.*.<reserved task>``."""
        raise NotImplementedError

    async def apply(self, conn: asyncpg.Connection, fresh: list[tuple[int, Any]]) -> dict[str, int]:
        """Fold ``fresh`` (seq, message), in ledger order, into the rows inside the batch's
        transaction; counts for the batch's log line. A message that is not an event of the
        subject is given to ``pass_over``."""
        raise NotImplementedError

    def pass_over(self, seq: int, code: str, reason: str) -> None:
        """Record that ``apply`` passed over the message at ``seq`` (in the batch's transaction)."""
        self._passed.append((seq, code, reason))

    async def start(self) -> None:
        await self._lead()
        if self.leader:
            await self._initialize()
        else:
            log.info(f"{self.log_name}.standby", reason="another instance folds this projection")
        self._task = asyncio.create_task(self._run(), name=f"{self.noun}-projection")

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            if not self._busy:
                self._task.cancel()
            try:
                await asyncio.wait_for(asyncio.shield(self._task), timeout=15)
            except (TimeoutError, asyncio.CancelledError):
                self._task.cancel()
                await asyncio.gather(self._task, return_exceptions=True)
            except Exception as exc:  # noqa: BLE001 - reported through ``failed`` already
                log.debug(f"{self.log_name}.projection_ended", error=type(exc).__name__)
        if self._sub is not None:
            await self._sub.close()
        self._writer.drop()
        if self._lock_conn is not None and not self._lock_conn.is_closed():
            await self._lock_conn.close()

    async def _lead(self) -> None:
        """Take the leadership lock if it is free (on a connection of its own, kept while leading)."""
        if self._lock_conn is None or self._lock_conn.is_closed():
            self._lock_conn = await db.connect(self.settings.database_url)
        if await self._lock_conn.fetchval("SELECT pg_try_advisory_lock($1)", leader_key(self.durable)):
            self.leader = True
            log.info(f"{self.log_name}.leader")

    def alive(self) -> bool:
        return (self._task is not None and not self._task.done()
                and time.monotonic() - self._turned < LOOP_STALL_S)

    async def wait_for(self, seq: int, timeout_s: float) -> None:
        """Return once the projection has applied ``seq``; ``UnavailableError`` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while self.applied < seq:
            left = deadline - time.monotonic()
            if left <= 0:
                raise UnavailableError(f"the {self.noun} projection is at seq {self.applied}, not yet at "
                                       f"{seq}; retry", code="projection_behind")
            self._progress.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._progress.wait(), timeout=min(left, 0.05))
            if self.applied < seq:  # a standby process: read the committed watermark
                wm = await self.store.watermark(self._pool)
                self.applied = max(self.applied, wm or 0)

    # ---- consumer ------------------------------------------------------------------------

    async def _initialize(self) -> None:
        await db.migrate(self.settings.database_url)
        conn = await self._writer.get()
        async with conn.transaction():
            position = await self.store.lock_watermark(conn)
        if position is None:
            raise ProjectionChangedError(f"the {self.noun} watermark row is missing")
        await self._bind(position[0])
        self._committed, self._projection = position
        self.applied = max(self.applied, position[0])
        log.info(f"{self.log_name}.projection_initialized", watermark=position[0])

    async def _bind(self, wm: int) -> None:
        js = self._nc.jetstream()
        stream = self.settings.stream
        if self._sub is not None:
            await self._sub.close()
            self._sub = None
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await js.delete_consumer(stream, self.durable)
        await js.add_consumer(stream, ConsumerConfig(
            name=self.durable, durable_name=self.durable, filter_subject=self.filter_subject(),
            ack_policy=AckPolicy.ALL, deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=wm + 1, ack_wait=ACK_WAIT, max_ack_pending=100_000, max_waiting=16,
            # One replica in memory: the position is PostgreSQL's (see ``lane``).
            num_replicas=1, mem_storage=True, description=self.description))
        self._sub = Puller(self._nc, stream, self.durable)
        await self._sub.start()

    # ---- the loop --------------------------------------------------------------------------

    async def _run(self) -> None:
        name = self.log_name
        failures = 0
        try:
            while not self._stopping:
                self._turned = time.monotonic()
                try:
                    await self._step()
                    failures = 0
                    if self._outage is not None:
                        log.info(f"{name}.servers_back", watermark=self._committed)
                        self._outage = None
                except asyncio.CancelledError:
                    raise
                except SERVER_AWAY_ERRORS as exc:
                    if self._stopping:
                        break
                    await self._wait_out(exc)
                except ProjectionChangedError as exc:
                    log.info(f"{name}.projection_reset", reason=str(exc))
                    self._reset()
                except Exception as exc:
                    if self._stopping:
                        break
                    failures += 1
                    log.warning(f"{name}.batch_failed", failures=failures, error=type(exc).__name__,
                                detail=str(exc)[:300], watermark=self._committed)
                    self._reset()
                    if failures >= MAX_FAILURES:
                        raise
                    await asyncio.sleep(min(0.05 * 2 ** failures, 5.0))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            log.error(f"{name}.projection_failed", error=type(exc).__name__, detail=str(exc)[:300])
            if not self.failed.done():
                self.failed.set_exception(exc)
            raise

    async def _wait_out(self, exc: BaseException) -> None:
        """A server is away: wait without counting failures, then start over from PostgreSQL."""
        reason = f"{type(exc).__name__}: {str(exc)[:200]}"
        if reason != self._outage:
            log.warning(f"{self.log_name}.waiting_for_servers", reason=reason)
            self._outage = reason
        self._reset()
        await asyncio.sleep(OUTAGE_RETRY_S)

    def _reset(self) -> None:
        self._committed = self._projection = None
        self._writer.drop()
        if self._lock_conn is None or self._lock_conn.is_closed():
            self.leader = False  # its lock went with its session: another instance may lead now

    async def _step(self) -> None:
        if not self.leader:
            await self._lead()
            if not self.leader:
                await asyncio.sleep(LEADER_RETRY_S)
                return
        if self._committed is None or self._sub is None:
            await self._initialize()
        assert self._sub is not None
        try:
            msgs = await self._sub.fetch(self.settings.projector_batch, FETCH_TIMEOUT)
        except TimeoutError:
            await self._idle_check()
            return
        self._busy = True
        try:
            await self._commit({stream_seq(m): m for m in msgs})
        finally:
            self._busy = False

    async def _idle_check(self) -> None:
        async with self._pool.acquire() as conn, conn.transaction():
            position = await self.store.lock_watermark(conn)
        self._check(position)

    def _check(self, position: tuple[int, int] | None) -> int:
        if position is None or position != (self._committed, self._projection):
            raise ProjectionChangedError(f"{self.noun} watermark is {position}, this process committed "
                                         f"{(self._committed, self._projection)}")
        return position[0]

    async def _commit(self, batch: dict[int, Any]) -> None:
        await self._commit_items(sorted(batch.items()))
        try:
            await batch[max(batch)].ack()
        except Exception:  # noqa: BLE001 - a lost ack is a redelivery, which the watermark skips
            log.warning(f"{self.log_name}.ack_failed")
        self._progress.set()

    async def _commit_items(self, items: list[tuple[int, Any]]) -> None:
        """Commit ``items`` (sorted); a transaction that a message's content fails is bisected,
        the halves committing on their own, and a single message that still fails it is
        recorded as passed over, so the same batch is never retried forever."""
        try:
            await self._commit_once(items)
        except POISON_ERRORS as exc:
            if len(items) > 1:
                log.warning(f"{self.log_name}.batch_split", events=len(items), first=items[0][0],
                            last=items[-1][0], error=type(exc).__name__)
                mid = len(items) // 2
                await self._commit_items(items[:mid])
                await self._commit_items(items[mid:])
                return
            seq = items[0][0]
            log.error(f"{self.log_name}.poison_message", seq=seq, error=type(exc).__name__)
            await self._commit_once(items, poison=f"the projection could not store this message "
                                                  f"({type(exc).__name__})")

    async def _commit_once(self, items: list[tuple[int, Any]], poison: str | None = None) -> None:
        """One transaction: the messages above the watermark folded (or, with ``poison``, the
        one message recorded as ``projection_error``), the watermark moved past them."""
        conn = await self._writer.get()
        async with conn.transaction():
            wm = self._check(await self.store.lock_watermark(conn))
            fresh = [(seq, msg) for seq, msg in items if seq > wm]
            if fresh:
                await self._check_contiguous(wm, fresh[0][0])
                if poison is not None:
                    rejected, foldable = [(seq, "projection_error", poison) for seq, _ in fresh], []
                else:
                    rejected, foldable = [], []
                    for seq, msg in fresh:
                        why = unfoldable(msg.data)
                        if why is None:
                            foldable.append((seq, msg))
                        else:
                            rejected.append((seq, *why))
                            log.warning(f"{self.log_name}.unfoldable", seq=seq, code=why[0])
                self._passed = []
                counts = await self.apply(conn, foldable) if foldable else {}
                rejected += self._passed
                if rejected:
                    await record_rejections(conn, self.durable, rejected)
                await self.store.set_watermark(conn, fresh[-1][0])
                log.debug(f"{self.log_name}.batch", events=len(fresh), **counts, rejected=len(rejected),
                          watermark=fresh[-1][0])
        if fresh:
            self._committed = fresh[-1][0]
            self.applied = max(self.applied, self._committed)

    async def _check_contiguous(self, wm: int, first: int) -> None:
        """Refuse a batch that starts after a message of the subject the consumer never delivered."""
        if first == wm + 1:
            return
        try:
            nxt = await self._nc.jetstream().get_msg(
                self.settings.stream, seq=wm + 1, subject=self.filter_subject(), next=True)
        except nats.js.errors.NotFoundError:
            return
        if nxt.seq is not None and nxt.seq < first:
            raise ProjectionChangedError(f"{self.noun} message {nxt.seq} was not delivered before {first}")


