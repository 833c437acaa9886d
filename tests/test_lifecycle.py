"""The service lifecycle against real servers: waiting for PostgreSQL, liveness, exiting when stuck.

PostgreSQL "appears" through a TCP forwarder on a port of the test's choosing, so
the service is started while nothing listens there and then sees its server come
up on the same address, as after a restart of the embedded PostgreSQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import msgspec
import pytest

from agentledger.config import Settings
from agentledger.security import auth
from agentledger.services.projector.service import Projector, get_subject
from agentledger.shell.lifecycle import ServiceStuckError, serve
from helpers import assert_eventually
from test_projector import TENANT, Ledger, task_script


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def forwarder(port: int, target: tuple[str, int]) -> AsyncIterator[None]:
    """Listen on ``port`` and pipe every connection to ``target`` until the block ends."""
    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*target)
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(handle, "127.0.0.1", port)
    try:
        yield
    finally:
        server.close()


def via_port(settings: Settings, port: int) -> tuple[Settings, tuple[str, int]]:
    """``settings`` with the database reached on ``port``, and the real server's address."""
    parts = urlsplit(settings.database_url)
    user, _, hostport = parts.netloc.rpartition("@")
    host, _, real_port = hostport.rpartition(":")
    moved = parts._replace(netloc=f"{user}@127.0.0.1:{port}").geturl()
    return msgspec.structs.replace(settings, database_url=moved), (host, int(real_port))


async def test_a_service_started_before_postgres_waits_and_serves_once_it_is_up(
        settings: Settings, ledger: Ledger, tmp_path: Path) -> None:
    """Protects recovery without a restart backoff: a projector started while its PostgreSQL
    address refuses connections does not exit (which used to cost up to 30 s of supervisor
    backoff); it waits, says so, and is ready and projecting as soon as the server is there."""
    await ledger.publish_all(task_script("t1"))
    port = free_port()
    moved, target = via_port(settings, port)
    ready = tmp_path / "run" / "projector.ready"
    serving = asyncio.create_task(serve(lambda: Projector(moved), ready))
    try:
        await asyncio.sleep(1.5)  # several start attempts against a closed port
        assert not serving.done() and not ready.exists()
        async with forwarder(port, target):
            await assert_eventually(ready.exists, timeout=20)
            op = await auth.connect(settings, auth.OPERATOR_ROLE)
            try:
                async def projected() -> bool:
                    reply = await op.request(get_subject(settings.prefix), msgspec.json.encode(
                        {"tenant": TENANT, "task_id": "t1"}), timeout=5)
                    return bool(msgspec.json.decode(reply.data).get("ok"))
                assert await assert_eventually(projected, timeout=20)
            finally:
                await op.close()
    finally:
        serving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await serving


async def test_a_dead_read_loop_makes_the_service_exit(settings: Settings, ledger: Ledger,
                                                       tmp_path: Path) -> None:
    """Protects liveness: when the NATS read loop of a connected service ends (nats-py ends it on
    an unexpected error and keeps reporting "connected"), the service says it is not alive, stops
    refreshing its heartbeat and exits with an error, so the supervisor restarts it."""
    await ledger.publish_all(task_script("t1"))
    ready = tmp_path / "run" / "projector.ready"
    services: list[Projector] = []

    def factory() -> Projector:
        services.append(Projector(settings))
        return services[-1]

    serving = asyncio.create_task(serve(factory, ready))
    await assert_eventually(ready.exists, timeout=30)
    projector = services[-1]
    assert projector.alive()
    nc = projector._nc
    assert nc is not None and nc._reading_task is not None
    nc._reading_task.cancel()
    await assert_eventually(lambda: not projector.alive(), timeout=5)
    beat = ready.stat().st_mtime
    with pytest.raises(ServiceStuckError):
        await asyncio.wait_for(serving, timeout=30)
    assert ready.stat().st_mtime == beat  # no heartbeat while it was not alive
