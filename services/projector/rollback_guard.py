"""Refuse a Working Memory task put back whole at an older version (every row with its
then-valid tag): the tags cannot see that, only something the stores' holder cannot roll back.

Two references, both cheap:

* **what this process already knows the row reached**: the sequence of every task row its
  lanes committed and of every row it verified and served. A row read later at a lower
  sequence is older than what this process applied or answered: it was put back (the
  projection's rows only move forward; a rebuilt projection starts a fresh record,
  ``clear``). One dict lookup per read.
* **the ledger, once per task** not known yet (after a start, or a task another instance
  folds): the task's last message, by one direct get of its subject. A row behind it is
  ordinary lag while the partition's watermark is below that message, and a row put back
  when the watermark is past it (the projection claims to have folded it), unless that
  message was never folded into the state (it is a rejection row: undecodable, or refused
  for its chain, which ``broken_at`` reports on its own).

What stays open: with several projector instances, a task another instance folds and this one
has already seen is checked against what this one saw, not the ledger's newest head.
"""

from __future__ import annotations

from agentledger.errors import IntegrityViolationError

Key = tuple[str, str]
# Bounded: a process that met more tasks than this starts over (each costs one direct get again).
MAX_TASKS = 200_000


class RollbackGuard:
    """Per task, the highest row sequence this process knows was committed or served."""

    def __init__(self) -> None:
        self._reached: dict[Key, int] = {}

    def note(self, key: Key, seq: int) -> None:
        """The task's row is known to have reached ``seq`` (committed, or verified and served)."""
        if len(self._reached) >= MAX_TASKS and key not in self._reached:
            self._reached.clear()
        if seq > self._reached.get(key, 0):
            self._reached[key] = seq

    def reached(self, key: Key) -> int | None:
        """The sequence the task's row is known to have reached, None when it is not known."""
        return self._reached.get(key)

    def forget(self, tenant: str, task_id: str | None) -> None:
        """A forget request erased the task (or the tenant): its record starts again."""
        for key in [k for k in self._reached if k[0] == tenant and (task_id is None or k[1] == task_id)]:
            del self._reached[key]

    def clear(self) -> None:
        """The projection was rebuilt or switched: its rows may be numbered anew."""
        self._reached.clear()


def put_back(tenant: str, task_id: str, seq: int, reached: int, *, by: str) -> IntegrityViolationError:
    """The error for a row at ``seq`` older than the ``reached`` sequence ``by`` names."""
    return IntegrityViolationError(
        f"the Working Memory of {tenant}/{task_id} is at ledger sequence {seq}, older than {by} "
        f"({reached}): an older copy of its rows was put back outside the services "
        "(`agentledger replay --verify` names it)", where="working_memory")
