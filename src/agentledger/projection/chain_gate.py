"""The ledger chain's check in the folds of the tenants' service ledgers (``_memory``,
``_documents``): a message whose chain fails is passed over, never folded.

The same check as the projector's (``core.ledger_chain.check``), with ``erasable`` on: these
ledgers lose single messages to forget requests, so an index gap is accepted, while every
message must carry its own valid tag (a body, a header or the subject changed, a message
forged or copied from another tenant fails it) and the indexes must grow (a message
reordered or replayed fails). Each subject's head is kept in memory; a subject not seen since
the gate was made starts at ``start`` (``GENESIS`` for a fold from the ledger's beginning,
``RESYNC`` for a live loop that resumes at a watermark: its first message is checked on its own
tag, the following ones link by link). A message whose check fails leaves the head where it
was. Heads move only when the batch that folded them commits (``commit``; ``discard`` after a
rolled-back one).

Pure but for the state it keeps: no I/O. With integrity off (no key lookup) it passes all.
"""

from __future__ import annotations

from collections.abc import Mapping

from agentledger.core import ledger_chain
from agentledger.core.ledger_chain import Head, KeyOf
from agentledger.errors import IntegrityViolationError
from agentledger.stores.ledger import subject_key

# Bounded: past this many subjects the heads start over (each at ``start`` again).
MAX_SUBJECTS = 100_000


class ChainGate:
    """Per subject, the chain head folded so far; see the module docstring."""

    def __init__(self, key_of: KeyOf | None, prefix: str, *, start: Head) -> None:
        self.key_of, self.prefix, self.start = key_of, prefix, start
        self._heads: dict[str, Head] = {}
        self._pending: dict[str, Head] = {}

    def refused(self, subject: str, seq: int, data: bytes, headers: Mapping[str, str] | None) -> str | None:
        """Why the message must not be folded (an ``integrity_violation``), or None; a message
        that passes moves its subject's pending head."""
        if self.key_of is None:
            return None
        key = subject_key(self.prefix, subject)
        if key is None:
            return None  # not a ledger subject: the fold's decode refuses it
        head = self._pending[subject] if subject in self._pending else self._heads.get(subject, self.start)
        try:
            self._pending[subject] = ledger_chain.check(head, self.key_of, tenant=key[0], task=key[1], seq=seq,
                                                        body=data, headers=headers, erasable=True)
        except IntegrityViolationError as exc:
            return exc.message
        return None

    def commit(self) -> None:
        if len(self._heads) > MAX_SUBJECTS:
            self._heads.clear()
        self._heads.update(self._pending)
        self._pending.clear()

    def discard(self) -> None:
        self._pending.clear()

    def clear(self) -> None:
        """The projection starts over (from a watermark it did not write)."""
        self._heads.clear()
        self._pending.clear()
