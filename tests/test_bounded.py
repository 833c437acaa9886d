"""Bounded everything (issue 7, section 5): what grows with traffic has a limit, and what is
larger than one NATS message can still be read.

Real NATS and PostgreSQL throughout (the writer, projector and checkpointer run in
process); the pure parts (the reducer's rejection bound, the byte-bounded caches) are
also checked without servers.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec
import pytest

from agentledger.client import Client, connect
from agentledger.config import Settings, from_env
from agentledger.contracts import events as ev
from agentledger.contracts.api import WorkingMemoryReply
from agentledger.core.reducer import apply
from agentledger.core.state import RECENT_REJECTIONS, Changes, encode_state, new_state
from agentledger.core.validate import goal_hash
from agentledger.errors import AgentLedgerError
from agentledger.security import auth
from agentledger.security.sealing import KEY_ENTRY_OVERHEAD
from agentledger.shell.bounded import ByteLRU
from ckpt_support import TENANT, Stack, chain, created, event, plan, running, variable

_wm_reply = msgspec.json.Decoder(WorkingMemoryReply)


def _make(kind: str, event_id: str, **payload: Any) -> ev.EventBase:
    return msgspec.convert(
        {"event_id": event_id, "tenant": TENANT, "task_id": "t1", "producer": "test",
         "occurred_at": "2026-11-29T10:00:00Z", "schema_version": 1, "kind": kind,
         "payload": payload}, ev.AnyEvent)


def _bad_start(task: str, i: int) -> dict[str, Any]:
    """A step event the reducer refuses (``unknown_step``): the writer accepts it, the state does not."""
    return event("step_started", {"plan_version": 1, "step_id": "NOPE", "attempt": 1}, task,
                 event_id=f"bad-{i:05d}")


async def _raw_get(client: Client, **body: Any) -> WorkingMemoryReply:
    msg = await client.nc.request(f"{client.settings.prefix}.wm.get", msgspec.json.encode(body),
                                  timeout=30)
    return _wm_reply.decode(msg.data)


# ---- the rejection trace ------------------------------------------------------------------

def test_the_state_keeps_a_count_and_the_newest_rejections() -> None:
    """Protects the state's size: 10,000 refused events once made a 1.5 MB state; now it holds
    the newest RECENT_REJECTIONS and a count, and still says exactly how many there were."""
    state = new_state(TENANT, "t1")
    apply(state, _make("task_created", "c1", goal={"text": "g", "acceptance_criteria": [],
                                                   "goal_hash": goal_hash("g", [])}), 1, Changes())
    for i in range(10_000):
        apply(state, _make("step_started", f"bad-{i:05d}", plan_version=1, step_id="S9"), i + 2,
              Changes())
    assert len(state.rejections) == RECENT_REJECTIONS
    assert state.older_rejections + len(state.rejections) == 10_000
    assert [r.seq for r in state.rejections] == list(range(10_001 - RECENT_REJECTIONS + 1, 10_002))
    # What is left grows neither with the trace nor with the events (their ids are not kept).
    assert len(encode_state(state)) < 10_000


async def test_the_full_rejection_trace_pages_in_ledger_order(settings: Settings) -> None:
    """Protects the explanation of every refusal: the state shows a count and the newest few,
    and wm.get pages through all 10,000 rows of the projection, in order, none twice."""
    async with running(settings, checkpointer=False) as stack:
        await stack.append([created("t1"), plan("t1", chain(1))])
        last = await stack.append([_bad_start("t1", i) for i in range(10_000)])
        wm = await stack.c.working_memory(TENANT, "t1", min_seq=last, wait_ms=30_000)
        state = wm.state
        assert state["rejections_total"] == 10_000
        assert len(state["rejections"]) == RECENT_REJECTIONS
        assert state["rejections"][-1]["seq"] == last
        assert len(msgspec.json.encode(state)) < 300_000

        first = await stack.c.rejections(TENANT, "t1", limit=1000)
        assert len(first.items) == 1000 and first.next_after_seq == first.items[-1].seq
        seen = [item async for item in stack.c.all_rejections(TENANT, "t1", page_size=700)]
        assert [r.event_id for r in seen] == [f"bad-{i:05d}" for i in range(10_000)]
        assert [r.seq for r in seen] == sorted({r.seq for r in seen})
        assert {r.code for r in seen} == {"unknown_step"}
        # The newest rows of the table are exactly what the state lists.
        assert [r.seq for r in seen[-RECENT_REJECTIONS:]] == [r["seq"] for r in state["rejections"]]
        last_page = await stack.c.rejections(TENANT, "t1", after_seq=seen[-1].seq)
        assert (last_page.items, last_page.next_after_seq) == ([], None)


async def test_a_rejections_page_is_cut_to_the_reply_budget(settings: Settings) -> None:
    """Protects the reply size: a page of long reasons stops where the reply is full and
    continues on the next page, rather than failing to send."""
    small = msgspec.structs.replace(settings, max_reply_bytes=8 * 1024)
    async with running(small, checkpointer=False) as stack:
        await stack.append([created("t1"), plan("t1", chain(1))])
        last = await stack.append([_bad_start("t1", i) for i in range(200)])
        await stack.c.working_memory(TENANT, "t1", min_seq=last)
        page = await stack.c.rejections(TENANT, "t1", limit=1000)
        assert 0 < len(page.items) < 200 and page.next_after_seq == page.items[-1].seq
        assert len([r async for r in stack.c.all_rejections(TENANT, "t1")]) == 200


async def test_a_tenant_cannot_page_another_tenants_rejections(settings: Settings) -> None:
    """Protects tenant isolation on the new read: the tenant comes from the connection, so
    naming another tenant is refused and naming one's own never shows the other's rows."""
    if settings.auth_dir is None:
        pytest.skip("the NATS server runs without accounts")
    async with running(settings, checkpointer=False) as stack:
        for tenant in ("acme", "globex"):
            await auth.tenant_add(settings, tenant)
        await stack.append([created("t1"), plan("t1", chain(1)), _bad_start("t1", 1)])
        await stack.projected()
        creds = await auth.agent_add(settings, "globex", "agent-g")
        async with await connect(msgspec.structs.replace(settings, nats_creds=creds)) as globex:
            with pytest.raises(AgentLedgerError) as info:
                await globex.rejections("acme", "t1")
            assert (info.value.code, info.value.path) == ("tenant_mismatch", "$.tenant")
            own = await globex.rejections("globex", "t1")
            assert own.items == []
        assert [r.event_id for r in (await stack.c.rejections("acme", "t1")).items] == ["bad-00001"]


# ---- Working Memory of any size ---------------------------------------------------------------

VALUE_CHARS = 250_000


def _values() -> dict[str, str]:
    return {f"v{i:02d}": chr(ord("a") + i % 26) * (VALUE_CHARS - 1) + str(i % 10) for i in range(40)}


async def _big_task(stack: Stack) -> int:
    """A task of 40 variables of 250 KB each (a 10 MB state), one event per append."""
    seq = await stack.append([created("big"), plan("big", chain(2))])
    for name, value in _values().items():
        seq = (await stack.c.append(variable("big", name, value))).seq
    return seq


async def test_a_state_larger_than_one_message_is_read_and_resumed(settings: Settings) -> None:
    """Protects reads and resumes of big tasks: a 10 MB state (over the 8 MB max_payload) once
    made wm.get fail with MaxPayloadError and resume time out for good. Now the client puts the
    view's chunks together intact, a checkpoint of it is saved, and resume answers (the state
    comes from wm.get when it does not fit in the resume reply) with the lease."""
    async with running(settings) as stack:
        last = await _big_task(stack)
        started = time.perf_counter()
        wm = await stack.c.working_memory(TENANT, "big", min_seq=last, wait_ms=30_000)
        elapsed = time.perf_counter() - started
        values = {name: v["value"] for name, v in wm.state["variables"].items()}
        assert values == _values() and wm.seq == last
        first = await _raw_get(stack.c, tenant=TENANT, task_id="big")
        assert first.state is None and first.chunk is not None
        assert first.chunk.size > 10_000_000 and first.chunk.count > 1
        print(f"\nwm.get of a {first.chunk.size} B view: {first.chunk.count} chunks, {elapsed:.3f} s")

        saved = await stack.c.save_checkpoint(TENANT, "big")
        assert saved.seq == last
        body = bytes((await stack.rows("big"))[0]["body"])
        assert len(body) < 3 * first.chunk.size  # the state about twice (docs/operations.md)
        print(f"checkpoint of it: {len(body)} B")
        resumed = await stack.c.resume(TENANT, "big", "exec-1")
        assert resumed.status == "resumable" and resumed.lease is not None
        assert resumed.checkpoint_id == saved.checkpoint_id and resumed.state_omitted
        assert resumed.dispatch == ["S1"]
        assert {n: v["value"] for n, v in resumed.state["variables"].items()} == _values()
        assert resumed.state["lease"]["token"] == resumed.lease.token


async def test_chunks_belong_to_one_version_of_the_view(settings: Settings) -> None:
    """Protects consistency of a chunked read: chunks of the view a reader started with are
    still served (from the projector's cache) after the task moved on; once that view is gone
    the reader is told `state_changed` rather than handed a mix of two versions."""
    small = msgspec.structs.replace(settings, max_reply_bytes=16 * 1024)
    async with running(small, checkpointer=False) as stack:
        seq = await stack.append([created("t1"), variable("t1", "x", "y" * 40_000)])
        first = await _raw_get(stack.c, tenant=TENANT, task_id="t1", min_seq=seq)
        assert first.chunk is not None and first.chunk.count >= 3
        digest = first.chunk.digest
        moved = await stack.append([variable("t1", "x", "z" * 40_000)])
        await stack.c.working_memory(TENANT, "t1", min_seq=moved)
        second = await _raw_get(stack.c, tenant=TENANT, task_id="t1", chunk=1, digest=digest)
        assert second.chunk is not None and (second.chunk.index, second.chunk.digest) == (1, digest)
        stack.projector._views.clear()
        stale = await _raw_get(stack.c, tenant=TENANT, task_id="t1", chunk=2, digest=digest)
        assert stale.error is not None
        assert (stale.error.code, stale.error.path, stale.error.retryable) == (
            "state_changed", "$.digest", True)
        # The client starts over and returns the new view whole.
        wm = await stack.c.working_memory(TENANT, "t1")
        assert wm.state["variables"]["x"]["value"] == "z" * 40_000 and wm.seq == moved


@pytest.mark.parametrize(("body", "code", "path"), [
    ({"chunk": 1}, "missing_field", "$.digest"),
    ({"digest": "0" * 64}, "invalid_value", "$.digest"),
    ({"chunk": 1, "digest": "0" * 64, "rejections": {}}, "invalid_value", "$.rejections"),
    ({"chunk": 0, "digest": "0" * 64}, "invalid_value", "$.chunk"),
    ({"rejections": {"limit": 1001}}, "invalid_value", "$.rejections.limit"),
])
async def test_bad_paging_requests_name_the_field(settings: Settings, body: dict[str, Any],
                                                 code: str, path: str) -> None:
    """Protects callers of the paging contract: a wrong combination is a typed error with its path."""
    async with running(settings, checkpointer=False) as stack:
        reply = await _raw_get(stack.c, tenant=TENANT, task_id="t1", **body)
        assert reply.error is not None and (reply.error.code, reply.error.path) == (code, path)


async def test_a_chunk_index_past_the_end_is_refused(settings: Settings) -> None:
    """Protects the chunk contract: an index beyond ``count`` is `invalid_value` at `$.chunk`."""
    small = msgspec.structs.replace(settings, max_reply_bytes=16 * 1024)
    async with running(small, checkpointer=False) as stack:
        seq = await stack.append([created("t1"), variable("t1", "x", "y" * 40_000)])
        first = await _raw_get(stack.c, tenant=TENANT, task_id="t1", min_seq=seq)
        assert first.chunk is not None
        past = await _raw_get(stack.c, tenant=TENANT, task_id="t1", chunk=first.chunk.count,
                              digest=first.chunk.digest)
        assert past.error is not None and (past.error.code, past.error.path) == (
            "invalid_value", "$.chunk")


# ---- leases ---------------------------------------------------------------------------------

async def test_a_tenant_holds_a_bounded_number_of_leases(settings: Settings) -> None:
    """Protects the lease table from one tenant: past AGENTLEDGER_MAX_LEASES_PER_TENANT live
    leases a grant is `too_many_leases`; a re-grant to the holder, a released lease and other
    tenants are unaffected."""
    limited = msgspec.structs.replace(settings, max_leases_per_tenant=3)
    async with running(limited, checkpointer=False) as stack:
        for i in range(4):
            await stack.append([created(f"t{i}")])
        await stack.append([created("o1", tenant="other")])
        held = [await stack.c.acquire_lease(TENANT, f"t{i}", "exec", ttl_s=60) for i in range(3)]
        with pytest.raises(AgentLedgerError) as info:
            await stack.c.acquire_lease(TENANT, "t3", "exec", ttl_s=60)
        assert (info.value.code, info.value.path) == ("too_many_leases", "$.task_id")
        again = await stack.c.acquire_lease(TENANT, "t0", "exec", ttl_s=60)
        assert again.token > held[0].token
        assert (await stack.c.acquire_lease("other", "o1", "exec", ttl_s=60)).token > 0
        await stack.c.release_lease(TENANT, "t1", held[1])
        assert (await stack.c.acquire_lease(TENANT, "t3", "exec", ttl_s=60)).token > 0


async def test_the_lease_bucket_has_a_size_limit(settings: Settings) -> None:
    """Protects the lease bucket: it is created with AGENTLEDGER_MAX_LEASES_BYTES, and at the
    limit a grant is refused `lease_table_full` (typed, retryable), never an internal error."""
    tiny = msgspec.structs.replace(settings, max_leases_bytes=700)
    async with running(tiny, checkpointer=False) as stack:
        for i in range(6):
            await stack.append([created(f"t{i}")])
        nc = await auth.connect(tiny, auth.WRITER)
        try:
            info = await nc.jetstream().stream_info(f"KV_{tiny.leases_bucket}")
        finally:
            await nc.close()
        assert info.config.max_bytes == 700
        with pytest.raises(AgentLedgerError) as full:
            for i in range(6):
                await stack.c.acquire_lease(TENANT, f"t{i}", "exec", ttl_s=60)
        assert (full.value.code, full.value.retryable) == ("lease_table_full", True)


# ---- caches bounded by bytes ---------------------------------------------------------------

async def test_the_key_cache_stays_within_its_byte_budget(settings: Settings) -> None:
    """Protects the writer's memory: one data-subject key per person was cached forever; now
    the keyring holds at most AGENTLEDGER_KEY_CACHE_BYTES, and evicted keys still open values."""
    budget = 20 * (KEY_ENTRY_OVERHEAD + 40)
    small = msgspec.structs.replace(settings, key_cache_bytes=budget)
    async with running(small, checkpointer=False) as stack:
        await stack.append([created("t1")])
        for i in range(1, 101):
            turn = event("turn_appended", {"role": "user", "ordinal": i, "content": f"hello {i}"},
                         "t1")
            seq = (await stack.c.append(turn | {"data_subject": f"person-{i:03d}"})).seq
        keyring = stack.writer._keyring
        assert keyring is not None
        assert 0 < keyring.cache.total_bytes <= budget and len(keyring.cache) < 100
        wm = await stack.c.working_memory(TENANT, "t1", reveal_personal=True, min_seq=seq)
        assert [t["content"] for t in wm.state["transcript"]] == [f"hello {i}" for i in range(1, 101)]
        reader = stack.projector._keys
        assert reader is not None and reader.cache.total_bytes <= budget


async def test_the_projector_state_cache_is_bounded_by_bytes(settings: Settings) -> None:
    """Protects the projector's memory: task states were kept up to 50,000 whatever their
    size; now their bytes are bounded too, and an evicted state is read back correctly."""
    budget = 200_000
    small = msgspec.structs.replace(settings, projector_cache_bytes=budget)
    async with running(small, checkpointer=False) as stack:
        for i in range(12):
            await stack.append([created(f"t{i}"), variable(f"t{i}", "blob", "x" * 50_000)])
        last = await stack.append([variable("t0", "after", 1)])
        await stack.projected(last)
        cache = stack.projector.lanes[0].cache
        assert cache.total_bytes <= budget and len(cache) < 13
        wm = await stack.c.working_memory(TENANT, "t0")
        assert wm.state["variables"]["after"]["value"] == 1
        assert wm.state["variables"]["blob"]["value"] == "x" * 50_000


def test_byte_lru_evicts_oldest_expires_and_skips_what_cannot_fit() -> None:
    """Protects the shared cache primitive: the byte total never passes the budget, the least
    recently used entry goes first, entries expire after their TTL, and an entry larger than
    the whole budget is not kept."""
    now = [0.0]
    lru: ByteLRU[str, int] = ByteLRU(100, ttl_s=10, clock=lambda: now[0])
    assert lru.put("a", 1, 40) and lru.put("b", 2, 40)
    assert lru.get("a") == 1  # "b" is now the least recently used
    assert lru.put("c", 3, 40)
    assert "b" not in lru and lru.get("a") == 1 and lru.total_bytes == 80
    assert not lru.put("huge", 4, 101) and "huge" not in lru
    now[0] = 10.0
    assert lru.get("a") is None and lru.total_bytes == 40


def test_limits_are_read_from_the_environment() -> None:
    """Protects configuration: every new limit comes from its AGENTLEDGER_* variable."""
    env = {"AGENTLEDGER_MAX_REPLY_BYTES": "65536", "AGENTLEDGER_VIEW_CACHE_BYTES": "1",
           "AGENTLEDGER_PROJECTOR_CACHE_BYTES": "2", "AGENTLEDGER_KEY_CACHE_BYTES": "3",
           "AGENTLEDGER_MAX_LEASES_PER_TENANT": "4", "AGENTLEDGER_MAX_LEASES_BYTES": "5"}
    s = from_env(env)
    assert (s.max_reply_bytes, s.view_cache_bytes, s.projector_cache_bytes, s.key_cache_bytes,
            s.max_leases_per_tenant, s.max_leases_bytes) == (65536, 1, 2, 3, 4, 5)
