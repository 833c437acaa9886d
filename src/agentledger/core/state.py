"""Working Memory ``W_t`` of one task: the reducer's state and its public view.

The state holds what events established; derived facts (done set, next-ready,
budget left) are computed by ``view`` every time. The one exception is the
outstanding-reservation total per resource, kept in step with the reservations
so a reservation check does not rescan them all.
Dicts keep insertion order, which the event order fixes, so encoding a state
is deterministic and its hash is stable across replays.

The state is the task's *current* state, never its history: it does not hold
the ids of the events applied (idempotency is the projection's index, see
``reducer.duplicate``) nor the transcript (turns are rows of their own; the
state keeps the last ordinal, which is all the reducer needs to validate the
next turn). Stored, a task is split in parts so a batch writes only what it
changed: the core (``encode_core``: everything but the variables), one row per
variable (``encode_variable``) and one row per turn (``encode_turn``). Each
part's bytes are also exactly its JSON in the view, so a reader can splice
rows into a view without decoding them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import blake3
import msgspec
from msgspec import Struct

from agentledger.contracts.events import ArtifactRef, Goal, Sealed, StepDef
from agentledger.core.dag import next_ready

# 2: the applied event ids and the transcript left the state (``turns``, ``events_applied``).
STATE_VERSION = 2
# Rejections kept in the state, newest last. Older ones are only counted
# (``older_rejections``); every one stays in the projection's ``rejections`` table,
# which ``wm.get`` pages through. Without the bound, 10,000 refused events made a
# 1.5 MB state that every read and every checkpoint carried.
RECENT_REJECTIONS = 20


class StepState(Struct):
    """Where one step of the current plan stands."""

    status: str = "pending"  # pending | running | succeeded | failed | cancelled
    attempt: int = 0
    # Plan version under which the current attempt started (or the reset happened).
    plan_version: int = 0
    # First plan version from which this step's definition has been unchanged.
    defined_in: int = 0
    idempotency_key: str | None = None
    error_code: str | None = None
    seq: int = 0


class Variable(Struct):
    value: Any = None
    sealed: Sealed | None = None
    producer_step: str | None = None
    seq: int = 0


class Reservation(Struct):
    resource: str
    amount: int
    consumed: int = 0


class Question(Struct):
    text: str
    blocking: bool = False
    step_id: str | None = None
    status: str = "open"  # open | resolved
    answer: str | None = None


class Turn(Struct):
    """One turn of the conversation: a row of the transcript, never part of the state."""

    role: str
    ordinal: int
    seq: int
    content: str | None = None
    sealed: Sealed | None = None


class SideEffect(Struct):
    """The recorded outcome of a side-effecting call, by idempotency key."""

    step_id: str
    outcome: str  # applied | not_applied | failed
    external_ref: str | None
    seq: int


class LeaseState(Struct):
    """The task's last lease grant as the ledger records it (never its secret).

    ``token`` is the grant's ledger sequence; ``expires_at`` the grant's expiry
    (seconds since the Unix epoch, writer clock). Renewals and releases change
    the live lease in the writer's lease table only, so this says who was last
    given the task, not whether that lease is still live.
    """

    holder: str
    token: int
    expires_at: float


class Rejection(Struct):
    """An event the reducer refused, kept so the refusal is explainable."""

    seq: int
    event_id: str
    kind: str
    code: str
    reason: str


class WorkingMemory(Struct):
    tenant: str
    task_id: str
    state_version: int = STATE_VERSION
    status: str = "new"  # new | open | completed | failed | cancelled
    goal: Goal | None = None
    title: str = ""
    plan_id: str | None = None
    plan_version: int = 0
    steps: list[StepDef] = []
    step_states: dict[str, StepState] = {}
    variables: dict[str, Variable] = {}
    artifacts: dict[str, ArtifactRef] = {}
    budget_limits: dict[str, int] = {}
    budget_used: dict[str, int] = {}
    # Outstanding (reserved, not yet consumed) per resource, kept in step with
    # ``reservations`` so a reservation check does not rescan them all.
    budget_reserved: dict[str, int] = {}
    # Open reservations only: a released one is removed.
    reservations: dict[str, Reservation] = {}
    questions: dict[str, Question] = {}
    side_effects: dict[str, SideEffect] = {}
    # Ordinal of the last turn appended (the turns themselves are rows of the projection).
    turns: int = 0
    # The conversation's epoch and its lineage base: turns up to ``lineage_base`` were cleared
    # (``history_cleared``) and never enter a context again; each clear starts a new epoch.
    epoch: int = 0
    lineage_base: int = 0
    # The most recent ``RECENT_REJECTIONS`` rejections, oldest first.
    rejections: list[Rejection] = []
    # Rejections that happened before those in ``rejections`` (counted, no longer listed). A
    # state from before the bound decodes with 0 and its full list, so the total stays exact.
    older_rejections: int = 0
    # Events of this task the reducer consumed, applied or rejected (duplicates not counted).
    events_applied: int = 0
    watermark: int = 0
    lease: LeaseState | None = None
    # Last attempt of each step a replan dropped: a step added back continues counting, so an
    # idempotency key built from (step, attempt) never repeats one of an earlier plan.
    retired_attempts: dict[str, int] = {}
    # Artifacts a newer one replaced (an event's ``supersedes``), each with the ledger sequence
    # of that event; they stay in ``artifacts`` (a checkpoint still verifies every one cited),
    # but the view lists them apart and a context shows the current ones only.
    replaced_artifacts: dict[str, int] = {}


class Changes:
    """What folding events changed besides the core, so the shell writes only those rows.

    The reducer adds to it as it applies events: ``variables`` holds the names
    whose row must be (re)written, ``turns`` the turns appended, in order. The
    core is rewritten for every task a batch touched (its watermark moved), so
    it is not tracked.
    """

    __slots__ = ("turns", "variables")

    def __init__(self) -> None:
        self.variables: set[str] = set()
        self.turns: list[Turn] = []


def new_state(tenant: str, task_id: str) -> WorkingMemory:
    return WorkingMemory(tenant=tenant, task_id=task_id)


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(WorkingMemory)
_variable_decoder = msgspec.json.Decoder(Variable)
_turn_decoder = msgspec.json.Decoder(Turn)


def encode_state(state: WorkingMemory) -> bytes:
    """The whole state (core and variables): what a checkpoint keeps."""
    return _encoder.encode(state)


def decode_state(data: bytes) -> WorkingMemory:
    return _decoder.decode(data)


def encode_core(state: WorkingMemory) -> bytes:
    """The state without its variables: the task row, small whatever the task's history."""
    return _encoder.encode(msgspec.structs.replace(state, variables={}))


def encode_variable(variable: Variable) -> bytes:
    return _encoder.encode(variable)


def decode_variable(data: bytes) -> Variable:
    return _variable_decoder.decode(data)


def encode_turn(turn: Turn) -> bytes:
    return _encoder.encode(turn)


def decode_turn(data: bytes) -> Turn:
    return _turn_decoder.decode(data)


def state_hash(state: WorkingMemory, transcript: Iterable[Turn]) -> str:
    """blake3 over every part of a task's projection: the core, the variables in name order
    and the turns in order. Equal hashes mean equal projections."""
    h = blake3.blake3(encode_core(state))
    for name in sorted(state.variables):
        h.update(b"\x00v" + _encoder.encode(name) + encode_variable(state.variables[name]))
    for turn in transcript:
        h.update(b"\x00t" + encode_turn(turn))
    return h.hexdigest()


def core_hash(core: bytes) -> str:
    """blake3 of a task row's core encoding (``encode_core``)."""
    return blake3.blake3(core).hexdigest()


def variables_view(state: WorkingMemory) -> dict[str, Any]:
    """The variables as the view shows them: by name, in name order (the order a reader
    assembling the view from rows gives them too)."""
    return {name: msgspec.to_builtins(state.variables[name]) for name in sorted(state.variables)}


def current_artifacts(state: WorkingMemory) -> list[ArtifactRef]:
    """The artifact manifest without the artifacts a newer one replaced, in citation order."""
    return [ref for uri, ref in state.artifacts.items() if uri not in state.replaced_artifacts]


def core_view(state: WorkingMemory) -> dict[str, Any]:
    """The view without ``variables`` and ``transcript``, the parts stored as rows of their own."""
    status = {sid: st.status for sid, st in state.step_states.items()}
    reserved = state.budget_reserved
    resources = sorted({*state.budget_limits, *state.budget_used, *reserved})
    budget = {
        r: {
            "limit": state.budget_limits.get(r),
            "used": state.budget_used.get(r, 0),
            "reserved": reserved.get(r, 0),
            "left": (state.budget_limits[r] - state.budget_used.get(r, 0) - reserved.get(r, 0)
                     if r in state.budget_limits else None),
        }
        for r in resources
    }

    def by(wanted: str) -> list[str]:
        return [s.id for s in state.steps if status.get(s.id) == wanted]

    return {
        "tenant": state.tenant,
        "task_id": state.task_id,
        "status": state.status,
        "goal": msgspec.to_builtins(state.goal) if state.goal else None,
        "title": state.title,
        "plan": {"plan_id": state.plan_id, "version": state.plan_version,
                 "steps": msgspec.to_builtins(state.steps)},
        "steps": msgspec.to_builtins(state.step_states),
        "done": by("succeeded"),
        "running": by("running"),
        "failed": by("failed"),
        "cancelled": by("cancelled"),
        "next_ready": next_ready(state.steps, status) if state.status == "open" else [],
        "artifacts": msgspec.to_builtins(current_artifacts(state)),
        "replaced_artifacts": [{**msgspec.to_builtins(state.artifacts[uri]), "replaced_at": seq}
                               for uri, seq in state.replaced_artifacts.items()],
        "budget": budget,
        "open_questions": {qid: msgspec.to_builtins(q) for qid, q in state.questions.items()
                           if q.status == "open"},
        "side_effects": msgspec.to_builtins(state.side_effects),
        "turns_total": state.turns,
        "conversation": {"epoch": state.epoch, "lineage_base": state.lineage_base},
        "rejections": msgspec.to_builtins(state.rejections),
        "rejections_total": state.older_rejections + len(state.rejections),
        "lease": msgspec.to_builtins(state.lease) if state.lease else None,
        "watermark": state.watermark,
        "events_applied": state.events_applied,
    }


def view(state: WorkingMemory, transcript: Iterable[Turn]) -> dict[str, Any]:
    """The Working Memory as readers see it, with the derived sets computed now.

    ``transcript`` is the task's turns (all of them for the full view), which the
    state itself does not hold.
    """
    rendered = core_view(state)
    rendered["variables"] = variables_view(state)
    rendered["transcript"] = msgspec.to_builtins(list(transcript))
    return rendered
