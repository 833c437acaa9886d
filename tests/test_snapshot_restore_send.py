"""A restore's chunk that meets no responder yet is sent again, never skipped.

On a cluster, the node that takes a restore's chunks may be another one than the client's, and
its interest in the chunks' subject can reach the client's node after the answer that named the
subject (``tests/test_backup_restore.py``'s cluster case met "no responders" so, once in a CI
run). Here, on a real server, the taker subscribes a moment after the first chunk is sent.
"""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.msg import Msg
from nats.errors import NoRespondersError

from agentledger.backup import snapshots
from agentledger.config import Settings
from agentledger.security import auth


async def test_a_chunk_is_sent_again_until_its_taker_listens(settings: Settings,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        target = nc.new_inbox()
        taken: list[bytes] = []

        async def take(msg: Msg) -> None:
            taken.append(msg.data)
            await msg.respond(b"ok")

        async def listen_later() -> None:
            await asyncio.sleep(0.3)
            await nc.subscribe(target, cb=take)

        later = asyncio.create_task(listen_later())
        reply = await snapshots._send(nc, target, b"chunk-1", 5)
        await later
        assert (reply.data, taken) == (b"ok", [b"chunk-1"])

        # Nobody ever listens: after the bound the error is raised, not swallowed.
        monkeypatch.setattr(snapshots, "RESTORE_INTEREST_S", 0.2)
        with pytest.raises(NoRespondersError):
            await snapshots._send(nc, nc.new_inbox(), b"chunk-2", 5)
    finally:
        await nc.close()
