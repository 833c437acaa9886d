"""Async Python client: append events and read Working Memory over NATS.

    async with await connect(settings) as client:
        results = await client.append(event)
        wm = await client.working_memory("acme", "task-1")

Errors come back as the typed exceptions of ``agentledger.errors`` with the
server's ``code`` and ``path``. ``append`` retries a timed-out request with the
same event ids, which the writer turns into ``duplicate`` answers, never into a
second copy or a false conflict.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Any

import msgspec
import nats
from nats.aio.client import Client as Nats
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from agentledger import artifacts
from agentledger.config import Settings
from agentledger.contracts.api import (
    AppendReply,
    AppendResult,
    ErrorBody,
    LeaseBody,
    LeaseReply,
    WorkingMemoryReply,
)
from agentledger.contracts.events import ArtifactRef, EventBase
from agentledger.contracts.resume import (
    CheckpointSaveReply,
    CheckpointSaveRequest,
    ResumeReply,
    ResumeRequest,
)
from agentledger.errors import (
    AgentLedgerError,
    ConflictError,
    ContractError,
    DuplicateError,
    NotFoundError,
    UnavailableError,
)

_ERRORS: dict[str, type[AgentLedgerError]] = {
    "conflict": ConflictError,
    "partial_duplicate": DuplicateError,
    "unavailable": UnavailableError,
    "not_found": NotFoundError,
}
_append_reply = msgspec.json.Decoder(AppendReply)
_wm_reply = msgspec.json.Decoder(WorkingMemoryReply)
_lease_reply = msgspec.json.Decoder(LeaseReply)
_save_reply = msgspec.json.Decoder(CheckpointSaveReply)
_resume_reply = msgspec.json.Decoder(ResumeReply)
_encoder = msgspec.json.Encoder()


def raise_error(err: ErrorBody) -> None:
    """Raise the typed exception matching a wire ``ErrorBody``."""
    cls = _ERRORS.get(err.code, ContractError if err.path else AgentLedgerError)
    raise cls(err.message, code=err.code, path=err.path, retryable=err.retryable,
              current_seq=err.current_seq)


class Client:
    """A NATS connection plus the agentledger request subjects."""

    def __init__(self, nc: Nats, settings: Settings, *, timeout: float = 10.0,
                 retries: int = 2) -> None:
        self.nc = nc
        self.settings = settings
        self.timeout = timeout
        self.retries = retries
        self._artifacts: artifacts.ArtifactStore | None = None

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        if not self.nc.is_closed:
            await self.nc.drain()

    async def append(self, event: EventBase | dict[str, Any], *,
                     expected_last_seq: int | None = None) -> AppendResult:
        """Append one event; returns its sequence and whether it was a duplicate."""
        return (await self.append_batch([event], expected_last_seq=expected_last_seq))[0]

    async def append_batch(self, events: Sequence[EventBase | dict[str, Any]], *,
                           expected_last_seq: int | None = None) -> list[AppendResult]:
        """Append events of one task atomically: all are stored, or none."""
        body: dict[str, Any] = {"events": list(events)}
        if expected_last_seq is not None:
            body["expected_last_seq"] = expected_last_seq
        return await self.append_raw(_encoder.encode(body))

    async def append_raw(self, payload: bytes) -> list[AppendResult]:
        """Send an already-encoded AppendRequest (the CLI's ``append`` uses this)."""
        subject = f"{self.settings.prefix}.writer.append"
        for attempt in range(self.retries + 1):
            try:
                msg = await self.nc.request(subject, payload, timeout=self.timeout)
                break
            except (NatsTimeout, NoRespondersError) as exc:
                if attempt == self.retries:
                    raise UnavailableError("the ledger-writer did not answer") from exc
        reply = _append_reply.decode(msg.data)
        if reply.error is not None:
            raise_error(reply.error)
        return reply.results

    async def working_memory(self, tenant: str, task_id: str, *,
                             reveal_personal: bool = False) -> WorkingMemoryReply:
        """The task's Working Memory and the ledger sequence it reflects."""
        req = {"tenant": tenant, "task_id": task_id, "reveal_personal": reveal_personal}
        try:
            msg = await self.nc.request(f"{self.settings.prefix}.wm.get", _encoder.encode(req),
                                        timeout=self.timeout)
        except (NatsTimeout, NoRespondersError) as exc:
            raise UnavailableError("the projector did not answer") from exc
        reply = _wm_reply.decode(msg.data)
        if reply.error is not None:
            raise_error(reply.error)
        return reply

    async def _request(self, subject: str, body: dict[str, Any], what: str) -> bytes:
        try:
            msg = await self.nc.request(f"{self.settings.prefix}.{subject}", _encoder.encode(body),
                                        timeout=self.timeout)
        except (NatsTimeout, NoRespondersError) as exc:
            raise UnavailableError(f"the {what} did not answer") from exc
        return msg.data

    async def _lease(self, action: str, **body: Any) -> LeaseBody | None:
        reply = _lease_reply.decode(await self._request(f"lease.{action}", body, "ledger-writer"))
        if reply.error is not None:
            raise_error(reply.error)
        return reply.lease

    async def acquire_lease(self, tenant: str, task_id: str, holder: str, ttl_s: float = 30.0) -> LeaseBody:
        """Take the task's execution lease; its token goes into every guarded event."""
        lease = await self._lease("acquire", tenant=tenant, task_id=task_id, holder=holder, ttl_s=ttl_s)
        assert lease is not None
        return lease

    async def renew_lease(self, tenant: str, task_id: str, lease: LeaseBody, ttl_s: float = 30.0) -> LeaseBody:
        renewed = await self._lease("renew", tenant=tenant, task_id=task_id, holder=lease.holder,
                                    token=lease.token, ttl_s=ttl_s)
        assert renewed is not None
        return renewed

    async def release_lease(self, tenant: str, task_id: str, lease: LeaseBody) -> None:
        await self._lease("release", tenant=tenant, task_id=task_id, holder=lease.holder,
                          token=lease.token)

    async def save_checkpoint(self, tenant: str, task_id: str) -> CheckpointSaveReply:
        """Checkpoint the task at its latest ledger event; returns the checkpoint id and seq."""
        body = msgspec.to_builtins(CheckpointSaveRequest(tenant=tenant, task_id=task_id))
        reply = _save_reply.decode(await self._request("checkpoint.save", body, "checkpointer"))
        if reply.error is not None:
            raise_error(reply.error)
        return reply

    async def resume(self, tenant: str, task_id: str, executor: str, *, lease_ttl_s: float = 30.0,
                     checkpoint_id: int | None = None) -> ResumeReply:
        """Resume the task for ``executor`` (see docs/checkpoints.md).

        Returns the reply whatever its status (read ``reasons`` when it is
        ``rejected``); on ``resumable`` or ``needs_reconcile`` the reply carries a
        lease whose token goes into every guarded event as ``fencing_token``.
        """
        body = msgspec.to_builtins(ResumeRequest(tenant=tenant, task_id=task_id, executor=executor,
                                                 lease_ttl_s=lease_ttl_s, checkpoint_id=checkpoint_id))
        reply = _resume_reply.decode(await self._request("resume", body, "checkpointer"))
        if reply.error is not None:
            raise_error(reply.error)
        return reply

    async def artifacts(self) -> artifacts.ArtifactStore:
        """The content-addressed artifact store (JetStream Object Store)."""
        if self._artifacts is None:
            self._artifacts = await artifacts.open(self.nc, self.settings)
        return self._artifacts

    async def put_artifact(self, data: bytes, *, schema: str, producer: str, version: int = 1) -> ArtifactRef:
        """Store content durably; cite the returned reference in events afterwards."""
        return await (await self.artifacts()).put(data, schema=schema, producer=producer, version=version)

    async def get_artifact(self, uri: str) -> bytes:
        """Read an artifact; its blake3 is verified before it is returned."""
        return await (await self.artifacts()).get(uri)

    async def stat_artifact(self, uri: str) -> ArtifactRef:
        return await (await self.artifacts()).stat(uri)


async def connect(settings: Settings, **kwargs: Any) -> Client:
    """Connect to the NATS server named by ``settings.nats_url``."""
    nc = await nats.connect(settings.nats_url, name="agentledger-client")
    return Client(nc, settings, **kwargs)
