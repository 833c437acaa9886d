"""The NATS connection every agentledger process uses: nats-py, hardened in two places.

nats-py decodes every delivered subject as strict UTF-8 inside its read loop.
The server accepts any bytes in a subject, so one message published on a ledger
subject with invalid UTF-8 raised there; nats-py logs the error and ends the read
loop, while the connection still reports itself connected: the process went
silent at 0% CPU with nothing to restart it. Here a subject that is not UTF-8 is
decoded with ``surrogateescape`` (the raw bytes stay recoverable and the
projection records the message as a rejection), and ``reader_alive`` tells a
service's liveness check whether the read loop still runs, so anything else that
ends it makes the service exit and be restarted instead of hanging.
"""

from __future__ import annotations

from typing import Any

from nats.aio.client import Client


class LedgerClient(Client):
    """A nats-py client whose read loop survives subjects that are not UTF-8."""

    def _build_message(self, sid: int, subject: bytes, reply: bytes, data: bytes,
                       headers: dict[str, str] | None) -> Any:
        return self.msg_class(subject=subject.decode("utf-8", "surrogateescape"),
                              reply=reply.decode("utf-8", "surrogateescape"),
                              data=data, headers=headers, _client=self, _sid=sid)


async def open_connection(servers: str | list[str], **options: Any) -> LedgerClient:
    """``nats.connect`` with a ``LedgerClient``."""
    nc = LedgerClient()
    await nc.connect(servers, **options)
    return nc


def reader_alive(nc: Client) -> bool:
    """False once the connection is up but its read loop has ended (nothing will be received).

    While reconnecting or closed the read loop is legitimately absent; the
    reconnect logic (or the closed callback) owns those states.
    """
    if not nc.is_connected:
        return True
    task = nc._reading_task  # nats-py exposes no other way to see it
    return task is not None and not task.done()
