"""When the ledger no longer backs what Working Memory was folded from: ``ledger_gap``.

A task's row holds the sequence of the last ledger message folded into it. The
ledger stream holds messages from its first sequence on; messages are erased one
by one (a forget), but the stream starts after a task's last folded message only
when everything before it went at once: the stream was deleted and recreated (it
then numbers on after the high-water mark, ``stores/numbering.py``) or purged.
Such a task's view can no longer be rebuilt, and events of it the projection had
not folded yet may be lost; retrying cannot bring them back. A stream recreated
numbering from 1 again (without the mark) is worse: its sequences are not the
ones the projection folded, and nothing can be folded from it.

``LedgerSpan`` is what the projector last saw of the stream (refreshed every
turn of its ownership loop); the two checks turn it into the typed, non-retryable
error ``wm.get`` answers, naming the missing range.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentledger.errors import LedgerGapError

REMEDY = ("`agentledger replay --allow-shrink` rebuilds the projection from what the ledger "
          "holds now, dropping what it no longer holds")


@dataclass(frozen=True)
class LedgerSpan:
    """The ledger stream's numbering: the lowest sequence it holds (an empty stream: the next
    it will assign), the highest it has assigned, and the highest watermark of the projection
    (read before the stream, so it never exceeds ``numbered`` unless the stream renumbered)."""

    first: int
    numbered: int
    folded: int


def renumbered(span: LedgerSpan | None) -> LedgerGapError | None:
    """The error for every read when the ledger numbers below the projection's watermark."""
    if span is None or span.folded <= span.numbered:
        return None
    return LedgerGapError(
        f"the ledger stream numbers only up to seq {span.numbered} but the projection folded up to "
        f"seq {span.folded}: it was recreated numbering from 1 again, so seq 1 to {span.folded} the "
        f"projection was folded from are missing and nothing after them can be folded; {REMEDY}",
        first_missing=1, last_missing=span.folded)


def task_gap(span: LedgerSpan | None, task_seq: int) -> LedgerGapError | None:
    """The error for a task last folded at ``task_seq`` when the ledger starts after it."""
    if span is None or task_seq >= span.first:
        return None
    return LedgerGapError(
        f"the ledger no longer holds seq 1 to {span.first - 1} (its stream was deleted and recreated,"
        f" or purged; it starts at seq {span.first}): this task was last folded at seq {task_seq}, so"
        f" its view cannot be rebuilt and its events after seq {task_seq} may be lost; {REMEDY}",
        path="$.task_id", first_missing=1, last_missing=span.first - 1)
