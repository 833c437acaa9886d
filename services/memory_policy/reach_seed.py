"""The reference ``record_reach`` needs for the records this process has not folded itself
(after a restart, or on a standby while another instance folds): a fold of the ``_memory``
ledger from its beginning up to the committed watermark, in memory, once per start.

It passes over what the live projection passed over (the sequences in
``projection_rejections``, what ``unfoldable`` refuses, a message whose chain fails from
``GENESIS``, what ``decode`` rejects) exactly as a rebuild does, so each record's
``ledger_seq`` is the one its committed row holds (``verify_memory`` compares the same
fold with the tables). Rows only move forward, so a fold that stops early (past
``Settings.memory_seed_max_messages``: the reducer in memory, 100k messages took ~13 s of one
core and ~90 MB here; reads are served meanwhile) still names a version at or below the
committed one: it finds fewer
rows put back, never a current row. A message the fold cannot apply stops the seed with
nothing seeded, for the same reason.

The seed runs beside the service (reads do not wait for it) and only fills records the
live loop has not noted (``RecordReach.seed``); a projection initialised again meanwhile
(``RecordReach.clear``) drops it.
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
from agentledger.projection.stream import read_ordered, subject_filter
from agentledger.services.memory_policy.fold import Folded, fold
from agentledger.services.memory_policy.record_reach import MAX_RECORDS, RecordReach
from agentledger.stores.ledger import chain_key_of

if TYPE_CHECKING:  # the projection starts the seed
    from agentledger.services.memory_policy.projection import MemoryFold

log = structlog.get_logger()

class _BoundReachedError(Exception):
    """The bound was reached: stop reading, seed what was folded."""


async def seed_reach(nc: Client, settings: Settings, pool: asyncpg.Pool, memory: MemoryFold,
                     reach: RecordReach, *, max_messages: int | None = None) -> int:
    """Fold the ``_memory`` ledger up to the committed watermark with ``memory``'s decode and
    seed ``reach`` with each record's ``ledger_seq``; how many records were seeded."""
    generation = reach.generation
    if max_messages is None:
        max_messages = settings.memory_seed_max_messages
    async with pool.acquire() as conn:
        position = await memory.store().position(conn)
        skip = await passed_over(conn, memory.durable)
    if position is None or position[0] <= 0:
        return 0
    upto, projection = position
    prefix = settings.prefix
    chain = ChainGate(chain_key_of(settings), prefix, start=GENESIS)
    states: dict[str, MemoryState] = {}
    folded = [0, 0]  # messages, last sequence

    def handle(msg: Any, seq: int) -> None:
        if folded[0] >= max_messages:
            raise _BoundReachedError
        folded[0], folded[1] = folded[0] + 1, seq
        if seq in skip or unfoldable(msg.data) is not None:
            return
        if chain.refused(msg.subject, seq, msg.data, msg.headers) is not None:
            return
        chain.commit()
        event = memory.decode(prefix, msg.subject, msg.data, seq)
        if event is None:
            return
        state = states.get(event.tenant)
        if state is None:
            state = states[event.tenant] = MemoryState(key_secret=memory.key_secret)
        fold(state, [(seq, event)], Folded())

    complete = True
    try:
        await read_ordered(nc, settings, handle, subject=subject_filter(prefix, ev.MEMORY_TASK), upto=upto)
    except _BoundReachedError:
        complete = False
    rows = [((tenant, rid), row.ledger_seq) for tenant, state in states.items()
            for group in state.rows.values() for rid, row in group.items()]
    seeded = reach.seed(rows[:MAX_RECORDS], generation, projection)
    log.info("memory.reach_seeded", records=seeded, messages=folded[0], upto=folded[1] if not complete else upto,
             complete=complete)
    return seeded
