"""The endpoints a service declares, and how its typed ones answer.

A service declares each endpoint once: an ``Endpoint`` (typed: its request and
reply types and a handler ``(caller, body) -> reply``) or, for the few whose wire
form is their own (the writer's group-committed appends, artifacts in headers, the
projector's chunked views), a ``RawEndpoint`` that answers the NATS request itself.
The shell (``agentledger.shell.service``) adds both to the service's micro service.

Typed endpoints all answer the same way, and must keep doing so: each request in
its own task (a slow one holds up no other), drained when the service stops; the
body depth-checked and decoded by the endpoint's typed decoder (after its depth and
its text were checked: no string may hold U+0000, which PostgreSQL cannot store);
the caller authenticated and held to the body's tenant before the handler reads or
writes anything; the log bound to tenant and endpoint; and every request answered:
a typed error reply for an agentledger error, retryable ``unavailable`` naming
the dependency when one failed mid-request (``agentledger.stores.outages``: one
log line with the error's class, no traceback), ``internal`` (logged with its
traceback) for anything else.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
import structlog
from nats.micro.request import Request

from agentledger.contracts.api import ErrorBody
from agentledger.contracts.codec import check_request, contract_error, encode, error_body
from agentledger.errors import AgentLedgerError
from agentledger.security.identity import Caller, TenantRegistry
from agentledger.shell import metrics
from agentledger.stores.outages import dependency, outage

log = structlog.get_logger()

Handler = Callable[[Caller, Any], Awaitable[Any]]


@dataclass(frozen=True)
class Endpoint:
    """One typed endpoint: its micro-service ``name`` and ``subject``, the ``request`` type its
    body decodes as, the ``reply`` type (an error is sent as ``reply(ok=False, error=...)``),
    and ``handle(caller, body)``, whose reply may come already encoded, as bytes.

    ``check(body)``, if given, is a rule of the contract the decoder cannot express; it runs
    right after decoding, before the caller is looked up, like a decoding error.
    """

    name: str
    subject: str
    request: type[Any]
    reply: type[Any]
    handle: Handler
    check: Callable[[Any], None] | None = None
    decoder: msgspec.json.Decoder[Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "decoder", msgspec.json.Decoder(self.request))

    @classmethod
    def at(cls, prefix: str, path: str, request: type[Any], reply: type[Any], handle: Handler, *,
           check: Callable[[Any], None] | None = None) -> Endpoint:
        """The usual naming: subject ``<prefix>.<path>``, name ``path`` with dashes for dots
        (``memory.propose`` → ``memory-propose``)."""
        return cls(path.replace(".", "-"), f"{prefix}.{path}", request, reply, handle, check=check)

    @property
    def action(self) -> str:
        """The subject's last token ("propose"): the ``endpoint`` of the request's log lines."""
        return self.subject.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class RawEndpoint:
    """An endpoint that answers the NATS request itself (its wire form is its own); it must
    check the caller and answer every request as the typed ones do."""

    name: str
    subject: str
    handle: Callable[[Request], Awaitable[None]]

    @classmethod
    def at(cls, prefix: str, path: str, handle: Callable[[Request], Awaitable[None]]) -> RawEndpoint:
        """Named like ``Endpoint.at``."""
        return cls(path.replace(".", "-"), f"{prefix}.{path}", handle)


class Endpoints:
    """The typed request handlers of one service; ``handler(endpoint)`` for ``add_endpoint``,
    ``drain()`` on stop.

    ``log_name`` is the namespace of the log events ("memory" → "memory.refused"),
    ``who`` names the service in the ``internal`` reply; with ``bind_task`` the
    body's ``task_id`` is bound to the log too; ``unavailable`` are errors answered as
    retryable ``unavailable`` beyond the dependencies' outages (``outages.outage``).
    """

    def __init__(self, tenants: TenantRegistry, *, log_name: str, who: str, bind_task: bool = False,
                 unavailable: tuple[type[BaseException], ...] = ()) -> None:
        self._tenants = tenants
        self._log_name = log_name
        self._who = who
        self._bind_task = bind_task
        self._unavailable = unavailable
        self._tasks: set[asyncio.Task[None]] = set()

    def handler(self, endpoint: Endpoint) -> Callable[[Request], Awaitable[None]]:
        async def on_request(req: Request) -> None:
            task = asyncio.create_task(self._handle(endpoint, req))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return on_request

    async def drain(self) -> None:
        """Wait for the requests in flight to be answered."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _handle(self, endpoint: Endpoint, req: Request) -> None:
        name, action = self._log_name, endpoint.action
        started = time.perf_counter()
        try:
            check_request(req.data)
            try:
                body = endpoint.decoder.decode(req.data)
            except msgspec.MsgspecError as exc:
                raise contract_error(exc) from exc
            if endpoint.check is not None:
                endpoint.check(body)
            caller = await self._tenants.caller(req.headers)
            caller.require_tenant(body.tenant, "$.tenant")
            bound: dict[str, Any] = {"tenant": body.tenant, "endpoint": action}
            if self._bind_task:
                bound["task"] = getattr(body, "task_id", None)
            with structlog.contextvars.bound_contextvars(**bound):
                reply = await endpoint.handle(caller, body)
        except Exception as exc:  # noqa: BLE001 - every request gets a typed reply
            reply = endpoint.reply(ok=False, error=self._error_body(exc))
            if reply.error.code not in ("internal", "unavailable"):
                log.info(f"{name}.refused", endpoint=action, code=reply.error.code, path=reply.error.path)
        else:
            log.debug(f"{name}.answered", endpoint=action, ms=round((time.perf_counter() - started) * 1000, 2))
        try:
            await req.respond(reply if isinstance(reply, bytes) else encode(reply))
        except Exception:  # noqa: BLE001 - the caller went away
            log.warning(f"{name}.respond_failed", endpoint=action)

    def _error_body(self, exc: Exception) -> ErrorBody:
        metrics.refused(exc)
        if isinstance(exc, AgentLedgerError):
            return error_body(exc)
        return error_body(failed(exc, self._log_name, f"the {self._who} failed to answer", self._unavailable))


def failed(exc: BaseException, log_name: str, internal: str,
           unavailable: tuple[type[BaseException], ...] = ()) -> AgentLedgerError:
    """The error a request answers for ``exc``, which is no agentledger error, logged once.

    A dependency failing mid-request (``outages.outage``, or one of ``unavailable``) is
    retryable ``unavailable`` naming it, logged ``<log_name>.unavailable`` on one line without
    a traceback: an outage is expected, and fails every request while it lasts. Anything else
    is a bug: ``internal`` with the message ``internal``, logged ``<log_name>.internal`` with
    its traceback. Raw endpoints use this too, so every request path answers alike.
    """
    down = outage(exc, unavailable)
    if down is not None:
        log.warning(f"{log_name}.unavailable", error=type(exc).__name__,
                    dependency=dependency(exc, unavailable), detail=str(exc)[:300])
        return down
    log.error(f"{log_name}.internal", error=type(exc).__name__, detail=str(exc)[:300], exc_info=exc)
    return AgentLedgerError(internal, code="internal", retryable=True)
