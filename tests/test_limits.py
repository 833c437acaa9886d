"""Configured limits of the ledger and its buckets, and what happens at each."""

from __future__ import annotations

import msgspec
import pytest

from agentledger.client import connect
from agentledger.config import Settings
from agentledger.errors import AgentLedgerError
from agentledger.security import auth
from agentledger.services.ledger_writer.service import LedgerWriter
from agentledger.stores.artifacts import artifacts_bucket
from test_writer import created, event


async def test_a_full_ledger_refuses_new_events_and_keeps_the_old(settings: Settings) -> None:
    """Protects the record: at its byte limit the ledger says `ledger_full` and drops nothing;
    the stream itself is larger by the erasure reserve, which ordinary appends never reach."""
    small = msgspec.structs.replace(settings, max_ledger_bytes=8 * 1024, ledger_reserve_bytes=4096)
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
        info = await js.stream_info(small.stream)
        assert info.config.max_bytes == 8 * 1024 + 4096
        assert 8 * 1024 <= info.state.bytes < 8 * 1024 + 4096
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


async def test_a_full_artifact_store_answers_artifact_store_full(settings: Settings) -> None:
    """Protects callers from an untyped failure: a put into an artifact store at its size is
    refused `artifact_store_full` (it answered `internal`), stores nothing, and the store still
    takes content that fits."""
    small = msgspec.structs.replace(settings, max_artifact_store_bytes=4096)
    writer = LedgerWriter(small)
    await writer.start()
    client = await connect(small)
    try:
        with pytest.raises(AgentLedgerError) as info:
            await client.put_artifact(b"x" * 8192, schema="text/plain", producer="p", tenant="acme")
        assert info.value.code == "artifact_store_full" and not info.value.retryable
        ref = await client.put_artifact(b"small", schema="text/plain", producer="p", tenant="acme")
        assert await client.get_artifact(ref.uri) == b"small"
    finally:
        await client.close()
        await writer.stop()
