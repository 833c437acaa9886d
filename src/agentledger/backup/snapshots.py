"""JetStream stream snapshots through the server's own snapshot and restore API.

nats-py has no call for them, so this speaks the API directly: ``$JS.API.STREAM.SNAPSHOT.<name>``
makes the server stream a compressed archive of the stream's store (every block file, the
sequences of erased and deleted messages, and the durable consumers' states) to an inbox in
chunks, each acknowledged (the server waits for acknowledgements before sending more); an empty
message ends it. ``$JS.API.STREAM.RESTORE.<name>`` takes the stream's configuration and answers
with a subject to send the chunks to, each as a request; an empty request ends it and is
answered with the restored stream's info. A restored stream has the same sequences as the
original, gaps included, which the projections' watermarks and the ledger chain rely on.

Because the archive holds the block files, a message erased before the snapshot (overwritten
in place by the message-delete API) is not in it either.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError

from agentledger.errors import RuntimeStateError

# Bytes of one chunk the server sends (it clamps to 1 KiB - 1 MiB), and a chunk sent back.
CHUNK_BYTES = 256 * 1024
# How long one API answer or one chunk may take on a busy host.
API_TIMEOUT_S = 30.0
# How long a restore's chunk is sent again while the server taking it is not known yet.
RESTORE_INTEREST_S = 10.0


def _answer(data: bytes, what: str) -> dict[str, Any]:
    reply = json.loads(data or b"{}")
    if reply.get("error"):
        error = reply["error"]
        raise RuntimeStateError(f"{what}: JetStream answered {error.get('code')} "
                                f"{error.get('description')} (error {error.get('err_code')})")
    return dict(reply)


async def snapshot(nc: Client, stream: str, out: Path) -> dict[str, Any]:
    """Write the snapshot archive of ``stream`` to ``out``; return its config and state as the
    server reported them when the snapshot began."""
    inbox = nc.new_inbox()
    done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    with out.open("wb") as f:
        async def on_chunk(msg: Any) -> None:
            if done.done():
                return
            status = (msg.headers or {}).get("Status") if msg.headers else None
            if not msg.data:
                if status not in (None, "204"):
                    description = (msg.headers or {}).get("Description", "")
                    done.set_exception(RuntimeStateError(f"the snapshot of {stream} failed: {status} {description}"))
                else:
                    done.set_result(None)
                return
            f.write(msg.data)
            if msg.reply:
                await nc.publish(msg.reply, b"")

        sub = await nc.subscribe(inbox, cb=on_chunk)
        try:
            request = {"deliver_subject": inbox, "no_consumers": False, "chunk_size": CHUNK_BYTES}
            reply = await nc.request(f"$JS.API.STREAM.SNAPSHOT.{stream}", json.dumps(request).encode(),
                                     timeout=API_TIMEOUT_S)
            started = _answer(reply.data, f"the snapshot of {stream}")
            await asyncio.wait_for(done, timeout=None)
        finally:
            await sub.unsubscribe()
        f.flush()
    return {"config": started.get("config", {}), "state": started.get("state", {})}


async def restore(nc: Client, stream: str, archive: Path, config: dict[str, Any],
                  state: dict[str, Any]) -> dict[str, Any]:
    """Restore ``stream`` (which must not exist) from ``archive``; return its new state."""
    request = {"config": config, "state": state}
    reply = await nc.request(f"$JS.API.STREAM.RESTORE.{stream}", json.dumps(request).encode(),
                             timeout=API_TIMEOUT_S)
    target = _answer(reply.data, f"the restore of {stream}").get("deliver_subject")
    if not target:
        raise RuntimeStateError(f"the restore of {stream}: JetStream named no subject to send it to")
    with archive.open("rb") as f:
        while chunk := f.read(CHUNK_BYTES):
            await _send(nc, target, chunk, API_TIMEOUT_S)
    end = await _send(nc, target, b"", API_TIMEOUT_S * 4)
    return dict(_answer(end.data, f"the restore of {stream}").get("state", {}))


async def _send(nc: Client, target: str, chunk: bytes, timeout: float) -> Msg:  # noqa: ASYNC109 - per chunk
    """One chunk of a restore. On a cluster the server that takes the chunks may be another node
    than the client's, and its interest in ``target`` can reach the client's node after the
    answer naming it did: "no responders" then means the chunk was not delivered, so it is sent
    again (for a while), never skipped."""
    deadline = time.monotonic() + RESTORE_INTEREST_S
    while True:
        try:
            return await nc.request(target, chunk, timeout=timeout)
        except NoRespondersError:
            if time.monotonic() >= deadline:
                raise
            await asyncio.sleep(0.05)
