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
from nats.errors import NoRespondersError, TimeoutError as NatsTimeout

from agentledger.config import Settings
from agentledger.contracts.api import AppendReply, AppendResult, ErrorBody, WorkingMemoryReply
from agentledger.contracts.events import EventBase
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


async def connect(settings: Settings, **kwargs: Any) -> Client:
    """Connect to the NATS server named by ``settings.nats_url``."""
    nc = await nats.connect(settings.nats_url, name="agentledger-client")
    return Client(nc, settings, **kwargs)
