"""Refuse a memory record put back at an older version with its then-valid tag (the active
version of a record later revoked, superseded or corrected): its tag cannot see that.

The reference is this process's own fold of the ``_memory`` ledger: per record, the ledger
sequence of the newest version its projection committed (``RecordReach.note`` after each
commit). A read that finds a record at an older ``ledger_seq`` than that finds a row put back
(a record's rows only move forward; a rebuilt projection starts a fresh record, ``clear``).
One dict lookup per checked record.

A read's statements may see the tables from before a commit this process noted while the read
ran, so each read takes a ``mark`` first and compares with what was committed by then only
(each entry keeps the version before its newest one for that).

The records this process has not folded itself (after a restart, or on a standby while
another instance folds) get theirs from the entries the leading instance publishes after each
commit (``reach_log``): read from the stream at start, noted as they pass after.
"""

from __future__ import annotations

from collections.abc import Iterable

Key = tuple[str, str]  # (tenant, record id)
# Bounded: past this many records the reference starts over.
MAX_RECORDS = 500_000


class RecordReach:
    """Per record, the newest ledger sequence committed (and the one before), with when."""

    def __init__(self) -> None:
        # key -> (seq, stamp, previous seq, previous stamp)
        self._seen: dict[Key, tuple[int, int, int, int]] = {}
        self._stamp = 0
        # Moves at each ``clear``: a seed read before it is dropped (``seed``).
        self.generation = 0
        # The projection (its watermark table's id) whose versions these are; None: not known yet.
        self.projection: int | None = None

    def mark(self) -> int:
        """Taken by a read before its first statement."""
        return self._stamp

    def note(self, rows: Iterable[tuple[Key, int]]) -> None:
        """One committed batch: each record's row is at that ledger sequence now."""
        self._stamp += 1
        if len(self._seen) >= MAX_RECORDS:
            self._seen.clear()
        for key, seq in rows:
            old = self._seen.get(key)
            if old is None:
                self._seen[key] = (seq, self._stamp, 0, 0)
            elif seq > old[0]:
                self._seen[key] = (seq, self._stamp, old[0], old[1])

    def seed(self, rows: Iterable[tuple[Key, int]], generation: int, projection: int) -> int:
        """The stored entries of ``projection``'s committed versions (``reach_log.read``), for
        the records not noted since, as one more committed batch: a read that took its mark
        before it does not use these. Nothing if ``clear`` ran since the read began at
        ``generation``, or if what was noted since is of another projection; how many records
        were seeded."""
        if generation != self.generation:
            return 0
        if self.projection is not None and self.projection != projection:
            return 0
        self.projection = projection
        self._stamp += 1
        n = 0
        for key, seq in rows:
            if key not in self._seen and len(self._seen) < MAX_RECORDS:
                self._seen[key] = (seq, self._stamp, 0, 0)
                n += 1
        return n

    def reached(self, mark: int, tenant: str, record_id: str) -> int:
        """The newest ledger sequence of the record committed by ``mark`` (0: none known)."""
        seen = self._seen.get((tenant, record_id))
        if seen is None:
            return 0
        seq, stamp, prev, prev_stamp = seen
        if stamp <= mark:
            return seq
        return prev if prev_stamp <= mark else 0

    def clear(self) -> None:
        """The projection was rebuilt or switched."""
        self._seen.clear()
        self.generation += 1
        self.projection = None


PUT_BACK = "an older version than the one this service committed: its row was put back outside the services"
