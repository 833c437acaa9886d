"""PostgreSQL I/O of the context-builder: its own tables, and the Working Memory projection it reads.

Tables (migration 4 in ``agentledger.stores.db``):

* ``context_generations``: one row per frozen generation. The generation itself is an
  artifact (schema ``context-generation/v1``) in the artifact store; the row indexes it
  (``artifact_uri`` and ``digest`` of the final generation, ``frozen_uri`` /
  ``frozen_digest`` of what was frozen before any compactor ran), with the input turn,
  the transcript revision, epoch and lineage it was built on and the checkpoint it
  staged. ``artifact_uri`` is NULL only between the freeze and the end of the build.
  ``subjects`` / ``memory_ids``: the data subjects whose content it holds and the memory
  records it read (what a forget request finds it by; NULL on rows built before they
  were recorded: "may hold anything of the tenant").
* ``context_checkpoints``: compaction checkpoints (``CompactionCheckpoint`` JSON in
  ``body``), staged by a build, activated / refused / superseded by ``context.commit``,
  ``forgotten`` by a forget request (the body then holds no summary and is never served);
  ``subjects``: the data subjects of the turns it covers.
* ``context_conversations``: one row per (tenant, task): the epoch and lineage the
  builder last saw, the active checkpoint and how far it covers, and ``forgets`` (how
  many forget requests moved it on to a new lineage in this epoch). Only a commit's
  compare-and-swap (``FOR UPDATE`` on this row) moves the pointer.

The Working Memory projection (the projector's ``task_state`` / ``task_turns``) is read
directly, never written.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from typing import NamedTuple

import asyncpg
import msgspec
import structlog

from agentledger.config import Settings
from agentledger.contracts.context_api import CompactionCheckpoint
from agentledger.core import generation_tags as gen_tags
from agentledger.core.projection_tags import check_task, check_turns, variables_digest
from agentledger.core.state import Turn, WorkingMemory, decode_state, decode_turn
from agentledger.errors import IntegrityViolationError
from agentledger.security.integrity_keys import keys_of
from agentledger.services.context_builder.finished_notes import FinishedNote
from agentledger.services.projector.rebuild import LIVE_SCHEMA
from agentledger.services.projector.store import VARIABLES_INPUT, check_loaded
from agentledger.services.projector.store import Store as ProjectionStore

log = structlog.get_logger()

_checkpoint = msgspec.json.Decoder(CompactionCheckpoint)


class GenerationRow(NamedTuple):
    generation_id: str
    tenant: str
    task_id: str
    digest: str
    artifact_uri: str | None
    frozen_digest: str
    frozen_uri: str
    input_ordinal: int
    transcript_revision: int
    epoch: int
    lineage: str
    staged_checkpoint_id: str | None
    regenerated_from: str | None
    # The user and project scopes the build read memory in: a reader must be allowed them too.
    user_id: str | None
    project_id: str | None
    # The data subjects whose content it holds (None: unknown): an agent reads it only when
    # bound to every one.
    subjects: list[str] | None = None


class Conversation(NamedTuple):
    tenant: str
    task_id: str
    epoch: int
    lineage: str
    lineage_base: int
    active_checkpoint_id: str | None
    coverage_end: int
    version: int
    # Forget requests that moved the conversation on to a new lineage in this epoch.
    forgets: int


class TaskHead(NamedTuple):
    """What a commit re-reads of the projection: the last turn, the epoch, the lineage base."""

    turns: int
    epoch: int
    lineage_base: int


# Bounded: past this many generations finished by this process the record starts over.
MAX_FINISHED = 200_000
_GEN_COLUMNS = ("generation_id, tenant, task_id, digest, artifact_uri, frozen_digest, frozen_uri,"
                " input_ordinal, transcript_revision, epoch, lineage, staged_checkpoint_id,"
                " regenerated_from, user_id, project_id")
_INSERT_GEN = ("INSERT INTO context_generations ({columns}, created_at, subjects, memory_ids, mac)"
               " VALUES ($1, $2, $3, $4, NULL, $4, $5, $6, $7, $8, $9, NULL, $10, $11, $12, $13, $14, $15,"
               " $16)"
               " ON CONFLICT (generation_id) DO NOTHING").replace("{columns}", _GEN_COLUMNS)
_FINISH_GEN = ("UPDATE context_generations SET digest = $2, artifact_uri = $3, staged_checkpoint_id = $4,"
               " finish_mac = $6, frozen_kept = $7 WHERE generation_id = $1 AND tenant = $5 AND artifact_uri IS NULL")
# A compacted build's frozen input erased (``Builder._compacting``), or left by a process that died
# before it erased it (``frozen_left``).
_FROZEN_ERASED = "UPDATE context_generations SET frozen_kept = false WHERE generation_id = $1 AND tenant = $2"
_FROZEN_LEFT = ("SELECT tenant, generation_id, frozen_uri FROM context_generations WHERE frozen_kept"
                " AND artifact_uri IS NOT NULL AND artifact_uri <> frozen_uri LIMIT $1")
_GET_GEN = ("SELECT {columns}, subjects, mac, finish_mac FROM context_generations WHERE generation_id = $1"
            " AND tenant = $2").replace("{columns}", _GEN_COLUMNS)
# The end of a build: its row still there (a forget request did not delete it meanwhile) ...
_LOCK_GEN = "SELECT 1 FROM context_generations WHERE generation_id = $1 AND tenant = $2 FOR UPDATE"
# ... and its conversation still on the lineage the build read (no forget moved it on).
_SHARE_CONV = ("SELECT epoch, forgets FROM context_conversations WHERE tenant = $1 AND task_id = $2"
               " FOR SHARE")
_DROP_GEN = "DELETE FROM context_generations WHERE generation_id = $1 AND tenant = $2"
_CONV_COLUMNS = ("tenant, task_id, epoch, lineage, lineage_base, active_checkpoint_id, coverage_end, version,"
                 " forgets")
_GET_CONV = ("SELECT {columns} FROM context_conversations WHERE tenant = $1 AND task_id = $2"
             ).replace("{columns}", _CONV_COLUMNS)
_LOCK_CONV = _GET_CONV + " FOR UPDATE"
_ENSURE_CONV = ("INSERT INTO context_conversations (tenant, task_id, epoch, lineage, lineage_base,"
                " active_checkpoint_id, coverage_end, version) VALUES ($1, $2, $3, $4, $5, NULL, $5, 1)"
                " ON CONFLICT (tenant, task_id) DO NOTHING")
# A conversation whose projection moved to a newer epoch starts its new lineage with no
# checkpoint (the old ones belong to a lineage that no longer exists), and no forgets yet.
_NEW_EPOCH = ("UPDATE context_conversations SET epoch = $3, lineage = $4, lineage_base = $5,"
              " active_checkpoint_id = NULL, coverage_end = $5, version = version + 1, forgets = 0"
              " WHERE tenant = $1 AND task_id = $2 AND epoch < $3")
# The old lineage's active checkpoint is superseded; its staged candidates stay staged, and
# a commit refuses them (``stale_epoch``), so the refusal says why.
_RETIRE_LINEAGE = ("UPDATE context_checkpoints SET status = 'superseded', reason = $4, updated_at = $5"
                   " WHERE tenant = $1 AND task_id = $2 AND epoch < $3 AND status = 'active'")
_MOVE_POINTER = ("UPDATE context_conversations SET active_checkpoint_id = $3, coverage_end = $4,"
                 " version = version + 1 WHERE tenant = $1 AND task_id = $2 AND version = $5")
_INSERT_CP = ("INSERT INTO context_checkpoints (checkpoint_id, tenant, task_id, generation_id, epoch, lineage,"
              " coverage_first, coverage_through, status, reason, body, created_at, updated_at, subjects)"
              " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12, $13)"
              " ON CONFLICT (checkpoint_id) DO NOTHING")
_GET_CP = ("SELECT body, status, reason, subjects FROM context_checkpoints WHERE checkpoint_id = $1"
           " AND tenant = $2")
_CP_STATUS = "SELECT status, reason FROM context_checkpoints WHERE checkpoint_id = $1 AND tenant = $2"
# A forgotten checkpoint's body holds no summary: it is never decoded to be served.
FORGOTTEN = "forgotten"
_SET_CP_STATUS = ("UPDATE context_checkpoints SET status = $3, reason = $4, updated_at = $5"
                  " WHERE checkpoint_id = $1 AND tenant = $2")
_MEMORY_SUBJECTS = ("SELECT DISTINCT data_subject FROM memory_records WHERE tenant = $1"
                    " AND record_id = ANY($2::text[]) AND data_subject IS NOT NULL")
_TURNS = ("SELECT turn, ordinal, mac FROM {s}.task_turns WHERE tenant = $1 AND task_id = $2 AND ordinal > $3"
          " AND ordinal <= $4 ORDER BY ordinal")
# FOR SHARE: the projector cannot move the task on between the CAS's check and its commit. With
# what the task tag is checked over (the core row's seq, bytes and tag, its variable rows).
_HEAD = ("SELECT t.seq, t.state, t.mac, {variables_input} FROM {s}.task_state t"
         " WHERE t.tenant = $1 AND t.task_id = $2 FOR SHARE OF t").replace("{variables_input}", VARIABLES_INPUT)


class ContextStore:
    """SQL of the context-builder; see the module docstring."""

    def __init__(self, pool: asyncpg.Pool, settings: Settings, schema: str = LIVE_SCHEMA) -> None:
        self.pool = pool
        self.settings = settings  # the integrity keys: generations are tagged, reads checked
        self.projection = ProjectionStore(schema)
        quoted = f'"{schema}"'
        self._turns = _TURNS.replace("{s}", quoted)
        self._head = _HEAD.replace("{s}", quoted)
        # (tenant, generation id) this process, or another instance (``finished_notes``), finished:
        # its row put back to unfinished is refused.
        self._finished: set[tuple[str, str]] = set()
        # Tells the other instances (``finished_notes.publish``); None: a process of its own.
        self.announce: Callable[[str, str, bool], Awaitable[None]] | None = None

    # ---- the Working Memory projection --------------------------------------------------------

    async def watermark(self) -> int:
        return await self.projection.watermark(self.pool) or 0

    async def state(self, tenant: str, task_id: str) -> WorkingMemory | None:
        loaded = await self.projection.load_state(self.pool, tenant, task_id)
        if loaded is None:
            return None
        check_loaded(loaded, keys_of(self.settings).mac_key_of)  # never build from an edited row
        return loaded.state

    async def turns(self, tenant: str, task_id: str, after: int, through: int) -> list[Turn]:
        """Turns ``after`` < ordinal <= ``through``, in order (their content still sealed)."""
        rows = await self.pool.fetch(self._turns, tenant, task_id, after, through)
        turns = [bytes(r[0]) for r in rows]
        # Each turn with its tag, none missing between ``after`` and the last one read.
        check_turns(keys_of(self.settings).mac_key_of, tenant, task_id, last=after + len(rows),
                    ordinals=[r[1] for r in rows], turns=turns, tags=[r[2] for r in rows], tail=len(rows))
        return [decode_turn(t) for t in turns]

    async def head(self, conn: asyncpg.Connection, tenant: str, task_id: str) -> TaskHead | None:
        """What a commit's compare-and-swap compares, from the task's core row once its tag holds
        (``IntegrityViolationError`` otherwise: never judge a commit by an edited row)."""
        row = await conn.fetchrow(self._head, tenant, task_id)
        if row is None:
            return None
        core = bytes(row["state"])
        check_task(keys_of(self.settings).mac_key_of, tenant, task_id, seq=row["seq"], core=core,
                   digest=variables_digest(row["variables_input"]), tag=row["mac"])
        state = decode_state(core)
        return TaskHead(state.turns, state.epoch, state.lineage_base)

    # ---- generations --------------------------------------------------------------------------

    async def freeze(self, *, generation_id: str, tenant: str, task_id: str, frozen_digest: str,
                     frozen_uri: str, input_ordinal: int, transcript_revision: int, epoch: int,
                     lineage: str, regenerated_from: str | None, user_id: str | None = None,
                     project_id: str | None = None, subjects: Sequence[str] | None = (),
                     memory_ids: Sequence[str] = ()) -> bool:
        """Index a frozen generation; False when that id was frozen already (a concurrent twin).

        ``subjects``: the data subjects whose content it holds (None: unknown, e.g. it rendered
        a checkpoint of before subjects were recorded); ``memory_ids``: the memory records it read.
        """
        kept = None if subjects is None else sorted(set(subjects))
        keys = keys_of(self.settings)
        frozen = gen_tags.frozen_parts(
            generation_id, tenant, task_id, frozen_digest, frozen_uri, input_ordinal=input_ordinal,
            transcript_revision=transcript_revision, epoch=epoch, lineage=lineage,
            regenerated_from=regenerated_from, user_id=user_id, project_id=project_id, subjects=kept)
        status = await self.pool.execute(
            _INSERT_GEN, generation_id, tenant, task_id, frozen_digest, frozen_uri, input_ordinal,
            transcript_revision, epoch, lineage, regenerated_from, user_id, project_id, datetime.now(UTC),
            kept, sorted(set(memory_ids)), gen_tags.tag(keys.current, keys.mac_key, frozen))
        fresh = bool(status.endswith(" 1"))
        if fresh:  # frozen anew (a forget request deleted the one finished before): unfinished is honest
            self._finished.discard((tenant, generation_id))
            await self._announce(tenant, generation_id, finished=False)
        return fresh

    async def finish(self, tenant: str, generation_id: str, *, digest: str, uri: str,
                     staged: str | None) -> None:
        await self.pool.execute(_FINISH_GEN, generation_id, digest, uri, staged, tenant,
                                self._finish_tag(tenant, generation_id, digest, uri, staged), False)
        await self._finished_here(tenant, generation_id)

    async def _finished_here(self, tenant: str, generation_id: str) -> None:
        self._remember(tenant, generation_id)
        await self._announce(tenant, generation_id, finished=True)

    def _remember(self, tenant: str, generation_id: str) -> None:
        if len(self._finished) >= MAX_FINISHED:
            self._finished.clear()
        self._finished.add((tenant, generation_id))

    async def _announce(self, tenant: str, generation_id: str, *, finished: bool) -> None:
        if self.announce is None:
            return
        try:
            await self.announce(tenant, generation_id, finished)
        except Exception as exc:  # noqa: BLE001 - a lost note costs another instance one check, never the build
            log.warning("context.finished_note_unsent", error=type(exc).__name__)

    def is_finished(self, tenant: str, generation_id: str) -> bool:
        """Whether this process knows the generation was finished (here or by another instance)."""
        return (tenant, generation_id) in self._finished

    def noted(self, note: FinishedNote) -> None:
        """Another instance's (or this one's own) note: the generation finished, or frozen anew."""
        if note.finished:
            self._remember(note.tenant, note.generation_id)
        else:
            self._finished.discard((note.tenant, note.generation_id))

    def _finish_tag(self, tenant: str, generation_id: str, digest: str, uri: str, staged: str | None) -> str:
        keys = keys_of(self.settings)
        return gen_tags.tag(keys.current, keys.mac_key,
                            gen_tags.finish_parts(generation_id, tenant, digest, uri, staged))

    async def complete(self, *, tenant: str, task_id: str, generation_id: str, epoch: int, forgets: int,
                       digest: str, uri: str, staged: CompactionCheckpoint | None = None,
                       staged_subjects: Sequence[str] | None = (), frozen_kept: bool = False) -> bool:
        """The end of a build, in one transaction: stage its checkpoint and finish its row, unless
        a forget request overtook the build (its row deleted, or its conversation moved on to
        another lineage or deleted): then nothing is staged, its row is dropped, and False.
        ``frozen_kept``: its frozen input is still to be erased (a compacted build's).

        The generation row is locked ``FOR UPDATE`` (a forget's delete waits, or went first)
        and the conversation ``FOR SHARE`` (a forget moving it on waits, or went first).
        """
        async with self.pool.acquire() as conn, conn.transaction():
            here = await conn.fetchval(_LOCK_GEN, generation_id, tenant)
            conv = await conn.fetchrow(_SHARE_CONV, tenant, task_id)
            if here is None:
                return False
            # (A clear meanwhile moved the epoch on: staged as ever, a commit refuses it stale_epoch.)
            if conv is None or (int(conv[0]) == epoch and int(conv[1]) != forgets):
                await conn.execute(_DROP_GEN, generation_id, tenant)
                return False
            if staged is not None:
                await self.stage(staged, staged_subjects, conn=conn)
            staged_id = staged.checkpoint_id if staged is not None else None
            await conn.execute(_FINISH_GEN, generation_id, digest, uri, staged_id, tenant,
                               self._finish_tag(tenant, generation_id, digest, uri, staged_id), frozen_kept)
        await self._finished_here(tenant, generation_id)
        return True

    async def frozen_erased(self, tenant: str, generation_id: str) -> None:
        await self.pool.execute(_FROZEN_ERASED, generation_id, tenant)

    async def frozen_left(self, limit: int) -> list[tuple[str, str, str]]:
        """Finished compacted generations whose frozen input was not erased yet: (tenant,
        generation id, frozen uri), at most ``limit``."""
        return [(r[0], r[1], r[2]) for r in await self.pool.fetch(_FROZEN_LEFT, limit)]

    async def generation(self, tenant: str, generation_id: str) -> GenerationRow | None:
        """One generation row, or None; ``IntegrityViolationError`` when it fails its tags."""
        finished = (tenant, generation_id) in self._finished  # taken first: committed before the read
        row = await self.pool.fetchrow(_GET_GEN, generation_id, tenant)
        if row is None:
            return None
        gen = GenerationRow(*row[:16])
        key_of = keys_of(self.settings).mac_key_of
        gen_tags.check(key_of, gen_tags.frozen_parts(
            gen.generation_id, gen.tenant, gen.task_id, gen.frozen_digest, gen.frozen_uri,
            input_ordinal=gen.input_ordinal, transcript_revision=gen.transcript_revision, epoch=gen.epoch,
            lineage=gen.lineage, regenerated_from=gen.regenerated_from, user_id=gen.user_id,
            project_id=gen.project_id, subjects=gen.subjects), row["mac"], generation_id=generation_id,
            tenant=tenant)
        if gen.artifact_uri is not None:
            gen_tags.check(key_of, gen_tags.finish_parts(gen.generation_id, gen.tenant, gen.digest,
                                                         gen.artifact_uri, gen.staged_checkpoint_id),
                           row["finish_mac"], generation_id=generation_id, tenant=tenant)
        elif gen.digest != gen.frozen_digest or gen.staged_checkpoint_id is not None:
            raise IntegrityViolationError(f"generation {generation_id} of tenant {tenant} is not finished"
                                          " but holds an answer: it was changed outside the services",
                                          where="generation")
        elif finished:
            # Put back to its frozen row: a reader would serve the frozen fallback as final
            # instead of the answer this service gave (a compacted one, its staged checkpoint).
            raise IntegrityViolationError(f"generation {generation_id} of tenant {tenant} was finished by this "
                                          "service but its row is back at before it finished: it was put "
                                          "back outside the services", where="generation")
        return gen

    # ---- conversations and checkpoints ----------------------------------------------------------

    async def conversation(self, tenant: str, task_id: str, *, epoch: int, lineage: str,
                           lineage_base: int) -> Conversation:
        """The conversation row, created or moved to ``epoch`` (the projection's) when behind."""
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(_ENSURE_CONV, tenant, task_id, epoch, lineage, lineage_base)
            await self._sync_epoch(conn, tenant, task_id, epoch=epoch, lineage=lineage, lineage_base=lineage_base)
            row = await conn.fetchrow(_GET_CONV, tenant, task_id)
        return Conversation(*row)

    async def _sync_epoch(self, conn: asyncpg.Connection, tenant: str, task_id: str, *, epoch: int,
                          lineage: str, lineage_base: int) -> None:
        moved = await conn.execute(_NEW_EPOCH, tenant, task_id, epoch, lineage, lineage_base)
        if moved.endswith(" 1"):
            await conn.execute(_RETIRE_LINEAGE, tenant, task_id, epoch,
                               f"history cleared: epoch {epoch} began", datetime.now(UTC))

    async def lock_conversation(self, conn: asyncpg.Connection, tenant: str,
                                task_id: str) -> Conversation | None:
        row = await conn.fetchrow(_LOCK_CONV, tenant, task_id)
        return None if row is None else Conversation(*row)

    async def sync_locked(self, conn: asyncpg.Connection, tenant: str, task_id: str, *, epoch: int,
                          lineage: str, lineage_base: int) -> Conversation:
        """In a commit's transaction (conversation row locked): follow the projection's epoch."""
        await self._sync_epoch(conn, tenant, task_id, epoch=epoch, lineage=lineage, lineage_base=lineage_base)
        row = await conn.fetchrow(_GET_CONV, tenant, task_id)
        return Conversation(*row)

    async def move_pointer(self, conn: asyncpg.Connection, conv: Conversation, checkpoint_id: str,
                           coverage_end: int) -> None:
        status = await conn.execute(_MOVE_POINTER, conv.tenant, conv.task_id, checkpoint_id,
                                    coverage_end, conv.version)
        # The row is locked FOR UPDATE by the caller: its version cannot have moved.
        assert status.endswith(" 1"), status

    async def stage(self, cp: CompactionCheckpoint, subjects: Sequence[str] | None = (), *,
                    conn: asyncpg.Connection | None = None) -> None:
        """Store a staged checkpoint; ``subjects``: the data subjects of the turns it covers
        (None: unknown)."""
        await (conn or self.pool).execute(
            _INSERT_CP, cp.checkpoint_id, cp.tenant, cp.task_id, cp.generation_id, cp.epoch, cp.lineage,
            cp.coverage.first, cp.coverage.through, cp.status, cp.reason, msgspec.json.encode(cp),
            datetime.now(UTC), None if subjects is None else sorted(set(subjects)))

    async def checkpoint(self, conn: asyncpg.Connection | asyncpg.Pool, tenant: str,
                         checkpoint_id: str) -> CompactionCheckpoint | None:
        """A checkpoint with its current status (the body keeps the status it was staged with);
        None when there is none, or it was forgotten (its body is never decoded to be served)."""
        found = await self.checkpoint_with_subjects(conn, tenant, checkpoint_id)
        return None if found is None else found[0]

    async def checkpoint_with_subjects(self, conn: asyncpg.Connection | asyncpg.Pool, tenant: str,
                                       checkpoint_id: str) -> tuple[CompactionCheckpoint, list[str] | None] | None:
        """``checkpoint`` and the data subjects it holds (None: unknown)."""
        row = await conn.fetchrow(_GET_CP, checkpoint_id, tenant)
        if row is None or row[1] == FORGOTTEN:
            return None
        cp = _checkpoint.decode(bytes(row[0]))
        return msgspec.structs.replace(cp, status=row[1], reason=row[2]), None if row[3] is None else list(row[3])

    async def checkpoint_status(self, conn: asyncpg.Connection | asyncpg.Pool, tenant: str,
                                checkpoint_id: str) -> tuple[str, str] | None:
        """(status, reason) of a checkpoint, without reading its body."""
        row = await conn.fetchrow(_CP_STATUS, checkpoint_id, tenant)
        return None if row is None else (row[0], row[1])

    # ---- memory records (the memory-policy service's projection, read only) -----------------------

    async def memory_subjects(self, tenant: str, record_ids: Sequence[str]) -> set[str]:
        """The data subjects of those of ``record_ids`` that are personal records."""
        if not record_ids:
            return set()
        rows = await self.pool.fetch(_MEMORY_SUBJECTS, tenant, list(record_ids))
        return {r[0] for r in rows}

    async def set_status(self, conn: asyncpg.Connection, tenant: str, checkpoint_id: str, status: str,
                         reason: str = "") -> None:
        await conn.execute(_SET_CP_STATUS, checkpoint_id, tenant, status, reason, datetime.now(UTC))
