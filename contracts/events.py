"""Step events of a task: the envelope and every payload, schema version 1.

An event on the wire is one JSON object: the envelope fields plus ``kind`` (the
tag that selects the payload type) and ``payload``. Every Struct forbids unknown
fields, so a typo is an error that names its path instead of a silently dropped
value. Personal content (turn text, outputs marked ``personal``) arrives as
plaintext and is sealed by the ledger-writer before it is stored; see
``agentledger.contracts.sealed``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

SCHEMA_VERSION = 1

# Safe tokens: they become NATS subject tokens and SQL keys, so no dots, spaces,
# wildcards or control characters.
Token = Annotated[str, Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$",
                            description="1-64 chars of [A-Za-z0-9_-]")]
EventId = Annotated[str, Meta(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_:-]+$",
                              description="client-chosen unique id: 1-128 chars of [A-Za-z0-9_:-]")]
StepId = Annotated[str, Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")]
Name = Annotated[str, Meta(min_length=1, max_length=128)]
Text = Annotated[str, Meta(max_length=16384)]
Hash = Annotated[str, Meta(pattern=r"^[0-9a-f]{64}$", description="blake3, 64 lowercase hex")]
PositiveInt = Annotated[int, Meta(ge=1)]
Amount = Annotated[int, Meta(ge=0, le=2**53)]
Version = Annotated[int, Meta(ge=1, le=2**31)]
# RFC 3339 requires an offset: a naive "2026-11-29T10:00:00" is refused (invalid_value), never
# guessed to be UTC or local time.
Timestamp = Annotated[datetime, Meta(tz=True, description="RFC 3339 date-time with a UTC offset "
                                                          "(Z or +hh:mm)")]


class Strict(Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    """Base of every contract Struct: unknown fields are errors, instances immutable."""


class Sealed(Strict, frozen=True):
    """Personal content encrypted with its data subject's key (AES-256-GCM).

    ``aad`` binds the ciphertext to its tenant, task, event and field, so a
    sealed value copied into another event does not decrypt.
    """

    subject: Token
    key_id: Token
    nonce: str
    ciphertext: str


# URIs an event's artifacts replace: earlier artifacts of this task that a newer version of
# the same thing supersedes. Working Memory marks them replaced (``replaced_artifacts``) and a
# context renders the current ones only. Optional: events without it are what they were. The
# pattern makes each an identifier for secret redaction (refused, never rewritten: a rewritten
# URI would name another artifact).
SupersededUri = Annotated[str, Meta(min_length=1, max_length=1024, pattern=r"^[a-z][a-z0-9+.-]*://\S+$")]
Supersedes = Annotated[list[SupersededUri], Meta(max_length=100)]


class ArtifactRef(Strict, frozen=True):
    """A reference to content in the artifact store; never the content itself."""

    uri: Annotated[str, Meta(min_length=1, max_length=1024)]
    blake3: Hash
    schema: Name
    producer: Name
    version: Version = 1
    size: Amount | None = None


class Goal(Strict, frozen=True):
    """The goal contract: what done means, and a hash that pins it."""

    text: Annotated[str, Meta(min_length=1, max_length=16384)]
    acceptance_criteria: list[Text]
    goal_hash: Hash


class StepDef(Strict, frozen=True):
    """One node of a plan DAG. ``id`` is stable across plan versions."""

    id: StepId
    title: Text = ""
    depends_on: list[StepId] = []
    side_effect: bool = False
    tool: Name | None = None


class Output(Strict, frozen=True):
    """A typed output variable of a step. ``personal`` values are sealed at rest."""

    name: Name
    value: Any = None
    personal: bool = False
    sealed: Sealed | None = None


# ---- payloads -------------------------------------------------------------

class TaskCreated(Strict, frozen=True):
    goal: Goal
    budget: dict[Token, Amount] = {}
    title: Text = ""


class PlanVersioned(Strict, frozen=True):
    plan_id: Token
    version: Version
    steps: Annotated[list[StepDef], Meta(min_length=1, max_length=1000)]
    reason: Text = ""


class StepStarted(Strict, frozen=True):
    plan_version: Version
    step_id: StepId
    attempt: PositiveInt = 1
    idempotency_key: Annotated[str, Meta(min_length=1, max_length=256)] | None = None


class StepSucceeded(Strict, frozen=True):
    plan_version: Version
    step_id: StepId
    attempt: PositiveInt = 1
    outputs: list[Output] = []
    artifacts: list[ArtifactRef] = []
    supersedes: Supersedes = []


class StepFailed(Strict, frozen=True):
    plan_version: Version
    step_id: StepId
    error_code: Name
    attempt: PositiveInt = 1
    message: Text = ""
    evidence: ArtifactRef | None = None
    retryable: bool = False


class StepCancelled(Strict, frozen=True):
    plan_version: Version
    step_id: StepId
    reason: Text = ""


class BudgetReserved(Strict, frozen=True):
    reservation_id: Token
    resource: Token
    amount: Amount


class BudgetConsumed(Strict, frozen=True):
    reservation_id: Token
    resource: Token
    amount: Amount


class BudgetReleased(Strict, frozen=True):
    """Returns what is left of a reservation to the pool and closes it."""

    reservation_id: Token
    resource: Token


class QuestionOpened(Strict, frozen=True):
    question_id: Token
    text: Text
    blocking: bool = False
    step_id: StepId | None = None


class QuestionResolved(Strict, frozen=True):
    question_id: Token
    answer: Text


class VariableSet(Strict, frozen=True):
    name: Name
    value: Any = None
    personal: bool = False
    sealed: Sealed | None = None
    producer_step: StepId | None = None


class SideEffectRecorded(Strict, frozen=True):
    """A receipt: what a side-effecting call with this idempotency key actually did.

    After an unknown outcome (a crash mid-call) the executor queries the external
    system by the key and records what it finds here, before anything is retried.
    """

    step_id: StepId
    idempotency_key: Annotated[str, Meta(min_length=1, max_length=256)]
    outcome: Literal["applied", "not_applied", "failed"]
    external_ref: Annotated[str, Meta(max_length=1024)] | None = None


class ArtifactRegistered(Strict, frozen=True):
    """An artifact that entered the task outside a step (an upload, a fetched document)."""

    artifact: ArtifactRef
    note: Text = ""
    supersedes: Supersedes = []


class TaskCompleted(Strict, frozen=True):
    summary: Text = ""


class TaskFailed(Strict, frozen=True):
    error_code: Name
    message: Text = ""


class TaskCancelled(Strict, frozen=True):
    reason: Text = ""


class LeaseGranted(Strict, frozen=True):
    """The ledger-writer granted the task's execution lease (written by the writer only).

    The lease's fencing token is this event's ledger sequence, so it only grows
    and no lease-table entry can reset it. ``secret_hash`` pins the holder's
    secret (a keyed blake3, never the secret); ``expires_at`` is the grant's
    expiry in seconds since the Unix epoch by the writer's clock (renewals move
    the live expiry in the lease table without a new event).
    """

    holder: Annotated[str, Meta(min_length=1, max_length=128)]
    expires_at: float
    secret_hash: Hash


class TurnAppended(Strict, frozen=True):
    """One conversation turn. ``content`` is personal: it is stored sealed.

    A client always sends ``content`` (the writer refuses a turn without it,
    ``missing_field``) and never ``sealed`` (``sealed_not_allowed``); the stored
    form carries ``sealed`` instead of ``content``. The field is optional in the
    Struct only so that one type reads both forms; the JSON Schema says exactly
    one of the two is present (``TURN_CONTENT_RULE``).
    """

    role: Literal["user", "assistant", "system", "tool"]
    ordinal: PositiveInt
    content: Annotated[str, Meta(max_length=65536, description=(
        "the turn's text; required in an append (absent only in the stored, sealed form)"))] | None = None
    sealed: Sealed | None = None


# A turn carries exactly one of ``content`` (as sent to the writer, required there) and
# ``sealed`` (as stored in the ledger, set by the writer only).
TURN_CONTENT_RULE: dict[str, Any] = {
    "oneOf": [{"required": ["content"], "not": {"required": ["sealed"]}},
              {"required": ["sealed"], "not": {"required": ["content"]}}],
}


# ---- memory (appended by the memory-policy service only) ------------------
# Memory events live on the tenant's reserved ``_memory`` subject
# (``<prefix>.ledger.<tenant>._memory``), never on a task's. Tools and models
# *propose*; the policy decides, and both the proposal and the decision are events.

MemoryKind = Literal["preference", "fact", "task_result", "diagnostic", "procedure", "rule"]
ScopeLevel = Literal["session", "task", "user", "project", "tenant"]
SourceKind = Literal["user_confirmed", "runtime_evidence", "project_rule", "tool_output",
                     "model_inference", "external_document"]
Sensitivity = Literal["public", "internal", "personal"]
MemoryStatus = Literal["active", "superseded", "quarantined", "revoked", "forgotten"]
DecisionAction = Literal["write", "supersede", "merge", "quarantine", "deny", "reject"]
RecordId = Annotated[str, Meta(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_:-]+$")]
MemoryKey = Annotated[str, Meta(min_length=1, max_length=512)]
MemoryText = Annotated[str, Meta(max_length=16384)]


class Scope(Strict, frozen=True):
    """Who a record belongs to: an exact identity tuple, never a prefix.

    ``id`` names the session, task, user or project inside the tenant; the
    tenant level has none. Two scopes are the same only if level, tenant and id
    are all equal.
    """

    level: ScopeLevel
    tenant: Token
    id: Token | None = None


class MemorySource(Strict, frozen=True):
    """Where a proposal comes from; its kind sets the proposal's authority.

    ``quotes_external``: tool output that carries text of a document, page or
    upload (a fetched web page, a file read): it is judged as an external document.
    """

    kind: SourceKind
    ref: Annotated[str, Meta(max_length=1024)] = ""
    producer: Name = "unknown"
    quotes_external: bool = False


class MemoryProposed(Strict, frozen=True):
    """A candidate memory, exactly as proposed (after secret redaction).

    ``value`` is text or JSON; a personal value is stored ``sealed`` instead.
    ``origin_task``: the task whose step produced the proposal, if any.
    ``fingerprint``: a keyed digest of the proposal as its caller sent it (every field), so
    that a proposal id used again for other content is told from a repeat of the same one
    even when nothing of a refused value is kept (``proposal_id_conflict``).
    """

    proposal_id: EventId
    kind: MemoryKind
    scope: Scope
    source: MemorySource
    value: Any = None
    sealed: Sealed | None = None
    key: MemoryKey | None = None
    subject_version: Version = 1
    observed_at: Timestamp | None = None
    confidence: Annotated[float, Meta(ge=0.0, le=1.0)] | None = None
    origin_task: Token | None = None
    evidence: list[ArtifactRef] = []
    episodes: list[RecordId] = []
    fingerprint: Annotated[str, Meta(pattern=r"^[0-9a-f]{32}$")] | None = None


class RuleFired(Strict, frozen=True):
    """One rule of the policy that looked at a proposal: what it concluded, and why."""

    rule: Name
    outcome: Name
    reason: Text = ""


class MemoryRecordBody(Strict, frozen=True):
    """The record a decision admits: normalised by the policy, ready to project.

    ``authority``: rank of the source (6 user-confirmed … 1 external document).
    ``expires_at``: out of every read afterwards; ``review_at``: read, but marked
    for review and down-weighted. ``supersedes`` / ``promoted_from``: lineage.
    ``value_digest``: of a personal value, a keyed digest (HMAC with the
    installation's key) of its normalised plaintext and scope, so that two sealings
    of one value are known to be the same value without opening them.
    """

    record_id: RecordId
    key: MemoryKey
    kind: MemoryKind
    scope: Scope
    source: MemorySource
    authority: Annotated[int, Meta(ge=1, le=6)]
    sensitivity: Sensitivity
    observed_at: Timestamp
    value: Any = None
    sealed: Sealed | None = None
    value_digest: Annotated[str, Meta(pattern="^[0-9a-f]{32}$")] | None = None
    schema_version: Literal[1] = 1
    subject_version: Version = 1
    specificity: Annotated[int, Meta(ge=0, le=10)] = 0
    confidence: Annotated[float, Meta(ge=0.0, le=1.0)] | None = None
    expires_at: Timestamp | None = None
    review_at: Timestamp | None = None
    proposal_event: EventId | None = None
    origin_task: Token | None = None
    evidence: list[ArtifactRef] = []
    supersedes: list[RecordId] = []
    promoted_from: list[RecordId] = []


class MemoryDecided(Strict, frozen=True):
    """The policy's decision on one proposal, with every rule that fired.

    ``record`` is set when the proposal becomes a record (``write``,
    ``supersede``, ``merge``, and ``quarantine`` for review); ``deny`` and
    ``reject`` store nothing of the value. The projection decides which record of
    a key is active from the whole set, so the outcome never depends on the
    order decisions arrive in; ``action`` is what the policy saw when it decided.
    """

    proposal_id: EventId
    action: DecisionAction
    reason: Name
    trace: list[RuleFired] = []
    record: MemoryRecordBody | None = None


class MemoryFeedback(Strict, frozen=True):
    """A user, or an operator acting for one, confirms or revokes a record (highest authority).

    A correction is a ``memory_proposed`` from source ``user_confirmed`` plus its decision.
    """

    record_id: RecordId
    action: Literal["confirm", "revoke"]
    actor: Name
    reason: Text = ""


# ---- conversation and documents ------------------------------------------

class HistoryCleared(Strict, frozen=True):
    """The conversation's turns up to ``through_ordinal`` leave its context for good.

    The turns stay in the ledger (erasing them is a forget request's job); the
    conversation moves to a new epoch and lineage whose base is ``through_ordinal``,
    so no summary, checkpoint or frozen request of the old lineage is used again.
    """

    through_ordinal: Annotated[int, Meta(ge=0)]
    reason: Text = ""


DocId = Annotated[str, Meta(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")]


class DocumentChunk(Strict, frozen=True):
    index: Annotated[int, Meta(ge=0)]
    text: Annotated[str, Meta(min_length=1, max_length=16384)]


class DocumentIngested(Strict, frozen=True):
    """A version of a document, as chunks, for the RAG index (appended by the context-builder).

    Lives on the tenant's reserved ``_documents`` subject. Document text is evidence,
    never instruction. ``chunking`` records how the text was cut (e.g. ``"chars:1200/200"``).
    """

    doc_id: DocId
    version: Version
    source: Annotated[str, Meta(max_length=1024)]
    title: Text = ""
    chunking: Name = "chars:1200/200"
    chunks: Annotated[list[DocumentChunk], Meta(max_length=1000)] = []
    content_blake3: Hash | None = None
    # The data subjects the version is declared to be about (its lineage for a subject's forget).
    data_subjects: Annotated[list[Token], Meta(max_length=100)] = []


# ---- forgetting -------------------------------------------------------------

ForgetKind = Literal["record", "key", "subject", "task", "tenant"]
# A forgotten key's keyed digest (``core.memory.keys.tombstone_key``): 128 bits of HMAC-SHA256.
KeyDigest = Annotated[str, Meta(pattern=r"^forgotten:[0-9a-f]{32}$")]
IndexStatus = Literal["done", "not_applicable"]


class ForgetSelector(Strict, frozen=True):
    """What a forget request reaches, always inside the event's tenant.

    ``record``: one memory record (``record_id``); ``key``: every record of a
    canonical memory key (``key``, in every scope of the tenant unless ``scope``
    narrows it); ``subject``: everything about a pseudonymous data subject
    (``subject``); ``task``: a task (``task_id``); ``tenant``: the whole tenant.
    The field the kind names is required and no other is allowed.

    A request names a key by its words (``key``); the service stores, appends and
    answers the selector with ``key_digests`` instead (keyed digests of the key and of
    its canonical form, ``core.forget.stored_selector``), since a key is often made of
    its value's words. A request may not set ``key_digests``.
    """

    kind: ForgetKind
    record_id: RecordId | None = None
    key: MemoryKey | None = None
    scope: Scope | None = None
    subject: Token | None = None
    task_id: Token | None = None
    key_digests: Annotated[list[KeyDigest], Meta(max_length=2)] = []


class ForgetRequested(Strict, frozen=True):
    """A durable request to forget, appended by the tombstone-fanout to the tenant's ``_forget``.

    ``requested_by`` is the authenticated identity of the caller (``operator/<user>``
    or ``<tenant>/<agent>``), never a name from the request body; ``reason`` and
    ``legal_basis`` are free text and must not hold personal data (the receipt repeats
    neither). The fan-out drives every index to completion from this event.
    """

    request_id: Token
    selector: ForgetSelector
    requested_by: Name
    operator: bool = False
    reason: Text = ""
    legal_basis: Text = ""


class IndexReceipt(Strict, frozen=True):
    """What forgetting did in one index: ``counts`` by what was reached (rows, messages, keys)."""

    index: Name
    status: IndexStatus
    completed_at: Timestamp
    counts: dict[Name, Annotated[int, Meta(ge=0)]] = {}
    detail: Text = ""


class DeletionReceipt(Strict, frozen=True):
    """The receipt of one forget request: one entry per index, and a blake3 digest over the rest.

    No personal data: the subject is the pseudonymous token, counts are numbers.
    ``digest`` is the blake3 of the canonical JSON of every other field
    (``agentledger.forgetting.receipt_digest``), so any change to a receipt shows.
    """

    request_id: Token
    tenant: Token
    selector: ForgetSelector
    requested_by: Name
    requested_at: Timestamp
    completed_at: Timestamp
    indexes: list[IndexReceipt]
    digest: Hash
    subject: Token | None = None


class ForgetCompleted(Strict, frozen=True):
    """The fan-out reached every index of a request: its receipt, on the tenant's ``_forget``."""

    receipt: DeletionReceipt


class ForgottenRecord(Strict, frozen=True):
    """One memory record a forget request reached: enough to keep its tombstone on replay."""

    record_id: RecordId
    scope: Scope
    kind: MemoryKind
    # The keyed digest of its key (``core.memory.keys.tombstone_key``): never the key's words,
    # which are often its value's. Events before it carried ``key`` instead (still read).
    key_digest: Annotated[str, Meta(pattern=r"^forgotten:[0-9a-f]{32}$")] | None = None
    key: Annotated[str, Meta(max_length=512)] = ""
    # Whether it was the active record of its kind when the forget was planned: then no record
    # of that kind below user-confirmed authority is active in its group again (an older value
    # it had superseded does not come back, nor does a model's next guess of it).
    active: bool = False


class MemoryForgotten(Strict, frozen=True):
    """Memory records a forget request reached (appended by the tombstone-fanout to ``_memory``).

    The memory projection turns each into a tombstone (status ``forgotten``, no value, in
    no index) and resolves its key group from what remains; the ledger messages that held
    the records' values are erased by the fan-out, so a replay sees only the tombstone.
    """

    request_id: Token
    records: Annotated[list[ForgottenRecord], Meta(max_length=10000)]


# ---- envelope --------------------------------------------------------------

class EventBase(Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True,
                tag_field="kind", kw_only=True):
    """Fields every event carries, whatever its kind."""

    event_id: EventId
    tenant: Token
    task_id: Token
    producer: Name
    occurred_at: Timestamp
    schema_version: Literal[1]
    causation_id: EventId | None = None
    correlation_id: EventId | None = None
    trace_id: Annotated[str, Meta(max_length=128)] | None = None
    data_subject: Token | None = None
    # The executor's lease token; the writer refuses a stale one (see leases.py).
    fencing_token: Annotated[int, Meta(ge=1)] | None = None


class TaskCreatedEvent(EventBase, tag="task_created", frozen=True):
    payload: TaskCreated


class PlanVersionedEvent(EventBase, tag="plan_versioned", frozen=True):
    payload: PlanVersioned


class StepStartedEvent(EventBase, tag="step_started", frozen=True):
    payload: StepStarted


class StepSucceededEvent(EventBase, tag="step_succeeded", frozen=True):
    payload: StepSucceeded


class StepFailedEvent(EventBase, tag="step_failed", frozen=True):
    payload: StepFailed


class StepCancelledEvent(EventBase, tag="step_cancelled", frozen=True):
    payload: StepCancelled


class BudgetReservedEvent(EventBase, tag="budget_reserved", frozen=True):
    payload: BudgetReserved


class BudgetConsumedEvent(EventBase, tag="budget_consumed", frozen=True):
    payload: BudgetConsumed


class BudgetReleasedEvent(EventBase, tag="budget_released", frozen=True):
    payload: BudgetReleased


class QuestionOpenedEvent(EventBase, tag="question_opened", frozen=True):
    payload: QuestionOpened


class QuestionResolvedEvent(EventBase, tag="question_resolved", frozen=True):
    payload: QuestionResolved


class VariableSetEvent(EventBase, tag="variable_set", frozen=True):
    payload: VariableSet


class SideEffectRecordedEvent(EventBase, tag="side_effect_recorded", frozen=True):
    payload: SideEffectRecorded


class ArtifactRegisteredEvent(EventBase, tag="artifact_registered", frozen=True):
    payload: ArtifactRegistered


class TaskCompletedEvent(EventBase, tag="task_completed", frozen=True):
    payload: TaskCompleted


class TaskFailedEvent(EventBase, tag="task_failed", frozen=True):
    payload: TaskFailed


class TaskCancelledEvent(EventBase, tag="task_cancelled", frozen=True):
    payload: TaskCancelled


class TurnAppendedEvent(EventBase, tag="turn_appended", frozen=True):
    payload: Annotated[TurnAppended, Meta(extra_json_schema=TURN_CONTENT_RULE)]


class LeaseGrantedEvent(EventBase, tag="lease_granted", frozen=True):
    payload: LeaseGranted


class MemoryProposedEvent(EventBase, tag="memory_proposed", frozen=True):
    payload: MemoryProposed


class MemoryDecidedEvent(EventBase, tag="memory_decided", frozen=True):
    payload: MemoryDecided


class MemoryFeedbackEvent(EventBase, tag="memory_feedback", frozen=True):
    payload: MemoryFeedback


class HistoryClearedEvent(EventBase, tag="history_cleared", frozen=True):
    payload: HistoryCleared


class DocumentIngestedEvent(EventBase, tag="document_ingested", frozen=True):
    payload: DocumentIngested


class ForgetRequestedEvent(EventBase, tag="forget_requested", frozen=True):
    payload: ForgetRequested


class ForgetCompletedEvent(EventBase, tag="forget_completed", frozen=True):
    payload: ForgetCompleted


class MemoryForgottenEvent(EventBase, tag="memory_forgotten", frozen=True):
    payload: MemoryForgotten


AnyEvent = (
    TaskCreatedEvent
    | PlanVersionedEvent
    | StepStartedEvent
    | StepSucceededEvent
    | StepFailedEvent
    | StepCancelledEvent
    | BudgetReservedEvent
    | BudgetConsumedEvent
    | BudgetReleasedEvent
    | QuestionOpenedEvent
    | QuestionResolvedEvent
    | VariableSetEvent
    | SideEffectRecordedEvent
    | ArtifactRegisteredEvent
    | TaskCompletedEvent
    | TaskFailedEvent
    | TaskCancelledEvent
    | TurnAppendedEvent
    | LeaseGrantedEvent
    | MemoryProposedEvent
    | MemoryDecidedEvent
    | MemoryFeedbackEvent
    | HistoryClearedEvent
    | DocumentIngestedEvent
    | ForgetRequestedEvent
    | ForgetCompletedEvent
    | MemoryForgottenEvent
)

EVENT_TYPES: dict[str, type[EventBase]] = {
    "task_created": TaskCreatedEvent,
    "plan_versioned": PlanVersionedEvent,
    "step_started": StepStartedEvent,
    "step_succeeded": StepSucceededEvent,
    "step_failed": StepFailedEvent,
    "step_cancelled": StepCancelledEvent,
    "budget_reserved": BudgetReservedEvent,
    "budget_consumed": BudgetConsumedEvent,
    "budget_released": BudgetReleasedEvent,
    "question_opened": QuestionOpenedEvent,
    "question_resolved": QuestionResolvedEvent,
    "variable_set": VariableSetEvent,
    "side_effect_recorded": SideEffectRecordedEvent,
    "artifact_registered": ArtifactRegisteredEvent,
    "task_completed": TaskCompletedEvent,
    "task_failed": TaskFailedEvent,
    "task_cancelled": TaskCancelledEvent,
    "turn_appended": TurnAppendedEvent,
    "lease_granted": LeaseGrantedEvent,
    "memory_proposed": MemoryProposedEvent,
    "memory_decided": MemoryDecidedEvent,
    "memory_feedback": MemoryFeedbackEvent,
    "history_cleared": HistoryClearedEvent,
    "document_ingested": DocumentIngestedEvent,
    "forget_requested": ForgetRequestedEvent,
    "forget_completed": ForgetCompletedEvent,
    "memory_forgotten": MemoryForgottenEvent,
}

# Kinds only the ledger-writer itself appends (through its lease endpoint); an append
# request carrying one is refused with ``reserved_kind``.
WRITER_ONLY_KINDS = frozenset({"lease_granted"})

# Kinds only the memory-policy service appends, and only to a tenant's ``MEMORY_TASK``
# subject; the writer refuses them from anyone else (``reserved_kind``).
MEMORY_KINDS = frozenset({"memory_proposed", "memory_decided", "memory_feedback",
                          "memory_forgotten"})

# The reserved task id of a tenant's memory ledger. Task ids that start with ``_`` belong to
# the runtime: a tenant append to one is refused (``reserved_task``).
MEMORY_TASK = "_memory"

# Documents for the RAG index: only the context-builder appends them, only to a tenant's
# ``DOCUMENTS_TASK`` subject.
DOCUMENT_KINDS = frozenset({"document_ingested"})
DOCUMENTS_TASK = "_documents"

# Forget requests and their receipts: only the tombstone-fanout appends them, only to a
# tenant's ``FORGET_TASK`` subject (kept when the tenant itself is forgotten: the receipts
# are the proof, and hold no personal data).
FORGET_KINDS = frozenset({"forget_requested", "forget_completed"})
FORGET_TASK = "_forget"
# Sequence numbers a cut ledger would hand out again are taken by empty messages on
# ``<prefix>.ledger._numbering._gap`` (``stores.witness.fill_numbering``): no tenant's, no event.
GAP_TENANT, GAP_TASK = "_numbering", "_gap"
RESERVED_TASK_PREFIX = "_"


def kind_of(event: EventBase) -> str:
    """The ``kind`` tag of an event instance."""
    return type(event).__struct_config__.tag  # type: ignore[return-value]


def payload_of(event: EventBase) -> Any:
    """The payload of any concrete event (the base class does not declare it)."""
    return event.payload  # type: ignore[attr-defined]
