"""The lease table's bucket and this writer's copy of it (``LeaseBucket``).

The lease table is a JetStream KV bucket that keeps the live state a grant started: holder,
token, secret hash and expiry, which renewals move. Entries carry a per-key TTL (the lease's
remaining time plus ``linger_s``), so an expired or released lease disappears from the bucket by
itself, and the server's removal marker tells every writer's copy (the watch). The bucket has a
byte limit (``lease_table_full``). Every write is a compare-and-swap over the revision the writer
saw (``StaleRevision`` when the entry moved), which is what makes grants, renewals and releases
exact across writers (``lease_grants``).

An entry the writer did not write itself (learnt from the watch, e.g. after a restart) is
checked once against the ledger before it is trusted: the ``lease_granted`` event at its token
must name the same task, holder and secret hash. A forged or damaged entry is ignored.

Inside one writer, a per-task lock (``locked``) serialises lease changes with the appends that a
lease concerns: a lease cannot move between such an append's check and its commit. An append to
a task that has no lease that is or may be live, and no lease change under way, needs no check
and takes no lock (``unleased``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import msgspec
import nats.errors
import nats.js.errors
import structlog
from nats.aio.client import Client
from nats.js.errors import BucketNotFoundError

from agentledger.contracts.api import MAX_LEASE_TTL_S
from agentledger.erasure.erase import kv_removed
from agentledger.errors import UnavailableError
from agentledger.shell.tasks import stop_task
from agentledger.stores.buckets import kv_stream_config
from agentledger.stores.lease_state import PENDING, Fence, GrantLedger, Lease, LeaseError, decode_lease

log = structlog.get_logger()

# How long an expired or released entry stays in the bucket (so a late call hears
# ``lease_expired`` rather than ``lease_lost``) before its TTL removes it.
LINGER_S = 60.0
# TTL of the removal marker the server leaves when an entry's TTL ends.
MARKER_TTL_S = 60.0
# Live leases one tenant may hold at once (AGENTLEDGER_MAX_LEASES_PER_TENANT): a tenant's
# leases are bounded by this, not only by their TTLs, so it cannot fill the table.
MAX_LEASES_PER_TENANT = 10_000
# Clock skew tolerated when checking that an entry's expiry is one a grant could give.
_SKEW_S = 5.0
_WRONG_LAST_SEQUENCE = (10071, 10164)
# "maximum bytes exceeded": the bucket is at its size limit and refuses new entries.
_STORE_LIMIT = 10077
# A read of one entry that finds the bucket's stream away (no responder, a timeout, or "JetStream
# system temporarily unavailable" while a cluster elects a leader) is asked again every
# ``READ_RETRY_PAUSE_S`` for ``READ_RETRY_WINDOW_S``: the same patience the writer gives a
# publish (``group_commit.RETRY_WINDOW_S``), so an append whose fence needs this read is not
# the one that answers ``unavailable`` while its publish would have waited.
READ_RETRY_PAUSE_S = 0.2
READ_RETRY_WINDOW_S = 4.0


@dataclass
class Entry:
    lease: Lease | None  # None: the key holds a removal marker or something unreadable
    revision: int
    # True: written by this process or checked against the ledger; False: forged; None: unchecked.
    verified: bool | None


class StaleRevision(Exception):  # noqa: N818 - internal signal, never escapes the lease table
    """The entry changed since the mirror saw it (a TTL marker, another writer, a hand edit)."""


class LeaseBucket:
    """The lease table's bucket, this writer's copy of it, and the per-task locks."""

    def __init__(self, nc: Client, bucket: str, ledger: GrantLedger, *,
                 clock: Callable[[], float] = time.time, linger_s: float | None = None,
                 marker_ttl_s: float | None = None,
                 max_per_tenant: int = MAX_LEASES_PER_TENANT, max_bytes: int = 0,
                 replicas: int = 1) -> None:
        self._js = nc.jetstream()
        self._bucket = bucket
        self._stream = f"KV_{bucket}"
        self._ledger = ledger
        self._clock = clock
        self._linger_s = LINGER_S if linger_s is None else linger_s
        self._marker_ttl_s = MARKER_TTL_S if marker_ttl_s is None else marker_ttl_s
        self._kv: Any = None
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}
        self._mirror: dict[str, Entry] = {}
        # Per task key, the ledger state fenced appends are committed against (see Fence).
        self._fences: dict[str, Fence] = {}
        # Keys of the mirror by tenant, so a grant counts only its tenant's leases.
        self._by_tenant: dict[str, set[str]] = {}
        self._max_per_tenant = max_per_tenant
        self._max_bytes = max_bytes
        self._replicas = replicas
        self._watcher: Any = None
        self._watch_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Open the bucket (per-key TTLs, removal markers), load it and keep following it."""
        kv = await self._store()
        self._watcher = await kv.watchall()
        loaded = asyncio.get_running_loop().create_future()
        self._watch_task = asyncio.create_task(self._follow(loaded))
        await loaded

    async def stop(self) -> None:
        await stop_task(self._watch_task)
        self._watch_task = None
        if self._watcher is not None:
            with contextlib.suppress(Exception):
                await self._watcher.stop()
            self._watcher = None

    async def _store(self) -> Any:
        if self._kv is None:
            try:
                self._kv = await self._js.key_value(self._bucket)
            except BucketNotFoundError:
                await self._js.add_stream(kv_stream_config(
                    self._bucket, max_bytes=self._max_bytes, replicas=self._replicas,
                    marker_ttl_s=self._marker_ttl_s))
                self._kv = await self._js.key_value(self._bucket)
            info = await self._js.stream_info(self._stream)
            if not info.config.allow_msg_ttl or not info.config.subject_delete_marker_ttl:
                # A bucket from before per-key TTLs: turn them (and removal markers) on.
                config = info.config
                config.allow_msg_ttl = True
                config.subject_delete_marker_ttl = self._marker_ttl_s
                await self._js.update_stream(config)
        return self._kv

    async def _follow(self, loaded: asyncio.Future[None]) -> None:
        async for entry in self._watcher:
            if entry is None:  # the watch delivered every current value
                if not loaded.done():
                    loaded.set_result(None)
                continue
            self._remember(entry.key, decode_lease(entry.value), entry.revision, None)

    def _remember(self, key: str, lease: Lease | None, revision: int, verified: bool | None) -> None:
        known = self._mirror.get(key)
        if known is not None and revision < known.revision:
            return  # an older revision than one already known (a write of ours the watch lags)
        if known is not None and revision == known.revision:
            known.verified = known.verified or verified
            return
        if lease is None:
            # Removed (TTL marker, delete, purge): forget it. The marker's revision is
            # learnt again by ``_refresh`` if a later write needs it.
            self._forget(key)
            return
        self._keep(key, Entry(lease, revision, verified))

    def _keep(self, key: str, entry: Entry) -> None:
        self._mirror[key] = entry
        self._by_tenant.setdefault(key.partition(".")[0], set()).add(key)

    def evict(self, tenant: str, task_id: str | None = None) -> int:
        """Drop mirrored leases of one task, or of every task of ``tenant``; how many.

        A forget request erases the bucket's messages through the stream API, which
        the watch does not see as a delete: the fan-out tells the writer to drop them.
        """
        keys = [f"{tenant}.{task_id}"] if task_id is not None else list(self._by_tenant.get(tenant, ()))
        held = [k for k in keys if k in self._mirror]
        for key in held:
            self._forget(key)
        return len(held)

    def _forget(self, key: str) -> None:
        self._fences.pop(key, None)
        if self._mirror.pop(key, None) is None:
            return
        tenant = key.partition(".")[0]
        keys = self._by_tenant.get(tenant)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_tenant[tenant]


    async def _refresh(self, key: str) -> None:
        """Read the key's latest message from the bucket's stream (after a stale revision)."""
        msg = await self._latest(key)
        if msg is None:
            self._forget(key)
            return
        known = self._mirror.get(key)
        revision = int(msg.seq or 0)
        if known is not None and known.revision == revision:
            return  # the copy is current: keep what was verified of it
        lease = None if kv_removed(msg.headers) else decode_lease(msg.data)
        self._keep(key, Entry(lease, revision, None))

    async def _latest(self, key: str) -> Any:
        """The key's latest message, or None when it has none; retried within
        ``READ_RETRY_WINDOW_S`` while the stream is away, then ``unavailable``."""
        give_up = time.monotonic() + READ_RETRY_WINDOW_S
        while True:
            try:
                return await self._js.get_msg(self._stream, subject=f"$KV.{self._bucket}.{key}")
            except nats.js.errors.NotFoundError:
                return None
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
                error = UnavailableError("the lease bucket did not answer")
                cause: Exception = exc
            except nats.js.errors.APIError as exc:
                # E.g. its stream has no leader for a moment (a cluster electing one).
                error = UnavailableError(f"the lease bucket could not be read: {exc.description}")
                cause = exc
            if time.monotonic() + READ_RETRY_PAUSE_S >= give_up:
                raise error from cause
            await asyncio.sleep(READ_RETRY_PAUSE_S)

    async def _write(self, key: str, lease: Lease, revision: int) -> int:
        """Compare-and-swap ``lease`` over ``revision``; the entry expires ``linger_s`` after it.
        Returns the entry's new revision."""
        kv = await self._store()
        assert kv is not None
        ttl = max(1, math.ceil(lease.expires_at - self._clock() + self._linger_s))
        try:
            ack = await self._js.publish(
                f"$KV.{self._bucket}.{key}", msgspec.json.encode(lease),
                headers={"Nats-Expected-Last-Subject-Sequence": str(revision)}, msg_ttl=ttl)
        except nats.js.errors.APIError as exc:
            if exc.err_code in _WRONG_LAST_SEQUENCE:
                raise StaleRevision from exc
            if exc.err_code == _STORE_LIMIT:
                raise LeaseError("the lease table is at its size limit (AGENTLEDGER_MAX_LEASES_BYTES);"
                                 " leases free their space as they lapse", code="lease_table_full",
                                 retryable=True, path="$.task_id") from exc
            raise
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
            raise UnavailableError("the lease bucket did not answer") from exc
        self._remember(key, lease, ack.seq, True)
        return int(ack.seq)

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

    def unleased(self, tenant: str, task_id: str) -> bool:
        """Whether it is known without I/O that appends to the task need no lease check now.

        True when nobody holds or waits for the task's lock (no lease change is under
        way) and the task has no lease that is or may be live: no entry, a removed or
        unreadable one, one found forged, or one that expired (expiry is final; only a
        new grant, under the lock, makes a lease live again). Such an append is
        accepted as the check would accept it, provided its events carry no token.
        """
        if self._watch_task is None:
            return False
        key = self.key(tenant, task_id)
        if key in self._locks:
            return False
        entry = self._mirror.get(key)
        return (entry is None or entry.lease is None or entry.verified is False
                or not entry.lease.live(self._clock()))

    async def current(self, tenant: str, task_id: str) -> tuple[Lease | None, int]:
        """The trusted lease (live or not) and the KV revision to CAS against (0: none).

        An entry not written by this process is checked against the ledger once;
        one that fails the check (forged, or its grant is gone) counts as no lease.
        A pending entry (token 0, a grant under way on some writer) is taken as it is:
        it only keeps others out until it expires.
        """
        if self._watch_task is None:
            await self.start()
        key = self.key(tenant, task_id)
        entry = self._mirror.get(key)
        if entry is None:
            return None, 0
        if entry.lease is not None and entry.verified is None and entry.lease.token == PENDING:
            entry.verified = True
        if entry.lease is not None and entry.verified is None:
            verified = await self._verify(tenant, task_id, entry.lease)
            if not verified:
                log.warning("lease.untrusted_entry", tenant=tenant, task=task_id,
                            revision=entry.revision)
            if self._mirror.get(key) is entry:
                entry.verified = verified
        if entry.lease is None or not entry.verified:
            return None, entry.revision
        return entry.lease, entry.revision

    async def _verify(self, tenant: str, task_id: str, lease: Lease) -> bool:
        if lease.expires_at > self._clock() + MAX_LEASE_TTL_S + _SKEW_S:
            return False  # no grant or renewal gives that much
        granted = await self._ledger.granted_at(tenant, task_id, lease.token)
        return granted is not None and granted == (lease.holder, lease.secret_hash)
