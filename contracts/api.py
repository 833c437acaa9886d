"""Request and reply messages of the NATS endpoints (append, working memory)."""

from __future__ import annotations

from typing import Annotated, Any

from msgspec import Meta, Raw, Struct

from agentledger.contracts.events import Token


class AppendRequest(Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    """Append one event or an atomic batch of events of one task.

    ``expected_last_seq`` is optional optimistic concurrency: the stream sequence of
    the task's last stored event as the caller last saw it (0: the task has no
    events). The events themselves are kept raw here and decoded one by one, so
    an error can name ``$.events[i]`` precisely.
    """

    events: Annotated[list[Raw], Meta(min_length=1)]
    expected_last_seq: Annotated[int, Meta(ge=0)] | None = None


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


class TaskRef(Struct, forbid_unknown_fields=True, frozen=True):
    """Names one task: the request of the working-memory endpoint."""

    tenant: Token
    task_id: Token
    reveal_personal: bool = False


class WorkingMemoryReply(Struct, frozen=True, omit_defaults=True):
    """A task's Working Memory as projected up to ``seq`` (its ledger watermark)."""

    ok: bool
    seq: int = 0
    state: Any = None
    error: ErrorBody | None = None


class TaskChanged(Struct, frozen=True):
    """Published on ``<prefix>.wm.changed.<tenant>.<task>`` after a projection commit."""

    tenant: str
    task_id: str
    seq: int
    state_hash: str


class LeaseRequest(Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    """Acquire, renew or release a task's execution lease (``token`` for renew / release)."""

    tenant: Token
    task_id: Token
    holder: Annotated[str, Meta(min_length=1, max_length=128)]
    ttl_s: Annotated[float, Meta(gt=0, le=86400)] = 30.0
    token: Annotated[int, Meta(ge=1)] | None = None


class LeaseBody(Struct, frozen=True):
    holder: str
    token: int
    expires_at: float


class LeaseReply(Struct, frozen=True, omit_defaults=True):
    ok: bool
    lease: LeaseBody | None = None
    error: ErrorBody | None = None
