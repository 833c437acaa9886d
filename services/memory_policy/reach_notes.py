"""The leading memory-policy instance tells the others which record versions it committed, so
that a standby's put-back reference (``record_reach``) follows the ledger after its start.

A standby never folds (it waits for the projection's leadership lock) but serves reads, and
its start-up fold (``reach_seed``) knows only the versions committed before it. So after each
committed batch the leader publishes, on ``<prefix>.reach.memory`` (core NATS, no queue
group: every instance receives it), each record the batch left and the ledger sequence its
row is at now, with the projection's id; a standby notes them as its own commits would be
noted. The subject lives in the services' account and matches none of its exports, so no
tenant can publish to it, and the tamper model's attacker (who writes PostgreSQL rows or the
stores' files) cannot either.

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
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

log = structlog.get_logger()

# Records per note: a bulk batch stays well inside the server's payload limit.
ROWS_PER_NOTE = 2000

Row = tuple[tuple[str, str], int]  # ((tenant, record id), ledger sequence)


class ReachNote(msgspec.Struct, frozen=True, array_like=True):
    """One committed batch's records: ``(tenant, record id, ledger sequence)``, and the id of
    the projection that committed them."""

    projection: int
    rows: list[tuple[str, str, int]]


_decode = msgspec.msgpack.Decoder(ReachNote).decode
_encode = msgspec.msgpack.Encoder().encode


def reach_subject(prefix: str) -> str:
    return f"{prefix}.reach.memory"


async def publish(nc: Client, prefix: str, projection: int, rows: Sequence[Row]) -> None:
    """The leader's: the records a committed batch left (nothing when it left none)."""
    for i in range(0, len(rows), ROWS_PER_NOTE):
        part = [(tenant, rid, seq) for (tenant, rid), seq in rows[i:i + ROWS_PER_NOTE]]
        await nc.publish(reach_subject(prefix), _encode(ReachNote(projection=projection, rows=part)))


async def listen(nc: Client, prefix: str, on_note: Callable[[int, list[Row]], None]) -> Subscription:
    """Every instance's: ``on_note(projection, rows)`` for each note that decodes."""

    async def on_msg(msg: Msg) -> None:
        try:
            note = _decode(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            log.warning("memory.reach_note_undecodable", size=len(msg.data))
            return
        on_note(note.projection, [((tenant, rid), seq) for tenant, rid, seq in note.rows])

    return await nc.subscribe(reach_subject(prefix), cb=on_msg)
