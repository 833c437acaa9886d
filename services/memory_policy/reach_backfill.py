"""The put-back reference's entries (``reach_log``) of the records committed before the stream
existed: the leader writes them once, when it creates the stream (the first start of a version
with it, or the stream deleted since), from a fold of the ``_memory`` ledger up to the
committed watermark, never from the rows (which may have been put back meanwhile).

The fold passes over what the live projection passed over (the sequences in
``projection_rejections``, what ``unfoldable`` refuses, a message whose chain fails from
``GENESIS``, what ``decode`` rejects), as a rebuild does, so each record's sequence is the one
its committed row holds. One tenant at a time (its ``_memory`` subject), so only one tenant's
reducer state is held; it runs beside the service, and each entry is written only where the
live leader has written none since (``reach_log.publish(first=True)``). Its cost grows with the
ledger (about 13 s of a core per 100,000 messages here), once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import asyncpg
import structlog
from nats.aio.client import Client

from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.core.ledger_chain import GENESIS
from agentledger.core.memory.state import MemoryState
from agentledger.projection.chain_gate import ChainGate
from agentledger.projection.poison import passed_over, unfoldable
from agentledger.projection.stream import read_ordered
from agentledger.services.memory_policy import reach_log
from agentledger.services.memory_policy.fold import Folded, fold
from agentledger.stores.ledger import chain_key_of, ledger_subject

if TYPE_CHECKING:  # the projection starts the backfill
    from agentledger.services.memory_policy.projection import MemoryFold

log = structlog.get_logger()

_TENANTS = "SELECT DISTINCT tenant FROM memory_records"


async def backfill(nc: Client, settings: Settings, pool: asyncpg.Pool, memory: MemoryFold, projection: int) -> int:
    """Fold each tenant's ``_memory`` subject up to the committed watermark of ``projection``
    and write its records' entries; how many were sent (none if another projection is live)."""
    async with pool.acquire() as conn:
        position = await memory.store().position(conn)
        skip = await passed_over(conn, memory.durable)
        tenants = [r[0] for r in await conn.fetch(_TENANTS)]
    if position is None or position[1] != projection or position[0] <= 0:
        return 0
    upto, prefix = position[0], settings.prefix
    sent = 0
    for tenant in tenants:
        if not reach_log.is_token(tenant):
            continue
        state = MemoryState(key_secret=memory.key_secret)
        chain = ChainGate(chain_key_of(settings), prefix, start=GENESIS)

        def handle(msg: Any, seq: int, state: MemoryState = state, chain: ChainGate = chain) -> None:
            if seq in skip or unfoldable(msg.data) is not None:
                return
            if chain.refused(msg.subject, seq, msg.data, msg.headers) is not None:
                return
            chain.commit()
            event = memory.decode(prefix, msg.subject, msg.data, seq)
            if event is not None:
                fold(state, [(seq, event)], Folded())

        await read_ordered(nc, settings, handle, subject=ledger_subject(prefix, tenant, ev.MEMORY_TASK), upto=upto)
        rows = [((tenant, rid), row.ledger_seq) for group in state.rows.values() for rid, row in group.items()]
        sent += await reach_log.publish(nc, settings, memory.keys, projection, rows, first=True)
    log.info("memory.reach_backfilled", entries=sent, tenants=len(tenants), upto=upto)
    return sent
