"""Poison handling: no message may stop a projection.

Every tenant's projection waits behind the one message it cannot fold, so a
message that cannot be folded becomes a recorded rejection and the projection
moves past it, in the transaction that moves its watermark. Two kinds:

* what no fold can store, found before any fold sees it (``unfoldable``: a
  string holding U+0000, which PostgreSQL's ``text`` and ``jsonb`` refuse;
  nesting deeper than the contracts allow). The answer depends on the bytes
  only, so the live projection, a rebuild and a verify pass over the same
  messages;
* what fails a batch's transaction on its content (``POISON_ERRORS``: a
  PostgreSQL data error, a value the fold cannot take), found by bisecting the
  batch (``ProjectionLoop.commit_bisecting``): the other messages commit, the one
  that fails alone is recorded as ``projection_error``. A rebuild and a verify
  pass over the sequences the live projection recorded (``passed_over``).

Working Memory records both as rows of its ``rejections`` table (tenant and task
known from the subject); the projections of reserved subjects as rows of
``projection_rejections`` (the consumer's name, the sequence, a code and a reason
that holds no content).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import asyncpg
import msgspec

from agentledger.contracts.codec import MAX_DEPTH, nesting_path, nul_path

# Errors a message's content can cause while its batch is written (a value PostgreSQL
# cannot store, a row too large, a state that does not encode): the batch is split so the
# other messages commit and the one that fails alone becomes a rejection. Anything else
# (connection loss, a dropped projection, a constraint an operator added) fails the batch,
# which is retried as a whole from the watermark.
POISON_ERRORS: tuple[type[BaseException], ...] = (
    asyncpg.DataError, asyncpg.ProgramLimitExceededError, ValueError, TypeError, OverflowError,
    RecursionError, msgspec.MsgspecError)

T = TypeVar("T")
R = TypeVar("R")

_RECORD_REJECTION = ("INSERT INTO projection_rejections(projection, seq, code, reason)"
                     " SELECT $1, u.seq, u.code, u.reason FROM unnest($2::bigint[], $3::text[], $4::text[])"
                     " AS u(seq, code, reason) ON CONFLICT DO NOTHING")


def unfoldable(data: bytes) -> tuple[str, str] | None:
    """(code, reason) when no fold can store this message's body, else None.

    The same answer for the same bytes, so the live projection, a rebuild and a verify
    pass over the same messages. The reason names no content (not even the path, whose
    keys are the sender's).
    """
    if nesting_path(data, MAX_DEPTH) is not None:
        return "too_deep", f"nested deeper than {MAX_DEPTH} levels of objects and arrays"
    if nul_path(data) is not None:
        return "invalid_text", "a string holds U+0000, which PostgreSQL cannot store"
    return None


async def record_rejections(conn: asyncpg.Connection, projection: str,
                            rejected: list[tuple[int, str, str]]) -> None:
    """Record (seq, code, reason) as messages ``projection`` passed over."""
    await conn.execute(_RECORD_REJECTION, projection, [r[0] for r in rejected], [r[1] for r in rejected],
                       [r[2] for r in rejected])


async def passed_over(conn: Any, projection: str) -> frozenset[int]:
    """The sequences ``projection`` recorded as passed over."""
    rows = await conn.fetch("SELECT seq FROM projection_rejections WHERE projection = $1", projection)
    return frozenset(int(r[0]) for r in rows)


async def bisect(items: list[T], commit: Callable[[list[T]], Awaitable[list[R]]],
                 poisoned: Callable[[T, BaseException], Awaitable[None]],
                 failed: Callable[[list[T], BaseException], None] | None = None) -> list[R]:
    """``commit(items)``; when it fails on a message's content (``POISON_ERRORS``), the halves
    are committed on their own, down to the one item that fails alone, which is handed to
    ``poisoned``. ``failed`` hears of every failed attempt (before it is split)."""
    try:
        return await commit(items)
    except POISON_ERRORS as exc:
        if failed is not None:
            failed(items, exc)
        if len(items) == 1:
            await poisoned(items[0], exc)
            return []
        mid = len(items) // 2
        return [*await bisect(items[:mid], commit, poisoned, failed), *await bisect(items[mid:], commit, poisoned,
                                                                                     failed)]
