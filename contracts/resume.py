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
* ``needs_accept`` (schema version 2 requests only): artifacts the task cites
  were erased by forget requests (``erased``: each URI, why, and the request's id).
  Nothing was leased and nothing changed; like a rejected reply it carries only
  ``status``, ``reasons`` and ``erased``. Resume again with each of those request
  ids in ``accept_erased`` to continue without those artifacts; the accepted
  reply lists them in ``erased`` too. A version 1 request is ``rejected`` with
  ``artifact_forgotten`` instead (its callers know no other status).
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
from agentledger.errors import ContractError

Holder = Annotated[str, Meta(min_length=1, max_length=128,
                             description="the executor's id; it becomes the lease holder")]
CheckpointId = Annotated[int, Meta(ge=1)]

ResumeStatus = Literal["resumable", "needs_reconcile", "needs_accept", "rejected"]
# The schema versions of ``ResumeRequest`` this checkpointer reads (2 added ``accept_erased``,
# 3 ``request_id``).
RESUME_VERSIONS = (1, 2, 3)
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

    ``schema_version`` 2 (1 when left out) may be answered ``needs_accept`` and may
    carry ``accept_erased``: the ids of the forget requests whose erasure of cited
    artifacts the executor accepts (only those: an artifact erased by a request not
    named here still stops the resume). A version 1 request with ``accept_erased``
    is ``unknown_field``, as any field its version does not have.

    ``schema_version`` 3 is version 2 with ``request_id``: the caller's id of this resume,
    the same on every retry of it. A retry is then answered with the first attempt's answer
    (the same lease, secret included) instead of taking a second lease
    (``services.checkpointer.resume_once``).
    """

    tenant: Token
    task_id: Token
    executor: Holder
    lease_ttl_s: Annotated[float, Meta(gt=0, le=MAX_LEASE_TTL_S)] = 60.0
    checkpoint_id: CheckpointId | None = None
    schema_version: int = 1
    accept_erased: Annotated[list[Token], Meta(max_length=1000)] = []
    request_id: Token | None = None


def check_resume_version(req: ResumeRequest) -> None:
    """Refuse a version this contract does not have, and a field its version does not have."""
    if req.schema_version not in RESUME_VERSIONS:
        raise ContractError(f"resume requests have schema versions {list(RESUME_VERSIONS)}, not "
                            f"{req.schema_version}", code="unknown_schema_version", path="$.schema_version")
    if req.schema_version < 2 and req.accept_erased:
        raise ContractError("accept_erased is a field of schema version 2 resume requests; send "
                            '"schema_version": 2', code="unknown_field", path="$.accept_erased")
    if req.schema_version < 3 and req.request_id is not None:
        raise ContractError("request_id is a field of schema version 3 resume requests; send "
                            '"schema_version": 3', code="unknown_field", path="$.request_id")


class Reason(Struct, frozen=True, omit_defaults=True):
    """Why a resume has the status it has: a stable ``code`` and a message for people."""

    code: str
    message: str
    severity: Severity
    uri: str | None = None
    detail: dict[str, Any] | None = None


class ErasedArtifact(Struct, frozen=True):
    """An artifact the task cites that a forget request erased (``reason``: ``forgotten``),
    for good: it cannot be restored, only accepted as gone (``accept_erased``) or produced
    again."""

    uri: str
    reason: Literal["forgotten"]
    request_id: str


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

    ``erased`` lists the cited artifacts forget requests erased (``needs_accept``, and
    a resume that accepted them).

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
    erased: list[ErasedArtifact] = []
    error: ErrorBody | None = None
