"""Group commit: concurrent appends coalesced into JetStream atomic batches.

With ``sync_interval: always`` every durable publish pays an fsync, so one
append per publish caps throughput. Appends wait in a queue; a flusher takes
whatever has gathered (never waiting for more, so a lone append goes out at
once) and commits it as one atomic batch, keeping a few batches in flight.

An atomic batch is all-or-nothing, which is what a caller's own batch needs but
not what unrelated callers sharing one batch deserve: one stale expectation
(10071) or one already-stored id (10201) rejects them all. A failed coalesced
batch is therefore split and each caller's unit committed alone, so the
offender gets its own answer and the others are stored, each exactly once:
ids are deduplicated by the server, and an id the server already holds is found
with a non-writing probe rather than by writing again.

Order. Units of one subject (one task) are stored in the order they were
submitted: publishes on one connection reach the stream in the order they are
written, the flusher takes units in queue order, and a subject that is part
of an unresolved atomic batch of several callers is not published again until
that batch is settled (otherwise a split-and-retry could put the batch's units
after later ones). Only a publish whose ack never came and that is retried
(same ids, stored once) can land after a later unit of its task.

Guarded units. A unit the writer accepted without a lease check (``Unit.guard``: its task had
no live lease as this writer's copy of the lease table said) is committed with an expectation
on its task's last sequence as this committer knows it from its own acks (``_known``; 0, "no
message", for a subject it has none for). Another writer's append to the task since, a lease
grant among them, makes the server refuse it (``conflict`` with the actual last sequence), and
the writer checks it again against what came (``agentledger.stores.lease_fencing``). So that
the expectation is always known without a read, a guarded unit waits while a batch holding its
subject is in flight, and only the first unit of a subject in an atomic batch carries an
expectation: the batch is stored contiguously, so the others follow it with nothing between.
What is known of a subject is learnt only from units stored with an expectation (or right after
one, in one atomic batch): after any other, nothing is known and the next guarded unit expects
0, which the server refuses unless the task is new.

The chain. With integrity keys (``Settings.integrity``), every message is sent with its
``Agentledger-Chain`` header (``core.ledger_chain``): a keyed blake3 over its bytes, its task,
its per-task index and the tag of the task's previous message. It is made in ``_send``, from
the head the message is committed after: the expectation names that head's sequence, so the
server refuses the message if anything else was stored on its task since, and the link can
never be to the wrong predecessor. So every chained unit has an expectation (one without its
own is guarded), and two writers racing on one task cannot both link to its head
(tests/test_chain_two_writers.py). The head is what this committer learnt from its own acks
(kept beside ``_known``); only a subject it knows nothing of costs one get of the message at
the expectation (after a start, or another writer's append), asked of the stream's leader (a
lagging replica would answer an older head), whose own tag is checked before anything links
to it. Nothing else is read per append.

A duplicate is only a duplicate if it says the same thing. Every message
carries its event's digest (``Agentledger-Digest``); when the server reports an
id as already stored, the stored message's digest is read back by sequence
(a direct get) and compared: a different one is ``event_id_conflict``, never a
``duplicate`` that silently keeps the first sender's content.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import nats.js.errors
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeout
from nats.nuid import NUID

from agentledger.contracts.api import AppendResult
from agentledger.contracts.codec import encode
from agentledger.contracts.events import DOCUMENTS_TASK, FORGET_TASK, MEMORY_TASK, EventBase
from agentledger.core import ledger_chain
from agentledger.core.ledger_chain import CHAIN, GENESIS, Head
from agentledger.errors import (
    AgentLedgerError,
    ConflictError,
    DuplicateError,
    EventIdConflictError,
    IntegrityViolationError,
    StorageFullError,
    UnavailableError,
)
from agentledger.replies import Replies
from agentledger.security.integrity_keys import IntegrityKeys
from agentledger.security.task_seal import SEALED, TaskKey, seal_body
from agentledger.services.ledger_writer.quotas import estimated_bytes, is_erasure, message_bytes
from agentledger.shell import metrics
from agentledger.stores.ledger import DIGEST, MSG_ID, event_digest, msg_id

log = structlog.get_logger()

ERR_WRONG_LAST_SEQUENCE = 10071
# A tenant's service ledgers: their readers pass over a message whose chain fails (see
# ``_good_head``), so the writer links past one too, looking back at most this many messages.
SERVICE_LEDGERS = frozenset({MEMORY_TASK, DOCUMENTS_TASK, FORGET_TASK})
WALK_BACK = 256
ERR_BATCH_DUPLICATE_ID = 10201
# "maximum bytes / messages exceeded": the stream is at a limit and discards new messages.
ERR_STREAM_LIMIT = 10077
# "duplicate message id is in process": a clustered leader is still proposing an earlier copy
# of this message; it will be stored, so the caller retries with the same ids.
ERR_DUPLICATE_IN_PROCESS = 10158
# The duplicate probe: a publish of the id with an expectation that cannot hold, so a stored id
# answers "duplicate" with its sequence and a new one fails the check, writing nothing. Which
# expectation depends on the server (both checked on nats-server 2.15, tests/test_cluster.py):
# - a single server checks dedupe before `Nats-Expected-Last-Msg-Id` (real ids always contain
#   two slashes, so this value never matches one), but checks `Nats-Expected-Last-Subject-Sequence`
#   before dedupe, so only the first gives the answer;
# - a clustered stream's leader checks dedupe and the subject sequence before it proposes, but it
#   proposes a message whose `Nats-Expected-Last-Msg-Id` fails: every replica then fails to apply
#   it ("critical write error") and the stream is left without a leader. So on a cluster, only the
#   subject sequence, set past anything a stream can hold, may be used.
_PROBE_LAST_ID = "agentledger-probe"
_PROBE_SUBJECT_SEQ = str(2**62)
# On the messages of a fenced append: the token of the latest lease grant at or below them,
# true because the append was committed with an expectation on its task's last sequence
# (see agentledger.stores.leases). Only the writer publishes to ledger subjects.
FENCE = "Agentledger-Fence"
# A refused expectation names the subject's actual last sequence (from the stream's leader).
_WRONG_LAST = re.compile(r"wrong last sequence: (\d+)")
_nuid = NUID()
# A unit whose publish answered ``unavailable`` (no ack within the timeout, or no responder) is
# published again with the same ids every ``RETRY_PAUSE_S`` until ``RETRY_WINDOW_S`` after its
# first attempt, then answers ``unavailable`` (the client retries, the same ids again). A clustered
# stream between leaders answers every publish at once with "no responders" until its election
# ends (4 to 9 s after its leader node died, raft's election timeout): retrying here, not a round
# trip to the client later, puts the first ack within a pause of the new leader.
RETRY_PAUSE_S = 0.2
RETRY_WINDOW_S = 4.0
# Subjects whose last sequence the committer remembers (the least recently stored are forgotten
# first; a forgotten one costs its next guarded unit one refused publish).
MAX_KNOWN_SUBJECTS = 65_536
# A publish awaiting its ack: what ``Replies.send`` returns.
_Sent = tuple[str, "asyncio.Future[Msg]", float]


@dataclass(eq=False)
class Unit:
    """One caller's append: events of one task, stored together or not at all."""

    subject: str
    msg_ids: list[str]
    bodies: list[bytes]
    event_ids: list[str]
    expected_last_seq: int | None = None
    # Content digest per event (``ledger.event_digest`` of the event before sealing).
    digests: list[str] = field(default_factory=list)
    # The lease grant the unit was checked against (``FENCE`` on each message), if any.
    fence: int | None = None
    # The id of the task key the bodies are sealed under (``task_seal.SEALED``), if they are.
    sealed_with: str | None = None
    # Without ``expected_last_seq``: commit it on the committer's knowledge of its subject's
    # last sequence all the same (see "Guarded units" above).
    guard: bool = False
    future: asyncio.Future[list[AppendResult]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future())
    # Awaited by the committer once the unit is settled, before it takes up other work: the
    # writer sends the append's reply from there, without a further hop through the event loop.
    on_settled: Callable[[asyncio.Future[list[AppendResult]]], Awaitable[None]] | None = None
    # The tenant whose quota the unit counts against, what it will take in the stream
    # (``quotas.estimated_bytes``), what it took as last sent (``quotas.message_bytes``), and
    # whether it is an erasure, which the ledger's reserve lets through.
    tenant: str = ""
    size: int = 0
    sent_bytes: int = 0
    erasure: bool = False
    # The task (the subject's last token), and the chain head after its last message as last
    # sent (``GroupCommitter._send``), learnt as the subject's head once it is stored.
    task_id: str = ""
    chain_end: Head | None = None

    def __len__(self) -> int:
        return len(self.bodies)

    def headers(self, i: int) -> dict[str, str]:
        """The framing headers of message ``i``: its dedupe id and content digest."""
        headers = {MSG_ID: self.msg_ids[i]}
        if self.digests:
            headers[DIGEST] = self.digests[i]
        if self.fence is not None:
            headers[FENCE] = str(self.fence)
        if self.sealed_with is not None:
            headers[SEALED] = self.sealed_with
        return headers


def make_unit(subject: str, events: Sequence[EventBase], stored: Sequence[EventBase],
              expected_last_seq: int | None = None, *, key: TaskKey | None = None) -> Unit:
    """A unit storing ``stored`` (the events as sealed), digested from ``events`` (as sent);
    with ``key`` (the task's), each stored body is sealed under it (``task_seal``)."""
    msg_ids = [msg_id(e.tenant, e.task_id, e.event_id) for e in stored]
    bodies = [encode(e) for e in stored]
    if key is not None:
        first = events[0]
        bodies = [seal_body(key, first.tenant, first.task_id, m, b) for m, b in zip(msg_ids, bodies, strict=True)]
    return Unit(subject=subject, msg_ids=msg_ids, bodies=bodies, sealed_with=key[0] if key else None,
                event_ids=[e.event_id for e in stored],
                expected_last_seq=expected_last_seq,
                digests=[event_digest(e) for e in events],
                tenant=events[0].tenant, task_id=events[0].task_id,
                size=estimated_bytes(subject, msg_ids, bodies),
                erasure=is_erasure(events))


class Admission(Protocol):
    """What the committer asks before it queues a unit, and tells once one is stored
    (``quotas.Quotas``: the ledger's size and the tenants' ledger quotas)."""

    def admit_unit(self, unit: Unit) -> None:
        """Raise to refuse ``unit`` before anything of it is sent."""

    def stored(self, unit: Unit) -> None:
        """``unit`` was stored (not a duplicate)."""


class _BatchFailed(Exception):  # noqa: N818 - internal signal, never escapes this module
    def __init__(self, err_code: int, description: str) -> None:
        super().__init__(description)
        self.err_code = err_code
        self.description = description


class _Turns:
    """The committer's queue: units by tenant, taken one tenant after another (round robin).

    Within a tenant (so within a task, whose subject is the tenant's) units leave in the order
    they came; across tenants, a batch takes one unit of each tenant with units queued in turn,
    so a tenant with hundreds queued shares each batch with a tenant that has one, instead of
    filling the batches before it (``shell.turns`` does the same for the requests before they
    become units)."""

    def __init__(self) -> None:
        self._by_tenant: dict[str, deque[Unit]] = {}
        self._ring: deque[str] = deque()
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def append(self, unit: Unit) -> None:
        tenant = _tenant_of(unit.subject)
        queue = self._by_tenant.get(tenant)
        if queue is None:
            queue = self._by_tenant[tenant] = deque()
            self._ring.append(tenant)
        queue.append(unit)
        self._count += 1

    def __getitem__(self, index: int) -> Unit:
        """The next unit to take (only ``[0]``)."""
        assert index == 0 and self._ring
        return self._by_tenant[self._ring[0]][0]

    def popleft(self) -> Unit:
        """Take the next unit; its tenant's next unit waits for every other tenant's turn."""
        tenant = self._ring.popleft()
        queue = self._by_tenant[tenant]
        unit = queue.popleft()
        self._count -= 1
        if queue:
            self._ring.append(tenant)
        else:
            del self._by_tenant[tenant]
        return unit

    def put_back(self, units: list[Unit]) -> None:
        """Return units taken but not batched to the front of their tenants' queues, in order;
        their tenants take the next turns."""
        for unit in reversed(units):
            tenant = _tenant_of(unit.subject)
            queue = self._by_tenant.get(tenant)
            if queue is None:
                queue = self._by_tenant[tenant] = deque()
            else:
                self._ring.remove(tenant)
            queue.appendleft(unit)
            self._ring.appendleft(tenant)
            self._count += 1


def _tenant_of(subject: str) -> str:
    """``<prefix>.ledger.<tenant>.<task>`` → the tenant (its turn's key)."""
    return subject.rsplit(".", 2)[-2] if subject.count(".") >= 2 else subject


class GroupCommitter:
    """Queue of units plus a flusher that commits them in atomic batches."""

    def __init__(self, nc: Client, stream: str, *, max_batch: int = 1000,
                 max_inflight: int = 4, pipeline_below: int = 16, timeout: float = 5.0,
                 on_no_stream: Callable[[int], Awaitable[bool]] | None = None,
                 admission: Admission | None = None, keys: IntegrityKeys | None = None) -> None:
        self._nc = nc
        # The integrity keys every message's chain tag is made with (None: not chained).
        self._keys = keys
        # Asked before a unit is queued (every append and lease grant of this writer passes
        # here) and told of each one stored: see ``Admission``.
        self._admission = admission
        # JetStream acks of our publishes: one reply subscription, a future per publish.
        self._acks = Replies(nc)
        self._stream = stream
        # Called with the highest sequence acked so far when no stream answers a publish;
        # True when it found the stream deleted and recreated it after that sequence.
        self._on_no_stream = on_no_stream
        self.high_seq = 0
        self._max_batch = max_batch
        self._timeout = timeout
        self._pipeline_below = pipeline_below
        # Queued units, taken in turns by tenant (``_Turns``): one tenant's backlog never
        # fills every batch ahead of another tenant's unit.
        self._queue = _Turns()
        self._wakeup = asyncio.Event()
        self._slots = asyncio.Semaphore(max_inflight)
        self._inflight: set[asyncio.Task[None]] = set()
        self._closed = False
        # Whether the stream is replicated by a cluster (the probe's expectation; see above).
        self._clustered: bool | None = None
        # Units submitted and not yet settled, by subject (see ``settled``).
        self._open: dict[str, set[Unit]] = {}
        # Subjects of unresolved atomic batches of several units -> how many such batches.
        self._held: dict[str, int] = {}
        # Subjects of every batch in flight -> how many: their guarded units wait (``_take``).
        self._flying: dict[str, int] = {}
        # Subject -> the sequence of its last message, learnt from our own acks (``_resolve``).
        self._known: dict[str, int] = {}
        # Subject -> (sequence, chain head) of its last message, learnt as ``_known`` is.
        self._heads: dict[str, tuple[int, Head]] = {}
        # Subjects whose head moved since ``take_heads`` last handed them to the witness.
        self._unwitnessed: set[str] = set()

    def submit_nowait(self, unit: Unit) -> asyncio.Future[list[AppendResult]]:
        """Queue ``unit`` now (its place in its task's order is taken here); its future
        resolves once it is durably stored, or raises why not."""
        if self._closed:
            raise UnavailableError("the writer is shutting down")
        if self._admission is not None:
            self._admission.admit_unit(unit)
        if self._keys is not None and unit.expected_last_seq is None:
            # Chained: committed on the task's last sequence as we know it all the same.
            unit.guard = True
        self._queue.append(unit)
        units = self._open.get(unit.subject)
        if units is None:
            units = self._open[unit.subject] = set()
        units.add(unit)
        unit.future.add_done_callback(lambda f: self._settle(unit, f))
        self._wakeup.set()
        return unit.future

    async def submit(self, unit: Unit) -> list[AppendResult]:
        """Queue ``unit`` and wait until it is durably stored (or refused)."""
        return await self.submit_nowait(unit)

    def _settle(self, unit: Unit, future: asyncio.Future[list[AppendResult]]) -> None:
        if (self._admission is not None and not future.cancelled() and future.exception() is None
                and not future.result()[0].duplicate):
            self._admission.stored(unit)
        units = self._open.get(unit.subject)
        if units is not None:
            units.discard(unit)
            if not units:
                del self._open[unit.subject]

    async def settled(self, subject: str) -> None:
        """Wait until every unit submitted for ``subject`` so far is stored or refused.

        A lease grant reads the task's last sequence after this, so an append
        accepted before the grant is never stored after it.
        """
        while units := self._open.get(subject):
            await asyncio.wait([u.future for u in units])

    async def run(self) -> None:
        """Flusher loop: runs until cancelled; returns after ``close`` drains."""
        while True:
            if not self._queue:
                if self._closed:
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            await self._slots.acquire()
            batch = self._take()
            if not batch:
                # Everything queued waits for a batch in flight to settle (which wakes us).
                self._slots.release()
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            subjects = {u.subject for u in batch}
            if len(batch) > 1 and not self._plain(batch):
                for subject in subjects:
                    self._held[subject] = self._held.get(subject, 0) + 1
            for subject in subjects:
                self._flying[subject] = self._flying.get(subject, 0) + 1
            metrics.BATCH_EVENTS.observe(sum(len(u) for u in batch))
            task = asyncio.create_task(self._commit_batch(batch))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)

    async def close(self) -> None:
        """Refuse new units, then wait for queued and in-flight ones to finish."""
        self._closed = True
        self._wakeup.set()
        while self._queue or self._inflight:
            await asyncio.gather(*self._inflight, return_exceptions=True)
            await asyncio.sleep(0)

    def _take(self) -> list[Unit]:
        """Greedily take queued units that may share one atomic batch, keeping each
        subject's order.

        A unit carrying an expectation must be the first writer of its subject in
        the batch (the server checks expectations against the pre-batch state and
        refuses one on a subject the batch already wrote); such a unit, and every
        later one of its subject, waits for the next batch instead. So do the units
        of a subject held by an unresolved atomic batch of several units. A guarded
        unit waits while its subject is in flight (its expectation comes from that
        ack), and joins a batch that has its subject only behind a first unit of the
        subject that carries an expectation (``_plain`` then sends the batch whole).
        """
        batch: list[Unit] = []
        size = 0
        subjects: dict[str, bool] = {}  # subject -> whether its first unit has an expectation
        waiting: set[str] = set()
        deferred: list[Unit] = []
        while self._queue:
            unit = self._queue[0]
            if batch and size + len(unit) > self._max_batch:
                break
            self._queue.popleft()
            subject = unit.subject
            if subject in waiting or subject in self._held or (
                    unit.expected_last_seq is not None and subject in subjects) or (
                    unit.guard and (subject in self._flying or subjects.get(subject) is False)):
                waiting.add(subject)
                deferred.append(unit)
                continue
            batch.append(unit)
            size += len(unit)
            if subject not in subjects:
                subjects[subject] = unit.guard or unit.expected_last_seq is not None
        self._queue.put_back(deferred)
        return batch

    def _plain(self, batch: list[Unit]) -> bool:
        """Whether ``batch`` goes as independent plain publishes rather than one atomic batch
        (never when it has a subject twice: see ``_take``)."""
        return (len(batch) < self._pipeline_below and all(len(u) == 1 for u in batch)
                and len({u.subject for u in batch}) == len(batch))

    async def _commit_batch(self, batch: list[Unit]) -> None:
        # A unit refused here may be submitted again (with a new future) before the batch is
        # done: a failure of the batch settles only the futures it was given.
        futures = [u.future for u in batch]
        try:
            if self._plain(batch):
                # A few single events: plain publishes, pipelined, are cheaper than an
                # atomic batch (which has a fixed commit cost) and fail independently.
                # All are published before the first ack is awaited.
                sent = [await self._send_or_refuse(u) for u in batch]
                for unit, acked in zip(batch, sent, strict=True):
                    if acked is not None:
                        await self._commit_alone(unit, sent=acked)
                    await self._notify(unit)
                return
            try:
                last, _ = await self._publish(batch)
            except (_BatchFailed, UnavailableError, IntegrityViolationError) as exc:
                # Someone's expectation or id sank the shared batch: commit each unit
                # alone, in arrival order, so only the offender is refused.
                log.info("group_commit.split", units=len(batch), reason=str(exc))
                for unit in batch:
                    await self._commit_alone(unit)
                    await self._notify(unit)
                return
            self._resolve(batch, last)
        except Exception as exc:
            log.exception("group_commit.failed")
            for future in futures:
                if not future.done():
                    future.set_exception(exc)
        finally:
            await self._settled_batch(batch)

    async def _send_or_refuse(self, unit: Unit) -> _Sent | None:
        """``_send`` of one unit; None after refusing it when its task's head fails its tag
        (the others of a pipelined batch go on)."""
        try:
            return await self._send([unit])
        except IntegrityViolationError as exc:
            unit.future.set_exception(exc)
            return None

    @staticmethod
    async def _notify(unit: Unit) -> None:
        """Hand a settled unit to its ``on_settled``, once."""
        on_settled, unit.on_settled = unit.on_settled, None
        if on_settled is not None and unit.future.done():
            await on_settled(unit.future)

    async def _settled_batch(self, batch: list[Unit]) -> None:
        """After a batch: the replies not sent yet, then its subjects and its slot are free."""
        try:
            for unit in batch:
                await self._notify(unit)
        finally:
            subjects = {u.subject for u in batch}
            if len(batch) > 1 and not self._plain(batch):
                for subject in subjects:
                    if self._held[subject] == 1:
                        del self._held[subject]
                    else:
                        self._held[subject] -= 1
            for subject in subjects:
                if self._flying[subject] == 1:
                    del self._flying[subject]
                else:
                    self._flying[subject] -= 1
            self._wakeup.set()  # units of these subjects may go now
            self._slots.release()

    async def _commit_alone(self, unit: Unit, *, sent: _Sent | None = None) -> None:
        """Commit one unit and settle its future with results or a typed error.

        ``sent``: the unit was already published (``_send``); only its ack is awaited.
        An ``unavailable`` publish is retried within ``RETRY_WINDOW_S`` (see there).
        """
        loop = asyncio.get_running_loop()
        give_up = loop.time() + RETRY_WINDOW_S
        while True:
            try:
                last, duplicate = await self._acked([unit], sent or await self._send([unit]))
                break
            except IntegrityViolationError as exc:  # the task's stored head fails its tag
                unit.future.set_exception(exc)
                return
            except _BatchFailed as exc:
                try:
                    outcome: list[AppendResult] | AgentLedgerError = await self._explain(unit, exc)
                except UnavailableError as unavailable:  # the probe behind the answer: this unit's
                    outcome = unavailable
                if isinstance(outcome, AgentLedgerError):
                    unit.future.set_exception(outcome)
                else:
                    unit.future.set_result(outcome)
                return
            except UnavailableError as exc:
                if loop.time() + RETRY_PAUSE_S >= give_up:
                    unit.future.set_exception(exc)
                    return
            # Same ids again: stored once whatever happened to the earlier copy.
            sent = None
            await asyncio.sleep(RETRY_PAUSE_S)
        if duplicate:
            conflict = await self._conflicting(unit, [last])
            if conflict is not None:
                unit.future.set_exception(conflict)
                return
        self._resolve([unit], last, duplicate=duplicate)

    def _expectation(self, unit: Unit) -> int | None:
        """The last sequence ``unit`` is committed after, if any: its own or, guarded, ours."""
        if unit.expected_last_seq is not None:
            return unit.expected_last_seq
        return self._known.get(unit.subject, 0) if unit.guard else None

    def _resolve(self, units: Sequence[Unit], last_seq: int, *, duplicate: bool = False) -> None:
        """Give each unit the sequences its messages got (a batch is contiguous), and learn
        where each subject now ends when that follows a unit sent with an expectation."""
        seq = last_seq - sum(len(u) for u in units)
        anchored: dict[str, bool] = {}
        for unit in units:
            results = []
            for eid in unit.event_ids:
                seq += 1
                results.append(AppendResult(eid, seq, duplicate))
            unit.future.set_result(results)
            if duplicate:
                continue
            subject = unit.subject
            if subject not in anchored:
                anchored[subject] = unit.guard or unit.expected_last_seq is not None
            self._known.pop(subject, None)
            self._heads.pop(subject, None)
            if anchored[subject]:
                self._known[subject] = seq
                if unit.chain_end is not None:
                    self._heads[subject] = (seq, unit.chain_end)
                    self._unwitnessed.add(subject)
                if len(self._known) > MAX_KNOWN_SUBJECTS:
                    del self._known[next(iter(self._known))]
                if len(self._heads) > MAX_KNOWN_SUBJECTS:
                    del self._heads[next(iter(self._heads))]

    async def _publish(self, units: Sequence[Unit]) -> tuple[int, bool]:
        """Store ``units`` together: (last stored sequence, whether it was a duplicate)."""
        return await self._acked(units, await self._send(units))

    async def _acked(self, units: Sequence[Unit], sent: _Sent) -> tuple[int, bool]:
        """(last stored sequence, whether it was a duplicate) once ``units``, as sent, are acked."""
        ack = await self._ack(sent)
        if len(units) == 1 and len(units[0]) == 1:
            return int(ack["seq"]), bool(ack.get("duplicate"))
        return int(ack["seq"]), False

    async def _send(self, units: Sequence[Unit]) -> _Sent:
        """Publish ``units`` to be stored together; the ack is awaited with ``_acked``.

        One event goes as a plain durable publish; anything more as one atomic
        batch, whose duplicates and failed expectations reject it whole.
        """
        if len(units) == 1 and len(units[0]) == 1:
            unit = units[0]
            headers = unit.headers(0)
            expected = self._expectation(unit)
            if self._keys is not None:
                self._chain(unit, 0, headers, await self._head_at(unit, expected))
            if expected is not None:
                headers["Nats-Expected-Last-Subject-Sequence"] = str(expected)
            unit.sent_bytes = message_bytes(unit.subject, unit.bodies[0], headers)
            return await self._acks.send(unit.subject, unit.bodies[0], self._timeout, headers)
        batch_id = _nuid.next().decode()
        total = sum(len(u) for u in units)
        n = 0
        written: set[str] = set()
        # Each subject's head before the batch, read (if it must be) before anything is sent.
        heads: dict[str, Head | None] = {}
        for unit in units:
            if unit.subject not in heads:
                heads[unit.subject] = (await self._head_at(unit, self._expectation(unit))
                                       if self._keys is not None else None)
        for unit in units:
            unit.sent_bytes = 0
            # Only a subject's first unit in the batch: the server checks the pre-batch state.
            expected = self._expectation(unit) if unit.subject not in written else None
            written.add(unit.subject)
            for i, body in enumerate(unit.bodies):
                n += 1
                headers = unit.headers(i)
                head = heads[unit.subject]
                if head is not None:
                    heads[unit.subject] = self._chain(unit, i, headers, head)
                headers = {"Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(n), **headers}
                if i == 0 and expected is not None:
                    headers["Nats-Expected-Last-Subject-Sequence"] = str(expected)
                if n == total:
                    headers["Nats-Batch-Commit"] = "1"
                unit.sent_bytes += message_bytes(unit.subject, body, headers)
                if n == total:
                    return await self._acks.send(unit.subject, body, self._timeout, headers)
                await self._nc.publish(unit.subject, body, headers=headers)
        raise AssertionError("a unit holds at least one event")

    def forget_heads(self, match: Callable[[str], bool]) -> int:
        """Drop the heads (and last sequences) of the subjects ``match`` accepts (a forget
        request erased their messages: a new append starts a new chain)."""
        subjects = [s for s in self._heads if match(s)]
        for subject in subjects:
            del self._heads[subject]
            self._known.pop(subject, None)
        return len(subjects)

    def take_heads(self) -> dict[str, Head]:
        """The chain heads (by subject) that moved since the last call, for the witness."""
        subjects, self._unwitnessed = self._unwitnessed, set()
        return {s: self._heads[s][1] for s in subjects if s in self._heads}

    def _chain(self, unit: Unit, i: int, headers: dict[str, str], head: Head) -> Head:
        """Add message ``i``'s chain header after ``head`` to ``headers``; the new head."""
        assert self._keys is not None
        value, new = ledger_chain.link(self._keys.current, self._keys.mac_key, head, tenant=unit.tenant,
                                       task=unit.task_id, body=unit.bodies[i], headers=headers)
        headers[CHAIN] = value
        unit.chain_end = new
        return new

    async def _head_at(self, unit: Unit, expected: int | None) -> Head:
        """The chain head of ``unit``'s task at sequence ``expected`` (the message it is
        committed after), from this committer's acks or, when it knows nothing of it, from the
        stored message itself (its own tag checked).

        Every chained unit carries an expectation (``submit_nowait``): two writers linking to
        one head would fork the task's chain, and the expectation makes the server refuse the
        second. A wrong guess costs nothing: the unit is refused (or retried at the actual last
        sequence, its ids the same) before anything links to it.
        """
        assert expected is not None  # see ``submit_nowait``
        known = self._heads.get(unit.subject)
        if expected == 0:
            # The task has no message in the stream. One this committer stored messages of lost
            # them with the stream (deleted and recreated): its chain goes on from where it was,
            # so a reader that folded it carries on. A forgotten task's head was dropped first
            # (``forget_heads``), so it starts again.
            return known[1] if known is not None else GENESIS
        if known is not None and known[0] == expected:
            return known[1]
        # Asked of the stream's leader, not as a direct get: on a cluster any replica answers a
        # direct get, and one that lags answers "none" or an older message: the expectation is
        # right while the head read is not, and the chain would fork (index 1 again after index
        # 140, found by the cluster chaos tests).
        js = self._nc.jetstream()
        try:
            msg = await js.get_msg(self._stream, seq=expected)
        except nats.js.errors.NotFoundError:
            return GENESIS  # none: a new task (or the expectation refuses the unit)
        except (NatsTimeout, NoRespondersError, nats.js.errors.ServiceUnavailableError) as exc:
            raise UnavailableError("the ledger did not answer a get of the task's last message") from exc
        if msg.subject != unit.subject or not msg.seq:
            return GENESIS  # another task's message: the expectation refuses the unit
        assert self._keys is not None
        if unit.task_id in SERVICE_LEDGERS:
            return await self._good_head(unit, int(msg.seq), msg.data or b"", msg.headers or {})
        head = ledger_chain.own_head(self._keys.mac_key_of, tenant=unit.tenant, task=unit.task_id,
                                     seq=int(msg.seq), body=msg.data or b"", headers=msg.headers or {})
        return head if head is not None else GENESIS

    async def _good_head(self, unit: Unit, seq: int, data: bytes, headers: dict[str, str]) -> Head:
        """A service ledger's head to link to: the last of the subject's messages, at ``seq`` or
        before it, whose own tag holds.

        The folds of ``_memory``, ``_documents`` and ``_forget`` pass over a message put there
        outside the services (no tag, or one that fails) and keep the head before it
        (``projection.chain_gate``), so the next message links to that head too: one inserted
        message must not stop a tenant's memory, documents and forgets for good. (A task's own
        ledger is refused instead, see ``own_head`` in ``_head_at``: its events are the task.)
        Looked for back through at most ``WALK_BACK`` messages, one direct get each; GENESIS
        when the subject has no chained message (legacy messages only).
        """
        assert self._keys is not None
        for _ in range(WALK_BACK):
            try:
                head = ledger_chain.own_head(self._keys.mac_key_of, tenant=unit.tenant, task=unit.task_id,
                                             seq=seq, body=data, headers=headers)
            except IntegrityViolationError:
                head = None
            if head is not None:
                return head
            before = await self._before(unit.subject, seq)
            if before is None:
                return GENESIS
            seq, data, headers = before
        raise IntegrityViolationError(
            f"the last {WALK_BACK} messages of tenant {unit.tenant!r} ledger {unit.task_id!r} all fail their "
            "chain: they were put there outside the services", where="ledger")

    async def _before(self, subject: str, seq: int) -> tuple[int, bytes, dict[str, str]] | None:
        """The last message of ``subject`` stored before ``seq`` (sequence, body, headers), or None.

        A direct get of the subject's last message up to ``seq - 1`` finds it (nats-server 2.11+;
        an older server answers with a status other than "no results", read here as none). Any
        replica may answer a direct get, and one that lags may name an older message or none, so
        the leader is asked what follows it on the subject (``next_by_subj``) until that is the
        message at ``seq``: at most a replica's lag of messages, and one get when none lags.
        """
        if seq <= 1:
            return None
        request = json.dumps({"multi_last": [subject], "up_to_seq": seq - 1, "batch": 1}).encode()
        try:
            reply = await self._nc.request(f"$JS.API.DIRECT.GET.{self._stream}", request, timeout=5)
        except (NatsTimeout, NoRespondersError) as exc:
            raise UnavailableError("the ledger did not answer a get of the task's earlier message") from exc
        headers = dict(reply.headers or {})
        status = headers.get("Status")
        found: tuple[int, bytes, dict[str, str]] | None = None
        if status is None and headers.get("Nats-Subject") == subject:
            at = int(headers.get("Nats-Sequence", "0"))
            found = (at, reply.data or b"", headers) if 0 < at < seq else None
        elif status != "404":
            return None  # a server without the batch form of direct get
        js = self._nc.jetstream()
        for _ in range(WALK_BACK):
            try:
                following = await js.get_msg(self._stream, seq=(found[0] if found else 0) + 1, subject=subject,
                                             next=True)
            except nats.js.errors.NotFoundError:
                return found
            except (NatsTimeout, NoRespondersError, nats.js.errors.ServiceUnavailableError) as exc:
                raise UnavailableError("the ledger did not answer a get of the task's earlier message") from exc
            if not following.seq or int(following.seq) >= seq:
                return found
            found = (int(following.seq), following.data or b"", dict(following.headers or {}))
        raise UnavailableError("the ledger's replicas lag too far behind to find the task's earlier message")

    async def _request(self, subject: str, body: bytes, headers: dict[str, str]) -> dict[str, Any]:
        """A publish that waits for JetStream's ack; raise on an error ack or no ack."""
        return await self._ack(await self._acks.send(subject, body, self._timeout, headers))

    async def _ack(self, sent: _Sent) -> dict[str, Any]:
        """JetStream's ack of a publish ``_send`` made; raise on an error ack or no ack."""
        try:
            reply = await self._acks.wait(sent)
        except NoRespondersError as exc:
            # Nothing stores this subject: the stream is gone (or JetStream is not up yet).
            if self._on_no_stream is not None and await self._on_no_stream(self.high_seq):
                raise UnavailableError("the ledger stream was missing and has been recreated; "
                                       "retry") from exc
            raise UnavailableError("the ledger is not available") from exc
        except NatsTimeout as exc:
            # Outcome unknown; retrying the same ids is safe (dedupe + probe).
            raise UnavailableError("the ledger did not acknowledge in time") from exc
        metrics.LEDGER_ACK_SECONDS.observe(asyncio.get_running_loop().time() - sent[2] + self._timeout)
        ack: dict[str, Any] = json.loads(reply.data)
        if "error" in ack:
            err = ack["error"]
            raise _BatchFailed(int(err.get("err_code", 0)), str(err.get("description", "")))
        self.high_seq = max(self.high_seq, int(ack.get("seq", 0)))
        return ack

    async def _explain(self, unit: Unit, exc: _BatchFailed) -> list[AppendResult] | AgentLedgerError:
        """Turn a refused single-unit batch into its answer: duplicate, conflict, ..."""
        if exc.err_code not in (ERR_WRONG_LAST_SEQUENCE, ERR_BATCH_DUPLICATE_ID):
            return _refused(exc)
        stored = [await self._probe(unit.subject, mid) for mid in unit.msg_ids]
        conflict = await self._conflicting(unit, stored)
        if conflict is not None:
            return conflict
        if all(seq is not None for seq in stored):
            # A retry of an append that was stored (its ack was lost): report the
            # original sequences, never a conflict and never a second copy.
            return [AppendResult(eid, seq, True)  # type: ignore[arg-type]
                    for eid, seq in zip(unit.event_ids, stored, strict=True)]
        if any(seq is not None for seq in stored):
            i = next(i for i, seq in enumerate(stored) if seq is not None)
            return DuplicateError(
                f"event {unit.event_ids[i]!r} is already stored (seq {stored[i]}) but others "
                "of this atomic append are not; resend only the new events",
                path=f"$.events[{i}].event_id")
        if exc.err_code == ERR_WRONG_LAST_SEQUENCE:
            reported = _WRONG_LAST.search(exc.description)
            current = int(reported[1]) if reported else await self.last_seq(unit.subject)
            return ConflictError(
                f"expected last sequence {self._expectation(unit)}, the task is at {current}",
                path="$.expected_last_seq", current_seq=current)
        return UnavailableError("the ledger reported a duplicate it no longer holds; retry")

    async def already_stored(self, unit: Unit) -> list[AppendResult] | None:
        """The original results when every event of ``unit`` is stored with the same content.

        For a retry refused for a reason that only applies to new writes (a lease
        that lapsed or moved after the first attempt's ack was lost): the events
        are stored, so the answer is ``duplicate``, as the contract promises.
        Different stored content is ``event_id_conflict``; None when not all are
        stored (within the dedupe window, where the probe can see them).
        """
        stored = [await self._probe(unit.subject, mid) for mid in unit.msg_ids]
        if any(seq is None for seq in stored):
            return None
        conflict = await self._conflicting(unit, stored)
        if conflict is not None:
            raise conflict
        return [AppendResult(eid, seq, True)  # type: ignore[arg-type]
                for eid, seq in zip(unit.event_ids, stored, strict=True)]

    async def _probe(self, subject: str, mid: str) -> int | None:
        """Sequence of the stored message with id ``mid`` (within the dedupe window)."""
        expectation = ({"Nats-Expected-Last-Subject-Sequence": _PROBE_SUBJECT_SEQ}
                       if await self._on_cluster() else {"Nats-Expected-Last-Msg-Id": _PROBE_LAST_ID})
        try:
            ack = await self._request(subject, b"", {MSG_ID: mid, **expectation})
        except _BatchFailed:
            return None  # the expectation failed: the id is not stored, nothing was written
        return int(ack["seq"]) if ack.get("duplicate") else None

    async def _on_cluster(self) -> bool:
        """Whether the ledger stream runs on a JetStream cluster (its cluster has a name)."""
        if self._clustered is None:
            try:
                info = await self._nc.jetstream().stream_info(self._stream)
            except (NatsTimeout, NoRespondersError, nats.js.errors.Error) as exc:
                raise UnavailableError("the ledger did not answer a stream info request") from exc
            self._clustered = bool(info.cluster is not None and info.cluster.name)
        return self._clustered

    async def _conflicting(self, unit: Unit, stored: Sequence[int | None]) -> AgentLedgerError | None:
        """``event_id_conflict`` for the first id stored with other content than this unit's."""
        if not unit.digests:
            return None
        for i, seq in enumerate(stored):
            if seq is None:
                continue
            digest = await self._stored_digest(seq)
            # A message stored before digests existed cannot be compared; it counts as the same.
            if digest is not None and digest != unit.digests[i]:
                return EventIdConflictError(
                    f"event id {unit.event_ids[i]!r} is already stored (seq {seq}) with other "
                    "content; use a new event id for a new event", path=f"$.events[{i}].event_id")
        return None

    async def _stored_digest(self, seq: int) -> str | None:
        """The digest header of the message at ``seq`` (direct get), or None."""
        try:
            reply = await self._nc.request(f"$JS.API.DIRECT.GET.{self._stream}",
                                           json.dumps({"seq": seq}).encode(), timeout=self._timeout)
        except (NatsTimeout, NoRespondersError) as exc:
            raise UnavailableError("the ledger did not answer a direct get") from exc
        return (reply.headers or {}).get(DIGEST)

    async def last_seq(self, subject: str) -> int:
        """Stream sequence of the last message on ``subject`` (0 when none).

        A direct get, which any replica may answer. One that has not stored the subject's
        first message yet answers "none" for a task that exists (a grant right after the
        task's first append, on a cluster), so "none" is asked again of the stream's leader; a
        replica answering an older message only costs the grant's expectation a retry.
        """
        try:
            reply = await self._nc.request(f"$JS.API.DIRECT.GET.{self._stream}",
                                           json.dumps({"last_by_subj": subject}).encode(),
                                           timeout=self._timeout)
            seq = (reply.headers or {}).get("Nats-Sequence")
            if seq:
                return int(seq)
            return int((await self._nc.jetstream().get_msg(self._stream, subject=subject)).seq or 0)
        except nats.js.errors.NotFoundError:
            return 0
        except (NatsTimeout, NoRespondersError, nats.js.errors.ServiceUnavailableError) as exc:
            raise UnavailableError("the ledger did not answer a get of the task's last message") from exc


def _refused(exc: _BatchFailed) -> AgentLedgerError:
    """The answer to an append the ledger refused for a reason other than ids or expectations."""
    if exc.err_code == ERR_STREAM_LIMIT:
        # Past the writer's own limit and its erasure reserve too (or another writer's).
        return StorageFullError(f"the ledger is full ({exc.description}); nothing was stored. "
                                "Raise AGENTLEDGER_MAX_LEDGER_BYTES or the server's storage",
                                code="ledger_full")
    if exc.err_code == ERR_DUPLICATE_IN_PROCESS:
        return UnavailableError("an earlier copy of this append is still being replicated; retry with "
                                "the same event ids (it is stored once)")
    return AgentLedgerError(f"the ledger refused the append: {exc.description}",
                            code="ledger_rejected")

