"""The ledger-writer: the only process that appends to the ledger stream.

Agents call the NATS micro endpoint ``<prefix>.writer.append`` with one event or
an atomic batch of one task. The writer validates everything it can without
task state (shape, tokens, sizes, plan DAG, goal hash), seals personal values,
and answers only after JetStream has durably stored the events: ``{seq,
duplicate}`` per event, or one typed error and nothing stored. The handler
returns to the subscription at once and finishes in a task of its own, so
concurrent appends can meet in the group committer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import nats
import structlog
from nats.micro import add_service
from nats.micro.request import Request

from agentledger import artifacts
from agentledger.config import Settings
from agentledger.contracts.api import AppendReply, AppendResult, ErrorBody, LeaseBody, LeaseReply
from agentledger.contracts.codec import (
    decode_append_request,
    decode_event,
    decode_lease_request,
    encode,
)
from agentledger.contracts.events import EventBase, kind_of
from agentledger.core.validate import check_batch
from agentledger.errors import AgentLedgerError, ContractError
from agentledger.leases import Lease, LeaseTable
from agentledger.ledger import ensure_stream, ledger_subject, msg_id
from agentledger.sealing import Keyring, load_kek, seal_event
from agentledger.services.ledger_writer.group_commit import GroupCommitter, Unit

log = structlog.get_logger()

SERVICE_NAME = "agentledger-ledger-writer"


def append_subject(prefix: str) -> str:
    return f"{prefix}.writer.append"


def error_body(exc: AgentLedgerError) -> ErrorBody:
    return ErrorBody(code=exc.code, message=exc.message, retryable=exc.retryable, path=exc.path,
                     current_seq=exc.current_seq)


def error_reply(exc: AgentLedgerError) -> bytes:
    return encode(AppendReply(ok=False, error=error_body(exc)))


def lease_subject(prefix: str, action: str) -> str:
    return f"{prefix}.lease.{action}"


class LedgerWriter:
    """Validates, seals and group-commits appends; see the module docstring."""

    name = "ledger-writer"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._nc: nats.NATS | None = None
        self._service: object | None = None
        self._committer: GroupCommitter | None = None
        self._flusher: asyncio.Task[None] | None = None
        self._handlers: set[asyncio.Task[None]] = set()
        self._keyring: Keyring | None = None
        self._artifacts: artifacts.ArtifactStore | None = None
        self._leases: LeaseTable | None = None
        self._stopped = False

    async def start(self) -> None:
        s = self.settings
        self._nc = await nats.connect(s.nats_url, name="agentledger-ledger-writer",
                                      max_reconnect_attempts=-1)
        await ensure_stream(s, self._nc)
        self._keyring = Keyring(self._nc, s.keys_bucket, load_kek(s.kek_path))
        self._artifacts = await artifacts.open(self._nc, s)
        self._leases = LeaseTable(self._nc, s.leases_bucket)
        await self._leases.start()
        self._committer = GroupCommitter(self._nc, s.stream, max_batch=s.max_batch_events,
                                         max_inflight=s.max_inflight_batches)
        self._flusher = asyncio.create_task(self._committer.run())
        self._service = await add_service(
            self._nc, name=SERVICE_NAME, version="0.1.0",
            description="Validated, durable, deduplicated appends to the agentledger ledger")
        await self._service.add_endpoint(  # type: ignore[attr-defined]
            name="append", subject=append_subject(s.prefix), handler=self._on_request)
        for action in ("acquire", "renew", "release"):
            await self._service.add_endpoint(  # type: ignore[attr-defined]
                name=f"lease-{action}", subject=lease_subject(s.prefix, action),
                handler=self._lease_handler(action))

    async def wait_failed(self) -> None:
        assert self._flusher is not None
        await self._flusher

    async def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self._service is not None:
            await self._service.stop()  # type: ignore[attr-defined]
        if self._handlers:
            await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._committer is not None:
            await self._committer.close()
        if self._leases is not None:
            await self._leases.stop()
        if self._flusher is not None:
            self._flusher.cancel()
        if self._nc is not None:
            await self._nc.drain()

    async def _on_request(self, req: Request) -> None:
        try:
            unit = self._prepare(req.data)
        except AgentLedgerError as exc:
            log.info("append.rejected", code=exc.code, path=exc.path)
            await req.respond(error_reply(exc))
            return
        task = asyncio.create_task(self._finish(req, unit))
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    def _prepare(self, data: bytes) -> tuple[list[EventBase], int | None]:
        """Decode and check a request; everything here needs no I/O."""
        request = decode_append_request(data)
        limit = self.settings.max_event_bytes
        if len(request.events) > self.settings.max_batch_events:
            raise ContractError(f"{len(request.events)} events in one append; at most "
                                f"{self.settings.max_batch_events}", code="batch_too_large",
                                path="$.events")
        events = []
        for i, raw in enumerate(request.events):
            if len(raw) > limit:
                raise ContractError(f"event is {len(raw)} bytes, the limit is {limit}; put large "
                                    "payloads in the artifact store and reference them",
                                    code="event_too_large", path=f"$.events[{i}]")
            events.append(decode_event(raw, f"$.events[{i}]"))
        check_batch(events)
        return events, request.expected_last_seq

    async def _finish(self, req: Request, prepared: tuple[list[EventBase], int | None]) -> None:
        events, expected = prepared
        first = events[0]
        with structlog.contextvars.bound_contextvars(tenant=first.tenant, task=first.task_id,
                                                     trace_id=first.trace_id):
            try:
                assert self._keyring is not None and self._artifacts is not None
                # The artifact must be durable before the event that cites it is accepted.
                await artifacts.check_refs(self._artifacts, events)
                sealed = [await seal_event(e, self._keyring) for e in events]
                unit = Unit(
                    subject=ledger_subject(self.settings.prefix, first.tenant, first.task_id),
                    msg_ids=[msg_id(e.tenant, e.task_id, e.event_id) for e in sealed],
                    bodies=[encode(e) for e in sealed],
                    event_ids=[e.event_id for e in sealed],
                    expected_last_seq=expected,
                )
                results = await self._commit_fenced(events, unit)
            except AgentLedgerError as exc:
                log.info("append.refused", code=exc.code, path=exc.path)
                await req.respond(error_reply(exc))
                return
            except Exception:
                log.exception("append.failed")
                await req.respond(error_reply(AgentLedgerError("internal error", code="internal",
                                                               retryable=True)))
                return
            await req.respond(encode(AppendReply(ok=True, results=results)))

    async def _commit_fenced(self, events: list[EventBase], unit: Unit) -> list[AppendResult]:
        """Commit ``unit``, holding the task's lease lock from the token check to the ack."""
        assert self._leases is not None and self._committer is not None
        first = events[0]
        async with self._leases.locked(first.tenant, first.task_id):
            await self._leases.check(first.tenant, first.task_id,
                                     [(kind_of(e), e.fencing_token) for e in events])
            return await self._committer.submit(unit)

    def _lease_handler(self, action: str) -> Callable[[Request], Awaitable[None]]:
        async def handle(req: Request) -> None:
            assert self._leases is not None
            try:
                r = decode_lease_request(req.data)
                if action == "acquire":
                    lease: Lease | None = await self._leases.acquire(r.tenant, r.task_id, r.holder,
                                                                     r.ttl_s)
                elif r.token is None:
                    raise ContractError(f"{action} needs the lease token", code="missing_field",
                                        path="$.token")
                elif action == "renew":
                    lease = await self._leases.renew(r.tenant, r.task_id, r.holder, r.token, r.ttl_s)
                else:
                    await self._leases.release(r.tenant, r.task_id, r.holder, r.token)
                    lease = None
            except AgentLedgerError as exc:
                await req.respond(encode(LeaseReply(ok=False, error=error_body(exc))))
                return
            body = LeaseBody(lease.holder, lease.token, lease.expires_at) if lease else None
            await req.respond(encode(LeaseReply(ok=True, lease=body)))
        return handle
