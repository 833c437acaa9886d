"""The client against a server that is away: one typed error at first, reconnection after."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentledger.client import connect
from agentledger.config import Settings
from agentledger.errors import UnavailableError
from agentledger.runtime.embedded import EmbeddedNats, free_port
from helpers import assert_eventually


async def test_no_server_is_one_typed_error(tmp_path: Path) -> None:
    """Protects every CLI command and agent start: no server means `unavailable`, not a hang
    and not a raw nats-py exception."""
    settings = Settings(nats_url=f"nats://127.0.0.1:{free_port()}", data_dir=tmp_path)
    with pytest.raises(UnavailableError) as info:
        await connect(settings)
    assert info.value.code == "unavailable" and info.value.retryable


async def test_a_connected_client_outlives_a_server_restart(tmp_path: Path, server_root: Path) -> None:
    """Protects agents across server restarts: the client reconnects by itself (no attempt limit)
    and a request in the gap is a typed `unavailable`, never ConnectionClosedError."""
    server = EmbeddedNats(tmp_path / "srv", server_root=server_root).start()
    try:
        client = await connect(Settings(nats_url=server.url, data_dir=tmp_path), timeout=1)
        sub = await client.nc.subscribe("echo", cb=_echo)
        await client.nc.flush()
        assert (await client.nc.request("echo", b"1", timeout=2)).data == b"1"
        server.stop()
        with pytest.raises(UnavailableError):
            await client.working_memory("acme", "t1")
        server = EmbeddedNats(tmp_path / "srv", server_root=server_root).start()  # same port
        await assert_eventually(lambda: client.nc.is_connected, timeout=30)
        assert (await client.nc.request("echo", b"2", timeout=2)).data == b"2"
        await sub.unsubscribe()
        await client.close()
    finally:
        server.stop()


async def _echo(msg: object) -> None:
    await msg.respond(msg.data)  # type: ignore[attr-defined]
