"""The chained ledger: every event's MAC binds it to its task, its place and the event before it.

Each ledger message carries ``Agentledger-Chain: <index>;<prev>;<tag>``: its per-task index
(1, 2, 3, ... in the task's order), the tag of the task's previous message (``-`` for the
first) and its own tag, a keyed MAC (``core.integrity``, domain ``LEDGER_LINK``, under the key
epoch the tag names) over the tenant, the task, the index, the previous tag, the stored body
bytes and the message's metadata (its dedupe id, content digest and fence stamp). So a body or
header changed, a message copied to another task, one forged without the key, two swapped, one
dropped from the middle or a tail cut back to an older head each fail a check here: the first
four fail the message's own tag, the others its link to the head before it (or the witness of
heads kept outside the store, ``stores.witness``).

Messages written before chaining existed carry no chain header. A task whose messages so far
are all unchained is a legacy task and an unchained message is accepted on it; once a task has
a chained message, an unchained one after it is refused. A chain may start after a legacy
prefix (index 1 with no previous tag).

The tenant's service ledgers (``_memory``, ``_documents``, ``_forget``) lose single messages
to forget requests (a forgotten memory record's messages are erased), so their checks accept a
gap in the indexes (``erasable``): every message must still carry its own valid tag and the
indexes must still grow.

Pure: the keys come in as a lookup, the bytes as arguments; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from agentledger.core.integrity import LEDGER_LINK, matches, tag
from agentledger.errors import IntegrityViolationError

CHAIN = "Agentledger-Chain"
# The metadata headers a link covers besides the body (see ``stores.ledger``): the dedupe id
# names tenant, task and event id; the digest and fence are what the writer vouches for.
MSG_ID = "Nats-Msg-Id"
DIGEST = "Agentledger-Digest"
FENCE = "Agentledger-Fence"
_NO_PREV = "-"

KeyOf = Callable[[int], bytes | None]


@dataclass(frozen=True, slots=True)
class Head:
    """Where a task's chain ends: the last index and its tag (0 and None: no chained message)."""

    index: int = 0
    tag: str | None = None


GENESIS = Head()
# A head that cannot be known: the message it would be read from is gone with the start of the
# ledger (a stream deleted and recreated after it, or purged: a ``ledger_gap`` the readers report
# on their own). The next message is then taken on its own tag alone, and the chain is checked
# link by link from there.
RESYNC = Head(index=-1)


def _parts(tenant: str, task: str, index: int, prev: str | None, *, body: bytes,
           headers: Mapping[str, str]) -> tuple[str | int | bytes | None, ...]:
    return (tenant, task, index, prev, body, headers.get(MSG_ID), headers.get(DIGEST), headers.get(FENCE))


def link(epoch: int, key: bytes, head: Head, *, tenant: str, task: str, body: bytes,
         headers: Mapping[str, str]) -> tuple[str, Head]:
    """The writer's side: the chain header of the message after ``head`` and the new head."""
    index = head.index + 1
    value = tag(epoch, key, LEDGER_LINK, _parts(tenant, task, index, head.tag, body=body, headers=headers))
    return f"{index};{head.tag or _NO_PREV};{value}", Head(index, value)


def parse(value: str) -> tuple[int, str | None, str] | None:
    """(index, previous tag, tag) of a chain header, or None when it is not one."""
    index, sep1, rest = value.partition(";")
    prev, sep2, own = rest.partition(";")
    if not sep1 or not sep2 or not index.isdigit() or int(index) < 1 or not own:
        return None
    return int(index), None if prev == _NO_PREV else prev, own


def _where(tenant: str, task: str, index: int | None, seq: int) -> str:
    at = f"index {index} " if index is not None else ""
    return f"ledger event {at}(seq {seq}) of tenant {tenant!r} task {task!r}"


def own_head(key_of: KeyOf, *, tenant: str, task: str, seq: int, body: bytes,
             headers: Mapping[str, str] | None) -> Head | None:
    """The head a single message makes, checked on its own (its tag over its bytes); None for
    an unchained message. Raises ``IntegrityViolationError`` when its tag fails."""
    headers = headers or {}
    value = headers.get(CHAIN)
    if value is None:
        return None
    parsed = parse(value)
    if parsed is None:
        raise IntegrityViolationError(f"{_where(tenant, task, None, seq)} has a malformed chain header: "
                                      "it was changed outside the services", where="ledger")
    index, prev, own = parsed
    if not matches(own, key_of, LEDGER_LINK, _parts(tenant, task, index, prev, body=body, headers=headers)):
        raise IntegrityViolationError(
            f"{_where(tenant, task, index, seq)} fails its integrity tag: its bytes, its metadata or "
            "its task were changed, or it was forged, outside the services", where="ledger")
    return Head(index, own)


def prev_of(headers: Mapping[str, str] | None) -> str | None:
    """The previous tag a chained message names (None for the first or an unchained one)."""
    value = (headers or {}).get(CHAIN)
    parsed = parse(value) if value is not None else None
    return parsed[1] if parsed is not None else None


def check(head: Head, key_of: KeyOf, *, tenant: str, task: str, seq: int, body: bytes,
          headers: Mapping[str, str] | None, erasable: bool = False) -> Head:
    """The reader's side: the head after the message, which must follow ``head`` (the task's
    head before it; ``GENESIS`` for a task not seen yet). Raises ``IntegrityViolationError``
    naming tenant, task and index for an unchained message in a chained task, a failed tag, or
    a message that does not link to ``head`` (reordered, replayed, one before it missing)."""
    new = own_head(key_of, tenant=tenant, task=task, seq=seq, body=body, headers=headers)
    if head.index < 0:
        return new if new is not None else head
    if new is None:
        if head.index:
            raise IntegrityViolationError(
                f"{_where(tenant, task, None, seq)} carries no chain tag, but the task's chain "
                f"reached index {head.index}: it was inserted outside the services", where="ledger")
        return head
    if new.index <= head.index:
        raise IntegrityViolationError(
            f"{_where(tenant, task, new.index, seq)} comes after index {head.index}: the ledger was "
            "reordered or an event was replayed into it outside the services", where="ledger")
    if new.index > head.index + 1:
        if erasable:
            return new
        raise IntegrityViolationError(
            f"{_where(tenant, task, new.index, seq)} follows index {head.index}: events "
            f"{head.index + 1} to {new.index - 1} are missing from the ledger", where="ledger")
    if prev_of(headers) != head.tag:
        raise IntegrityViolationError(
            f"{_where(tenant, task, new.index, seq)} does not link to the task's event before it: "
            "an event was replaced or moved outside the services", where="ledger")
    return new


def behind(head: Head, witnessed: Head) -> bool:
    """Whether a chain ending at ``head`` is behind (or beside) the ``witnessed`` head: the
    ledger was cut back or rolled back past what the witness saw."""
    if head.index < witnessed.index:
        return True
    return head.index == witnessed.index and head.tag != witnessed.tag
