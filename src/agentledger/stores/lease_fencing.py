"""Fencing appends: which events a caller may append to a leased task, and against what state.

While a task has a live lease, a client's events need the lease's token and the request its
secret (``check``). Across writers this is exact because a fenced append is committed against
one lease state: the writer knows, for the task, a ledger sequence and the latest grant at or
below it (``Fence``), and commits the append with ``Nats-Expected-Last-Subject-Sequence`` set to
that sequence (``fence``). If anything was appended since (a grant by another writer included),
the server refuses it; the writer reads what came since (``GrantLedger.fence_at``: the last
message's ``Agentledger-Fence`` stamp, or a scan), checks again and retries, or refuses
``stale_fencing_token`` when a later grant is among them. The messages of a fenced append carry
the grant they were checked against (``Agentledger-Fence``), which is true of them because of
that expectation. A writer's own commits keep its knowledge current (``committed``), so with one
writer this costs no read at all.

An append without a token is exact across writers too. Accepted as ``unleased`` (no live lease
in our copy of the table, which lags another writer's grant until the watch delivers it), it is
committed right after the task's last message as the writer's committer knows it from its own
acks (``Unit.guard``; "no message" for a task it has none for). A grant made meanwhile through
another writer makes the server refuse that expectation; the writer then reads the task's table
entry (``fence`` with ``moved``), which the grant wrote before its event reached the ledger, so
it shows the lease: refused ``fencing_token_required`` while it is live (unless an operator
appends), otherwise committed after the sequence the server reported, as a fenced append is
retried. The same read comes before a caller's own ``expected_last_seq`` that is not ours. With
one writer, nothing is read: its own acks keep its knowledge current.

Renewals and releases reach the other writers' checks through their watch; a holder's own
append racing its release through another writer may be accepted (a later grant to anyone
fences it).
"""

from __future__ import annotations

import msgspec

from agentledger.contracts.events import EVENT_TYPES, WRITER_ONLY_KINDS
from agentledger.errors import ConflictError
from agentledger.security.identity import Caller
from agentledger.stores.lease_bucket import LeaseBucket
from agentledger.stores.lease_state import PENDING, Fence, LeaseError, secret_matches

# While a task has a live lease, every kind a client can append needs the lease's
# token and secret (unless an operator identity appends it).
GUARDED_KINDS = frozenset(EVENT_TYPES) - WRITER_ONLY_KINDS


class Fenced(msgspec.Struct, frozen=True):
    """How to commit an append the lease table checked: the expectation on the task's last
    sequence (None: the committer's own knowledge of it, ``Unit.guard``) and the grant to stamp
    on its messages (None: no stamp)."""

    expected: int | None
    stamp: int | None


class LeaseFencing(LeaseBucket):
    """Checks and fences the appends to leased tasks (see the module docstring)."""

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

        Without a token, after such a refusal or before a caller's expectation we did
        not commit after ourselves, the table entry is read first (see the module
        docstring): what came may be another writer's grant.

        With a token, the latest ``lease_granted`` at or below the sequence the append
        will be committed after must be that token's grant: the writer's knowledge of
        the task is used when it is current, otherwise read (``GrantLedger.fence_at``).
        A later grant (another writer's, which our copy of the table may not show
        yet) makes the token ``stale_fencing_token``.
        """
        key = self.key(tenant, task_id)
        tokens = {t for _, t in events if t is not None}
        fence = self._fences.get(key)
        unknown = moved is not None or (expected is not None and (fence is None
                                                                   or fence.seq != expected))
        if not tokens and unknown:
            # Events without a token are committed after a sequence we did not commit after
            # ourselves: what led there may be a grant made through another writer that our
            # copy does not show yet. Its entry was written to the table before its event
            # reached the ledger, so the table read now shows it (and check() refuses).
            await self._refresh(key)
        try:
            await self.check(tenant, task_id, events, secret, caller)
        except LeaseError:
            if not tokens and unknown:
                raise  # read just now
            # Our copy may lag a grant or a renewal made through another writer: look once.
            entry = self._mirror.get(key)
            before = entry.revision if entry is not None else None
            await self._refresh(key)
            entry = self._mirror.get(key)
            if (entry.revision if entry is not None else None) == before:
                raise
            await self.check(tenant, task_id, events, secret, caller)
        if not tokens:
            # Nothing to fence; an expectation we know to be true keeps our knowledge current.
            if expected is not None:
                return Fenced(expected, fence.grant if not unknown and fence is not None else None)
            if moved is not None:
                self._fences.pop(key, None)
                return Fenced(moved, None)
            return Fenced(None, None) if fence is None else Fenced(fence.seq, fence.grant)
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
                        target: int | None) -> Fence:
        """Our knowledge of the task's ledger, current as of ``target`` (a sequence said to be
        the task's last; None: ours is, unless we have none), with ``token``'s grant the
        latest in it; ``stale_fencing_token`` when a later grant is."""
        key = self.key(tenant, task_id)
        fence = self._fences.get(key)
        fresh = False
        if fence is not None and fence.grant > token:
            pass  # the ledger has a later grant than the token: stale (below)
        elif fence is None or fence.grant != token or (target is not None and target < fence.seq):
            fence, fresh = Fence(token, token), True  # the token's grant is the lease's: known
        if fence.grant == token and (fresh or (target is not None and target != fence.seq)):
            last, grant = await self._ledger.fence_at(tenant, task_id, after=fence.seq,
                                                      grant=fence.grant, seq=target)
            if last < fence.seq and fence.seq != token:
                last, grant = await self._ledger.fence_at(tenant, task_id, after=token,
                                                          grant=token, seq=target)
            if last < token:
                raise LeaseError(f"fencing token {token} is stale; its grant is not in the "
                                 "ledger", code="stale_fencing_token", path=path)
            fence = self._fences[key] = Fence(last, grant)
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
