"""Request and reply messages of the NATS endpoints (append, working memory, leases)."""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import Meta, Raw, Struct

from agentledger.contracts.events import Hash, Token

# Longest lease a grant or renewal gives: a dead executor's task is free again within this.
MAX_LEASE_TTL_S = 600.0
LeaseSecret = Annotated[str, Meta(min_length=1, max_length=128,
                                  description="the secret a lease grant returned; never stored")]


class AppendRequest(Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    """Append one event or an atomic batch of events of one task.

    ``expected_last_seq`` is optional optimistic concurrency: the stream sequence of
    the task's last stored event as the caller last saw it (0: the task has no
    events). The events themselves are kept raw here and decoded one by one, so
    an error can name ``$.events[i]`` precisely.

    ``lease_secret`` is the secret of the lease whose token the events carry in
    ``fencing_token``: while a task is leased, appends need both. It belongs to
    the request, not to an event, so it is never stored in the ledger.
    """

    events: Annotated[list[Raw], Meta(min_length=1)]
    expected_last_seq: Annotated[int, Meta(ge=0, le=2**63 - 1)] | None = None
    lease_secret: LeaseSecret | None = None


class AppendResult(Struct, frozen=True):
    event_id: str
    seq: int
    duplicate: bool


class ErrorBody(Struct, frozen=True):
    """A typed error on the wire: branch on ``code``; ``path`` names the field."""

    code: str
    message: str
    retryable: bool = False
    path: str | None = None
    current_seq: int | None = None


class AppendReply(Struct, frozen=True, omit_defaults=True):
    """``ok`` with one result per event in order, or ``error`` and nothing stored."""

    ok: bool
    results: list[AppendResult] = []
    error: ErrorBody | None = None


Seq = Annotated[int, Meta(ge=0, le=2**63 - 1)]
# Most rejections one page of ``wm.get`` returns.
MAX_REJECTIONS_PAGE = 1000


class RejectionsQuery(Struct, forbid_unknown_fields=True, frozen=True):
    """One page of a task's full rejection trace: the rows after ``after_seq``, oldest first.

    The state lists only the newest rejections (and counts the others); every
    one is kept in the projection and read here, ``limit`` at a time. Pass the
    reply's ``next_after_seq`` as ``after_seq`` for the next page.
    """

    after_seq: Seq = 0
    limit: Annotated[int, Meta(ge=1, le=MAX_REJECTIONS_PAGE)] = 100


class TaskRef(Struct, forbid_unknown_fields=True, frozen=True):
    """Names one task: the request of the working-memory endpoint.

    ``min_seq`` asks to read your own writes: the reply waits (at most
    ``wait_ms``) until the projection has folded the ledger up to that sequence,
    e.g. the ``seq`` an append returned; still behind then is ``unavailable``.

    A view too large for one reply comes in chunks: the first reply carries
    chunk 0 and the view's ``digest``; ask for chunk ``i`` with ``chunk: i`` and
    that ``digest`` (and the same ``reveal_personal`` and ``transcript_tail``).
    ``rejections`` asks for a page of the rejection trace instead of the view.

    ``transcript_tail`` asks for the newest turns only (0: none), for a reader
    that does not need a long conversation; without it the view holds every turn.
    ``turns_total`` in the view says how many there are.
    """

    tenant: Token
    task_id: Token
    reveal_personal: bool = False
    min_seq: Seq | None = None
    wait_ms: Annotated[int, Meta(ge=0, le=30_000)] = 5_000
    chunk: Annotated[int, Meta(ge=1, le=2**31)] | None = None
    digest: Hash | None = None
    rejections: RejectionsQuery | None = None
    transcript_tail: Annotated[int, Meta(ge=0, le=2**31)] | None = None


class ViewChunk(Struct, frozen=True):
    """One piece of a Working Memory view that does not fit in one reply.

    The view is its JSON text (UTF-8, ``size`` bytes, blake3 ``digest``) cut into
    ``count`` pieces; ``data`` is piece ``index`` (base64 in JSON). Concatenate
    pieces 0 .. count-1, check size and digest, then parse the JSON.
    """

    index: int
    count: int
    size: int
    digest: str
    data: bytes


class RejectionItem(Struct, frozen=True):
    """One row of a task's rejection trace (the reducer's, or the projector's own codes)."""

    seq: int
    event_id: str
    kind: str
    code: str
    reason: str


class RejectionsPage(Struct, frozen=True):
    """Rejections after the query's ``after_seq``, oldest first; ``next_after_seq`` is null
    on the last page."""

    items: list[RejectionItem]
    next_after_seq: int | None = None


class WorkingMemoryReply(Struct, frozen=True, omit_defaults=True):
    """A task's Working Memory as projected up to ``seq`` (its ledger watermark).

    Exactly one of ``state`` (the whole view), ``chunk`` (a piece of a view too
    large for one reply) and ``rejections`` (a page of the trace) is set on
    success. For a page, ``seq`` is the projection's watermark: every rejection
    up to it is in the trace.
    """

    ok: bool
    seq: int = 0
    state: Any = None
    chunk: ViewChunk | None = None
    rejections: RejectionsPage | None = None
    error: ErrorBody | None = None


class TaskProgress(Struct, frozen=True):
    """How far a task has come at a ``TaskChanged``'s ``seq``: enough to tell whether a
    checkpoint is due without reading the task's state.

    ``events``: events of the task applied so far; ``status``: the task's status;
    ``terminal_seq``: the highest ledger sequence at which one of the task's current
    steps reached the terminal status it still has (0: none has).
    """

    events: int
    status: str
    terminal_seq: int


class TaskChanged(Struct, frozen=True, omit_defaults=True):
    """Published on ``<prefix>.wm.changed.<tenant>.<task>`` after a projection commit.

    ``progress`` describes the state at ``seq``; absent when the projector could not
    vouch for it (then read the state to know).
    """

    tenant: str
    task_id: str
    seq: int
    state_hash: str
    progress: TaskProgress | None = None


class EventRejected(Struct, frozen=True, kw_only=True):
    """Published on ``<prefix>.rejected.<tenant>.<task>`` when the reducer refuses a stored event.

    The append was acknowledged (the event is in the ledger); this says it changed
    nothing, and why. The same row is kept in the task's rejection trace.
    """

    tenant: str
    task_id: str
    seq: int
    event_id: str
    kind: str
    code: str
    reason: str


class LeaseRequest(Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    """Acquire, renew or release a task's execution lease.

    Renew and release need the grant's ``token`` and ``secret``. A tenant agent
    is always the holder itself (``holder`` must name it); an operator or a
    service names the holder it acquires for (the checkpointer for a resuming
    executor).
    """

    tenant: Token
    task_id: Token
    holder: Annotated[str, Meta(min_length=1, max_length=128)]
    ttl_s: Annotated[float, Meta(gt=0, le=MAX_LEASE_TTL_S)] = 30.0
    token: Annotated[int, Meta(ge=1)] | None = None
    secret: LeaseSecret | None = None


class LeaseBody(Struct, frozen=True, omit_defaults=True):
    """A granted lease. ``expires_at``: seconds since the Unix epoch, by the writer's clock.

    ``token`` is the fencing token (the ledger sequence of the grant's
    ``lease_granted`` event: it only grows). ``secret`` is present only in the
    reply to the grant itself (acquire, or the resume that acquired): keep it,
    it is what renew, release and fenced appends are checked against.
    """

    holder: str
    token: int
    expires_at: float
    secret: str | None = None


class LeaseReply(Struct, frozen=True, omit_defaults=True):
    ok: bool
    lease: LeaseBody | None = None
    error: ErrorBody | None = None
