"""The ledger side of a lease grant (``agentledger.leases.GrantLedger``), on the group committer.

A grant is recorded as a ``lease_granted`` event on the task's ledger subject,
committed like any append (with an expectation on the task's last sequence, so
another writer process cannot slip a grant in between); its sequence is the
lease's fencing token. Verifying a lease-table entry reads that event back.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client

from agentledger.config import Settings
from agentledger.contracts.events import AnyEvent, LeaseGranted, LeaseGrantedEvent
from agentledger.errors import ConflictError, UnavailableError
from agentledger.leases import LeaseError
from agentledger.ledger import ledger_subject
from agentledger.services.ledger_writer.group_commit import GroupCommitter, make_unit

# The producer of the events the writer appends itself.
WRITER_PRODUCER = "agentledger-ledger-writer"

_event_decoder = msgspec.json.Decoder(AnyEvent)


class LedgerGrants:
    """Existence checks, grant records and their verification, for one writer."""

    def __init__(self, nc: Client, settings: Settings, committer: GroupCommitter) -> None:
        self._js = nc.jetstream()
        self._settings = settings
        self._committer = committer

    def _subject(self, tenant: str, task_id: str) -> str:
        return ledger_subject(self._settings.prefix, tenant, task_id)

    async def task_last_seq(self, tenant: str, task_id: str) -> int:
        subject = self._subject(tenant, task_id)
        # Appends accepted without the lease lock may still be on their way to the ledger.
        await self._committer.settled(subject)
        return await self._committer.last_seq(subject)

    async def record_grant(self, tenant: str, task_id: str, *, holder: str, expires_at: float,
                           secret_hash: str, expected_last_seq: int) -> int:
        event = LeaseGrantedEvent(
            event_id=f"lease-{secrets.token_hex(12)}", tenant=tenant, task_id=task_id,
            producer=WRITER_PRODUCER, occurred_at=datetime.now(UTC), schema_version=1,
            payload=LeaseGranted(holder=holder, expires_at=expires_at, secret_hash=secret_hash))
        unit = make_unit(self._subject(tenant, task_id), [event], [event], expected_last_seq)
        try:
            results = await self._committer.submit(unit)
        except ConflictError as exc:
            raise LeaseError("the task's ledger moved while the lease was being granted; retry",
                             retryable=True, path="$.task_id") from exc
        return results[0].seq

    async def granted_at(self, tenant: str, task_id: str, token: int) -> tuple[str, str] | None:
        try:
            msg = await self._js.get_msg(self._settings.stream, seq=token, direct=True)
        except nats.js.errors.NotFoundError:
            return None
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
            raise UnavailableError("the ledger did not answer a direct get") from exc
        if msg.subject != self._subject(tenant, task_id):
            return None
        try:
            event = _event_decoder.decode(msg.data or b"")
        except msgspec.MsgspecError:
            return None
        if not isinstance(event, LeaseGrantedEvent) or (event.tenant, event.task_id) != (tenant, task_id):
            return None
        return event.payload.holder, event.payload.secret_hash
