"""What a lease is: the table entry, its secret, its error, and the ledger a grant is written to.

Shared by the writer's lease table (``agentledger.stores.leases``) and by readers outside the
writer (``holder_of``: who may forget a task), so it keeps no state: the writer's copy of the
table, its locks and its knowledge of each task's ledger live in ``lease_bucket``.
"""

from __future__ import annotations

import hmac
import time
from dataclasses import dataclass
from typing import Protocol

import blake3
import msgspec
from nats.aio.client import Client
from nats.js.errors import BucketNotFoundError, KeyNotFoundError

from agentledger.errors import AgentLedgerError

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
class Fence:
    """What a writer knows of a task's ledger: ``grant`` is the latest ``lease_granted`` at
    or below the task's message at ``seq`` (read, or committed by this writer with an
    expectation, so nothing it does not know came in between)."""

    seq: int
    grant: int


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
    lease = decode_lease(entry.value)
    return lease.holder if lease is not None and lease.token and lease.live(time.time()) else None


def decode_lease(value: bytes | None) -> Lease | None:
    if not value:
        return None
    try:
        return msgspec.json.decode(value, type=Lease)
    except msgspec.MsgspecError:
        return None  # unreadable (hand-written, or an entry from before secrets): no lease
