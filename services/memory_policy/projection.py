"""The memory projection: ``_memory`` subjects of the ledger → the memory tables.

``MemoryFold`` is all the projection writes (``agentledger.projection.spec``):
each batch of memory events, per tenant, reads back from PostgreSQL the part of
the tenant's state the batch touches, folds it with the reducer
(``fold.fold``) and writes only the groups and rows that changed. The rest is
the base's: ``MemoryProjection`` runs it live (a durable consumer
``memory-policy`` positioned from ``memory_watermark``, one transaction per
batch with the watermark, poison messages recorded in
``projection_rejections``), ``replay`` rebuilds it beside the live tables and
verifies it.

A message on a memory subject that is not a memory event of that tenant (the
writer lets none through) is logged and passed over: it only moves the
watermark. ``applied`` and ``wait_for`` give the service read-your-writes: a
decision waits until the projection holds the decisions appended before it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import asyncpg
import structlog
from nats.aio.client import Client
from nats.aio.subscription import Subscription

from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.projection.live import SubjectProjection
from agentledger.projection.spec import Rows, SubjectFold
from agentledger.security.integrity_keys import IntegrityKeys, keys_of
from agentledger.security.sealing import marker_key_of
from agentledger.services.memory_policy import reach_log
from agentledger.services.memory_policy.fold import Folded, Vectors, fold, load_state, write_loaded
from agentledger.services.memory_policy.reach_backfill import backfill
from agentledger.services.memory_policy.record_reach import RecordReach
from agentledger.services.memory_policy.reindex import reindex_old_rows
from agentledger.services.memory_policy.store import PROJECTION_TABLES, MemoryStore
from agentledger.shell.tasks import stop_task

DURABLE = "memory-policy"

log = structlog.get_logger()


class MemoryFold(SubjectFold[MemoryStore]):
    """Memory events → the memory tables; see the module docstring."""

    durable = DURABLE
    task = ev.MEMORY_TASK
    kinds = ev.MEMORY_KINDS
    log_name = noun = "memory"
    description = "agentledger memory projection (position follows PostgreSQL)"
    runner = "the memory-policy service"
    forget_index = "memory"
    tables = ("memory_watermark", *PROJECTION_TABLES)
    rows = (
        Rows("memory_records", "record", ("record_id",), (
            ("", ("scope_key", "key", "kind", "status", "authority", "sensitivity_rank", "schema_version",
                  "subject_version", "observed_at", "expires_at", "ledger_seq", "row")),
            ("full-text vector", ("tsv", "doc_len", "index_version")), ("embedding", ("embedding",)),
            ("data subject", ("data_subject",))),
            vectors=frozenset({"embedding"})),
        Rows("memory_groups", "group", ("scope_key", "key"), (("", ("promoted_id", "seq", "state", "key_digest")),)),
        Rows("memory_history", "history event", ("event_id",), (
            ("", ("seq", "event", "proposal_id", "record_id", "scope_key", "key", "action", "reason", "trace",
                  "at")),)),
        Rows("memory_held", "held feedback for", ("record_id", "n"), (("", ("mark",)),)),
    )

    store_type = MemoryStore

    def __init__(self, vectors: Vectors, keys: IntegrityKeys, key_secret: bytes) -> None:
        self.vectors = vectors
        self.keys = keys  # record rows are tagged as they are written
        # The marker key: what buried keys' digests are keyed with (``core.memory.state``).
        self.key_secret = key_secret
        # Each record the batch being committed leaves, at its ledger sequence (``record_reach``;
        # in a rebuild, every record it folded).
        self.folded: dict[tuple[str, str], int] = {}

    async def fold_tenant(self, conn: asyncpg.Connection, store: MemoryStore, tenant: str,
                          events: Sequence[tuple[int, ev.EventBase]]) -> dict[str, int]:
        """The tenant's touched state read back, folded by the reducer, and what changed written."""
        loaded = await load_state(conn, store, tenant, events, self.key_secret)
        folded = fold(loaded.state, events, Folded())
        rows = loaded.state.rows
        for gk in folded.changed | folded.groups:
            for rid, row in rows.get(gk, {}).items():
                if row.ledger_seq > self.folded.get((tenant, rid), 0):
                    self.folded[(tenant, rid)] = row.ledger_seq
        return {"rows": await write_loaded(conn, store, tenant, loaded, folded=folded, vectors=self.vectors,
                                         keys=self.keys)}


decode_memory = MemoryFold.decode


class MemoryProjection(SubjectProjection[MemoryStore]):
    """The memory projection, live; see the module docstring."""

    def __init__(self, settings: Settings, nc: Client, pool: asyncpg.Pool, vectors: Vectors) -> None:
        self.memory_fold = MemoryFold(vectors, keys_of(settings), marker_key_of(settings))
        super().__init__(settings, nc, pool, self.memory_fold)
        # What the reads compare a record's ``ledger_seq`` with: the versions the projection
        # committed, here or (on a standby) by the leading instance (``reach_log``).
        self.reach = RecordReach()
        # The start-up read of ``reach_log`` for the live projection; its result is how many
        # records it gave ``reach``.
        self.seeding: asyncio.Task[int] | None = None
        # The leader's one-time entries of the records committed before the stream existed
        # (``reach_backfill``); its result is how many it wrote.
        self.backfilling: asyncio.Task[int] | None = None
        self._entries: Subscription | None = None
        # Projections whose entries passed by and are not the live one (since the last ``clear``).
        self._not_live: set[int] = set()
        # The projection this process last led (its entries go once another is switched in).
        self._led: int | None = None

    async def start(self) -> None:
        """The entries listened to, then the base's; a standby (never initialised) reads the
        stored ones too."""
        self._entries = await reach_log.listen(self._nc, self.settings.prefix, self.memory_fold.keys, self._entry)
        await super().start()
        if self.seeding is None:
            self._seed()

    async def stop(self) -> None:
        if self._entries is not None:
            with contextlib.suppress(Exception):
                await self._entries.unsubscribe()
        await stop_task(self.seeding)
        await stop_task(self.backfilling)
        await super().stop()

    async def _initialize(self) -> None:
        """The base's, the index of rows an older version wrote derived again (``reindex``), and,
        when the projection is not the one ``reach`` knows (the first start, a rebuild switched
        in), ``reach`` started over from the stored entries; a projection this process led
        before has its entries dropped."""
        await super()._initialize()
        if await reach_log.ensure_stream(self._nc, self.settings) and self._projection is not None:
            # Records committed before the stream existed: from the ledger (``reach_backfill``).
            await stop_task(self.backfilling)
            self.backfilling = asyncio.create_task(self._backfill(self._projection), name="memory-reach-backfill")
        if self._projection != self.reach.projection:
            self._restart_reach(self._projection)
        before, self._led = self._led, self._projection
        if before is not None and before != self._projection:
            try:
                await reach_log.purge(self._nc, self.settings, reach_log.projection_subjects(self.settings.prefix,
                                                                                             before))
            except Exception as exc:  # noqa: BLE001 - they are never read for the new projection
                log.warning("memory.reach_purge_failed", projection=before, error=type(exc).__name__)
        await reindex_old_rows(await self._writer.get(), self.store, self.memory_fold.vectors)

    def _restart_reach(self, projection: int | None) -> None:
        self.reach.clear()
        self._not_live.clear()
        self.reach.projection = projection
        self._seed()

    def _seed(self) -> None:
        if self.seeding is not None:
            self.seeding.cancel()
        self.seeding = asyncio.create_task(self._seed_once(), name="memory-reach-seed")

    async def _seed_once(self) -> int:
        """The stored entries of the live projection into ``reach`` (as one more committed batch,
        for the records not noted since: ``RecordReach.seed``); a failure (NATS or PostgreSQL
        away) leaves ``reach`` as it was, logged."""
        try:
            generation = self.reach.generation
            async with self._pool.acquire() as conn:
                position = await self.memory_fold.store().position(conn)
            if position is None:
                return 0
            rows = await reach_log.read(self._nc, self.settings, self.memory_fold.keys, position[1])
            seeded = self.reach.seed(rows, generation, position[1])
            log.info("memory.reach_seeded", records=seeded, entries=len(rows))
            return seeded
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the seed only adds checks; the service runs without it
            log.warning("memory.reach_seed_failed", error=type(exc).__name__)
            return 0

    async def _backfill(self, projection: int) -> int:
        """``reach_backfill``; a failure is logged (those records are then referenced again as
        they next change, or after a rebuild)."""
        try:
            return await backfill(self._nc, self.settings, self._pool, self.memory_fold, projection)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the backfill only adds checks; the service runs without it
            log.warning("memory.reach_backfill_failed", error=type(exc).__name__)
            return 0

    async def _entry(self, projection: int, key: reach_log.Key, seq: int) -> None:
        """An entry as it is published: noted as a committed batch. One of another projection
        than the one ``reach`` knows is checked against the live position once: if that
        projection is live now (a rebuild switched in), ``reach`` starts over with it."""
        if projection != self.reach.projection:
            if projection in self._not_live:
                return
            try:
                async with self._pool.acquire() as conn:
                    position = await self.memory_fold.store().position(conn)
            except Exception as exc:  # noqa: BLE001 - a lost entry costs one check (reach_log)
                log.warning("memory.reach_entry_unchecked", error=type(exc).__name__)
                return
            if position is None or position[1] != projection:
                self._not_live.add(projection)
                return
            if self.reach.projection is None:  # a standby's first: its start-up read is of the same one
                self.reach.projection = projection
            elif projection != self.reach.projection:
                log.info("memory.reach_projection_changed", was=self.reach.projection, now=projection)
                self._restart_reach(projection)
        self.reach.note([(key, seq)])

    async def _write(self, items: list[tuple[int, Any]], poison: str | None = None) -> None:
        """The base's transaction; the records it left behind noted once it committed, and
        published (``reach_log``)."""
        self.memory_fold.folded = {}
        try:
            await super()._write(items, poison)
            folded = self.memory_fold.folded
            self.reach.note(folded.items())
        finally:
            self.memory_fold.folded = {}
        if folded and self._projection is not None:
            try:
                await reach_log.publish(self._nc, self.settings, self.memory_fold.keys, self._projection,
                                        folded.items())
            except Exception as exc:  # noqa: BLE001 - a lost entry costs one check, never the commit
                log.warning("memory.reach_entry_unsent", error=type(exc).__name__)
