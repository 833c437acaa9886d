"""Isolation, tried as a hostile client would: real NATS users of two tenants and the operator.

Every test runs the writer, the projector and the checkpointer in process against
the session's operator-mode NATS server. Tenants ``acme`` and ``globex`` are
added while the services run (tenants come and go at runtime); each agent
connects with the credentials file ``agentledger agent add`` writes. What a
tenant may not do must fail with a clear error and leave nothing behind; what
it may do must keep working.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import msgspec
import nats
import nats.errors
import pytest

from agentledger.client import Client, connect
from agentledger.config import Settings
from agentledger.errors import AgentLedgerError
from agentledger.security import auth
from agentledger.security.identity import tenants_bucket
from agentledger.services.projector.service import LEADER_LOCK, Projector
from agentledger.stores.ledger import ledger_subject
from ckpt_support import Stack, chain, created, event, plan
from helpers import assert_eventually


@dataclass
class Agent:
    """One agent's connection: its client, and the asynchronous errors the server sent it."""

    tenant: str
    name: str
    creds: Path
    client: Client
    errors: list[str] = field(default_factory=list)

    @property
    def nc(self) -> nats.NATS:
        return self.client.nc

    async def denied(self, needle: str) -> None:
        """Wait until the server reported a permissions violation mentioning ``needle``."""
        await assert_eventually(
            lambda: any("permissions violation" in e.lower() and needle.lower() in e.lower()
                        for e in self.errors),
            timeout=5, message=f"no permissions violation for {needle!r}: {self.errors}")


@dataclass
class World:
    settings: Settings
    stack: Stack
    acme: Agent
    acme2: Agent
    globex: Agent


async def _agent(settings: Settings, tenant: str, name: str) -> Agent:
    creds = await auth.agent_add(settings, tenant, name)
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    client = await connect(msgspec.structs.replace(settings, nats_creds=creds), timeout=5,
                           error_cb=on_error)
    return Agent(tenant, name, creds, client, errors)


@pytest.fixture
async def world(settings: Settings) -> AsyncIterator[World]:
    if settings.auth_dir is None:
        pytest.skip("the NATS server runs without accounts (AGENTLEDGER_TEST_NATS_URL without "
                    "AGENTLEDGER_TEST_NATS_AUTH_DIR)")
    stack = await Stack(settings).start()
    for tenant in ("acme", "globex"):
        await auth.tenant_add(settings, tenant)
    agents = [await _agent(settings, "acme", "agent-a"), await _agent(settings, "acme", "agent-a2"),
              await _agent(settings, "globex", "agent-g")]
    try:
        yield World(settings, stack, *agents)
    finally:
        for agent in agents:
            await agent.client.close()
        await stack.stop()


def _task(tenant: str, task: str, producer: str) -> list[dict[str, Any]]:
    return [created(task, tenant=tenant, producer=producer),
            plan(task, chain(2), tenant=tenant, producer=producer)]


async def _code(coro: Any) -> str:
    with pytest.raises(AgentLedgerError) as info:
        await coro
    return info.value.code


# --- what a tenant may do ------------------------------------------------------------------------

async def test_an_agent_works_on_its_own_tenant(world: World) -> None:
    """Protects the happy path: identity checks must not get in the way of the tenant's own work."""
    results = await world.acme.client.append_batch(_task("acme", "t1", "agent-a"))
    assert [r.duplicate for r in results] == [False, False]
    await world.stack.projected()
    wm = await world.acme.client.working_memory("acme", "t1")
    assert wm.state["next_ready"] == ["S1"]
    saved = await world.acme.client.save_checkpoint("acme", "t1")
    assert saved.ok
    resumed = await world.acme.client.resume("acme", "t1", "agent-a")
    assert resumed.status == "resumable"
    assert resumed.lease is not None and resumed.lease.holder == "agent-a"


async def test_a_tenant_receives_its_own_change_notifications_only(world: World) -> None:
    """Protects notification isolation: another tenant's task changes never reach an agent."""
    seen: list[str] = []

    async def on_msg(msg: Any) -> None:
        seen.append(msg.subject)

    p = world.settings.prefix
    await world.acme.nc.subscribe(f"{p}.wm.changed.acme.>", cb=on_msg)
    await world.acme.nc.flush()
    await world.globex.client.append_batch(_task("globex", "g1", "agent-g"))
    await world.acme.client.append_batch(_task("acme", "a1", "agent-a"))
    await assert_eventually(lambda: f"{p}.wm.changed.acme.a1" in seen)
    await world.stack.projected()
    assert all(".acme." in s for s in seen), seen


async def test_an_agent_learns_of_its_rejected_events_without_polling(world: World) -> None:
    """Protects feedback after the ack: a rejection the reducer records reaches the tenant on
    `<prefix>.rejected.<tenant>.<task>`, and never another tenant."""
    p = world.settings.prefix
    mine: list[dict[str, Any]] = []
    theirs: list[str] = []

    async def on_mine(msg: Any) -> None:
        mine.append(json.loads(msg.data))

    async def on_theirs(msg: Any) -> None:
        theirs.append(msg.subject)

    await world.acme.nc.subscribe(f"{p}.rejected.acme.>", cb=on_mine)
    await world.globex.nc.subscribe(f"{p}.rejected.globex.>", cb=on_theirs)
    await world.acme.nc.flush()
    await world.globex.nc.flush()
    await world.acme.client.append_batch(_task("acme", "a1", "agent-a"))
    late = event("step_succeeded", {"plan_version": 1, "step_id": "S2"}, "a1", tenant="acme",
                 producer="agent-a", event_id="too-early")
    acked = await world.acme.client.append(late)  # stored: S2 never started
    assert not acked.duplicate
    await assert_eventually(lambda: mine, timeout=10)
    assert mine[0] | {"reason": ""} == {"tenant": "acme", "task_id": "a1", "seq": acked.seq,
                                        "event_id": "too-early", "kind": "step_succeeded",
                                        "code": "not_started", "reason": ""}
    await world.stack.projected()
    assert theirs == []


async def test_read_your_writes_and_no_false_not_found(world: World) -> None:
    """Protects agents reading right after an append: `min_seq` waits for the projection, and a
    task that is in the ledger is never `not_found` just because the projector is behind."""
    # The projection falls behind on purpose: the leader stops, and while another connection holds
    # the leadership lock a new projector only serves reads (a standby).
    await world.stack.projector.stop()
    lock = await asyncpg.connect(world.settings.database_url)
    assert await lock.fetchval("SELECT pg_try_advisory_lock($1, 0)", LEADER_LOCK)
    world.stack.projector = Projector(world.settings)
    await world.stack.projector.start()
    results = await world.acme.client.append_batch(_task("acme", "rw", "agent-a"))
    assert await _code(world.acme.client.working_memory("acme", "rw")) == "unavailable"
    assert await _code(world.acme.client.working_memory("acme", "never")) == "not_found"
    assert await _code(world.acme.client.working_memory("acme", "rw", min_seq=results[-1].seq,
                                                        wait_ms=200)) == "unavailable"
    await lock.close()  # the standby takes over and catches up
    wm = await world.acme.client.working_memory("acme", "rw", min_seq=results[-1].seq,
                                                wait_ms=30_000)
    assert wm.seq >= results[-1].seq and wm.state["next_ready"] == ["S1"]


# --- what it may not do: through the services ----------------------------------------------------

async def test_another_tenants_data_is_refused_at_every_endpoint(world: World) -> None:
    """Protects tenant isolation: the body's tenant is checked against the authenticated account."""
    await world.globex.client.append_batch(_task("globex", "g1", "agent-g"))
    await world.stack.projected()
    acme = world.acme.client
    assert await _code(acme.append(event("task_cancelled", {"reason": "x"}, "g1", tenant="globex",
                                         producer="agent-a"))) == "tenant_mismatch"
    assert await _code(acme.working_memory("globex", "g1")) == "tenant_mismatch"
    assert await _code(acme.working_memory("globex", "g1", reveal_personal=True)) == "tenant_mismatch"
    assert await _code(acme.save_checkpoint("globex", "g1")) == "tenant_mismatch"
    assert await _code(acme.resume("globex", "g1", "agent-a")) == "tenant_mismatch"
    assert await _code(acme.acquire_lease("globex", "g1", "agent-a")) == "tenant_mismatch"
    # globex's own view is untouched: nothing of acme's attempts landed.
    wm = await world.globex.client.working_memory("globex", "g1")
    assert wm.state["status"] == "open"


async def test_artifacts_are_private_to_their_tenant(world: World) -> None:
    """Protects artifact confidentiality: another tenant cannot read, stat or confirm one exists."""
    ref = await world.globex.client.put_artifact(b"globex secret report", schema="text/plain",
                                                 producer="agent-g")
    assert await world.globex.client.get_artifact(ref.uri) == b"globex secret report"
    # Answered exactly as for content that was never stored: existence is not confirmed.
    never = ref.uri.replace(ref.blake3, "0" * 64)
    missing = await _code(world.globex.client.stat_artifact(never))
    assert await _code(world.acme.client.get_artifact(ref.uri)) == missing
    assert await _code(world.acme.client.stat_artifact(ref.uri)) == missing
    # The same content stored by acme is acme's own artifact, not a pointer to globex's.
    mine = await world.acme.client.put_artifact(b"globex secret report", schema="text/plain",
                                                producer="agent-a")
    assert mine.uri != ref.uri
    assert await world.acme.client.get_artifact(mine.uri) == b"globex secret report"


async def test_an_agent_cannot_write_as_another_agent(world: World) -> None:
    """Protects attribution: an event's producer is the authenticated agent, never a claim."""
    code = await _code(world.acme.client.append_batch(_task("acme", "t1", "agent-a2")))
    assert code == "producer_mismatch"
    code = await _code(world.acme.client.resume("acme", "t1", "agent-a2"))
    assert code == "holder_mismatch"


async def test_a_forged_identity_header_is_replaced_by_the_server(world: World) -> None:
    """Protects the identity channel: a client cannot claim to be the operator or another account."""
    svc = auth.public_key(auth.AuthStore(world.settings.auth_root).seed("SVC"))
    forged = json.dumps({"acc": svc, "name_tag": "operator"})
    body = msgspec.json.encode({"events": [created("g9", tenant="globex", producer="agent-a")]})
    msg = await world.acme.nc.request(f"{world.settings.prefix}.writer.append", body, timeout=5,
                                      headers={"Nats-Request-Info": forged})
    reply = json.loads(msg.data)
    assert reply["ok"] is False and reply["error"]["code"] == "tenant_mismatch"


# --- what it may not do: NATS itself -------------------------------------------------------------

async def test_a_tenant_has_no_jetstream(world: World) -> None:
    """Protects the ledger, the buckets and the object store from direct access or deletion."""
    js = world.acme.nc.jetstream(timeout=1)
    s = world.settings
    attempts = [js.stream_info(s.stream), js.delete_stream(s.stream), js.key_value(s.keys_bucket),
                js.key_value(s.leases_bucket), js.key_value(tenants_bucket(s.prefix)),
                js.object_store(f"{s.prefix.upper()}_ARTIFACTS"),
                js.delete_consumer(s.stream, "projector"),
                js.add_consumer(s.stream, durable_name="spy"),
                js.delete_key_value(s.keys_bucket), js.delete_key_value(tenants_bucket(s.prefix))]
    for attempt in attempts:
        with pytest.raises((nats.errors.Error, asyncio.TimeoutError)):
            await attempt
    await world.acme.denied("$JS.API")
    # Everything the services own is still there.
    ops = world.stack.c.nc.jetstream()
    assert (await ops.stream_info(s.stream)).config.name == s.stream
    assert "projector" in [c.name for c in await ops.consumers_info(s.stream)]


async def test_a_tenant_cannot_listen_to_everything_or_to_others(world: World) -> None:
    """Protects confidentiality of the bus: no `>`, no ledger subjects, no other inboxes."""
    p = world.settings.prefix
    got: list[str] = []

    async def on_msg(msg: Any) -> None:
        got.append(msg.subject)

    for subject in (">", f"{p}.ledger.>", f"{p}.wm.changed.globex.>", "_INBOX.>",
                    f"{auth.inbox_prefix(auth.creds_user(world.acme.creds))}.>"):
        await world.acme2.nc.subscribe(subject, cb=on_msg)
        await world.acme2.denied(subject)
    await world.globex.client.append_batch(_task("globex", "g1", "agent-g"))
    await world.acme.client.append_batch(_task("acme", "a1", "agent-a"))
    await world.stack.projected()
    assert got == []


async def test_nobody_but_the_services_answers_a_service_subject(world: World) -> None:
    """Protects the request path: an impersonator cannot take appends away from the writer."""
    p = world.settings.prefix
    taken: list[bytes] = []

    async def steal(msg: Any) -> None:
        taken.append(msg.data)
        await msg.respond(b'{"ok": true, "results": []}')

    await world.acme2.nc.subscribe(f"{p}.writer.append", queue="q", cb=steal)
    await world.acme2.denied(f"{p}.writer.append")
    results = [await world.acme.client.append(created(f"t{i}", tenant="acme", producer="agent-a"))
               for i in range(20)]
    assert taken == []
    assert len({r.seq for r in results}) == 20


async def test_an_agent_cannot_publish_on_ledger_subjects(world: World) -> None:
    """Protects the ledger's single writer: raw publishes from a tenant never land."""
    s = world.settings
    before = (await world.stack.c.nc.jetstream().stream_info(s.stream)).state.messages
    body = msgspec.json.encode(created("raw", tenant="acme", producer="agent-a"))
    await world.acme.nc.publish(ledger_subject(s.prefix, "acme", "raw"), body)
    await world.acme.denied(f"{s.prefix}.ledger")
    assert (await world.stack.c.nc.jetstream().stream_info(s.stream)).state.messages == before


async def test_only_the_writers_service_user_may_publish_to_the_ledger(world: World) -> None:
    """Protects the ledger from the other services: projector and checkpointer read, never write."""
    s = world.settings
    errors: list[str] = []

    async def on_error(exc: Exception) -> None:
        errors.append(str(exc))

    for role in ("projector", "checkpointer", auth.OPERATOR_ROLE):
        nc = await auth.connect(s, role, error_cb=on_error)
        try:
            with pytest.raises((nats.errors.Error, asyncio.TimeoutError)):
                await nc.jetstream(timeout=1).publish(ledger_subject(s.prefix, "acme", "x"), b"{}")
        finally:
            await nc.close()
    assert sum("permissions violation" in e.lower() for e in errors) >= 3, errors


async def test_anonymous_connections_are_refused(world: World) -> None:
    """Protects the server: no identity, no connection."""
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await nats.connect(world.settings.nats_url, allow_reconnect=False, connect_timeout=2,
                           max_reconnect_attempts=0, error_cb=_ignore)


async def _ignore(exc: Exception) -> None:
    return None


# --- runtime administration ---------------------------------------------------------------------

async def test_a_revoked_tenant_is_cut_off_at_once(world: World) -> None:
    """Protects revocation: a revoked tenant's agents are disconnected and cannot come back."""
    await world.globex.client.append_batch(_task("globex", "g1", "agent-g"))
    await auth.tenant_revoke(world.settings, "globex")
    await assert_eventually(lambda: not world.globex.nc.is_connected, timeout=10)
    with pytest.raises(nats.errors.Error):
        await nats.connect(world.settings.nats_url, user_credentials=str(world.globex.creds),
                           allow_reconnect=False, connect_timeout=2, error_cb=_ignore)
    listed = {r.tenant: r.status for r in auth.auth_store(world.settings).tenants(world.settings.prefix)}
    assert listed == {"acme": "active", "globex": "revoked"}
    # acme is unaffected.
    await world.acme.client.append_batch(_task("acme", "a1", "agent-a"))


async def test_a_revoked_agent_is_disconnected_and_its_tenant_keeps_working(world: World) -> None:
    """Protects per-agent revocation: one leaked credentials file is revoked without a restart."""
    await auth.agent_revoke(world.settings, "acme", "agent-a2")
    await assert_eventually(lambda: not world.acme2.nc.is_connected, timeout=10)
    with pytest.raises(nats.errors.Error):
        await nats.connect(world.settings.nats_url, user_credentials=str(world.acme2.creds),
                           allow_reconnect=False, connect_timeout=2, error_cb=_ignore)
    # The client says so at once, in one typed error, instead of retrying refused credentials.
    revoked = msgspec.structs.replace(world.settings, nats_creds=world.acme2.creds)
    assert await _code(connect(revoked)) == "unauthenticated"
    await world.acme.client.append_batch(_task("acme", "a1", "agent-a"))


async def test_credentials_files_are_private(world: World) -> None:
    """Protects secrets at rest: every key and credentials file is readable by its owner only."""
    root = world.settings.auth_root
    files = [p for p in root.rglob("*") if p.is_file()]
    assert files and all(p.stat().st_mode & 0o077 == 0 for p in files), \
        [f"{p}: {oct(p.stat().st_mode)}" for p in files if p.stat().st_mode & 0o077]
    assert world.acme.creds.stat().st_mode & 0o777 == 0o600
