"""Checkpoints: a verifiable snapshot of Working Memory at a ledger cursor.

``CP = <task, goal hash, plan version, ledger cursor, done, next-ready,
variables, artifacts, budget, open questions, schema version, expiry, checksum>``
plus the reducer state needed to replay the ledger after the cursor with the
same reducer. Nothing in it grows with history: the state holds neither the ids
of applied events nor the transcript. Resume decides duplicates after the cursor
with the projection's ``applied_events`` index (ids consumed up to the cursor)
and reads the turns up to the state's ``turns`` ordinal from the projection's
``task_turns`` rows, so it answers as the live projection does. A checkpoint's
size therefore depends on the state, not on how many events produced it.

Pure: time comes in as an argument; the checksum is blake3 over the canonical
encoding of everything but the checksum itself.
"""

from __future__ import annotations

from typing import Any

import blake3
import msgspec
from msgspec import Struct

from agentledger.contracts.events import ArtifactRef
from agentledger.core.state import (
    STATE_VERSION,
    WorkingMemory,
    core_view,
    decode_state,
    encode_state,
    variables_view,
)

CHECKPOINT_SCHEMA_VERSION = 1


class Checkpoint(Struct, frozen=True, kw_only=True):
    schema_version: int
    tenant: str
    task_id: str
    goal_hash: str | None
    plan_id: str | None
    plan_version: int
    ledger_cursor: int
    done: list[str]
    next_ready: list[str]
    variables: dict[str, Any]
    artifacts: list[ArtifactRef]
    budget: dict[str, Any]
    open_questions: dict[str, Any]
    created_at: float
    expires_at: float
    # The reducer state at the cursor (``encode_state``).
    state: bytes
    checksum: str = ""


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Checkpoint)


def _digest(cp: Checkpoint) -> str:
    return blake3.blake3(_encoder.encode(msgspec.structs.replace(cp, checksum=""))).hexdigest()


def build(state: WorkingMemory, *, now: float, ttl_s: float) -> Checkpoint:
    """Snapshot ``state`` (which reflects the ledger up to ``state.watermark``)."""
    v = core_view(state)
    cp = Checkpoint(
        schema_version=CHECKPOINT_SCHEMA_VERSION,
        tenant=state.tenant,
        task_id=state.task_id,
        goal_hash=state.goal.goal_hash if state.goal else None,
        plan_id=state.plan_id,
        plan_version=state.plan_version,
        ledger_cursor=state.watermark,
        done=v["done"],
        next_ready=v["next_ready"],
        variables=variables_view(state),
        artifacts=list(state.artifacts.values()),
        budget=v["budget"],
        open_questions=v["open_questions"],
        created_at=now,
        expires_at=now + ttl_s,
        state=encode_state(state),
    )
    return msgspec.structs.replace(cp, checksum=_digest(cp))


def encode(cp: Checkpoint) -> bytes:
    return _encoder.encode(cp)


def decode(data: bytes) -> Checkpoint:
    """Decode a stored checkpoint; a damaged body raises ``msgspec.DecodeError``."""
    return _decoder.decode(data)


def checksum_ok(cp: Checkpoint) -> bool:
    return cp.checksum == _digest(cp)


class _StateV1(Struct):
    """What a state of version 1 holds that version 2 counts instead (an explicit upcaster)."""

    transcript: list[msgspec.Raw] = []


_v1_decoder = msgspec.json.Decoder(_StateV1)


def restore(cp: Checkpoint, events: int = 0) -> WorkingMemory:
    """The reducer state to continue folding from, at ``cp.ledger_cursor``.

    A checkpoint saved before state version 2 kept the transcript inside its state
    and counted its events only in its row: ``events`` is that count (the
    checkpoint row's ``events``), and the turns become their last ordinal.
    """
    state = decode_state(cp.state)
    if state.state_version < 2:
        old = _v1_decoder.decode(cp.state)
        state.turns = len(old.transcript)
        state.events_applied = events
        state.state_version = STATE_VERSION
    return state
