"""Forgetting in the context-builder's indexes: frozen generations, compaction checkpoints, documents.

Three handlers of the tombstone-fanout's index registry
(``services/tombstone_fanout/registry.py``: ``plan`` finds the targets, ids and URIs only;
``apply`` reaches them; both safe to run again). Counts in a receipt come from the plan,
so a run resumed after a crash reports what an uninterrupted one does.

``generations`` (``context_generations`` + both artifacts of each row): the generations
that may hold forgotten content. ``subject``: ``subjects`` holds it, or is NULL (built
before subjects were recorded); ``record`` / ``key`` / ``subject`` / ``task``: their
``memory_ids`` overlap the records the memory step reached (or are NULL); ``task``: every
generation of the task; ``tenant``: all of the tenant. Plan ``{"generations": [ids],
"uris": [frozen and final artifact URIs], "tasks": [task ids]}``. Apply, in ONE
transaction: the planned rows and any that match now (a build that finished meanwhile)
are locked ``FOR UPDATE`` (a build cannot finish one meanwhile), every artifact they name
is erased, the rows deleted. ``context.get`` / ``trace`` / a retry by id then answer
``not_found``; a build still running finds its row gone and keeps nothing.

``compaction`` (``context_checkpoints``, ``context_conversations``). ``subject``: the
checkpoints whose ``subjects`` hold it (or are NULL) become ``forgotten``: the body keeps
ids and coverage, no summary, no source digest, no receipt (``forgotten_checkpoint``),
``subjects`` empties; the reader never decodes a forgotten body for serving and a commit
refuses it. Each conversation they belong to moves on: its ``forgets`` count goes up by
one, which is part of its lineage id (``core.context.lineage_id``), its active pointer is
cleared (an active checkpoint not forgotten is ``superseded``). A checkpoint staged for the
old lineage, by a build that was running or by a late compactor result, is refused
``other_lineage`` by the commit's compare-and-swap, and a build of the old lineage still
running stages nothing (``ContextStore.complete`` compares the count under a row lock);
the next build compacts again from what remains. The bump is conditional on the count the
plan saw, so a second run does not move the conversation again. ``task`` / ``tenant``:
the task's (tenant's) checkpoints and conversation rows are deleted. ``record`` / ``key``:
not applicable (summaries are made of turns, never of memory records). Plan ``{"checkpoints":
[ids], "conversations": [[task, epoch, forgets]]}`` (subject) or ``{"checkpoints": n,
"conversations": n}`` (task, tenant).

``documents`` (``documents``, ``document_versions``, ``document_chunks``): ``tenant`` only.
The ledger step erased the tenant's ``_documents`` messages; this waits until the
document projection committed everything it had been delivered, then, holding the
document watermark's row lock (the projection waits), deletes the tenant's rows and
folds back whatever of the tenant's ``_documents`` subject is still in the ledger up to
the watermark (nothing, unless the tenant ingested again after its ledger was erased), so
``docs_replay.verify_documents`` stays green. Plan ``{"documents": n, "versions": n,
"chunks": n}``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import asyncpg
import msgspec

from agentledger.contracts import events as ev
from agentledger.contracts.context_api import Coverage
from agentledger.core.context import forgotten_checkpoint, lineage_id
from agentledger.erasure.erase import subject_seqs
from agentledger.models.embedding import load_embedder
from agentledger.services.context_builder.docs_replay import fold_tenant, read_tenant
from agentledger.services.context_builder.documents import DURABLE as DOCUMENTS_DURABLE
from agentledger.services.context_builder.documents import DocumentStore
from agentledger.services.context_builder.store import FORGOTTEN
from agentledger.services.memory_policy.fold import Vectors
from agentledger.services.tombstone_fanout.registry import ForgetContext
from agentledger.stores.ledger import ledger_subject

# Artifact erasures in flight at once.
ERASE_IN_FLIGHT = 16


def reached_records(ctx: ForgetContext) -> list[str]:
    """The memory record ids the memory step reached (its plan's ``record_ids``)."""
    plan = ctx.plans.get("memory")
    if not isinstance(plan, dict):
        return []
    ids = plan.get("record_ids")
    if ids is None:  # a plan that lists the records themselves
        ids = [r.get("record_id") for r in plan.get("records", []) if isinstance(r, dict)]
    return sorted({str(i) for i in ids if i})


# ---- generations -------------------------------------------------------------------------------------

_GEN_SELECT = "SELECT generation_id, task_id, frozen_uri, artifact_uri FROM context_generations WHERE tenant = $1"


def _generation_query(ctx: ForgetContext, *, planned: Sequence[str] | None = None,
                      lock: bool = False) -> tuple[str, list[Any]]:
    """The generations the request reaches now (and ``planned``), as SQL and its arguments."""
    sel = ctx.selector
    args: list[Any] = [ctx.tenant]

    def arg(value: Any) -> str:
        args.append(value)
        return f"${len(args)}"

    if sel.kind == "tenant":
        cond = "TRUE"
    else:
        ids = arg(reached_records(ctx))
        # The memory records the memory step reached (a row of before they were recorded: any).
        parts = [f"memory_ids && {ids}::text[]", f"(memory_ids IS NULL AND cardinality({ids}::text[]) > 0)"]
        if sel.kind == "subject":
            parts += ["subjects IS NULL", f"{arg(sel.subject)} = ANY(subjects)"]
        elif sel.kind == "task":
            parts.append(f"task_id = {arg(sel.task_id)}")
        cond = "(" + " OR ".join(parts) + ")"
    if planned is not None:
        cond = f"({cond} OR generation_id = ANY({arg(list(planned))}::text[]))"
    return f"{_GEN_SELECT} AND {cond} ORDER BY generation_id" + (" FOR UPDATE" if lock else ""), args


def _uris(rows: Sequence[asyncpg.Record]) -> set[str]:
    return {u for r in rows for u in (r["frozen_uri"], r["artifact_uri"]) if u}


async def _erase_all(ctx: ForgetContext, uris: Sequence[str]) -> None:
    gate = asyncio.Semaphore(ERASE_IN_FLIGHT)

    async def one(uri: str) -> None:
        async with gate:
            await ctx.erase_artifact(uri)

    await asyncio.gather(*(one(u) for u in uris))


class GenerationsHandler:
    """Frozen context generations and their artifacts; see the module docstring."""

    index = "generations"
    tables: tuple[str, ...] = ("context_generations",)
    stores: tuple[str, ...] = ()

    async def plan(self, ctx: ForgetContext) -> Any | None:
        sql, args = _generation_query(ctx)
        rows = await ctx.pool.fetch(sql, *args)
        return {"generations": [r["generation_id"] for r in rows], "uris": sorted(_uris(rows)),
                "tasks": sorted({r["task_id"] for r in rows})}

    async def apply(self, ctx: ForgetContext, plan: Any) -> dict[str, int]:
        planned = list(plan["generations"])
        sql, args = _generation_query(ctx, planned=planned, lock=True)
        async with ctx.pool.acquire() as conn, conn.transaction():
            rows = await conn.fetch(sql, *args)
            uris = sorted(set(plan["uris"]) | _uris(rows))
            await _erase_all(ctx, uris)
            found = [r["generation_id"] for r in rows]
            if found:
                await conn.execute("DELETE FROM context_generations WHERE tenant = $1"
                                   " AND generation_id = ANY($2::text[])", ctx.tenant, found)
        return {"generations": len(set(planned) | set(found)), "artifacts": len(uris)}


# ---- compaction ----------------------------------------------------------------------------------------

_CP_OF_SUBJECT = ("SELECT checkpoint_id, task_id FROM context_checkpoints WHERE tenant = $1 AND status <> $2"
                  " AND (subjects IS NULL OR $3 = ANY(subjects) OR checkpoint_id = ANY($4::text[]))"
                  " ORDER BY checkpoint_id")
_CP_LOCK = ("SELECT checkpoint_id, task_id, generation_id, epoch, lineage, coverage_first, coverage_through"
            " FROM context_checkpoints WHERE tenant = $1 AND status <> $2"
            " AND (subjects IS NULL OR $3 = ANY(subjects) OR checkpoint_id = ANY($4::text[]))"
            " ORDER BY checkpoint_id FOR UPDATE")
_CONV_LOCK = ("SELECT epoch, lineage_base, forgets, active_checkpoint_id FROM context_conversations"
              " WHERE tenant = $1 AND task_id = $2 FOR UPDATE")
_CONV_STATE = "SELECT task_id, epoch, forgets FROM context_conversations WHERE tenant = $1 AND task_id = ANY($2)"
_MOVE_ON = ("UPDATE context_conversations SET forgets = $3, lineage = $4, active_checkpoint_id = NULL,"
            " coverage_end = lineage_base, version = version + 1 WHERE tenant = $1 AND task_id = $2")
_SUPERSEDE = ("UPDATE context_checkpoints SET status = 'superseded', reason = $3, updated_at = $4"
              " WHERE tenant = $1 AND checkpoint_id = $2 AND status = 'active'")
_SCRUB = ("UPDATE context_checkpoints SET status = $3, reason = $4, body = $5, subjects = '{}', updated_at = $6"
          " WHERE tenant = $1 AND checkpoint_id = $2")


def _scope(ctx: ForgetContext) -> tuple[str, list[Any]]:
    """SQL condition and arguments for the rows of the selected task or tenant."""
    if ctx.selector.kind == "task":
        return "tenant = $1 AND task_id = $2", [ctx.tenant, ctx.selector.task_id]
    return "tenant = $1", [ctx.tenant]


class CompactionHandler:
    """Compaction checkpoints and the conversations' lineages; see the module docstring."""

    index = "compaction"
    tables: tuple[str, ...] = ("context_checkpoints", "context_conversations")
    stores: tuple[str, ...] = ()

    async def plan(self, ctx: ForgetContext) -> Any | None:
        sel = ctx.selector
        if sel.kind in ("task", "tenant"):
            cond, args = _scope(ctx)
            return {"checkpoints": await ctx.pool.fetchval(
                        f"SELECT count(*) FROM context_checkpoints WHERE {cond}", *args),  # noqa: S608 - constant
                    "conversations": await ctx.pool.fetchval(
                        f"SELECT count(*) FROM context_conversations WHERE {cond}", *args)}  # noqa: S608
        if sel.kind != "subject":
            return None
        rows = await ctx.pool.fetch(_CP_OF_SUBJECT, ctx.tenant, FORGOTTEN, sel.subject, [])
        tasks = sorted({r["task_id"] for r in rows})
        convs = await ctx.pool.fetch(_CONV_STATE, ctx.tenant, tasks)
        return {"checkpoints": [r["checkpoint_id"] for r in rows],
                "conversations": sorted([r["task_id"], int(r["epoch"]), int(r["forgets"])] for r in convs)}

    async def apply(self, ctx: ForgetContext, plan: Any) -> dict[str, int]:
        if ctx.selector.kind in ("task", "tenant"):
            cond, args = _scope(ctx)
            async with ctx.pool.acquire() as conn, conn.transaction():
                # The conversations first (a commit or a finishing build locks them first too).
                await conn.execute(f"SELECT 1 FROM context_conversations WHERE {cond}"  # noqa: S608 - constant
                                   " ORDER BY task_id FOR UPDATE", *args)
                await conn.execute(f"DELETE FROM context_checkpoints WHERE {cond}", *args)  # noqa: S608
                await conn.execute(f"DELETE FROM context_conversations WHERE {cond}", *args)  # noqa: S608
            return {"checkpoints": int(plan["checkpoints"]), "conversations": int(plan["conversations"])}
        return await self._forget_subject(ctx, plan)

    async def _forget_subject(self, ctx: ForgetContext, plan: Any) -> dict[str, int]:
        subject = ctx.selector.subject
        planned_cps = list(plan["checkpoints"])
        seen = {task: (epoch, forgets) for task, epoch, forgets in plan["conversations"]}
        reason = f"forgotten: forget request {ctx.request.request_id}"
        now = datetime.now(UTC)
        forgotten: set[str] = set()
        moved: set[str] = set()
        async with ctx.pool.acquire() as conn, conn.transaction():
            locked: dict[str, Any] = {}
            while True:
                # Conversations first, in task order (a commit locks its conversation first); a
                # conversation locked, no build can stage a checkpoint for it meanwhile.
                rows = await conn.fetch(_CP_OF_SUBJECT, ctx.tenant, FORGOTTEN, subject, planned_cps)
                tasks = sorted(({r["task_id"] for r in rows} | set(seen)) - set(locked))
                if not tasks:
                    break
                for task in tasks:
                    locked[task] = await conn.fetchrow(_CONV_LOCK, ctx.tenant, task)
            cps = await conn.fetch(_CP_LOCK, ctx.tenant, FORGOTTEN, subject, planned_cps)
            affected = {r["task_id"] for r in cps} | set(seen)
            for task in sorted(affected):
                conv = locked.get(task)
                if conv is None:
                    continue
                epoch, base, forgets = int(conv["epoch"]), int(conv["lineage_base"]), int(conv["forgets"])
                if task in seen and seen[task] != (epoch, forgets):
                    continue  # moved on already (by this request's earlier run, or by a new epoch)
                lineage = lineage_id(ctx.tenant, task, epoch, base, forgets + 1)
                active = conv["active_checkpoint_id"]
                if active is not None:
                    await conn.execute(_SUPERSEDE, ctx.tenant, active,
                                       f"superseded: a forget request moved the conversation on to {lineage}", now)
                await conn.execute(_MOVE_ON, ctx.tenant, task, forgets + 1, lineage)
                moved.add(task)
            for r in cps:
                body = forgotten_checkpoint(
                    checkpoint_id=r["checkpoint_id"], tenant=ctx.tenant, task_id=r["task_id"],
                    epoch=int(r["epoch"]), lineage=r["lineage"],
                    coverage=Coverage(int(r["coverage_first"]), int(r["coverage_through"])),
                    generation_id=r["generation_id"], reason=reason)
                await conn.execute(_SCRUB, ctx.tenant, r["checkpoint_id"], FORGOTTEN, reason,
                                   msgspec.json.encode(body), now)
                forgotten.add(r["checkpoint_id"])
        return {"checkpoints": len(set(planned_cps) | forgotten), "conversations": len(set(seen) | moved)}


# ---- documents --------------------------------------------------------------------------------------------

_DOC_TABLES = ("documents", "document_versions", "document_chunks")


class DocumentsHandler:
    """The tenant's document index; see the module docstring."""

    index = "documents"
    tables: tuple[str, ...] = _DOC_TABLES
    stores: tuple[str, ...] = ()

    async def plan(self, ctx: ForgetContext) -> Any | None:
        if ctx.selector.kind != "tenant":
            return None
        counts = {}
        for name, table in zip(("documents", "versions", "chunks"), _DOC_TABLES, strict=True):
            counts[name] = int(await ctx.pool.fetchval(
                f"SELECT count(*) FROM {table} WHERE tenant = $1", ctx.tenant))  # noqa: S608 - constant tables
        return counts

    async def apply(self, ctx: ForgetContext, plan: Any) -> dict[str, int]:
        await self.rebuild(ctx)
        return {k: int(v) for k, v in plan.items()}

    @staticmethod
    async def rebuild(ctx: ForgetContext, erase: Sequence[int] = ()) -> None:
        """Make the tenant's document index exactly what its ledger still holds, once the
        ``_documents`` messages ``erase`` names are erased. Both happen holding the document
        watermark's row lock, after the projection committed what it had been delivered, so the
        live projection waits and never writes back a version erased meanwhile. Also the
        ``derived`` step's rebuild (``tombstone_fanout.derived``: versions holding a needle)."""
        await ctx.wait_watermark(DOCUMENTS_DURABLE, "document_watermark", "documents")
        store = DocumentStore()
        settings = ctx.settings
        async with ctx.pool.acquire() as conn, conn.transaction():
            locked = await store.lock_watermark(conn)  # the live projection waits
            upto = locked[0] if locked is not None else 0
            if erase:
                await ctx.erase(erase)
            for table in _DOC_TABLES:
                await conn.execute(f"DELETE FROM {table} WHERE tenant = $1", ctx.tenant)  # noqa: S608 - constant
            subject = ledger_subject(settings.prefix, ctx.tenant, ev.DOCUMENTS_TASK)
            left = [s for s in await subject_seqs(ctx.nc.jetstream(), settings.stream, subject) if s <= upto]
            if left:
                # What the ledger still holds (ingested again after a tenant's ledger step, or the
                # versions a subject's forget left): the index holds exactly that.
                docs = fold_tenant(await read_tenant(ctx.nc, settings, ctx.tenant, upto))
                await store.write(conn, ctx.tenant, docs, Vectors(load_embedder(settings)))
