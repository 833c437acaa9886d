"""Checkpoints: a verifiable snapshot of Working Memory at a ledger cursor.

``CP = <task, goal hash, plan version, ledger cursor, done, next-ready,
variables, artifacts, budget, open questions, schema version, expiry, checksum>``
plus the reducer state needed to replay the ledger after the cursor with the
same reducer. The ids of applied events are left out: they grow with history,
not with state, and JetStream's dedupe window already covers redelivery around
the cursor. A checkpoint's size therefore depends on the state, not on how many
events produced it.

Pure: time comes in as an argument; the checksum is blake3 over the canonical
encoding of everything but the checksum itself.
"""

from __future__ import annotations

from typing import Any

import blake3
import msgspec
from msgspec import Struct

from agentledger.contracts.events import ArtifactRef
from agentledger.core.state import WorkingMemory, decode_state, encode_state, view

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
    # The reducer state at the cursor, without the applied-event ids.
    state: bytes
    checksum: str = ""


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(Checkpoint)


def _digest(cp: Checkpoint) -> str:
    return blake3.blake3(_encoder.encode(msgspec.structs.replace(cp, checksum=""))).hexdigest()


def build(state: WorkingMemory, *, now: float, ttl_s: float) -> Checkpoint:
    """Snapshot ``state`` (which reflects the ledger up to ``state.watermark``)."""
    slim = msgspec.structs.replace(state, applied={})
    v = view(state)
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
        variables=v["variables"],
        artifacts=list(state.artifacts.values()),
        budget=v["budget"],
        open_questions=v["open_questions"],
        created_at=now,
        expires_at=now + ttl_s,
        state=encode_state(slim),
    )
    return msgspec.structs.replace(cp, checksum=_digest(cp))


def encode(cp: Checkpoint) -> bytes:
    return _encoder.encode(cp)


def decode(data: bytes) -> Checkpoint:
    """Decode a stored checkpoint; a damaged body raises ``msgspec.DecodeError``."""
    return _decoder.decode(data)


def checksum_ok(cp: Checkpoint) -> bool:
    return cp.checksum == _digest(cp)


def restore(cp: Checkpoint) -> WorkingMemory:
    """The reducer state to continue folding from, at ``cp.ledger_cursor``."""
    return decode_state(cp.state)
