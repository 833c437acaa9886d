"""Resume a task: locate its checkpoint, check it, replay the ledger after it, reconcile, lease.

The protocol, in order; the first step that fails rejects the resume with a
reason naming it, and nothing is written (no pointer moves, no lease is taken):

1. locate: the checkpoint named in the request, else the task's active pointer.
   None at all: replay the task from the start of the ledger (reason
   ``no_checkpoint``, informational). A checkpoint of another task:
   ``task_mismatch``; a named id that does not exist: ``checkpoint_not_found``.
2. compatibility: a body that does not decode, or an unknown ``schema_version``:
   ``unknown_schema_version`` (no migrations exist; they would be explicit);
   ``checksum_mismatch``; ``checkpoint_expired``.
3. integrity: the ledger cursor must not be past the stream's last sequence
   (``watermark_ahead_of_ledger``) and the message at the cursor must exist on this
   task's subject (``watermark_not_found``); every artifact the checkpoint cites
   must exist and hash as cited (``artifact_missing`` / ``artifact_hash_mismatch``,
   naming the uri), except one a forget request erased (step 5); the checkpoint's goal
   hash must be the one of the ledger's ``task_created`` (``goal_changed``;
   ``goal_unverified``, informational, when the ledger no longer holds that event).
4. replay: this task's ledger messages after the cursor, up to the task's last
   message when the resume began (later appends are not waited for), with the
   projector's own ``fold_message`` (hence the same reducer and the same
   idempotency rule: an event id the projection's ``applied_events`` index has
   consumed at or before the cursor is a duplicate); next-ready is
   recomputed by ``view``, the transcript is the projection's turns up to the
   checkpoint plus the replayed ones. A plan newer than the checkpoint's is fine and reported
   (``plan_upgraded``, informational: next-ready comes from the replayed plan).
   Artifacts that entered after the checkpoint are verified too. A task with no
   events at all is ``task_not_found``; an ended task is ``task_closed``.
5. reconcile: an artifact the task cites (at the checkpoint or after it) that a forget
   request erased is gone for good, never ``artifact_missing``: it is listed in ``erased``
   (URI, ``forgotten``, the request's id). Unless the request names every such forget
   request in ``accept_erased``, the status is ``needs_accept`` (nothing leased; a version 1
   request: rejected ``artifact_forgotten``); once accepted, the resume goes on and the reply
   still lists them. A ``running`` step with an idempotency key and no receipt had a
   side effect of unknown outcome: status ``needs_reconcile``, the step is listed
   in ``reconcile`` and nothing is dispatched. Other running steps (no side
   effect, or a receipt recorded) are ``interrupted``: safe to close and retry.
6. lease: the writer's ``lease.acquire`` for the executor (a TTL of at most
   ten minutes, renewable); held by another executor: ``lease_held``. The grant
   is a ``lease_granted`` ledger event, which is folded too, so the reply's state
   and watermark include it; the reply's lease carries the grant's secret. A retry of a
   version 3 request (same ``request_id``) is not evaluated again: it gets this answer
   (``resume_once``), so a caller retrying after a timeout never takes a second grant.

A rejected resume answers its status and reasons only: never the task's state,
next-ready steps or watermark (whoever was refused learns nothing more).

Transport failures (NATS, PostgreSQL, the artifact store not answering) are not
statuses: they raise ``UnavailableError`` and the endpoint answers a retryable
error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import msgspec
import nats.errors
import nats.js.errors
import structlog
from nats.aio.client import Client

from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.contracts.api import LeaseBody, LeaseReply, LeaseRequest
from agentledger.contracts.codec import encode
from agentledger.contracts.resume import (
    ErasedArtifact,
    InterruptedStep,
    Reason,
    ReconcileItem,
    ResumeReply,
    ResumeRequest,
)
from agentledger.core import checkpoint as cp_mod
from agentledger.core.ledger_chain import GENESIS
from agentledger.core.reducer import TERMINAL_TASK
from agentledger.core.state import Turn, WorkingMemory, decode_turn, new_state, view
from agentledger.errors import AgentLedgerError, IntegrityViolationError, NotFoundError, UnavailableError
from agentledger.security.task_seal import TaskKeys, task_keys_of
from agentledger.services.checkpointer.store import CheckpointStore, Located
from agentledger.services.checkpointer.witness_check import WitnessHeads
from agentledger.services.projector.rebuild import LIVE_SCHEMA, Fold, fold_message, read_stream
from agentledger.services.projector.store import Store as ProjectionStore
from agentledger.services.tombstone_fanout.store import ForgetStore
from agentledger.stores import db
from agentledger.stores.artifacts import ArtifactStore
from agentledger.stores.ledger import chain_head_at, chain_key_of, ledger_subject

# Messages fetched one by one with direct gets before switching to an ordered consumer.
DIRECT_FIRST = 64
# Messages scanned from the start of a task's subject to find its task_created.
GOAL_SCAN = 256
# Artifacts verified at once.
VERIFY_CONCURRENCY = 8
LEASE_TIMEOUT_S = 10.0

_NATS_DOWN = (nats.errors.TimeoutError, nats.errors.NoRespondersError,
              nats.errors.ConnectionClosedError, TimeoutError)
_event_decoder = msgspec.json.Decoder(ev.AnyEvent)
_lease_reply = msgspec.json.Decoder(LeaseReply)


class _Head(msgspec.Struct):
    schema_version: int


_head_decoder = msgspec.json.Decoder(_Head)


class _Rejected(Exception):  # noqa: N818 - control flow inside this module
    def __init__(self, reason: Reason) -> None:
        super().__init__(reason.message)
        self.reason = reason


log = structlog.get_logger()


def _reject(code: str, message: str, *, uri: str | None = None,
            detail: dict[str, Any] | None = None) -> Reason:
    return Reason(code=code, message=message, severity="reject", uri=uri, detail=detail)


class Resumer:
    """Evaluates resume requests; one per checkpointer process (stateless between calls)."""

    def __init__(self, nc: Client, settings: Settings, store: CheckpointStore,
                 artifacts: ArtifactStore, clock: Callable[[], float] = time.time) -> None:
        self.nc = nc
        self.settings = settings
        self.store = store
        self.artifacts = artifacts
        self.clock = clock
        self._js = nc.jetstream()
        self._projection = ProjectionStore(LIVE_SCHEMA)
        self._witness = WitnessHeads(settings)
        # Opens the task's sealed messages (``security.task_seal``); its keyring is the one a
        # forget's eviction reaches (``Checkpointer._evict``).
        self.task_keys = task_keys_of(nc, settings)

    async def resume(self, req: ResumeRequest) -> ResumeReply:
        """Run the protocol of the module docstring for one request."""
        reasons: list[Reason] = []
        found: Located | None = None
        # Cited artifacts a forget request erased (``_verify_artifacts`` collects them).
        erased: list[ErasedArtifact] = []
        try:
            subject = ledger_subject(self.settings.prefix, req.tenant, req.task_id)
            # The task's ledger as of now: replay stops here even if the task keeps moving.
            last = await self._get_last(subject)
            found = await self._locate(req)
            cp: cp_mod.Checkpoint | None = None
            if found is None:
                reasons.append(Reason(code="no_checkpoint", severity="info",
                                      message="the task has no checkpoint; replaying it from the "
                                              "start of the ledger"))
            else:
                cp = self._compatible(req, found)
                await self._integrity(req, cp, last, erased)
                # The ledger's goal does not depend on the replay: check it before paying for one.
                unverified = await self._same_goal(req, cp)
                if unverified is not None:
                    reasons.append(unverified)
            cursor = cp.ledger_cursor if cp is not None else 0
            seeded: dict[str, int] = {}
            fold = self._start(req, found, cp, seeded)
            checkpoint_turns = fold.states[(req.tenant, req.task_id)].turns
            fold = await self._replay_checked(req, found, cp, fold, seeded=seeded, start=cursor + 1,
                                              upto=last)
            if fold.key_of is not None:  # a tail cut off is a valid chain: the witness sees it
                await self._witness.check(self.nc, req.tenant, req.task_id,
                                          fold.heads.get((req.tenant, req.task_id), GENESIS))
            state = fold.states[(req.tenant, req.task_id)]
            if state.status == "new":
                raise _Rejected(_reject("task_not_found",
                                        f"the ledger has no task {req.task_id!r} of tenant {req.tenant!r}"))
            if cp is not None and state.plan_version > cp.plan_version:
                reasons.append(Reason(
                    code="plan_upgraded", severity="info",
                    message=f"the plan moved from v{cp.plan_version} (checkpoint) to "
                            f"v{state.plan_version} (ledger); next-ready follows v{state.plan_version}",
                    detail={"from": cp.plan_version, "to": state.plan_version}))
            known = {a.uri for a in cp.artifacts} if cp is not None else set()
            await self._verify_artifacts(req.tenant,
                                         [a for a in state.artifacts.values() if a.uri not in known], erased)
            if state.status in TERMINAL_TASK:
                raise _Rejected(_reject("task_closed", f"the task is {state.status}; nothing to resume",
                                        detail={"task_status": state.status}))
            if erased:
                asked = self._erased(req, erased, reasons)
                if asked is not None:
                    return asked
            lease = await self._acquire(req)
            if lease.error is not None or lease.lease is None:
                message = lease.error.message if lease.error else "no lease was granted"
                raise _Rejected(_reject(lease.error.code if lease.error else "lease_held", message,
                                        detail={"executor": req.executor}))
            # The grant is a ledger event of this task (its sequence is the token): fold it,
            # and whatever was appended since the replay began, so the state includes it.
            fold = await self._replay_checked(req, found, cp, fold, seeded=seeded, start=last + 1,
                                              upto=lease.lease.token)
            transcript = await self._transcript(req, fold, checkpoint_turns)
            return self._finish(found, fold, transcript, reasons, lease.lease, erased=erased)
        except _Rejected as rejected:
            reasons.append(rejected.reason)
            return ResumeReply(ok=True, status="rejected", reasons=reasons)

    # ---- 1. locate ------------------------------------------------------------------------

    async def _locate(self, req: ResumeRequest) -> Located | None:
        try:
            if req.checkpoint_id is None:
                return await self.store.locate(req.tenant, req.task_id)
            found = await self.store.locate_id(req.checkpoint_id)
        except IntegrityViolationError as exc:  # the row was edited, moved or forged
            log.error("checkpointer.integrity_violation", tenant=req.tenant, task=req.task_id)
            raise _Rejected(_reject("integrity_violation", exc.message)) from exc
        if found is None:
            raise _Rejected(_reject("checkpoint_not_found", f"no checkpoint {req.checkpoint_id}",
                                    detail={"checkpoint_id": req.checkpoint_id}))
        return found

    # ---- 2. compatibility -------------------------------------------------------------------

    def _compatible(self, req: ResumeRequest, found: Located) -> cp_mod.Checkpoint:
        if (found.tenant, found.task_id) != (req.tenant, req.task_id):
            raise _Rejected(_reject(
                "task_mismatch", f"checkpoint {found.id} belongs to {found.tenant}/{found.task_id}, "
                                 f"not {req.tenant}/{req.task_id}",
                detail={"tenant": found.tenant, "task_id": found.task_id}))
        try:
            head = _head_decoder.decode(found.body)
        except msgspec.MsgspecError as exc:
            raise _Rejected(_reject("unknown_schema_version",
                                    f"checkpoint {found.id} is not a checkpoint of any known schema: "
                                    f"{exc}")) from None
        if head.schema_version != cp_mod.CHECKPOINT_SCHEMA_VERSION:
            raise _Rejected(_reject(
                "unknown_schema_version",
                f"checkpoint {found.id} has schema version {head.schema_version}; this checkpointer "
                f"reads [{cp_mod.CHECKPOINT_SCHEMA_VERSION}] and no migration is defined",
                detail={"schema_version": head.schema_version,
                        "supported": [cp_mod.CHECKPOINT_SCHEMA_VERSION]}))
        try:
            cp = cp_mod.decode(found.body)
        except msgspec.MsgspecError as exc:
            raise _Rejected(_reject("unknown_schema_version",
                                    f"checkpoint {found.id} does not decode as schema version "
                                    f"{cp_mod.CHECKPOINT_SCHEMA_VERSION}: {exc}")) from None
        if not cp_mod.checksum_ok(cp):
            raise _Rejected(_reject("checksum_mismatch",
                                    f"checkpoint {found.id} does not match its checksum; it was altered "
                                    "or damaged"))
        if (cp.tenant, cp.task_id) != (req.tenant, req.task_id):
            raise _Rejected(_reject(
                "task_mismatch", f"checkpoint {found.id} snapshots {cp.tenant}/{cp.task_id}, "
                                 f"not {req.tenant}/{req.task_id}",
                detail={"tenant": cp.tenant, "task_id": cp.task_id}))
        now = self.clock()
        if cp.expires_at <= now:
            raise _Rejected(_reject(
                "checkpoint_expired", f"checkpoint {found.id} expired {now - cp.expires_at:.0f}s ago; "
                                      "save a fresh one (checkpoint.save) and resume again",
                detail={"expires_at": cp.expires_at}))
        return cp

    @staticmethod
    def _restore(found: Located, cp: cp_mod.Checkpoint) -> WorkingMemory:
        try:
            return cp_mod.restore(cp, found.events)
        except msgspec.MsgspecError as exc:
            raise _Rejected(_reject("unknown_schema_version",
                                    f"the state inside checkpoint {found.id} does not decode: {exc}")) \
                from None

    # ---- 3. integrity --------------------------------------------------------------------

    async def _integrity(self, req: ResumeRequest, cp: cp_mod.Checkpoint, task_last: int,
                         erased: list[ErasedArtifact]) -> None:
        """``task_last``: sequence of the task's last ledger message (0: none)."""
        cursor = cp.ledger_cursor
        if cursor > task_last:
            stream_last = await self._last_seq()
            if cursor > stream_last:
                raise _Rejected(_reject(
                    "watermark_ahead_of_ledger",
                    f"the checkpoint covers the ledger up to seq {cursor}, but the ledger ends at "
                    f"{stream_last}", detail={"ledger_cursor": cursor, "ledger_last_seq": stream_last}))
        subject = ledger_subject(self.settings.prefix, req.tenant, req.task_id)
        msg = await self._get(cursor) if 1 <= cursor <= task_last else None
        if msg is None or msg.subject != subject:
            where = "is not in the ledger" if msg is None else f"is on {msg.subject}"
            raise _Rejected(_reject(
                "watermark_not_found",
                f"the checkpoint's cursor seq {cursor} {where}; expected an event of this task",
                detail={"ledger_cursor": cursor}))
        await self._verify_artifacts(req.tenant, cp.artifacts, erased)

    async def _verify_artifacts(self, tenant: str, refs: list[ev.ArtifactRef],
                                erased: list[ErasedArtifact]) -> None:
        """Every ref must be stored intact, and be ``tenant``'s: another tenant's is missing.
        A missing one a forget request erased goes to ``erased`` instead (step 5)."""
        if not refs:
            return
        gate = asyncio.Semaphore(VERIFY_CONCURRENCY)

        async def one(ref: ev.ArtifactRef) -> Reason | None:
            async with gate:
                try:
                    await self.artifacts.verify(ref, tenant=tenant)
                except UnavailableError:
                    raise
                except AgentLedgerError as exc:
                    code = exc.code if exc.code != "not_found" else "artifact_missing"
                    return _reject(code, exc.message, uri=ref.uri)
            return None

        failures = [r for r in await asyncio.gather(*(one(ref) for ref in refs)) if r is not None]
        missing = [r.uri for r in failures if r.code == "artifact_missing" and r.uri is not None]
        if missing:
            try:
                forgotten = await ForgetStore().erased_artifacts(self.store.pool, tenant, missing)
            except db.DATABASE_ERRORS as exc:
                raise UnavailableError("the forget requests are not available") from exc
            erased.extend(ErasedArtifact(uri=uri, reason="forgotten", request_id=request)
                          for uri, request in sorted(forgotten.items()))
            failures = [r for r in failures if r.uri not in forgotten]
        if failures:
            first, *rest = failures
            # One reason per bad artifact: the first one raises, the others ride along.
            raise _Rejected(msgspec.structs.replace(
                first, detail={"also": [msgspec.to_builtins(r) for r in rest]} if rest else None))

    # ---- 4. replay ----------------------------------------------------------------------------

    def _start(self, req: ResumeRequest, found: Located | None, cp: cp_mod.Checkpoint | None,
               seeded: dict[str, int]) -> Fold:
        """A fold of the task at the checkpoint (or empty), knowing ``seeded`` as consumed."""
        key = (req.tenant, req.task_id)
        # The chain is checked as the task is replayed: a broken link refuses the resume.
        fold = Fold(chain_key_of(self.settings), strict=True,
                    task_keys=TaskKeys(lambda: self.task_keys.keyring))
        applied, _ = fold.task(key)
        applied.update(seeded)
        fold.states[key] = (self._restore(found, cp) if found is not None and cp is not None
                            else new_state(req.tenant, req.task_id))
        return fold

    async def _replay_checked(self, req: ResumeRequest, found: Located | None,
                              cp: cp_mod.Checkpoint | None, fold: Fold, *, seeded: dict[str, int],
                              start: int, upto: int) -> Fold:
        """``_replay`` of [start, upto], then the idempotency rule for ids consumed before the
        checkpoint: the live projection's index says which replayed ids it consumed at or
        before the cursor. Almost never any (a retry after the dedupe window); then the tail
        is folded again from the checkpoint with those ids known, so they are duplicates."""
        applied, _ = fold.task((req.tenant, req.task_id))
        known = len(applied)
        await self._replay(req, fold, start, upto)
        if cp is None:
            return fold
        replayed = list(applied)[known:]
        try:
            # A rebuild commits its index with its watermark: one at the cursor holds every id up to it.
            covered = await self._projection.watermark(self.store.pool)
            earlier = await self._projection.task_first_seqs(self.store.pool, req.tenant, req.task_id,
                                                             replayed, cp.ledger_cursor)
        except db.DATABASE_ERRORS as exc:
            raise UnavailableError("the projection's event index is not available") from exc
        if covered is None or covered < cp.ledger_cursor:
            raise UnavailableError(f"the projection does not reach the checkpoint's cursor "
                                   f"{cp.ledger_cursor} yet (it is being rebuilt); retry")
        if not earlier:
            return fold
        seeded.update(earlier)
        fold = self._start(req, found, cp, seeded)
        await self._replay(req, fold, cp.ledger_cursor + 1, upto)
        return fold

    async def _replay(self, req: ResumeRequest, fold: Fold, start: int, upto: int) -> None:
        """Fold this task's messages in [start, upto] into ``fold`` (``fold.events`` counts them)."""
        key = (req.tenant, req.task_id)
        subject = ledger_subject(self.settings.prefix, req.tenant, req.task_id)
        if fold.key_of is not None and start > 1 and key not in fold.heads:
            # The chain goes on from the checkpoint's cursor: the head its message makes.
            fold.heads[key] = await chain_head_at(self.nc, self.settings, fold.key_of, tenant=key[0],
                                                  task_id=key[1], seq=start - 1)
        count = 0
        seq = start
        while seq <= upto:
            msg = await self._get(seq, subject)
            if msg is None or msg.seq is None or msg.seq > upto:
                # A direct get may be answered by a replica that has not stored the message yet
                # (the lease grant just appended, on a cluster): before ending short of ``upto``,
                # ask the stream's leader.
                msg = await self._get(seq, subject, leader=True)
            if msg is None or msg.seq is None or msg.seq > upto:
                break
            if count >= DIRECT_FIRST:
                # A long tail: stream the rest with an ordered consumer from this message on.
                fold.events += count
                try:
                    await read_stream(self.nc, self.settings, upto, fold=fold, subject=subject,
                                      start_seq=msg.seq)
                except nats.js.errors.NotFoundError as exc:
                    raise UnavailableError("the ledger stream disappeared during replay") from exc
                return
            assert fold.task_keys is not None
            await fold.task_keys.load([(key[0], key[1], msg.headers)])
            fold_message(fold, key, msg.data or b"", msg.seq, msg.headers, subject=msg.subject)
            count += 1
            seq = msg.seq + 1  # the loop ends once ``upto`` (the task's last message) is folded
        fold.events += count

    async def _transcript(self, req: ResumeRequest, fold: Fold, checkpoint_turns: int) -> list[Turn]:
        """The task's turns: the projection's up to the checkpoint's last, then the replayed ones
        (the checkpoint keeps only the count, see ``core.checkpoint``)."""
        replayed: list[Turn] = fold.changes[(req.tenant, req.task_id)].turns
        if not checkpoint_turns:
            return replayed
        try:
            rows = await self._projection.turns_upto(self.store.pool, req.tenant, req.task_id,
                                                     checkpoint_turns, self.store.keys.mac_key_of)
        except db.DATABASE_ERRORS as exc:
            raise UnavailableError("the projection's transcript is not available") from exc
        if len(rows) != checkpoint_turns:
            raise UnavailableError(f"the projection holds {len(rows)} of the {checkpoint_turns} turns "
                                   "the checkpoint counts; it is being rebuilt, retry")
        return [*map(decode_turn, rows), *replayed]

    async def _same_goal(self, req: ResumeRequest, cp: cp_mod.Checkpoint) -> Reason | None:
        """The checkpoint's goal hash must be the one the ledger's task_created pinned."""
        subject = ledger_subject(self.settings.prefix, req.tenant, req.task_id)
        seq, ledger_goal = 1, None
        for _ in range(GOAL_SCAN):
            msg = await self._get(seq, subject)
            if msg is None or msg.seq is None:
                break
            try:
                body = await self.task_keys.open_one(req.tenant, req.task_id, msg.headers, msg.data or b"")
                event = _event_decoder.decode(body) if body is not None else None
            except (msgspec.MsgspecError, AgentLedgerError):
                event = None
            if isinstance(event, ev.TaskCreatedEvent):
                ledger_goal = event.payload.goal.goal_hash
                break
            seq = msg.seq + 1
        if ledger_goal is None:
            # The head of the task's ledger is gone (deleted, or beyond the scan): the goal cannot
            # be checked; the checkpoint is all that is left of it.
            return Reason(code="goal_unverified", severity="info",
                          message="the ledger no longer holds the task's task_created event; the "
                                  "checkpoint's goal hash could not be checked against it",
                          detail={"checkpoint_goal_hash": cp.goal_hash})
        if ledger_goal != cp.goal_hash:
            raise _Rejected(_reject(
                "goal_changed", f"the checkpoint's goal hash {cp.goal_hash} is not the ledger's "
                                f"task_created goal hash {ledger_goal}",
                detail={"checkpoint_goal_hash": cp.goal_hash, "ledger_goal_hash": ledger_goal}))
        return None

    # ---- 5. reconcile and 6. lease ----------------------------------------------------------------

    @staticmethod
    def _erased(req: ResumeRequest, erased: list[ErasedArtifact], reasons: list[Reason]) -> ResumeReply | None:
        """The answer while ``erased`` holds an erasure the request did not accept (None: go on,
        with an ``artifacts_erased`` note in ``reasons``)."""
        listed = [msgspec.to_builtins(e) for e in erased]
        pending = sorted({e.request_id for e in erased} - set(req.accept_erased))
        uris = ", ".join(e.uri for e in erased)
        if not pending:
            reasons.append(Reason(code="artifacts_erased", severity="info",
                                  message=f"resuming without {len(erased)} artifact(s) erased by the accepted "
                                          f"forget request(s): {uris}", detail={"erased": listed}))
            return None
        if req.schema_version < 2:
            raise _Rejected(_reject(
                "artifact_forgotten", f"{len(erased)} artifact(s) the task cites were erased by forget "
                                      f"request(s) {pending}: {uris}; resume with schema_version 2 and "
                                      "accept_erased to continue without them",
                uri=erased[0].uri, detail={"erased": listed}))
        reasons.append(Reason(code="artifacts_erased", severity="reconcile",
                              message=f"{len(erased)} artifact(s) the task cites were erased by forget "
                                      f"request(s) {pending}: {uris}; they cannot come back. Resume again "
                                      "with those request ids in accept_erased to continue without them",
                              detail={"request_ids": pending}))
        return ResumeReply(ok=True, status="needs_accept", reasons=reasons, erased=erased)

    def _finish(self, found: Located | None, fold: Fold, transcript: list[Turn],
                reasons: list[Reason], lease: LeaseBody, *, erased: list[ErasedArtifact]) -> ResumeReply:
        (state,) = fold.states.values()
        reconcile: list[ReconcileItem] = []
        interrupted: list[InterruptedStep] = []
        for step in state.steps:
            st = state.step_states.get(step.id)
            if st is None or st.status != "running":
                continue
            receipt = state.side_effects.get(st.idempotency_key) if st.idempotency_key else None
            if st.idempotency_key is not None and receipt is None:
                reconcile.append(ReconcileItem(step.id, st.idempotency_key))
                reasons.append(Reason(
                    code="side_effect_unconfirmed", severity="reconcile",
                    message=f"step {step.id!r} was running with idempotency key "
                            f"{st.idempotency_key!r} and no receipt: query the external system by "
                            "that key and record a side_effect_recorded receipt before anything else",
                    detail={"step_id": step.id, "idempotency_key": st.idempotency_key}))
            else:
                interrupted.append(InterruptedStep(step.id, st.attempt, st.idempotency_key,
                                                   receipt.outcome if receipt else None))
        state_view = view(state, transcript)
        status = "needs_reconcile" if reconcile else "resumable"
        dispatch = [] if reconcile else [*(s.step_id for s in interrupted), *state_view["next_ready"]]
        return ResumeReply(ok=True, status=status, reasons=reasons,
                           next_ready=state_view["next_ready"], dispatch=dispatch,
                           reconcile=reconcile, interrupted=interrupted, state=state_view,
                           lease=lease, checkpoint_id=found.id if found else None,
                           checkpoint_seq=found.seq if found else None, replayed_events=fold.events,
                           watermark=state.watermark, erased=erased)

    async def _acquire(self, req: ResumeRequest) -> LeaseReply:
        """The writer's lease.acquire; ``lease_held`` comes back as an error body."""
        body = encode(LeaseRequest(tenant=req.tenant, task_id=req.task_id, holder=req.executor,
                                   ttl_s=req.lease_ttl_s))
        try:
            msg = await self.nc.request(f"{self.settings.prefix}.lease.acquire", body,
                                        timeout=LEASE_TIMEOUT_S)
        except _NATS_DOWN as exc:
            raise UnavailableError("the ledger-writer did not answer the lease request") from exc
        reply = _lease_reply.decode(msg.data)
        if reply.error is not None and reply.error.code != "lease_held":
            raise AgentLedgerError(reply.error.message, code=reply.error.code,
                                   retryable=reply.error.retryable, path=reply.error.path)
        return reply

    # ---- helpers --------------------------------------------------------------------------

    async def _last_seq(self) -> int:
        try:
            info = await self._js.stream_info(self.settings.stream)
        except nats.js.errors.NotFoundError:
            return 0
        except _NATS_DOWN as exc:
            raise UnavailableError("JetStream did not answer") from exc
        return int(info.state.last_seq) if info.state.messages else 0

    async def _get_last(self, subject: str) -> int:
        """Sequence of the last message on ``subject`` (0: none, or no stream).

        Asked of the stream's leader: on a cluster a direct get may be answered by a replica
        that has not stored the task's latest events yet (even its first: ``task_not_found``
        for a task just created)."""
        try:
            msg = await self._js.get_msg(self.settings.stream, subject=subject)
        except (nats.js.errors.NotFoundError, NotFoundError):
            return 0
        except _NATS_DOWN as exc:
            raise UnavailableError("JetStream did not answer a direct get") from exc
        return int(msg.seq or 0)

    async def _get(self, seq: int, next_on: str | None = None, *, leader: bool = False) -> Any:
        """The message at ``seq`` (or the first one on ``next_on`` at or after it), or None.

        A direct get (any replica answers) unless ``leader``: then the stream's leader, which
        holds everything acknowledged."""
        try:
            if next_on is None:
                return await self._js.get_msg(self.settings.stream, seq=seq, direct=not leader)
            return await self._js.get_msg(self.settings.stream, seq=seq, subject=next_on, next=True,
                                          direct=not leader)
        except nats.js.errors.NotFoundError:
            return None
        except NotFoundError:
            return None
        except _NATS_DOWN as exc:
            raise UnavailableError("JetStream did not answer a direct get") from exc
