"""Requests and replies of the memory-policy service (``<prefix>.memory.<action>``).

The caller's identity is the authenticated connection: ``tenant`` must be the
caller's own, and the user and project scopes a tenant agent may name are the
ones the operator bound to it (``agentledger agent bind``); a body that names
others is refused, never trusted. Every Struct forbids unknown fields.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

from agentledger.contracts.api import ErrorBody
from agentledger.contracts.events import (
    ArtifactRef,
    DecisionAction,
    EventId,
    MemoryKey,
    MemoryKind,
    MemoryStatus,
    Name,
    RecordId,
    RuleFired,
    ScopeLevel,
    Sensitivity,
    SourceKind,
    Text,
    Timestamp,
    Token,
    Version,
)

# Most proposals one ``memory.propose`` takes (bulk import sends several calls).
MAX_PROPOSALS = 5000


class _Req(Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    """Base of the service's requests."""


class ScopeRef(_Req, frozen=True):
    """A scope inside the caller's tenant: ``level`` and, below tenant level, the id."""

    level: ScopeLevel
    id: Token | None = None


class SourceRef(_Req, frozen=True):
    kind: SourceKind
    ref: Annotated[str, Meta(max_length=1024)] = ""
    quotes_external: bool = False


class Proposal(_Req, frozen=True):
    """One candidate memory. ``proposal_id`` is its idempotency key within the tenant.

    ``value``: text, or any JSON value. ``personal`` asks for the value to be treated
    as personal even when the detector finds nothing; ``data_subject`` keys it
    (default: the user of a user scope).
    """

    proposal_id: EventId
    kind: MemoryKind
    scope: ScopeRef
    source: SourceRef
    value: Any
    key: MemoryKey | None = None
    subject_version: Version = 1
    observed_at: Timestamp | None = None
    confidence: Annotated[float, Meta(ge=0.0, le=1.0)] | None = None
    origin_task: Token | None = None
    evidence: list[ArtifactRef] = []
    episodes: list[RecordId] = []
    personal: bool = False
    data_subject: Token | None = None


class ProposeRequest(_Req, frozen=True):
    tenant: Token
    proposals: Annotated[list[Proposal], Meta(min_length=1, max_length=MAX_PROPOSALS)]


class DecisionItem(Struct, frozen=True, omit_defaults=True):
    """The decision on one proposal; ``duplicate`` when the proposal id was decided before."""

    proposal_id: str
    action: DecisionAction
    reason: str
    trace: list[RuleFired] = []
    record_id: str | None = None
    key: str | None = None
    seq: int = 0
    duplicate: bool = False


class ProposeReply(Struct, frozen=True, omit_defaults=True):
    ok: bool
    decisions: list[DecisionItem] = []
    error: ErrorBody | None = None


class ReadRequest(_Req, frozen=True):
    """A gated memory read. The allowed scopes are built from the caller and ``context``.

    ``query``: free text for full-text and vector candidates; ``key``: exact-key
    candidates. ``max_sensitivity``: the most sensitive record this call may
    receive; ``min_authority``: the least trusted source it accepts (1-6).
    ``budget_tokens``: the read projects its winners into this many tokens of
    ``encoding`` (counted with the real tokenizer), best first, until spent.
    ``k``: at most this many items when set; unset (the default), the budget alone
    bounds the read (``core.memory.read.candidate_cap``).
    """

    tenant: Token
    query: Annotated[str, Meta(max_length=4096)] = ""
    key: MemoryKey | None = None
    kinds: list[MemoryKind] = []
    task_id: Token | None = None
    session_id: Token | None = None
    user_id: Token | None = None
    project_id: Token | None = None
    k: Annotated[int, Meta(ge=1, le=100)] | None = None
    budget_tokens: Annotated[int, Meta(ge=1, le=200_000)] = 2000
    encoding: Name = "cl100k_base"
    max_sensitivity: Sensitivity = "internal"
    min_authority: Annotated[int, Meta(ge=1, le=6)] = 1
    min_subject_version: Version | None = None
    purpose: Text = ""


class GateResult(Struct, frozen=True, omit_defaults=True):
    gate: str
    passed: bool
    reason: str = ""


class ReceiptCandidate(Struct, frozen=True, omit_defaults=True):
    """One candidate the read looked at: how it was found, each gate, its score, its fate."""

    record_id: str
    key: str
    found_by: list[str]
    gates: list[GateResult]
    outcome: Literal["selected", "gated", "overridden", "over_budget", "below_k"]
    score: float | None = None
    relevance: float | None = None
    tokens: int | None = None
    reason: str = ""


class ReadReceipt(Struct, frozen=True, omit_defaults=True):
    """What one read saw and returned; kept (``memory.receipts``) until it expires."""

    receipt_id: str
    tenant: str
    caller: str
    scopes: list[str]
    request: dict[str, Any]
    candidates: list[ReceiptCandidate]
    selected: list[str]
    tokens: int
    budget_tokens: int
    latency_ms: float
    created_at: datetime
    expires_at: datetime
    task_id: str | None = None
    # Candidates taken out by forget requests (the request's query and key went with them:
    # they may quote what was forgotten); 0 for a receipt as the read wrote it.
    forgotten: int = 0


class MemoryItem(Struct, frozen=True, omit_defaults=True):
    """A record as a reader sees it (``value`` opened; ``erased`` if its key was destroyed)."""

    record_id: str
    key: str
    kind: str
    scope: str
    status: MemoryStatus
    authority: int
    sensitivity: str
    source: str
    observed_at: datetime
    value: Any = None
    erased: bool = False
    subject_version: int = 1
    record_version: int = 1
    expires_at: datetime | None = None
    review_at: datetime | None = None
    needs_review: bool = False
    supersedes: list[str] = []
    superseded_by: str | None = None
    promoted_from: list[str] = []
    status_reason: str = ""
    score: float | None = None
    tokens: int | None = None
    ledger_seq: int = 0


class ReadReply(Struct, frozen=True, omit_defaults=True):
    ok: bool
    items: list[MemoryItem] = []
    receipt: ReadReceipt | None = None
    rendered: str = ""
    error: ErrorBody | None = None


class KeyRequest(_Req, frozen=True):
    """``memory.get`` (the key's records visible to the caller, active first) and
    ``memory.history`` (every version of the key, with its decisions)."""

    tenant: Token
    key: MemoryKey
    scope: ScopeRef


class HistoryEntry(Struct, frozen=True, omit_defaults=True):
    seq: int
    event: str
    proposal_id: str | None = None
    record_id: str | None = None
    action: str | None = None
    reason: str = ""
    trace: list[RuleFired] = []
    at: datetime | None = None


class KeyReply(Struct, frozen=True, omit_defaults=True):
    ok: bool
    records: list[MemoryItem] = []
    history: list[HistoryEntry] = []
    error: ErrorBody | None = None


class FeedbackRequest(_Req, frozen=True):
    """Confirm, correct or revoke a record, for its user (the highest authority).

    ``correct`` needs ``value``: it becomes a new version of the record's key from
    source ``user_confirmed`` that supersedes the old one.
    """

    tenant: Token
    record_id: RecordId
    action: Literal["confirm", "correct", "revoke"]
    feedback_id: EventId
    value: Any = None
    reason: Text = ""


class FeedbackReply(Struct, frozen=True, omit_defaults=True):
    ok: bool
    record_id: str | None = None
    seq: int = 0
    duplicate: bool = False
    decision: DecisionItem | None = None
    error: ErrorBody | None = None


class ReceiptsRequest(_Req, frozen=True):
    """Receipts of one task or of one record, newest first, ``limit`` at a time."""

    tenant: Token
    task_id: Token | None = None
    record_id: RecordId | None = None
    limit: Annotated[int, Meta(ge=1, le=500)] = 50
    before: str | None = None


class ReceiptsReply(Struct, frozen=True, omit_defaults=True):
    ok: bool
    receipts: list[ReadReceipt] = []
    next_before: str | None = None
    error: ErrorBody | None = None

