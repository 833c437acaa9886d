"""The fan-out's own index handlers: the ledger, keys, Working Memory, checkpoints, leases,
artifacts, agent bindings and the services' caches (``registry.Handler``, in saga order).

Counts in a receipt come from the plan (what the request reached), never from
what an apply still found: a step killed halfway and run again reports the same
numbers as one that ran through, so the final receipt is the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import nats.js.errors
from nats.aio.msg import Msg

from agentledger.contracts import events as ev
from agentledger.contracts.codec import decode_event
from agentledger.erasure import evict
from agentledger.erasure.erase import delete_denied, erase_seqs, live_kv_keys, scan_subject, subject_seqs
from agentledger.security.bindings import bindings_bucket
from agentledger.security.sealing import key_name
from agentledger.security.task_seal import SEALED, TaskKeys, sealable, slot
from agentledger.services.projector.lane import durable_name
from agentledger.services.projector.store import Store
from agentledger.services.tombstone_fanout.derived import subject_needles
from agentledger.services.tombstone_fanout.registry import ForgetContext
from agentledger.stores.artifacts import artifact_refs
from agentledger.stores.db import watermark_name
from agentledger.stores.ledger import ledger_subject, subject_key

# Artifacts erased at once (each a few JetStream round trips).
ARTIFACTS_IN_FLIGHT = 16
# A forget request's own ledger and receipts stay (they hold no personal data).
_FORGET_SUFFIX = f".{ev.FORGET_TASK}"


def _keep_forget(subject: str) -> bool:
    return subject.endswith(_FORGET_SUFFIX)


def _messages(ctx: ForgetContext, subject: str) -> AsyncIterator[Msg]:
    """Every stored message on ``subject`` (wildcards allowed), in ledger order."""
    return scan_subject(ctx.nc.jetstream(), ctx.settings.stream, subject)


def _tenant_ledger(ctx: ForgetContext) -> str:
    return f"{ctx.settings.prefix}.ledger.{ctx.tenant}.*"


class LedgerHandler:
    """The ledger itself: a task's or a tenant's messages.

    An ordinary task's messages are stored sealed under the task's key
    (``security.task_seal``): the key is destroyed (its record securely erased), every
    service instance drops its copy, and the task's subject is purged in one call. What the
    purge leaves in the block files until compaction is ciphertext nobody can open, so a
    task of any length is forgotten in a few round trips. Messages stored unsealed (the
    tenant's memory and document ledgers, lease grants, messages written before sealing)
    are securely erased one by one, as are messages appended to the task while it ran.

    A record, key or subject is not reached here: memory erases the messages that carried its
    records, and a subject's personal values are sealed under its key, which the ``keys``
    step destroys. The plan keeps the sequences reached, which of them to erase, the subjects
    to purge, the task keys to destroy and the artifacts the task's events cite (the
    ``artifacts`` step erases those).
    """

    index = "ledger"
    tables: tuple[str, ...] = ()
    stores = ("ledger",)

    async def plan(self, ctx: ForgetContext) -> Any | None:
        sel = ctx.selector
        if sel.kind == "task":
            assert sel.task_id is not None
            subject = ledger_subject(ctx.settings.prefix, ctx.tenant, sel.task_id)
            keep = None
        elif sel.kind == "tenant":
            subject, keep = _tenant_ledger(ctx), _keep_forget
        else:
            return None
        seqs: list[int] = []
        erase: list[int] = []
        purge: set[str] = set()
        uris: set[str] = set()
        opener = TaskKeys(ctx.keyring)
        async for msg in _messages(ctx, subject):
            if keep is not None and keep(msg.subject):
                continue
            seq = msg.metadata.sequence.stream
            seqs.append(seq)
            key = subject_key(ctx.settings.prefix, msg.subject)
            if key is not None and SEALED in (msg.headers or {}) and sealable(key[1]):
                purge.add(msg.subject)
            else:
                erase.append(seq)
            if sel.kind == "task" and key is not None and msg.data:
                try:
                    body = await opener.open_one(key[0], key[1], msg.headers, msg.data)
                    event = decode_event(body) if body is not None else None
                except Exception:  # noqa: BLE001, S112 - undecodable bytes cite no artifact; forgotten all the same
                    continue
                if event is not None:
                    uris.update(ref.uri for _, _, ref in artifact_refs([event]))
        tasks = ([sel.task_id] if sel.kind == "task"
                 else sorted(set(await ctx.keyring.task_keys(ctx.tenant))
                             | {t for s in purge if (t := _task_of(ctx, s)) is not None}))
        return {"subject": subject, "seqs": seqs, "erase": erase, "purge": sorted(purge),
                "task_keys": tasks, "artifacts": sorted(uris)}

    async def apply(self, ctx: ForgetContext, plan: Any) -> dict[str, int]:
        sel = ctx.selector
        tasks = plan.get("task_keys", [])
        for task_id in tasks:
            await ctx.keyring.destroy(key_name(ctx.tenant, slot(task_id)))
        if tasks:
            # Before the purge: a writer still holding the key would seal new messages with it.
            await ctx.evict(evict.Eviction(request_id=ctx.request.request_id, tenant=ctx.tenant,
                                           whole_tenant=sel.kind == "tenant", task_id=sel.task_id))
        erase = plan.get("erase", plan["seqs"])  # a plan made before sealing erased everything
        await ctx.erase(erase)
        js = ctx.nc.jetstream()
        for subject in plan.get("purge", []):
            await js.purge_stream(ctx.settings.stream, subject=subject)
        # Messages appended to the forgotten task after the plan was made go too.
        keep = _keep_forget if sel.kind == "tenant" else None
        await ctx.erase(await subject_seqs(js, ctx.settings.stream, plan["subject"], keep=keep))
        return {"messages": len(plan["seqs"]), "shredded": len(plan["seqs"]) - len(erase)}


def _task_of(ctx: ForgetContext, subject: str) -> str | None:
    key = subject_key(ctx.settings.prefix, subject)
    return key[1] if key is not None else None


class KeysHandler:
    """Data-subject keys: destroyed (their bytes erased), so every sealed copy is unreadable."""

    index = "keys"
    tables: tuple[str, ...] = ()
    stores = ("keys",)

    async def plan(self, ctx: ForgetContext) -> Any | None:
        sel = ctx.selector
        if sel.kind == "subject":
            return {"subjects": [sel.subject]}
        if sel.kind == "tenant":
            return {"subjects": await ctx.keyring.subjects(ctx.tenant)}
        return None

    async def remaining(self, ctx: ForgetContext) -> Any | None:
        """The selected subjects that still hold a key (one sealed for after the plan)."""
        sel = ctx.selector
        if sel.kind not in ("subject", "tenant"):
            return None
        left = await ctx.keyring.subjects(ctx.tenant, sel.subject if sel.kind == "subject" else None)
        return {"subjects": left} if left else None

    async def apply(self, ctx: ForgetContext, plan: Any) -> dict[str, int]:
        purged_only = 0
        for subject in plan["subjects"]:
            receipt = await ctx.keyring.destroy_subject(ctx.tenant, subject)
            purged_only += not receipt.erased
        # Before any later step: a service still holding a destroyed key could open (and copy,
        # into a new generation) what the next steps are about to remove.
        sel = ctx.selector
        await ctx.evict(evict.Eviction(request_id=ctx.request.request_id, tenant=ctx.tenant,
                                       whole_tenant=sel.kind == "tenant", subject=sel.subject))
        if purged_only:
            # A bucket that denies message deletes (one an older version made, not yet
            # rebuilt by a start: stores/bucket_migration.py): the key reads as gone, but its
            # bytes stay in the block file until compaction.
            return {"subjects": len(plan["subjects"]), "purged_not_erased": purged_only}
        return {"subjects": len(plan["subjects"])}


def _task_or_tenant(ctx: ForgetContext) -> tuple[str, list[Any]] | None:
    """SQL condition and arguments for the rows of the selected task or tenant."""
    sel = ctx.selector
    if sel.kind == "task":
        return "tenant = $1 AND task_id = $2", [ctx.tenant, sel.task_id]
    if sel.kind == "tenant":
        return "tenant = $1", [ctx.tenant]
    return None


def _sealed_mark(subject: str) -> bytes:
    """How a value sealed under ``subject`` starts in a row's JSON."""
    return b'"subject":"' + subject.encode() + b'"'


class WorkingMemoryHandler:
    """Working Memory (the projector's rows) of a task or a tenant: deleted once the projector
    has committed every message it had been delivered (an erased one is never delivered again).

    A data subject's turns and variables there are sealed under its key: the ``keys`` step made
    them unreadable (a view shows them ``erased``), and they are counted here.
    """

    index = "working_memory"
    tables = ("task_state", "task_variables", "task_turns", "applied_events", "rejections")
    stores: tuple[str, ...] = ()

    async def plan(self, ctx: ForgetContext) -> Any | None:
        sel = ctx.selector
        if sel.kind == "subject":
            assert sel.subject is not None
            mark = _sealed_mark(sel.subject)
            turns = await ctx.pool.fetchval(
                "SELECT count(*) FROM task_turns WHERE tenant = $1 AND position($2::bytea in turn) > 0",
                ctx.tenant, mark)
            variables = await ctx.pool.fetchval(
                "SELECT count(*) FROM task_variables WHERE tenant = $1 AND position($2::bytea in value) > 0",
                ctx.tenant, mark)
            return {"sealed_turns": turns, "sealed_variables": variables}
        where = _task_or_tenant(ctx)
        if where is None:
            return None
        cond, args = where
        tasks = await ctx.pool.fetchval(f"SELECT count(*) FROM task_state WHERE {cond}", *args)  # noqa: S608 - constant tables and conditions
        return {"tasks": tasks}

    async def apply(self, ctx: ForgetContext, plan: Any) -> dict[str, int]:
        where = _task_or_tenant(ctx)
        if where is None:
            return {"sealed_turns_unreadable": plan["sealed_turns"],
                    "sealed_variables_unreadable": plan["sealed_variables"]}
        layout = await Store().layout(ctx.pool)
        count = layout.partitions if layout is not None else 1
        for k in range(count):  # every partition's lane: any may hold a batch in flight
            await ctx.wait_watermark(durable_name(k, count), "projector_watermark",
                                     watermark_name(k, count))
        cond, args = where
        async with ctx.pool.acquire() as conn, conn.transaction():
            for table in self.tables:
                await conn.execute(f"DELETE FROM {table} WHERE {cond}", *args)  # noqa: S608 - constant tables and conditions
        return {"tasks": plan["tasks"]}


class CheckpointsHandler:
    """Task checkpoints (the checkpointer's rows): a task's or a tenant's deleted; a subject's
    sealed values in them are unreadable once its key is destroyed."""

    index = "checkpoints"
    tables = ("checkpoints", "checkpoint_pointer")
    stores: tuple[str, ...] = ()

    async def plan(self, ctx: ForgetContext) -> Any | None:
        sel = ctx.selector
        if sel.kind == "subject":
            assert sel.subject is not None
            n = await _fetch_or_zero(ctx, "SELECT count(*) FROM checkpoints WHERE tenant = $1 AND "
                                     "position($2::bytea in body) > 0", ctx.tenant, _sealed_mark(sel.subject))
            return {"sealed": n}
        where = _task_or_tenant(ctx)
        if where is None:
            return None
        cond, args = where
        return {"checkpoints": await _fetch_or_zero(ctx, f"SELECT count(*) FROM checkpoints WHERE {cond}",  # noqa: S608 - constant tables and conditions
                                                    *args)}

    async def apply(self, ctx: ForgetContext, plan: Any) -> dict[str, int]:
        where = _task_or_tenant(ctx)
        if where is None:
            return {"sealed_unreadable": plan["sealed"]}
        cond, args = where
        async with ctx.pool.acquire() as conn, conn.transaction():
            if await _has_table(conn, "checkpoints"):
                await conn.execute(f"DELETE FROM checkpoint_pointer WHERE {cond}", *args)  # noqa: S608 - constant tables and conditions
                await conn.execute(f"DELETE FROM checkpoints WHERE {cond}", *args)  # noqa: S608 - constant tables and conditions
        return {"checkpoints": plan["checkpoints"]}


async def _has_table(conn: Any, table: str) -> bool:
    return bool(await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", f"public.{table}"))


async def _fetch_or_zero(ctx: ForgetContext, sql: str, *args: Any) -> int:
    """A count from a table the checkpointer creates on its first start (0 before it exists)."""
    async with ctx.pool.acquire() as conn:
        if not await _has_table(conn, "checkpoints"):
            return 0
        return int(await conn.fetchval(sql, *args))


async def _kv_erase(ctx: ForgetContext, bucket: str, keys_filter: str) -> tuple[int, bool]:
    """Erase every message of a KV bucket's keys matching ``keys_filter``: (how many, erased).

    The messages are securely erased, then each key gets a purge marker (no value), so a
    process mirroring the bucket through a watch sees it go. A bucket made by the client
    denies message deletes: there the purge alone removes the keys (they read as gone;
    the bytes stay until the block is compacted), and False says so.
    """
    js = ctx.nc.jetstream()
    stream = f"KV_{bucket}"
    prefix = f"$KV.{bucket}."
    try:
        found = [(m.metadata.sequence.stream, m.subject[len(prefix):])
                 async for m in scan_subject(js, stream, prefix + keys_filter, headers_only=True)]
    except nats.js.errors.NotFoundError:
        return 0, True
    erased = True
    try:
        await erase_seqs(js, stream, [seq for seq, _ in found])
    except nats.js.errors.APIError as exc:
        if not delete_denied(exc):
            raise
        erased = False
    kv = await js.key_value(bucket)
    for key in sorted({k for _, k in found}):
        await kv.purge(key)
    return len(found), erased


async def _kv_plan(ctx: ForgetContext, bucket: str, keys_filter: str) -> dict[str, Any]:
    """The keys of ``bucket`` matching ``keys_filter`` that hold a value now."""
    return {"filter": keys_filter, "keys": await live_kv_keys(ctx.nc.jetstream(), bucket, keys_filter)}


def _left(plan: dict[str, Any] | None) -> dict[str, Any] | None:
    """A KV plan made again, when it still finds keys holding a value."""
    return plan if plan is not None and plan["keys"] else None


async def _kv_apply(ctx: ForgetContext, bucket: str, plan: dict[str, Any]) -> dict[str, int]:
    _, erased = await _kv_erase(ctx, bucket, plan["filter"])
    counts = {"keys": len(plan["keys"])}
    return counts if erased else {**counts, "purged_not_erased": len(plan["keys"])}


class LeasesHandler:
    """Executor leases of a task or a tenant (the writer's KV bucket)."""

    index = "leases"
    tables: tuple[str, ...] = ()
    stores = ("leases",)

    async def plan(self, ctx: ForgetContext) -> Any | None:
        sel = ctx.selector
        if sel.kind == "task":
            return await _kv_plan(ctx, ctx.settings.leases_bucket, f"{ctx.tenant}.{sel.task_id}")
        if sel.kind == "tenant":
            return await _kv_plan(ctx, ctx.settings.leases_bucket, f"{ctx.tenant}.*")
        return None

    async def remaining(self, ctx: ForgetContext) -> Any | None:
        return _left(await self.plan(ctx))

    async def apply(self, ctx: ForgetContext, plan: Any) -> dict[str, int]:
        return await _kv_apply(ctx, ctx.settings.leases_bucket, plan)


class ArtifactsHandler:
    """Artifacts: a task's (cited by its events: the ``ledger`` step's plan), a tenant's (all
    under its name), a data subject's (cited by events about the subject: the ``derived``
    step's plan), securely erased."""

    index = "artifacts"
    tables: tuple[str, ...] = ()
    stores = ("artifacts",)

    async def plan(self, ctx: ForgetContext) -> Any | None:
        sel = ctx.selector
        if sel.kind == "task":
            return {"uris": ctx.plans.get("ledger", {}).get("artifacts", [])}
        if sel.kind == "tenant":
            return {"uris": await ctx.artifacts.names(ctx.tenant)}
        if sel.kind == "subject":
            # Found by the ``derived`` step's scan of the tenant's ledger, which reads every event
            # about the subject anyway (a plan stored by a version before it: scanned here).
            derived = ctx.plans.get("derived") or {}
            if "artifacts" in derived:
                return {"uris": derived["artifacts"]}
            assert sel.subject is not None
            return {"uris": (await subject_needles(ctx, sel.subject))[1]}
        return None

    async def remaining(self, ctx: ForgetContext) -> Any | None:
        """A tenant's artifacts still stored (one put after the plan); the artifacts of a task
        or a data subject are found through the ledger, which the ledger step erased."""
        if ctx.selector.kind != "tenant":
            return None
        uris = await ctx.artifacts.names(ctx.tenant)
        return {"uris": uris} if uris else None

    async def apply(self, ctx: ForgetContext, plan: Any) -> dict[str, int]:
        gate = asyncio.Semaphore(ARTIFACTS_IN_FLIGHT)

        async def one(uri: str) -> None:
            async with gate:
                await ctx.erase_artifact(uri)

        await asyncio.gather(*(one(u) for u in plan["uris"]))
        return {"objects": len(plan["uris"])}


class BindingsHandler:
    """Agent bindings of a forgotten tenant (the operator's KV bucket)."""

    index = "bindings"
    tables: tuple[str, ...] = ()
    stores = ("bindings",)

    async def plan(self, ctx: ForgetContext) -> Any | None:
        if ctx.selector.kind != "tenant":
            return None
        return await _kv_plan(ctx, bindings_bucket(ctx.settings.prefix), f"{ctx.tenant}.*")

    async def remaining(self, ctx: ForgetContext) -> Any | None:
        return _left(await self.plan(ctx))

    async def apply(self, ctx: ForgetContext, plan: Any) -> dict[str, int]:
        return await _kv_apply(ctx, bindings_bucket(ctx.settings.prefix), plan)


class CachesHandler:
    """Every running service instance drops what it caches of the forgotten data (keys, states,
    leases), and says so; the step is done once all of them have."""

    index = "caches"
    tables: tuple[str, ...] = ()
    stores: tuple[str, ...] = ()

    async def plan(self, ctx: ForgetContext) -> Any | None:
        sel = ctx.selector
        record_ids = ctx.plans.get("memory", {}).get("record_ids", []) if ctx.plans.get("memory") else []
        return {"tenant": ctx.tenant, "whole_tenant": sel.kind == "tenant", "task_id": sel.task_id,
                "subject": sel.subject, "record_ids": list(record_ids)}

    async def apply(self, ctx: ForgetContext, plan: Any) -> dict[str, int]:
        eviction = evict.Eviction(request_id=ctx.request.request_id, **plan)
        acks = await ctx.evict(eviction)
        # The instances that answered vary from run to run: the receipt counts services.
        return {"services": len({a.service for a in acks})}


class StatisticsHandler:
    """PostgreSQL's column statistics: ``ANALYZE`` samples every column, so the most common
    values of a table can still show a deleted value until the table is analyzed again. Every
    table an applicable step reached is analyzed (the superseded statistics rows then go with
    the documented compaction, docs/deletion.md)."""

    index = "statistics"
    tables: tuple[str, ...] = ()
    stores: tuple[str, ...] = ()

    def __init__(self, handlers: Sequence[Any]) -> None:
        self._tables = {h.index: h.tables for h in handlers}

    async def plan(self, ctx: ForgetContext) -> Any | None:
        # A plan that says which of its tables it reaches (``tables``) gets only those analyzed.
        tables = sorted({t for index, plan in ctx.plans.items() if plan is not None
                         for t in (plan["tables"] if isinstance(plan, dict) and "tables" in plan
                                   else self._tables.get(index, ()))})
        return {"tables": tables} if tables else None

    async def apply(self, ctx: ForgetContext, plan: Any) -> dict[str, int]:
        async with ctx.pool.acquire() as conn:
            for table in plan["tables"]:
                if await _has_table(conn, table):
                    await conn.execute(f"ANALYZE {table}")
        return {"tables": len(plan["tables"])}
