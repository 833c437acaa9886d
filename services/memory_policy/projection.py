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
from agentledger.services.memory_policy import reach_notes
from agentledger.services.memory_policy.fold import Folded, Vectors, fold, load_state, write_loaded
from agentledger.services.memory_policy.reach_seed import seed_reach
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
        # The records the batch being committed leaves at each ledger sequence (``record_reach``).
        self.folded: list[tuple[tuple[str, str], int]] = []

    async def fold_tenant(self, conn: asyncpg.Connection, store: MemoryStore, tenant: str,
                          events: Sequence[tuple[int, ev.EventBase]]) -> dict[str, int]:
        """The tenant's touched state read back, folded by the reducer, and what changed written."""
        loaded = await load_state(conn, store, tenant, events, self.key_secret)
        folded = fold(loaded.state, events, Folded())
        rows = loaded.state.rows
        self.folded.extend(((tenant, rid), row.ledger_seq) for gk in folded.changed | folded.groups
                           for rid, row in rows.get(gk, {}).items())
        return {"rows": await write_loaded(conn, store, tenant, loaded, folded=folded, vectors=self.vectors,
                                         keys=self.keys)}


decode_memory = MemoryFold.decode


class MemoryProjection(SubjectProjection[MemoryStore]):
    """The memory projection, live; see the module docstring."""

    def __init__(self, settings: Settings, nc: Client, pool: asyncpg.Pool, vectors: Vectors) -> None:
        self.memory_fold = MemoryFold(vectors, keys_of(settings), marker_key_of(settings))
        super().__init__(settings, nc, pool, self.memory_fold)
        # What the reads compare a record's ``ledger_seq`` with: the versions committed here, or
        # (on a standby) by the leading instance (``reach_notes``).
        self.reach = RecordReach()
        # The fold of the ledger that gives ``reach`` the records not folded here (``reach_seed``);
        # its result is how many records it seeded.
        self.seeding: asyncio.Task[int] | None = None
        self._notes: Subscription | None = None

    async def start(self) -> None:
        """The leader's notes listened to, then the base's; a standby (never initialised) seeds
        ``reach`` too."""
        self._notes = await reach_notes.listen(self._nc, self.settings.prefix, self._noted)
        await super().start()
        if self.seeding is None:
            self._seed()

    async def stop(self) -> None:
        if self._notes is not None:
            with contextlib.suppress(Exception):
                await self._notes.unsubscribe()
        await stop_task(self.seeding)
        await super().stop()

    async def _initialize(self) -> None:
        """The base's, then the index of rows an older version wrote derived again (``reindex``),
        and ``reach`` seeded again from the ledger."""
        self.reach.clear()  # the projection may have been rebuilt
        await super()._initialize()
        self.reach.projection = self._projection
        await reindex_old_rows(await self._writer.get(), self.store, self.memory_fold.vectors)
        self._seed()

    def _seed(self) -> None:
        if self.seeding is not None:
            self.seeding.cancel()
        self.seeding = asyncio.create_task(self._seed_once(), name="memory-reach-seed")

    async def _seed_once(self) -> int:
        """The seed; a failure (NATS or PostgreSQL away) leaves ``reach`` as it was, logged."""
        try:
            return await seed_reach(self._nc, self.settings, self._pool, self.memory_fold, self.reach)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the seed only adds checks; the service runs without it
            log.warning("memory.reach_seed_failed", error=type(exc).__name__)
            return 0

    def _noted(self, projection: int, rows: list[reach_notes.Row]) -> None:
        """A batch the leading instance committed: noted here as this process's own commits are
        (a leader notes its own as it commits, and takes no one else's). A note of another
        projection than the one ``reach`` knows (a rebuild switched in) starts it over."""
        if self.leader:
            return
        if self.reach.projection is not None and self.reach.projection != projection:
            log.info("memory.reach_projection_changed", was=self.reach.projection, now=projection)
            self.reach.clear()
            self._seed()
        self.reach.projection = projection
        self.reach.note(rows)

    async def _write(self, items: list[tuple[int, Any]], poison: str | None = None) -> None:
        """The base's transaction; the records it left behind noted once it committed, and
        published to the other instances (``reach_notes``)."""
        self.memory_fold.folded = []
        try:
            await super()._write(items, poison)
            folded = self.memory_fold.folded
            self.reach.note(folded)
        finally:
            self.memory_fold.folded = []
        if folded and self._projection is not None:
            try:
                await reach_notes.publish(self._nc, self.settings.prefix, self._projection, folded)
            except Exception as exc:  # noqa: BLE001 - a lost note costs a standby one check, never the commit
                log.warning("memory.reach_note_unsent", error=type(exc).__name__)
