"""How a tenant-facing service answers the requests of its NATS micro-service endpoints.

The memory-policy service and the context-builder answer their endpoints the
same way, and must keep doing so: each request in its own task (a slow one
holds up no other), drained when the service stops; the body depth-checked and
decoded by the endpoint's typed decoder (after its depth and its text were checked: no
string may hold U+0000, which PostgreSQL cannot store); the caller authenticated and held to
the body's tenant; the log bound to tenant and endpoint; and every request
answered: a typed error reply for an agentledger error, retryable
``unavailable`` when a dependency failed mid-request, ``internal`` (logged with
its traceback) for anything else.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import msgspec
import nats.errors
import structlog
from nats.micro.request import Request

from agentledger.contracts.api import ErrorBody
from agentledger.contracts.codec import check_request, contract_error, encode, error_body
from agentledger.errors import AgentLedgerError
from agentledger.security.identity import Caller, TenantRegistry

log = structlog.get_logger()


class Endpoint(msgspec.Struct, frozen=True):
    """One endpoint: the decoder of its request, the reply type an error is sent as, and the
    handler (whose reply may come already encoded, as bytes)."""

    decoder: msgspec.json.Decoder[Any]
    reply: type[Any]
    handle: Callable[[Caller, Any], Awaitable[Any]]


class Endpoints:
    """The request handlers of one service; ``handler(action, endpoint)`` for ``add_endpoint``,
    ``drain()`` on stop.

    ``log_name`` is the namespace of the log events ("memory" → "memory.refused"),
    ``who`` names the service in the ``internal`` reply; with ``bind_task`` the
    body's ``task_id`` is bound to the log too.
    """

    def __init__(self, tenants: TenantRegistry, *, log_name: str, who: str, bind_task: bool = False) -> None:
        self._tenants = tenants
        self._log_name = log_name
        self._who = who
        self._bind_task = bind_task
        self._tasks: set[asyncio.Task[None]] = set()

    def handler(self, action: str, endpoint: Endpoint) -> Callable[[Request], Awaitable[None]]:
        async def on_request(req: Request) -> None:
            task = asyncio.create_task(self._handle(action, endpoint, req))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return on_request

    async def drain(self) -> None:
        """Wait for the requests in flight to be answered."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _handle(self, action: str, endpoint: Endpoint, req: Request) -> None:
        name = self._log_name
        started = time.perf_counter()
        try:
            check_request(req.data)
            try:
                body = endpoint.decoder.decode(req.data)
            except msgspec.MsgspecError as exc:
                raise contract_error(exc) from exc
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
        if isinstance(exc, AgentLedgerError):
            return error_body(exc)
        # A dependency failing mid-request is retryable ``unavailable``, never ``internal``.
        if isinstance(exc, (asyncpg.PostgresConnectionError, OSError, asyncpg.InterfaceError,
                            asyncpg.InternalClientError, TimeoutError, nats.errors.Error)):
            log.warning(f"{self._log_name}.unavailable", error=type(exc).__name__, detail=str(exc)[:300])
            return ErrorBody(code="unavailable", message="a dependency did not answer; retry", retryable=True)
        log.error(f"{self._log_name}.internal", error=type(exc).__name__, detail=str(exc)[:300], exc_info=exc)
        return ErrorBody(code="internal", message=f"the {self._who} failed to answer", retryable=True)
