"""A ledger-writer running in the test's process, and what it stored (``from writer_support import ...``).

Most tests of the append path need the same two things: a writer serving the session's NATS
server with the test's settings (some with a limit lowered), an operator client to call it, both
stopped however the test ends; and every message the ledger stream then holds, read back as
the writer's own NATS user, to check what reached it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import nats.js.errors

from agentledger.client import Client, connect
from agentledger.config import Settings
from agentledger.security import auth
from agentledger.security.task_seal import SEALED, task_keys_of
from agentledger.services.ledger_writer.service import LedgerWriter
from agentledger.stores.ledger import subject_key


@contextlib.asynccontextmanager
async def running_writer(settings: Settings, **changes: Any) -> AsyncIterator[tuple[LedgerWriter, Client]]:
    """A started writer on ``settings`` with ``changes`` (e.g. ``max_batch_events=50``) and an
    operator client on ``settings``; the client is closed and the writer stopped on the way out."""
    writer = LedgerWriter(msgspec.structs.replace(settings, **changes) if changes else settings)
    await writer.start()
    try:
        client = await connect(settings)
        try:
            yield writer, client
        finally:
            await client.close()
    finally:
        await writer.stop()


async def ledger_messages(settings: Settings, *, opened: bool = True) -> list[tuple[int, bytes, dict[str, str]]]:
    """Every message in the ledger stream, in order: (sequence, body, headers); a sequence whose
    message was erased (a forget) is passed over. ``opened``: a body sealed under its task's key
    (``security.task_seal``) is given opened, as the projector reads it (else as stored)."""
    nc = await auth.connect(settings, auth.WRITER)
    try:
        keys = task_keys_of(nc, settings)
        js = nc.jetstream()
        info = await js.stream_info(settings.stream)
        out = []
        for seq in range(info.state.first_seq, info.state.last_seq + 1) if info.state.messages else []:
            try:
                msg = await js.get_msg(settings.stream, seq)
            except nats.js.errors.NotFoundError:
                continue
            data, headers = msg.data, dict(msg.headers or {})
            key = subject_key(settings.prefix, msg.subject or "")
            if opened and key is not None and SEALED in headers:
                opened_body = await keys.open_one(key[0], key[1], headers, data)
                assert opened_body is not None, f"seq {seq}: its task key is gone"
                data = opened_body
            out.append((seq, data, headers))
        return out
    finally:
        await nc.close()
