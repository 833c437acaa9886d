"""The projector: folds the ledger stream into PostgreSQL and serves Working Memory.

The projection is cut into partitions of the task space (``projector_partitions``,
fixed when the projection is built; one by default). Each partition is folded
by a ``Lane`` (``lane``: its consumer, its watermark row, its batches, and why
none of it can skip or double an event). A projector process runs the lanes of
the partitions it holds: it takes each by a PostgreSQL advisory lock, aiming at
a fair share of them among the projector instances that answer ``$SRV.PING``
(``ownership``), and looks again every second. So any number of instances can
run: with one partition, one folds and the others wait as standbys; with more,
they share the partitions, and a dead instance's partitions are taken by the
others within about two seconds (its locks go with its PostgreSQL session).

Every instance answers ``<prefix>.wm.get`` from the rows, whoever folds the
task; a read that waits for its own write (``min_seq``) waits for the
watermark of its task's partition. A task the ledger no longer holds (its
stream deleted and recreated, or purged) is answered ``ledger_gap`` (``gaps``).

A projection whose partition count differs from the configured one is
re-partitioned when that is exact: when every partition's watermark is the
same (a fresh projection, or one where every lane has caught up and nothing
new arrived), all rows locked while it is done. Otherwise the projection keeps
its count and the projector says so; ``agentledger replay`` rebuilds it with
the configured count.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

import asyncpg
import blake3
import msgspec
import nats
import nats.js.errors
import structlog
from nats.micro.request import Request

from agentledger.config import Settings
from agentledger.contracts.api import (
    ErrorBody,
    RejectionItem,
    RejectionsPage,
    TaskRef,
    ViewChunk,
    WorkingMemoryReply,
)
from agentledger.contracts.codec import decode_task_ref, encode
from agentledger.contracts.events import DOCUMENTS_TASK, FORGET_TASK, MEMORY_TASK
from agentledger.core.projection_tags import check_rejection
from agentledger.core.state import WorkingMemory, core_view
from agentledger.erasure import evict
from agentledger.errors import (
    AgentLedgerError,
    ContractError,
    IntegrityViolationError,
    NotFoundError,
    UnavailableError,
)
from agentledger.security.identity import OPERATOR, Caller, PermissionDeniedError
from agentledger.security.integrity_keys import keys_of
from agentledger.security.sealing import Keyring, kek_of, reveal
from agentledger.services.projector import ownership
from agentledger.services.projector.gaps import LedgerSpan, renumbered, task_gap
from agentledger.services.projector.lane import (
    DURABLE,
    LOOP_STALL_S,
    Lane,
    changed_subject,
    durable_name,
    rejected_subject,
)
from agentledger.services.projector.rebuild import LIVE_SCHEMA, SubjectKeys
from agentledger.services.projector.rollback_guard import RollbackGuard, put_back
from agentledger.services.projector.store import Layout, LayoutError, Store, check_view_row
from agentledger.shell import metrics
from agentledger.shell.bounded import ByteLRU
from agentledger.shell.endpoints import RawEndpoint, failed
from agentledger.shell.lifecycle import SERVER_AWAY_ERRORS
from agentledger.shell.parts import Parts
from agentledger.shell.service import Pool, Shape, Shell
from agentledger.stores import db
from agentledger.stores.fences import Fences
from agentledger.stores.ledger import ensure_stream, get_message, ledger_subject, task_last_seq

__all__ = ["DURABLE", "Projector", "changed_subject", "get_subject", "rejected_subject"]

log = structlog.get_logger()

SERVICE_NAME = "agentledger-projector"
# Advisory lock of partition k: (LEADER_LOCK, k) ("agpj").
LEADER_LOCK = 0x61677069
# How often the process looks at the partitions it holds and the instances running.
BALANCE_S = 1.0
# How often a read waiting for its own write re-reads the watermark (a commit wakes it sooner).
READ_POLL_S = 0.05


# Present in a view's JSON exactly where a value or turn is sealed (a sealed field that is
# null reads ``"sealed":null``; inside a JSON string the quotes would be escaped).
_SEALED = b'"sealed":{'


async def render_view(row: asyncpg.Record, state: WorkingMemory, keyring: Callable[[], Keyring] | None,
                      readable: frozenset[str] | None = None) -> bytes:
    """The Working Memory view returned by ``wm.get``, as JSON, from a task's rows
    (``Store.get_task``) whose tags were checked (``state``: its core, decoded by the check).

    Only the core row is decoded (the derived sets need it); the variables and
    the turns are spliced in as the JSON their rows hold. Personal values stay
    sealed unless the caller asked to reveal them (``keyring`` given, called only
    when some are sealed): only then is the view decoded, opened and encoded again;
    ``readable`` (None: all) are the data subjects the caller may see opened, the
    others stay sealed and are marked ``withheld``. Rows
    in PostgreSQL always hold them sealed, so destroying a subject's key reaches
    the projection without rewriting it.
    """
    variables, transcript = row["variables"] or b"", b",".join(row["turns"] or ())
    rendered = core_view(state)
    rendered["variables"] = msgspec.Raw(b"{" + variables + b"}")
    rendered["transcript"] = msgspec.Raw(b"[" + transcript + b"]")
    data = _view_encoder.encode(rendered)
    if keyring is None or (_SEALED not in variables and _SEALED not in transcript):
        return data
    may_open = None if readable is None else readable.__contains__
    return _view_encoder.encode(await reveal(msgspec.json.decode(data), keyring(), may_open))


# The tenants' service ledgers (their own services read them) and what each holds.
SERVICE_LEDGERS = {MEMORY_TASK: "memory (memory.*)", DOCUMENTS_TASK: "documents (context.ingest)",
                   FORGET_TASK: "forget requests (forget.*)"}


def get_subject(prefix: str) -> str:
    return f"{prefix}.wm.get"


# How long a rendered view stays cached for its chunks (a reader fetches them in well under this).
VIEW_TTL_S = 60.0
# Bytes a reply needs besides the view itself (ok, seq, the chunk's index, count, size and
# digest): a view is sent whole only when it fits with this to spare.
REPLY_ENVELOPE = 1024


@dataclass(frozen=True)
class _View:
    """A rendered view's JSON as it is cut into chunks, and the ledger seq it reflects."""

    seq: int
    data: bytes
    digest: str

    def chunk_size(self, budget: int) -> int:
        """Bytes of view per chunk: base64 turns 3 bytes into 4 within ``budget``."""
        return max(1, (budget - REPLY_ENVELOPE) * 3 // 4)

    def chunk(self, index: int, budget: int) -> ViewChunk:
        size = self.chunk_size(budget)
        count = max(1, -(-len(self.data) // size))
        if index >= count:
            raise ContractError(f"the view has {count} chunks (0 to {count - 1})",
                                code="invalid_value", path="$.chunk")
        return ViewChunk(index=index, count=count, size=len(self.data), digest=self.digest,
                         data=self.data[index * size:(index + 1) * size])



class Projector(Shell):
    """Folds its partitions of the ledger into PostgreSQL; answers ``<prefix>.wm.get``."""

    # The bindings say whose personal values an agent may see opened (``wm.get`` with reveal_personal).
    shape = Shape(name="projector", micro=SERVICE_NAME, log_name="projector", bindings=True,
                  pool=Pool(max_size=4), description="Working Memory projections of the agentledger ledger")

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.store = Store(LIVE_SCHEMA)
        self._subject_keys = SubjectKeys(settings.prefix)
        # Holds the advisory lock of every partition this process folds.
        self._lock_conn: asyncpg.Connection | None = None
        self._lanes: dict[int, Lane] = {}
        # Rendered views too large for one reply, while their chunks are fetched.
        self._views: ByteLRU[tuple[str, str, bool, frozenset[str] | None, str], _View] = ByteLRU(
            settings.view_cache_bytes, ttl_s=VIEW_TTL_S)
        self._keys: Keyring | None = None
        # A wake-up for readers waiting on a seq (every lane's commits set it).
        self._progress = asyncio.Event()
        # When the ownership loop last turned (liveness; see ``_folding``).
        self._turned = 0.0
        # The layout last seen, and the last thing said about a count that could not change.
        self._layout: int | None = None
        self._said: str | None = None
        # What the ownership loop last saw of the ledger's numbering (None: not seen, or no stream).
        self._span: LedgerSpan | None = None
        # Reads refused because a stored row failed its integrity tag (each also logged).
        self.integrity_violations = 0
        # What each task's row reached in this process: an older copy put back is refused.
        self._rollback = RollbackGuard()
        self._fences = Fences()

    # ---- lifecycle ------------------------------------------------------------------

    async def open(self, parts: Parts) -> None:
        await self._ensure_stream()
        assert self._nc is not None
        # Tasks whose ledger is behind its witness: their views are not served (``stores.fences``).
        await self._fences.load(self._nc, self.settings)

    def endpoints(self) -> list[RawEndpoint]:
        # Its own wire form: a view too large for one reply is sent in chunks.
        return [RawEndpoint("wm-get", get_subject(self.settings.prefix), self._handle_get)]

    def evictor(self) -> evict.Evictor:
        return self._evict

    async def serving(self, parts: Parts) -> None:
        """Take this instance's share of the partitions (found by its micro-service id).

        On stop: the ownership loop ends, every lane lets its batch in flight commit or
        roll back, then the partitions' locks go.
        """
        parts.on_stop(self._say_stopped)
        parts.on_stop(self._unlock)
        self._lock_conn = await db.connect(self.settings.database_url)
        parts.on_stop(self._stop_lanes)
        # The first turn initializes the lanes it takes before start returns (a projection
        # that cannot be initialized fails the start, as a projector always did).
        await self._balance(first=True)
        await self._look_at_ledger()
        if not self._lanes:
            log.info("projector.standby", reason="other projectors hold every partition")
        self._turned = time.monotonic()
        parts.task(self._own(), name="projector-own", vital=True)
        parts.liveness(self._folding)

    async def _stop_lanes(self) -> None:
        await asyncio.gather(*(lane.stop() for lane in self._lanes.values()))

    async def _unlock(self) -> None:
        """Close the connection holding the partitions' locks (the one open now: ``_balance``
        opens another when PostgreSQL dropped it)."""
        if self._lock_conn is not None:
            await self._lock_conn.close()

    async def _say_stopped(self) -> None:
        log.info("projector.stopped", partitions=sorted(self._lanes), watermark=self.watermark)

    async def _evict(self, e: evict.Eviction) -> dict[str, int]:
        """A forget request reached these: drop cached states, rendered views and keys.

        A lane's state cache is only changed between batches (a batch folds into it), so
        this waits until no lane has a batch in flight; the check and the drop run without
        a pause between.
        """
        while any(lane.busy for lane in self._lanes.values()):  # noqa: ASYNC110 - flags the lanes own
            await asyncio.sleep(0.01)
        task = None if e.whole_tenant else e.task_id
        states = sum(lane.evict(e.tenant, task) for lane in self._lanes.values())
        self._rollback.forget(e.tenant, task)
        views = [k for k in self._views.keys() if k[0] == e.tenant]  # noqa: SIM118 - not a dict
        for view in views:
            self._views.pop(view)
        keys = evict.keys_of(self._keys, e) if self._keys is not None else 0
        return {"states": states, "views": len(views), "keys": keys}

    async def _ensure_stream(self) -> None:
        """Create the ledger stream if it is missing (numbering after the watermark, so a
        projection that outlived its stream carries on); never change the writer's configuration."""
        assert self._nc is not None and self._pool is not None
        try:
            await self._nc.jetstream().stream_info(self.settings.stream)
        except nats.js.errors.NotFoundError:
            layout = await self.store.layout(self._pool)
            wm = max(layout.seqs) if layout is not None else 0
            await ensure_stream(self.settings, self._nc, first_seq=wm + 1)

    def _folding(self) -> bool:
        """The ownership loop turns, and so does every lane this process runs (a standby runs none)."""
        if time.monotonic() - self._turned >= LOOP_STALL_S:
            return False
        return all(lane.alive() or lane.done for lane in self._lanes.values())

    @property
    def watermark(self) -> int | None:
        """The lowest watermark this process's lanes committed last (None: none initialized)."""
        marks = [lane.watermark for lane in self._lanes.values()]
        return None if not marks or None in marks else min(m for m in marks if m is not None)

    @property
    def partitions(self) -> list[int]:
        """The partitions this process folds now."""
        return sorted(self._lanes)

    @property
    def lanes(self) -> dict[int, Lane]:
        return self._lanes

    # ---- which partitions this process folds -------------------------------------------

    async def _own(self) -> None:
        """Every ``BALANCE_S``: take or let go of partitions (see ``ownership``)."""
        while not self._stopped:
            self._turned = time.monotonic()
            try:
                await self._balance()
            except asyncio.CancelledError:
                raise
            except (*SERVER_AWAY_ERRORS, LayoutError) as exc:
                # The lanes wait out an outage themselves; this tries again next turn.
                log.debug("projector.balance_failed", error=type(exc).__name__, detail=_safe(exc))
            except Exception as exc:  # noqa: BLE001 - the next turn tries again
                log.warning("projector.balance_failed", error=type(exc).__name__, detail=_safe(exc))
            await self._look_at_ledger()
            await asyncio.sleep(BALANCE_S)

    async def _look_at_ledger(self) -> None:
        """Note the ledger's numbering beside the projection's watermark (``gaps``), within one
        turn: a stream API slow to answer (an election) never holds up the ownership loop, and
        what was seen last stands until a look succeeds."""
        try:
            await asyncio.wait_for(self._read_span(), timeout=BALANCE_S)
        except (*SERVER_AWAY_ERRORS, LayoutError, asyncpg.PostgresError, nats.errors.Error) as exc:
            log.debug("projector.ledger_unseen", error=type(exc).__name__, detail=_safe(exc))

    async def _read_span(self) -> None:
        """The watermark first, so a message appended between the two reads is never taken for
        a stream that numbers below it. A missing stream tells nothing (the writer recreates it)."""
        assert self._pool is not None and self._nc is not None
        layout = await self.store.layout(self._pool)
        try:
            state = (await self._nc.jetstream().stream_info(self.settings.stream)).state
        except nats.js.errors.NotFoundError:
            self._span = None
            return
        first = int(state.first_seq or 1)
        self._span = LedgerSpan(first=first, numbered=max(int(state.last_seq or 0), first - 1),
                                folded=max(layout.seqs) if layout is not None else 0)

    async def _balance(self, first: bool = False) -> None:
        """One turn: the layout, the instances running, then take or let go of partitions."""
        assert self._pool is not None and self._nc is not None and self._micro is not None
        if self._lock_conn is None or self._lock_conn.is_closed():
            # Its locks went with its session (PostgreSQL restarted, or the connection broke):
            # take them again for the lanes it runs, which wait out the outage meanwhile; a lane
            # whose lock another process took first stops (its batches could not commit anyway:
            # the watermark check refuses a second folder).
            self._lock_conn = await db.connect(self.settings.database_url)
            lost = [k for k in self._lanes if not await self._lock_conn.fetchval(
                "SELECT pg_try_advisory_lock($1, $2)", LEADER_LOCK, k)]
            await self._drop_lanes(lost, unlock=False)
        layout = await self._current_layout()
        count = layout.partitions
        stale = [k for k, lane in self._lanes.items() if lane.partitions != count or lane.done]
        await self._drop_lanes(stale)
        if count != self._layout:
            if self._layout is not None:
                log.info("projector.layout", partitions=count, was=self._layout)
            self._layout = count
            await self._drop_stale_consumers(count)
        members = 1 if count == 1 else await self._members()
        decision = ownership.plan(self._micro.id, count, members, set(self._lanes))
        if decision.drop is not None:
            log.info("projector.partition_released", partition=decision.drop, partitions=count,
                     instances=members)
            await self._drop_lanes([decision.drop])
        aim = ownership.share(count, members)
        for k in decision.take:
            if len(self._lanes) >= aim:
                break
            if await self._lock_conn.fetchval("SELECT pg_try_advisory_lock($1, $2)", LEADER_LOCK, k):
                await self._add_lane(k, count, first)

    async def _current_layout(self) -> Layout:
        """The projection's partitions, re-partitioned to the configured count when exact."""
        assert self._pool is not None
        layout = await self.store.layout(self._pool)
        if layout is None:
            await db.migrate(self.settings.database_url)
            layout = await self.store.layout(self._pool)
            if layout is None:
                raise LayoutError("the projection has no watermark row after migrate")
        wanted = self.settings.projector_partitions
        if layout.partitions == wanted:
            return layout
        async with self._pool.acquire() as conn:
            at = await self.store.repartition_if_level(conn, wanted)
        if at is not None:
            log.info("projector.repartitioned", partitions=wanted, was=layout.partitions, seq=at)
            return await self._current_layout()
        said = f"{layout.partitions}/{wanted}"
        if said != self._said:
            log.warning("projector.partitions_kept", partitions=layout.partitions, configured=wanted,
                        reason="the partitions are at different watermarks; the count changes when "
                               "they meet (nothing new to fold), or run `agentledger replay`")
            self._said = said
        return layout

    async def _members(self) -> int:
        """How many projector instances answer ``$SRV.PING`` (at least this one)."""
        assert self._nc is not None
        try:
            found = await evict.running(self._nc, frozenset({SERVICE_NAME}))
        except (*SERVER_AWAY_ERRORS, nats.errors.Error):
            return 1
        return max(1, len(found))

    async def _add_lane(self, partition: int, partitions: int, first: bool) -> None:
        assert self._nc is not None and self._pool is not None
        lane = Lane(self.settings, self._nc, self._pool, partition, partitions,
                    store=self.store, subject_keys=self._subject_keys, progress=self._progress,
                    on_failure=self.fail, guard=self._rollback, keyring=self._keyring)
        self._lanes[partition] = lane
        log.info("projector.partition_taken", partition=partition, partitions=partitions)
        if first:
            await lane.prime()
        lane.start()

    async def _drop_lanes(self, partitions: list[int], unlock: bool = True) -> None:
        """Stop those lanes (each lets its batch in flight finish), then free their partitions."""
        lanes = [self._lanes.pop(k) for k in partitions if k in self._lanes]
        await asyncio.gather(*(lane.stop() for lane in lanes))
        if unlock and self._lock_conn is not None and not self._lock_conn.is_closed():
            for lane in lanes:
                with contextlib.suppress(*SERVER_AWAY_ERRORS):
                    await self._lock_conn.execute("SELECT pg_advisory_unlock($1, $2)", LEADER_LOCK,
                                                  lane.partition)

    async def _drop_stale_consumers(self, partitions: int) -> None:
        """Delete the durable consumers of other layouts' partitions (a re-partitioned
        projection's old lanes): they would keep messages pending for no one."""
        assert self._nc is not None
        js = self._nc.jetstream()
        current = {durable_name(k, partitions) for k in range(partitions)}
        try:
            infos = await js.consumers_info(self.settings.stream)
        except nats.js.errors.NotFoundError:
            return
        for info in infos:
            name = info.name
            if name not in current and (name == DURABLE or name.startswith(f"{DURABLE}-")):
                with contextlib.suppress(nats.js.errors.NotFoundError):
                    await js.delete_consumer(self.settings.stream, name)
                    log.info("projector.consumer_dropped", consumer=name, partitions=partitions)

    # ---- read API -------------------------------------------------------------------------

    async def _handle_get(self, req: Request) -> None:
        assert self._tenants is not None
        try:
            caller = await self._tenants.caller(req.headers)
            reply = await self.working_memory(req.data, caller)
        except PermissionDeniedError as exc:
            reply = _error(exc.code, exc.message, exc.path)
        except Exception as exc:  # noqa: BLE001 - every request gets a typed reply
            # Any PostgreSQL error (a projection being switched by a replay included) is the
            # database's trouble: retryable ``unavailable``.
            error = failed(exc, "projector", "the projector failed to answer", (asyncpg.PostgresError,))
            reply = _error(error.code, error.message, retryable=error.retryable)
        await req.respond(encode(reply))

    async def working_memory(self, data: bytes, caller: Caller = OPERATOR) -> WorkingMemoryReply:
        """Answer one ``wm.get`` request body for ``caller``: a tenant reads only its own tasks.

        A whole view comes back as its encoded JSON (``state`` is a ``msgspec.Raw``), so
        it is encoded once, measured against the reply budget and sent as it is.
        """
        try:
            ref = decode_task_ref(data)
            caller.require_tenant(ref.tenant, "$.tenant")
            readable = None
            if ref.reveal_personal and not caller.is_operator and caller.agent is not None:
                assert self._bindings is not None
                readable = (await self._bindings.get(ref.tenant, caller.agent)).users
            with structlog.contextvars.bound_contextvars(tenant=ref.tenant, task=ref.task_id):
                return await self._read(ref, readable)
        except AgentLedgerError as exc:
            metrics.refused(exc)
            return _error(exc.code, exc.message, exc.path, exc.retryable)

    async def _read(self, ref: TaskRef, readable: frozenset[str] | None = None) -> WorkingMemoryReply:
        """The view whole when it fits in one reply, else one chunk of it; or a rejections page.
        ``readable``: the data subjects whose values the caller may see opened (None: all)."""
        assert self._pool is not None
        _check_read_request(ref)
        self._fences.check(ref.tenant, ref.task_id)
        gap = renumbered(self._span)
        if gap is not None:
            raise gap
        try:
            if ref.min_seq is not None and not await self._reached(ref, ref.min_seq, ref.wait_ms):
                raise UnavailableError(f"the projection has not reached seq {ref.min_seq} within "
                                       f"{ref.wait_ms} ms; retry", path="$.min_seq")
            if ref.rejections is not None:
                return await self._rejections_page(ref)
            key = (ref.tenant, ref.task_id, ref.reveal_personal, readable, ref.digest or "")
            cached = self._views.get(key) if ref.chunk is not None else None
            if cached is not None:
                return WorkingMemoryReply(ok=True, seq=cached.seq,
                                          chunk=cached.chunk(ref.chunk or 0, self._reply_budget()))
            reach = await self._known_reach(ref.tenant, ref.task_id)
            row = await self.store.get_task(self._pool, ref.tenant, ref.task_id, ref.transcript_tail)
        except (asyncpg.PostgresError, OSError, asyncpg.InterfaceError,
                asyncpg.InternalClientError, TimeoutError) as exc:
            log.warning("projector.read_failed", error=type(exc).__name__)
            raise UnavailableError("the projection is not available right now") from exc
        if row is None:
            if await self._in_ledger(ref.tenant, ref.task_id):
                raise UnavailableError("the task is in the ledger but not projected yet; retry "
                                       "(or pass min_seq)", path="$.task_id")
            raise NotFoundError(f"no task {ref.task_id!r} for tenant {ref.tenant!r}", path="$.task_id")
        gap = task_gap(self._span, row["seq"])
        if gap is not None:
            raise gap
        if row["broken_at"] is not None:
            # Its ledger fails its chain there (a forged, edited or moved event): the state folded
            # up to it is not the task's, so nothing is served as if the ledger were whole.
            log.error("projector.integrity_violation", seq=row["broken_at"], where="ledger")
            self.integrity_violations += 1
            raise IntegrityViolationError(
                f"the ledger of task {ref.task_id!r} of tenant {ref.tenant!r} fails its chain at sequence "
                f"{row['broken_at']}: an event was changed, forged or moved outside the services "
                "(`agentledger verify` names it)", where="ledger")
        try:
            state = check_view_row(row, keys_of(self.settings).mac_key_of, ref.tenant, ref.task_id,
                                   ref.transcript_tail)
            await self._not_put_back(ref.tenant, ref.task_id, row["seq"], reach)
        except IntegrityViolationError:
            log.error("projector.integrity_violation", seq=row["seq"])
            self.integrity_violations += 1
            raise
        data = await render_view(row, state, self._keyring if ref.reveal_personal else None, readable)
        budget = self._reply_budget()
        if ref.chunk is None and len(data) + REPLY_ENVELOPE <= budget:
            return WorkingMemoryReply(ok=True, seq=row["seq"], state=msgspec.Raw(data))
        rendered = _View(seq=row["seq"], data=data, digest=blake3.blake3(data).hexdigest())
        if ref.chunk is not None and rendered.digest != ref.digest:
            raise AgentLedgerError("the Working Memory changed since its first chunk was read; "
                                   "read it again from the start (without chunk and digest)",
                                   code="state_changed", path="$.digest", retryable=True)
        self._views.put((ref.tenant, ref.task_id, ref.reveal_personal, readable, rendered.digest), rendered,
                        len(data))
        return WorkingMemoryReply(ok=True, seq=rendered.seq,
                                  chunk=rendered.chunk(ref.chunk or 0, budget))

    async def _known_reach(self, tenant: str, task_id: str) -> tuple[int | None, int | None]:
        """Taken before the row is read: what this process knows the task's row reached, and
        for a task it does not know, the sequence of the task's last ledger message (one direct
        get). Both are then at or below what any honest row read after them holds."""
        reached = self._rollback.reached((tenant, task_id))
        if reached is not None or self._nc is None:
            return reached, None
        return None, await task_last_seq(self._nc, self.settings, tenant, task_id)

    async def _not_put_back(self, tenant: str, task_id: str, seq: int, reach: tuple[int | None, int | None]) -> None:
        """Raise ``IntegrityViolationError`` when a verified row at ``seq`` is older than what
        ``reach`` (``_known_reach``) says the task reached (``rollback_guard``); else remember
        ``seq``. Behind the last ledger message is lag unless the partition's watermark is
        past it and the row, read again after that watermark, still is."""
        reached, last = reach
        if reached is not None and seq < reached:
            raise put_back(tenant, task_id, seq, reached, by="what this projector already applied or served")
        if last is not None and seq < last and self._pool is not None:
            layout = await self.store.layout(self._pool)
            folded = layout.of_task(tenant, task_id) if layout is not None else 0
            if folded >= last and await self.store.task_seq(self._pool, tenant, task_id) < last \
                    and not await self.store.rejected_at(self._pool, tenant, task_id, last):
                raise put_back(tenant, task_id, seq, last,
                               by="the task's last ledger event, which the projection has folded")
        self._rollback.note((tenant, task_id), seq)

    def _reply_budget(self) -> int:
        """Largest reply to send: the configured budget, capped by the server's max_payload."""
        budget = self.settings.max_reply_bytes
        if self._nc is not None and self._nc.max_payload:
            budget = min(budget, self._nc.max_payload)
        return max(budget, 2 * REPLY_ENVELOPE)

    async def _rejections_page(self, ref: TaskRef) -> WorkingMemoryReply:
        """Rows of the task's rejection trace after ``after_seq``, as many as fit in one reply."""
        assert self._pool is not None and ref.rejections is not None
        query = ref.rejections
        async with self._pool.acquire() as conn, conn.transaction(isolation="repeatable_read",
                                                                   readonly=True):
            layout = await self.store.layout(conn)
            wm = layout.of_task(ref.tenant, ref.task_id) if layout is not None else 0
            rows = await self.store.rejections_after(conn, ref.tenant, ref.task_id,
                                                     query.after_seq, query.limit + 1)
        room = self._reply_budget() - REPLY_ENVELOPE
        items: list[RejectionItem] = []
        key_of = keys_of(self.settings).mac_key_of
        for r in rows[:query.limit]:
            try:  # a row edited, forged or moved from another task is refused, not served
                check_rejection(key_of, (ref.tenant, ref.task_id, *r[:5]), r[5])
            except IntegrityViolationError:
                log.error("projector.integrity_violation", seq=r[0], where="rejections")
                self.integrity_violations += 1
                raise
            item = RejectionItem(seq=r[0], event_id=r[1], kind=r[2], code=r[3], reason=r[4])
            room -= len(_view_encoder.encode(item)) + 1
            if room < 0 and items:
                break
            items.append(item)
        more = len(items) < len(rows)
        return WorkingMemoryReply(ok=True, seq=wm, rejections=RejectionsPage(
            items=items, next_after_seq=items[-1].seq if more and items else None))

    async def _reached(self, ref: TaskRef, seq: int, wait_ms: int) -> bool:
        """Whether the committed watermark of the task's partition reaches ``seq`` within
        ``wait_ms`` (read-your-writes).

        Reads the watermark rows, so an instance that does not fold the task answers
        as truly as the one that does; this process's commits wake the wait early.
        """
        assert self._pool is not None
        deadline = asyncio.get_running_loop().time() + wait_ms / 1000
        while True:
            layout = await self.store.layout(self._pool)
            wm = layout.of_task(ref.tenant, ref.task_id) if layout is not None else None
            if wm is not None and wm >= seq:
                return True
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                return False
            self._progress.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._progress.wait(), timeout=min(left, READ_POLL_S))

    async def _in_ledger(self, tenant: str, task_id: str) -> bool:
        """Whether the ledger holds a message of this task (one direct get, no scan;
        ``get_message`` asks the leader again on a miss)."""
        assert self._nc is not None
        subject = ledger_subject(self.settings.prefix, tenant, task_id)
        try:
            headers, _ = await get_message(self._nc, self.settings, last_of=subject, wait_s=2)
        except UnavailableError:
            return False
        return bool(headers)

    def _keyring(self) -> Keyring:
        """Opened on the first request that reveals personal values."""
        if self._keys is None:
            assert self._nc is not None
            self._keys = Keyring(self._nc, self.settings.keys_bucket,
                                 kek_of(self.settings, create=False),
                                 cache_bytes=self.settings.key_cache_bytes)
        return self._keys


_view_encoder = msgspec.json.Encoder()



def _check_read_request(ref: TaskRef) -> None:
    """What no read can answer: a service ledger, and fields of a wm.get request that only make
    sense together (the decoder checks each alone)."""
    if ref.task_id in SERVICE_LEDGERS:
        # A permanent condition, not a wait: no retry ever finds it projected.
        raise ContractError(f"{ref.task_id!r} is the tenant's {SERVICE_LEDGERS[ref.task_id]} ledger, which "
                            "Working Memory does not project; read it through its service",
                            code="service_ledger", path="$.task_id")
    if ref.chunk is not None and ref.digest is None:
        raise ContractError("a chunk request needs the digest the first chunk's reply carried",
                            code="missing_field", path="$.digest")
    if ref.digest is not None and ref.chunk is None:
        raise ContractError("digest goes with chunk: the first chunk is read without either",
                            code="invalid_value", path="$.digest")
    if ref.rejections is not None and ref.chunk is not None:
        raise ContractError("ask for a rejections page or a chunk of the view, not both",
                            code="invalid_value", path="$.rejections")


def _error(code: str, message: str, path: str | None = None, retryable: bool = False) -> WorkingMemoryReply:
    return WorkingMemoryReply(ok=False, error=ErrorBody(code=code, message=message, path=path,
                                                        retryable=retryable))


def _safe(exc: BaseException) -> str:
    """An exception's text, bounded (our errors never carry event content)."""
    return str(exc)[:300]

