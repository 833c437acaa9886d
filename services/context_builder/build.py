"""``context.build``, ``get`` and ``trace``: from a task's ledger to a frozen generation.

A build, in order:

1. the caller's scopes (``allowed_scopes`` with the agent's bindings: a user or project
   scope only if bound) and the counter (``counter_for``: exact, or an estimate with a
   margin) are settled before anything is read;
2. the generation id is derived from the request and the conversation's epoch, so the
   same request again is the same generation (``generation_id`` names one explicitly;
   ``regenerate`` makes a new one);
3. the Working Memory projection is awaited (bounded) until it covers the task's ledger,
   then the state and the turns after the lineage base are read from its tables, sealed
   turns opened;
4. memory (``memory.read`` of the memory-policy service, as a service caller with the
   scopes checked here) and documents (the document index) when the request asks;
5. units → ``plan``: below the high watermark one ``direct`` branch; above it the planner's
   split, and BOTH branches (primary: new checkpoint + recent exact + input; fallback:
   recent exact + input) are frozen before the compactor runs: the frozen generation is
   stored (artifact ``context-generation/v1`` + its row) first;
6. the compactor runs under a timeout; its output is validated, signed and staged, and
   the primary branch assembled with it; any failure selects the frozen fallback.

The final generation is stored too; a later ask by id decodes the stored bytes, never
rebuilds.

Personal data is shown only to whom it belongs to: an agent's build of a conversation
holding sealed content of a data subject the agent is not bound to (turns, variables,
the active checkpoint) is refused ``subject_not_bound`` before anything is frozen, and a
stored generation holding such content is answered like a missing one.

For forgetting (services/context_builder/forget.py) a generation row records the data
subjects whose content it holds (every sealed turn, variable and personal memory record it
opened, and those of the checkpoint it rendered) and the memory records it read; a staged
checkpoint records the subjects of the turns it covers. A build a forget request overtook
(its row deleted, its conversation moved on to a new lineage or deleted) stages nothing,
drops what it stored and answers the error ``forgotten`` (a ``ConflictError``): build again.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import secrets
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import blake3
import msgspec
import structlog
from nats.aio.client import Client

from agentledger.config import Settings
from agentledger.contracts.context_api import (
    Branch,
    BuildRequest,
    CompactionCheckpoint,
    CompactionPlan,
    Coverage,
    Generation,
    GenerationRef,
    Summary,
    TraceReply,
)
from agentledger.contracts.memory_api import ReadReply, ReadRequest
from agentledger.core.context import (
    FROZEN_FAILURE,
    BudgetTooSmallError,
    Counter,
    InvalidSummaryError,
    Selection,
    Unit,
    budget,
    checkpoint_id_for,
    counter_for,
    generation_digest,
    lineage_id,
    parse_summary,
    plan,
    policy_version,
    public_key_from_bytes,
    rank_relevance,
    render,
    select,
    source_digest,
    stage_candidate,
    structured_reductions,
    summary_text,
    turn_unit,
    verify_checkpoint,
)
from agentledger.core.context.render import system_segment, tools_segment
from agentledger.core.dag import next_ready
from agentledger.core.memory.authority import LOW_AUTHORITY
from agentledger.core.memory.keys import key_repeats_value
from agentledger.core.memory.read import Bindings, allowed_scopes
from agentledger.core.memory.when import usable, when_of
from agentledger.core.state import WorkingMemory
from agentledger.errors import (
    ConflictError,
    ContractError,
    IntegrityViolationError,
    NotFoundError,
    PermissionDeniedError,
    UnavailableError,
)
from agentledger.security.bindings import BindingRegistry
from agentledger.security.identity import Caller
from agentledger.security.sealing import unseal
from agentledger.services.context_builder.compactors import (
    CompactionInput,
    Compactor,
    PlainTurn,
    pick,
    registry,
)
from agentledger.services.context_builder.documents import DocumentIndex
from agentledger.services.context_builder.keys import SigningKey
from agentledger.services.context_builder.sources import Sources
from agentledger.services.context_builder.store import ContextStore, GenerationRow
from agentledger.services.memory_policy.propose import binding_of
from agentledger.shell import metrics
from agentledger.stores.artifacts import ArtifactStore

log = structlog.get_logger()

GENERATION_SCHEMA = "context-generation/v1"
_generation = msgspec.json.Decoder(Generation)
# How long an identical concurrent build waits for the one that froze the generation first.
TWIN_WAIT_S = 30.0
# The candidates a build asks for, as a multiple of its budget: memory items whose rendered
# tokens fill POOL_FACTOR budgets, and as many document chunks as would (at CHUNK_TOKENS each,
# at least DOCUMENTS_MIN), so that selection has more to choose from than it can take.
POOL_FACTOR = 3
CHUNK_TOKENS = 300
DOCUMENTS_MIN = 8
DOCUMENTS_MAX = 200
# The memory read's budget is capped as ``ReadRequest`` caps it.
MEMORY_POOL_MAX = 200_000


@dataclass
class _Job:
    """One build's inputs and decisions, shared by its steps."""

    request: BuildRequest
    state: WorkingMemory
    count: Callable[[str], int]
    budget: int
    lineage: str
    active: CompactionCheckpoint | None
    history: list[PlainTurn]
    input_unit: Unit
    common: list[Unit]
    head: dict[str, Any]
    now: float
    # The conversation's forget count the build read (part of its lineage).
    forgets: int = 0
    # Data subjects whose content the build opened (turns, variables, memory; the active
    # checkpoint's are ``active_subjects``); the data subject of each opened turn by ordinal.
    subjects: set[str] = field(default_factory=set)
    turn_subjects: dict[int, str] = field(default_factory=dict)
    # The subjects of the active checkpoint (None: unknown) and the memory records read.
    active_subjects: list[str] | None = field(default_factory=list)
    memory_ids: list[str] = field(default_factory=list)
    direct: list[Unit] = field(default_factory=list)
    plan: CompactionPlan = field(default_factory=lambda: CompactionPlan(reason="", high_watermark_tokens=0,
                                                                        measured_tokens=0))

    def units_with(self, checkpoint: CompactionCheckpoint | None, after: int) -> list[Unit]:
        """The common units, ``checkpoint`` (if any), the turns after ``after``, the input."""
        kept = [turn_unit(t) for t in self.history if t.ordinal > after]
        cp = [checkpoint_unit(checkpoint)] if checkpoint is not None else []
        return [*self.common, *cp, *kept, self.input_unit]

    def choose(self, units: list[Unit]) -> Selection:
        r = self.request
        return select(units, self.budget, self.count, system_parts=r.system, tools=r.tools, now=self.now)


def _overtaken(generation_id: str) -> ConflictError:
    return ConflictError(f"a forget request reached what generation {generation_id} was built from while it was "
                         "being built: nothing of it was kept; build again", code="forgotten",
                         path="$.generation_id")


class _RawReply(msgspec.Struct, frozen=True):
    """A reply that carries a stored generation's bytes as they are."""

    ok: bool
    generation: msgspec.Raw


def _ordinals(units: Sequence[Unit], selection: Selection) -> Coverage | None:
    taken = sorted(u.ordinal for u in selection.units if u.source == "turn" and u.ordinal is not None)
    return Coverage(taken[0], taken[-1]) if taken else None


def branch_of(name: str, selection: Selection, checkpoint_id: str | None = None) -> Branch:
    r = selection.rendered
    return Branch(name=name, messages=r.messages, rendered=r.text, tokens=r.tokens,
                  unit_tokens=sum(r.unit_tokens.values()), separator_tokens=r.separator_tokens,
                  trace=selection.trace, checkpoint_id=checkpoint_id,
                  exact_turns=_ordinals(selection.units, selection))


def _goal_unit(state: WorkingMemory) -> Unit | None:
    if state.goal is None:
        return None
    criteria = "\n".join(f"- {c}" for c in state.goal.acceptance_criteria) or "- (none)"
    return Unit(id="goal", source="goal", text=f"{state.goal.text}\nacceptance criteria:\n{criteria}",
                version=state.goal.goal_hash[:16], mandatory=True, relevance=1.0, verifiability=1.0,
                verbatim=True)


def _json(value: Any) -> str:
    return value if isinstance(value, str) else msgspec.json.encode(value).decode()


def _budget_units(state: WorkingMemory) -> list[Unit]:
    resources = sorted({*state.budget_limits, *state.budget_used, *state.budget_reserved})
    if not resources:
        return []
    lines = []
    for r in resources:
        limit = state.budget_limits.get(r)
        used, reserved = state.budget_used.get(r, 0), state.budget_reserved.get(r, 0)
        left = limit - used - reserved if limit is not None else None
        lines.append(f"{r}: limit {limit}, used {used}, reserved {reserved}, left {left}")
    return [Unit(id="wm:budget", source="working_memory", text="\n".join(lines), relevance=0.6,
                 verifiability=1.0, verbatim=True, kind="budget")]


def _artifact_units(state: WorkingMemory) -> list[Unit]:
    """References (uri + hash + schema) of the current artifacts, never the payload: one a
    newer artifact replaced (``supersedes``) would only put a second value of it in the context."""
    return [Unit(id=f"artifact:{name}", source="artifact",
                 text=f"artifact {name}: {ref.uri} (schema {ref.schema}, blake3 {ref.blake3})",
                 version=str(ref.version), relevance=0.3, verifiability=1.0, verbatim=True,
                 attrs=(("uri", ref.uri), ("blake3", ref.blake3), ("schema", ref.schema)))
            for name, ref in sorted(state.artifacts.items()) if name not in state.replaced_artifacts]


def wm_units(state: WorkingMemory, variables: Mapping[str, Any]) -> list[Unit]:
    """Working Memory as units: the current step (mandatory), progress, open questions,
    variables, budget and artifact references (never their payload)."""
    out: list[Unit] = []
    goal = _goal_unit(state)
    if goal is not None:
        out.append(goal)
    status = {sid: st.status for sid, st in state.step_states.items()}
    steps = {s.id: s for s in state.steps}
    running = [s for s in state.steps if status.get(s.id) == "running"]
    ready = next_ready(state.steps, status) if state.status == "open" else []
    current = running[0] if running else (steps[ready[0]] if ready else None)
    if current is not None:
        st = state.step_states.get(current.id)
        lines = [f"current step: {current.id}" + (f" ({current.title})" if current.title else ""),
                 f"status: {status.get(current.id, 'pending')}" + (f", attempt {st.attempt}" if st else "")]
        if current.depends_on:
            lines.append(f"depends on: {', '.join(current.depends_on)}")
        if current.tool:
            lines.append(f"tool: {current.tool}")
        if current.side_effect:
            lines.append("side effect: yes (idempotency key required)")
        if st is not None and st.idempotency_key:
            lines.append(f"idempotency key: {st.idempotency_key}")
        if st is not None and st.error_code:
            lines.append(f"last error code: {st.error_code}")
        out.append(Unit(id="wm:step", source="working_memory", text="\n".join(lines),
                        version=f"plan{state.plan_version}", mandatory=True, relevance=1.0, verifiability=1.0,
                        verbatim=True, kind="current_step"))
    if state.steps:
        done = [f"{s.id}" + (f" {s.title}" if s.title else "") for s in state.steps
                if status.get(s.id) == "succeeded"]
        not_done = [f"{s.id}: {status.get(s.id, 'pending')}" for s in state.steps
                    if status.get(s.id) != "succeeded"]
        reductions = structured_reductions(done=done, not_done=not_done)
        out.append(Unit(id="wm:progress", source="working_memory", text=reductions[0].text,
                        version=f"plan{state.plan_version}", relevance=0.7, verifiability=1.0,
                        reductions=reductions[1:], kind="progress"))
    for qid, q in state.questions.items():
        if q.status != "open":
            continue
        out.append(Unit(id=f"wm:question:{qid}", source="working_memory",
                        text=f"open question{' (blocking)' if q.blocking else ''}: {q.text}",
                        relevance=1.0 if q.blocking else 0.8, verifiability=1.0, kind="question",
                        mandatory=q.blocking))
    for name in sorted(variables):
        var = state.variables[name]
        out.append(Unit(id=f"wm:var:{name}", source="working_memory", text=f"{name} = {_json(variables[name])}",
                        version=str(var.seq), key=f"var:{name}", relevance=0.6, verifiability=1.0,
                        verbatim=True, kind="variable"))
    out += _budget_units(state)
    out += _artifact_units(state)
    return out


# Memory sources a model or an outside document produced: admitted as data, with risk.
_RISKY_SOURCES = {"model_inference": 0.4, "external_document": 0.6, "tool_output": 0.2}


def memory_units(reply: ReadReply, *, dated: bool = False) -> list[Unit]:
    """One unit per item, in the read's order; relevance from that rank (``rank_relevance``).

    Items are lines of the memory block of their kind and scope (``render``), so a line is
    the value alone, or ``key: value`` when the key says more than the value's own words;
    ``dated`` (the query names a time, ``core.memory.when``): after the day it was observed,
    ``2026-03-09 value``, so the model can answer "when" and order what changed.

    A record whose words came from outside (``LOW_AUTHORITY`` or less: a document, a page, mail,
    tool output quoting them, a model's inference, unconfirmed) is a line of a block marked
    ``origin="outside"``: a poisoned record the memory policy did not recognise still reaches the
    model as something a stranger wrote, apart from what the user or a project said, whatever its
    words claim."""
    receipt = reply.receipt.receipt_id if reply.receipt is not None else ""
    out = []
    for rank, item in enumerate(reply.items, start=1):
        value = "(erased)" if item.erased else _json(item.value)
        text = value if item.erased or key_repeats_value(item.key, item.value) else f"{item.key}: {value}"
        text = f"{item.observed_at:%Y-%m-%d} {text}" if dated else text
        out.append(Unit(id=f"memory:{item.record_id}", source="memory", text=text,
                        version=str(item.record_version), key=f"memory:{item.scope}:{item.key}",
                        relevance=rank_relevance(rank), verifiability=item.authority / 6,
                        risk=_RISKY_SOURCES.get(item.source, 0.0), kind=item.kind,
                        gated="erased" if item.erased else None,
                        attrs=(("kind", item.kind), ("receipt", receipt), ("scope", item.scope),
                               *((("origin", "outside"),) if item.authority <= LOW_AUTHORITY else ()))))
    return out


def document_units(hits: Sequence[Any]) -> list[Unit]:
    """One unit per chunk, in the search's order; relevance from that rank, as memory's."""
    out = []
    for rank, h in enumerate(hits, start=1):
        out.append(Unit(id=h.unit_id, source="document", text=h.text, version=str(h.version),
                        relevance=rank_relevance(rank), verifiability=0.5, risk=0.3, kind="document",
                        attrs=(("doc", h.doc_id), ("chunk", str(h.chunk_index)), ("source", h.source or ""))))
    return out


def checkpoint_unit(cp: CompactionCheckpoint) -> Unit:
    return Unit(id=f"checkpoint:{cp.checkpoint_id}", source="checkpoint", text=summary_text(cp.summary),
                version=f"{cp.coverage.first}-{cp.coverage.through}", mandatory=True, relevance=0.9,
                verifiability=1.0, kind="compaction",
                attrs=(("coverage", f"{cp.coverage.first}..{cp.coverage.through}"), ("lineage", cp.lineage)))


def _request_key(request: BuildRequest) -> bytes:
    kept = msgspec.to_builtins(request)
    kept.pop("generation_id", None)
    kept.pop("regenerate", None)
    return msgspec.json.encode(kept, order="sorted")


def generation_id_for(request: BuildRequest, epoch: int) -> str:
    """The same request in the same epoch is the same generation (a retry, a reconnect)."""
    h = blake3.blake3(b"agentledger/generation-id/v1\x00" + str(epoch).encode() + b"\x00" + _request_key(request))
    return f"g{h.hexdigest()[:32]}"


class Builder:
    """Answers ``context.build``, ``get`` and ``trace``."""

    def __init__(self, settings: Settings, nc: Client, store: ContextStore, artifacts: ArtifactStore, *,
                 bindings: BindingRegistry, key: SigningKey, documents: DocumentIndex | None = None,
                 compactors: Mapping[str, Compactor] | None = None) -> None:
        self.settings = settings
        self.store = store
        self.artifacts = artifacts
        self.sources = Sources(settings, nc, store)
        self._bindings = bindings
        self.key = key
        self.documents = documents
        self.compactors = registry(settings, compactors or {})
        # Build latencies in ms, newest last (figures for the report and the benchmark).
        self.latencies: list[float] = []
        # Builds running now, by tenant (an eviction waits for those that may hold old keys).
        self._running: dict[str, set[asyncio.Event]] = {}

    @contextlib.contextmanager
    def _in_flight(self, tenant: str) -> Iterator[None]:
        done = asyncio.Event()
        self._running.setdefault(tenant, set()).add(done)
        try:
            yield
        finally:
            done.set()
            running = self._running.get(tenant)
            if running is not None:
                running.discard(done)
                if not running:
                    del self._running[tenant]

    async def settle(self, tenant: str, timeout: float) -> int:  # noqa: ASYNC109 - a bounded wait
        """Wait (at most ``timeout``) for the builds of ``tenant`` running now to end; how many.

        After a forget request destroyed keys and the caches were evicted, a build that
        started before may still hold plaintext it opened with an old key; once it ended, its
        generation is in the table, where the forget request's generations step finds it.
        """
        waiting = list(self._running.get(tenant, ()))
        if waiting:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*(e.wait() for e in waiting)), timeout)
        return len(waiting)

    # ---- get / trace ------------------------------------------------------------------------------

    async def stored(self, tenant: str, generation_id: str, caller: Caller | None = None,
                     path: str = "$.generation_id") -> tuple[GenerationRow, bytes]:
        """A generation's row and its stored bytes. With ``caller``: one built in user or project
        scopes the caller's agent is not bound to is answered like a missing one."""
        row = await self.store.generation(tenant, generation_id)
        if row is not None and caller is not None and not await self._may_read(caller, row):
            row = None
        if row is None:
            raise NotFoundError(f"no generation {generation_id!r} in tenant {tenant!r}", path=path)
        if row.artifact_uri is None:
            # Frozen, never finished (the builder stopped mid-compaction): the frozen one is final.
            try:
                data = await self.artifacts.get(row.frozen_uri, tenant=tenant)
            except NotFoundError as exc:
                if exc.code != "artifact_missing":
                    raise
                return await self._frozen_input_gone(row, exc)
            await self.store.finish(row.tenant, row.generation_id, digest=row.frozen_digest,
                                    uri=row.frozen_uri, staged=None)
            row = row._replace(artifact_uri=row.frozen_uri, digest=row.frozen_digest)
            return row, data
        return row, await self.artifacts.get(row.artifact_uri, tenant=tenant)

    async def _frozen_input_gone(self, row: GenerationRow, missing: NotFoundError) -> tuple[GenerationRow, bytes]:
        """An unfinished row whose frozen input is gone: a compacted build erases its frozen
        input once it has finished (``_compacting``), so the build finished and this row was
        put back to its frozen version outside the services; any instance, however new, can
        tell. Unless the build finished just now, between the row's read and the artifact's."""
        again = await self.store.generation(row.tenant, row.generation_id)
        if again is not None and again.artifact_uri is not None:
            return again, await self.artifacts.get(again.artifact_uri, tenant=row.tenant)
        if again is None:
            raise missing
        log.error("context.integrity_violation", generation=row.generation_id, where="generation")
        raise IntegrityViolationError(
            f"generation {row.generation_id} of tenant {row.tenant} is back at its frozen, unfinished "
            "row, but its frozen input was erased when its build finished: the row was put back "
            "outside the services", where="generation")

    async def _may_read(self, caller: Caller, row: GenerationRow) -> bool:
        """Whether ``caller`` may see the generation: the scopes it read memory in are the
        caller's, and an agent is bound to every data subject whose content it holds."""
        bound = await binding_of(self._bindings, caller, row.tenant)
        if bound is None:
            return True
        if row.subjects is None or not set(row.subjects) <= bound.users:
            return False
        if row.user_id is None and row.project_id is None:
            return True
        try:
            allowed_scopes(caller.tenant, False, bound,
                           ReadRequest(tenant=row.tenant, user_id=row.user_id, project_id=row.project_id))
        except PermissionDeniedError:
            return False
        return True

    async def get(self, caller: Caller, request: GenerationRef) -> bytes:
        _, data = await self.stored(request.tenant, request.generation_id, caller)
        return msgspec.json.encode(_RawReply(ok=True, generation=msgspec.Raw(data)))

    async def trace(self, caller: Caller, request: GenerationRef) -> TraceReply:
        _, data = await self.stored(request.tenant, request.generation_id, caller)
        gen = _generation.decode(data)
        ordered = sorted(gen.branches, key=lambda b: b.name != gen.selected)
        return TraceReply(ok=True, generation_id=gen.generation_id, selected=gen.selected,
                          branches={b.name: b.trace for b in ordered})

    # ---- build --------------------------------------------------------------------------------------

    async def build(self, caller: Caller, request: BuildRequest) -> bytes:
        with self._in_flight(request.tenant), metrics.outcome(metrics.CONTEXT_BUILDS, tenant=request.tenant):
            return await self._build_request(caller, request)

    async def _build_request(self, caller: Caller, request: BuildRequest) -> bytes:
        started = time.perf_counter()
        tenant, task = request.tenant, request.task_id
        bound = await binding_of(self._bindings, caller, tenant)
        scopes_request = ReadRequest(tenant=tenant, task_id=task, session_id=request.session_id,
                                     user_id=request.user_id, project_id=request.project_id)
        allowed_scopes(caller.tenant, bound is None, bound or Bindings(), scopes_request)
        try:
            counter = counter_for(request.model, request.encoding)
        except ContractError as exc:
            exc.path = "$.encoding"
            raise
        name = request.compaction.compactor
        if name == "structured":
            name = self.settings.context_compactor
        compactor = pick(self.compactors, name, "$.compaction.compactor")
        if request.generation_id is not None and not request.regenerate:
            row, data = await self.stored(tenant, request.generation_id, caller)
            if row.task_id != task:
                raise ContractError(f"generation {request.generation_id!r} belongs to another task",
                                    code="invalid_value", path="$.generation_id")
            await self._check_epoch(row)
            return self._reply(data)
        if request.regenerate and request.generation_id is None:
            raise ContractError("regenerate names the generation it replaces", code="missing_field",
                                path="$.generation_id")
        state = await self.sources.caught_up(tenant, task)
        if request.input_ordinal > state.turns:
            raise NotFoundError(f"task {task!r} has {state.turns} turns; turn {request.input_ordinal} is not in "
                                "the ledger", path="$.input_ordinal")
        if request.input_ordinal <= state.lineage_base:
            raise ContractError(f"turn {request.input_ordinal} was cleared (the conversation starts after turn "
                                f"{state.lineage_base})", code="cleared_turn", path="$.input_ordinal")
        regenerated_from = None
        if request.regenerate:
            assert request.generation_id is not None
            old, _ = await self.stored(tenant, request.generation_id, caller)
            regenerated_from = old.generation_id
            generation_id = f"g{secrets.token_hex(16)}"
        else:
            generation_id = generation_id_for(request, state.epoch)
            existing = await self.store.generation(tenant, generation_id)
            if existing is not None:
                if not await self._may_read(caller, existing):
                    raise _not_bound()
                return self._reply((await self._finished(existing))[1])
        data = await self._build(request, state, counter, compactor=compactor, generation_id=generation_id,
                                 regenerated_from=regenerated_from,
                                 readable=None if bound is None else bound.users)
        ms = round((time.perf_counter() - started) * 1000, 3)
        self.latencies.append(ms)
        del self.latencies[:-1000]
        log.info("context.built", generation=generation_id, ms=ms, bytes=len(data))
        return self._reply(data)

    def _reply(self, data: bytes) -> bytes:
        return msgspec.json.encode(_RawReply(ok=True, generation=msgspec.Raw(data)))

    async def _check_epoch(self, row: GenerationRow) -> None:
        state = await self.store.state(row.tenant, row.task_id)
        if state is not None and state.epoch != row.epoch:
            raise ConflictError(f"generation {row.generation_id} belongs to epoch {row.epoch}; the conversation "
                                f"was cleared since (epoch {state.epoch}): build again", code="stale_epoch",
                                path="$.generation_id")

    async def _finished(self, row: GenerationRow) -> tuple[GenerationRow, bytes]:
        """A generation another build froze: wait (bounded) for it to finish, then its bytes."""
        deadline = time.monotonic() + TWIN_WAIT_S
        while row.artifact_uri is None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            found = await self.store.generation(row.tenant, row.generation_id)
            if found is None:  # a forget request deleted it meanwhile
                raise _overtaken(row.generation_id)
            row = found
        return await self.stored(row.tenant, row.generation_id)

    async def _build(self, request: BuildRequest, state: WorkingMemory, counter: Counter, *,
                     compactor: Compactor, generation_id: str, regenerated_from: str | None,
                     readable: frozenset[str] | None) -> bytes:
        """Gather, then build; ``readable``: the data subjects whose content the caller may be
        shown (None: all), refused before anything is frozen."""
        job = await self._gather(request, state, counter, generation_id=generation_id,
                                 regenerated_from=regenerated_from)
        if readable is not None:
            held = None if job.active_subjects is None else job.subjects | set(job.active_subjects)
            if held is None or not held <= readable:
                raise _not_bound()
        the_plan = job.plan
        if the_plan.outcome != "compacted":
            if the_plan.outcome == "fallback":  # degraded (a gap after the coverage): recent exact turns only
                recent = the_plan.recent_exact
                name, units = "fallback", job.units_with(None, recent.first - 1 if recent else request.input_ordinal)
            else:
                name, units = "direct", job.direct
            cp_id = job.active.checkpoint_id if job.active is not None and name == "direct" else None
            gen = self._generation(job.head, name, [branch_of(name, job.choose(units), cp_id)], the_plan)
            data, uri = await self._put(gen)
            if not await self._freeze(job, gen, uri, with_checkpoint=cp_id is not None):
                return await self._twin(job)
            await self._complete(job, gen, uri)
            return data
        return await self._compacting(job, compactor)

    async def _complete(self, job: _Job, gen: Generation, uri: str, *, staged: CompactionCheckpoint | None = None,
                        staged_subjects: list[str] | None = None, stored: Sequence[str] = ()) -> None:
        """Stage the checkpoint and finish the row, unless a forget request overtook the build:
        then what it stored is erased and the build answers ``forgotten``. ``stored``: the frozen
        input of a compacted build, marked on the row as still to be erased."""
        r = job.request
        metrics.context_built(gen)
        if await self.store.complete(tenant=r.tenant, task_id=r.task_id, generation_id=gen.generation_id,
                                     epoch=job.state.epoch, forgets=job.forgets, digest=gen.digest, uri=uri,
                                     staged=staged, staged_subjects=staged_subjects, frozen_kept=bool(stored)):
            return
        for stale in {uri, *stored}:
            with contextlib.suppress(Exception):
                await self.artifacts.erase(stale)
        log.info("context.build_overtaken", generation=gen.generation_id)
        raise _overtaken(gen.generation_id)

    async def _gather(self, request: BuildRequest, state: WorkingMemory, counter: Counter, *,
                      generation_id: str, regenerated_from: str | None) -> _Job:
        """Everything a build decides on: budget, units, the active checkpoint, the plan."""
        tenant, task = request.tenant, request.task_id
        base = state.lineage_base
        conv = await self.store.conversation(tenant, task, epoch=state.epoch,
                                             lineage=lineage_id(tenant, task, state.epoch, base), lineage_base=base)
        forgets = conv.forgets if conv.epoch == state.epoch else 0
        lineage = lineage_id(tenant, task, state.epoch, base, forgets)
        active, active_subjects, degraded_reason = await self._active(conv, lineage)
        if request.compaction.mode == "off":
            active, active_subjects = None, []
        raw_turns = await self.store.turns(tenant, task, base, request.input_ordinal)
        texts = await self.sources.turn_texts(tenant, task, raw_turns)
        turns = [PlainTurn(t.ordinal, t.role, texts[t.ordinal]) for t in raw_turns]
        turn_subjects = {t.ordinal: t.sealed.subject for t in raw_turns
                         if t.sealed is not None and texts[t.ordinal] is not None}
        assert turns[-1].ordinal == request.input_ordinal
        count = counter.count
        system_tokens = sum(count(system_segment(p)) for p in request.system)
        tools_tokens = count(tools_segment(request.tools)) if request.tools else 0
        b = budget(request.window_tokens, request.reserve_tokens, system_tokens, tools_tokens, counter.margin)
        variables, variable_subjects = await self._variables(state)
        common = wm_units(state, variables)
        memory, memory_ids, memory_subjects = await self._memory(request, b)
        common += memory
        documents = await self._documents(request, b)
        common += documents or []
        degraded = [name for name, got in (("memory", memory_ids), ("documents", documents)) if got is None]
        if degraded:
            generation_id = _degraded_id(generation_id, degraded)
            _check_required(request, degraded)
            log.warning("context.build_degraded", tenant=tenant, task=task, generation=generation_id,
                        missing=degraded)
        head = {"generation_id": generation_id, "tenant": tenant, "task_id": task,
                "input_ordinal": request.input_ordinal, "epoch": state.epoch, "lineage": lineage,
                "encoding": counter.encoding, "exact": counter.exact, "margin": counter.margin,
                "window_tokens": request.window_tokens, "reserve_tokens": request.reserve_tokens,
                "system_tokens": system_tokens, "tools_tokens": tools_tokens, "budget_tokens": b,
                "created_at": datetime.now(UTC).isoformat(), "transcript_revision": state.turns,
                "regenerated_from": regenerated_from, "degraded": degraded}
        subjects = {*turn_subjects.values(), *variable_subjects, *memory_subjects}
        job = _Job(request=request, state=state, count=count, budget=b, lineage=lineage, active=active,
                   history=turns[:-1], input_unit=turn_unit(turns[-1], mandatory=True, source="input"),
                   common=common, head=head, now=time.time(), forgets=forgets, subjects=subjects,
                   turn_subjects=turn_subjects, active_subjects=active_subjects, memory_ids=memory_ids or [])
        policy = request.compaction
        covered = active.coverage.through if active is not None else base
        job.direct = job.units_with(active, covered)
        measured = render(job.direct, count=count).budgeted_tokens
        if policy.mode == "off":
            job.plan = CompactionPlan(reason="compaction_off", measured_tokens=measured,
                                      high_watermark_tokens=math.floor(b * policy.high_watermark))
        else:
            job.plan = plan(job.history, lineage_base=base,
                            active_checkpoint_coverage_end=covered if active else None, measured_tokens=measured,
                            cap=b, high_watermark=policy.high_watermark,
                            recent_exact_tokens=policy.recent_exact_tokens, count=count,
                            active_checkpoint_id=active.checkpoint_id if active else None)
        if degraded_reason:
            job.plan = msgspec.structs.replace(job.plan, degraded=True, failure=job.plan.failure or degraded_reason)
        return job

    async def _freeze(self, job: _Job, gen: Generation, uri: str, *, with_checkpoint: bool) -> bool:
        """Index the frozen generation. ``with_checkpoint``: it renders the active checkpoint's
        summary (directly, or folded into the one the compactor makes), so it holds the data
        subjects that one holds (None: unknown)."""
        r = job.request
        subjects: set[str] | None = job.subjects
        if with_checkpoint and job.active is not None:
            subjects = None if job.active_subjects is None else job.subjects | set(job.active_subjects)
        return await self.store.freeze(  # type: ignore[no-any-return]
            generation_id=gen.generation_id, tenant=r.tenant, task_id=r.task_id, frozen_digest=gen.digest,
            frozen_uri=uri, input_ordinal=r.input_ordinal, transcript_revision=job.state.turns,
            epoch=job.state.epoch, lineage=job.lineage, regenerated_from=gen.regenerated_from,
            user_id=r.user_id, project_id=r.project_id, subjects=subjects, memory_ids=job.memory_ids)

    async def _twin(self, job: _Job) -> bytes:
        """An identical build froze this generation first: its result is this one's."""
        row = await self.store.generation(job.request.tenant, job.head["generation_id"])
        assert row is not None
        return (await self._finished(row))[1]

    async def _compacting(self, job: _Job, compactor: Compactor) -> bytes:
        """Freeze both branches, run the compactor, stage its candidate or select the fallback."""
        the_plan, request, generation_id = job.plan, job.request, job.head["generation_id"]
        assert the_plan.compacted is not None
        recent = the_plan.recent_exact
        first_recent = recent.first if recent is not None else request.input_ordinal
        fallback = branch_of("fallback", job.choose(job.units_with(None, first_recent - 1)))
        # The primary branch renders the staged summary (the previous one folded in): the
        # generation holds what the active checkpoint held, whichever branch is selected.
        frozen_plan = msgspec.structs.replace(the_plan, outcome="fallback", failure=FROZEN_FAILURE)
        frozen = self._generation(job.head, "fallback", [fallback], frozen_plan)
        _, frozen_uri = await self._put(frozen)
        if not await self._freeze(job, frozen, frozen_uri, with_checkpoint=True):
            return await self._twin(job)
        base = job.state.lineage_base
        coverage = Coverage(base + 1, the_plan.compacted.through)
        candidate, failure = await self._compact(compactor, CompactionInput(
            tenant=request.tenant, task_id=request.task_id, generation_id=generation_id,
            previous=job.active.summary if job.active is not None else None,
            turns=[t for t in job.history if the_plan.compacted.first <= t.ordinal <= the_plan.compacted.through],
            coverage=coverage, lineage_base=base), timeout=self.settings.context_compactor_timeout_s)
        staged: CompactionCheckpoint | None = None
        branches = [fallback]
        if candidate is not None:
            policy = request.compaction
            try:
                staged = stage_candidate(
                    candidate, checkpoint_id=checkpoint_id_for(generation_id, coverage.through),
                    generation_id=generation_id, tenant=request.tenant, task_id=request.task_id,
                    epoch=job.state.epoch, lineage=job.lineage, lineage_base=base, coverage=coverage,
                    source_digest=source_digest(job.history, coverage.through, lineage_base=base),
                    policy_version=policy_version(name_of(compactor, self.compactors), policy.high_watermark,
                                                  policy.recent_exact_tokens),
                    private_key=self.key.private)
                primary = job.choose(job.units_with(staged, first_recent - 1))
                branches = [branch_of("primary", primary, staged.checkpoint_id), fallback]
            except InvalidSummaryError as exc:
                failure, staged = f"invalid_output: {exc.message}"[:500], None
            except BudgetTooSmallError:
                failure, staged = "reassembly_over_cap", None
        staged_subjects: list[str] | None = None
        if staged is not None:
            staged_subjects = self._covered_subjects(job, coverage)
            final = self._generation(job.head, "primary", branches, msgspec.structs.replace(the_plan,
                                                                                            outcome="compacted"))
        else:
            final = self._generation(job.head, "fallback", branches,
                                     msgspec.structs.replace(the_plan, outcome="fallback", failure=failure))
        log.info("context.compaction", generation=generation_id, outcome="compacted" if staged else "fallback",
                 coverage=f"{coverage.first}..{coverage.through}", failure=failure.split(":")[0])
        data, uri = await self._put(final)
        await self._complete(job, final, uri, staged=staged, staged_subjects=staged_subjects, stored=[frozen_uri])
        # Finished: the frozen input is the final generation's fallback branch (``frozen_form``
        # re-derives it, and the row's tagged frozen digest pins it), so it is erased. Its absence
        # tells every instance, one started later included, that a row put back to its frozen
        # version had finished (``_frozen_input_gone``).
        await self._erase_frozen(request.tenant, generation_id, frozen_uri)
        return data

    async def _erase_frozen(self, tenant: str, generation_id: str, frozen_uri: str) -> bool:
        """A finished compacted build's frozen input erased and its row's mark cleared; whether
        it was. Left marked on a failure, for ``erase_frozen_left``."""
        try:
            await self.artifacts.erase(frozen_uri)
            await self.store.frozen_erased(tenant, generation_id)
        except Exception as exc:  # noqa: BLE001 - the answer stands; the next start erases it
            log.warning("context.frozen_input_kept", generation=generation_id, error=type(exc).__name__)
            return False
        return True

    async def erase_frozen_left(self, batch: int = 500) -> int:
        """At start: the frozen inputs finished compacted builds left (their process died, or its
        erase failed, between the finish and the erase), erased; how many. Until then a row of
        theirs put back to frozen is refused only by instances that heard the finish."""
        erased = 0
        while left := await self.store.frozen_left(batch):
            done = [await self._erase_frozen(tenant, gid, uri) for tenant, gid, uri in left]
            erased += sum(done)
            if not all(done):
                break
        if erased:
            log.info("context.frozen_inputs_erased", generations=erased)
        return erased

    @staticmethod
    def _covered_subjects(job: _Job, coverage: Coverage) -> list[str] | None:
        """The data subjects a checkpoint over ``coverage`` holds: its turns' and those of the
        summary it folded in (None: that one's are unknown)."""
        if job.active is not None and job.active_subjects is None:
            return None
        covered = {s for o, s in job.turn_subjects.items() if coverage.first <= o <= coverage.through}
        return sorted(covered | set(job.active_subjects or ()))

    def _generation(self, head: dict[str, Any], selected: str, branches: list[Branch],
                    the_plan: CompactionPlan) -> Generation:
        gen = Generation(**head, selected=selected, branches=branches, digest="", compaction=the_plan)
        return msgspec.structs.replace(gen, digest=generation_digest(gen))

    async def _put(self, gen: Generation) -> tuple[bytes, str]:
        data = msgspec.json.encode(gen)
        ref = await self.sources.put_artifact(data, tenant=gen.tenant, schema=GENERATION_SCHEMA)
        return data, ref.uri

    async def _compact(self, compactor: Compactor, request: CompactionInput, *,
                       timeout: float) -> tuple[Summary | None, str]:  # noqa: ASYNC109 - the compactor's deadline
        """The compactor's summary, or None and why not (any failure selects the frozen fallback)."""
        try:
            out = await asyncio.wait_for(compactor(request), timeout)
        except TimeoutError:
            return None, f"timeout: the compactor did not answer within {timeout:g} s"
        except Exception as exc:  # noqa: BLE001 - a compactor's failure is a fallback, never an error
            return None, f"compactor_failed: {type(exc).__name__}"
        if isinstance(out, Summary):
            return out, ""
        try:
            return parse_summary(out), ""
        except InvalidSummaryError as exc:
            return None, f"invalid_output: {exc.message}"[:500]
        except Exception as exc:  # noqa: BLE001
            return None, f"invalid_output: {type(exc).__name__}"

    async def _active(self, conv: Any, lineage: str) -> tuple[CompactionCheckpoint | None, list[str] | None, str]:
        """The conversation's active checkpoint if it still holds (lineage, receipt) and the data
        subjects it holds (None: unknown), else why not."""
        if conv.active_checkpoint_id is None:
            return None, [], ""
        found = await self.store.checkpoint_with_subjects(self.store.pool, conv.tenant, conv.active_checkpoint_id)
        if found is None:
            return None, [], "active checkpoint missing"
        cp, subjects = found
        if cp.lineage != lineage or cp.epoch != conv.epoch:
            return None, [], "active checkpoint of another lineage"
        if not verify_checkpoint(cp, public_key_from_bytes(self.key.public)):
            log.warning("context.active_checkpoint_unverified", checkpoint=cp.checkpoint_id)
            return None, [], "active checkpoint does not verify"
        return cp, subjects, ""

    async def _variables(self, state: WorkingMemory) -> tuple[dict[str, Any], set[str]]:
        """Variable values, sealed ones opened (an erased one is left out), and the data
        subjects of those opened."""
        out: dict[str, Any] = {}
        subjects: set[str] = set()
        for name, var in state.variables.items():
            if var.sealed is None:
                out[name] = var.value
                continue
            plain = await unseal(var.sealed, state.tenant, state.task_id, self.sources.keyring())
            if plain is not None:
                out[name] = msgspec.json.decode(plain)
                subjects.add(var.sealed.subject)
        return out, subjects

    async def _memory(self, request: BuildRequest,
                      budget_tokens: int) -> tuple[list[Unit], list[str] | None, set[str]]:
        """Memory units (a read filling ``POOL_FACTOR`` times the build's budget, no item cap),
        the ids of the records read (None: the memory-policy service did not answer), and the
        data subjects of the personal ones whose value was opened."""
        if request.memory_query is None:
            return [], [], set()
        reply = await self.sources.memory(ReadRequest(
            tenant=request.tenant, query=request.memory_query, task_id=request.task_id,
            session_id=request.session_id, user_id=request.user_id, project_id=request.project_id,
            encoding=request.encoding, budget_tokens=max(1, min(MEMORY_POOL_MAX, POOL_FACTOR * budget_tokens)),
            purpose="context build"))
        if reply is None:
            return [], None, set()
        ids = sorted({item.record_id for item in reply.items})
        opened = [item for item in reply.items if not item.erased and item.sensitivity == "personal"]
        subjects = await self.store.memory_subjects(request.tenant, [item.record_id for item in opened])
        # A user-scoped personal record is about its user, whatever else the projection says.
        subjects |= {scope.rsplit("/", 1)[-1] for item in opened
                     if (scope := item.scope).startswith("user/") and not scope.endswith("/")}
        said = [f"{item.key} {_json(item.value)}" for item in reply.items if not item.erased]
        when = usable(when_of(request.memory_query), said)
        return memory_units(reply, dated=when is not None), ids, subjects

    async def _documents(self, request: BuildRequest, budget_tokens: int) -> list[Unit] | None:
        """Document units (None: the search did not answer)."""
        if request.document_query is None or self.documents is None:
            return []
        k = min(DOCUMENTS_MAX, max(DOCUMENTS_MIN, POOL_FACTOR * budget_tokens // CHUNK_TOKENS))
        try:
            vector = await self.documents.embed(request.document_query)
            hits = await self.documents.search(self.store.pool, request.tenant, request.document_query, vector, k)
        except (OSError, UnavailableError) as exc:
            log.warning("context.documents_unavailable", error=type(exc).__name__)
            return None
        return document_units(hits)


def _degraded_id(generation_id: str, missing: list[str]) -> str:
    """A build without a source it asked for is not the build of its request: it is frozen
    under an id of its own, so the same request, once the source answers, is built in full
    (not answered with this one); asked again while the source is still away, it is this one."""
    h = blake3.blake3(b"agentledger/degraded-generation/v1\x00" + generation_id.encode() + b"\x00"
                      + ",".join(missing).encode())
    return f"g{h.hexdigest()[:32]}"


def _check_required(request: BuildRequest, missing: list[str]) -> None:
    """``unavailable`` (retryable) when a source the caller requires did not answer."""
    required = [name for name in missing if name in request.require]
    if required:
        field = "memory_query" if required[0] == "memory" else "document_query"
        raise UnavailableError(f"the {required[0]} source did not answer and the build requires it "
                               "(require); retry, or build without requiring it", path=f"$.{field}")


def _not_bound() -> PermissionDeniedError:
    return PermissionDeniedError("the conversation holds personal content of users this agent is not bound to; "
                                 "an operator binds it (agentledger agent bind --user)", code="subject_not_bound",
                                 path="$.task_id")


def name_of(compactor: Compactor, compactors: Mapping[str, Compactor]) -> str:
    return next((n for n, c in compactors.items() if c is compactor), "custom")
