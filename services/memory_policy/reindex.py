"""Index text of memory records made by an older derivation, derived again as the projection starts.

A record's full-text vector, length and embedding are derived from its row by
``fold.search_text``; when that derivation changes (``fold.INDEX_TEXT_VERSION``
goes up), the rows already written keep the old index until they are derived
again, and ``replay --verify``, which folds the ledger with the new derivation,
would report every one of them as different: after an upgrade that is
indistinguishable from an edited index. So the live projection, as it starts
leading, derives the index of every row whose ``index_version`` is older again,
from the row's own bytes, and stamps it with the current version.

In bounded batches, each one transaction that row-locks the watermark first, as
every batch of the projection does (so it never interleaves with a fold), and
locks the rows it rewrites. Idempotent: a row already at the current version is
never selected, and deriving the same row again gives the same index. Only the
version says which rows are old: an index column edited by hand keeps its
version, is not touched here, and verify still reports it.
"""

from __future__ import annotations

import asyncpg
import msgspec
import structlog

from agentledger.projection.loop import ProjectionChangedError
from agentledger.services.memory_policy.fold import INDEX_TEXT_VERSION, Vectors, record_writes
from agentledger.services.memory_policy.store import MemoryStore, RecordWrite, decode_row

log = structlog.get_logger("agentledger.memory_policy")

# Rows derived per transaction: small enough that a batch of the projection waits for it briefly.
REINDEX_BATCH = 256


async def reindex_old_rows(conn: asyncpg.Connection, store: MemoryStore, vectors: Vectors,
                           batch: int = REINDEX_BATCH) -> int:
    """Derive the index of every row an older derivation made again; how many rows were.

    A row whose bytes do not decode is left as it is (its reads refuse it and verify reports it).
    """
    after, done, undecodable = ("", ""), 0, 0
    while True:
        async with conn.transaction():
            if await store.lock_watermark(conn) is None:
                raise ProjectionChangedError("the memory watermark row is missing")
            old = await store.old_index(conn, after, INDEX_TEXT_VERSION, batch)
            if not old:
                break
            tenants, rows = [], []
            for tenant, _, data in old:
                try:
                    rows.append(decode_row(data))
                except msgspec.DecodeError:
                    undecodable += 1
                    continue
                tenants.append(tenant)
            writes: list[RecordWrite] = await record_writes(rows, vectors)
            await store.put_index(conn, list(zip(tenants, writes, strict=True)))
        done += len(writes)
        after = (old[-1][0], old[-1][1])
    if done or undecodable:
        log.info("memory.reindexed", rows=done, undecodable=undecodable, index_version=INDEX_TEXT_VERSION)
    return done
