"""Per-tenant quotas and the ledger's erasure reserve, against the real NATS and PostgreSQL.

One tenant at its limits must not take what another needs: its appends are refused with a
typed error naming the limit while the other tenant's go through, and a full ledger still
takes erasures (a forget request runs to its receipt) and lease releases.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import msgspec
import pytest
import structlog
from nats.errors import TimeoutError as NatsTimeout

from agentledger.client import Client, connect
from agentledger.config import Settings, from_env
from agentledger.errors import AgentLedgerError, ContractError
from agentledger.security import auth
from agentledger.services.ledger_writer import quotas as quota_module
from agentledger.services.ledger_writer.quotas import Quotas
from agentledger.services.ledger_writer.service import LedgerWriter
from tenant_agents import agent_client
from ckpt_support import Stack, created, variable
from helpers import assert_eventually
from test_memory_service import proposal
from writer_support import running_writer

PAD = "y" * 400


async def _agent(settings: Settings, tenant: str) -> Client:
    if settings.auth_dir is None:
        pytest.skip("the NATS server runs without accounts")
    await auth.tenant_add(settings, tenant)
    return await agent_client(settings, tenant, "agent-1")


async def _code(coro: object) -> AgentLedgerError:
    with pytest.raises(AgentLedgerError) as info:
        await coro  # type: ignore[misc]
    return info.value


@contextlib.asynccontextmanager
async def _limited(settings: Settings, **limits: float) -> AsyncIterator[tuple[Settings, Client, Client]]:
    """A writer with these per-tenant limits (2 s bursts), and an agent of two tenants."""
    limited = msgspec.structs.replace(settings, tenant_append_burst_s=2.0, **limits)
    writer = LedgerWriter(limited)
    await writer.start()
    acme, globex = await _agent(limited, "acme"), await _agent(limited, "globex")
    try:
        yield limited, acme, globex
    finally:
        await acme.close()
        await globex.close()
        await writer.stop()


@pytest.fixture
async def two_tenants(settings: Settings) -> AsyncIterator[tuple[Settings, Client, Client]]:
    """Tenants that may append 5 events/s with a 2 s burst."""
    async with _limited(settings, tenant_append_events_per_s=5.0, tenant_append_bytes_per_s=0.0) as world:
        yield world


async def test_a_flooding_tenant_is_rate_limited_and_another_is_not(
        two_tenants: tuple[Settings, Client, Client]) -> None:
    """Protects one tenant's appends from another's flood: past its rate the flooder is refused
    `rate_limited` (retryable, naming the setting), while the other tenant is not refused."""
    _, acme, globex = two_tenants
    await acme.append(created("flood", tenant="acme", producer="agent-1"))
    outcomes = await asyncio.gather(
        *(acme.append(variable("flood", "x", i, tenant="acme", producer="agent-1")) for i in range(200)),
        return_exceptions=True)
    refused = [o for o in outcomes if isinstance(o, AgentLedgerError)]
    assert refused and all(e.code == "rate_limited" and e.retryable for e in refused)
    assert "AGENTLEDGER_TENANT_APPEND_EVENTS_PER_S" in refused[0].message
    # Another tenant's bucket is its own: its appends, within its own rate, all go through.
    await globex.append(created("quiet", tenant="globex", producer="agent-1"))
    for i in range(5):
        await globex.append(variable("quiet", "x", i, tenant="globex", producer="agent-1"))


async def test_a_tenant_flooding_the_artifact_endpoints_is_rate_limited_and_another_is_not(
        settings: Settings) -> None:
    """Protects the artifact endpoints' shared slots: past its artifact request rate a tenant's puts
    and stats are refused `rate_limited` (retryable, naming the setting) before they take a slot,
    while another tenant's puts all go through."""
    async with _limited(settings, tenant_artifact_requests_per_s=5.0,
                        tenant_artifact_bytes_per_s=0.0) as (_, acme, globex):
        outcomes = await asyncio.gather(
            *(acme.put_artifact(f"report {i}".encode(), schema="text", producer="agent-1") for i in range(60)),
            return_exceptions=True)
        refused = [o for o in outcomes if isinstance(o, AgentLedgerError)]
        assert refused and all(e.code == "rate_limited" and e.retryable for e in refused), refused[:3]
        assert "AGENTLEDGER_TENANT_ARTIFACT_REQUESTS_PER_S" in refused[0].message
        for i in range(5):
            ref = await globex.put_artifact(f"quiet {i}".encode(), schema="text", producer="agent-1")
            assert await globex.get_artifact(ref.uri) == f"quiet {i}".encode()


async def test_a_tenant_at_its_ledger_quota_is_refused_and_others_and_erasures_are_not(
        settings: Settings) -> None:
    """Protects the ledger from one tenant: past its bytes it is refused `ledger_quota_exceeded`
    (not retryable), another tenant still appends, and an erasure for the tenant still goes in."""
    async with running_writer(settings, tenant_max_ledger_bytes=16 * 1024) as (_, client):
        await client.append(created("t1"))
        with pytest.raises(AgentLedgerError) as info:
            for i in range(100):
                await client.append(variable("t1", "x", PAD, event_id=f"v{i}"))
        assert info.value.code == "ledger_quota_exceeded" and not info.value.retryable
        assert "AGENTLEDGER_TENANT_MAX_LEDGER_BYTES" in info.value.message
        await client.append(created("t1", tenant="globex"))
        await client.append(_forget_requested("acme"))


async def test_ledger_usage_survives_a_writer_restart(settings: Settings) -> None:
    """Protects the quota from restarts: a tenant at its ledger quota stays there when the
    writer starts again (the counters are kept in the usage bucket, not only in memory)."""
    small = msgspec.structs.replace(settings, tenant_max_ledger_bytes=8 * 1024)
    writer = LedgerWriter(small)
    await writer.start()
    client = await connect(small)
    try:
        await client.append(created("t1"))
        with pytest.raises(AgentLedgerError):
            for i in range(100):
                await client.append(variable("t1", "x", PAD, event_id=f"v{i}"))
        await writer.stop()
        writer = LedgerWriter(small)
        await writer.start()
        refused = await _code(client.append(variable("t1", "x", PAD, event_id="after")))
        assert refused.code == "ledger_quota_exceeded"
    finally:
        await client.close()
        await writer.stop()


async def test_the_ledger_usage_counts_what_the_stream_holds(settings: Settings) -> None:
    """Protects the accounting the per-tenant ledger quota rests on: what the writer counts for
    a tenant is what JetStream holds for it, single events and atomic batches alike."""
    async with running_writer(settings) as (writer, client):
        await client.append(created("t1"))
        singles = [variable("t1", "x", PAD * (i % 3), event_id=f"v{i}") for i in range(20)]
        for e in singles:
            await client.append(e)
        await client.append_batch([variable("t1", "y", i, event_id=f"b{i}") for i in range(30)])
        assert (await client.append(singles[0])).duplicate  # a duplicate stores nothing
        held = (await client.nc.jetstream().stream_info(settings.stream)).state.bytes
        counted = writer._quotas.ledger.used("acme")
        assert counted == held


async def test_a_full_ledger_still_takes_a_forget_request_and_a_lease_release(settings: Settings) -> None:
    """Protects erasure at a full ledger: once the ledger holds its configured size, ordinary
    appends and lease grants of every tenant are refused `ledger_full`, while a forget request
    runs to its sealed receipt (its events use the reserve) and a lease is still released."""
    small = msgspec.structs.replace(settings, max_ledger_bytes=48 * 1024,
                                    ledger_reserve_bytes=256 * 1024)
    stack = await Stack(small).start(checkpointer=False, memory=True, context=True, tombstone=True)
    c = stack.c
    try:
        await stack.append([created("chat"), variable("chat", "city", "Lyon") | {"data_subject": "s1"}])
        await c.memory_propose("acme", [proposal("m1", "prefers answers in French", kind="preference",
                                                 level="user", scope_id="u1", source="user_confirmed",
                                                 key="preference.language", personal=True,
                                                 data_subject="s1")])
        lease = await c.acquire_lease("acme", "chat", "worker-1")
        await c.release_lease("acme", "chat", lease)
        lease = await c.acquire_lease("acme", "chat", "worker-1")
        await stack.append([created("filler", tenant="globex")])
        with pytest.raises(AgentLedgerError) as info:
            for i in range(1000):
                await c.append(variable("filler", "x", PAD, tenant="globex", event_id=f"f{i}"))
        assert info.value.code == "ledger_full"
        assert (await _code(c.append(variable("chat", "y", 1)))).code == "ledger_full"
        await c.release_lease("acme", "chat", lease)
        assert (await _code(c.acquire_lease("acme", "chat", "worker-2"))).code == "ledger_full"
        reply = await c.forget("acme", {"kind": "subject", "subject": "s1"})
        done = await c.forget_wait("acme", reply.request_id, timeout_s=120)
        assert done.receipt is not None
        assert "memory" in {i.index for i in done.receipt.indexes}
    finally:
        await stack.stop()


def test_the_quota_settings_are_read_from_the_environment_and_checked() -> None:
    """Protects the operator's knobs: every quota has its variable, and a negative one is refused."""
    s = from_env({"AGENTLEDGER_TENANT_APPEND_EVENTS_PER_S": "250.5",
                  "AGENTLEDGER_TENANT_MAX_LEDGER_BYTES": "1000",
                  "AGENTLEDGER_TENANT_MAX_ARTIFACT_BYTES": "2000",
                  "AGENTLEDGER_TENANT_MAX_MEMORY_RECORDS": "3",
                  "AGENTLEDGER_LEDGER_RESERVE_BYTES": "4000"})
    assert (s.tenant_append_events_per_s, s.tenant_max_ledger_bytes, s.tenant_max_artifact_bytes,
            s.tenant_max_memory_records, s.ledger_reserve_bytes) == (250.5, 1000, 2000, 3, 4000)
    with pytest.raises(ContractError) as info:
        from_env({"AGENTLEDGER_TENANT_MAX_MEMORY_RECORDS": "-1"})
    assert info.value.path == "AGENTLEDGER_TENANT_MAX_MEMORY_RECORDS"


async def test_a_tenant_at_its_artifact_quota_is_refused_and_others_are_not(settings: Settings) -> None:
    """Protects the artifact store from one tenant: past its bytes a put of new content is
    refused `artifact_quota_exceeded`; content it already stored and other tenants still go in."""
    small = msgspec.structs.replace(settings, tenant_max_artifact_bytes=1500)
    writer = LedgerWriter(small)
    await writer.start()
    client = await connect(small)
    try:
        await client.put_artifact(b"a" * 1000, schema="text/plain", producer="p", tenant="acme")
        refused = await _code(client.put_artifact(b"b" * 1000, schema="text/plain", producer="p",
                                                  tenant="acme"))
        assert refused.code == "artifact_quota_exceeded" and not refused.retryable
        await client.put_artifact(b"a" * 1000, schema="text/plain", producer="p", tenant="acme")
        await client.put_artifact(b"b" * 1000, schema="text/plain", producer="p", tenant="globex")
    finally:
        await client.close()
        await writer.stop()


async def test_a_tenant_at_its_memory_quota_is_refused_whole(settings: Settings) -> None:
    """Protects the memory projection from one tenant: a proposal request that would take the
    tenant past its records is refused `memory_quota_exceeded` and stores nothing of it; another
    tenant still writes memory."""
    small = msgspec.structs.replace(settings, tenant_max_memory_records=2)
    stack = await Stack(small).start(checkpointer=False, memory=True)
    c = stack.c
    try:
        await c.memory_propose("acme", [proposal("m1", "The build uses Python 3.11", key="build"),
                                        proposal("m2", "Deploys go out on Tuesdays", key="deploy")])
        before = await stack.last_seq()
        refused = await _code(c.memory_propose("acme", [proposal("m3", "The linter is ruff",
                                                                 key="lint")]))
        assert refused.code == "memory_quota_exceeded" and refused.path == "$.proposals"
        assert await stack.last_seq() == before
        [d] = (await c.memory_propose("globex", [proposal("m3", "The linter is ruff", key="lint")])).decisions
        assert d.action == "write"
    finally:
        await stack.stop()


def _forget_requested(tenant: str) -> dict[str, object]:
    """A forget request's event as the tombstone-fanout appends it (an erasure)."""
    return {"kind": "forget_requested", "event_id": "fr1", "tenant": tenant, "task_id": "_forget",
            "producer": "tombstone-fanout", "occurred_at": "2026-12-01T10:00:00Z", "schema_version": 1,
            "payload": {"request_id": "r1", "selector": {"kind": "subject", "subject": "s1"},
                        "requested_by": "operator/test"}}


async def test_a_usage_poll_failing_on_an_outage_logs_one_line_and_a_bug_its_traceback(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Protects the operators' log pipeline: while JetStream is away every usage poll fails, so
    that is a warning naming the dependency, without a traceback; anything else is a bug and
    keeps its traceback."""
    quotas = Quotas(from_env({}))
    monkeypatch.setattr(quota_module, "POLL_S", 0.01)
    raised: list[BaseException] = [NatsTimeout(), ValueError("a bug")]

    async def flush() -> None:
        raise raised[0] if len(raised) == 1 else raised.pop(0)

    monkeypatch.setattr(quotas, "_flush", flush)
    with structlog.testing.capture_logs() as logs:
        task = asyncio.create_task(quotas._run())
        try:
            await assert_eventually(lambda: sum(e["event"] == "quotas.poll_failed" for e in logs) >= 2,
                                    timeout=30, message="the poll never failed twice")
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    outage, bug = [e for e in logs if e["event"] == "quotas.poll_failed"][:2]
    assert outage["log_level"] == "warning" and outage["dependency"] == "NATS", outage
    assert "exc_info" not in outage
    assert bug["log_level"] == "error" and bug["error"] == "ValueError" and "exc_info" in bug, bug
