"""The memory projection, live: ``_memory`` subjects of the ledger → the memory tables.

A durable pull consumer ``memory-policy`` (AckAll) filtered on
``<prefix>.ledger.*._memory``. PostgreSQL's ``memory_watermark`` is the truth:
the consumer is always (re)created to deliver from ``watermark + 1``. Each
fetched batch is applied in ONE transaction that row-locks the watermark,
skips messages at or below it (a redelivery is a no-op), checks that no memory
message between the watermark and the batch was left out, reads back the part
of each tenant's state the batch touches, folds it with the reducer, writes
only the groups and rows that changed, and moves the watermark; then the batch
is acked. A watermark this process did not write (``replay`` rebuilt the
projection) makes it start over from the new one.

A message on a memory subject that is not a memory event of that tenant (the
writer lets none through) is logged and passed over (a row of
``projection_rejections``): it only moves the watermark. ``applied`` and
``wait_for`` give the service read-your-writes: a decision waits until the
projection holds the decisions appended before it. The loop is
``agentledger.projection.live``'s, shared with the document index; this
module says how a batch of memory events becomes rows.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import asyncpg
import msgspec
import structlog
from nats.aio.client import Client

from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.projection.live import LedgerProjection
from agentledger.services.memory_policy.fold import Folded, Vectors, fold, load_state, write_loaded
from agentledger.services.memory_policy.store import MemoryStore
from agentledger.stores.ledger import subject_key

log = structlog.get_logger()

DURABLE = "memory-policy"

_decoder = msgspec.json.Decoder(ev.AnyEvent)


def memory_filter(prefix: str) -> str:
    """The ledger subjects of every tenant's memory: ``<prefix>.ledger.*._memory``."""
    return f"{prefix}.ledger.*.{ev.MEMORY_TASK}"


def decode_memory(prefix: str, subject: str, data: bytes, seq: int) -> ev.EventBase | None:
    """The memory event a message on a memory subject carries, or None (logged) if it is not one."""
    key = subject_key(prefix, subject)
    try:
        event = _decoder.decode(data)
    except (msgspec.MsgspecError, RecursionError) as exc:
        log.warning("memory.undecodable", seq=seq, error=type(exc).__name__)
        return None
    if key is None or ev.kind_of(event) not in ev.MEMORY_KINDS or (event.tenant, event.task_id) != key:
        log.warning("memory.not_a_memory_event", seq=seq, kind=ev.kind_of(event))
        return None
    return event


def by_tenant(events: list[tuple[int, ev.EventBase]]) -> dict[str, list[tuple[int, ev.EventBase]]]:
    out: dict[str, list[tuple[int, ev.EventBase]]] = defaultdict(list)
    for seq, event in events:
        out[event.tenant].append((seq, event))
    return out


class MemoryProjection(LedgerProjection[MemoryStore]):
    """Folds the memory subjects into PostgreSQL; see the module docstring."""

    durable = DURABLE
    log_name = noun = "memory"
    description = "agentledger memory projection (position follows PostgreSQL)"

    def __init__(self, settings: Settings, nc: Client, pool: asyncpg.Pool, vectors: Vectors) -> None:
        super().__init__(settings, nc, pool, MemoryStore())
        self._vectors = vectors

    def filter_subject(self) -> str:
        return memory_filter(self.settings.prefix)

    async def apply(self, conn: asyncpg.Connection, fresh: list[tuple[int, Any]]) -> dict[str, int]:
        """Each tenant's touched state read back, folded by the reducer, and what changed written."""
        events = []
        for seq, msg in fresh:
            event = decode_memory(self.settings.prefix, msg.subject, msg.data, seq)
            if event is None:
                self.pass_over(seq, "undecodable", "not a memory event of this subject's tenant")
            else:
                events.append((seq, event))
        rows = 0
        for tenant, items in sorted(by_tenant(events).items()):
            loaded = await load_state(conn, self.store, tenant, items)
            folded = fold(loaded.state, items, Folded())
            rows += await write_loaded(conn, self.store, tenant, loaded, folded=folded, vectors=self._vectors)
        return {"rows": rows}
