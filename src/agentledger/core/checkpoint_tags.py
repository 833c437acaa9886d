"""The keyed tag of a stored checkpoint (pure; keys come in as data).

A checkpoint's own checksum (``core.checkpoint``) is unkeyed blake3: whoever edits the body
recomputes it. The tag is keyed and binds the row's id, tenant, task, ledger cursor, event
count and body bytes, so an edited body, a body copied to another task or row, or a moved
cursor fails it. What it cannot see alone: an older checkpoint of the same task put back
whole with its then-valid tag; resume replays the ledger after the checkpoint's cursor and
reconciles, so an old checkpoint costs a longer replay, never a wrong state (a test compares
it with the live projection).
"""

from __future__ import annotations

from collections.abc import Callable

from agentledger.core import integrity
from agentledger.core.integrity import CHECKPOINT


def checkpoint_tag(epoch: int, key: bytes, checkpoint_id: int, tenant: str, task_id: str, *, seq: int,
                   events: int, body: bytes) -> str:
    return integrity.tag(epoch, key, CHECKPOINT, (checkpoint_id, tenant, task_id, seq, events, body))


def check_checkpoint(key_of: Callable[[int], bytes | None], checkpoint_id: int, tenant: str, task_id: str, *,
                     seq: int, events: int, body: bytes, tag: str | None) -> None:
    """Raise ``IntegrityViolationError`` unless ``tag`` is the row's tag."""
    integrity.check(tag, key_of, CHECKPOINT, (checkpoint_id, tenant, task_id, seq, events, body),
                    where="checkpoint", what=f"checkpoint {checkpoint_id} of {tenant}/{task_id}")
