"""Integrity tags of the Working Memory projection's rows: what the projector writes and
``wm.get`` checks (pure; the keys come in as data).

A task is stored in parts (``core.state``): its core row, one row per variable, one row per
turn. The tags are laid out so that a read checks what it is about to serve over bytes it
already holds, with a handful of hash calls whatever the task's size:

* the **task tag** (on the core row) binds tenant, task, the ledger sequence the row was last
  folded at, the core bytes and a digest of *every* variable row (``variables_digest``: one
  blake3 over the rows' names and bytes, in name order, as one statement reads them). A
  variable row edited, deleted, forged, copied from another task or put back at an old
  version changes that digest, so the task tag fails;
* a **rejection tag** (on each row of the task's rejection trace) binds tenant, task, ledger
  sequence and every column the trace shows (event id, kind, code, reason);
* a **turn tag** (on each turn row) binds tenant, task, ordinal and the turn's bytes; the
  core's ``turns`` (the last ordinal, under the task tag) says how many there must be, so a
  read checks that the ordinals it got are the contiguous run ending there: a turn deleted,
  forged, moved or edited fails. Turns are append-only, so a turn has no old version.

What a tag cannot see on its own: the whole task put back at an older version (every row
with its then-valid tag). That needs something the data folder's holder cannot roll back:
the projector's own record of what it applied, and the ledger's last message of the task
(``services.projector.rollback_guard``; docs/security.md, "Verified projections").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import blake3

from agentledger.core import integrity
from agentledger.core.integrity import WORKING_MEMORY
from agentledger.errors import IntegrityViolationError

KeyOf = Callable[[int], bytes | None]
_SEP = b"\x00"  # neither a PostgreSQL text (a name) nor JSON text (a value) holds a raw NUL


def variables_digest(joined: bytes | None) -> bytes:
    """The digest of a task's variable rows given as ``name NUL value`` joined by NUL, in
    name order by code point (what ``variables_input`` builds and the read statement returns)."""
    return blake3.blake3(joined or b"").digest()


def variables_input(rows: Mapping[str, bytes]) -> bytes:
    """``name NUL value`` of every variable row (name -> stored bytes), joined by NUL, in name
    order by code point (PostgreSQL's ``COLLATE "C"`` on UTF-8)."""
    return _SEP.join(name.encode() + _SEP + rows[name] for name in sorted(rows))


def _task_parts(tenant: str, task_id: str, seq: int, core: bytes, digest: bytes) -> tuple[integrity.Part, ...]:
    return ("task", tenant, task_id, seq, core, digest)


def task_tag(epoch: int, key: bytes, tenant: str, task_id: str, *, seq: int, core: bytes,
             digest: bytes) -> str:
    """The core row's tag (``digest``: ``variables_digest`` of the task's variable rows)."""
    return integrity.tag(epoch, key, WORKING_MEMORY, _task_parts(tenant, task_id, seq, core, digest))


def turn_tag(epoch: int, key: bytes, tenant: str, task_id: str, *, ordinal: int, turn: bytes) -> str:
    """A turn row's tag."""
    return integrity.tag(epoch, key, WORKING_MEMORY, ("turn", tenant, task_id, ordinal, turn))


def rejection_tag(epoch: int, key: bytes, row: Sequence[str | int]) -> str:
    """A rejection row's tag; ``row``: (tenant, task, seq, event id, kind, code, reason)."""
    return integrity.tag(epoch, key, WORKING_MEMORY, ("rejection", *row))


def check_rejection(key_of: KeyOf, row: Sequence[str | int], tag: str | None) -> None:
    """Raise ``IntegrityViolationError`` unless ``tag`` is the rejection row's tag."""
    integrity.check(tag, key_of, WORKING_MEMORY, ("rejection", *row), where="working_memory",
                    what=f"the rejection of {row[0]}/{row[1]} at seq {row[2]}")


def check_task(key_of: KeyOf, tenant: str, task_id: str, *, seq: int, core: bytes, digest: bytes,
               tag: str | None) -> None:
    """Raise ``IntegrityViolationError`` unless ``tag`` is the core row's tag."""
    integrity.check(tag, key_of, WORKING_MEMORY, _task_parts(tenant, task_id, seq, core, digest),
                    where="working_memory", what=f"the Working Memory of {tenant}/{task_id} (seq {seq})")


def check_turns(key_of: KeyOf, tenant: str, task_id: str, *, last: int, ordinals: Sequence[int],
                turns: Sequence[bytes], tags: Sequence[str | None], tail: int | None) -> None:
    """Raise ``IntegrityViolationError`` unless the turn rows read are whole and untouched:
    ``ordinals`` the run ending at ``last`` (the core's ``turns``) that was asked for (every
    turn, or the newest ``tail``), each row's tag valid for its bytes."""
    want = last if tail is None else min(tail, last)
    if list(ordinals) != list(range(last - want + 1, last + 1)):
        raise IntegrityViolationError(
            f"the transcript of {tenant}/{task_id} does not hold turns {last - want + 1}..{last}"
            " as its task row says: a turn row was deleted, moved or inserted outside the services",
            where="working_memory")
    for ordinal, turn, tag in zip(ordinals, turns, tags, strict=True):
        integrity.check(tag, key_of, WORKING_MEMORY, ("turn", tenant, task_id, ordinal, turn),
                        where="working_memory", what=f"turn {ordinal} of {tenant}/{task_id}")
