"""The projector: folds the ledger stream into PostgreSQL and serves Working Memory.

Consumer strategy. A durable pull consumer ``projector`` (AckAll) on the
ledger wildcard, read by ``Puller`` (one open pull request at a time:
``no_wait`` batches while there is a backlog, a long poll when drained).
PostgreSQL's watermark is the truth: on start the consumer is kept only if its
position agrees with it (ack floor and last delivered at or below the
watermark, so nothing unapplied was delivered) and is otherwise recreated to
start at ``watermark + 1``; after any failure inside a running process it is
always recreated there. Messages at or below the watermark are skipped, and a
batch that would jump over a message still in the stream is refused.

Each fetched batch is applied in ONE transaction that row-locks the watermark,
skips messages at or below it (a redelivery after a crash is a no-op), checks
that nothing between the watermark and the batch is missing, claims the
batch's event ids in the ``applied_events`` index (a repeat is a duplicate),
applies the events to cached states, writes each touched task's core row and
only the variable and turn rows the reducer changed, inserts rejection rows
and advances the watermark. Only after the commit is the batch acked and
``TaskChanged`` published. Any error drops the state cache and re-derives the
consumer from the watermark, so nothing is skipped or applied twice.

A watermark that is missing or differs from the one this process committed
last (its seq, or the watermark table itself: ``agentledger replay`` switches in
a rebuilt projection) means someone dropped or rebuilt the projection: the
projector drops its cache, rebuilds an empty projection from the stream (beside
it, in bounded memory, as ``replay`` does), and carries on from the watermark.

One projector applies at a time: the process holds a PostgreSQL advisory lock
(leadership) on a dedicated connection; a second process waits as a standby.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import asyncpg
import blake3
import msgspec
import nats
import nats.js.errors
import structlog
from nats import micro
from nats.aio.client import Client
from nats.aio.subscription import Subscription
from nats.js.api import AckPolicy, ConsumerConfig, ConsumerInfo, DeliverPolicy
from nats.micro.request import Request
from nats.micro.service import Service

from agentledger import auth, db, evict
from agentledger.bounded import ByteLRU
from agentledger.config import Settings
from agentledger.contracts.api import (
    ErrorBody,
    EventRejected,
    RejectionItem,
    RejectionsPage,
    TaskRef,
    ViewChunk,
    WorkingMemoryReply,
)
from agentledger.contracts.codec import decode_task_ref, encode
from agentledger.contracts.events import AnyEvent
from agentledger.core.checkpoint_policy import task_changed
from agentledger.core.state import (
    Changes,
    core_hash,
    core_view,
    decode_state,
    encode_core,
    encode_turn,
    encode_variable,
)
from agentledger.errors import AgentLedgerError, ContractError, NotFoundError, UnavailableError
from agentledger.identity import OPERATOR, Caller, PermissionDeniedError, TenantRegistry
from agentledger.ledger import ensure_stream, ledger_subject, ledger_wildcard, subject_key
from agentledger.lifecycle import SERVER_AWAY_ERRORS, ServiceShell
from agentledger.natsclient import reader_alive
from agentledger.sealing import Keyring, kek_of, reveal
from agentledger.services.projector.cache import StateCache
from agentledger.services.projector.puller import ConsumerLostError, Puller
from agentledger.services.projector.rebuild import (
    LIVE_SCHEMA,
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
    Key,
    Position,
    ProjectionMissingError,
    RejectionRow,
    Store,
    TaskRow,
    TurnRow,
    VariableRow,
)

log = structlog.get_logger()

DURABLE = "projector"
SERVICE_NAME = "agentledger-projector"
SERVICE_VERSION = "0.1.0"
# Advisory lock key of projector leadership ("agpj").
LEADER_LOCK = 0x61677069
FETCH_TIMEOUT = 1.0
ACK_WAIT = 60.0
MAX_ACK_PENDING = 100_000
# A consumer that would re-deliver more than this many already-projected messages is recreated.
MAX_SKIP = 100_000
CACHE_MAX = 50_000
# How often a read waiting for its own write re-reads the watermark (a commit wakes it sooner).
READ_POLL_S = 0.05
MAX_FAILURES = 30
# The loop turns at least once per fetch timeout; not turning for this long means it is stuck
# (an await that never returns, e.g. on a PostgreSQL that stopped answering): not alive.
LOOP_STALL_S = 30.0
# While PostgreSQL or NATS is away the loop retries this often, without counting failures.
OUTAGE_RETRY_S = 0.5


class ProjectionChangedError(Exception):
    """The watermark is not the one this process committed: someone else wrote it."""


class OutOfOrderError(Exception):
    """The consumer delivered past a message that was never applied."""


class LedgerUnusableError(Exception):
    """The ledger stream is missing, or numbers below the watermark (it was deleted and
    recreated without continuing its sequence): projecting now would skip or misfile events."""


# Errors a message's content can cause while its batch is written (a value PostgreSQL
# cannot store, a row too large, a state that does not encode): the batch is split so the
# other messages commit and the one that fails alone becomes a rejection row. Anything else
# (connection loss, a dropped projection, a constraint an operator added) fails the batch,
# which is retried as a whole from the watermark.
POISON_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.DataError, asyncpg.ProgramLimitExceededError, ValueError, TypeError, OverflowError,
    RecursionError, msgspec.MsgspecError)


# Present in a view's JSON exactly where a value or turn is sealed (a sealed field that is
# null reads ``"sealed":null``; inside a JSON string the quotes would be escaped).
_SEALED = b'"sealed":{'


async def render_view(row: asyncpg.Record, keyring: Callable[[], Keyring] | None) -> bytes:
    """The Working Memory view returned by ``wm.get``, as JSON, from a task's rows
    (``Store.get_task``).

    Only the core row is decoded (the derived sets need it); the variables and
    the turns are spliced in as the JSON their rows hold. Personal values stay
    sealed unless the caller asked to reveal them (``keyring`` given, called only
    when some are sealed): only then is the view decoded, opened and encoded again. Rows
    in PostgreSQL always hold them sealed, so destroying a subject's key reaches
    the projection without rewriting it.
    """
    variables, transcript = row["variables"] or b"", row["transcript"] or b""
    rendered = core_view(decode_state(row["state"]))
    rendered["variables"] = msgspec.Raw(b"{" + variables + b"}")
    rendered["transcript"] = msgspec.Raw(b"[" + transcript + b"]")
    data = _view_encoder.encode(rendered)
    if keyring is None or (_SEALED not in variables and _SEALED not in transcript):
        return data
    return _view_encoder.encode(await reveal(msgspec.json.decode(data), keyring()))


def changed_subject(prefix: str, tenant: str, task_id: str) -> str:
    return f"{prefix}.wm.changed.{tenant}.{task_id}"


def rejected_subject(prefix: str, tenant: str, task_id: str) -> str:
    """Where a producer learns that the reducer refused an event it appended (after the ack)."""
    return f"{prefix}.rejected.{tenant}.{task_id}"


def get_subject(prefix: str) -> str:
    return f"{prefix}.wm.get"


# How long a rendered view stays cached for its chunks (a reader fetches them in well under this).
VIEW_TTL_S = 60.0
# Bytes a reply needs besides the view itself (ok, seq, the chunk's index, count, size and
# digest): a view is sent whole only when it fits with this to spare.
REPLY_ENVELOPE = 1024


@dataclass(frozen=True)
class _View:
    """A rendered view's JSON as it is cut into chunks, and the ledger seq it reflects."""

    seq: int
    data: bytes
    digest: str

    def chunk_size(self, budget: int) -> int:
        """Bytes of view per chunk: base64 turns 3 bytes into 4 within ``budget``."""
        return max(1, (budget - REPLY_ENVELOPE) * 3 // 4)

    def chunk(self, index: int, budget: int) -> ViewChunk:
        size = self.chunk_size(budget)
        count = max(1, -(-len(self.data) // size))
        if index >= count:
            raise ContractError(f"the view has {count} chunks (0 to {count - 1})",
                                code="invalid_value", path="$.chunk")
        return ViewChunk(index=index, count=count, size=len(self.data), digest=self.digest,
                         data=self.data[index * size:(index + 1) * size])


class Projector(ServiceShell):
    """Folds the ledger into PostgreSQL; answers ``<prefix>.wm.get``."""

    name = "projector"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.store = Store(LIVE_SCHEMA)
        self._nc: Client | None = None
        self._pool: asyncpg.Pool | None = None
        # The batches' own connection (reads use the pool): no pool release reset per batch.
        self._writer: asyncpg.Connection | None = None
        self._subject_keys = SubjectKeys(settings.prefix)
        self._lock_conn: asyncpg.Connection | None = None
        self._sub: Puller | None = None
        self._service: Service | None = None
        self._task: asyncio.Task[None] | None = None
        self._failed: asyncio.Future[None] | None = None
        self._stopping = False
        self._stopped = False
        self._leader = False
        # True while a batch or an initialization is in flight (stop lets it finish).
        self._busy = False
        self._cache = StateCache()
        # Rendered views too large for one reply, while their chunks are fetched.
        self._views: ByteLRU[tuple[str, str, bool, str], _View] = ByteLRU(
            settings.view_cache_bytes, ttl_s=VIEW_TTL_S)
        self._keys: Keyring | None = None
        self._evictions: Subscription | None = None
        self._tenants: TenantRegistry | None = None
        # Rejections committed but not yet announced; a wake-up for readers waiting on a seq.
        self._rejected: list[RejectionRow] = []
        self._progress = asyncio.Event()
        # Watermark this process committed last (None: not initialized), and in which
        # projection (the oid of its watermark table: ``replay`` switches in another one).
        self._committed: int | None = None
        self._projection: int | None = None
        # When the projection loop last turned (liveness; see ``alive``).
        self._turned = 0.0
        self._outage: str | None = None

    # ---- lifecycle ------------------------------------------------------------------

    async def _start(self) -> None:
        s = self.settings
        self._nc = await auth.connect(s, "projector",
                                      max_reconnect_attempts=-1, error_cb=self._nats_error,
                                      closed_cb=self._nats_closed)
        self._tenants = TenantRegistry(self._nc, s.prefix)
        await self._tenants.start()
        self._pool = await db.create_pool(s.database_url, min_size=1, max_size=4)
        await db.migrate(s.database_url)
        await self._ensure_stream()
        self._service = await micro.add_service(
            self._nc, name=SERVICE_NAME, version=SERVICE_VERSION,
            description="Working Memory projections of the agentledger ledger")
        await self._service.add_endpoint(name="wm-get", subject=get_subject(s.prefix),
                                         handler=self._handle_get)
        self._evictions = await evict.listen(self._nc, s.prefix, SERVICE_NAME, self._service.id,
                                             self._evict)
        self._lock_conn = await db.connect(s.database_url)
        self._leader = await self._lock_conn.fetchval("SELECT pg_try_advisory_lock($1)", LEADER_LOCK)
        if self._leader:
            await self._initialize()
        else:
            log.info("projector.standby", reason="another projector holds the leadership lock")
        self._task = asyncio.create_task(self._run(), name="projector-run")

    async def _evict(self, e: evict.Eviction) -> dict[str, int]:
        """A forget request reached these: drop cached states, rendered views and keys.

        The state cache is only changed between batches (a batch folds into it), so this
        waits for the batch in flight; the check and the drop run without a pause between.
        """
        while self._busy:  # noqa: ASYNC110 - _busy is a flag the batch loop owns, polled briefly
            await asyncio.sleep(0.01)
        states = [k for k in self._cache if k[0] == e.tenant and (e.whole_tenant or k[1] == e.task_id)]
        for key in states:
            self._cache.pop(key, None)
        views = [k for k in self._views.keys() if k[0] == e.tenant]  # noqa: SIM118 - not a dict
        for view in views:
            self._views.pop(view)
        keys = evict.keys_of(self._keys, e) if self._keys is not None else 0
        return {"states": len(states), "views": len(views), "keys": keys}

    async def _ensure_stream(self) -> None:
        """Create the ledger stream if it is missing (numbering after the watermark, so a
        projection that outlived its stream carries on); never change the writer's configuration."""
        assert self._nc is not None and self._pool is not None
        try:
            await self._nc.jetstream().stream_info(self.settings.stream)
        except nats.js.errors.NotFoundError:
            wm = await self.store.watermark(self._pool) or 0
            await ensure_stream(self.settings, self._nc, first_seq=wm + 1)

    async def stop(self) -> None:
        """Stop fetching, let the in-flight batch commit or roll back, drain; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self._evictions is not None:
            with contextlib.suppress(Exception):
                await self._evictions.unsubscribe()
        self._stopping = True
        if self._task is not None:
            if not self._busy:
                self._task.cancel()  # idle in a fetch or a sleep: nothing to finish
            try:
                await asyncio.wait_for(asyncio.shield(self._task), timeout=15)
            except (TimeoutError, asyncio.CancelledError):
                self._task.cancel()
                await asyncio.gather(self._task, return_exceptions=True)
            except Exception as exc:  # noqa: BLE001 - already reported through wait_failed
                log.debug("projector.run_ended", error=type(exc).__name__)
        if self._service is not None:
            try:
                await self._service.stop()
            except Exception:
                log.warning("projector.service_stop_failed", exc_info=True)
        await self._close_readers()
        if self._nc is not None and not self._nc.is_closed:
            try:
                await self._nc.drain()
            except Exception:  # noqa: BLE001
                await self._nc.close()
        self._drop_writer()
        if self._lock_conn is not None:
            await self._lock_conn.close()
        if self._pool is not None:
            await self._pool.close()
        log.info("projector.stopped", watermark=self._committed)

    async def _close_readers(self) -> None:
        if self._sub is not None:
            await self._sub.close()
        if self._tenants is not None:
            await self._tenants.stop()

    async def wait_failed(self) -> None:
        """Return or raise only when the projection loop gave up."""
        if self._failed is None:
            self._failed = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._failed)

    def alive(self) -> bool:
        """Whether the projector can make progress: its NATS read loop runs and its loop turns.

        A standby turns too (it retries the leadership lock every second).
        """
        if self._nc is None or not reader_alive(self._nc):
            return False
        return self._task is not None and not self._task.done() and (
            time.monotonic() - self._turned < LOOP_STALL_S)

    @property
    def watermark(self) -> int | None:
        """The watermark this process committed last."""
        return self._committed

    # ---- initialization and consumer ----------------------------------------------------

    async def _initialize(self) -> None:
        """Derive everything from PostgreSQL: rebuild an empty projection, bind the consumer."""
        assert self._pool is not None and self._nc is not None
        s = self.settings
        self._cache.clear()
        self._committed = self._projection = None
        await db.migrate(s.database_url)
        async with self._pool.acquire() as conn:
            position = await self.store.position(conn)
            if position is None:
                raise ProjectionMissingError("projector_watermark row is missing after migrate")
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
                # `agentledger replay` does.
                log.info("projector.rebuilding", reason="empty projection", last_seq=last)
                await replace_live_with(self._nc, conn, s, progress=self._rebuild_progress)
                position = await self.store.position(conn)
                if position is None:
                    raise ProjectionMissingError("projector_watermark row is missing after rebuild")
                wm = position.seq
        await self._bind_consumer(wm)
        self._committed, self._projection = wm, position.projection
        log.info("projector.initialized", watermark=wm)

    def _rebuild_progress(self, done: int, total: int) -> None:
        """A rebuild is the loop at work: keep liveness fresh while it folds the stream."""
        self._turned = time.monotonic()

    async def _bind_consumer(self, wm: int) -> None:
        """Make the durable consumer deliver from ``wm + 1`` and attach a fresh ``Puller``."""
        assert self._nc is not None
        js = self._nc.jetstream()
        stream = self.settings.stream
        # Re-binding inside a running process: a pull request of the old puller may still be
        # open, so the consumer is always recreated (its open requests die with it).
        rebind = self._sub is not None
        if self._sub is not None:
            await self._sub.close()
            self._sub = None
        try:
            info: ConsumerInfo | None = await js.consumer_info(stream, DURABLE)
        except nats.js.errors.NotFoundError:
            info = None
        if info is not None and (rebind or not self._consumer_agrees(info, wm)):
            log.info("projector.consumer_reset", watermark=wm,
                     ack_floor=info.ack_floor.stream_seq if info.ack_floor else None,
                     delivered=info.delivered.stream_seq if info.delivered else None)
            await js.delete_consumer(stream, DURABLE)
            info = None
        if info is None:
            await js.add_consumer(stream, ConsumerConfig(
                name=DURABLE, durable_name=DURABLE, filter_subject=ledger_wildcard(self.settings.prefix),
                ack_policy=AckPolicy.ALL, deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
                opt_start_seq=wm + 1, ack_wait=ACK_WAIT, max_ack_pending=MAX_ACK_PENDING,
                max_waiting=16, description="agentledger projector (position follows PostgreSQL)"))
        self._sub = Puller(self._nc, stream, DURABLE)
        await self._sub.start()

    def _consumer_agrees(self, info: ConsumerInfo, wm: int) -> bool:
        cfg = info.config
        if (cfg.filter_subject != ledger_wildcard(self.settings.prefix)
                or cfg.ack_policy != AckPolicy.ALL
                or cfg.deliver_subject):
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
                except (ProjectionMissingError, ProjectionChangedError) as exc:
                    # Someone dropped or rebuilt the projection: start over from PostgreSQL.
                    log.info("projector.projection_reset", reason=str(exc))
                    await self._reset()
                except Exception as exc:
                    if self._stopping:
                        break
                    failures += 1
                    # A deleted consumer is recreated from the watermark by the reset below.
                    log.warning("projector.consumer_lost" if isinstance(exc, ConsumerLostError)
                                else "projector.batch_failed", failures=failures,
                                error=type(exc).__name__, detail=_safe(exc), watermark=self._committed)
                    await self._reset()
                    if failures >= MAX_FAILURES:
                        raise
                    await asyncio.sleep(min(0.05 * 2 ** failures, 5.0))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            log.error("projector.failed", error=type(exc).__name__, detail=_safe(exc))
            if self._failed is not None and not self._failed.done():
                self._failed.set_exception(exc)
            raise

    async def _step(self) -> bool:
        """One turn of the loop: lead, initialize, fetch and apply one batch (or check when idle).

        True when the turn reached the servers and found them well.
        """
        if not self._leader:
            await self._become_leader()
            return False
        if self._committed is None or self._sub is None:
            await self._guarded(self._initialize())
        assert self._sub is not None
        try:
            msgs = await self._sub.fetch(self.settings.projector_batch, FETCH_TIMEOUT)
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
            log.log(logging.ERROR if unusable else logging.WARNING,
                    "projector.waiting_for_servers", reason=reason, watermark=self._committed)
            self._outage = reason
        await self._reset()
        await asyncio.sleep(OUTAGE_RETRY_S * (4 if unusable else 1))

    def _servers_back(self) -> None:
        if self._outage is not None:
            log.info("projector.servers_back", watermark=self._committed)
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
        self._drop_writer()  # plans cached against dropped tables go with it
        if self._pool is not None:
            await self._pool.expire_connections()  # drop plans cached against dropped tables
        if self._lock_conn is None or self._lock_conn.is_closed():
            self._leader = False

    async def _conn(self) -> asyncpg.Connection:
        """The connection batches are written on, opened on first use (and after a reset)."""
        if self._writer is None or self._writer.is_closed():
            self._writer = await db.connect(self.settings.database_url)
        return self._writer

    def _drop_writer(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None and not writer.is_closed():
            writer.terminate()

    async def _become_leader(self) -> None:
        if self._lock_conn is None or self._lock_conn.is_closed():
            self._lock_conn = await db.connect(self.settings.database_url)
        if await self._lock_conn.fetchval("SELECT pg_try_advisory_lock($1)", LEADER_LOCK):
            self._leader = True
            log.info("projector.leader")
            return
        await asyncio.sleep(1.0)

    async def _idle_check(self) -> None:
        """Between batches: notice a dropped or rebuilt projection without waiting for traffic."""
        assert self._pool is not None
        position = await self.store.position(self._pool)
        if position is None:
            raise ProjectionMissingError("the projection tables are gone")
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
            log.debug("projector.batch", events=len(batch), tasks=len(rows), watermark=self._committed)

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
                log.warning("projector.batch_split", events=len(items), first=items[0][0],
                            last=items[-1][0], error=type(exc).__name__)
                mid = len(items) // 2
                return await self._commit(items[:mid]) + await self._commit(items[mid:])
            seq, msg = items[0]
            log.error("projector.poison_message", seq=seq, error=type(exc).__name__,
                      detail=_safe(exc))
            await self._commit_poison(seq, msg, exc)
            return []

    async def _commit_once(self, items: list[tuple[int, Any]]) -> list[TaskRow]:
        conn = await self._conn()
        async with conn.transaction():
            wm = self._check_position(await self.store.lock_position(conn))
            fresh = [(seq, msg) for seq, msg in items if seq > wm]
            rejected: list[RejectionRow] = []
            rows = await self._apply(conn, wm, fresh, rejected) if fresh else []
        self._committed = fresh[-1][0] if fresh else wm
        self._rejected.extend(rejected)  # committed: tell the producers after the ack
        return rows

    async def _commit_poison(self, seq: int, msg: Any, exc: BaseException) -> None:
        """Record one message that cannot be written as a rejection row and move past it."""
        assert self._pool is not None
        key = subject_key(self.settings.prefix, msg.subject) or subject_tokens(msg.subject)
        headers = msg.headers or {}
        mid = headers.get("Nats-Msg-Id") or ""
        row = rejection_row((key[0], key[1], seq, mid.rsplit("/", 1)[-1], "", "projection_error",
                             f"the projection could not store this message ({type(exc).__name__})"))
        conn = await self._conn()
        async with conn.transaction():
            wm = self._check_position(await self.store.lock_position(conn))
            if seq <= wm:
                return
            await self._check_contiguous(wm, [seq])
            await self.store.insert_rejections(conn, [row])
            await self.store.set_watermark(conn, seq)
        self._committed = seq

    async def _apply(self, conn: asyncpg.Connection, wm: int, fresh: list[tuple[int, Any]],
                     rejections: list[RejectionRow]) -> list[TaskRow]:
        """Fold ``fresh`` (sorted, past ``wm``) into the cache and write what it changed, in the
        caller's transaction; the rejections it records are appended to ``rejections``.

        Written: the core row of every task touched, and only the variable and turn
        rows the reducer reported changed.
        """
        await self._check_contiguous(wm, [seq for seq, _ in fresh])
        cache = self._cache
        changes: dict[Key, Changes] = {}
        changed: dict[Key, int] = {}
        events = self._decode(fresh, rejections)
        first = await self._first_occurrences(conn, events)
        missing = list({key for _, key, _ in events if key not in cache})
        if missing:
            for loaded in await self.store.load_states(conn, missing):
                cache.load(loaded)
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
                log.info("projector.rejected", code=rejections[-1][5], tenant=key[0], task=key[1],
                         seq=seq)
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
        await self.store.upsert_tasks(conn, rows)
        # The variable, turn and rejection rows and the watermark: one statement, one round trip.
        await self.store.write_rest(conn, variables, turns, rejections, fresh[-1][0])
        return rows

    def _decode(self, fresh: list[tuple[int, Any]],
                rejections: list[RejectionRow]) -> list[tuple[int, Key, AnyEvent]]:
        """The events of ``fresh`` filed under their tasks; the other messages become rows."""
        events: list[tuple[int, Key, AnyEvent]] = []
        keys = self._subject_keys
        if len(keys) > CACHE_MAX:
            keys.clear()
        for seq, msg in fresh:
            subject = msg.subject
            key = keys[subject]
            event = decode_message(key, msg.data, seq, msg.headers, rejections=rejections,
                                   subject=subject)
            if event is not None and key is not None:
                events.append((seq, key, event))
            elif not is_service_ledger(key):  # memory and document events only move the watermark
                log.info("projector.rejected", code=rejections[-1][5], tenant=key[0] if key else "",
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
        first: dict[tuple[str, str, str], int] = {}
        for seq, key, event in events:
            first.setdefault((key[0], key[1], event.event_id), seq)
        claimed = await self.store.claim_events(conn, [(*k, s) for k, s in first.items()])
        if len(claimed) < len(first):  # rare: ids consumed by an earlier batch
            first.update(await self.store.first_seqs(conn, [k for k in first if k not in claimed]))
        return first

    async def _after_commit(self, last: Any, rows: list[TaskRow]) -> None:
        """Ack the batch (AckAll: its highest sequence), notify, trim the cache."""
        assert self._nc is not None
        try:
            await last.ack()
        except Exception:  # noqa: BLE001 - a lost ack means a redelivery, which is a no-op
            log.warning("projector.ack_failed", seq=last.metadata.sequence.stream)
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
            log.warning("projector.notify_failed")
        self._progress.set()
        self._cache.trim(CACHE_MAX, self.settings.projector_cache_bytes)

    async def _check_contiguous(self, wm: int, seqs: list[int]) -> None:
        """Raise ``OutOfOrderError`` if a stored message between ``wm`` and the batch was not delivered."""
        assert self._nc is not None
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

    # ---- read API -------------------------------------------------------------------------

    async def _handle_get(self, req: Request) -> None:
        assert self._tenants is not None
        try:
            caller = await self._tenants.caller(req.headers)
            reply = await self.working_memory(req.data, caller)
        except PermissionDeniedError as exc:
            reply = _error(exc.code, exc.message, exc.path)
        except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError,
                asyncpg.InternalClientError) as exc:
            log.warning("projector.read_failed", error=type(exc).__name__, detail=_safe(exc))
            reply = _error("unavailable", "the projection is not available right now", retryable=True)
        except Exception as exc:  # noqa: BLE001 - every request gets a typed reply
            log.error("projector.read_error", error=type(exc).__name__, detail=_safe(exc))
            reply = _error("internal", "the projector failed to answer")
        await req.respond(encode(reply))

    async def working_memory(self, data: bytes, caller: Caller = OPERATOR) -> WorkingMemoryReply:
        """Answer one ``wm.get`` request body for ``caller``: a tenant reads only its own tasks.

        A whole view comes back as its encoded JSON (``state`` is a ``msgspec.Raw``), so
        it is encoded once, measured against the reply budget and sent as it is.
        """
        try:
            ref = decode_task_ref(data)
            caller.require_tenant(ref.tenant, "$.tenant")
            with structlog.contextvars.bound_contextvars(tenant=ref.tenant, task=ref.task_id):
                return await self._read(ref)
        except AgentLedgerError as exc:
            return _error(exc.code, exc.message, exc.path, exc.retryable)

    async def _read(self, ref: TaskRef) -> WorkingMemoryReply:
        """The view whole when it fits in one reply, else one chunk of it; or a rejections page."""
        assert self._pool is not None
        _check_read_request(ref)
        try:
            if ref.min_seq is not None and not await self._reached(ref.min_seq, ref.wait_ms):
                raise UnavailableError(f"the projection has not reached seq {ref.min_seq} within "
                                       f"{ref.wait_ms} ms; retry", path="$.min_seq")
            if ref.rejections is not None:
                return await self._rejections_page(ref)
            key = (ref.tenant, ref.task_id, ref.reveal_personal, ref.digest or "")
            cached = self._views.get(key) if ref.chunk is not None else None
            if cached is not None:
                return WorkingMemoryReply(ok=True, seq=cached.seq,
                                          chunk=cached.chunk(ref.chunk or 0, self._reply_budget()))
            row = await self.store.get_task(self._pool, ref.tenant, ref.task_id, ref.transcript_tail)
        except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError,
                asyncpg.InternalClientError, TimeoutError) as exc:
            log.warning("projector.read_failed", error=type(exc).__name__)
            raise UnavailableError("the projection is not available right now") from exc
        if row is None:
            if await self._in_ledger(ref.tenant, ref.task_id):
                raise UnavailableError("the task is in the ledger but not projected yet; retry "
                                       "(or pass min_seq)", path="$.task_id")
            raise NotFoundError(f"no task {ref.task_id!r} for tenant {ref.tenant!r}", path="$.task_id")
        data = await render_view(row, self._keyring if ref.reveal_personal else None)
        budget = self._reply_budget()
        if ref.chunk is None and len(data) + REPLY_ENVELOPE <= budget:
            return WorkingMemoryReply(ok=True, seq=row["seq"], state=msgspec.Raw(data))
        rendered = _View(seq=row["seq"], data=data, digest=blake3.blake3(data).hexdigest())
        if ref.chunk is not None and rendered.digest != ref.digest:
            raise AgentLedgerError("the Working Memory changed since its first chunk was read; "
                                   "read it again from the start (without chunk and digest)",
                                   code="state_changed", path="$.digest", retryable=True)
        self._views.put((ref.tenant, ref.task_id, ref.reveal_personal, rendered.digest), rendered,
                        len(data))
        return WorkingMemoryReply(ok=True, seq=rendered.seq,
                                  chunk=rendered.chunk(ref.chunk or 0, budget))

    def _reply_budget(self) -> int:
        """Largest reply to send: the configured budget, capped by the server's max_payload."""
        budget = self.settings.max_reply_bytes
        if self._nc is not None and self._nc.max_payload:
            budget = min(budget, self._nc.max_payload)
        return max(budget, 2 * REPLY_ENVELOPE)

    async def _rejections_page(self, ref: TaskRef) -> WorkingMemoryReply:
        """Rows of the task's rejection trace after ``after_seq``, as many as fit in one reply."""
        assert self._pool is not None and ref.rejections is not None
        query = ref.rejections
        async with self._pool.acquire() as conn, conn.transaction(isolation="repeatable_read",
                                                                   readonly=True):
            wm = await self.store.watermark(conn) or 0
            rows = await self.store.rejections_after(conn, ref.tenant, ref.task_id,
                                                     query.after_seq, query.limit + 1)
        room = self._reply_budget() - REPLY_ENVELOPE
        items: list[RejectionItem] = []
        for r in rows[:query.limit]:
            item = RejectionItem(seq=r[0], event_id=r[1], kind=r[2], code=r[3], reason=r[4])
            room -= len(_view_encoder.encode(item)) + 1
            if room < 0 and items:
                break
            items.append(item)
        more = len(items) < len(rows)
        return WorkingMemoryReply(ok=True, seq=wm, rejections=RejectionsPage(
            items=items, next_after_seq=items[-1].seq if more and items else None))

    async def _reached(self, seq: int, wait_ms: int) -> bool:
        """Whether the committed watermark reaches ``seq`` within ``wait_ms`` (read-your-writes).

        Reads the watermark row, so a standby answers as truly as the leader; the
        leader's commits wake the wait early.
        """
        assert self._pool is not None
        deadline = asyncio.get_running_loop().time() + wait_ms / 1000
        while True:
            async with self._pool.acquire() as conn:
                wm = await self.store.watermark(conn)
            if wm is not None and wm >= seq:
                return True
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return False
            self._progress.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._progress.wait(), timeout=min(left, READ_POLL_S))

    async def _in_ledger(self, tenant: str, task_id: str) -> bool:
        """Whether the ledger holds a message of this task (one direct get, no scan)."""
        assert self._nc is not None
        subject = ledger_subject(self.settings.prefix, tenant, task_id)
        try:
            reply = await self._nc.request(f"$JS.API.DIRECT.GET.{self.settings.stream}",
                                           msgspec.json.encode({"last_by_subj": subject}), timeout=2)
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
            return False
        return bool((reply.headers or {}).get("Nats-Sequence"))

    def _keyring(self) -> Keyring:
        """Opened on the first request that reveals personal values."""
        if self._keys is None:
            assert self._nc is not None
            self._keys = Keyring(self._nc, self.settings.keys_bucket,
                                 kek_of(self.settings, create=False),
                                 cache_bytes=self.settings.key_cache_bytes)
        return self._keys

    # ---- NATS callbacks ------------------------------------------------------------------------

    async def _nats_error(self, exc: Exception) -> None:
        log.warning("projector.nats_error", error=type(exc).__name__, detail=_safe(exc))

    async def _nats_closed(self) -> None:
        if not self._stopping and self._failed is not None and not self._failed.done():
            self._failed.set_exception(ConnectionError("the NATS connection closed"))


_view_encoder = msgspec.json.Encoder()



def _check_read_request(ref: TaskRef) -> None:
    """Fields of a wm.get request that only make sense together (the decoder checks each alone)."""
    if ref.chunk is not None and ref.digest is None:
        raise ContractError("a chunk request needs the digest the first chunk's reply carried",
                            code="missing_field", path="$.digest")
    if ref.digest is not None and ref.chunk is None:
        raise ContractError("digest goes with chunk: the first chunk is read without either",
                            code="invalid_value", path="$.digest")
    if ref.rejections is not None and ref.chunk is not None:
        raise ContractError("ask for a rejections page or a chunk of the view, not both",
                            code="invalid_value", path="$.rejections")


def _error(code: str, message: str, path: str | None = None, retryable: bool = False) -> WorkingMemoryReply:
    return WorkingMemoryReply(ok=False, error=ErrorBody(code=code, message=message, path=path,
                                                        retryable=retryable))


def _safe(exc: BaseException) -> str:
    """An exception's text, bounded (our errors never carry event content)."""
    return str(exc)[:300]
