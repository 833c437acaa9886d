"""The ledger-writer: the only process that appends to the ledger stream.

Agents call the NATS micro endpoint ``<prefix>.writer.append`` with one event or
an atomic batch of one task. The writer validates everything it can without
task state (shape, tokens, sizes, plan DAG, goal hash), replaces secrets in
every free-text field by a redaction marker (``core.detect.redact_event``; the
stored event and its digest never hold the secret), seals personal values,
and answers only after JetStream has durably stored the events: ``{seq,
duplicate}`` per event, or one typed error and nothing stored.

The common append (no expectation, no lease token, nothing to seal, no
artifact to check, a task without a live lease) is handed to the group
committer inside the handler, without an await, so its place in its task's
order is its arrival; the committer sends the reply as soon as the commit
settles, so the replies of appends settled together go out in one socket
write. Any other append finishes in a task of its own, behind the earlier
ones of its task that still wait to be handed over (its lane), so per-task
order stays arrival order. It holds the task's lease
lock from the lease check through the durable commit only when that matters:
the task has, or may have, a live lease, or the append carries an
expectation; a lease grant waits for the unlocked appends already accepted.

Task ids starting with ``_`` are the runtime's: a tenant may not append to one
(``reserved_task``); memory events go only to a tenant's ``_memory`` task and
document events only to its ``_documents`` task, from a service (``reserved_kind``);
see ``core.validate.check_reserved``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any, Literal

import nats.js.errors
import structlog
from nats.micro.request import Request

from agentledger.config import Settings
from agentledger.contracts.api import AppendReply, AppendResult, LeaseBody, LeaseReply
from agentledger.contracts.codec import (
    check_request,
    decode_append_request,
    decode_event,
    decode_lease_request,
    encode,
    error_body,
)
from agentledger.contracts.events import RESERVED_TASK_PREFIX, EventBase, kind_of
from agentledger.core.ledger_chain import Head
from agentledger.core.validate import check_batch, check_reserved, has_personal_content
from agentledger.erasure import evict
from agentledger.errors import (
    AgentLedgerError,
    ConflictError,
    ContractError,
    RateLimitedError,
    UnavailableError,
)
from agentledger.security import task_seal
from agentledger.security.identity import Caller, PermissionDeniedError
from agentledger.security.integrity_keys import keys_of
from agentledger.security.on_behalf import acting_for
from agentledger.security.sealing import Keyring, kek_of, marker_key_of, seal_event
from agentledger.security.task_seal import TaskKey
from agentledger.services.ledger_writer import artifact_endpoints
from agentledger.services.ledger_writer.grants import LedgerGrants
from agentledger.services.ledger_writer.group_commit import GroupCommitter, Unit, make_unit
from agentledger.services.ledger_writer.quotas import Quotas
from agentledger.shell import metrics
from agentledger.shell.endpoints import RawEndpoint, failed
from agentledger.shell.parts import Parts, Warming
from agentledger.shell.service import Shape, Shell
from agentledger.shell.turns import Turns, parse_weights, turn_key
from agentledger.stores import artifacts, witness
from agentledger.stores.fences import Fences
from agentledger.stores.leases import Lease, LeaseError, LeaseTable
from agentledger.stores.ledger import ensure_stream, ledger_subject, subject_key
from agentledger.stores.numbering import Numbering

log = structlog.get_logger()

SERVICE_NAME = "agentledger-ledger-writer"
# How long a JetStream publish waits for its ack before the append answers `unavailable` (the
# client retries with the same ids: a stored copy then answers duplicate). A publish sent while a
# clustered stream elects a new leader is never acked; 2 s, not nats-py's 5 s, lets the retry
# reach the new leader about 3 s sooner (docs/scaling.md). Acks take milliseconds otherwise.
ACK_TIMEOUT_S = 2.0
# How long the writer asks whether the ledger stream still exists when a publish found no
# responder. A clustered stream between leaders answers publishes so too, and its stream info
# goes unanswered until the election ends: with nats-py's 5 s, taken in turn by every waiting
# publish, appends stayed down 5 to 10 s after the stream had a leader again.
STREAM_CHECK_TIMEOUT_S = 1.0

Key = tuple[str, str]
# A fenced append whose expectation other writers' appends keep overtaking is checked this often.
FENCE_ATTEMPTS = 8
# Appends of one tenant that may wait for their turn (``shell.turns``) before more are refused.
TURN_LIMIT = 10_000


def append_subject(prefix: str) -> str:
    return f"{prefix}.writer.append"


def error_reply(exc: AgentLedgerError) -> bytes:
    metrics.refused(exc)
    return encode(AppendReply(ok=False, error=error_body(exc)))


def lease_subject(prefix: str, action: str) -> str:
    return f"{prefix}.lease.{action}"


class LedgerWriter(Shell):
    """Validates, seals and group-commits appends; see the module docstring."""

    shape = Shape(name="ledger-writer", micro=SERVICE_NAME, log_name="writer",
                  description="Validated, durable, deduplicated appends to the agentledger ledger")

    _committer: GroupCommitter | None = None
    _keyring: Keyring | None = None
    _artifacts: artifacts.ArtifactStore | None = None
    _leases: LeaseTable | None = None
    _warming: Warming | None = None
    # ``core.detect.redact_event`` once the detectors are loaded (``_load_detectors``).
    _redact_event: Callable[..., tuple[EventBase, int]] | None = None

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._handlers: set[asyncio.Task[None]] = set()
        self._artifact_endpoints: list[RawEndpoint] = []
        self._quotas = Quotas(settings)
        self._stream_lock = asyncio.Lock()
        # Per task, the newest append that finishes in a task and is not yet handed to the
        # committer: later appends of the task wait for it (resolved once it is handed over).
        self._lanes: dict[Key, asyncio.Future[None]] = {}
        # Per task, appends handed straight to the committer (no lane) whose commit has not
        # settled: an append that takes the lane later waits for them too, since one refused
        # because the task moved is checked again and committed in the place it was taken.
        self._direct: dict[Key, set[asyncio.Future[None]]] = {}
        self._fences = Fences()
        # Appends wait here, per tenant, and are taken in turns (deficit round robin).
        self._weights = parse_weights(settings.tenant_weights)
        self._turns = Turns(self._on_append, size=lambda req: len(req.data), limit=TURN_LIMIT,
                            weight=self._weight)

    async def open(self, parts: Parts) -> None:
        s = self.settings
        nc = self._nc
        assert nc is not None and self._tenants is not None
        if s.redact_secrets:
            # The detectors (their modules too) load in the background from here, beside the
            # round trips below, never on the first append: every append waits for them.
            parts.warm("secret detectors", self._load_detectors, now=True)
        # Created after the high-water mark kept outside the stream, which then stays ahead of it.
        await ensure_stream(s, nc)
        await parts.live_part(Numbering(nc, s))
        # Tasks whose ledger is behind its witness: never appended to (``stores.fences``).
        await self._fences.load(nc, s)
        parts.task(self._turns.run(), name="writer-turns", vital=True)
        marker_key_of(s)  # made with the ring on first start: task keys are wrapped under it
        self._keyring = Keyring(nc, s.keys_bucket, kek_of(s), max_bytes=s.max_keys_bytes,
                                cache_bytes=s.key_cache_bytes, replicas=s.stream_replicas)
        self._artifacts = await artifacts.open(nc, s)
        # Per-tenant quotas and the ledger's erasure reserve (quotas.py): the committer asks
        # them before it queues any unit, lease grants included; stopped after the last commits.
        parts.on_stop(self._quotas.stop)
        await self._quotas.start(nc)
        committer = self._committer = GroupCommitter(
            nc, s.stream, max_batch=s.max_batch_events, max_inflight=s.max_inflight_batches,
            timeout=ACK_TIMEOUT_S, on_no_stream=self._stream_missing, admission=self._quotas,
            keys=keys_of(s) if s.integrity else None)
        committer.high_seq = (await nc.jetstream().stream_info(s.stream)).state.last_seq
        parts.task(committer.run(), name="writer-flusher", vital=True)
        if s.integrity:
            # The heads it committed reach the witness regularly and once more after the last
            # commits (this is on the stack before ``close``, so it runs after it).
            parts.on_stop(self._publish_witness)
            parts.task(self._witness_loop(), name="writer-witness")
        parts.on_stop(committer.close)  # the last commits, and their replies
        # Grants are ledger events (their sequence is the fencing token): see leases.py.
        self._leases = await parts.part(LeaseTable(nc, s.leases_bucket, LedgerGrants(nc, s, committer),
                                                   max_per_tenant=s.max_leases_per_tenant,
                                                   max_bytes=s.max_leases_bytes, replicas=s.stream_replicas))
        # Released after the micro service stopped: the appends in flight finish.
        parts.on_stop(self._drain)
        self._artifact_endpoints = artifact_endpoints.endpoints(nc, s, self._artifacts, self._tenants,
                                                                tasks=self._handlers, quotas=self._quotas)
        self._warming = parts.warming

    def _load_detectors(self) -> Callable[..., tuple[EventBase, int]]:
        """Import and load the secret detectors, once: in the warm-up's worker thread (their
        modules alone were a sixth of the writer's imports before its endpoints answered), or
        by an append that comes before it (``_on_append`` waits for the warm-up; a test's
        direct call need not)."""
        if self._redact_event is None:
            from agentledger.core import detect  # noqa: PLC0415

            detect.secrets.warm()
            self._redact_event = detect.redact_event
        return self._redact_event

    async def _witness_loop(self) -> None:
        while True:
            await asyncio.sleep(witness.WITNESS_INTERVAL_S)
            await self._publish_witness()

    async def _publish_witness(self) -> None:
        """Hand the heads committed since the last time to the witness (``stores.witness``)."""
        assert self._committer is not None
        heads: dict[str, Head] = {}
        for subject, head in self._committer.take_heads().items():
            key = subject_key(self.settings.prefix, subject)
            if key is not None:
                heads[witness.task_name(*key)] = head
        if not heads:
            return
        try:
            await asyncio.to_thread(witness.publish, self.settings, heads, self._committer.high_seq)
        except Exception:
            log.exception("writer.witness_failed")

    def endpoints(self) -> list[RawEndpoint]:
        # Their own wire form: appends are group-committed and answered by the committer.
        p = self.settings.prefix
        return [RawEndpoint("append", append_subject(p), metrics.appends(self._arrive)),
                *(RawEndpoint(f"lease-{action}", lease_subject(p, action), self._lease_handler(action))
                  for action in ("acquire", "renew", "release")),
                *self._artifact_endpoints]

    def evictor(self) -> evict.Evictor:
        return self._evict

    def _weight(self, key: str) -> float:
        """A turn key's weight (``Settings.tenant_weights``), by the tenant behind the key."""
        if not self._weights:
            return 1.0
        kind, _, name = key.partition(":")
        if kind == "acc" and self._tenants is not None:
            entry = self._tenants.mirrored(name)
            name = entry.tenant if entry is not None else ""
        return self._weights.get(name, 1.0)

    async def _arrive(self, req: Request) -> None:
        """An append as it arrives: queued in its tenant's turn (``shell.turns``), so one
        tenant's backlog never stands between another's append and the writer."""
        if not self._turns.put(turn_key(req.headers), req):
            await req.respond(error_reply(UnavailableError(
                f"{TURN_LIMIT} appends of this tenant are already waiting for the writer; retry")))

    async def _on_append(self, req: Request) -> None:
        """An append, once the secret detectors are warm: while they warm, appends wait for
        them (one at a time, as they arrive: their order stays arrival order), for at most
        ``parts.WARM_WAIT_S`` after the warm-up began; past that they are answered retryable
        ``unavailable`` ("warming: secret detectors") until the detectors are ready. Never
        stored unredacted."""
        if self._warming is not None and self._warming.pending is not None:
            try:
                await self._warming.wait()
            except UnavailableError as exc:
                await req.respond(error_reply(exc))
                return
        await self._on_request(req)

    async def _drain(self) -> None:
        if self._handlers:
            await asyncio.gather(*self._handlers, return_exceptions=True)

    async def _evict(self, e: evict.Eviction) -> dict[str, int]:
        """A forget request reached these: drop the cached keys and mirrored leases."""
        assert self._keyring is not None and self._leases is not None
        assert self._committer is not None
        chains = 0
        if e.whole_tenant:
            tenant_subjects = f"{self.settings.prefix}.ledger.{e.tenant}."
            chains = self._committer.forget_heads(lambda s: s.startswith(tenant_subjects))
        elif e.task_id:
            task_subject = ledger_subject(self.settings.prefix, e.tenant, e.task_id)
            chains = self._committer.forget_heads(lambda s: s == task_subject)
        return {"keys": evict.keys_of(self._keyring, e),
                "leases": self._leases.evict(e.tenant) if e.whole_tenant
                else self._leases.evict(e.tenant, e.task_id) if e.task_id else 0,
                "chain_heads": chains}

    async def _stream_missing(self, high_seq: int) -> bool:
        """Recreate a deleted ledger stream after ``high_seq``; whether it was missing.

        The writer owns the stream. Numbering continues after the last sequence it saw
        acked, so the projector's watermark and every fencing token stay below what
        comes next and the projector carries on by itself; ``ensure_stream`` also starts
        it after the high-water mark kept outside the stream, which a writer restarted
        since knows. What the deleted stream held is gone from the ledger (the projection
        keeps its rows, and answers ``ledger_gap`` for them: see docs/operations.md).
        """
        assert self._nc is not None
        if self._stream_lock.locked():
            return False  # being checked: this publish answers unavailable and is retried
        async with self._stream_lock:
            js = self._nc.jetstream(timeout=STREAM_CHECK_TIMEOUT_S)
            try:
                await js.stream_info(self.settings.stream)
                return False
            except nats.js.errors.NotFoundError:
                pass
            except Exception:  # noqa: BLE001 - JetStream itself is away: an ordinary outage
                return False
            log.error("writer.ledger_stream_missing", stream=self.settings.stream,
                      recreated_from_seq=high_seq + 1)
            await ensure_stream(self.settings, self._nc, first_seq=high_seq + 1)
            return True

    async def _on_request(self, req: Request) -> None:
        assert self._tenants is not None and self._committer is not None
        try:
            caller = acting_for(await self._tenants.caller(req.headers), req.headers)
            # The tenant's append rate: a flooding tenant is refused before anything is decoded.
            self._quotas.admit(caller, len(req.data))
            prepared = self._prepare(req.data, caller)
            self._quotas.charge(caller, len(prepared[0]))
        except RateLimitedError as exc:
            if not self._quotas.hold(caller, exc, partial(req.respond, error_reply(exc))):
                await req.respond(error_reply(exc))
            return
        except AgentLedgerError as exc:
            log.info("append.rejected", code=exc.code, path=exc.path)
            await req.respond(error_reply(exc))
            return
        except Exception as exc:  # noqa: BLE001 - the tenant lookup's bucket away: typed, not micro's 500
            await req.respond(error_reply(failed(exc, "append", "internal error")))
            return
        events, expected, _ = prepared
        first = events[0]
        key = (first.tenant, first.task_id)
        task_key = self._task_key_held(first.tenant, first.task_id)
        if key not in self._lanes and expected is None and task_key is not False and self._as_is(events):
            subject = ledger_subject(self.settings.prefix, first.tenant, first.task_id)
            unit = make_unit(subject, events, events, key=task_key or None)
            unit.guard = True  # stored right after what this writer knows: see _answer
            settled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._direct.setdefault(key, set()).add(settled)
            unit.on_settled = partial(self._answer, req, prepared, caller, unit, settled=settled)
            try:
                self._committer.submit_nowait(unit)
            except AgentLedgerError as exc:
                self._handed(key, settled)
                await req.respond(error_reply(exc))
            return
        self._in_lane(key, partial(self._finish, req, prepared, caller))

    def _in_lane(self, key: Key, finish: Callable[[asyncio.Future[Any] | None, asyncio.Future[None]],
                                                    Coroutine[Any, Any, None]]) -> None:
        """Run ``finish(previous, handed)`` in a task, behind the task's earlier appends:
        the lane's last one and those handed straight to the committer and not settled.

        The lane is taken now, so that later appends of the task queue behind this one.
        """
        earlier: list[asyncio.Future[None]] = list(self._direct.get(key, ()))
        if (last := self._lanes.get(key)) is not None:
            earlier.append(last)
        previous = asyncio.gather(*earlier) if earlier else None
        handed = self._lanes[key] = asyncio.get_running_loop().create_future()
        self._run(finish(previous, handed))

    def _run(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` in a task the writer keeps until it ends."""
        task = asyncio.create_task(work)
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    def _task_key_held(self, tenant: str, task_id: str) -> TaskKey | Literal[False] | None:
        """The task's key when this writer holds it, None when the task is not sealed, False
        when its key must be fetched (or made) first."""
        if not task_seal.sealable(task_id):
            return None
        assert self._keyring is not None
        return self._keyring.cached(tenant, task_seal.slot(task_id)) or False

    async def _task_key(self, tenant: str, task_id: str) -> TaskKey | None:
        """The task's key, made at its first append (None: the task is not sealed)."""
        if not task_seal.sealable(task_id):
            return None
        assert self._keyring is not None
        return await self._keyring.key_for(tenant, task_seal.slot(task_id), create=True)

    def _as_is(self, events: list[EventBase]) -> bool:
        """Whether the events can be committed as they are, with no I/O and no lease lock:
        nothing to seal under a data subject's key, no artifact reference, no token, and a task
        without a live lease. (The task's own key, when this writer holds it, seals the bodies
        here without I/O: ``_task_key_held``.)"""
        assert self._leases is not None
        first = events[0]
        return (all(e.fencing_token is None and not has_personal_content(e) for e in events)
                and not artifacts.artifact_refs(events)
                and self._leases.unleased(first.tenant, first.task_id))

    async def _answer(self, req: Request,
                      prepared: tuple[list[EventBase], int | None, str | None], caller: Caller,
                      unit: Unit, future: asyncio.Future[list[AppendResult]], *,
                      settled: asyncio.Future[None]) -> None:
        """Reply to an append handed over in the handler; the committer calls this once its
        commit settled (a publish into the connection's buffer: the replies of one batch
        leave in one socket write). ``settled`` is resolved when the append no longer holds
        back the task's later lane appends.

        Refused because the task moved past what this writer knew (another writer appended
        to it, a lease grant perhaps, before our copy of the table showed it): checked again
        against the lease table and committed after what came (``_commit_fenced``), ahead of
        every lane append of the task that came after it (they wait for ``settled``, resolved
        once it is handed to the committer again). The lane's tail is no place for it: an
        append taken after it may already wait there, and would be stored first.
        """
        exc = future.exception()
        key = (prepared[0][0].tenant, prepared[0][0].task_id)
        if isinstance(exc, ConflictError) and exc.code == "conflict" and exc.current_seq is not None:
            unit.future = asyncio.get_running_loop().create_future()
            self._run(self._finish(req, prepared, caller, None, settled, unit=unit,
                                   moved=exc.current_seq))
            return
        self._handed(key, settled)
        if exc is None:
            data = encode(AppendReply(ok=True, results=future.result()))
        elif isinstance(exc, AgentLedgerError):
            log.info("append.refused", tenant=key[0], task=key[1], code=exc.code, path=exc.path)
            data = error_reply(exc)
        else:
            with structlog.contextvars.bound_contextvars(tenant=key[0], task=key[1]):
                data = error_reply(failed(exc, "append", "internal error"))
        try:
            await req.respond(data)
        except Exception:  # noqa: BLE001 - the caller went away; the others still get theirs
            log.warning("append.reply_failed")

    def _handed(self, key: Key, handed: asyncio.Future[None]) -> None:
        """The append behind ``handed`` reached the committer (or failed before): free its lane."""
        if not handed.done():
            handed.set_result(None)
        if self._lanes.get(key) is handed:
            del self._lanes[key]
        direct = self._direct.get(key)
        if direct is not None:
            direct.discard(handed)
            if not direct:
                del self._direct[key]

    def _prepare(self, data: bytes,
                 caller: Caller) -> tuple[list[EventBase], int | None, str | None]:
        """Decode and check a request; everything here needs no I/O.

        A tenant caller may only append to its own tenant, as itself: the
        body's tenant and producer must be the authenticated ones.
        """
        check_request(data)  # its depth before any decoder recurses into it, and no U+0000
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
            event = decode_event(raw, f"$.events[{i}]")
            caller.require_tenant(event.tenant, f"$.events[{i}].tenant")
            if caller.agent is not None and event.producer != caller.agent:
                raise PermissionDeniedError(
                    f"this connection is authenticated as agent {caller.agent!r}; an event's "
                    "producer must be the agent that sends it", code="producer_mismatch",
                    path=f"$.events[{i}].producer")
            events.append(event)
        check_reserved(events, operator=caller.is_operator)
        check_batch(events)
        self._fences.check(events[0].tenant, events[0].task_id, "$.events[0].task_id")
        if self.settings.redact_secrets:
            events = self._redacted(events)
        return events, request.expected_last_seq, request.lease_secret

    def _redacted(self, events: list[EventBase]) -> list[EventBase]:
        """The events with every secret in their strings replaced by a redaction marker.

        After validation, so the client's goal hash is checked against what it sent (the
        redacted goal gets its hash recomputed), and before sealing and digesting: the
        stored event, its ``Agentledger-Digest`` and any sealed value carry the marker,
        never the secret. A secret in an identifier refuses the append
        (``secret_in_identifier``). Markers are keyed with the installation's marker key
        (``marker_key_of``: the same for every writer instance and across restarts), so
        a retry of the same append redacts to the same event, has the same digest and is
        answered as a duplicate.
        """
        key = marker_key_of(self.settings)
        redact = self._redact_event or self._load_detectors()
        out = []
        total = 0
        for i, e in enumerate(events):
            try:
                redacted, n = redact(e, key=key)
            except ContractError as exc:
                raise ContractError(str(exc), code=exc.code,
                                    path=f"$.events[{i}]{(exc.path or '$')[1:]}") from None
            out.append(redacted)
            total += n
        if total:
            log.info("append.redacted", secrets=total, tenant=events[0].tenant, task=events[0].task_id)
        return out

    async def _finish(self, req: Request,
                      prepared: tuple[list[EventBase], int | None, str | None],
                      caller: Caller, previous: asyncio.Future[Any] | None,
                      handed: asyncio.Future[None], *, unit: Unit | None = None,
                      moved: int | None = None) -> None:
        """Check, seal and commit an append, then reply. ``unit``: the append as it was
        already sent, refused because the task had ``moved`` to that last sequence."""
        events, expected, lease_secret = prepared
        first = events[0]
        key = (first.tenant, first.task_id)
        with structlog.contextvars.bound_contextvars(tenant=first.tenant, task=first.task_id,
                                                     trace_id=first.trace_id):
            try:
                try:
                    if previous is not None:
                        await previous
                    assert self._keyring is not None and self._artifacts is not None
                    if unit is None:
                        # The artifact must be durable before the event that cites it is accepted.
                        await artifacts.check_refs(self._artifacts, events)
                        sealed = [await seal_event(e, self._keyring) for e in events]
                        # Digests of the events as sent: sealing draws a fresh nonce on every retry.
                        unit = make_unit(ledger_subject(self.settings.prefix, first.tenant,
                                                        first.task_id), events, sealed, expected,
                                         key=await self._task_key(first.tenant, first.task_id))
                    results = await self._commit_fenced(events, unit, caller, lease_secret,
                                                        partial(self._handed, key, handed), moved=moved)
                finally:
                    self._handed(key, handed)
            except AgentLedgerError as exc:
                log.info("append.refused", code=exc.code, path=exc.path)
                await req.respond(error_reply(exc))
                return
            except Exception as exc:  # noqa: BLE001 - every request gets a typed reply
                await req.respond(error_reply(failed(exc, "append", "internal error")))
                return
            await req.respond(encode(AppendReply(ok=True, results=results)))

    async def _commit_fenced(self, events: list[EventBase], unit: Unit, caller: Caller,
                             lease_secret: str | None, handed: Callable[[], None], *,
                             moved: int | None = None) -> list[AppendResult]:
        """Commit ``unit``; call ``handed`` once it is queued in the committer. ``moved``: the
        task's last sequence, reported when an earlier commit of ``unit`` was refused.

        Without an expectation or a token, on a task without a live lease, nothing
        needs checking here: the unit is committed right after the task's last message
        as this writer knows it (``Unit.guard``), so a grant made through another writer
        meanwhile makes the server refuse it. Otherwise, and after such a refusal, the
        task's lease lock is held from the lease check to the ack, so no lease change
        made through this writer slips in between, and the unit is committed with an
        expectation on the task's last sequence, so no grant made through another writer
        does either: when the server refuses that expectation, the check is made again
        on what was appended since (see ``agentledger.stores.lease_fencing``).
        """
        assert self._leases is not None and self._committer is not None
        first = events[0]
        if (moved is None and unit.expected_last_seq is None
                and all(e.fencing_token is None for e in events)
                and self._leases.unleased(first.tenant, first.task_id)):
            unit.guard = True
            future = self._committer.submit_nowait(unit)
            handed()
            try:
                return await future
            except ConflictError as exc:
                if exc.code != "conflict" or exc.current_seq is None:
                    raise
                moved = exc.current_seq  # another writer appended since: check again (below)
                unit.future = asyncio.get_running_loop().create_future()
        requested = unit.expected_last_seq
        tokens = [(kind_of(e), e.fencing_token) for e in events]
        async with self._leases.locked(first.tenant, first.task_id):
            for _ in range(FENCE_ATTEMPTS):
                try:
                    fenced = await self._leases.fence(first.tenant, first.task_id, tokens,
                                                      lease_secret, caller, expected=requested,
                                                      moved=moved)
                except (LeaseError, ConflictError):
                    # A retry of an append whose ack was lost, refused only because the lease
                    # lapsed or moved since: it is stored, so it is a duplicate, not a refusal.
                    stored = await self._committer.already_stored(unit)
                    if stored is not None:
                        return stored
                    raise
                unit.expected_last_seq, unit.fence = fenced.expected, fenced.stamp
                unit.guard = fenced.expected is None
                future = self._committer.submit_nowait(unit)
                handed()
                try:
                    results = await future
                except ConflictError as exc:
                    if requested is not None or exc.code != "conflict" or exc.current_seq is None:
                        raise  # the caller's own expectation, or not an expectation at all
                    moved = exc.current_seq  # appended to since our knowledge: check again
                    unit.future = asyncio.get_running_loop().create_future()
                    continue
                if fenced.expected is not None and results and not results[-1].duplicate:
                    self._leases.committed(first.tenant, first.task_id, fenced, results[-1].seq)
                return results
        raise UnavailableError("the task is being appended to through other writers faster than "
                               "this append could be checked; retry")

    def _lease_handler(self, action: str) -> Callable[[Request], Awaitable[None]]:
        async def handle(req: Request) -> None:
            assert self._leases is not None and self._tenants is not None
            secret: str | None = None
            try:
                caller = await self._tenants.caller(req.headers)
                r = decode_lease_request(req.data)
                caller.require_tenant(r.tenant, "$.tenant")
                self._fences.check(r.tenant, r.task_id)  # a grant is a ledger event of the task
                if r.task_id.startswith(RESERVED_TASK_PREFIX) and not caller.is_operator:
                    raise ContractError(f"task ids starting with {RESERVED_TASK_PREFIX!r} are reserved "
                                        "for the runtime", code="reserved_task", path="$.task_id")
                # A tenant agent holds leases only as itself; an operator (the checkpointer
                # resuming for an executor) names the holder.
                if caller.agent is not None and r.holder != caller.agent:
                    raise PermissionDeniedError(
                        f"this connection is authenticated as agent {caller.agent!r}; an agent "
                        "takes and holds leases only as itself", code="holder_mismatch",
                        path="$.holder")
                if action == "acquire":
                    lease: Lease | None
                    lease, secret = await self._leases.acquire(r.tenant, r.task_id, r.holder,
                                                               r.ttl_s)
                elif r.token is None:
                    raise ContractError(f"{action} needs the lease token", code="missing_field",
                                        path="$.token")
                elif action == "renew":
                    lease = await self._leases.renew(r.tenant, r.task_id, r.holder, r.token,
                                                     secret=r.secret, ttl_s=r.ttl_s)
                else:
                    await self._leases.release(r.tenant, r.task_id, r.holder, r.token,
                                               secret=r.secret)
                    lease = None
            except AgentLedgerError as exc:
                log.info("lease.refused", action=action, code=exc.code, path=exc.path)
                await req.respond(encode(LeaseReply(ok=False, error=error_body(exc))))
                return
            except Exception as exc:  # noqa: BLE001 - every request gets a typed reply
                with structlog.contextvars.bound_contextvars(action=action):
                    error = failed(exc, "lease", "internal error")
                await req.respond(encode(LeaseReply(ok=False, error=error_body(error))))
                return
            body = LeaseBody(lease.holder, lease.token, lease.expires_at, secret) if lease else None
            await req.respond(encode(LeaseReply(ok=True, lease=body)))
        return handle
