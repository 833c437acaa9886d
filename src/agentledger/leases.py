"""Execution leases with fencing tokens, held by the ledger-writer.

An executor that starts or resumes a task takes its lease: a holder, an expiry
and a fencing token that only grows. The writer refuses guarded events that
carry a token other than the live lease's, so of two executors racing to resume
the same task exactly one can write; a dead executor's lease lapses and the
next one takes over with a higher token.

Leases live in a JetStream KV bucket, changed only by compare-and-swap on the
entry's revision, so two writer processes cannot both grant one. Each writer
mirrors the bucket in memory through a KV watch, so checking an append costs no
round trip. Inside one writer, a per-task lock serialises lease changes with
guarded appends: a lease cannot move between an append's token check and its
commit. (With several writer processes, a check may see another writer's grant
only after the watch delivers it; run one active writer where exact fencing matters.)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import msgspec
from nats.aio.client import Client
from nats.js.errors import KeyWrongLastSequenceError

from agentledger.buckets import open_kv
from agentledger.errors import AgentLedgerError

# Kinds that change execution state: once a task has a live lease, only its holder
# (presenting the current token) may append them. Conversation turns, questions
# answered by people and artifact registrations stay open to everyone.
GUARDED_KINDS = frozenset({
    "plan_versioned", "step_started", "step_succeeded", "step_failed", "step_cancelled",
    "side_effect_recorded", "budget_reserved", "budget_consumed", "budget_released",
    "variable_set", "task_completed", "task_failed",
})


class Lease(msgspec.Struct, frozen=True):
    holder: str
    token: int
    expires_at: float  # seconds since the epoch, by the writer's clock

    def live(self, now: float) -> bool:
        return now < self.expires_at


class LeaseError(AgentLedgerError):
    """The caller does not hold the task's lease (held by another, lost, or expired)."""

    code = "lease_held"


class LeaseTable:
    """Grants, renews and checks leases; the source of truth is the KV bucket."""

    def __init__(self, nc: Client, bucket: str, clock: Callable[[], float] = time.time) -> None:
        self._js = nc.jetstream()
        self._bucket = bucket
        self._clock = clock
        self._kv: Any = None
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}
        # key -> (lease or None, KV revision), mirrored from the bucket.
        self._mirror: dict[str, tuple[Lease | None, int]] = {}
        self._watcher: Any = None
        self._watch_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Load the bucket into memory and keep following it; returns once loaded."""
        kv = await self._store()
        self._watcher = await kv.watchall()
        loaded = asyncio.get_running_loop().create_future()
        self._watch_task = asyncio.create_task(self._follow(loaded))
        await loaded

    async def stop(self) -> None:
        if self._watch_task is not None:
            self._watch_task.cancel()
            self._watch_task = None
        if self._watcher is not None:
            await self._watcher.stop()
            self._watcher = None

    async def _follow(self, loaded: asyncio.Future[None]) -> None:
        async for entry in self._watcher:
            if entry is None:  # the watch delivered every current value
                if not loaded.done():
                    loaded.set_result(None)
                continue
            lease = msgspec.json.decode(entry.value, type=Lease) if entry.value else None
            self._remember(entry.key, lease, entry.revision)

    def _remember(self, key: str, lease: Lease | None, revision: int) -> None:
        if revision >= self._mirror.get(key, (None, 0))[1]:
            self._mirror[key] = (lease, revision)

    async def _store(self) -> Any:
        if self._kv is None:
            self._kv = await open_kv(self._js, self._bucket)
        return self._kv

    @staticmethod
    def key(tenant: str, task_id: str) -> str:
        return f"{tenant}.{task_id}"

    @asynccontextmanager
    async def locked(self, tenant: str, task_id: str) -> AsyncIterator[None]:
        """Hold the task's lock: no lease change happens inside the block."""
        key = self.key(tenant, task_id)
        entry = self._locks.setdefault(key, (asyncio.Lock(), [0]))
        entry[1][0] += 1  # holders and waiters: the lock is dropped when none are left
        try:
            async with entry[0]:
                yield
        finally:
            entry[1][0] -= 1
            if entry[1][0] == 0:
                del self._locks[key]

    async def current(self, tenant: str, task_id: str) -> tuple[Lease | None, int]:
        """The lease (live or not) and the KV revision to CAS against (0: none)."""
        if self._watch_task is None:
            await self.start()
        return self._mirror.get(self.key(tenant, task_id), (None, 0))

    async def _write(self, tenant: str, task_id: str, lease: Lease, revision: int) -> None:
        kv = await self._store()
        key = self.key(tenant, task_id)
        body = msgspec.json.encode(lease)
        try:
            if revision == 0:
                new_revision = await kv.create(key, body)
            else:
                new_revision = await kv.update(key, body, last=revision)
        except KeyWrongLastSequenceError as exc:
            raise LeaseError("another writer changed this lease concurrently; retry",
                             retryable=True) from exc
        self._remember(key, lease, new_revision)

    async def acquire(self, tenant: str, task_id: str, holder: str, ttl_s: float) -> Lease:
        """Take the lease if it is free, expired or already ours; the token grows."""
        async with self.locked(tenant, task_id):
            now = self._clock()
            lease, revision = await self.current(tenant, task_id)
            if lease is not None and lease.live(now) and lease.holder != holder:
                raise LeaseError(f"task is leased to another executor until {lease.expires_at:.3f}",
                                 path="$.task_id")
            token = (lease.token if lease else 0) + 1
            granted = Lease(holder=holder, token=token, expires_at=now + ttl_s)
            await self._write(tenant, task_id, granted, revision)
            return granted

    async def renew(self, tenant: str, task_id: str, holder: str, token: int, ttl_s: float) -> Lease:
        """Extend a live lease we hold; a lapsed or taken-over lease is lost for good."""
        async with self.locked(tenant, task_id):
            now = self._clock()
            lease, revision = await self.current(tenant, task_id)
            self._require(lease, holder, token, now)
            assert lease is not None
            renewed = Lease(holder=holder, token=token, expires_at=now + ttl_s)
            await self._write(tenant, task_id, renewed, revision)
            return renewed

    async def release(self, tenant: str, task_id: str, holder: str, token: int) -> None:
        """End our lease now (its token stays spent: the next grant is higher)."""
        async with self.locked(tenant, task_id):
            now = self._clock()
            lease, revision = await self.current(tenant, task_id)
            self._require(lease, holder, token, now)
            assert lease is not None
            await self._write(tenant, task_id, Lease(holder, token, now), revision)

    @staticmethod
    def _require(lease: Lease | None, holder: str, token: int, now: float) -> None:
        if lease is None or lease.token != token or lease.holder != holder:
            raise LeaseError("this lease was taken over or never granted", code="lease_lost",
                             path="$.token")
        if not lease.live(now):
            raise LeaseError("this lease expired", code="lease_expired", path="$.token")

    async def check(self, tenant: str, task_id: str, events: list[tuple[str, int | None]]) -> None:
        """Refuse guarded events (``(kind, fencing_token)`` in request order) whose token is
        not the live lease's.

        Call it while holding ``locked(tenant, task_id)`` and keep holding it until
        the events are committed.
        """
        lease, _ = await self.current(tenant, task_id)
        now = self._clock()
        for i, (kind, token) in enumerate(events):
            path = f"$.events[{i}].fencing_token"
            if token is None:
                if kind in GUARDED_KINDS and lease is not None and lease.live(now):
                    raise LeaseError("the task is leased; guarded events must carry its fencing token",
                                     code="fencing_token_required", path=path)
                continue
            if lease is None or token != lease.token:
                current = lease.token if lease else 0
                raise LeaseError(f"fencing token {token} is stale; the task's lease is at token {current}",
                                 code="stale_fencing_token", path=path)
            if not lease.live(now):
                raise LeaseError("the lease of this fencing token expired", code="lease_expired", path=path)
