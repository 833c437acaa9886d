"""A pull request sent before a reconnect is sent again at once, not after its grace runs out.

A restarted nats-server knows nothing of the long poll the projector had open on the old
connection, and nothing tells the projector so: it used to wait out the request's expiry plus
``POLL_GRACE`` (about 2 s) before asking again and learning its in-memory consumer was gone,
which was most of Working Memory's recovery after a nats-server kill. Here the grace is made
far longer than the test's deadline, so only the reconnect can end the wait.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from nats.js.api import ConsumerConfig, StreamConfig

from agentledger.projection.puller import ConsumerLostError, Puller
from agentledger.runtime.embedded import EmbeddedNats
from agentledger.runtime.hosting import port_free
from agentledger.stores.natsclient import open_connection
from helpers import assert_eventually


@pytest.mark.asyncio
async def test_a_long_poll_open_across_a_server_restart_finds_its_consumer_gone(
        tmp_path: Path, server_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Puller, "POLL_GRACE", 3600.0)
    server = EmbeddedNats(tmp_path, server_root=server_root).start()
    nc = await open_connection(server.url, max_reconnect_attempts=-1)
    try:
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name="P", subjects=["p.>"]))
        # In memory, as the projections' consumers are: a restarted server has lost it.
        await js.add_consumer("P", ConsumerConfig(durable_name="c", mem_storage=True,
                                                  num_replicas=1))
        await js.publish("p.1", b"one")
        puller = Puller(nc, "P", "c")
        await puller.start()
        assert [m.data for m in await puller.fetch(10, wait_s=5)] == [b"one"]
        # Drained: the next fetch holds a long poll open on the server.
        fetching = asyncio.create_task(puller.fetch(10, wait_s=3600))
        await asyncio.sleep(0.5)
        assert not fetching.done()
        pid, port = server.pid, server.port
        assert pid is not None and port is not None
        os.killpg(os.getpgid(pid), signal.SIGKILL)
        # Until the client has closed its side of the old connection, the port stays bound.
        await assert_eventually(lambda: port_free(port), timeout=60)
        server = EmbeddedNats(tmp_path, server_root=server_root).start()
        with pytest.raises(ConsumerLostError):
            await asyncio.wait_for(fetching, 120)  # generous: only a reconnect can end it
        await puller.close()
    finally:
        await nc.close()
        server.stop()
