"""Requests and replies of the context-builder (``<prefix>.context.<action>``).

A build turns a task's ledger, Working Memory, memory and documents into the exact
input of one model call: budgeted, counted with the real tokenizer, explained unit
by unit, and frozen as a generation before the model runs. The caller is the
authenticated connection (``tenant`` must be its own). Every Struct forbids
unknown fields.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

from agentledger.contracts.api import ErrorBody, LeaseSecret
from agentledger.contracts.events import DocId, Name, PositiveInt, Text, Token, Version

GenerationId = Annotated[str, Meta(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_:-]+$")]
Tokens = Annotated[int, Meta(ge=0, le=10_000_000)]


class _Req(Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    """Base of the service's requests."""


class SystemPart(_Req, frozen=True):
    """Fixed system rules of the call: counted, never trimmed."""

    name: Name
    text: Annotated[str, Meta(max_length=200_000)]


class ToolSchema(_Req, frozen=True):
    """A tool definition as the model receives it (counted as its canonical JSON)."""

    name: Name
    description: Text = ""
    parameters: dict[str, Any] = {}


class CompactionPolicy(_Req, frozen=True):
    """When and how far a long conversation is compacted (seed 002).

    ``high_watermark``: fraction of the input cap that triggers compaction;
    ``recent_exact_tokens``: tokens of newest whole turns kept verbatim;
    ``mode``: ``auto`` (compact when needed), ``off`` (never: recent turns only).
    """

    mode: Literal["auto", "off"] = "auto"
    high_watermark: Annotated[float, Meta(gt=0.0, le=1.0)] = 0.75
    recent_exact_tokens: Tokens = 4000
    compactor: Name = "structured"


class BuildRequest(_Req, frozen=True):
    """Build the context of one model call.

    ``input_ordinal``: the current input, a turn already appended to the task's
    ledger. ``window_tokens``: the model's context window; ``reserve_tokens``: kept
    free for the generation. The budget is ``window - system - tools - reserve``.
    ``model`` decides whether the count is exact (a model whose tokenizer is
    ``encoding``) or an estimate with a safety margin.
    ``memory_query`` / ``document_query``: read memory / documents for this call
    (absent: that source is not used). ``generation_id``: ask again for a frozen
    generation (byte-identical); with ``regenerate`` a new generation is built.
    A source that does not answer is left out and named in the generation's ``degraded``;
    one named in ``require`` fails the build instead (``unavailable``, retryable).
    """

    tenant: Token
    task_id: Token
    input_ordinal: PositiveInt
    window_tokens: Annotated[int, Meta(ge=16, le=10_000_000)]
    reserve_tokens: Tokens = 1024
    encoding: Name = "cl100k_base"
    model: Name | None = None
    system: list[SystemPart] = []
    tools: list[ToolSchema] = []
    memory_query: Annotated[str, Meta(max_length=4096)] | None = None
    document_query: Annotated[str, Meta(max_length=4096)] | None = None
    user_id: Token | None = None
    project_id: Token | None = None
    session_id: Token | None = None
    compaction: CompactionPolicy = CompactionPolicy()
    generation_id: GenerationId | None = None
    regenerate: bool = False
    require: Annotated[list[Literal["memory", "documents"]], Meta(max_length=2)] = []


class ChatMessage(Struct, frozen=True):
    role: Literal["system", "user", "assistant", "tool"]
    content: str


class TraceLine(Struct, frozen=True, omit_defaults=True):
    """One candidate unit: taken or left, why, what it cost, where it came from."""

    unit_id: str
    source: str
    outcome: Literal["accepted", "rejected"]
    reason: str
    tokens: int
    version: str = ""
    mandatory: bool = False
    value: float | None = None


class Coverage(Struct, frozen=True):
    """Turns ``first`` .. ``through`` of the conversation (ordinals, inclusive)."""

    first: int
    through: int


class SummaryItem(Struct, frozen=True, forbid_unknown_fields=True):
    text: Annotated[str, Meta(min_length=1, max_length=2000)]
    source_turn_ordinals: Annotated[list[PositiveInt], Meta(min_length=1, max_length=64)]


class Summary(Struct, frozen=True, forbid_unknown_fields=True):
    """A compaction summary: exactly these fields, each item citing turns it covers."""

    schema_version: Literal["checkpoint-v1"]
    conversation_goal: Annotated[list[SummaryItem], Meta(max_length=20)]
    confirmed_facts: Annotated[list[SummaryItem], Meta(max_length=100)]
    decisions_constraints: Annotated[list[SummaryItem], Meta(max_length=100)]
    preferences: Annotated[list[SummaryItem], Meta(max_length=50)]
    unresolved_questions: Annotated[list[SummaryItem], Meta(max_length=50)]


class CompactionReceipt(Struct, frozen=True):
    """Ed25519 signature over the bindings of a compaction candidate (hex; key id names the key)."""

    key_id: str
    signature: str
    policy_version: str


class CompactionCheckpoint(Struct, frozen=True, omit_defaults=True):
    """A conversation checkpoint: the summary of turns ``coverage``, bound to its lineage.

    ``status``: ``staged`` (a candidate a generation used), ``active`` (what the
    next build starts from), ``refused`` (it lost its CAS; ``reason`` says why),
    ``superseded``.
    """

    checkpoint_id: str
    tenant: str
    task_id: str
    epoch: int
    lineage: str
    coverage: Coverage
    source_digest: str
    summary_digest: str
    summary: Summary
    receipt: CompactionReceipt
    generation_id: str
    status: Literal["staged", "active", "refused", "superseded"]
    reason: str = ""


class Branch(Struct, frozen=True, omit_defaults=True):
    """One frozen branch of a generation: what the model is sent on that branch.

    ``primary`` uses the new checkpoint (compact, then answer); ``fallback`` the
    recent exact turns only; ``direct`` no compaction was needed.
    """

    name: Literal["direct", "primary", "fallback"]
    messages: list[ChatMessage]
    rendered: str
    tokens: int
    unit_tokens: int
    separator_tokens: int
    trace: list[TraceLine]
    checkpoint_id: str | None = None
    exact_turns: Coverage | None = None


class CompactionPlan(Struct, frozen=True, omit_defaults=True):
    """The split a build chose: the old prefix to compact, the recent turns kept whole."""

    reason: str
    high_watermark_tokens: int
    measured_tokens: int
    base_checkpoint: str | None = None
    compacted: Coverage | None = None
    recent_exact: Coverage | None = None
    degraded: bool = False
    outcome: Literal["compacted", "fallback", "not_needed"] = "not_needed"
    failure: str = ""


class Generation(Struct, frozen=True, omit_defaults=True):
    """A frozen build. ``selected`` names the branch the caller should send; every branch
    was frozen before any compactor ran, so a failure only ever selects ``fallback``."""

    generation_id: str
    tenant: str
    task_id: str
    input_ordinal: int
    epoch: int
    lineage: str
    encoding: str
    exact: bool
    margin: float
    window_tokens: int
    reserve_tokens: int
    system_tokens: int
    tools_tokens: int
    budget_tokens: int
    selected: str
    branches: list[Branch]
    digest: str
    created_at: str
    compaction: CompactionPlan | None = None
    transcript_revision: int = 0
    artifact_uri: str | None = None
    regenerated_from: str | None = None
    # The sources asked for that did not answer ("memory", "documents"): built without them,
    # under an id of its own, so the same request once they answer builds with them.
    degraded: list[str] = []


class BuildReply(Struct, frozen=True, omit_defaults=True):
    ok: bool
    generation: Generation | None = None
    error: ErrorBody | None = None


class GenerationRef(_Req, frozen=True):
    """``context.get`` / ``context.trace``: a frozen generation by id."""

    tenant: Token
    generation_id: GenerationId


class TraceReply(Struct, frozen=True, omit_defaults=True):
    """``context.trace``: the trace lines of a frozen generation, per branch (``selected`` first)."""

    ok: bool
    generation_id: str = ""
    selected: str = ""
    branches: dict[str, list[TraceLine]] = {}
    error: ErrorBody | None = None


class CommitRequest(_Req, frozen=True):
    """The answer of a generation is in the ledger (turn ``answer_ordinal``): activate its
    staged checkpoint by compare-and-swap, if everything it was built on still holds."""

    tenant: Token
    generation_id: GenerationId
    answer_ordinal: PositiveInt


class CommitReply(Struct, frozen=True, omit_defaults=True):
    ok: bool
    activated: bool = False
    checkpoint: CompactionCheckpoint | None = None
    reason: str = ""
    error: ErrorBody | None = None


class ClearRequest(_Req, frozen=True):
    """Clear the conversation through ``through_ordinal`` (default: every turn so far):
    a ``history_cleared`` event; the conversation moves to a new epoch and lineage.

    The event is appended as the caller's own: on a leased task an agent clears only
    as the lease's holder, with its ``fencing_token`` and ``lease_secret``.
    """

    tenant: Token
    task_id: Token
    through_ordinal: Annotated[int, Meta(ge=0)] | None = None
    reason: Text = ""
    fencing_token: Annotated[int, Meta(ge=1)] | None = None
    lease_secret: LeaseSecret | None = None


class ClearReply(Struct, frozen=True, omit_defaults=True):
    ok: bool
    epoch: int = 0
    lineage: str = ""
    seq: int = 0
    error: ErrorBody | None = None


class IngestRequest(_Req, frozen=True):
    """Add a version of a document to the tenant's RAG index (chunked by the service)."""

    tenant: Token
    doc_id: DocId
    version: Version
    source: Annotated[str, Meta(max_length=1024)]
    text: Annotated[str, Meta(min_length=1, max_length=4_000_000)]
    title: Text = ""
    chunk_chars: Annotated[int, Meta(ge=200, le=16000)] = 1200
    overlap_chars: Annotated[int, Meta(ge=0, le=4000)] = 200
    # The pseudonymous data subjects the text is about: forgetting one of them forgets this
    # version (its ``document_ingested`` events carry them; docs/deletion.md, "needles").
    data_subjects: Annotated[list[Token], Meta(max_length=100)] = []


class IngestReply(Struct, frozen=True, omit_defaults=True):
    ok: bool
    doc_id: str = ""
    version: int = 0
    chunks: int = 0
    seq: int = 0
    duplicate: bool = False
    error: ErrorBody | None = None
