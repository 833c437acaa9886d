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
* ``<prefix>.resume``: the resume protocol of ``resume.py``; a retry of a version 3 request
  (the same ``request_id``) gets the first attempt's answer (``resume_once.py``).

Each request is handled in a task of its own, so a slow resume never holds up
another one.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from typing import Any

import asyncpg
import msgspec
import structlog

from agentledger.config import Settings
from agentledger.contracts.api import TaskChanged
from agentledger.contracts.codec import encode
from agentledger.contracts.resume import (
    CheckpointSaveReply,
    CheckpointSaveRequest,
    ResumeReply,
    ResumeRequest,
    check_resume_version,
)
from agentledger.core import checkpoint as cp_mod
from agentledger.core import checkpoint_policy as policy
from agentledger.core.state import WorkingMemory
from agentledger.erasure import evict
from agentledger.errors import AgentLedgerError, ContractError, IntegrityViolationError, NotFoundError
from agentledger.projection.catch_up import covering
from agentledger.security.identity import Caller, PermissionDeniedError
from agentledger.security.integrity_keys import keys_of
from agentledger.services.checkpointer.resume import Resumer
from agentledger.services.checkpointer.resume_once import ResumeOnce
from agentledger.services.checkpointer.store import CheckpointStore, migrate_checkpoints
from agentledger.services.projector.rebuild import LIVE_SCHEMA
from agentledger.services.projector.store import Store as ProjectionStore
from agentledger.services.projector.store import check_loaded
from agentledger.shell import metrics
from agentledger.shell.endpoints import Endpoint
from agentledger.shell.parts import Parts
from agentledger.shell.service import Pool, Shape, Shell
from agentledger.stores import artifacts, db
from agentledger.stores.ledger import task_last_seq

log = structlog.get_logger()

# The queue group the checkpointer instances share the change notifications in.
NOTIFY_QUEUE = "agentledger-checkpointer"
SERVICE_NAME = "agentledger-checkpointer"
WORKERS = 4
# Tasks whose last checkpoint is remembered in memory (the rest are read back when needed).
MEMORY_MAX = 50_000
# How long checkpoint.save waits for the projection to reach the task's last ledger event.
SAVE_CATCH_UP_S = 10.0

Key = tuple[str, str]

_changed = msgspec.json.Decoder(TaskChanged)


def save_subject(prefix: str) -> str:
    return f"{prefix}.checkpoint.save"


def resume_subject(prefix: str) -> str:
    return f"{prefix}.resume"


def changed_wildcard(prefix: str) -> str:
    return f"{prefix}.wm.changed.>"


class Checkpointer(Shell):
    """Saves checkpoints by policy and on request; answers resume. See the module docstring."""

    # Any PostgreSQL error mid-request (a projection being switched by a replay included) is
    # the dependency's trouble: retryable ``unavailable``.
    shape = Shape(name="checkpointer", micro=SERVICE_NAME, log_name="checkpointer",
                  pool=Pool(max_size=8), bind_task=True, unavailable=(asyncpg.PostgresError,),
                  description="Checkpoints of agentledger Working Memory, and resume")

    store: CheckpointStore | None = None
    resumer: Resumer | None = None

    def __init__(self, settings: Settings, *, every_n: int = policy.EVERY_N_EVENTS,
                 keep: int = policy.KEEP_PER_TASK, ttl_s: float = policy.CHECKPOINT_TTL_S) -> None:
        super().__init__(settings)
        self.every_n = every_n
        self.keep = keep
        self.ttl_s = ttl_s
        self.projection = ProjectionStore(LIVE_SCHEMA)
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
        self.once = ResumeOnce()

    async def open(self, parts: Parts) -> None:
        s = self.settings
        assert self._nc is not None and self._pool is not None
        # The projector owns task_state; the shell migrating here too lets either start first.
        await migrate_checkpoints(s.database_url)
        self.store = CheckpointStore(self._pool, keys_of(s), keep=self.keep)
        self.resumer = Resumer(self._nc, s, self.store, await artifacts.open(self._nc, s))
        # A save cut short by the stop rolls back: the pointer never sees half of it.
        for i in range(WORKERS):
            parts.task(self._work(), name=f"checkpointer-{i}", vital=True)
        # One queue group: with several checkpointer instances each notification reaches one of
        # them, so they share the work. A save is exact whoever makes it (the pointer only moves
        # forward, by compare-and-swap); an instance that did not see a task's last checkpoint
        # may save one a little early (docs/scaling.md).
        await parts.subscribe(self._nc, changed_wildcard(s.prefix), self._on_changed, queue=NOTIFY_QUEUE,
                              pending_msgs_limit=0, pending_bytes_limit=0)

    def endpoints(self) -> list[Endpoint]:
        p = self.settings.prefix
        return [
            Endpoint("checkpoint-save", save_subject(p), CheckpointSaveRequest, CheckpointSaveReply, self._on_save),
            Endpoint("resume", resume_subject(p), ResumeRequest, ResumeReply, self._on_resume, check=_check_resume),
        ]

    def evictor(self) -> evict.Evictor:
        return self._evict

    async def _evict(self, e: evict.Eviction) -> dict[str, int]:
        """A forget request reached these tasks: drop what is known of them (seqs evaluated)."""
        keys = [k for k in self.evaluated if k[0] == e.tenant and (e.whole_tenant or k[1] == e.task_id)]
        for key in keys:
            self.evaluated.pop(key, None)
        task_keys = self.resumer.task_keys.evict(e.tenant, None if e.whole_tenant else e.task_id) \
            if self.resumer is not None and (e.whole_tenant or e.task_id) else 0
        return {"tasks": len(keys), "keys": task_keys}

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
        except BaseException as exc:  # the shell ends the process (a vital task)
            log.error("checkpointer.failed", error=type(exc).__name__, detail=str(exc)[:300])
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
        assert self._nc is not None
        target = await task_last_seq(self._nc, self.settings, tenant, task_id)
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
        pool = self._pool
        assert pool is not None
        await covering(lambda: self.projection.watermark(pool), target, SAVE_CATCH_UP_S,
                       first_delay_s=0.005, max_delay_s=0.1)
        _, state = await self._projected(key)
        if state is None:
            raise NotFoundError(f"no projected task {key[1]!r} of tenant {key[0]!r}", path="$.task_id")
        return state

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
        # Never checkpoint (and so re-certify) an edited projection row.
        check_loaded(loaded, keys_of(self.settings).mac_key_of)
        return loaded.seq, loaded.state

    async def _last_checkpoint(self, key: Key) -> policy.LastCheckpoint | None:
        known = self._last.get(key)
        if known is not None:
            self._last.move_to_end(key)
            return known
        assert self.store is not None
        try:
            found = await self.store.locate(*key)
        except IntegrityViolationError:
            # An active checkpoint edited outside the services: count from nothing, so a fresh
            # one is saved (resume refuses the edited one meanwhile).
            log.error("checkpointer.integrity_violation", tenant=key[0], task=key[1])
            return None
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
        metrics.CHECKPOINT_SAVES.inc()
        return int(checkpoint_id)

    # ---- endpoints ------------------------------------------------------------------------------

    async def _on_save(self, caller: Caller, body: CheckpointSaveRequest) -> CheckpointSaveReply:
        return await self.save_now(body.tenant, body.task_id)

    async def _on_resume(self, caller: Caller, body: ResumeRequest) -> bytes:
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
        resumer = self.resumer
        assert resumer is not None

        async def evaluate() -> tuple[bytes, bool]:
            reply = await resumer.resume(body)
            metrics.RESUMES.inc(status=reply.status or "none")
            log.info("checkpointer.resume", status=reply.status, executor=body.executor,
                     reasons=[r.code for r in reply.reasons], replayed=reply.replayed_events)
            return self._fitting(reply), reply.lease is not None

        data, shared = await self.once.answer(body, evaluate)
        if shared:
            log.info("checkpointer.resume_retried", executor=body.executor)
        return data

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


def _check_resume(body: ResumeRequest) -> None:
    check_resume_version(body)
    if body.checkpoint_id is not None and body.checkpoint_id > MAX_BIGINT:
        raise ContractError(f"checkpoint_id must be at most {MAX_BIGINT}", code="invalid_value",
                            path="$.checkpoint_id")
