"""The checkpointer: saves verifiable checkpoints of Working Memory, serves resume.

Automatic saves. It listens to the projector's ``<prefix>.wm.changed.>``
notifications. Each carries the task's ``TaskProgress`` (events applied,
status, the sequence of its latest terminal step), which is all
``core.checkpoint_policy.due`` needs: a notification of a task whose last
checkpoint is known and for which nothing is due ends right there, with no
read (most notifications, as a checkpoint is due every 100 events). The others
mark their task dirty (notifications for one task coalesce to the newest);
workers take dirty tasks, learn the task's last checkpoint (read back from
PostgreSQL the first time a task is seen), and only when a checkpoint is due
read the projected state, check the policy on it and save it. A task is never
evaluated by two workers at once. A missed notification only delays a
checkpoint: resume replays the ledger after whatever checkpoint it finds.

Endpoints (NATS micro service ``agentledger-checkpointer``):

* ``<prefix>.checkpoint.save``: save a checkpoint of one task now. It first waits
  (bounded) for the projection to reach the task's last ledger message, so the
  checkpoint covers everything appended before the request. When the active
  checkpoint already covers that sequence, it is returned (``created: false``).
* ``<prefix>.resume``: the resume protocol of ``resume.py``.

Each request is handled in a task of its own, so a slow resume never holds up
another one.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from typing import Any

import asyncpg
import msgspec
import nats
import nats.errors
import nats.js.errors
import structlog
from nats.aio.client import Client
from nats.micro import add_service
from nats.micro.request import Request
from nats.micro.service import Service

from agentledger.config import Settings
from agentledger.contracts.api import ErrorBody, TaskChanged
from agentledger.contracts.codec import check_request, contract_error, encode
from agentledger.contracts.resume import (
    CheckpointSaveReply,
    CheckpointSaveRequest,
    ResumeReply,
    ResumeRequest,
)
from agentledger.core import checkpoint as cp_mod
from agentledger.core import checkpoint_policy as policy
from agentledger.core.state import WorkingMemory
from agentledger.erasure import evict
from agentledger.errors import AgentLedgerError, ContractError, NotFoundError, UnavailableError
from agentledger.security import auth
from agentledger.security.identity import Caller, PermissionDeniedError, TenantRegistry
from agentledger.services.checkpointer.resume import Resumer
from agentledger.services.checkpointer.store import CheckpointStore, migrate_checkpoints
from agentledger.services.projector.rebuild import LIVE_SCHEMA
from agentledger.services.projector.store import Store as ProjectionStore
from agentledger.shell.lifecycle import ServiceShell
from agentledger.stores import artifacts, db
from agentledger.stores.ledger import ledger_subject
from agentledger.stores.natsclient import reader_alive

log = structlog.get_logger()

# The queue group the checkpointer instances share the change notifications in.
NOTIFY_QUEUE = "agentledger-checkpointer"
SERVICE_NAME = "agentledger-checkpointer"
SERVICE_VERSION = "0.1.0"
WORKERS = 4
# Tasks whose last checkpoint is remembered in memory (the rest are read back when needed).
MEMORY_MAX = 50_000
# How long checkpoint.save waits for the projection to reach the task's last ledger event.
SAVE_CATCH_UP_S = 10.0

Key = tuple[str, str]

_save_request = msgspec.json.Decoder(CheckpointSaveRequest)
_resume_request = msgspec.json.Decoder(ResumeRequest)
_changed = msgspec.json.Decoder(TaskChanged)


def save_subject(prefix: str) -> str:
    return f"{prefix}.checkpoint.save"


def resume_subject(prefix: str) -> str:
    return f"{prefix}.resume"


def changed_wildcard(prefix: str) -> str:
    return f"{prefix}.wm.changed.>"


class Checkpointer(ServiceShell):
    """Saves checkpoints by policy and on request; answers resume. See the module docstring."""

    name = "checkpointer"
    log_name = "checkpointer"

    def __init__(self, settings: Settings, *, every_n: int = policy.EVERY_N_EVENTS,
                 keep: int = policy.KEEP_PER_TASK, ttl_s: float = policy.CHECKPOINT_TTL_S) -> None:
        self.settings = settings
        self.every_n = every_n
        self.keep = keep
        self.ttl_s = ttl_s
        self.projection = ProjectionStore(LIVE_SCHEMA)
        self.store: CheckpointStore | None = None
        self.resumer: Resumer | None = None
        self._nc: Client | None = None
        self._pool: asyncpg.Pool | None = None
        self._sub: Any = None
        self._evictions: Any = None
        self._service: Service | None = None
        self._workers: list[asyncio.Task[None]] = []
        self._handlers: set[asyncio.Task[None]] = set()
        self._tenants: TenantRegistry | None = None
        self._failed: asyncio.Future[None] | None = None
        self._stopped = False
        # Dirty tasks -> their newest notification; a task is in at most one of dirty / busy.
        self._dirty: OrderedDict[Key, TaskChanged] = OrderedDict()
        self._busy: set[Key] = set()
        self._wake = asyncio.Event()
        self._locks: dict[Key, asyncio.Lock] = {}
        # What this process knows of each task's last checkpoint.
        self._last: OrderedDict[Key, policy.LastCheckpoint] = OrderedDict()
        # Highest projected seq evaluated per task, recent tasks only (tests use it to sync).
        self.evaluated: dict[Key, int] = {}
        self.saves = 0

    # ---- lifecycle ----------------------------------------------------------------------

    async def _start(self) -> None:
        s = self.settings
        self._nc = await auth.connect(s, "checkpointer",
                                      max_reconnect_attempts=-1, error_cb=self._nats_error,
                                      closed_cb=self._nats_closed)
        self._tenants = TenantRegistry(self._nc, s.prefix, s.stream_replicas)
        await self._tenants.start()
        self._pool = await db.create_pool(s.database_url, min_size=1, max_size=8)
        # The projector owns task_state; migrating here too lets either start first.
        await db.migrate(s.database_url)
        await migrate_checkpoints(s.database_url)
        self.store = CheckpointStore(self._pool, keep=self.keep)
        self.resumer = Resumer(self._nc, s, self.store, await artifacts.open(self._nc, s))
        self._workers = [asyncio.create_task(self._work(), name=f"checkpointer-{i}")
                         for i in range(WORKERS)]
        # One queue group: with several checkpointer instances each notification reaches one of
        # them, so they share the work. A save is exact whoever makes it (the pointer only moves
        # forward, by compare-and-swap); an instance that did not see a task's last checkpoint
        # may save one a little early (docs/scaling.md).
        self._sub = await self._nc.subscribe(changed_wildcard(s.prefix), queue=NOTIFY_QUEUE,
                                             cb=self._on_changed,
                                             pending_msgs_limit=0, pending_bytes_limit=0)
        self._service = await add_service(
            self._nc, name=SERVICE_NAME, version=SERVICE_VERSION,
            description="Checkpoints of agentledger Working Memory, and resume")
        await self._service.add_endpoint(name="checkpoint-save", subject=save_subject(s.prefix),
                                         handler=self._spawn(self._handle_save))
        await self._service.add_endpoint(name="resume", subject=resume_subject(s.prefix),
                                         handler=self._spawn(self._handle_resume))
        self._evictions = await evict.listen(self._nc, s.prefix, SERVICE_NAME, self._service.id,
                                             self._evict)
        await self._nc.flush()

    async def _evict(self, e: evict.Eviction) -> dict[str, int]:
        """A forget request reached these tasks: drop what is known of them (seqs evaluated)."""
        keys = [k for k in self.evaluated if k[0] == e.tenant and (e.whole_tenant or k[1] == e.task_id)]
        for key in keys:
            self.evaluated.pop(key, None)
        return {"tasks": len(keys)}

    async def wait_failed(self) -> None:
        if self._failed is None:
            self._failed = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._failed)

    def alive(self) -> bool:
        """A live NATS read loop (notifications and requests arrive) and every worker running."""
        return (self._nc is not None and reader_alive(self._nc)
                and all(not task.done() for task in self._workers))

    async def stop(self) -> None:
        """Stop listening, finish in-flight requests and saves, close; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self._service is not None:
            with contextlib.suppress(Exception):
                await self._service.stop()
        for sub in (self._sub, self._evictions):
            if sub is not None:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
        if self._handlers:
            await asyncio.gather(*self._handlers, return_exceptions=True)
        for task in self._workers:
            task.cancel()  # a save cut short rolls back: the pointer never sees half of it
        await asyncio.gather(*self._workers, return_exceptions=True)
        if self._tenants is not None:
            await self._tenants.stop()
        if self._nc is not None and not self._nc.is_closed:
            try:
                await self._nc.drain()
            except Exception:  # noqa: BLE001
                await self._nc.close()
        if self._pool is not None:
            await self._pool.close()

    # ---- automatic saves --------------------------------------------------------------------

    async def _on_changed(self, msg: Any) -> None:
        try:
            changed = _changed.decode(msg.data)
        except msgspec.MsgspecError:
            log.warning("checkpointer.bad_notification", subject=msg.subject)
            return
        key = (changed.tenant, changed.task_id)
        pending = self._dirty.get(key)
        if pending is not None and pending.seq >= changed.seq:
            return  # late: a newer notification of the task is already waiting
        known = self._last.get(key)
        if known is not None and key not in self._busy and changed.progress is not None \
                and policy.due(changed.seq, changed.progress, known, self.every_n) is None:
            # Nothing is due. A waiting older notification of the task is superseded: a
            # worker would read this state (or a newer one) for it anyway.
            self._last.move_to_end(key)
            self._dirty.pop(key, None)
            self._mark_evaluated(key, changed.seq)
            return
        self._dirty[key] = changed
        self._wake.set()

    def _next_dirty(self) -> tuple[Key, TaskChanged] | None:
        for key in self._dirty:
            if key not in self._busy:
                return key, self._dirty.pop(key)
        return None

    async def _work(self) -> None:
        try:
            while True:
                item = self._next_dirty()
                if item is None:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                key, changed = item
                self._busy.add(key)
                try:
                    await self._evaluate(key, changed)
                except (*db.DATABASE_ERRORS, AgentLedgerError) as exc:
                    # Not fatal: the next notification of the task tries again.
                    log.warning("checkpointer.evaluate_failed", tenant=key[0], task=key[1],
                                error=type(exc).__name__, detail=str(exc)[:300])
                    await asyncio.sleep(0.2)
                finally:
                    self._busy.discard(key)
                    if key in self._dirty:
                        self._wake.set()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            log.error("checkpointer.failed", error=type(exc).__name__, detail=str(exc)[:300])
            if self._failed is not None and not self._failed.done():
                self._failed.set_exception(exc)
            raise

    async def _evaluate(self, key: Key, changed: TaskChanged) -> None:
        """Save a checkpoint of ``key`` if the policy says one is due.

        The state is read only when the notification says a checkpoint is due (or
        cannot say); the decision is then taken again on the state read, which may
        be newer than the notification.
        """
        async with self._lock(key):
            known = self._last.get(key)
            if known is not None and changed.seq <= known.seq:
                self._mark_evaluated(key, changed.seq)  # a late notification: nothing new
                return
            last = await self._last_checkpoint(key)
            if changed.progress is not None and policy.due(
                    changed.seq, changed.progress, last, self.every_n) is None:
                self._mark_evaluated(key, changed.seq)
                return
            seq, state = await self._projected(key)
            if state is None:
                return
            reason = policy.due_for_state(state, last, self.every_n)
            if reason is not None:
                checkpoint_id = await self._save(state)
                log.info("checkpointer.saved", tenant=key[0], task=key[1], seq=state.watermark,
                         reason=reason, checkpoint_id=checkpoint_id)
            self._mark_evaluated(key, seq)

    def _mark_evaluated(self, key: Key, seq: int) -> None:
        self.evaluated[key] = max(seq, self.evaluated.pop(key, 0))
        while len(self.evaluated) > MEMORY_MAX:
            del self.evaluated[next(iter(self.evaluated))]

    # ---- on request -------------------------------------------------------------------------

    async def save_now(self, tenant: str, task_id: str) -> CheckpointSaveReply:
        """Save a checkpoint of the task at its latest ledger event (see the module docstring)."""
        key = (tenant, task_id)
        target = await self._ledger_last(tenant, task_id)
        if target == 0:
            raise NotFoundError(f"the ledger has no task {task_id!r} of tenant {tenant!r}",
                                path="$.task_id")
        state = await self._caught_up(key, target)
        async with self._lock(key):
            assert self.store is not None
            active = await self.store.locate(tenant, task_id)
            if active is not None and active.seq >= state.watermark:
                return CheckpointSaveReply(ok=True, checkpoint_id=active.id, seq=active.seq,
                                           created=False)
            checkpoint_id = await self._save(state)
        log.info("checkpointer.saved", tenant=tenant, task=task_id, seq=state.watermark,
                 reason="requested", checkpoint_id=checkpoint_id)
        return CheckpointSaveReply(ok=True, checkpoint_id=checkpoint_id, seq=state.watermark,
                                   created=True)

    async def _caught_up(self, key: Key, target: int) -> WorkingMemory:
        """The projected state once the projection covers the ledger up to ``target``."""
        assert self._pool is not None
        deadline = time.monotonic() + SAVE_CATCH_UP_S
        delay = 0.005
        while True:
            watermark = await self.projection.watermark(self._pool) or 0
            if watermark >= target:
                _, state = await self._projected(key)
                if state is None:
                    raise NotFoundError(f"no projected task {key[1]!r} of tenant {key[0]!r}",
                                        path="$.task_id")
                return state
            if time.monotonic() > deadline:
                raise UnavailableError(f"the projection is at seq {watermark}, the task's last ledger "
                                       f"event at {target}; is the projector running?",
                                       code="projection_behind")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.1)

    # ---- shared -------------------------------------------------------------------------------

    def _lock(self, key: Key) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            if len(self._locks) > MEMORY_MAX:
                for k in [k for k, v in self._locks.items() if not v.locked()]:
                    del self._locks[k]
            lock = self._locks[key] = asyncio.Lock()
        return lock

    async def _projected(self, key: Key) -> tuple[int, WorkingMemory | None]:
        assert self._pool is not None
        loaded = await self.projection.load_state(self._pool, key[0], key[1])
        if loaded is None:
            return 0, None
        return loaded.seq, loaded.state

    async def _last_checkpoint(self, key: Key) -> policy.LastCheckpoint | None:
        known = self._last.get(key)
        if known is not None:
            self._last.move_to_end(key)
            return known
        assert self.store is not None
        found = await self.store.locate(*key)
        if found is None:
            # Remembered too: until its first checkpoint, a task's notifications are then
            # decided without a read, like those of any task whose checkpoint is known.
            self._remember(key, policy.NONE)
            return policy.NONE
        try:
            cp = cp_mod.decode(found.body)
            status = cp_mod.restore(cp).status
        except msgspec.MsgspecError:
            # An unreadable active checkpoint: count from nothing, so a fresh one is saved.
            return None
        last = policy.LastCheckpoint(seq=found.seq, events=found.events, task_status=status)
        self._remember(key, last)
        return last

    def _remember(self, key: Key, last: policy.LastCheckpoint) -> None:
        self._last[key] = last
        self._last.move_to_end(key)
        while len(self._last) > MEMORY_MAX:
            self._last.popitem(last=False)

    async def _save(self, state: WorkingMemory) -> int:
        """Build and store a checkpoint of ``state``; the caller holds the task's lock."""
        assert self.store is not None
        cp = cp_mod.build(state, now=time.time(), ttl_s=self.ttl_s)
        checkpoint_id = await self.store.save(cp, events=state.events_applied)
        self._remember((state.tenant, state.task_id), policy.of_state(state))
        self.saves += 1
        return int(checkpoint_id)

    async def _ledger_last(self, tenant: str, task_id: str) -> int:
        """Sequence of the task's last ledger message (0: none)."""
        assert self._nc is not None
        try:
            msg = await self._nc.jetstream().get_msg(
                self.settings.stream, subject=ledger_subject(self.settings.prefix, tenant, task_id),
                direct=True)
        except nats.js.errors.NotFoundError:
            return 0
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
            raise UnavailableError("JetStream did not answer") from exc
        return int(msg.seq or 0)

    # ---- endpoints ------------------------------------------------------------------------------

    def _spawn(self, handler: Any) -> Any:
        async def on_request(req: Request) -> None:
            task = asyncio.create_task(handler(req))
            self._handlers.add(task)
            task.add_done_callback(self._handlers.discard)
        return on_request

    async def _caller(self, req: Request) -> Caller:
        assert self._tenants is not None
        return await self._tenants.caller(req.headers)

    async def _handle_save(self, req: Request) -> None:
        try:
            try:
                check_request(req.data)
                body = _save_request.decode(req.data)
            except msgspec.MsgspecError as exc:
                raise contract_error(exc) from exc
            (await self._caller(req)).require_tenant(body.tenant, "$.tenant")
            reply = await self.save_now(body.tenant, body.task_id)
        except Exception as exc:  # noqa: BLE001 - every request gets a typed reply
            reply = CheckpointSaveReply(ok=False, error=_error_body(exc))
        await _respond(req, encode(reply))

    async def _handle_resume(self, req: Request) -> None:
        try:
            try:
                check_request(req.data)
                body = _resume_request.decode(req.data)
            except msgspec.MsgspecError as exc:
                raise contract_error(exc) from exc
            if body.checkpoint_id is not None and body.checkpoint_id > MAX_BIGINT:
                raise ContractError(f"checkpoint_id must be at most {MAX_BIGINT}",
                                    code="invalid_value", path="$.checkpoint_id")
            caller = await self._caller(req)
            caller.require_tenant(body.tenant, "$.tenant")
            if body.checkpoint_id is not None and not caller.is_operator:
                # A checkpoint id is global: naming one is how an operator restores from a
                # backup, and from a tenant it would probe other tenants' checkpoints.
                raise PermissionDeniedError("checkpoint_id is an operator-only field; leave it out to "
                                            "resume from the task's active checkpoint",
                                            code="operator_only", path="$.checkpoint_id")
            if caller.agent is not None and body.executor != caller.agent:
                raise PermissionDeniedError(
                    f"this connection is authenticated as agent {caller.agent!r}; an agent resumes "
                    "a task only as itself", code="holder_mismatch", path="$.executor")
            assert self.resumer is not None
            with structlog.contextvars.bound_contextvars(tenant=body.tenant, task=body.task_id):
                reply = await self.resumer.resume(body)
                log.info("checkpointer.resume", status=reply.status, executor=body.executor,
                         reasons=[r.code for r in reply.reasons], replayed=reply.replayed_events)
        except Exception as exc:  # noqa: BLE001 - every request gets a typed reply
            reply = ResumeReply(ok=False, error=_error_body(exc))
        await _respond(req, self._fitting(reply))

    def _fitting(self, reply: ResumeReply) -> bytes:
        """The encoded reply, without its state when it would not fit in one NATS message.

        The resume already happened (the lease is granted): a reply that cannot be sent
        would leave the executor without its secret. The state can always be read
        afterwards through ``wm.get``, which sends any size in chunks.
        """
        data: bytes = encode(reply)
        budget = self.settings.max_reply_bytes
        if self._nc is not None and self._nc.max_payload:
            budget = min(budget, self._nc.max_payload)
        if reply.state is not None and len(data) > budget:
            log.info("checkpointer.resume_state_omitted", state_bytes=len(data), budget=budget)
            data = encode(msgspec.structs.replace(reply, state=None, state_omitted=True))
        return data



# Checkpoint ids are PostgreSQL bigints.
MAX_BIGINT = 2**63 - 1


def _error_body(exc: Exception) -> ErrorBody:
    if isinstance(exc, AgentLedgerError):
        return ErrorBody(code=exc.code, message=exc.message, retryable=exc.retryable, path=exc.path)
    # PostgreSQL or NATS failing mid-request (a dropped connection, a protocol error, a
    # timeout) is the dependency's trouble: retryable ``unavailable``, never ``internal``.
    if isinstance(exc, (asyncpg.PostgresError, OSError, asyncpg.InterfaceError,
                        asyncpg.InternalClientError, TimeoutError, nats.errors.Error)):
        log.warning("checkpointer.unavailable", error=type(exc).__name__, detail=str(exc)[:300])
        return ErrorBody(code="unavailable", message="a dependency did not answer; retry",
                         retryable=True)
    log.error("checkpointer.internal", error=type(exc).__name__, detail=str(exc)[:300],
              exc_info=exc)
    return ErrorBody(code="internal", message="the checkpointer failed to answer", retryable=True)


async def _respond(req: Request, data: bytes) -> None:
    try:
        await req.respond(data)
    except Exception:  # noqa: BLE001 - the caller went away; nothing to tell
        log.warning("checkpointer.respond_failed")
