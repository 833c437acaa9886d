"""The forget saga: drive every index of a request to its receipt, surviving being killed.

``ForgetLog`` projects the tenants' ``_forget`` subjects into ``forget_requests``
(a request durable on the ledger is a pending row, whatever happened to the
process that accepted it). ``Saga.run`` takes a pending request through
``HANDLERS`` in order: for each index it makes and stores the plan first, then
applies it and stores the index's receipt entry, so a run killed anywhere
resumes at the step it was in with the same plan, and a step run twice changes
nothing (every handler is idempotent). When the last index is done the receipt
is sealed with its blake3 digest and appended as ``forget_completed``; the
projection of that event completes the row. Every time in a receipt comes from
a stored step, so a resumed run's receipt equals an uninterrupted one's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

import asyncpg
import msgspec
import nats.js.errors
import structlog
from nats.aio.client import Client

from agentledger.client import raise_error
from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.contracts.api import AppendReply
from agentledger.contracts.codec import decode_event, encode
from agentledger.core.forget import make_receipt
from agentledger.erasure import evict
from agentledger.erasure.erase import erase_seqs
from agentledger.errors import UnavailableError
from agentledger.projection.live import LedgerProjection
from agentledger.security.sealing import Keyring
from agentledger.services.tombstone_fanout.registry import ForgetContext, Handler, Rechecked
from agentledger.services.tombstone_fanout.store import ForgetStore, RequestRow
from agentledger.shell import metrics
from agentledger.shell.tasks import stop_task
from agentledger.stores.artifacts import ArtifactStore

log = structlog.get_logger()

DURABLE = "tombstone-fanout"
# How long a handler waits for a projection to commit what it had been delivered.
PROJECTION_WAIT_S = 60.0
# Times a step's index is asked again and what it still holds forgotten (``Saga.recheck``).
RECHECK_ROUNDS = 3
_append_reply = msgspec.json.Decoder(AppendReply)


def forget_filter(prefix: str) -> str:
    return f"{prefix}.ledger.*.{ev.FORGET_TASK}"


class ForgetLog(LedgerProjection[ForgetStore]):
    """``forget_requested`` → a pending request row; ``forget_completed`` → its receipt."""

    durable = DURABLE
    log_name = "forget"
    noun = "forget"
    description = "agentledger forget requests (position follows PostgreSQL)"

    def __init__(self, settings: Settings, nc: Client, pool: asyncpg.Pool) -> None:
        super().__init__(settings, nc, pool, ForgetStore())
        self.new_requests = asyncio.Event()

    def filter_subject(self) -> str:
        return forget_filter(self.settings.prefix)

    async def apply(self, conn: asyncpg.Connection, fresh: list[tuple[int, Any]]) -> dict[str, int]:
        added = completed = 0
        for seq, msg in fresh:
            try:
                event = decode_event(msg.data)
            except Exception as exc:  # noqa: BLE001 - any bytes: skipped, with a log line
                log.warning("forget.undecodable", seq=seq, error=type(exc).__name__)
                self.pass_over(seq, "undecodable", f"not an event ({type(exc).__name__})")
                continue
            payload = ev.payload_of(event)
            if isinstance(payload, ev.ForgetRequested):
                await self.store.add_request(conn, event.tenant, seq, payload, event.occurred_at)
                added += 1
            elif isinstance(payload, ev.ForgetCompleted) and payload.receipt.tenant == event.tenant:
                await self.store.complete(conn, payload.receipt)
                completed += 1
        if added:
            self.new_requests.set()
        return {"requested": added, "completed": completed}


class Saga:
    """Runs requests through ``handlers``; see the module docstring."""

    def __init__(self, settings: Settings, nc: Client, pool: asyncpg.Pool, log_: ForgetLog, *,
                 handlers: Sequence[Handler], keyring: Keyring, artifacts: ArtifactStore) -> None:
        self.settings = settings
        self._nc = nc
        self._pool = pool
        self._log = log_
        self.handlers = list(handlers)
        self._keyring = keyring
        self._artifacts = artifacts
        self.store = log_.store
        # Who holds caches to evict (refreshed in the background once ``start``ed).
        self.instances = evict.Instances(nc)
        # Chaos testing (``AGENTLEDGER_FORGET_KILL_AT=<index>:planned|applied``): the process
        # SIGKILLs itself right after that step's plan or result is stored, as a crash would.
        self.kill_at: str | None = os.environ.get("AGENTLEDGER_FORGET_KILL_AT") or None

    # ---- the context handlers work with ---------------------------------------------------------

    def context(self, row: RequestRow) -> ForgetContext:
        return ForgetContext(
            settings=self.settings, nc=self._nc, pool=self._pool, request=row.request, tenant=row.tenant,
            request_seq=row.seq, keyring=self._keyring, artifacts=self._artifacts, append=self.append,
            erase=self.erase, erase_artifact=self._artifacts.erase, wait_watermark=self.wait_watermark,
            evict=self.evict)

    async def evict(self, eviction: evict.Eviction) -> list[evict.EvictionAck]:
        return await evict.broadcast(self._nc, self.settings.prefix, eviction, self.instances)

    async def append(self, events: Sequence[ev.EventBase]) -> list[int]:
        """Append ``events`` (one task) through the ledger-writer; their sequences."""
        body = b'{"events":[' + b",".join(encode(e) for e in events) + b"]}"
        try:
            msg = await self._nc.request(f"{self.settings.prefix}.writer.append", body, timeout=30)
        except Exception as exc:
            raise UnavailableError("the ledger-writer did not answer; the step is retried") from exc
        reply = _append_reply.decode(msg.data)
        if reply.error is not None:
            raise_error(reply.error)
        return [r.seq for r in reply.results]

    async def erase(self, seqs: Iterable[int]) -> int:
        return await erase_seqs(self._nc.jetstream(), self.settings.stream, seqs)

    async def wait_watermark(self, durable: str, table: str, name: str) -> None:
        """Wait until the projection behind ``durable`` committed everything it was delivered.

        After an erase, no erased message can be delivered again; one delivered before
        could still be in a batch in flight, which would write its rows after a delete.
        A projection whose consumer does not exist has nothing in flight.
        """
        try:
            info = await self._nc.jetstream().consumer_info(self.settings.stream, durable)
        except nats.js.errors.NotFoundError:
            return
        target = info.delivered.stream_seq if info.delivered and info.delivered.stream_seq else 0
        deadline = time.monotonic() + PROJECTION_WAIT_S
        while True:
            seq = await self._pool.fetchval(f"SELECT seq FROM {table} WHERE name = $1", name)  # noqa: S608
            if (seq or 0) >= target:
                return
            if time.monotonic() > deadline:
                raise UnavailableError(f"the projection {durable!r} is at {seq}, not yet at {target}",
                                       code="projection_behind")
            await asyncio.sleep(0.05)

    # ---- a run ------------------------------------------------------------------------------------

    async def run(self, row: RequestRow) -> ev.DeletionReceipt:
        """Take ``row`` to its receipt (resuming where a previous run stopped)."""
        tenant, rid = row.tenant, row.request_id
        if row.receipt is not None:
            return row.receipt
        ctx = self.context(row)
        steps = await self.store.steps(self._pool, tenant, rid)
        done: list[ev.IndexReceipt] = []
        bound = {"tenant": tenant, "request": rid, "selector": row.request.selector.kind}
        with structlog.contextvars.bound_contextvars(**bound):
            for handler in self.handlers:
                index = handler.index
                step = steps.get(index)
                if step is None or not step.planned:
                    plan = await handler.plan(ctx)
                    await self.store.save_plan(self._pool, tenant, rid, index, plan, now=datetime.now(UTC))
                    step = (await self.store.steps(self._pool, tenant, rid))[index]
                    self._maybe_kill(f"{index}:planned")
                ctx.plans[index] = step.plan
                result = step.result
                if result is None:
                    if step.plan is None:
                        result = ev.IndexReceipt(index=index, status="not_applicable",
                                                 completed_at=datetime.now(UTC))
                    else:
                        started = time.perf_counter()
                        counts = await handler.apply(ctx, step.plan)
                        counts = await self.recheck(handler, ctx, counts)
                        metrics.FORGET_STEP_SECONDS.observe(time.perf_counter() - started, index=index)
                        result = ev.IndexReceipt(index=index, status="done", completed_at=datetime.now(UTC),
                                                 counts=counts)
                    await self.store.save_result(self._pool, tenant, rid, result)
                    result = (await self.store.steps(self._pool, tenant, rid))[index].result
                    assert result is not None
                    log.info("forget.index_done", index=index, status=result.status, **result.counts)
                    self._maybe_kill(f"{index}:applied")
                done.append(result)
            receipt = make_receipt(row.request, tenant=tenant, requested_at=row.requested_at,
                                   completed_at=done[-1].completed_at, indexes=done)
            seqs = await self.append([ev.ForgetCompletedEvent(
                event_id=f"forget-done-{rid}", tenant=tenant, task_id=ev.FORGET_TASK,
                producer="tombstone-fanout", occurred_at=receipt.completed_at, schema_version=1,
                payload=ev.ForgetCompleted(receipt=receipt))])
            await self._log.wait_for(max(seqs), PROJECTION_WAIT_S)
            log.info("forget.completed", digest=receipt.digest)
            metrics.FORGET_COMPLETED.inc()
        return receipt

    async def recheck(self, handler: Handler, ctx: ForgetContext,
                      counts: dict[str, int]) -> dict[str, int]:
        """Ask a ``Rechecked`` handler's index again after its apply, forgetting what it still
        finds, until it finds nothing; ``counts`` gain ``found_again`` (what the plan missed).

        Still finding something after ``RECHECK_ROUNDS`` (the tenant is being written to
        faster than it is forgotten) raises ``unavailable``: the step is not done, and the
        worker runs the request again.
        """
        if not isinstance(handler, Rechecked):
            return counts
        for _ in range(RECHECK_ROUNDS):
            left = await handler.remaining(ctx)
            if left is None:
                return counts
            found = await handler.apply(ctx, left)
            log.warning("forget.found_again", index=handler.index, **found)
            counts = {**counts, "found_again": counts.get("found_again", 0) + sum(found.values())}
        if await handler.remaining(ctx) is None:
            return counts
        raise UnavailableError(f"the {handler.index} index still holds data of the request after "
                               f"{RECHECK_ROUNDS} rounds; it is run again", code="forget_incomplete")

    def _maybe_kill(self, point: str) -> None:
        if self.kill_at == point:
            log.warning("forget.chaos_kill", point=point)
            os.kill(os.getpid(), signal.SIGKILL)


class Worker:
    """Runs every pending request, oldest first, again and again until each is complete;
    only in the instance that leads the forget log (the others' workers wait)."""

    RETRY_S = 2.0

    def __init__(self, saga: Saga, log_: ForgetLog) -> None:
        self.saga = saga
        self._log = log_
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self.errors: dict[tuple[str, str], str] = {}

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="forget-worker")

    async def stop(self) -> None:
        self._stopping = True
        await stop_task(self._task)

    def alive(self) -> bool:
        return self._task is not None and not self._task.done()

    def wake(self) -> None:
        self._log.new_requests.set()

    async def _loop(self) -> None:
        while not self._stopping:
            if not self._log.leader:
                # Requests are run by the instance that folds the forget log: one run of each.
                await asyncio.sleep(1.0)
                continue
            self._log.new_requests.clear()
            failed = False
            try:
                pending = await self.saga.store.pending(self.saga._pool)
                metrics.FORGET_SAGAS.set(len(pending), state="pending")
            except Exception as exc:  # noqa: BLE001 - PostgreSQL away: wait and look again
                log.warning("forget.pending_unreadable", error=type(exc).__name__)
                pending, failed = [], True
            for row in pending:
                if self._stopping:
                    return
                key = (row.tenant, row.request_id)
                try:
                    await self.saga.run(row)
                    self.errors.pop(key, None)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001 - retried; the next request is not held up
                    failed = True
                    detail = f"{type(exc).__name__}: {str(exc)[:300]}"
                    self.errors[key] = detail
                    log.warning("forget.run_failed", tenant=row.tenant, request=row.request_id, error=detail)
                    with contextlib.suppress(Exception):
                        await self.saga.store.note_error(self.saga._pool, row.tenant,
                                                         row.request_id, detail)
            metrics.FORGET_SAGAS.set(len(self.errors), state="failing")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._log.new_requests.wait(), timeout=self.RETRY_S if failed else 5.0)
