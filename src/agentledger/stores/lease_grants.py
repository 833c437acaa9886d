"""Who gets a lease: grants, renewals and releases, exact across any number of writers.

Where the fencing token comes from: every grant first appends a ``lease_granted`` event (holder,
expiry, secret hash; never the secret) to the task's ledger subject through the writer's normal
commit path, and the token *is that event's ledger sequence*. Stream sequences only grow and
nothing outside the ledger can lower them, so no lease-table entry, hand-written, purged or
expired, can make a later grant reuse a token: the next grant is simply a later message. It costs
one append per grant and nothing per append. A grant waits until every append already accepted
for the task is stored or refused before it picks its sequence (``GrantLedger.task_last_seq``),
so no unfenced append of its writer lands after a grant; one that another writer accepted is
committed with an expectation the grant makes fail (``lease_fencing``).

Each writer's copy of the table may lag another writer's grant, so who gets a lease is decided by
a compare-and-swap on the task's entry: a grant first writes a *pending* entry (token 0: the
holder, expiry and secret hash, no token yet) over the revision it checked, then appends its
``lease_granted`` event, then replaces the pending entry by the lease (over the pending
revision). Renewals and releases swap the same entry, so of any grants, renewals and releases
racing on any writers, each one that succeeds saw the entry as the one before left it; a pending
entry of another holder is ``lease_held`` for a grant and ``lease_lost`` for a renewal or
release. A tenant holds at most ``max_per_tenant`` live leases (``too_many_leases``).
"""

from __future__ import annotations

import contextlib
import secrets

import msgspec

from agentledger.errors import NotFoundError
from agentledger.stores.lease_bucket import LeaseBucket, StaleRevision
from agentledger.stores.lease_state import PENDING, Fence, Lease, LeaseError, secret_hash, secret_matches


class LeaseGrants(LeaseBucket):
    """Grants, renews and releases the leases of the bucket (see the module docstring)."""

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
            except StaleRevision:
                # The entry moved since our copy of it: a TTL removal marker the watch has not
                # delivered yet, or another writer's grant, renewal or release.
                await self._refresh(key)
                lease, revision = await self.current(tenant, task_id)
                self._require_free(lease, holder)
                try:
                    held = await self._write(key, pending, revision)
                except StaleRevision as exc:
                    raise LeaseError("another writer changed this lease concurrently; retry",
                                     retryable=True, path="$.task_id") from exc
            try:
                token = await self._ledger.record_grant(tenant, task_id, holder=holder,
                                                        expires_at=expires_at, secret_hash=digest,
                                                        expected_last_seq=last)
            except BaseException:
                await self._abandon(key, pending, held)
                raise
            self._fences[key] = Fence(seq=token, grant=token)
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
            except StaleRevision:
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
                except StaleRevision:
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
