"""Forgetting memory: the tombstone-fanout's ``memory`` and ``read_receipts`` handlers, end to end.

Real NATS JetStream and PostgreSQL: the ledger-writer, the Working Memory
projector and the memory-policy service run in process; the handlers are driven
directly through a ``ForgetContext`` built here from the pieces the saga gives
them (append through the writer as a service, secure erase by stream sequence,
a watermark poll). After every forget: the erased messages are gone from the
stream, no read path returns the value, receipts and usage naming the records
are gone, other records and tenants are untouched, a second run changes
nothing, and a replay of what is left of the ledger equals the live projection
(``verify_memory``, and a rebuild gives the same rows).
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Sequence
from typing import Any

import asyncpg
import msgspec
import nats.js.errors
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from nats.aio.client import Client as Nats

from agentledger.client import Client, raise_error
from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.contracts.api import AppendReply
from agentledger.contracts.codec import decode_event, encode
from agentledger.core import memory as m
from agentledger.core.memory.authority import promoted_id_for
from agentledger.core.memory.keys import tombstone_key
from agentledger.erasure import evict
from agentledger.errors import NotFoundError
from agentledger.security import auth
from agentledger.security.kek_epochs import KekRing
from agentledger.security.sealing import Keyring, marker_key_of, unseal
from agentledger.services.memory_policy.forget import MemoryHandler, ReadReceiptsHandler
from agentledger.services.memory_policy.replay import fold_tenant, read_tenant, rebuild_memory, verify_memory
from agentledger.services.memory_policy.service import MemoryPolicy
from agentledger.services.memory_policy.store import decode_row
from agentledger.services.tombstone_fanout.registry import ForgetContext
from agentledger.stores.artifacts import ArtifactStore, artifacts_bucket
from agentledger.stores.ledger import ledger_subject
from ckpt_support import Stack, running
from helpers import assert_eventually
from test_memory_core import NOW
from test_memory_properties import feedback, proposals, run
from test_memory_service import proposal, stored_evidence

TENANT = "acme"
OTHER = "acme-corp"
TABLES = ("memory_records", "memory_groups", "memory_history", "memory_held")
_ids = itertools.count()
# JetStream's answers to deleting a message that is not there (any more).
GONE = (10037, 10043, 10057)


class Env:
    """The running stack, a service connection for the handlers, and how to forget."""

    def __init__(self, stack: Stack, nc: Nats, operator: Nats) -> None:
        self.stack = stack
        self.settings = stack.settings
        self.nc = nc
        self.js = nc.jetstream()
        # The keys step is the lead's; the test destroys keys as the operator.
        self.keyring = Keyring(operator, self.settings.keys_bucket, KekRing.load(self.settings.kek_path))
        self.artifacts = ArtifactStore(nc, artifacts_bucket(self.settings))

    async def evidence(self) -> dict[str, Any]:
        """A test report stored for the tenant, as an episode cites it (the policy checks it)."""
        return await stored_evidence(self.c, TENANT)

    @property
    def c(self) -> Client:
        return self.stack.c

    @property
    def db(self) -> asyncpg.Pool:
        assert self.stack.db is not None
        return self.stack.db

    @property
    def service(self) -> MemoryPolicy:
        assert self.stack.memory is not None
        return self.stack.memory

    def context(self, selector: ev.ForgetSelector, tenant: str = TENANT,
                request_id: str | None = None) -> ForgetContext:
        settings, nc, pool, js = self.settings, self.nc, self.db, self.js

        async def append(events: Sequence[ev.EventBase]) -> list[int]:
            body = b'{"events":[' + b",".join(encode(e) for e in events) + b"]}"
            msg = await nc.request(f"{settings.prefix}.writer.append", body, timeout=30)
            reply = msgspec.json.decode(msg.data, type=AppendReply)
            if reply.error is not None:
                raise_error(reply.error)
            return [r.seq for r in reply.results]

        async def erase(seqs: Any) -> int:
            n = 0
            for seq in seqs:
                try:
                    await js.delete_msg(settings.stream, seq)
                except nats.js.errors.APIError as exc:
                    # Gone already: 10037 / 10043 ("sequence not found") / 10057 ("no message found").
                    if exc.err_code not in GONE:
                        raise
                    continue
                n += 1
            return n

        async def erase_artifact(uri: str) -> bool:
            return False

        async def wait_watermark(durable: str, table: str, name: str) -> None:
            # As the saga's: until the projection committed everything its consumer was delivered.
            info = await js.consumer_info(settings.stream, durable)
            target = info.delivered.stream_seq or 0

            async def reached() -> bool:
                got = await pool.fetchval(f"SELECT seq FROM {table} WHERE name = $1", name)
                return got is not None and got >= target
            await assert_eventually(reached, timeout=30, message=f"{table} never reached {target}")

        request = ev.ForgetRequested(request_id=request_id or f"fr{next(_ids)}", selector=selector,
                                     requested_by="operator/test", operator=True)
        instances = evict.Instances(nc)

        async def evict_caches(eviction: evict.Eviction) -> list[evict.EvictionAck]:
            return await evict.broadcast(nc, settings.prefix, eviction, instances)

        return ForgetContext(settings=settings, nc=nc, pool=pool, request=request, tenant=tenant, request_seq=0,
                             keyring=self.keyring, artifacts=self.artifacts, append=append, erase=erase,
                             erase_artifact=erase_artifact, wait_watermark=wait_watermark, evict=evict_caches)

    async def forget(self, selector: ev.ForgetSelector, tenant: str = TENANT) -> tuple[ForgetContext, dict[str, Any]]:
        """Run the memory and read-receipts steps as the saga does: plan, apply, in order."""
        ctx = self.context(selector, tenant)
        for handler in (MemoryHandler(), ReadReceiptsHandler()):
            plan = await handler.plan(ctx)
            assert plan is not None
            # The saga stores plans as JSON: a handler must cope with what comes back.
            plan = msgspec.json.decode(msgspec.json.encode(plan))
            ctx.plans[handler.index] = plan
            counts = await handler.apply(ctx, plan)
            ctx.plans[f"{handler.index}:counts"] = counts
        return ctx, ctx.plans

    async def snapshot(self, tenant: str | None = None) -> dict[str, list[tuple[str, ...]]]:
        out = {}
        for table in (*TABLES, "memory_receipts", "memory_usage"):
            rows = await self.db.fetch(f"SELECT * FROM {table} WHERE $1::text IS NULL OR tenant = $1", tenant)
            out[table] = sorted(tuple(str(v) for v in r.values()) for r in rows)
        return out

    async def projection(self) -> dict[str, list[tuple[str, ...]]]:
        return {t: v for t, v in (await self.snapshot()).items() if t in TABLES}

    async def record(self, record_id: str, tenant: str = TENANT) -> asyncpg.Record | None:
        return await self.db.fetchrow(
            "SELECT status, data_subject, tsv::text AS tsv, embedding::text AS embedding, row"
            " FROM memory_records WHERE tenant = $1 AND record_id = $2", tenant, record_id)

    async def assert_erased(self, seqs: list[int]) -> None:
        assert seqs
        for seq in seqs:
            with pytest.raises(nats.js.errors.NotFoundError):
                await self.js.get_msg(self.settings.stream, seq)

    async def assert_tombstone(self, record_id: str, *secrets_: str, tenant: str = TENANT) -> None:
        row = await self.record(record_id, tenant)
        assert row is not None, record_id
        assert row["status"] == "forgotten"
        assert row["data_subject"] is None and row["tsv"] is None and row["embedding"] is None
        body = decode_row(row["row"]).body
        assert body.value is None and body.sealed is None
        raw = bytes(row["row"])
        for text in secrets_:
            assert text.encode() not in raw
        assert b"ciphertext" not in raw
        history = await self.db.fetch("SELECT event FROM memory_history WHERE tenant = $1 AND record_id = $2",
                                      tenant, record_id)
        assert {h["event"] for h in history} == {"memory_forgotten"}
        assert await self.db.fetchval("SELECT count(*) FROM memory_held WHERE tenant = $1 AND record_id = $2",
                                      tenant, record_id) == 0
        assert await self.db.fetchval("SELECT count(*) FROM memory_usage WHERE tenant = $1 AND record_id = $2",
                                      tenant, record_id) == 0
        assert await self.db.fetchval("SELECT count(*) FROM memory_receipts WHERE tenant = $1"
                                      " AND record_ids @> ARRAY[$2::text]", tenant, record_id) == 0

    async def assert_replays(self) -> None:
        """verify is green, and a rebuild from what is left of the ledger gives the live rows."""
        assert await verify_memory(self.settings) == []
        live = await self.projection()
        await rebuild_memory(self.settings)
        assert await self.projection() == live
        assert await verify_memory(self.settings) == []

    async def assert_idempotent(self, ctx: ForgetContext) -> None:
        """The stored plans applied again, and a fresh plan + apply, change nothing."""
        before = await self.snapshot()
        again = self.context(ctx.selector, ctx.tenant, ctx.request.request_id)
        for handler in (MemoryHandler(), ReadReceiptsHandler()):
            plan = ctx.plans[handler.index]
            again.plans[handler.index] = plan
            assert await handler.apply(again, plan) == ctx.plans[f"{handler.index}:counts"]
        assert await self.snapshot() == before
        fresh = self.context(ctx.selector, ctx.tenant)
        for handler in (MemoryHandler(), ReadReceiptsHandler()):
            plan = await handler.plan(fresh)
            assert plan is not None
            fresh.plans[handler.index] = plan
            counts = await handler.apply(fresh, plan)
            if ctx.selector.kind != "tenant":
                assert not any(counts.values()), (handler.index, counts)
        assert await self.snapshot() == before

    async def memory_seqs(self, tenant: str) -> list[int]:
        subject = ledger_subject(self.settings.prefix, tenant, ev.MEMORY_TASK)
        seqs, seq = [], 1
        while True:
            try:
                msg = await self.js.get_msg(self.settings.stream, seq=seq, subject=subject, next=True)
            except nats.js.errors.NotFoundError:
                return seqs
            assert msg.seq is not None
            seqs.append(msg.seq)
            seq = msg.seq + 1


@pytest.fixture
async def env(settings: Settings) -> AsyncIterator[Env]:
    async with running(settings, checkpointer=False, memory=True) as stack:
        nc = await auth.connect(settings, "memory-policy")
        operator = await auth.connect(settings, auth.OPERATOR_ROLE)
        try:
            yield Env(stack, nc, operator)
        finally:
            await operator.close()
            await nc.close()


def selector(kind: str, **fields: Any) -> ev.ForgetSelector:
    return ev.ForgetSelector(kind=kind, **fields)  # type: ignore[arg-type]


async def _by(env: Env, tenant: str, proposals: list[dict[str, Any]]) -> dict[str, str]:
    reply = await env.c.memory_propose(tenant, proposals)
    out = {}
    for d in reply.decisions:
        assert d.record_id is not None, d
        out[d.proposal_id] = d.record_id
    return out


async def test_forget_one_record(env: Env) -> None:
    """The active record of a key becomes a tombstone, and the forget holds: the record it had
    superseded is not active again, nor is a lower source's fresh proposal of the key (a user's
    confirmed one is); its messages are erased, its receipts and usage gone; nothing else
    changes; replay agrees."""
    ids = await _by(env, TENANT, [
        proposal("a1", "deploys go through the release train", key="deploy process", source="model_inference"),
        proposal("a2", "deploys go through the merge queue", key="deploy process"),
        proposal("t1", "db host is db-1", key="db host"), proposal("t2", "db host is db-2", key="db host"),
        proposal("l2", "the linter is ruff", key="linter", scope_id="p2"),
    ])
    await env.c.memory_feedback(TENANT, ids["t1"], "confirm", "fb-t1")
    await env.c.memory_feedback(TENANT, ids["a2"], "confirm", "fb-a2")
    await _by(env, OTHER, [proposal("b1", "deploys go through the merge queue", key="deploy process")])
    read = await env.c.memory_read(TENANT, "deploy process merge queue", key="deploy process", project_id="p1",
                                   task_id="t-read")
    assert ids["a2"] in read.receipt.selected
    # A read of another project: a2 is not in its scopes, so its receipt never names it.
    other_read = await env.c.memory_read(TENANT, "linter", key="linter", project_id="p2")
    assert ids["a2"] not in {c.record_id for c in other_read.receipt.candidates}
    other_before = await env.snapshot(OTHER)
    db_host_before = await env.db.fetch("SELECT record_id, row FROM memory_records WHERE key = 'db_host'")
    events_before = await read_tenant(env.nc, env.settings, TENANT, await env.stack.last_seq())

    ctx, plans = await env.forget(selector("record", record_id=ids["a2"]))
    plan = plans["memory"]
    assert plan["record_ids"] == [ids["a2"]]
    # The plan (stored by the saga) names the key by its keyed digest, never its words.
    secret = marker_key_of(env.settings)
    assert [r["key_digest"] for r in plan["records"]] == [
        tombstone_key(f"project/{TENANT}/p1", "deploy_process", secret)]
    assert "key" not in plan["records"][0]
    assert len(plan["seqs"]) == 3  # its proposal, its decision, the confirm
    assert plans["memory:counts"] == {"records": 1, "messages": 3}
    assert plans["read_receipts"]["receipt_ids"] == [read.receipt.receipt_id]

    await env.assert_erased(plan["seqs"])
    await env.assert_tombstone(ids["a2"], "merge queue")
    got = await env.c.memory_get(TENANT, "deploy process", "project", "p1")
    status = {r.record_id: (r.status, r.value) for r in got.records}
    assert status == {ids["a1"]: ("superseded", "deploys go through the release train"),
                      ids["a2"]: ("forgotten", None)}
    assert plan["records"][0]["active"] is True
    again = await env.c.memory_read(TENANT, "deploy process merge queue", key="deploy process", project_id="p1",
                                    task_id="t-read")
    found = {i.record_id: i.value for i in again.items}
    assert ids["a1"] not in found and ids["a2"] not in found
    assert ids["a2"] not in {c.record_id for c in again.receipt.candidates}
    assert "merge queue" not in again.rendered
    history = await env.c.memory_history(TENANT, "deploy process", "project", "p1")
    assert {(h.record_id, h.event) for h in history.history if h.record_id == ids["a2"]} == {
        (ids["a2"], "memory_forgotten")}
    assert not [h for h in history.history if h.proposal_id == "a2"]
    receipts = await env.c.memory_receipts(TENANT, record_id=ids["a2"])
    assert receipts.receipts == []
    # The read that found a2 and a1 keeps its receipt, redacted: a1's candidate stays, a2's and
    # the query that found it (it quoted "merge queue") are gone.
    assert plans["read_receipts"]["redacted_ids"] == [read.receipt.receipt_id]
    assert plans["read_receipts:counts"]["receipts_redacted"] == 1
    kept = (await env.c.memory_receipts(TENANT, task_id="t-read")).receipts
    redacted = next(r for r in kept if r.receipt_id == read.receipt.receipt_id)
    assert ids["a1"] in {c.record_id for c in redacted.candidates}
    assert ids["a2"] not in {c.record_id for c in redacted.candidates} | set(redacted.selected)
    assert redacted.forgotten == 1 and "query" not in redacted.request and "key" not in redacted.request
    raw = await env.db.fetchval("SELECT receipt FROM memory_receipts WHERE receipt_id = $1",
                                read.receipt.receipt_id)
    assert b"merge queue" not in raw and ids["a2"].encode() not in raw
    # The receipt of the other read stays; so do the other key's rows and the other tenant.
    assert [r.receipt_id for r in (await env.c.memory_receipts(TENANT, record_id=ids["l2"])).receipts] == [
        other_read.receipt.receipt_id]
    assert await env.db.fetch("SELECT record_id, row FROM memory_records WHERE key = 'db_host'") == db_host_before
    assert await env.snapshot(OTHER) == other_before

    # The fold gives the same rows whether or not it sees the erased messages.
    tomb = [(s, e) for s, e in await read_tenant(env.nc, env.settings, TENANT, await env.stack.last_seq())
            if isinstance(e, ev.MemoryForgottenEvent)]
    erased = set(plan["seqs"])
    full_state, full = fold_tenant([*events_before, *tomb], secret)
    gap_state, gap = fold_tenant([*[(s, e) for s, e in events_before if s not in erased], *tomb], secret)
    assert full_state.rows == gap_state.rows
    assert {k: msgspec.json.encode(g) for k, g in full_state.groups.items()} == {
        k: msgspec.json.encode(g) for k, g in gap_state.groups.items()}
    assert sorted(full.history) == sorted(gap.history)

    await env.assert_replays()
    await env.assert_idempotent(ctx)
    # A forgotten record stays forgotten: its proposal id does not bring it back, feedback is refused.
    reply = await env.c.memory_propose(TENANT, [proposal("a2", "deploys go through the merge queue",
                                                         key="deploy process")])
    assert (reply.decisions[0].action, reply.decisions[0].reason) == ("reject", "forgotten")
    with pytest.raises(NotFoundError):
        await env.c.memory_feedback(TENANT, ids["a2"], "confirm", "fb-late")
    await env.assert_tombstone(ids["a2"], "merge queue")
    # A lower source's new proposal of the key is kept as history, not active; a user's
    # confirmed statement sets the key again.
    guess = await _by(env, TENANT, [proposal("a3", "deploys go through the merge queue", key="deploy process",
                                             source="model_inference")])
    said = await _by(env, TENANT, [proposal("a4", "deploys go through the blue pipeline", key="deploy process",
                                            source="user_confirmed")])
    got = await env.c.memory_get(TENANT, "deploy process", "project", "p1")
    status = {r.record_id: r.status for r in got.records}
    assert status[guess["a3"]] == "superseded" and status[said["a4"]] == "active", status
    assert status[ids["a1"]] == "superseded"
    await env.assert_replays()


async def test_forget_a_key_in_one_scope_then_in_all(env: Env) -> None:
    """A key selector with a scope reaches that scope's records only; without one, every scope's."""
    ids = await _by(env, TENANT, [
        proposal("k1", "the deploy target is staging-eu", key="deploy target", source="model_inference"),
        proposal("k2", "the deploy target is prod-eu", key="deploy target"),
        proposal("k3", "the deploy target is prod-us", key="deploy target", scope_id="p2"),
        proposal("k4", "the deploy target is prod-ap", key="deploy target", level="tenant", scope_id=None),
        proposal("x1", "the linter is ruff", key="linter"),
    ])
    linter = await env.record(ids["x1"])
    p1 = ev.Scope(level="project", tenant=TENANT, id="p1")
    ctx, plans = await env.forget(selector("key", key="Deploy  Target", scope=p1))
    assert sorted(plans["memory"]["record_ids"]) == sorted([ids["k1"], ids["k2"]])
    for pid in ("k1", "k2"):
        await env.assert_tombstone(ids[pid], "staging-eu", "prod-eu")
    await env.assert_erased(plans["memory"]["seqs"])
    for pid in ("k3", "k4"):
        row = await env.record(ids[pid])
        assert row is not None and row["status"] == "active"
    await env.assert_replays()
    await env.assert_idempotent(ctx)

    ctx, plans = await env.forget(selector("key", key="deploy target"))
    assert sorted(plans["memory"]["record_ids"]) == sorted([ids["k3"], ids["k4"]])
    for pid in ("k3", "k4"):
        await env.assert_tombstone(ids[pid], "prod-us", "prod-ap")
    read = await env.c.memory_read(TENANT, "deploy target", key="deploy target", project_id="p2")
    assert read.items == [] and read.receipt.candidates == []
    assert await env.record(ids["x1"]) == linter
    await env.assert_replays()
    await env.assert_idempotent(ctx)


async def test_forget_a_data_subject(env: Env) -> None:
    """A subject's personal records (found by their data_subject) become tombstones with no data subject;
    their sealed values are in no row and no message; another subject's are read as before."""
    ids = await _by(env, TENANT, [
        proposal("u1-phone", "call me on +44 20 7946 0958", level="user", scope_id="u1", key="phone"),
        proposal("u1-mail", "write to ada@example.com", level="user", scope_id="u1", key="contact email"),
        proposal("u1-pref", "prefers dark mode", level="user", scope_id="u1", key="theme", kind="preference",
                 source="user_confirmed"),
        proposal("u2-phone", "call me on +44 20 7946 0000", level="user", scope_id="u2", key="phone"),
    ])
    subjects = dict(await env.db.fetch("SELECT record_id, data_subject FROM memory_records WHERE tenant = $1",
                                       TENANT))
    assert subjects == {ids["u1-phone"]: "u1", ids["u1-mail"]: "u1", ids["u1-pref"]: None, ids["u2-phone"]: "u2"}
    await env.c.memory_read(TENANT, "phone", key="phone", user_id="u1", max_sensitivity="personal")
    # The keys step runs before memory in the saga: the subject's key is destroyed first.
    await env.keyring.destroy_subject(TENANT, "u1")
    ctx, plans = await env.forget(selector("subject", subject="u1"))
    assert sorted(plans["memory"]["record_ids"]) == sorted([ids["u1-phone"], ids["u1-mail"]])
    # The read also saw u1's preference (not the subject's data): its receipt is redacted, not deleted.
    assert plans["read_receipts:counts"] == {"receipts": 0, "receipts_redacted": 1, "usage": 1}
    # Their messages hold the values sealed under the destroyed key: left in place, unreadable.
    assert plans["memory"]["erase"] is False and plans["memory"]["seqs"]
    for seq in plans["memory"]["seqs"]:
        data = (await env.js.get_msg(env.settings.stream, seq)).data
        # The number as written or as digits; four digits alone turn up by chance in a timestamp,
        # an id or a digest of the same message.
        assert b"7946 0958" not in data and b"79460958" not in data and b"ada@example.com" not in data
        event = decode_event(data)
        sealed = getattr(ev.payload_of(event), "sealed", None) or getattr(
            getattr(ev.payload_of(event), "record", None), "sealed", None)
        if sealed is not None:
            assert await unseal(sealed, TENANT, ev.MEMORY_TASK, env.keyring) is None
    for pid in ("u1-phone", "u1-mail"):
        await env.assert_tombstone(ids[pid], "7946", "ada@example.com")
    got = await env.c.memory_get(TENANT, "phone", "user", "u1")
    assert [(r.status, r.value, r.erased) for r in got.records] == [("forgotten", None, False)]
    read = await env.c.memory_read(TENANT, "phone email", key="phone", user_id="u1", max_sensitivity="personal")
    gone = {ids["u1-phone"], ids["u1-mail"]}
    assert not gone & ({i.record_id for i in read.items} | {c.record_id for c in read.receipt.candidates})
    assert "7946" not in read.rendered and "example.com" not in read.rendered
    still = await env.c.memory_read(TENANT, "phone", key="phone", user_id="u2", max_sensitivity="personal")
    assert [i.value for i in still.items] == ["call me on +44 20 7946 0000"]
    pref = await env.record(ids["u1-pref"])
    assert pref is not None and pref["status"] == "active"
    assert await env.db.fetchval("SELECT count(*) FROM memory_records WHERE data_subject = 'u1'") == 0
    await env.assert_replays()
    await env.assert_idempotent(ctx)


async def test_forget_a_task(env: Env) -> None:
    """A task's records (its origin task, its scope) go; a promotion that needed its episode falls
    back to the episodes that remain; the task's read receipts go."""
    episodes = [proposal(f"ep-{t}", "test:no19 passed", kind="task_result", key="test:no19", origin_task=t,
                         evidence=[await env.evidence()]) for t in ("task-a", "task-b", "task-c")]
    ids = await _by(env, TENANT, [
        *episodes,
        proposal("scoped", "the flaky test is no19", level="task", scope_id="task-a", key="flaky test"),
        proposal("kept", "the flaky test is no20", level="task", scope_id="task-b", key="flaky test"),
    ])
    promoted = promoted_id_for(f"project/{TENANT}/p1", "test_no19")
    row = await env.record(promoted)
    assert row is not None and row["status"] == "active"
    mine = await env.c.memory_read(TENANT, "flaky test", key="flaky test", task_id="task-a")
    assert mine.items
    theirs = await env.c.memory_read(TENANT, "flaky test", key="flaky test", task_id="task-b")
    ctx, plans = await env.forget(selector("task", task_id="task-a"))
    assert sorted(plans["memory"]["record_ids"]) == sorted([ids["ep-task-a"], ids["scoped"]])
    assert plans["read_receipts"]["receipt_ids"] == [mine.receipt.receipt_id]
    await env.assert_erased(plans["memory"]["seqs"])
    for pid in ("ep-task-a", "scoped"):
        await env.assert_tombstone(ids[pid], "passed", "is no19")
    # Two episodes are left: below the promotion threshold, the promoted fact is no more.
    assert await env.record(promoted) is None
    for pid in ("ep-task-b", "ep-task-c", "kept"):
        row = await env.record(ids[pid])
        assert row is not None and row["status"] == "active"
    assert await env.db.fetchval("SELECT count(*) FROM memory_receipts WHERE task_id = 'task-a'") == 0
    assert [r.receipt_id for r in (await env.c.memory_receipts(TENANT, task_id="task-b")).receipts] == [
        theirs.receipt.receipt_id]
    await env.assert_replays()
    await env.assert_idempotent(ctx)


async def test_a_forgotten_promoted_fact_never_wins_again(env: Env) -> None:
    """Forgetting the promoted fact leaves its episodes, and more agreeing episodes do not promote it again."""
    await _by(env, TENANT, [proposal(f"ep-{t}", "test:no19 passed", kind="task_result", key="test:no19",
                                     origin_task=t, evidence=[await env.evidence()]) for t in ("t1", "t2", "t3")])
    promoted = promoted_id_for(f"project/{TENANT}/p1", "test_no19")
    await env.c.memory_feedback(TENANT, promoted, "confirm", "fb-promoted")
    ctx, plans = await env.forget(selector("record", record_id=promoted))
    assert plans["memory"]["records"] == [{"record_id": promoted, "scope": f"project/{TENANT}/p1",
                                           "key_digest": tombstone_key(f"project/{TENANT}/p1", "test_no19",
                                                                       marker_key_of(env.settings)),
                                           "kind": "fact", "active": True}]
    assert len(plans["memory"]["seqs"]) == 1  # the confirm
    await env.assert_tombstone(promoted, "passed")
    await _by(env, TENANT, [proposal("ep-t4", "test:no19 passed", kind="task_result", key="test:no19",
                                     origin_task="t4", evidence=[await env.evidence()])])
    got = await env.c.memory_get(TENANT, "test:no19", "project", "p1")
    status = {r.record_id: r.status for r in got.records}
    assert status.pop(promoted) == "forgotten"
    assert set(status.values()) == {"active"} and len(status) == 4
    read = await env.c.memory_read(TENANT, "test no19", key="test:no19", project_id="p1", kinds=["fact"])
    assert read.items == []
    await env.assert_replays()
    await env.assert_idempotent(ctx)


async def test_forget_a_tenant(env: Env) -> None:
    """After the ledger step erased the tenant's memory ledger, every projection, receipt and usage row
    of the tenant goes; the other tenant keeps everything."""
    await _by(env, OTHER, [proposal("o1", "the cluster is in eu-west-1", key="cluster region"),
                           proposal("o2", "call me on +44 20 7946 1111", level="user", scope_id="u9",
                                    key="phone")])
    await _by(env, TENANT, [proposal("m1", "the cluster is in eu-west-2", key="cluster region")])
    await env.c.memory_read(OTHER, "cluster region", key="cluster region", project_id="p1", task_id="t1")
    await env.c.memory_read(TENANT, "cluster region", key="cluster region", project_id="p1")
    mine = await env.snapshot(TENANT)

    async def reach_tenants() -> set[str]:
        """Tenants of the put-back reference's entries (``reach_log``)."""
        info = await env.js.stream_info(env.settings.reach_stream, subjects_filter=">")
        return {subject.split(".")[-2] for subject in info.state.subjects or {}}

    async def both_referenced() -> bool:
        return await reach_tenants() == {TENANT, OTHER}

    await assert_eventually(both_referenced, timeout=30, message="the reference never held both tenants")
    # The ledger step (the lead's): every message of the tenant's memory ledger, securely erased.
    seqs = await env.memory_seqs(OTHER)
    assert len(seqs) == 4
    for seq in seqs:
        await env.js.delete_msg(env.settings.stream, seq)
    ctx, plans = await env.forget(selector("tenant"), tenant=OTHER)
    assert plans["memory"]["rows"]["memory_records"] == 2
    assert plans["memory:counts"]["records"] == 2
    assert plans["read_receipts:counts"] == {"receipts": 1, "usage": 1}
    assert all(not rows for rows in (await env.snapshot(OTHER)).values())
    assert await reach_tenants() == {TENANT}
    await env.assert_erased(seqs)
    assert await env.snapshot(TENANT) == mine
    await env.assert_replays()
    await env.assert_idempotent(ctx)
    assert all(not rows for rows in (await env.snapshot(OTHER)).values())


async def test_the_service_answers_evictions(env: Env) -> None:
    """The memory-policy service drops its cached keys of a subject (or a tenant) when told to."""
    await _by(env, TENANT, [proposal("e1", "call me on +44 20 7946 2222", level="user", scope_id="u5",
                                     key="phone")])
    await env.c.memory_read(TENANT, "phone", key="phone", user_id="u5", max_sensitivity="personal")
    acks = await evict.broadcast_to(env.nc, env.settings.prefix,
                                 evict.Eviction(request_id="fr-evict", tenant=TENANT, subject="u5"),
                                 frozenset({"agentledger-memory-policy"}))
    [ack] = [a for a in acks if a.service == "agentledger-memory-policy"]
    assert ack.evicted["keys"] == 1 and ack.evicted["vectors"] > 0
    acks = await evict.broadcast_to(env.nc, env.settings.prefix,
                                 evict.Eviction(request_id="fr-evict2", tenant=TENANT, whole_tenant=True),
                                 frozenset({"agentledger-memory-policy"}))
    [ack] = [a for a in acks if a.service == "agentledger-memory-policy"]
    assert ack.evicted == {"keys": 0, "vectors": 0}
    # The value is still readable afterwards: the key is read back from the bucket.
    read = await env.c.memory_read(TENANT, "phone", key="phone", user_id="u5", max_sensitivity="personal")
    assert [i.value for i in read.items] == ["call me on +44 20 7946 2222"]


# ---- the fold alone: a tombstone gives the same state whether or not the erased events were seen ----

PROPS = hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _tombstone(state: m.MemoryState, record_ids: list[str], seq: int) -> tuple[int, ev.EventBase]:
    rows = {r.record_id: r for group in state.rows.values() for r in group.values()}
    records = [ev.ForgottenRecord(record_id=rid, scope=m.parse_scope_key(rows[rid].scope), key=rows[rid].key,
                                  kind=rows[rid].body.kind) for rid in record_ids]
    return seq, ev.MemoryForgottenEvent(
        event_id="forget:fr-p:0", tenant="acme", task_id=ev.MEMORY_TASK, producer="tombstone-fanout",
        occurred_at=NOW, schema_version=1, payload=ev.MemoryForgotten(request_id="fr-p", records=records))


def _state(events: list[tuple[int, ev.EventBase]]) -> tuple[Any, ...]:
    state, folded = fold_tenant(events)
    groups = {gk: m.encode_group(g) for gk, g in state.groups.items()}
    return state.rows, groups, state.pending, sorted(folded.history)


def test_held_feedback_is_the_same_set_whatever_its_order() -> None:
    """Feedback for a record not seen yet is held as a set: two marks in either order are held the
    same, as a group keeps them (the case the property below found: a promoted fact's marks
    held again when its group was buried, against the same marks held in ledger order)."""
    def held(actions: list[str]) -> dict[str, list[m.FeedbackMark]]:
        events = [(i + 1, ev.MemoryFeedbackEvent(
            event_id=f"fb-{i}", tenant="acme", task_id=ev.MEMORY_TASK, producer="memory-policy",
            occurred_at=NOW, schema_version=1,
            payload=ev.MemoryFeedback(record_id="mem_later", action=a, actor="u1")))  # type: ignore[arg-type]
            for i, a in enumerate(actions)]
        state, _ = fold_tenant(events)
        return state.pending

    assert held(["revoke", "confirm"]) == held(["confirm", "revoke"])
    assert len(held(["revoke", "confirm"])["mem_later"]) == 2


@PROPS
@given(st.data())
def test_a_tombstone_folds_the_same_with_or_without_the_erased_events(data: st.DataObject) -> None:
    """Any ledger, any records of it forgotten: folding the whole ledger and the tombstone, or only what
    is left after the forgotten records' messages are erased and the tombstone, gives the same rows
    (ledger sequences included), groups, held feedback and history; and a later proposal, decision or
    feedback naming a forgotten record changes neither."""
    props = data.draw(proposals())
    marks = data.draw(feedback(len(props)))
    lg = run(props, marks, list(range(len(props) + len(marks))))
    events = [(seq, e) for e, seq in lg.events]
    known = sorted({r.record_id for group in lg.state.rows.values() for r in group.values()})
    if not known:
        return
    chosen = data.draw(st.lists(st.sampled_from(known), min_size=1, max_size=4, unique=True))
    tomb = _tombstone(lg.state, chosen, len(events) + 1)
    # What the memory step erases: the events whose history rows name a chosen record or its proposal.
    _, before = fold_tenant(events)
    proposals_of = {h.proposal_id for h in before.history if h.record_id in chosen and h.proposal_id}
    erased = {h.seq for h in before.history if h.record_id in chosen or h.proposal_id in proposals_of}
    full = [*events, tomb]
    gap = [*[(s, e) for s, e in events if s not in erased], tomb]
    assert _state(full) == _state(gap)
    # Late events naming a forgotten record: a repeated decision, feedback. Ignored by both.
    late: list[tuple[int, ev.EventBase]] = []
    for e, _seq in lg.events:
        if isinstance(e, ev.MemoryDecidedEvent) and e.payload.record is not None \
                and e.payload.record.record_id in chosen:
            late.append((len(full) + len(late) + 1, msgspec.structs.replace(e, event_id=f"late-{e.event_id}")))
    for rid in chosen:
        fb = ev.MemoryFeedback(record_id=rid, action="confirm", actor="u1")
        late.append((len(full) + len(late) + 1, ev.MemoryFeedbackEvent(
            event_id=f"late-fb-{rid}", tenant="acme", task_id=ev.MEMORY_TASK, producer="memory-policy",
            occurred_at=NOW, schema_version=1, payload=fb)))
    assert _state([*full, *late]) == _state(full) == _state([*gap, *late])
    state, _ = fold_tenant(full)
    for rid in chosen:
        assert m.is_forgotten(state, rid)
        row = state.rows[state.record_groups[rid]][rid]
        assert (row.status, row.body.value, row.body.sealed, row.ledger_seq) == ("forgotten", None, None, tomb[0])
