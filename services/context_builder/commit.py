"""``context.commit`` (activate a staged checkpoint by compare-and-swap) and ``context.clear``.

Commit runs in ONE PostgreSQL transaction: the conversation row is locked ``FOR UPDATE``
(two commits of one conversation run one after the other), the task's core row in the
Working Memory projection is read ``FOR SHARE`` (the projector cannot apply a new turn
or a clear between the check and the pointer's move), the projection's epoch is
followed, and ``core.context.cas_check`` decides on the values read there. Then either
the pointer moves (the checkpoint ``active``, the previous one ``superseded``) or the
checkpoint is marked ``refused`` with the reason; either way the transaction commits
that decision, so a second commit of the same generation answers the same.

Clear appends ``history_cleared`` through the writer for the caller (checked as the
caller's own append: ``agentledger.security.on_behalf``), waits until
the projection applied it, and moves the conversation to the new epoch and lineage: the
old lineage's active checkpoint is superseded and its staged ones can never be activated
(a commit refuses them ``stale_epoch``).

The lineage a commit checks against includes the conversation's forget count
(``context_conversations.forgets``): a forget request that reached the conversation's
checkpoints moved it on, so a checkpoint staged before is refused ``other_lineage``; a
forgotten checkpoint itself is refused ``forgotten`` without its body being read.
"""

from __future__ import annotations

from datetime import UTC, datetime

import blake3
import msgspec
import structlog
from nats.aio.client import Client

from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.contracts.context_api import ClearReply, ClearRequest, CommitReply, CommitRequest
from agentledger.core.context import cas_check, lineage_id, public_key_from_bytes
from agentledger.errors import ConflictError, ContractError, NotFoundError
from agentledger.security.identity import Caller
from agentledger.services.context_builder.build import Builder
from agentledger.services.context_builder.keys import SigningKey
from agentledger.services.context_builder.store import FORGOTTEN, ContextStore

log = structlog.get_logger()


class Committer:
    """Answers ``context.commit`` and ``context.clear``."""

    def __init__(self, settings: Settings, nc: Client, store: ContextStore, builder: Builder,
                 key: SigningKey) -> None:
        self.settings = settings
        self.store = store
        self.builder = builder
        self.sources = builder.sources
        self._public = public_key_from_bytes(key.public)

    async def commit(self, caller: Caller, request: CommitRequest) -> CommitReply:
        tenant = request.tenant
        row, _ = await self.builder.stored(tenant, request.generation_id, caller)
        if row.staged_checkpoint_id is None:
            return CommitReply(ok=True, activated=False, reason="nothing_staged")
        # The answer must be in the projection before the check can see it.
        await self.sources.caught_up(tenant, row.task_id)
        cid = row.staged_checkpoint_id
        async with self.store.pool.acquire() as conn, conn.transaction():
            conv = await self.store.lock_conversation(conn, tenant, row.task_id)
            head = await self.store.head(conn, tenant, row.task_id)
            if conv is None or head is None:
                raise NotFoundError(f"no conversation of task {row.task_id!r}", path="$.generation_id")
            conv = await self.store.sync_locked(
                conn, tenant, row.task_id, epoch=head.epoch, lineage_base=head.lineage_base,
                lineage=lineage_id(tenant, row.task_id, head.epoch, head.lineage_base))
            lineage = lineage_id(tenant, row.task_id, head.epoch, head.lineage_base, conv.forgets)
            status = await self.store.checkpoint_status(conn, tenant, cid)
            if status is not None and status[0] == FORGOTTEN:
                return CommitReply(ok=True, activated=False, reason=FORGOTTEN)
            cp = await self.store.checkpoint(conn, tenant, cid)
            if cp is None:
                raise NotFoundError(f"checkpoint {cid} of generation {row.generation_id} is gone",
                                    path="$.generation_id")
            if cp.status == "active" and conv.active_checkpoint_id == cid:
                return CommitReply(ok=True, activated=True, checkpoint=cp)
            if cp.status != "staged":  # refused or superseded before: that decision stands
                return CommitReply(ok=True, activated=False, checkpoint=cp, reason=cp.reason or cp.status)
            active_end = conv.coverage_end if conv.active_checkpoint_id is not None else None
            reason = cas_check(cp, expected_checkpoint_id=cid, input_ordinal=row.input_ordinal,
                               answer_ordinal=request.answer_ordinal, transcript_revision=head.turns,
                               epoch=head.epoch, lineage=lineage, lineage_base=head.lineage_base,
                               active_coverage_end=active_end, public_key=self._public)
            now = datetime.now(UTC)
            if reason is None:
                if conv.active_checkpoint_id is not None:
                    await self.store.set_status(conn, tenant, conv.active_checkpoint_id, "superseded",
                                                f"superseded by {cid}")
                await self.store.set_status(conn, tenant, cid, "active")
                await self.store.move_pointer(conn, conv, cid, cp.coverage.through)
            else:
                await self.store.set_status(conn, tenant, cid, "refused", reason)
        status = "active" if reason is None else "refused"
        log.info("context.commit", generation=row.generation_id, checkpoint=cid, status=status,
                 reason=reason or "", at=now.isoformat())
        cp = msgspec.structs.replace(cp, status=status, reason=reason or "")
        return CommitReply(ok=True, activated=reason is None, checkpoint=cp, reason=reason or "")

    async def clear(self, caller: Caller, request: ClearRequest) -> ClearReply:
        tenant, task = request.tenant, request.task_id
        state = await self.sources.caught_up(tenant, task)
        through = state.turns if request.through_ordinal is None else request.through_ordinal
        if through > state.turns:
            raise ContractError(f"the task has {state.turns} turns; cannot clear through turn {through}",
                                code="ordinal_mismatch", path="$.through_ordinal")
        if through < state.lineage_base:
            raise ContractError(f"history is already cleared through turn {state.lineage_base}",
                                code="lineage_regression", path="$.through_ordinal")
        if through == state.lineage_base:
            # Nothing after the lineage base to clear (a retried clear lands here): no new epoch.
            conv = await self.store.conversation(tenant, task, epoch=state.epoch, lineage_base=state.lineage_base,
                                                 lineage=lineage_id(tenant, task, state.epoch, state.lineage_base))
            forgets = conv.forgets if conv.epoch == state.epoch else 0
            lineage = lineage_id(tenant, task, state.epoch, state.lineage_base, forgets)
            return ClearReply(ok=True, epoch=state.epoch, lineage=lineage)
        producer = caller.agent or "context-builder"
        # One id per (epoch, through): a retried clear is a duplicate, not a second epoch.
        eid = "clear-" + blake3.blake3(f"{tenant}/{task}/{state.epoch}/{through}".encode()).hexdigest()[:32]
        event = ev.HistoryClearedEvent(
            event_id=eid, tenant=tenant, task_id=task, producer=producer, occurred_at=datetime.now(UTC),
            schema_version=1, fencing_token=request.fencing_token,
            payload=ev.HistoryCleared(through_ordinal=through, reason=request.reason))
        seq = await self.sources.append(event, caller=caller, lease_secret=request.lease_secret)
        after = await self.sources.caught_up(tenant, task, seq)
        if after.epoch <= state.epoch and after.lineage_base != through:
            raise ConflictError("the clear was refused by the Working Memory reducer (see wm.get rejections)",
                                code="clear_refused", current_seq=seq)
        lineage = lineage_id(tenant, task, after.epoch, after.lineage_base)
        await self.store.conversation(tenant, task, epoch=after.epoch, lineage=lineage,
                                      lineage_base=after.lineage_base)
        log.info("context.cleared", through=through, epoch=after.epoch, seq=seq)
        return ClearReply(ok=True, epoch=after.epoch, lineage=lineage, seq=seq)
