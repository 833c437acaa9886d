"""The live loop of a projection of a reserved per-tenant ledger subject.

The memory projection (``_memory``), the document index (``_documents``) and
the forget log (``_forget``) each fold one reserved task of every tenant into
their own tables, with the same machinery (``loop.ProjectionLoop``): a durable
pull consumer (AckAll) filtered on ``<prefix>.ledger.*.<task>``, always
(re)created to deliver from PostgreSQL's ``watermark + 1``; each fetched batch
applied in ONE transaction that row-locks the watermark, skips messages at or
below it (a redelivery is a no-op), checks that no message of the subject
between the watermark and the batch was left out, writes the rows and moves the
watermark; then the batch is acked. A crash between the commit and the ack only
causes a redelivery the watermark turns into a no-op. A watermark this process
did not write (a rebuild switched in another projection) makes it start over
from the new one; a server away is waited out without counting failures.

One instance folds at a time: the projection runs only in the process that
holds its PostgreSQL advisory lock (``leader``; a key derived from the durable's
name), on a connection of its own; other instances of the service wait as
standbys, retry the lock every second and take over when the holder's session
ends. Their endpoints serve meanwhile (reads wait for the committed watermark).
The watermark check of every batch keeps even a second folder exact.

No message can stop a projection (``poison``): what no fold can store is taken
out of its batch before ``apply`` sees it, a message that is no event of the
subject is passed over by ``apply``, and a batch that still fails on a message's
content is bisected; each becomes a row of ``projection_rejections`` written
with the watermark that passes it.

``SubjectProjection`` runs a ``spec.SubjectFold`` (memory, documents): the fold
is all a projection writes. ``LedgerProjection`` is the loop for a projection
that decodes its messages itself (the forget log): it implements ``apply``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Generic

import asyncpg
import blake3
import structlog
from nats.aio.client import Client

from agentledger.config import Settings
from agentledger.core.ledger_chain import RESYNC
from agentledger.errors import UnavailableError
from agentledger.projection.chain_gate import ChainGate
from agentledger.projection.loop import FETCH_TIMEOUT, ProjectionChangedError, ProjectionLoop
from agentledger.projection.poison import passed_over, record_rejections, unfoldable
from agentledger.projection.spec import StoreT, SubjectFold, WatermarkStore
from agentledger.projection.stream import (
    bind_consumer,
    consumer_config,
    first_undelivered,
    stream_seq,
    subject_filter,
)
from agentledger.shell import metrics
from agentledger.stores import db
from agentledger.stores.ledger import chain_key_of

__all__ = ["LedgerProjection", "ProjectionChangedError", "SubjectProjection", "WatermarkStore", "leader_key",
           "passed_over", "record_rejections", "unfoldable"]

log = structlog.get_logger()

# A standby retries the leadership lock this often.
LEADER_RETRY_S = 1.0


def leader_key(durable: str) -> int:
    """The advisory lock (a signed 64-bit key) of the projection behind ``durable``."""
    return int.from_bytes(blake3.blake3(f"agentledger-projection/{durable}".encode()).digest(8),
                          "big", signed=True)


class LedgerProjection(ProjectionLoop[None], Generic[StoreT]):
    """Folds one reserved ledger subject into PostgreSQL; see the module docstring.

    ``start()``, ``stop()``, ``alive()``, ``wait_for(seq)``, ``failed``, and
    ``applied`` (the highest seq known applied, for read-your-writes). A
    projection sets the class attributes and implements ``filter_subject`` and
    ``apply``.
    """

    # Set by a subclass, or by ``SubjectProjection`` from its fold. The durable consumer's name:
    durable: str
    # the word for it in messages ("memory" → "the memory projection is at seq ..."):
    noun: str
    # the consumer's description on the server.
    description: str
    failed_event = "projection_failed"

    def __init__(self, settings: Settings, nc: Client, pool: asyncpg.Pool, store: StoreT) -> None:
        super().__init__(settings, nc, pool, logger=log)
        self.store = store
        # Holds the leadership lock while this instance folds (``leader``).
        self._lock_conn: asyncpg.Connection | None = None
        self.leader = False
        self._progress = asyncio.Event()
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
        self._spawn(f"{self.noun}-projection")

    async def stop(self) -> None:
        await super().stop()
        if self._lock_conn is not None and not self._lock_conn.is_closed():
            await self._lock_conn.close()

    def _failed(self, exc: BaseException) -> None:
        if not self.failed.done():
            self.failed.set_exception(exc)

    async def _lead(self) -> None:
        """Take the leadership lock if it is free (on a connection of its own, kept while leading)."""
        if self._lock_conn is None or self._lock_conn.is_closed():
            self._lock_conn = await db.connect(self.settings.database_url)
        if await self._lock_conn.fetchval("SELECT pg_try_advisory_lock($1)", leader_key(self.durable)):
            self.leader = True
            log.info(f"{self.log_name}.leader")

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
        if self._sub is not None:
            await self._sub.close()
            self._sub = None
        self._sub = await bind_consumer(self._nc, self.settings, consumer_config(
            self.durable, self.filter_subject(), position[0] + 1, self.description))
        self._committed, self._projection = position
        self.applied = max(self.applied, position[0])
        log.info(f"{self.log_name}.projection_initialized", watermark=position[0])

    # ---- the loop --------------------------------------------------------------------------

    async def _reset(self) -> None:
        await super()._reset()
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
        await self._guarded(self._commit({stream_seq(m): m for m in msgs}))

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
        await self.commit_bisecting(sorted(batch.items()))
        try:
            await batch[max(batch)].ack()
            metrics.consumed(self.durable, batch[max(batch)])
        except Exception:  # noqa: BLE001 - a lost ack is a redelivery, which the watermark skips
            log.warning(f"{self.log_name}.ack_failed")
        self._progress.set()

    async def _commit_poison(self, seq: int, msg: Any, exc: BaseException) -> None:
        await self._write([(seq, msg)], poison=f"the projection could not store this message ({type(exc).__name__})")

    async def _commit_once(self, items: list[tuple[int, Any]]) -> list[None]:
        await self._write(items)
        return []

    async def _write(self, items: list[tuple[int, Any]], poison: str | None = None) -> None:
        """One transaction: the messages above the watermark folded (or, with ``poison``, the
        one message recorded as ``projection_error``), the watermark moved past them."""
        conn = await self._writer.get()
        async with conn.transaction():
            wm = self._check(await self.store.lock_watermark(conn))
            fresh = [(seq, msg) for seq, msg in items if seq > wm]
            if fresh:
                missing = await first_undelivered(self._nc, self.settings, self.filter_subject(), wm,
                                                  [fresh[0][0]])
                if missing is not None:
                    raise ProjectionChangedError(f"{self.noun} message {missing} was not delivered before "
                                                 f"{fresh[0][0]}")
                foldable: list[tuple[int, Any]] = []
                if poison is not None:
                    rejected = [(seq, "projection_error", poison) for seq, _ in fresh]
                else:
                    rejected = []
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


class SubjectProjection(LedgerProjection[StoreT]):
    """The live loop of a ``SubjectFold``: each batch decoded by the fold (a message that is no
    event of the subject is passed over as ``undecodable``, one whose ledger chain fails as
    ``integrity_violation``, ``chain_gate``) and folded by it."""

    def __init__(self, settings: Settings, nc: Client, pool: asyncpg.Pool, fold: SubjectFold[StoreT]) -> None:
        self.durable, self.noun, self.description = fold.durable, fold.noun, fold.description
        self.log_name = fold.log_name
        super().__init__(settings, nc, pool, fold.store())
        self.fold = fold
        # Resumed at a watermark: a subject's first message since then is checked on its own tag.
        self.chain = ChainGate(chain_key_of(settings), settings.prefix, start=RESYNC)

    def filter_subject(self) -> str:
        return subject_filter(self.settings.prefix, self.fold.task)

    async def _initialize(self) -> None:
        self.chain.clear()
        await super()._initialize()

    async def _write(self, items: list[tuple[int, Any]], poison: str | None = None) -> None:
        """The base's transaction; the chain heads it folded kept only once it committed."""
        try:
            await super()._write(items, poison)
        except BaseException:
            self.chain.discard()
            raise
        self.chain.commit()

    async def apply(self, conn: asyncpg.Connection, fresh: list[tuple[int, Any]]) -> dict[str, int]:
        events = []
        for seq, msg in fresh:
            refused = self.chain.refused(msg.subject, seq, msg.data, msg.headers)
            if refused is not None:
                log.error(f"{self.log_name}.integrity_violation", seq=seq)
                self.pass_over(seq, "integrity_violation", refused)
                continue
            event = self.fold.decode(self.settings.prefix, msg.subject, msg.data, seq)
            if event is None:
                self.pass_over(seq, "undecodable", f"not a {self.noun} event of this subject's tenant")
            else:
                events.append((seq, event))
        return await self.fold.fold(conn, self.store, events) if events else {}
