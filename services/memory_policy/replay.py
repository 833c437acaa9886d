"""Replay of the memory projection: rebuild it from the ledger, or verify it against the ledger.

Both are the base's (``agentledger.projection.subject``) run with ``MemoryFold``,
the fold the live projection runs. ``rebuild_memory`` builds the projection
beside the live tables and switches to them in one short transaction, so reads
of memory keep being answered (from the old tables, then from the new ones).
Receipts and usage are not projections and stay. ``verify_memory`` compares
records (rows, full-text vector, embedding and data subject), groups, history
and held feedback with a fold of the ledger, in one snapshot.

After a forget request the ledger holds a ``memory_forgotten`` tombstone and
the forgotten records' own messages are erased (gaps in the sequence): the
fold of a tombstone does not depend on having seen them, so a rebuild gives
the live rows and ``verify_memory`` stays green.

``read_tenant`` and ``fold_tenant`` fold one tenant's subject in memory (what a
test or a forget handler checks the projection against).
"""

from __future__ import annotations

from nats.aio.client import Client

from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.core.memory.state import MemoryState
from agentledger.models.embedding import load_embedder
from agentledger.projection.stream import connect, read_subject
from agentledger.projection.subject import rebuild_subject, verify_subject
from agentledger.security.integrity_keys import keys_of
from agentledger.security.sealing import marker_key_of
from agentledger.services.memory_policy import reach_log
from agentledger.services.memory_policy.fold import Folded, Vectors, fold
from agentledger.services.memory_policy.projection import MemoryFold
from agentledger.services.memory_policy.store import MemoryStore


async def read_tenant(nc: Client, settings: Settings, tenant: str, upto: int,
                      skip: frozenset[int] = frozenset()) -> list[tuple[int, ev.EventBase]]:
    """The memory events of one tenant with sequence at most ``upto``, in ledger order (without
    the sequences the live projection passed over, ``skip``)."""
    return await read_subject(nc, settings, tenant, ev.MEMORY_TASK, upto, decode=MemoryFold.decode, skip=skip)


def fold_tenant(events: list[tuple[int, ev.EventBase]], key_secret: bytes = b"") -> tuple[MemoryState, Folded]:
    state = MemoryState(key_secret=key_secret)
    return state, fold(state, events, Folded())


async def rebuild_memory(settings: Settings) -> dict[str, int]:
    """Rebuild the memory projection from the ledger beside the live one and switch to it."""
    fold = MemoryFold(Vectors(load_embedder(settings)), keys_of(settings), marker_key_of(settings))
    counts = await rebuild_subject(settings, fold)
    # The put-back reference of the projection switched in: its records at the versions the
    # rebuild folded (the live leader writes the newer ones as it goes on).
    nc, conn = await connect(settings)
    try:
        position = await MemoryStore().position(conn)
        if position is not None:
            # Only where the live leader has not written a newer one since (``first``).
            await reach_log.ensure_stream(nc, settings)
            counts["reach_entries"] = await reach_log.publish(nc, settings, fold.keys, position[1],
                                                              fold.folded.items(), first=True)
    finally:
        await conn.close()
        await nc.close()
    return counts


async def verify_memory(settings: Settings, wait_s: float = 60.0) -> list[str]:
    """Fold the ledger's memory subjects and compare with the live tables; the differences."""
    fold = MemoryFold(Vectors(load_embedder(settings)), keys_of(settings), marker_key_of(settings))
    return await verify_subject(settings, fold, wait_s)
