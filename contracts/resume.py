"""Request and reply messages of the checkpointer's endpoints: save a checkpoint, resume a task.

``<prefix>.checkpoint.save`` takes a ``CheckpointSaveRequest`` and answers a
``CheckpointSaveReply``. ``<prefix>.resume`` takes a ``ResumeRequest`` and answers
a ``ResumeReply``. Requests forbid unknown fields, like every other request.

A resume is answered with ``ok: true`` whenever it could be evaluated, whatever
its ``status``; ``ok: false`` with an ``error`` means the request itself was bad
or a dependency did not answer (retry those marked ``retryable``).

``status``:

* ``resumable``: the executor holds the lease (``lease``) and may dispatch ``dispatch``.
* ``needs_reconcile``: the executor holds the lease, but some side-effecting steps
  have an unknown outcome (``reconcile``). Nothing may be dispatched
  (``dispatch`` is empty) until the executor has queried the external system by
  each idempotency key and recorded a ``side_effect_recorded`` receipt.
* ``rejected``: nothing was leased and nothing changed; ``reasons`` say why. A
  rejected reply carries only ``status`` and ``reasons``: never the task's
  state, next-ready steps or watermark.

Every entry of ``reasons`` has a stable ``code``; ``severity`` says whether it
rejected the resume (``reject``), stopped dispatch (``reconcile``) or is for
information only (``info``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

from agentledger.contracts.api import MAX_LEASE_TTL_S, ErrorBody, LeaseBody
from agentledger.contracts.events import Token

Holder = Annotated[str, Meta(min_length=1, max_length=128,
                             description="the executor's id; it becomes the lease holder")]
CheckpointId = Annotated[int, Meta(ge=1)]

ResumeStatus = Literal["resumable", "needs_reconcile", "rejected"]
Severity = Literal["info", "reconcile", "reject"]


class CheckpointSaveRequest(Struct, forbid_unknown_fields=True, frozen=True):
    """Save a checkpoint of one task now, at the latest projected state."""

    tenant: Token
    task_id: Token


class CheckpointSaveReply(Struct, frozen=True, omit_defaults=True):
    """``checkpoint_id`` and the ledger ``seq`` it covers; ``created`` is false when the
    task's active checkpoint already covered that sequence (nothing new was written)."""

    ok: bool
    checkpoint_id: int | None = None
    seq: int = 0
    created: bool = False
    error: ErrorBody | None = None


class ResumeRequest(Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    """Resume a task for ``executor``: from its active checkpoint, or from ``checkpoint_id``.

    ``checkpoint_id`` is normally left out (the task's active pointer is used); an
    operator may name one explicitly, e.g. one restored from a backup. The lease
    a resume takes lasts ``lease_ttl_s`` (at most 10 minutes); renew it.
    """

    tenant: Token
    task_id: Token
    executor: Holder
    lease_ttl_s: Annotated[float, Meta(gt=0, le=MAX_LEASE_TTL_S)] = 60.0
    checkpoint_id: CheckpointId | None = None


class Reason(Struct, frozen=True, omit_defaults=True):
    """Why a resume has the status it has: a stable ``code`` and a message for people."""

    code: str
    message: str
    severity: Severity
    uri: str | None = None
    detail: dict[str, Any] | None = None


class ReconcileItem(Struct, frozen=True):
    """A side-effecting step whose outcome is unknown: query by the key before anything else."""

    step_id: str
    idempotency_key: str


class InterruptedStep(Struct, frozen=True, omit_defaults=True):
    """A step left ``running`` by the previous executor whose outcome is known or harmless.

    ``receipt`` is the recorded side-effect outcome (``applied``, ``not_applied``,
    ``failed``) when the step had one; None for a step without side effects. The
    executor closes the old attempt (succeeded if applied, else failed) before
    starting a new one.
    """

    step_id: str
    attempt: int
    idempotency_key: str | None = None
    receipt: str | None = None


class ResumeReply(Struct, frozen=True):
    """The outcome of one resume; see the module docstring for ``status``.

    ``next_ready`` is recomputed from the replayed plan; ``dispatch`` is what the
    executor may act on now (next-ready steps plus interrupted steps), empty
    unless ``status`` is ``resumable``. ``state`` is the replayed Working Memory
    view (null whenever the resume was rejected). ``watermark`` is the ledger
    sequence of the task's last event that was replayed, the lease's own
    ``lease_granted`` event included (use it as ``expected_last_seq``);
    ``replayed_events`` counts the ledger messages folded after the checkpoint's
    cursor. ``lease`` carries the secret: keep it for renewals and appends.

    ``state_omitted`` is true when the view did not fit in one reply (over
    ``AGENTLEDGER_MAX_REPLY_BYTES`` or the server's max_payload): ``state`` is
    then null and everything else is there; read the state with ``wm.get`` and
    ``min_seq`` = ``watermark`` (the Python client does that for you).
    """

    ok: bool
    status: ResumeStatus | None = None
    reasons: list[Reason] = []
    next_ready: list[str] = []
    dispatch: list[str] = []
    reconcile: list[ReconcileItem] = []
    interrupted: list[InterruptedStep] = []
    state: Any = None
    lease: LeaseBody | None = None
    checkpoint_id: int | None = None
    checkpoint_seq: int | None = None
    replayed_events: int = 0
    watermark: int = 0
    state_omitted: bool = False
    error: ErrorBody | None = None
