"""One service shape: a service declares what it is, and one shell runs it.

A service is a ``Shell`` subclass that declares

* its ``shape`` (``Shape``): name, NATS role, micro-service name and description,
  the registries and the PostgreSQL pool it needs, how its endpoints name themselves
  in logs and errors;
* ``open(parts)``: the parts it builds on what the shell opened (``self._nc``,
  ``self._pool``, ``self._tenants``, ``self._bindings``) — projections, loops,
  background tasks, subscriptions — each entered on ``parts`` as it is started;
  what is heavy to load and only requests need (a tokenizer, an embedding model, the
  detectors) it names with ``parts.warm`` instead of loading it there;
* ``endpoints()``: its endpoints (``Endpoint``: subject, request and reply types,
  handler; or ``RawEndpoint``), adding one is one line there plus its handler;
* ``evictor()``: what drops the tenant data it caches, if it caches any;
* ``serving(parts)``, rarely: what needs its live micro service (the projector's
  share of the partitions, found by its instance id).

The shell does the rest, the same way for every service: open the process's scrape endpoint
(``metrics``), connect to NATS with the service's role, start the tenant registry (and the
bindings mirror), migrate and open the pool, ``open``, add the micro service and its endpoints
(typed ones answer through ``Endpoints``: decoded, the caller held to the body's tenant, typed
errors), answer cache evictions, ``serving``, flush,
then warm the parts named with ``parts.warm`` in a worker thread (one named with ``now`` began
as it was named): the endpoints answer from the moment they are added (``$SRV.PING`` too), and a
typed request that needs a part still warming waits for it briefly, then gets a retryable
``unavailable`` ("warming: tokenizer"). Every resource goes on one ``contextlib.AsyncExitStack``
(``Parts``) as it is opened, so ``stop()`` is that stack unwinding in reverse: what ``serving``
entered, the eviction listener and the endpoints, the requests in flight drained, then the
service's parts, the pool, the registries, the NATS connection last. A start that fails half-way
releases what it entered the same way. Liveness is the NATS read loop, the registries, and
whatever the parts said they need.

``lifecycle.serve`` runs a ``Shell`` like any service (wait for the servers, ready
and heartbeat files, drain on SIGTERM); ``main(ServiceClass)`` is the process entry point.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

import asyncpg
import structlog
from nats.aio.client import Client
from nats.micro import add_service
from nats.micro.service import Service as MicroService

from agentledger.config import Settings
from agentledger.erasure import evict
from agentledger.security import auth
from agentledger.security.identity import Caller, TenantRegistry
from agentledger.shell import lifecycle, metrics
from agentledger.shell.endpoints import Endpoint, Endpoints, Handler, RawEndpoint
from agentledger.shell.parts import Parts
from agentledger.stores import db
from agentledger.stores.natsclient import reader_alive

if TYPE_CHECKING:
    from agentledger.security.bindings import BindingRegistry

log = structlog.get_logger()


@dataclass(frozen=True)
class Pool:
    """The PostgreSQL pool a service needs; the database is migrated before it opens.

    ``reset``: connections are reset (advisory unlocks, ``RESET ALL``, ...) on their way
    back, asyncpg's default; without it the pool is ``db.create_pool``'s, which saves
    that round trip and whose users keep no session state. ``server_settings`` are set
    on every connection (they need ``reset``).
    """

    max_size: int = 4
    reset: bool = False
    server_settings: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.server_settings and not self.reset:
            raise ValueError("server_settings need reset=True (db.create_pool sets none)")

    async def open(self, url: str) -> asyncpg.Pool:
        if not self.reset:
            return await db.create_pool(url, min_size=1, max_size=self.max_size)
        pool = await asyncpg.create_pool(url, min_size=1, max_size=self.max_size, timeout=db.CONNECT_TIMEOUT_S,
                                         server_settings=dict(self.server_settings) or None)
        assert pool is not None
        return pool


@dataclass(frozen=True)
class Shape:
    """What a service is, as far as the shell is concerned.

    ``name`` is the process's ("memory-policy": its logs, its ready file), ``role`` the
    NATS user it connects as (default ``name``: each service has a user of its own name,
    ``auth.SERVICE_ROLES``), ``micro`` its micro-service name (``$SRV.PING``, the
    eviction acks). ``log_name`` is the namespace of its log events ("memory" →
    "memory.refused"), ``who`` names it in an ``internal`` reply ("the <who> failed to
    answer"; default ``name``). ``bindings``: it also mirrors the agent bindings;
    ``pool``: it needs PostgreSQL. ``bind_task`` binds a typed request's ``task_id`` to
    its log lines; ``unavailable`` are errors its typed endpoints answer as retryable
    ``unavailable`` beyond the dependencies' outages (``agentledger.stores.outages``).
    """

    name: str
    micro: str
    description: str
    log_name: str
    role: str = ""
    version: str = "0.1.0"
    who: str = ""
    bindings: bool = False
    pool: Pool | None = None
    bind_task: bool = False
    unavailable: tuple[type[BaseException], ...] = ()


class Shell:
    """The base of every service; see the module docstring.

    ``start()``, ``stop()`` (idempotent), ``wait_failed()`` and ``alive()`` are what
    ``lifecycle.serve`` runs; ``fail(exc)`` ends the process from anywhere.
    """

    shape: ClassVar[Shape]

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.name = self.shape.name
        self._nc: Client | None = None
        self._tenants: TenantRegistry | None = None
        self._bindings: BindingRegistry | None = None
        self._pool: asyncpg.Pool | None = None
        self._micro: MicroService | None = None
        self._requests: Endpoints | None = None
        self._parts: Parts | None = None
        self._failed: asyncio.Future[None] | None = None
        self._stopped = False
        self.metrics: metrics.Endpoint | None = None

    # ---- what a service declares -------------------------------------------------------

    async def open(self, parts: Parts) -> None:
        """Build and start the service's parts, entering each on ``parts``."""

    def endpoints(self) -> Sequence[Endpoint | RawEndpoint]:
        """The service's endpoints, in the order they are added (after ``open``)."""
        return ()

    def evictor(self) -> evict.Evictor | None:
        """What drops the tenant data this service caches (None: it caches none)."""
        return None

    async def serving(self, parts: Parts) -> None:
        """Start what needs the live micro service (its endpoints answer already); what it
        enters is released first on stop, before the endpoints stop."""

    # ---- what the shell does -------------------------------------------------------------

    async def start(self) -> None:
        """Open everything and serve; on any failure, release what was entered and re-raise."""
        if self._failed is None:
            self._failed = asyncio.get_running_loop().create_future()
        self._parts = Parts(self.shape.log_name, self.fail)
        try:
            await self._open(self._parts)
        except BaseException:
            await self.stop()
            raise

    async def _open(self, parts: Parts) -> None:
        shape, s = self.shape, self.settings
        # The process's scrape endpoint, first opened and so last released (shell/metrics.py).
        self.metrics = metrics.open_endpoint(s)
        parts.on_stop(self.metrics.close)
        nc = self._nc = await auth.connect(s, shape.role or shape.name, max_reconnect_attempts=-1,
                                           error_cb=self._nats_error, closed_cb=self._nats_closed)
        parts.on_stop(self._close_nats)
        self._tenants = await parts.live_part(TenantRegistry(nc, s.prefix, s.stream_replicas))
        if shape.bindings:
            # Imported here: it brings the memory read core, which only the services that
            # mirror the bindings need (a tenth of the writer's start-up imports otherwise).
            from agentledger.security.bindings import BindingRegistry  # noqa: PLC0415

            self._bindings = await parts.live_part(BindingRegistry(nc, s.prefix, s.stream_replicas))
        if shape.pool is not None:
            await db.migrate(s.database_url)
            self._pool = await shape.pool.open(s.database_url)
            parts.on_stop(self._pool.close)
        await self.open(parts)
        self._requests = Endpoints(self._tenants, log_name=shape.log_name, who=shape.who or shape.name,
                                   bind_task=shape.bind_task, unavailable=shape.unavailable)
        # Registered before the micro service, so released after it: its requests in flight finish.
        parts.on_stop(self._requests.drain)
        # `$SRV.PING` answers from here: the service serves (its warming parts answer `unavailable`).
        self._micro = micro = await add_service(nc, name=shape.micro, version=shape.version,
                                                description=shape.description)
        parts.on_stop(micro.stop)
        for endpoint in self.endpoints():
            if isinstance(endpoint, RawEndpoint):
                handler = endpoint.handle
            else:
                handler = self._requests.handler(replace(endpoint, handle=self._warm_first(endpoint.handle)))
            await micro.add_endpoint(name=endpoint.name, subject=endpoint.subject, handler=handler)
        evictor = self.evictor()
        if evictor is not None:
            evictions = await evict.listen(nc, s.prefix, shape.micro, micro.id, evictor)
            parts.on_stop(evictions.unsubscribe)
        await self.serving(parts)
        await nc.flush()
        parts.start_warming()

    def _warm_first(self, handle: Handler) -> Handler:
        """``handle`` behind the service's warming parts (``Parts.warm``): it waits for them
        briefly, then answers ``unavailable`` naming the part still warming."""
        assert self._parts is not None
        warming = self._parts.warming
        if warming.pending is None:
            return handle

        async def warm_first(caller: Caller, body: Any) -> Any:
            await warming.wait()
            return await handle(caller, body)

        return warm_first

    async def warmed(self) -> None:
        """Return once every part that warms after the endpoints answer is ready."""
        assert self._parts is not None
        await self._parts.warming.ready()

    async def stop(self) -> None:
        """Release everything entered, in reverse order; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self._parts is not None:
            await self._parts.close()

    async def wait_failed(self) -> None:
        """Return (or raise) only when the service failed: a vital task or a projection."""
        if self._failed is None:
            self._failed = asyncio.get_running_loop().create_future()
        watched = self._parts.watched if self._parts is not None else []
        waits = [asyncio.ensure_future(asyncio.shield(f)) for f in (self._failed, *watched)]
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()
        finally:
            for task in waits:
                task.cancel()

    def fail(self, exc: BaseException) -> None:
        """End the process with ``exc`` (once; after a stop began, nothing)."""
        if not self._stopped and self._failed is not None and not self._failed.done():
            self._failed.set_exception(exc)

    def alive(self) -> bool:
        """The NATS read loop runs, and so does everything the parts need (cheap; every second)."""
        return (self._nc is not None and reader_alive(self._nc)
                and self._parts is not None and self._parts.alive())

    async def _close_nats(self) -> None:
        nc = self._nc
        if nc is None or nc.is_closed:
            return
        try:
            await nc.drain()
        except Exception:  # noqa: BLE001 - draining needs the server; closing does not
            await nc.close()

    async def _nats_error(self, exc: Exception) -> None:
        log.warning(f"{self.shape.log_name}.nats_error", error=type(exc).__name__, detail=str(exc)[:300])

    async def _nats_closed(self) -> None:
        self.fail(ConnectionError("the NATS connection closed"))


def main(service: type[Shell]) -> None:
    """Process entry point of a service: ``lifecycle.main`` with the name its shape gives."""
    lifecycle.main(service, service.shape.name)
