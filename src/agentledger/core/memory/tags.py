"""Integrity tags of memory record rows and read receipts (pure; keys come in as data).

A record row's tag binds its tenant and its bytes (the ``RecordRow`` the reducer rendered),
and those bytes hold every value a read gate looks at: record id, scope, key, kind, status,
authority, sensitivity, schema and subject versions, observation time, expiry, ledger
sequence. The gate columns beside the bytes are copies for SQL to filter on; the read
checks the tag and then applies every gate again to the verified row
(``services/memory_policy/reads.py``), so a column edited to let a record through (another
user's scope, ``active`` for a quarantined record, a raised authority) is refused as surely
as edited bytes. A receipt's tag binds its id, tenant and bytes (caller, task and candidates
are inside them); a listing applies its filters again to the verified receipts. A history
row's tag binds its tenant and every column ``memory.history`` shows or selects by (event id,
ledger sequence, event, proposal, record, scope, key, action, reason, trace bytes, time).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from agentledger.core import integrity
from agentledger.core.integrity import MEMORY_HISTORY, MEMORY_RECORD, RECEIPT

KeyOf = Callable[[int], bytes | None]


def record_tag(epoch: int, key: bytes, tenant: str, row: bytes) -> str:
    """The tag of a record row (``row``: its stored bytes)."""
    return integrity.tag(epoch, key, MEMORY_RECORD, (tenant, row))


def record_matches(key_of: KeyOf, tenant: str, row: bytes, tag: str | None) -> bool:
    return integrity.matches(tag, key_of, MEMORY_RECORD, (tenant, row))


def receipt_tag(epoch: int, key: bytes, receipt_id: str, tenant: str, receipt: bytes) -> str:
    """The tag of a stored read receipt (``receipt``: its bytes, which hold its caller, task and
    candidates; the columns beside them are copies for SQL to filter on)."""
    return integrity.tag(epoch, key, RECEIPT, (receipt_id, tenant, receipt))


def check_receipt(key_of: KeyOf, receipt_id: str, tenant: str, receipt: bytes, tag: str | None) -> None:
    integrity.check(tag, key_of, RECEIPT, (receipt_id, tenant, receipt),
                    where="receipt", what=f"read receipt {receipt_id} of tenant {tenant}")


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _history_parts(tenant: str, row: tuple[object, ...]) -> tuple[integrity.Part, ...]:
    """``row``: (event id, seq, event, proposal id, record id, scope key, key, action, reason,
    trace bytes or None, time); the time as microseconds since 1970 (what PostgreSQL keeps of it,
    whatever time zone it was given or is read back in)."""
    *head, at = row
    assert isinstance(at, datetime)
    return ("history", tenant, *head, (at - _EPOCH) // _MICROSECOND)  # type: ignore[arg-type]


def history_tag(epoch: int, key: bytes, tenant: str, row: tuple[object, ...]) -> str:
    """The tag of a ``memory_history`` row (see ``_history_parts``)."""
    return integrity.tag(epoch, key, MEMORY_HISTORY, _history_parts(tenant, row))


def check_history(key_of: KeyOf, tenant: str, row: tuple[object, ...], tag: str | None) -> None:
    integrity.check(tag, key_of, MEMORY_HISTORY, _history_parts(tenant, row), where="memory",
                    what=f"the history row of event {row[0]} of tenant {tenant}")
