"""The leading memory-policy instance tells the others which record versions it committed, so
that a standby's put-back reference (``record_reach``) follows the ledger after its start.

A standby never folds (it waits for the projection's leadership lock) but serves reads, and
its start-up fold (``reach_seed``) knows only the versions committed before it. So after each
committed batch the leader publishes (``agentledger.shell.peer_notes``, on
``<prefix>.reach.memory``) each record the batch left and the ledger sequence its row is at
now, with the projection's id; a standby notes them as its own commits would be noted.

Published after the commit, so a standby's read that takes its ``mark`` after a note finds
the committed row. A note that is lost (a reconnect) leaves that record's reference at its
older version until its next note: a row put back to the version just before is then found
by the audit only; never a current row refused. A note of another projection (a rebuild
was switched in) means this process's references may name versions the new projection does
not hold: they are cleared and seeded again from the ledger.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec
from nats.aio.client import Client
from nats.aio.subscription import Subscription

from agentledger.shell import peer_notes

# Records per note: a bulk batch stays well inside the server's payload limit.
ROWS_PER_NOTE = 2000

Row = tuple[tuple[str, str], int]  # ((tenant, record id), ledger sequence)


class ReachNote(msgspec.Struct, frozen=True, array_like=True):
    """One committed batch's records: ``(tenant, record id, ledger sequence)``, and the id of
    the projection that committed them."""

    projection: int
    rows: list[tuple[str, str, int]]


def reach_subject(prefix: str) -> str:
    return f"{prefix}.reach.memory"


async def publish(nc: Client, prefix: str, projection: int, rows: Sequence[Row]) -> None:
    """The leader's: the records a committed batch left (nothing when it left none)."""
    for i in range(0, len(rows), ROWS_PER_NOTE):
        part = [(tenant, rid, seq) for (tenant, rid), seq in rows[i:i + ROWS_PER_NOTE]]
        await peer_notes.publish(nc, reach_subject(prefix), ReachNote(projection=projection, rows=part))


async def listen(nc: Client, prefix: str, on_note: Callable[[int, list[Row]], None]) -> Subscription:
    """Every instance's: ``on_note(projection, rows)`` for each note."""
    return await peer_notes.listen(nc, reach_subject(prefix), ReachNote, lambda note: on_note(
        note.projection, [((tenant, rid), seq) for tenant, rid, seq in note.rows]))
