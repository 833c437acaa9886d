"""The ledger side of a lease grant (``agentledger.stores.leases.GrantLedger``), on the group committer.

A grant is recorded as a ``lease_granted`` event on the task's ledger subject,
committed like any append (with an expectation on the task's last sequence,
retried at the new last sequence when something else was appended meanwhile);
its sequence is the lease's fencing token. Verifying a lease-table entry reads
that event back.

``fence_at`` answers which grant is the latest at the task's last message: the
message itself when it is a grant, else its ``Agentledger-Fence`` stamp (the
grant a fenced append was checked against and committed after, see
``agentledger.stores.leases``), else a scan of the task's subject forward from where
the caller's knowledge ends (batched direct gets, headers and bodies).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from datetime import UTC, datetime

import msgspec
import nats.errors
import nats.js.errors
from nats.aio.client import Client

from agentledger.config import Settings
from agentledger.contracts.events import AnyEvent, LeaseGranted, LeaseGrantedEvent
from agentledger.errors import ConflictError, NotFoundError, UnavailableError
from agentledger.services.ledger_writer.group_commit import FENCE, GroupCommitter, make_unit
from agentledger.stores.leases import LeaseError
from agentledger.stores.ledger import ledger_subject

# The producer of the events the writer appends itself.
WRITER_PRODUCER = "agentledger-ledger-writer"
# Messages one direct get of a scan asks for, and the bytes it may return at most.
SCAN_BATCH = 256
SCAN_BATCH_BYTES = 1 << 20
# Most messages one fence read scans: beyond, the read is refused (retryable).
MAX_SCAN = 100_000
# Grants retried at the task's new last sequence when something was appended meanwhile.
GRANT_ATTEMPTS = 4
# A read that did not see a message the server reported (a replica behind): retried this often.
_LAG_RETRIES = 3
_LAG_PAUSE_S = 0.005

_event_decoder = msgspec.json.Decoder(AnyEvent)


class _Kind(msgspec.Struct):
    kind: str = ""


_kind_decoder = msgspec.json.Decoder(_Kind)


def _is_grant(data: bytes) -> bool:
    try:
        return _kind_decoder.decode(data).kind == "lease_granted"
    except msgspec.MsgspecError:
        return False


def _stamp(headers: dict[str, str]) -> int | None:
    value = headers.get(FENCE)
    return int(value) if value is not None and value.isdigit() else None


_Stored = tuple[int, dict[str, str], bytes]


class LedgerGrants:
    """Existence checks, grant records and their verification, for one writer."""

    def __init__(self, nc: Client, settings: Settings, committer: GroupCommitter) -> None:
        self._nc = nc
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
        subject = self._subject(tenant, task_id)
        expected = expected_last_seq
        for _ in range(GRANT_ATTEMPTS):
            unit = make_unit(subject, [event], [event], expected)
            try:
                results = await self._committer.submit(unit)
            except ConflictError as exc:
                # Something was appended since the caller read the task's last sequence (an
                # append through another writer): the pending entry keeps the lease ours, so
                # the grant simply goes after it.
                if exc.code != "conflict" or exc.current_seq is None:
                    raise
                if exc.current_seq == 0:
                    raise NotFoundError(f"the ledger no longer has task {task_id!r}",
                                        path="$.task_id") from exc
                expected = exc.current_seq
                continue
            return results[0].seq
        raise LeaseError("the task's ledger kept moving while the lease was being granted; retry",
                         retryable=True, path="$.task_id")

    async def granted_at(self, tenant: str, task_id: str, token: int) -> tuple[str, str] | None:
        try:
            # From the stream's leader, not a direct get that a replica behind may answer.
            msg = await self._js.get_msg(self._settings.stream, seq=token)
        except nats.js.errors.NotFoundError:
            return None
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
            raise UnavailableError("the ledger did not answer a direct get") from exc
        except nats.js.errors.APIError as exc:  # e.g. no leader for a moment
            raise UnavailableError(f"the ledger could not be read: {exc.description}") from exc
        if msg.subject != self._subject(tenant, task_id):
            return None
        try:
            event = _event_decoder.decode(msg.data or b"")
        except msgspec.MsgspecError:
            return None
        if not isinstance(event, LeaseGrantedEvent) or (event.tenant, event.task_id) != (tenant, task_id):
            return None
        return event.payload.holder, event.payload.secret_hash

    async def fence_at(self, tenant: str, task_id: str, *, after: int, grant: int,
                       seq: int | None = None) -> tuple[int, int]:
        subject = self._subject(tenant, task_id)
        found = await self._message(subject, seq)
        if found is None:
            return 0, 0
        last, headers, data = found
        if last <= after:
            return last, grant if last == after else 0
        if _is_grant(data):
            return last, last
        stamp = _stamp(headers)
        if stamp is not None:
            return last, stamp
        return last, await self._scan(subject, after, grant, last)

    async def _direct(self, request: dict[str, object]) -> _Stored | None:
        try:
            reply = await self._nc.request(f"$JS.API.DIRECT.GET.{self._settings.stream}",
                                           json.dumps(request).encode(), timeout=5)
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError) as exc:
            raise UnavailableError("the ledger did not answer a direct get") from exc
        headers = dict(reply.headers or {})
        seq = headers.get("Nats-Sequence")
        return (int(seq), headers, reply.data or b"") if seq else None

    async def _message(self, subject: str, seq: int | None) -> _Stored | None:
        """The task's message at ``seq`` (its first at or after it), else its last one."""
        if seq is not None:
            for attempt in range(_LAG_RETRIES):
                found = await self._direct({"seq": seq, "next_by_subj": subject})
                if found is not None:
                    return found
                if attempt < _LAG_RETRIES - 1:
                    await asyncio.sleep(_LAG_PAUSE_S)
        return await self._direct({"last_by_subj": subject})

    async def _scan(self, subject: str, after: int, grant: int, upto: int) -> int:
        """The latest grant at or below ``upto``, reading the subject from ``after + 1``."""
        latest, seq, lagged, read = grant, after + 1, 0, 0
        while seq <= upto:
            if read > MAX_SCAN:
                raise UnavailableError(f"the task has more than {MAX_SCAN} messages this writer "
                                       "has not read since its lease was granted")
            batch, more = await self._batch(subject, seq)
            read += len(batch)
            for stored, headers, data in batch:
                if stored > upto:
                    return latest
                if _is_grant(data):
                    latest = stored
                elif (stamp := _stamp(headers)) is not None:
                    latest = stamp
                seq = stored + 1
            if not more and seq <= upto:
                lagged += 1  # a replica that does not have them yet
                if lagged >= _LAG_RETRIES:
                    raise UnavailableError("the ledger's replica is behind; retry")
                await asyncio.sleep(_LAG_PAUSE_S)
        return latest

    async def _batch(self, subject: str, seq: int) -> tuple[list[_Stored], bool]:
        """Up to ``SCAN_BATCH`` messages of ``subject`` from ``seq``; whether more follow."""
        nc = self._nc
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox)
        out: list[_Stored] = []
        try:
            await nc.publish(f"$JS.API.DIRECT.GET.{self._settings.stream}",
                             json.dumps({"seq": seq, "next_by_subj": subject, "batch": SCAN_BATCH,
                                         "max_bytes": SCAN_BATCH_BYTES}).encode(), reply=inbox)
            while True:
                try:
                    msg = await sub.next_msg(timeout=5)
                except nats.errors.TimeoutError as exc:
                    raise UnavailableError("the ledger did not answer a direct get") from exc
                headers = dict(msg.headers or {})
                stored = headers.get("Nats-Sequence")
                if stored is None:  # end of the batch (204), or nothing there (404)
                    return out, int(headers.get("Nats-Num-Pending") or 0) > 0
                out.append((int(stored), headers, msg.data or b""))
        finally:
            await sub.unsubscribe()
