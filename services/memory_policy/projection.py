"""The memory projection, live: ``_memory`` subjects of the ledger → the memory tables.

A durable pull consumer ``memory-policy`` (AckAll) filtered on
``<prefix>.ledger.*._memory``. PostgreSQL's ``memory_watermark`` is the truth:
the consumer is always (re)created to deliver from ``watermark + 1``. Each
fetched batch is applied in ONE transaction that row-locks the watermark,
skips messages at or below it (a redelivery is a no-op), checks that no memory
message between the watermark and the batch was left out, reads back the part
of each tenant's state the batch touches, folds it with the reducer, writes
only the groups and rows that changed, and moves the watermark; then the batch
is acked. A watermark this process did not write (``replay`` rebuilt the
projection) makes it start over from the new one.

A message on a memory subject that is not a memory event of that tenant (the
writer lets none through) is logged and passed over: it only moves the
watermark. ``applied`` and ``wait_for`` give the service read-your-writes: a
decision waits until the projection holds the decisions appended before it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import defaultdict
from typing import Any

import asyncpg
import msgspec
import nats.js.errors
import structlog
from nats.aio.client import Client
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from agentledger import db
from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.errors import UnavailableError
from agentledger.ledger import subject_key
from agentledger.lifecycle import SERVER_AWAY_ERRORS
from agentledger.services.memory_policy.fold import Folded, Vectors, fold, load_state, write_loaded
from agentledger.services.memory_policy.store import MemoryStore
from agentledger.services.projector.puller import Puller
from agentledger.services.projector.rebuild import stream_seq

log = structlog.get_logger()

DURABLE = "memory-policy"
FETCH_TIMEOUT = 1.0
ACK_WAIT = 60.0
# The loop turns at least once per fetch timeout; not turning for this long: not alive.
LOOP_STALL_S = 30.0
OUTAGE_RETRY_S = 0.5
MAX_FAILURES = 30

_decoder = msgspec.json.Decoder(ev.AnyEvent)


def memory_filter(prefix: str) -> str:
    """The ledger subjects of every tenant's memory: ``<prefix>.ledger.*._memory``."""
    return f"{prefix}.ledger.*.{ev.MEMORY_TASK}"


class ProjectionChangedError(Exception):
    """The watermark is not the one this process committed: a rebuild replaced the projection."""


def decode_memory(prefix: str, subject: str, data: bytes, seq: int) -> ev.EventBase | None:
    """The memory event a message on a memory subject carries, or None (logged) if it is not one."""
    key = subject_key(prefix, subject)
    try:
        event = _decoder.decode(data)
    except (msgspec.MsgspecError, RecursionError) as exc:
        log.warning("memory.undecodable", seq=seq, error=type(exc).__name__)
        return None
    if key is None or ev.kind_of(event) not in ev.MEMORY_KINDS or (event.tenant, event.task_id) != key:
        log.warning("memory.not_a_memory_event", seq=seq, kind=ev.kind_of(event))
        return None
    return event


def by_tenant(events: list[tuple[int, ev.EventBase]]) -> dict[str, list[tuple[int, ev.EventBase]]]:
    out: dict[str, list[tuple[int, ev.EventBase]]] = defaultdict(list)
    for seq, event in events:
        out[event.tenant].append((seq, event))
    return out


class MemoryProjection:
    """Folds the memory subjects into PostgreSQL; see the module docstring."""

    def __init__(self, settings: Settings, nc: Client, pool: asyncpg.Pool, vectors: Vectors) -> None:
        self.settings = settings
        self.store = MemoryStore()
        self._nc = nc
        self._pool = pool
        self._vectors = vectors
        self._sub: Puller | None = None
        self._writer: asyncpg.Connection | None = None
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

    async def start(self) -> None:
        await self._initialize()
        self._task = asyncio.create_task(self._run(), name="memory-projection")

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
                log.debug("memory.projection_ended", error=type(exc).__name__)
        if self._sub is not None:
            await self._sub.close()
        self._drop_writer()

    def alive(self) -> bool:
        return (self._task is not None and not self._task.done()
                and time.monotonic() - self._turned < LOOP_STALL_S)

    async def wait_for(self, seq: int, timeout_s: float) -> None:
        """Return once the projection has applied ``seq``; ``UnavailableError`` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while self.applied < seq:
            left = deadline - time.monotonic()
            if left <= 0:
                raise UnavailableError(f"the memory projection is at seq {self.applied}, not yet at "
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
        conn = await self._conn()
        async with conn.transaction():
            position = await self.store.lock_watermark(conn)
        if position is None:
            raise ProjectionChangedError("the memory watermark row is missing")
        await self._bind(position[0])
        self._committed, self._projection = position
        self.applied = max(self.applied, position[0])
        log.info("memory.projection_initialized", watermark=position[0])

    async def _bind(self, wm: int) -> None:
        js = self._nc.jetstream()
        stream = self.settings.stream
        if self._sub is not None:
            await self._sub.close()
            self._sub = None
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await js.delete_consumer(stream, DURABLE)
        await js.add_consumer(stream, ConsumerConfig(
            name=DURABLE, durable_name=DURABLE, filter_subject=memory_filter(self.settings.prefix),
            ack_policy=AckPolicy.ALL, deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=wm + 1, ack_wait=ACK_WAIT, max_ack_pending=100_000, max_waiting=16,
            description="agentledger memory projection (position follows PostgreSQL)"))
        self._sub = Puller(self._nc, stream, DURABLE)
        await self._sub.start()

    # ---- the loop --------------------------------------------------------------------------

    async def _run(self) -> None:
        failures = 0
        try:
            while not self._stopping:
                self._turned = time.monotonic()
                try:
                    await self._step()
                    failures = 0
                    if self._outage is not None:
                        log.info("memory.servers_back", watermark=self._committed)
                        self._outage = None
                except asyncio.CancelledError:
                    raise
                except SERVER_AWAY_ERRORS as exc:
                    if self._stopping:
                        break
                    await self._wait_out(exc)
                except ProjectionChangedError as exc:
                    log.info("memory.projection_reset", reason=str(exc))
                    self._reset()
                except Exception as exc:
                    if self._stopping:
                        break
                    failures += 1
                    log.warning("memory.batch_failed", failures=failures, error=type(exc).__name__,
                                detail=str(exc)[:300], watermark=self._committed)
                    self._reset()
                    if failures >= MAX_FAILURES:
                        raise
                    await asyncio.sleep(min(0.05 * 2 ** failures, 5.0))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            log.error("memory.projection_failed", error=type(exc).__name__, detail=str(exc)[:300])
            if not self.failed.done():
                self.failed.set_exception(exc)
            raise

    async def _wait_out(self, exc: BaseException) -> None:
        """A server is away: wait without counting failures, then start over from PostgreSQL."""
        reason = f"{type(exc).__name__}: {str(exc)[:200]}"
        if reason != self._outage:
            log.warning("memory.waiting_for_servers", reason=reason)
            self._outage = reason
        self._reset()
        await asyncio.sleep(OUTAGE_RETRY_S)

    def _reset(self) -> None:
        self._committed = self._projection = None
        self._drop_writer()

    async def _step(self) -> None:
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
            raise ProjectionChangedError(f"memory watermark is {position}, this process committed "
                                         f"{(self._committed, self._projection)}")
        return position[0]

    async def _commit(self, batch: dict[int, Any]) -> None:
        conn = await self._conn()
        prefix = self.settings.prefix
        async with conn.transaction():
            wm = self._check(await self.store.lock_watermark(conn))
            fresh = sorted((seq, msg) for seq, msg in batch.items() if seq > wm)
            if fresh:
                await self._check_contiguous(wm, fresh[0][0])
                events = []
                for seq, msg in fresh:
                    event = decode_memory(prefix, msg.subject, msg.data, seq)
                    if event is not None:
                        events.append((seq, event))
                rows = 0
                for tenant, items in sorted(by_tenant(events).items()):
                    loaded = await load_state(conn, self.store, tenant, items)
                    folded = fold(loaded.state, items, Folded())
                    rows += await write_loaded(conn, self.store, tenant, loaded, folded=folded,
                                               vectors=self._vectors)
                await self.store.set_watermark(conn, fresh[-1][0])
                log.debug("memory.batch", events=len(fresh), rows=rows, watermark=fresh[-1][0])
        if fresh:
            self._committed = fresh[-1][0]
            self.applied = max(self.applied, self._committed)
        last = batch[max(batch)]
        try:
            await last.ack()
        except Exception:  # noqa: BLE001 - a lost ack is a redelivery, which the watermark skips
            log.warning("memory.ack_failed")
        self._progress.set()

    async def _check_contiguous(self, wm: int, first: int) -> None:
        """Refuse a batch that starts after a memory message the consumer never delivered."""
        if first == wm + 1:
            return
        try:
            nxt = await self._nc.jetstream().get_msg(
                self.settings.stream, seq=wm + 1, subject=memory_filter(self.settings.prefix), next=True)
        except nats.js.errors.NotFoundError:
            return
        if nxt.seq is not None and nxt.seq < first:
            raise ProjectionChangedError(f"memory message {nxt.seq} was not delivered before {first}")

    async def _conn(self) -> asyncpg.Connection:
        if self._writer is None or self._writer.is_closed():
            self._writer = await db.connect(self.settings.database_url)
        return self._writer

    def _drop_writer(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None and not writer.is_closed():
            writer.terminate()
