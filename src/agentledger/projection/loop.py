"""The live loop every projection runs: fetch a batch, commit it with the watermark, acknowledge.

``ProjectionLoop`` is what Working Memory's lanes (``services/projector/lane.py``)
and the projections of reserved subjects (``live.LedgerProjection``: memory,
documents, the forget log) share:

* the loop itself: a task that turns once per fetch timeout (``alive`` says
  whether it still turns), ``stop`` that lets a batch in flight commit or roll
  back, and one answer per kind of trouble: a server away (``outage_errors``) is
  waited out without counting failures and without logging every retry; a
  projection replaced under the loop (``reset_errors``: a rebuild switched in
  another one, or someone dropped it) makes it start over from PostgreSQL;
  anything else counts as a failure, retried from the watermark with a growing
  pause, until ``MAX_FAILURES`` in a row end the loop (the supervisor restarts
  the process);
* the batch connection (``db.BatchConnection``: one connection of its own, no
  pool reset per batch) and the watermark the loop committed last, in which
  projection (the oid of the watermark table: a switch brings another);
* poison handling (``commit_bisecting``): a batch whose transaction fails on a
  message's content is bisected, the halves committing on their own, and the
  message that fails alone is recorded as passed over, so the same batch is never
  retried forever.

A projection supplies ``_step`` (one turn: bind, fetch, commit), ``_commit_once``
(one batch in one transaction) and ``_commit_poison`` (record one message and move
the watermark past it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from typing import Any, ClassVar, Generic, TypeVar

import asyncpg
from nats.aio.client import Client

from agentledger.config import Settings
from agentledger.projection.poison import bisect
from agentledger.projection.puller import ConsumerLostError, Puller
from agentledger.shell.lifecycle import SERVER_AWAY_ERRORS
from agentledger.shell.tasks import stop_task
from agentledger.stores import db

FETCH_TIMEOUT = 1.0
# The loop turns at least once per fetch timeout; not turning for this long means it is stuck
# (an await that never returns, e.g. on a PostgreSQL that stopped answering): not alive.
LOOP_STALL_S = 30.0
# While PostgreSQL or NATS is away the loop retries this often, without counting failures: a
# try costs one refused connection, and a server back is used within this long of answering.
OUTAGE_RETRY_S = 0.1
MAX_FAILURES = 30
# How long ``stop`` lets a batch in flight finish.
STOP_WAIT_S = 15.0

R = TypeVar("R")


class ProjectionChangedError(Exception):
    """The watermark is not the one this process committed: someone else wrote it (a rebuild
    switched in another projection, or it was dropped)."""


class LoopEndedError(Exception):
    """The projection no longer has the part this loop folds (it was re-partitioned): the loop ends."""


def safe_detail(exc: BaseException) -> str:
    """An exception's text, bounded (our errors never carry event content)."""
    return str(exc)[:300]


class ProjectionLoop(Generic[R]):
    """The loop, the batch connection, the committed watermark and bisection; see the module
    docstring. ``R`` is what committing a batch returns (rows to announce after the ack)."""

    # The namespace of the log events ("projector" -> "projector.batch_failed").
    log_name: str
    # The event logged when the loop gives up.
    failed_event: ClassVar[str] = "failed"
    # A server is away: waited out, not counted.
    outage_errors: ClassVar[tuple[type[BaseException], ...]] = SERVER_AWAY_ERRORS
    # Of those, the ones an operator must see (logged as errors, retried less often).
    unusable_errors: ClassVar[tuple[type[BaseException], ...]] = ()
    # The projection changed under the loop: start over from PostgreSQL, not counted.
    reset_errors: ClassVar[tuple[type[BaseException], ...]] = (ProjectionChangedError,)

    def __init__(self, settings: Settings, nc: Client, pool: asyncpg.Pool, *, logger: Any) -> None:
        self.settings = settings
        self.log = logger
        self._nc, self._pool = nc, pool
        self._sub: Puller | None = None
        # The batches' own connection (reads use the pool): no pool release reset per batch.
        self._writer = db.BatchConnection(settings.database_url)
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        # True while a batch or an initialization is in flight (stop lets it finish).
        self._busy = False
        # Watermark this loop committed last (None: not initialized), and in which projection
        # (the oid of its watermark table: a rebuild switches in another one).
        self._committed: int | None = None
        self._projection: int | None = None
        self._turned = time.monotonic()
        self._outage: str | None = None

    @property
    def busy(self) -> bool:
        return self._busy

    @property
    def watermark(self) -> int | None:
        """The watermark this loop committed last."""
        return self._committed

    @property
    def done(self) -> bool:
        return self._task is not None and self._task.done()

    def alive(self) -> bool:
        return self._task is not None and not self._task.done() and (
            time.monotonic() - self._turned < LOOP_STALL_S)

    def _spawn(self, name: str) -> None:
        self._task = asyncio.create_task(self._run(), name=name)

    async def stop(self) -> None:
        """Stop fetching, let the batch in flight commit or roll back; idempotent."""
        self._stopping = True
        if self._task is not None:
            if not self._busy:
                self._task.cancel()  # idle in a fetch or a sleep: nothing to finish
            try:
                await asyncio.wait_for(asyncio.shield(self._task), timeout=STOP_WAIT_S)
            except (TimeoutError, asyncio.CancelledError):
                await stop_task(self._task)
            except Exception as exc:  # noqa: BLE001 - already reported through ``_failed``
                self.log.debug(f"{self.log_name}.run_ended", error=type(exc).__name__)
        if self._sub is not None:
            await self._sub.close()
            self._sub = None
        self._writer.drop()

    # ---- the loop --------------------------------------------------------------------------

    async def _step(self) -> None:
        """One turn: (re)initialize if needed, fetch and commit one batch, or check when idle."""
        raise NotImplementedError

    def _failed(self, exc: BaseException) -> None:
        """The loop gave up (``MAX_FAILURES`` in a row, or an error it cannot handle)."""
        raise NotImplementedError

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
                        self.log.info(f"{name}.servers_back", watermark=self._committed)
                        self._outage = None
                except asyncio.CancelledError:
                    raise
                except self.outage_errors as exc:
                    if self._stopping:
                        break
                    await self._wait_out(exc)
                except LoopEndedError as exc:
                    self.log.info(f"{name}.partition_ended", reason=str(exc))
                    return
                except self.reset_errors as exc:
                    self.log.info(f"{name}.projection_reset", reason=str(exc))
                    await self._reset()
                except Exception as exc:
                    if self._stopping:
                        break
                    failures += 1
                    # A deleted consumer is recreated from the watermark by the reset below.
                    self.log.warning(f"{name}.consumer_lost" if isinstance(exc, ConsumerLostError)
                                     else f"{name}.batch_failed", failures=failures, error=type(exc).__name__,
                                     detail=safe_detail(exc), watermark=self._committed)
                    await self._reset()
                    if failures >= MAX_FAILURES:
                        raise
                    await asyncio.sleep(min(0.05 * 2 ** failures, 5.0))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self.log.error(f"{name}.{self.failed_event}", error=type(exc).__name__, detail=safe_detail(exc))
            self._failed(exc)
            raise

    async def _wait_out(self, exc: BaseException) -> None:
        """A server is away (or the ledger unusable): wait without counting failures (restarting
        the process would not fix it sooner), then start over from PostgreSQL.

        Reads keep answering from the rows meanwhile. One log line per change of reason, not
        one per retry; what ``unusable_errors`` names is an error an operator must see.
        """
        unusable = isinstance(exc, self.unusable_errors)
        reason = f"{type(exc).__name__}: {safe_detail(exc)}"
        if reason != self._outage:
            self.log.log(logging.ERROR if unusable else logging.WARNING, f"{self.log_name}.waiting_for_servers",
                         reason=reason, watermark=self._committed)
            self._outage = reason
        await self._reset()
        await asyncio.sleep(OUTAGE_RETRY_S * (4 if unusable else 1))

    async def _reset(self) -> None:
        """Forget everything derived: the next turn re-derives it from PostgreSQL."""
        self._committed = self._projection = None
        self._writer.drop()  # plans cached against dropped tables go with it

    async def _guarded(self, work: Coroutine[Any, Any, None]) -> None:
        """Run work that ``stop`` lets finish rather than cancel."""
        self._busy = True
        try:
            await work
        finally:
            self._busy = False

    # ---- committing a batch ----------------------------------------------------------------

    async def _commit_once(self, items: list[tuple[int, Any]]) -> list[R]:
        """One batch (seq, message), sorted, in one transaction with the watermark."""
        raise NotImplementedError

    async def _commit_poison(self, seq: int, msg: Any, exc: BaseException) -> None:
        """Record the one message at ``seq`` as passed over and move the watermark past it."""
        raise NotImplementedError

    def _rolled_back(self) -> None:
        """A transaction failed on a message's content: drop what was derived for it."""

    async def commit_bisecting(self, items: list[tuple[int, Any]]) -> list[R]:
        """Commit ``items`` (sorted); a transaction that a message's content fails is bisected.

        The halves commit on their own; a single message that still fails is recorded as
        passed over (``_commit_poison``), so the same batch is never retried forever.
        """

        def failed(part: list[tuple[int, Any]], exc: BaseException) -> None:
            self._rolled_back()
            if len(part) > 1:
                self.log.warning(f"{self.log_name}.batch_split", events=len(part), first=part[0][0],
                                 last=part[-1][0], error=type(exc).__name__)

        async def poisoned(item: tuple[int, Any], exc: BaseException) -> None:
            self.log.error(f"{self.log_name}.poison_message", seq=item[0], error=type(exc).__name__,
                           detail=safe_detail(exc))
            await self._commit_poison(item[0], item[1], exc)

        return await bisect(items, self._commit_once, poisoned, failed)
