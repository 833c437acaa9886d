"""The forget saga with the fan-out's own indexes (ledger, keys, Working Memory, checkpoints,
leases, artifacts, caches), against real NATS JetStream and PostgreSQL.

The memory and context indexes have their own tests (test_forget_memory.py,
test_forget_context.py); the whole service, killed at every step, is test_forget_service.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import nats.js.errors
import pytest

from agentledger.config import Settings
from agentledger.contracts import events as ev
from agentledger.core.forget import verify_receipt
from agentledger.security import auth
from agentledger.security.kek_epochs import KekRing
from agentledger.security.sealing import Keyring
from agentledger.services.tombstone_fanout import indexes
from agentledger.services.tombstone_fanout.handlers import HANDLERS
from agentledger.services.tombstone_fanout.saga import ForgetLog, Saga
from agentledger.stores import artifacts
from ckpt_support import TENANT, Stack, chain, created, event, plan, succeeded, variable

# The fan-out's own handlers (ledger, keys, Working Memory, checkpoints, leases, artifacts,
# bindings, caches) in the order a request runs them; the statistics step is not one of them.
OWN = tuple(h for h in HANDLERS
            if type(h).__module__ == indexes.__name__ and not isinstance(h, indexes.StatisticsHandler))


class Fanout:
    """A ForgetLog and a Saga over the fan-out's own handlers, on the fan-out's identity."""

    def __init__(self, settings: Settings, stack: Stack) -> None:
        self.settings = settings
        self.stack = stack

    async def __aenter__(self) -> Fanout:
        s = self.settings
        self.nc = await auth.connect(s, "tombstone-fanout")
        assert self.stack.db is not None
        self.log = ForgetLog(s, self.nc, self.stack.db)
        await self.log.start()
        self.saga = Saga(s, self.nc, self.stack.db, self.log, handlers=OWN,
                         keyring=Keyring(self.nc, s.keys_bucket, KekRing.load(s.kek_path)),
                         artifacts=await artifacts.open(self.nc, s))
        await self.saga.instances.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.saga.instances.stop()
        await self.log.stop()
        await self.nc.close()

    async def forget(self, request_id: str, **selector: Any) -> ev.DeletionReceipt:
        event_ = ev.ForgetRequestedEvent(
            event_id=f"forget-{request_id}", tenant=TENANT, task_id=ev.FORGET_TASK, producer="test",
            occurred_at=ev_now(), schema_version=1,
            payload=ev.ForgetRequested(request_id=request_id, selector=ev.ForgetSelector(**selector),
                                       requested_by="operator", operator=True))
        seqs = await self.saga.append([event_])
        await self.log.wait_for(max(seqs), 30)
        row = await self.log.store.request(self.stack.db, TENANT, request_id)
        assert row is not None
        return await self.saga.run(row)


def ev_now() -> Any:
    from datetime import UTC, datetime  # noqa: PLC0415
    return datetime.now(UTC)


@pytest.fixture
async def stack(settings: Settings) -> AsyncIterator[Stack]:
    s = await Stack(settings).start(checkpointer=True)
    try:
        yield s
    finally:
        await s.stop()


def personal_turn(task: str, ordinal: int, text: str, subject: str) -> dict[str, Any]:
    return event("turn_appended", {"role": "user", "ordinal": ordinal, "content": text}, task,
                 tenant=TENANT) | {"data_subject": subject}


async def test_forget_a_task_erases_its_ledger_rows_leases_and_artifacts(settings: Settings,
                                                                         stack: Stack) -> None:
    """Forget task t1: its messages are erased, its Working Memory rows, checkpoints, lease and
    artifact are gone; task t2 of the same tenant keeps every message and row; running the saga
    again changes nothing and returns the same sealed receipt."""
    c = stack.c
    ref = await c.put_artifact(b"the quarterly report of t1", schema="text/plain", producer="test",
                               tenant=TENANT)
    for task in ("t1", "t2"):
        await stack.append([created(task), plan(task, chain(2)),
                            succeeded(task, "S1", artifacts=[msgspec_ref(ref)] if task == "t1" else None),
                            variable(task, "note", f"note of {task}")])
    lease = await c.acquire_lease(TENANT, "t1", "worker-1")
    assert lease is not None
    await stack.projected()
    t2_seqs = await ledger_seqs(stack, "t2")
    async with Fanout(settings, stack) as f:
        receipt = await f.forget("fg-task", kind="task", task_id="t1")
        assert verify_receipt(receipt)
        by_index = {i.index: i for i in receipt.indexes}
        assert by_index["ledger"].counts["messages"] >= 4
        assert by_index["working_memory"].counts == {"tasks": 1}
        assert by_index["artifacts"].counts == {"objects": 1}
        assert by_index["keys"].status == "not_applicable"
        assert await ledger_seqs(stack, "t1") == []
        assert await ledger_seqs(stack, "t2") == t2_seqs
        assert stack.db is not None
        for table in ("task_state", "task_variables", "applied_events"):
            assert await stack.db.fetchval(f"SELECT count(*) FROM {table} WHERE task_id = 't1'") == 0
            assert await stack.db.fetchval(f"SELECT count(*) FROM {table} WHERE task_id = 't2'") > 0
        kv = await f.nc.jetstream().key_value(settings.leases_bucket)
        with pytest.raises(nats.js.errors.KeyNotFoundError):
            await kv.get(f"{TENANT}.t1")
        store = await artifacts.open(f.nc, settings)
        with pytest.raises(Exception) as missing:
            await store.get(ref.uri)
        assert getattr(missing.value, "code", "") in ("artifact_missing", "not_found")
        again = await f.saga.run(await f.log.store.request(stack.db, TENANT, "fg-task"))  # type: ignore[arg-type]
        assert again == receipt


def msgspec_ref(ref: ev.ArtifactRef) -> dict[str, Any]:
    import msgspec  # noqa: PLC0415
    return msgspec.to_builtins(ref)


async def ledger_seqs(stack: Stack, task: str) -> list[int]:
    from agentledger.erasure.erase import subject_seqs  # noqa: PLC0415
    return await subject_seqs(stack.c.nc.jetstream(), stack.settings.stream,
                              f"{stack.settings.prefix}.ledger.{TENANT}.{task}")


async def test_forget_a_subject_destroys_its_key_and_its_values_read_erased(settings: Settings,
                                                                            stack: Stack) -> None:
    """Forget data subject s1: its key is destroyed (the writer's and projector's caches too),
    its sealed turn reads ``erased`` in the view, the other subject's turn still opens."""
    await stack.append([created("t1"), personal_turn("t1", 1, "I live at 12 Rue Oberkampf", "s1"),
                        personal_turn("t1", 2, "my cat is called Miso", "s2")])
    await stack.projected()
    before = (await stack.c.working_memory(TENANT, "t1", reveal_personal=True)).state
    assert [t["content"] for t in before["transcript"]] == ["I live at 12 Rue Oberkampf",
                                                             "my cat is called Miso"]
    async with Fanout(settings, stack) as f:
        receipt = await f.forget("fg-subject", kind="subject", subject="s1")
        by_index = {i.index: i for i in receipt.indexes}
        assert by_index["keys"].counts == {"subjects": 1}
        assert by_index["working_memory"].counts == {"sealed_turns_unreadable": 1,
                                                     "sealed_variables_unreadable": 0}
        assert by_index["caches"].counts["services"] >= 3  # writer, projector, checkpointer
        assert by_index["ledger"].status == "not_applicable"
    after = (await stack.c.working_memory(TENANT, "t1", reveal_personal=True)).state
    assert after["transcript"][0].get("erased") is True and after["transcript"][0].get("content") is None
    assert after["transcript"][1]["content"] == "my cat is called Miso"
    # The writer's cache no longer holds the key: a new value of s1 is sealed under a new key.
    await stack.append([personal_turn("t1", 3, "new address", "s1")])
    await stack.projected()
    latest = (await stack.c.working_memory(TENANT, "t1", reveal_personal=True)).state
    assert latest["transcript"][2]["content"] == "new address"
    assert latest["transcript"][0].get("erased") is True


async def test_a_key_sealed_after_a_tenant_forget_planned_is_found_again_and_destroyed(
        settings: Settings, stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    """Protects a receipt's truth: a tenant forget plans its keys step (subject s1), and before
    that step is applied an append seals a value of a new subject s2 (the race an outside
    probe met once in 21 tenant forgets: the receipt said the keys step done while a key was
    left). The step asks the keys bucket again after its apply, destroys s2's key too and
    counts it ``found_again``; afterwards the tenant holds no key at all."""
    await stack.append([created("t1"), personal_turn("t1", 1, "I live at 12 Rue Oberkampf", "s1")])
    await stack.projected()
    keys_handler = next(h for h in OWN if isinstance(h, indexes.KeysHandler))
    planned = keys_handler.plan

    async def plan_then_seal(ctx: Any) -> Any:
        found = await planned(ctx)
        await stack.append([personal_turn("t1", 2, "my phone is 0612345678", "s2")])
        return found

    monkeypatch.setattr(keys_handler, "plan", plan_then_seal)
    async with Fanout(settings, stack) as f:
        receipt = await f.forget("fg-tenant-race", kind="tenant")
        keys = next(i for i in receipt.indexes if i.index == "keys")
        assert keys.status == "done" and keys.counts["subjects"] == 1, keys
        assert keys.counts.get("found_again") == 1, keys
        assert await Keyring(f.nc, settings.keys_bucket, KekRing.load(settings.kek_path)).subjects(TENANT) == []
        assert verify_receipt(receipt)
