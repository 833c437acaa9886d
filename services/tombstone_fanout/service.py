"""The tombstone-fanout service: forget requests, fanned out to every index, with receipts.

NATS micro service ``agentledger-tombstone-fanout``:

* ``<prefix>.forget.request``: accept a forget request. Who asks is the
  authenticated connection: a tenant agent forgets records and keys of its own
  tenant, the data subjects it is bound to (``agentledger agent bind --user``),
  and its tenant's tasks unless another agent holds a live lease on one; an
  operator anything, whole tenants included. The request is written to the
  forget journal outside the data folder (``stores.forget_journal``: a restore
  of an older backup applies it again), then appended as ``forget_requested``
  to the tenant's ``_forget`` ledger, both before the reply, so a crash after
  the reply never loses it; the reply says ``pending``.
* ``<prefix>.forget.receipt``: where a request stands (by ``request_id``), or
  every request about a data subject (by ``subject``): the indexes done so far
  and, once all are, the receipt with its blake3 digest.

The saga (``saga.py``) runs pending requests through the index registry
(``handlers.py``) in the background; its progress is in PostgreSQL, so a
restarted service continues where the killed one was.
"""

from __future__ import annotations

import asyncio
import secrets
from datetime import UTC, datetime

import structlog

from agentledger.contracts import events as ev
from agentledger.contracts.forget_api import (
    MAX_RECEIPTS,
    ForgetReply,
    ForgetRequest,
    ReceiptReply,
    ReceiptRequest,
    RequestProgress,
)
from agentledger.core.forget import check_may_forget, check_selector, stored_selector
from agentledger.core.memory.authority import parse_scope_key
from agentledger.errors import ConflictError, ContractError, NotFoundError
from agentledger.security.identity import Caller
from agentledger.security.sealing import Keyring, kek_of, marker_key_of
from agentledger.services.tombstone_fanout.handlers import HANDLERS
from agentledger.services.tombstone_fanout.saga import PROJECTION_WAIT_S, ForgetLog, Saga, Worker
from agentledger.services.tombstone_fanout.store import RequestRow
from agentledger.shell.endpoints import Endpoint
from agentledger.shell.parts import Parts
from agentledger.shell.service import Pool, Shape, Shell
from agentledger.stores import artifacts, forget_journal
from agentledger.stores.leases import holder_of

log = structlog.get_logger()

SERVICE_NAME = "agentledger-tombstone-fanout"
# The scope of a record an agent asks to forget: within its bindings, as its reads are.
RECORD_SCOPE_SQL = "SELECT scope_key FROM memory_records WHERE tenant = $1 AND record_id = $2"


def requested_by(caller: Caller) -> str:
    """The requester as the connection proves it (``operator`` inside the services' account)."""
    return "operator" if caller.is_operator else f"{caller.tenant}/{caller.agent}"


class TombstoneFanout(Shell):
    """The service; see the module docstring."""

    shape = Shape(name="tombstone-fanout", micro=SERVICE_NAME, log_name="forget", bindings=True,
                  pool=Pool(max_size=4, reset=True),
                  description="agentledger forget requests, fanned out to every index, with receipts")

    log: ForgetLog | None = None
    saga: Saga | None = None
    worker: Worker | None = None

    async def open(self, parts: Parts) -> None:
        s = self.settings
        assert self._nc is not None and self._pool is not None
        self.log = await parts.projection(ForgetLog(s, self._nc, self._pool))
        keyring = Keyring(self._nc, s.keys_bucket, kek_of(s), replicas=s.stream_replicas)
        store = await artifacts.open(self._nc, s)
        self.saga = Saga(s, self._nc, self._pool, self.log, handlers=HANDLERS, keyring=keyring,
                         artifacts=store)
        await parts.part(self.saga.instances)
        self.worker = await parts.live_part(Worker(self.saga, self.log))

    def endpoints(self) -> list[Endpoint]:
        p = self.settings.prefix
        return [
            Endpoint.at(p, "forget.request", ForgetRequest, ForgetReply, self.request),
            Endpoint.at(p, "forget.receipt", ReceiptRequest, ReceiptReply, self.receipt),
        ]

    # ---- endpoints ----------------------------------------------------------------------------

    async def request(self, caller: Caller, body: ForgetRequest) -> ForgetReply:
        assert self.saga is not None and self.log is not None and self._pool is not None
        tenant = body.tenant
        check_selector(body.selector, tenant)
        await self._check_may_forget(caller, body)
        request_id = body.request_id or f"fg-{secrets.token_hex(10)}"
        # A key selector's words never reach the ledger, the request's row or the receipt.
        selector = stored_selector(body.selector, marker_key_of(self.settings))
        existing = await self.log.store.request(self._pool, tenant, request_id)
        if existing is None:
            now = datetime.now(UTC)
            await asyncio.to_thread(forget_journal.record, self.settings, forget_journal.Entry(
                version=1, request_id=request_id, tenant=tenant, requested_by=requested_by(caller),
                selector=forget_journal.journaled(body.selector, marker_key_of(self.settings)),
                requested_at=now, reason=body.reason, legal_basis=body.legal_basis))
            event = ev.ForgetRequestedEvent(
                event_id=f"forget-{request_id}", tenant=tenant, task_id=ev.FORGET_TASK,
                producer="tombstone-fanout", occurred_at=now, schema_version=1,
                payload=ev.ForgetRequested(request_id=request_id, selector=selector,
                                           requested_by=requested_by(caller), operator=caller.is_operator,
                                           reason=body.reason, legal_basis=body.legal_basis))
            seqs = await self.saga.append([event])
            await self.log.wait_for(max(seqs), PROJECTION_WAIT_S)
            stored = await self.log.store.request(self._pool, tenant, request_id)
            assert stored is not None
            duplicate = stored.seq != max(seqs)
        else:
            stored, duplicate = existing, True
        if stored.request.selector != selector:
            raise ConflictError(f"request {request_id!r} was made with another selector",
                                path="$.request_id")
        if not duplicate:
            log.info("forget.accepted", request=request_id, selector=body.selector.kind,
                     requested_by="operator" if caller.is_operator else "tenant")
            assert self.worker is not None
            self.worker.wake()
        return ForgetReply(ok=True, request_id=request_id, status="completed" if stored.receipt else "pending",
                           duplicate=duplicate, receipt=stored.receipt)

    async def _check_may_forget(self, caller: Caller, body: ForgetRequest) -> None:
        """``check_may_forget`` with what it needs of the caller: its bindings, the task's lease."""
        sel = body.selector
        if caller.is_operator or caller.agent is None:
            check_may_forget(sel, operator=caller.is_operator)
            return
        assert self._bindings is not None and self._nc is not None and self._pool is not None
        bound = await self._bindings.get(body.tenant, caller.agent)
        holder = (await holder_of(self._nc, self.settings.leases_bucket, body.tenant, sel.task_id)
                  if sel.kind == "task" and sel.task_id is not None else None)
        scope = None
        if sel.kind == "record" and sel.record_id is not None:
            found = await self._pool.fetchval(RECORD_SCOPE_SQL, body.tenant, sel.record_id)
            scope = parse_scope_key(found) if found is not None else None
        check_may_forget(sel, operator=False, bound_users=bound.users, bound_projects=bound.projects,
                         agent=caller.agent, lease_holder=holder, record_scope=scope)

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
        return ReceiptReply(ok=True, requests=[await self._progress(r) for r in rows])

    async def _progress(self, row: RequestRow) -> RequestProgress:
        assert self.log is not None and self._pool is not None
        steps = await self.log.store.steps(self._pool, row.tenant, row.request_id)
        indexes = [s.result for h in HANDLERS if (s := steps.get(h.index)) is not None and s.result is not None]
        return RequestProgress(request_id=row.request_id, status="completed" if row.receipt else "pending",
                               requested_at=row.requested_at, selector=row.request.selector,
                               indexes=indexes, receipt=row.receipt, last_error=row.last_error)

