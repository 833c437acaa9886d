"""Configured limits of the ledger and its buckets, and what happens at each."""

from __future__ import annotations

import msgspec
import pytest

from agentledger import auth
from agentledger.artifacts import artifacts_bucket
from agentledger.client import connect
from agentledger.config import Settings
from agentledger.errors import AgentLedgerError
from agentledger.services.ledger_writer.service import LedgerWriter
from test_writer import created, event


async def test_a_full_ledger_refuses_new_events_and_keeps_the_old(settings: Settings) -> None:
    """Protects the record: at its byte limit the ledger says `ledger_full` and drops nothing."""
    small = msgspec.structs.replace(settings, max_ledger_bytes=8 * 1024)
    writer = LedgerWriter(small)
    await writer.start()
    client = await connect(small)
    try:
        stored = [await client.append(created())]
        with pytest.raises(AgentLedgerError) as info:
            for i in range(200):
                stored.append(await client.append(event(f"v{i}", payload={"name": "x", "value": "y" * 200})))
        assert info.value.code == "ledger_full" and not info.value.retryable
        js = client.nc.jetstream()
        state = (await js.stream_info(small.stream)).state
        assert state.first_seq == 1 and state.messages == len(stored)
        # The stream, the key bucket and the object store were created with their limits.
        assert (await js.stream_info(small.stream)).config.max_bytes == 8 * 1024
        obs = await js.stream_info(f"OBJ_{artifacts_bucket(small)}")
        assert obs.config.max_bytes == small.max_artifact_store_bytes
    finally:
        await client.close()
        await writer.stop()


async def test_the_key_bucket_is_created_with_its_limit(settings: Settings) -> None:
    """Protects the key bucket from growing without bound."""
    writer = LedgerWriter(settings)
    await writer.start()
    client = await connect(settings)
    try:
        turn = event("turn1", kind="turn_appended",
                     payload={"role": "user", "ordinal": 1, "content": "hello"},
                     data_subject="alice")
        await client.append(created())
        await client.append(turn)
        nc = await auth.connect(settings, auth.WRITER)
        info = await nc.jetstream().stream_info(f"KV_{settings.keys_bucket}")
        await nc.close()
        assert info.config.max_bytes == settings.max_keys_bytes
    finally:
        await client.close()
        await writer.stop()
