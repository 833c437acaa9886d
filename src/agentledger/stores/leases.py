"""Execution leases as capabilities, held by the ledger-writer.

An executor that starts or resumes a task takes its lease and gets three
things back: the **fencing token**, the expiry (``expires_at``, seconds since
the Unix epoch by the writer's clock) and an unguessable **secret** bound to
the holder. Renew, release and every append to the leased task need the token
and the secret; the writer stores only a keyed blake3 hash of the secret.

Where the fencing token comes from: every grant first appends a
``lease_granted`` event (holder, expiry, secret hash; never the secret) to the
task's ledger subject through the writer's normal commit path, and the token
*is that event's ledger sequence*. Stream sequences only grow and nothing
outside the ledger can lower them, so no lease-table entry, hand-written,
purged or expired, can make a later grant reuse a token: the next grant is
simply a later message. It costs one append per grant and nothing per append.

The lease table (a JetStream KV bucket) keeps the live state a grant started:
holder, token, secret hash and expiry, which renewals move. Entries carry a
per-key TTL (the lease's remaining time plus ``linger_s``), so an expired or
released lease disappears from the bucket by itself, and the server's removal
marker tells every writer's mirror. The table is bounded twice more: a tenant
holds at most ``max_per_tenant`` live leases (a further grant is
``too_many_leases``), and the bucket has a byte limit (``lease_table_full``).
An entry the writer did not write itself
(learnt from the watch, e.g. after a restart) is checked once against the
ledger before it is trusted: the ``lease_granted`` event at its token must name
the same task, holder and secret hash. A forged or damaged entry is ignored.

Inside one writer, a per-task lock serialises lease changes with the appends
that a lease concerns: a lease cannot move between such an append's check and
its commit. An append to a task that has no lease that is or may be live, and
no lease change under way, needs no check and takes no lock (``unleased``);
a grant then waits until every append already accepted for the task is stored
or refused before it picks its sequence (``GrantLedger.task_last_seq``), so no
unfenced append lands after a grant.

Several writers. Each writer's copy of the table (the watch) may lag another
writer's grant, so no writer trusts its copy alone; what is exact is tied to
the server's compare-and-swaps:

- **Who gets a lease** is decided by a compare-and-swap on the task's entry:
  a grant first writes a *pending* entry (token 0: the holder, expiry and
  secret hash, no token yet) over the revision it checked, then appends its
  ``lease_granted`` event, then replaces the pending entry by the lease (over
  the pending revision). Renewals and releases swap the same entry, so of any
  grants, renewals and releases racing on any writers, each one that succeeds
  saw the entry as the one before left it; a pending entry of another holder
  is ``lease_held`` for a grant and ``lease_lost`` for a renewal or release.
- **A fenced append is committed against one lease state**: the writer knows,
  for the task, a ledger sequence and the latest grant at or below it
  (``_Fence``), and commits the append with
  ``Nats-Expected-Last-Subject-Sequence`` set to that sequence. If anything
  was appended since (a grant by another writer included), the server refuses
  it; the writer reads what came since (``GrantLedger.fence_at``: the last
  message's ``Agentledger-Fence`` stamp, or a scan), checks again and retries,
  or refuses ``stale_fencing_token`` when a later grant is among them. The
  messages of a fenced append carry the grant they were checked against
  (``Agentledger-Fence``), which is true of them because of that expectation.
  A writer's own commits keep its knowledge current, so with one writer this
  costs no read at all.

Not exact across writers: an append without a token that a writer accepts as
``unleased`` in the moment another writer grants the task's lease (before the
watch delivers the grant) may be stored just after the grant, as if it had
been sent just before it. Renewals and releases reach the other writers'
checks through their watch; a holder's own append racing its release through
another writer may be accepted (a later grant to anyone fences it).
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import math
import secrets
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import blake3
import msgspec
import nats.errors
import nats.js.errors
import structlog
from nats.aio.client import Client
from nats.js.errors import BucketNotFoundError, KeyNotFoundError

from agentledger.contracts.api import MAX_LEASE_TTL_S
from agentledger.contracts.events import EVENT_TYPES, WRITER_ONLY_KINDS
from agentledger.errors import AgentLedgerError, ConflictError, NotFoundError, UnavailableError
from agentledger.security.identity import Caller

log = structlog.get_logger()

# While a task has a live lease, every kind a client can append needs the lease's
# token and secret (unless an operator identity appends it).
GUARDED_KINDS = frozenset(EVENT_TYPES) - WRITER_ONLY_KINDS
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
# A pending entry's token: the grant's ledger sequence is not known yet.
PENDING = 0


class Lease(msgspec.Struct, frozen=True):
    """A lease-table entry. ``expires_at``: seconds since the Unix epoch, writer clock.

    ``token`` 0: a grant under way (its ``lease_granted`` event is being appended); it
    keeps other holders out until it expires and opens nothing.
    """

    holder: str
    token: int
    expires_at: float
    secret_hash: str

    def live(self, now: float) -> bool:
        return now < self.expires_at


class LeaseError(AgentLedgerError):
    """The caller does not hold the task's lease (held by another, lost, expired, wrong secret)."""

    code = "lease_held"


class GrantLedger(Protocol):
    """What a grant needs from the ledger (the writer implements it on its committer)."""

    async def task_last_seq(self, tenant: str, task_id: str) -> int:
        """Sequence of the task's last ledger message, once every append accepted for the
        task so far is stored or refused; 0 when the task has none."""

    async def record_grant(self, tenant: str, task_id: str, *, holder: str, expires_at: float,
                           secret_hash: str, expected_last_seq: int) -> int:
        """Append the ``lease_granted`` event; its ledger sequence (the new token)."""

    async def granted_at(self, tenant: str, task_id: str, token: int) -> tuple[str, str] | None:
        """(holder, secret hash) of this task's ``lease_granted`` event at ``token``, if it is one."""

    async def fence_at(self, tenant: str, task_id: str, *, after: int, grant: int,
                       seq: int | None = None) -> tuple[int, int]:
        """(last, latest grant): the task's last ledger sequence (``seq`` when the caller
        knows it, e.g. from a refused expectation) and the token of the latest
        ``lease_granted`` at or below it, given that ``grant`` is the latest at or below
        ``after``. ``last`` below ``after``: messages were removed or the read lagged."""


def secret_hash(tenant: str, task_id: str, holder: str, secret: str) -> str:
    """Keyed blake3 of a lease secret, bound to the task and the holder it was granted to."""
    material = "\0".join(("agentledger-lease-v1", tenant, task_id, holder, secret)).encode()
    return blake3.blake3(material).hexdigest()


def secret_matches(lease: Lease, tenant: str, task_id: str, secret: str | None) -> bool:
    if not secret:
        return False
    return hmac.compare_digest(secret_hash(tenant, task_id, lease.holder, secret), lease.secret_hash)


@dataclass
class _Entry:
    lease: Lease | None  # None: the key holds a removal marker or something unreadable
    revision: int
    # True: written by this process or checked against the ledger; False: forged; None: unchecked.
    verified: bool | None


@dataclass
class _Fence:
    """What a writer knows of a task's ledger: ``grant`` is the latest ``lease_granted`` at
    or below the task's message at ``seq`` (read, or committed by this writer with an
    expectation, so nothing it does not know came in between)."""

    seq: int
    grant: int


class Fenced(msgspec.Struct, frozen=True):
    """How to commit an append the lease table checked: the expectation on the task's last
    sequence (None: none) and the grant to stamp on its messages (None: no stamp)."""

    expected: int | None
    stamp: int | None


class _StaleRevision(Exception):  # noqa: N818 - internal signal, never escapes this module
    """The entry changed since the mirror saw it (a TTL marker, another writer, a hand edit)."""


class LeaseTable:
    """Grants, renews, releases and checks leases; see the module docstring."""

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
        self._mirror: dict[str, _Entry] = {}
        # Per task key, the ledger state fenced appends are committed against (see _Fence).
        self._fences: dict[str, _Fence] = {}
        # Keys of the mirror by tenant, so a grant counts only its tenant's leases.
        self._by_tenant: dict[str, set[str]] = {}
        self._max_per_tenant = max_per_tenant
        self._max_bytes = max_bytes
        self._replicas = replicas
        self._watcher: Any = None
        self._watch_task: asyncio.Task[None] | None = None

    # ---- the bucket and its mirror ---------------------------------------------------------

    async def start(self) -> None:
        """Open the bucket (per-key TTLs, removal markers), load it and keep following it."""
        kv = await self._store()
        self._watcher = await kv.watchall()
        loaded = asyncio.get_running_loop().create_future()
        self._watch_task = asyncio.create_task(self._follow(loaded))
        await loaded

    async def stop(self) -> None:
        if self._watch_task is not None:
            self._watch_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch_task
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
                self._kv = await self._js.create_key_value(
                    bucket=self._bucket, history=1, limit_marker_ttl=self._marker_ttl_s,
                    max_bytes=self._max_bytes or -1, replicas=self._replicas)
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
            self._remember(entry.key, _decode(entry.value), entry.revision, None)

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
        self._keep(key, _Entry(lease, revision, verified))

    def _keep(self, key: str, entry: _Entry) -> None:
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

    def _require_room(self, tenant: str, key: str) -> None:
        """Refuse a grant that would give ``tenant`` more live leases than it may hold."""
        now = self._clock()
        live = 0
        for other in self._by_tenant.get(tenant, ()):
            entry = self._mirror.get(other)
            if other != key and entry is not None and entry.lease is not None \
                    and entry.lease.live(now):
                live += 1
        if live >= self._max_per_tenant:
            raise LeaseError(f"tenant {tenant!r} holds {live} live leases, the most it may hold; "
                             "release some or let them lapse", code="too_many_leases",
                             path="$.task_id")

    async def _refresh(self, key: str) -> None:
        """Read the key's latest message from the bucket's stream (after a stale revision)."""
        try:
            msg = await self._js.get_msg(self._stream, subject=f"$KV.{self._bucket}.{key}")
        except nats.js.errors.NotFoundError:
            self._forget(key)
            return
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
            raise UnavailableError("the lease bucket did not answer") from exc
        known = self._mirror.get(key)
        revision = int(msg.seq or 0)
        if known is not None and known.revision == revision:
            return  # the copy is current: keep what was verified of it
        headers = msg.headers or {}
        removed = headers.get("KV-Operation") in ("DEL", "PURGE") or "Nats-Marker-Reason" in headers
        lease = None if removed else _decode(msg.data)
        self._keep(key, _Entry(lease, revision, None))

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
                raise _StaleRevision from exc
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

    # ---- grant, renew, release ------------------------------------------------------------

    async def acquire(self, tenant: str, task_id: str, holder: str,
                      ttl_s: float) -> tuple[Lease, str]:
        """Take the lease if it is free, expired or already ``holder``'s: (lease, secret).

        A new grant always gets a new token (its ``lease_granted`` sequence) and a
        new secret; the previous secret stops working. A task with no ledger
        message is refused with ``not_found``.

        Three steps, so that any number of writers grant exactly once: a pending
        entry swapped over the revision that was checked (of writers granting at
        once, only one swaps it; the others hear ``lease_held``), the grant's
        ledger event, then the lease swapped over the pending entry.
        """
        key = self.key(tenant, task_id)
        async with self.locked(tenant, task_id):
            lease, revision = await self.current(tenant, task_id)
            if not self._free(lease, holder):
                await self._refresh(key)  # our copy may lag a release made through another writer
                lease, revision = await self.current(tenant, task_id)
                self._require_free(lease, holder)
            self._require_room(tenant, key)
            last = await self._ledger.task_last_seq(tenant, task_id)
            if last == 0:
                raise NotFoundError(f"the ledger has no task {task_id!r} of tenant {tenant!r}; "
                                    "a lease is granted only for a task that exists",
                                    path="$.task_id")
            secret = secrets.token_urlsafe(32)
            digest = secret_hash(tenant, task_id, holder, secret)
            expires_at = self._clock() + ttl_s
            pending = Lease(holder=holder, token=PENDING, expires_at=expires_at, secret_hash=digest)
            try:
                held = await self._write(key, pending, revision)
            except _StaleRevision:
                # The entry moved since our copy of it: a TTL removal marker the watch has not
                # delivered yet, or another writer's grant, renewal or release.
                await self._refresh(key)
                lease, revision = await self.current(tenant, task_id)
                self._require_free(lease, holder)
                try:
                    held = await self._write(key, pending, revision)
                except _StaleRevision as exc:
                    raise LeaseError("another writer changed this lease concurrently; retry",
                                     retryable=True, path="$.task_id") from exc
            try:
                token = await self._ledger.record_grant(tenant, task_id, holder=holder,
                                                        expires_at=expires_at, secret_hash=digest,
                                                        expected_last_seq=last)
            except BaseException:
                await self._abandon(key, pending, held)
                raise
            self._fences[key] = _Fence(seq=token, grant=token)
            granted = Lease(holder=holder, token=token, expires_at=expires_at, secret_hash=digest)
            await self._install(tenant, task_id, granted, held)
            return granted, secret

    async def _install(self, tenant: str, task_id: str, granted: Lease, revision: int) -> None:
        """Swap the granted lease over our pending entry at ``revision``.

        The entry can have moved only to a grant of the same holder made at the same
        time through another writer (a pending entry keeps other holders out), or to
        anything once our pending entry expired. The later grant is the one the ledger
        fences with, so the higher token wins: ours replaces a pending entry or a lower
        token, and gives way to a higher one.
        """
        key = self.key(tenant, task_id)
        for _ in range(4):
            try:
                await self._write(key, granted, revision)
                return
            except _StaleRevision:
                await self._refresh(key)
                lease, revision = await self.current(tenant, task_id)
                if lease is not None and lease.token > granted.token:
                    break
        raise LeaseError("a later grant of this task, made at the same time through another "
                         "writer, superseded this one; retry", retryable=True, path="$.task_id")

    async def _abandon(self, key: str, pending: Lease, revision: int) -> None:
        """A grant that failed after its pending entry was written: end the entry now, so it
        does not keep the task from others until it expires (best effort)."""
        with contextlib.suppress(Exception):
            await self._write(key, msgspec.structs.replace(pending, expires_at=self._clock()),
                              revision)

    def _free(self, lease: Lease | None, holder: str) -> bool:
        return lease is None or not lease.live(self._clock()) or lease.holder == holder

    def _require_free(self, lease: Lease | None, holder: str) -> None:
        if not self._free(lease, holder):
            assert lease is not None
            raise LeaseError(f"task is leased to another executor until {lease.expires_at:.3f}",
                             path="$.task_id")

    async def renew(self, tenant: str, task_id: str, holder: str, token: int, *,
                    secret: str | None, ttl_s: float) -> Lease:
        """Extend a live lease we hold; a lapsed or taken-over lease is lost for good."""
        return await self._change(tenant, task_id, holder, token, secret=secret, ttl_s=ttl_s)

    async def release(self, tenant: str, task_id: str, holder: str, token: int, *,
                      secret: str | None) -> None:
        """End our lease now (the next grant gets a later token all the same)."""
        await self._change(tenant, task_id, holder, token, secret=secret, ttl_s=None)

    async def _change(self, tenant: str, task_id: str, holder: str, token: int, *,
                      secret: str | None, ttl_s: float | None) -> Lease:
        key = self.key(tenant, task_id)
        async with self.locked(tenant, task_id):
            refreshed = False
            for _ in range(3):
                now = self._clock()
                lease, revision = await self.current(tenant, task_id)
                try:
                    self._require(lease, tenant, task_id, holder, token, secret=secret, now=now)
                except LeaseError:
                    if refreshed:
                        raise
                    # Our copy may lag: the grant, a renewal or a release came through another writer.
                    await self._refresh(key)
                    refreshed = True
                    continue
                assert lease is not None
                changed = msgspec.structs.replace(
                    lease, expires_at=now + ttl_s if ttl_s is not None else now)
                try:
                    await self._write(key, changed, revision)
                except _StaleRevision:
                    await self._refresh(key)
                    refreshed = True
                    continue
                return changed
        raise LeaseError("another writer changed this lease concurrently; retry", retryable=True,
                         path="$.token")

    def _require(self, lease: Lease | None, tenant: str, task_id: str, holder: str, token: int, *,
                 secret: str | None, now: float) -> None:
        if lease is None or lease.token != token or lease.holder != holder:
            raise LeaseError("this lease was taken over, expired long ago or was never granted",
                             code="lease_lost", path="$.token")
        if not secret_matches(lease, tenant, task_id, secret):
            raise LeaseError("the lease secret is missing or wrong; it is the one the grant "
                             "returned", code="lease_secret_invalid", path="$.secret")
        if not lease.live(now):
            raise LeaseError("this lease expired", code="lease_expired", path="$.token")

    # ---- fencing appends ---------------------------------------------------------------------

    async def check(self, tenant: str, task_id: str, events: list[tuple[str, int | None]],
                    secret: str | None, caller: Caller) -> None:
        """Refuse events (``(kind, fencing_token)`` in request order) the caller may not append.

        While the task has a live lease, a tenant agent's events need its token,
        the request needs its secret, and the agent must be the holder. An
        operator identity may append without a token (to cancel a task, record
        an answer, repair); a token it does present is checked like anyone's.
        Call it while holding ``locked(tenant, task_id)`` and keep holding it
        until the events are committed (or skip it, without the lock, while
        ``unleased`` holds and no event carries a token).
        """
        lease, _ = await self.current(tenant, task_id)
        now = self._clock()
        live = lease is not None and lease.live(now)
        secret_checked = False
        for i, (kind, token) in enumerate(events):
            path = f"$.events[{i}].fencing_token"
            if token is None:
                if live and not caller.is_operator and kind in GUARDED_KINDS:
                    raise LeaseError("the task is leased; every event needs the lease's fencing "
                                     "token (and the request its lease_secret)",
                                     code="fencing_token_required", path=path)
                continue
            if lease is None or token != lease.token:
                current = ("being granted" if lease is not None and lease.token == PENDING
                           else f"at token {lease.token}" if lease is not None else "not leased")
                raise LeaseError(f"fencing token {token} is stale; the task's lease is {current}",
                                 code="stale_fencing_token", path=path)
            if not live:
                raise LeaseError("the lease of this fencing token expired", code="lease_expired",
                                 path=path)
            if caller.agent is not None and caller.agent != lease.holder:
                raise LeaseError(f"this lease is held by {lease.holder!r}, not by agent "
                                 f"{caller.agent!r}", code="holder_mismatch", path=path)
            if not secret_checked:
                if not secret_matches(lease, tenant, task_id, secret):
                    raise LeaseError("a fenced append needs the lease's secret in lease_secret; "
                                     "it is missing or wrong", code="lease_secret_invalid",
                                     path="$.lease_secret")
                secret_checked = True


    async def fence(self, tenant: str, task_id: str, events: list[tuple[str, int | None]],
                    secret: str | None, caller: Caller, *, expected: int | None = None,
                    moved: int | None = None) -> Fenced:
        """``check`` the events, against the ledger too; how to commit them (see ``Fenced``).

        Call it while holding ``locked(tenant, task_id)`` and keep holding it until the
        events are committed with the returned expectation; then call ``committed``.
        ``expected``: the request's own ``expected_last_seq``. ``moved``: the task's last
        sequence as the server reported it when it refused our previous expectation.

        With a token, the latest ``lease_granted`` at or below the sequence the append
        will be committed after must be that token's grant: the writer's knowledge of
        the task is used when it is current, otherwise read (``GrantLedger.fence_at``).
        A later grant (another writer's, which our copy of the table may not show
        yet) makes the token ``stale_fencing_token``.
        """
        key = self.key(tenant, task_id)
        try:
            await self.check(tenant, task_id, events, secret, caller)
        except LeaseError:
            # Our copy may lag a grant or a renewal made through another writer: look once.
            entry = self._mirror.get(key)
            before = entry.revision if entry is not None else None
            await self._refresh(key)
            entry = self._mirror.get(key)
            if (entry.revision if entry is not None else None) == before:
                raise
            await self.check(tenant, task_id, events, secret, caller)
        tokens = {t for _, t in events if t is not None}
        if not tokens:
            # Nothing to fence; an expectation we know to be true keeps our knowledge current.
            fence = self._fences.get(key)
            if expected is not None:
                known = fence is not None and fence.seq == expected
                return Fenced(expected, fence.grant if known and fence is not None else None)
            if fence is None or moved is not None:
                self._fences.pop(key, None)
                return Fenced(None, None)
            return Fenced(fence.seq, fence.grant)
        (token,) = tokens  # check() let through only the live lease's token
        path = next(f"$.events[{i}].fencing_token" for i, (_, t) in enumerate(events) if t is not None)
        known = self._fences.get(key)
        if expected is not None and expected < max(token, known.seq if known is not None else 0):
            # The task is already past it (its grant at least is): the server refuses it, or
            # finds the append stored (a retry), and says which.
            return Fenced(expected, None)
        fence = await self._fence_of(tenant, task_id, token, path,
                                     expected if expected is not None else moved)
        if expected is not None:
            if expected > fence.seq:
                raise ConflictError(f"expected last sequence {expected}, the task is at {fence.seq}",
                                    path="$.expected_last_seq", current_seq=fence.seq)
            return Fenced(expected, fence.grant if expected == fence.seq else None)
        return Fenced(fence.seq, fence.grant)

    async def _fence_of(self, tenant: str, task_id: str, token: int, path: str,
                        target: int | None) -> _Fence:
        """Our knowledge of the task's ledger, current as of ``target`` (a sequence said to be
        the task's last; None: ours is, unless we have none), with ``token``'s grant the
        latest in it; ``stale_fencing_token`` when a later grant is."""
        key = self.key(tenant, task_id)
        fence = self._fences.get(key)
        fresh = False
        if fence is not None and fence.grant > token:
            pass  # the ledger has a later grant than the token: stale (below)
        elif fence is None or fence.grant != token or (target is not None and target < fence.seq):
            fence, fresh = _Fence(token, token), True  # the token's grant is the lease's: known
        if fence.grant == token and (fresh or (target is not None and target != fence.seq)):
            last, grant = await self._ledger.fence_at(tenant, task_id, after=fence.seq,
                                                      grant=fence.grant, seq=target)
            if last < fence.seq and fence.seq != token:
                last, grant = await self._ledger.fence_at(tenant, task_id, after=token,
                                                          grant=token, seq=target)
            if last < token:
                raise LeaseError(f"fencing token {token} is stale; its grant is not in the "
                                 "ledger", code="stale_fencing_token", path=path)
            fence = self._fences[key] = _Fence(last, grant)
        if fence.grant != token:
            await self._refresh(key)
            raise LeaseError(f"fencing token {token} is stale; the task's lease was granted again "
                             f"at {fence.grant}", code="stale_fencing_token", path=path)
        return fence

    def committed(self, tenant: str, task_id: str, fenced: Fenced, last_seq: int) -> None:
        """A unit committed as ``fenced`` said is stored, its last message at ``last_seq``:
        nothing came between our knowledge and it, so our knowledge moves to it."""
        fence = self._fences.get(self.key(tenant, task_id))
        if (fence is not None and fenced.expected == fence.seq and fenced.stamp == fence.grant
                and last_seq > fence.seq):
            fence.seq = last_seq


async def holder_of(nc: Client, bucket: str, tenant: str, task_id: str) -> str | None:
    """Who holds the task's lease while it is live, as the lease table says (None: nobody).

    For a permission check outside the writer (who may forget a task): the entry is read
    without the writer's check against the ledger, which a forged entry could only use to
    refuse, and the table is written by the writers alone.
    """
    try:
        entry = await (await nc.jetstream().key_value(bucket)).get(f"{tenant}.{task_id}")
    except (BucketNotFoundError, KeyNotFoundError):
        return None
    lease = _decode(entry.value)
    return lease.holder if lease is not None and lease.token and lease.live(time.time()) else None


def _decode(value: bytes | None) -> Lease | None:
    if not value:
        return None
    try:
        return msgspec.json.decode(value, type=Lease)
    except msgspec.MsgspecError:
        return None  # unreadable (hand-written, or an entry from before secrets): no lease
