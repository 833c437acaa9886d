"""The NATS connection every agentledger process uses: nats-py, hardened in three places.

nats-py decodes every delivered subject as strict UTF-8 inside its read loop.
The server accepts any bytes in a subject, so one message published on a ledger
subject with invalid UTF-8 raised there; nats-py logs the error and ends the read
loop, while the connection still reports itself connected: the process went
silent at 0% CPU with nothing to restart it. Here a subject that is not UTF-8 is
decoded with ``surrogateescape`` (the raw bytes stay recoverable and the
projection records the message as a rejection), and ``reader_alive`` tells a
service's liveness check whether the read loop still runs, so anything else that
ends it makes the service exit and be restarted instead of hanging.

A server that hangs (SIGSTOP, a frozen VM) keeps its TCP connections open, and
nats-py, pinging every 2 minutes and giving up after 2 unanswered pings, stayed on
it for 4 minutes: on a cluster the writer connected to a frozen node answered no
append although two nodes served the ledger. Here a connection pings every
``PING_INTERVAL_S`` and moves to another server after ``MAX_OUTSTANDING_PINGS``
unanswered ones: 8 to 10 s after the last answer. Not sooner: a service whose read
loop ended must still see itself stuck and exit (``lifecycle.STUCK_EXIT_S``, 5 to 7 s
later) before a reconnect would start a new read loop under it.
"""

from __future__ import annotations

import random
from typing import Any

import nats.errors
from nats.aio.client import Client

from agentledger.config import nats_servers

PING_INTERVAL_S = 2
MAX_OUTSTANDING_PINGS = 4


class LedgerClient(Client):
    """A nats-py client whose read loop survives subjects that are not UTF-8."""

    def _build_message(self, sid: int, subject: bytes, reply: bytes, data: bytes,
                       headers: dict[str, str] | None) -> Any:
        return self.msg_class(subject=subject.decode("utf-8", "surrogateescape"),
                              reply=reply.decode("utf-8", "surrogateescape"),
                              data=data, headers=headers, _client=self, _sid=sid)


async def open_connection(servers: str | list[str], **options: Any) -> LedgerClient:
    """``nats.connect`` with a ``LedgerClient``; ``nats://a,nats://b`` is a list of servers (a cluster).

    Without reconnects (``allow_reconnect=False``, a one-shot admin connection) nats-py gives
    up at the first server that fails its handshake; here each server of the list is tried
    once, in random order, so one node that is down (or just restarting) fails nothing.
    """
    if isinstance(servers, str):
        servers = nats_servers(servers)
    options.setdefault("ping_interval", PING_INTERVAL_S)
    options.setdefault("max_outstanding_pings", MAX_OUTSTANDING_PINGS)
    if options.get("allow_reconnect", True) or len(servers) < 2:
        nc = LedgerClient()
        await nc.connect(servers, **options)
        return nc
    failure: BaseException | None = None
    for server in random.sample(servers, len(servers)):
        nc = LedgerClient()
        try:
            await nc.connect([server], **options)
            return nc
        except (OSError, nats.errors.Error, TimeoutError) as exc:
            failure = exc
    assert failure is not None
    raise failure


def reader_alive(nc: Client) -> bool:
    """False once the connection is up but its read loop has ended (nothing will be received).

    While reconnecting or closed the read loop is legitimately absent; the
    reconnect logic (or the closed callback) owns those states.
    """
    if not nc.is_connected:
        return True
    task = nc._reading_task  # nats-py exposes no other way to see it
    return task is not None and not task.done()
