"""Request and reply plumbing shared by the client and the services.

Kept apart from ``agentledger.client`` so that a service which only needs these (the
writer's group committer awaits JetStream acks with ``Replies``; several services turn
another service's error reply into its exception with ``raise_error``) does not import
the whole client at start: the client's methods, its contracts and the artifact store
were a tenth of the writer's start-up imports. ``agentledger.client`` re-exports both.
"""

from __future__ import annotations

import asyncio
import itertools

from nats.aio.client import Client as Nats
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from agentledger.contracts.api import ErrorBody
from agentledger.errors import (
    AgentLedgerError,
    ConflictError,
    ContractError,
    DuplicateError,
    EventIdConflictError,
    IntegrityViolationError,
    LedgerGapError,
    NotFoundError,
    ProposalIdConflictError,
    UnavailableError,
)

ERRORS: dict[str, type[AgentLedgerError]] = {
    "conflict": ConflictError,
    "event_id_conflict": EventIdConflictError,
    "proposal_id_conflict": ProposalIdConflictError,
    "partial_duplicate": DuplicateError,
    "unavailable": UnavailableError,
    "not_found": NotFoundError,
    "artifact_missing": NotFoundError,
    "state_changed": AgentLedgerError,
    "ledger_gap": LedgerGapError,
    "integrity_violation": IntegrityViolationError,
}


class Replies:
    """Concurrent requests over one wildcard reply subscription (``<inbox>.<n>``).

    nats-py's ``request`` draws a random token from the OS and waits through
    ``asyncio.wait_for`` (an extra future and an extra wake-up) for every call.
    On the append path, where a request is a few tens of microseconds of Python,
    those hops and syscalls are a visible share of each event's cost; here a
    request is a publish plus a future that the subscription's callback resolves.
    ``send`` and ``wait`` are separate so that a caller can publish many
    requests before it waits for the first reply. Timeouts and "no responders"
    raise nats-py's own exceptions, as ``request`` does.
    """

    def __init__(self, nc: Nats) -> None:
        self._nc = nc
        self._prefix = ""
        self._sub: object | None = None
        self._lock = asyncio.Lock()
        self._next = itertools.count()
        self._waiting: dict[str, asyncio.Future[Msg]] = {}

    async def _subscribe(self) -> None:
        async with self._lock:
            if self._sub is None:
                base = self._nc.new_inbox()
                self._sub = await self._nc.subscribe(f"{base}.*", cb=self._on_reply)
                self._prefix = f"{base}."

    async def _on_reply(self, msg: Msg) -> None:
        future = self._waiting.pop(msg.subject[len(self._prefix):], None)
        if future is not None and not future.done():
            future.set_result(msg)

    async def send(self, subject: str, payload: bytes, timeout: float,  # noqa: ASYNC109 - a deadline
                   headers: dict[str, str] | None = None) -> tuple[str, asyncio.Future[Msg], float]:
        """Publish a request; what ``wait`` needs to await its reply within ``timeout`` s."""
        if self._sub is None:
            await self._subscribe()
        token = str(next(self._next))
        loop = asyncio.get_running_loop()
        future = self._waiting[token] = loop.create_future()
        try:
            await self._nc.publish(subject, payload, reply=self._prefix + token, headers=headers)
        except BaseException:
            del self._waiting[token]
            raise
        return token, future, loop.time() + timeout

    async def wait(self, sent: tuple[str, asyncio.Future[Msg], float]) -> Msg:
        """The reply to a request ``send`` published."""
        token, future, deadline = sent
        try:
            async with asyncio.timeout_at(deadline):
                msg = await future
        except TimeoutError:
            raise NatsTimeout from None
        finally:
            self._waiting.pop(token, None)
        if msg.headers and msg.headers.get("Status") == "503":
            raise NoRespondersError
        return msg

    async def request(self, subject: str, payload: bytes, timeout: float,  # noqa: ASYNC109
                      headers: dict[str, str] | None = None) -> Msg:
        return await self.wait(await self.send(subject, payload, timeout, headers))


def raise_error(err: ErrorBody) -> None:
    """Raise the typed exception matching a wire ``ErrorBody``."""
    cls = ERRORS.get(err.code, ContractError if err.path else AgentLedgerError)
    raise cls(err.message, code=err.code, path=err.path, retryable=err.retryable,
              current_seq=err.current_seq)
