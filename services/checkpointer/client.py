"""Client calls of the checkpointer (to be folded into ``agentledger.client.Client``).

    async with await connect(settings) as client:
        saved = await save_checkpoint(client, "acme", "task-1")
        reply = await resume(client, "acme", "task-1", executor="worker-7")
        if reply.status == "resumable":
            token = reply.lease.token   # put it in every guarded event as fencing_token

``resume`` returns the reply whatever its status (``rejected`` included: read
``reasons``); a bad request or an unavailable checkpointer raises the typed
error. ``resume_command`` is the body of ``agentledger resume <tenant> <task>``.
"""

from __future__ import annotations

import asyncio
import json
import sys

import msgspec
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from agentledger.client import Client, connect, raise_error
from agentledger.config import Settings
from agentledger.contracts.resume import (
    CheckpointSaveReply,
    CheckpointSaveRequest,
    ResumeReply,
    ResumeRequest,
)
from agentledger.errors import AgentLedgerError, UnavailableError

_save_reply = msgspec.json.Decoder(CheckpointSaveReply)
_resume_reply = msgspec.json.Decoder(ResumeReply)
_encoder = msgspec.json.Encoder()

# Exit codes of ``resume_command``.
EXIT_RESUMABLE = 0
EXIT_REJECTED = 1
EXIT_ERROR = 2
EXIT_NEEDS_RECONCILE = 3


async def _request(client: Client, subject: str, body: bytes) -> bytes:
    """One request with the client's timeout (``Client(timeout=...)``)."""
    try:
        msg = await client.nc.request(subject, body, timeout=client.timeout)
    except (NatsTimeout, NoRespondersError) as exc:
        raise UnavailableError("the checkpointer did not answer") from exc
    return bytes(msg.data)


async def save_checkpoint(client: Client, tenant: str, task_id: str) -> CheckpointSaveReply:
    """Save a checkpoint of the task at its latest ledger event; returns its id and seq."""
    body = _encoder.encode(CheckpointSaveRequest(tenant=tenant, task_id=task_id))
    data = await _request(client, f"{client.settings.prefix}.checkpoint.save", body)
    reply = _save_reply.decode(data)
    if reply.error is not None:
        raise_error(reply.error)
    return reply


async def resume(client: Client, tenant: str, task_id: str, executor: str, *,
                 lease_ttl_s: float = 30.0, checkpoint_id: int | None = None) -> ResumeReply:
    """Resume the task for ``executor``; see ``agentledger.contracts.resume`` for the reply."""
    body = _encoder.encode(ResumeRequest(tenant=tenant, task_id=task_id, executor=executor,
                                         lease_ttl_s=lease_ttl_s, checkpoint_id=checkpoint_id))
    data = await _request(client, f"{client.settings.prefix}.resume", body)
    reply = _resume_reply.decode(data)
    if reply.error is not None:
        raise_error(reply.error)
    return reply


def resume_command(settings: Settings, tenant: str, task: str, executor: str) -> int:
    """``agentledger resume``: print the reply as JSON; the exit code follows the status.

    0 resumable, 3 needs_reconcile, 1 rejected, 2 the request failed (message on stderr).
    """

    async def run() -> ResumeReply:
        client = await connect(settings)
        try:
            return await resume(client, tenant, task, executor)
        finally:
            await client.close()

    try:
        reply = asyncio.run(run())
    except AgentLedgerError as exc:
        print(f"agentledger: {exc}", file=sys.stderr)
        return EXIT_ERROR
    print(json.dumps(msgspec.to_builtins(reply), indent=2, sort_keys=True))
    return {"resumable": EXIT_RESUMABLE, "needs_reconcile": EXIT_NEEDS_RECONCILE}.get(
        reply.status or "", EXIT_REJECTED)
