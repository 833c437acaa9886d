"""The tombstone-fanout service: forget requests, fanned out to every index, with receipts.

NATS micro service ``agentledger-tombstone-fanout``:

* ``<prefix>.forget.request``: accept a forget request. Who asks is the
  authenticated connection: a tenant agent forgets records and keys of its own
  tenant, the data subjects it is bound to (``agentledger agent bind --user``),
  and its tenant's tasks unless another agent holds a live lease on one; an
  operator anything, whole tenants included. The request is
  appended as ``forget_requested`` to the tenant's ``_forget`` ledger before the
  reply, so a crash after the reply never loses it; the reply says ``pending``.
* ``<prefix>.forget.receipt``: where a request stands (by ``request_id``), or
  every request about a data subject (by ``subject``): the indexes done so far
  and, once all are, the receipt with its blake3 digest.

The saga (``saga.py``) runs pending requests through the index registry
(``handlers.py``) in the background; its progress is in PostgreSQL, so a
restarted service continues where the killed one was.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from datetime import UTC, datetime

import asyncpg
import msgspec
import structlog
from nats.aio.client import Client
from nats.micro import add_service
from nats.micro.service import Service

from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.contracts.forget_api import (
    MAX_RECEIPTS,
    ForgetReply,
    ForgetRequest,
    ReceiptReply,
    ReceiptRequest,
    RequestProgress,
)
from agentledger.core.forget import check_may_forget, check_selector
from agentledger.errors import ConflictError, ContractError, NotFoundError
from agentledger.security import auth
from agentledger.security.bindings import BindingRegistry
from agentledger.security.identity import Caller, TenantRegistry
from agentledger.security.sealing import Keyring, kek_of
from agentledger.services.tombstone_fanout.handlers import HANDLERS
from agentledger.services.tombstone_fanout.saga import PROJECTION_WAIT_S, ForgetLog, Saga, Worker
from agentledger.services.tombstone_fanout.store import RequestRow
from agentledger.shell.endpoints import Endpoint, Endpoints
from agentledger.shell.lifecycle import ServiceShell
from agentledger.stores import artifacts, db
from agentledger.stores.leases import holder_of
from agentledger.stores.natsclient import reader_alive

log = structlog.get_logger()

SERVICE_NAME = "agentledger-tombstone-fanout"
SERVICE_VERSION = "0.1.0"
ROLE = "tombstone-fanout"


def forget_subject(prefix: str, action: str) -> str:
    return f"{prefix}.forget.{action}"


def requested_by(caller: Caller) -> str:
    """The requester as the connection proves it (``operator`` inside the services' account)."""
    return "operator" if caller.is_operator else f"{caller.tenant}/{caller.agent}"


class TombstoneFanout(ServiceShell):
    """The service; see the module docstring."""

    name = "tombstone-fanout"
    log_name = "forget"

    def __init__(self, settings: Settings) -> None:
        super().__init__()
        self.settings = settings
        self._nc: Client | None = None
        self._pool: asyncpg.Pool | None = None
        self._tenants: TenantRegistry | None = None
        self._bindings: BindingRegistry | None = None
        self._service: Service | None = None
        self._requests: Endpoints | None = None
        self.log: ForgetLog | None = None
        self.saga: Saga | None = None
        self.worker: Worker | None = None

    # ---- lifecycle --------------------------------------------------------------------------

    async def _start(self) -> None:
        s = self.settings
        self._nc = await auth.connect(s, ROLE, max_reconnect_attempts=-1, error_cb=self._nats_error,
                                      closed_cb=self._nats_closed)
        self._tenants = TenantRegistry(self._nc, s.prefix, s.stream_replicas)
        await self._tenants.start()
        self._bindings = BindingRegistry(self._nc, s.prefix, s.stream_replicas)
        await self._bindings.start()
        await db.migrate(s.database_url)
        self._pool = await asyncpg.create_pool(s.database_url, min_size=1, max_size=4,
                                               timeout=db.CONNECT_TIMEOUT_S)
        self.log = ForgetLog(s, self._nc, self._pool)
        await self.log.start()
        keyring = Keyring(self._nc, s.keys_bucket, kek_of(s), replicas=s.stream_replicas)
        store = await artifacts.open(self._nc, s)
        self.saga = Saga(s, self._nc, self._pool, self.log, handlers=HANDLERS, keyring=keyring,
                         artifacts=store)
        await self.saga.instances.start()
        self.worker = Worker(self.saga, self.log)
        self.worker.start()
        self._requests = Endpoints(self._tenants, log_name="forget", who="tombstone-fanout")
        endpoints = {
            "request": Endpoint(msgspec.json.Decoder(ForgetRequest), ForgetReply, self.request),
            "receipt": Endpoint(msgspec.json.Decoder(ReceiptRequest), ReceiptReply, self.receipt),
        }
        self._service = await add_service(self._nc, name=SERVICE_NAME, version=SERVICE_VERSION,
                                          description="agentledger forget requests, fanned out to every "
                                                      "index, with receipts")
        for action, endpoint in endpoints.items():
            await self._service.add_endpoint(name=f"forget-{action}", subject=forget_subject(s.prefix, action),
                                             handler=self._requests.handler(action, endpoint))
        await self._nc.flush()

    def _watched(self) -> list[asyncio.Future[None]]:
        return [self.log.failed] if self.log is not None else []

    def alive(self) -> bool:
        """NATS read loop alive, the ``_forget`` projection turning, the saga worker running."""
        return (self._nc is not None and reader_alive(self._nc) and self.log is not None
                and self.log.alive() and self.worker is not None and self.worker.alive())

    async def stop(self) -> None:
        """Stop answering, finish in-flight requests, stop the saga and the projection; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if self._service is not None:
            with contextlib.suppress(Exception):
                await self._service.stop()
        if self._requests is not None:
            await self._requests.drain()
        if self.worker is not None:
            await self.worker.stop()
        if self.saga is not None:
            await self.saga.instances.stop()
        if self.log is not None:
            await self.log.stop()
        for registry in (self._bindings, self._tenants):
            if registry is not None:
                await registry.stop()
        if self._nc is not None and not self._nc.is_closed:
            try:
                await self._nc.drain()
            except Exception:  # noqa: BLE001
                await self._nc.close()
        if self._pool is not None:
            await self._pool.close()

    # ---- endpoints ----------------------------------------------------------------------------

    async def request(self, caller: Caller, body: ForgetRequest) -> ForgetReply:
        assert self.saga is not None and self.log is not None and self._pool is not None
        tenant = body.tenant
        check_selector(body.selector, tenant)
        await self._check_may_forget(caller, body)
        request_id = body.request_id or f"fg-{secrets.token_hex(10)}"
        existing = await self.log.store.request(self._pool, tenant, request_id)
        if existing is None:
            event = ev.ForgetRequestedEvent(
                event_id=f"forget-{request_id}", tenant=tenant, task_id=ev.FORGET_TASK,
                producer="tombstone-fanout", occurred_at=datetime.now(UTC), schema_version=1,
                payload=ev.ForgetRequested(request_id=request_id, selector=body.selector,
                                           requested_by=requested_by(caller), operator=caller.is_operator,
                                           reason=body.reason, legal_basis=body.legal_basis))
            seqs = await self.saga.append([event])
            await self.log.wait_for(max(seqs), PROJECTION_WAIT_S)
            stored = await self.log.store.request(self._pool, tenant, request_id)
            assert stored is not None
            duplicate = stored.seq != max(seqs)
        else:
            stored, duplicate = existing, True
        if stored.request.selector != body.selector:
            raise ConflictError(f"request {request_id!r} was made with another selector",
                                path="$.request_id")
        if not duplicate:
            log.info("forget.accepted", request=request_id, selector=body.selector.kind,
                     requested_by="operator" if caller.is_operator else "tenant")
            assert self.worker is not None
            self.worker.wake()
        return ForgetReply(request_id=request_id, status="completed" if stored.receipt else "pending",
                           duplicate=duplicate, receipt=stored.receipt)

    async def _check_may_forget(self, caller: Caller, body: ForgetRequest) -> None:
        """``check_may_forget`` with what it needs of the caller: its bindings, the task's lease."""
        sel = body.selector
        if caller.is_operator or caller.agent is None:
            check_may_forget(sel, operator=caller.is_operator)
            return
        assert self._bindings is not None and self._nc is not None
        bound = (await self._bindings.get(body.tenant, caller.agent)).users if sel.kind == "subject" else frozenset()
        holder = (await holder_of(self._nc, self.settings.leases_bucket, body.tenant, sel.task_id)
                  if sel.kind == "task" and sel.task_id is not None else None)
        check_may_forget(sel, operator=False, bound_users=bound, agent=caller.agent, lease_holder=holder)

    async def receipt(self, caller: Caller, body: ReceiptRequest) -> ReceiptReply:
        assert self.log is not None and self._pool is not None
        if (body.request_id is None) == (body.subject is None):
            raise ContractError("name either request_id or subject", code="invalid_value",
                                path="$.request_id")
        store = self.log.store
        if body.request_id is not None:
            row = await store.request(self._pool, body.tenant, body.request_id)
            if row is None:
                raise NotFoundError(f"no forget request {body.request_id!r} in tenant {body.tenant!r}",
                                    path="$.request_id")
            rows = [row]
        else:
            assert body.subject is not None
            rows = await store.by_subject(self._pool, body.tenant, body.subject, MAX_RECEIPTS)
        return ReceiptReply(requests=[await self._progress(r) for r in rows])

    async def _progress(self, row: RequestRow) -> RequestProgress:
        assert self.log is not None and self._pool is not None
        steps = await self.log.store.steps(self._pool, row.tenant, row.request_id)
        indexes = [s.result for h in HANDLERS if (s := steps.get(h.index)) is not None and s.result is not None]
        return RequestProgress(request_id=row.request_id, status="completed" if row.receipt else "pending",
                               requested_at=row.requested_at, selector=row.request.selector,
                               indexes=indexes, receipt=row.receipt, last_error=row.last_error)

