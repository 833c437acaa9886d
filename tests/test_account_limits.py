"""Per-tenant NATS quotas, tried against the session's operator-mode NATS server.

A tenant's agents must not be able to exhaust the server for everyone: its
account JWT limits connections (across the cluster), subscriptions per
connection and the size of a published message. Each test connects with real
agent credentials and checks that the server enforces the limit on that tenant,
with an error that says so, while another tenant is unaffected.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import msgspec
import pytest
from nats.aio.client import Client as NATS

from agentledger.cli import main as cli
from agentledger.config import Settings
from agentledger.errors import AgentLedgerError
from agentledger.runtime.state import settings_env
from agentledger.security import auth
from helpers import assert_eventually

Open = Callable[[Path], Awaitable[NATS]]


@pytest.fixture
async def open_as(admin: Settings) -> AsyncIterator[Open]:
    """Connect with a credentials file; every connection is closed after the test."""
    opened: list[NATS] = []

    async def open_as(creds: Path) -> NATS:
        nc = await auth.connect(msgspec.structs.replace(admin, nats_creds=creds), "agent")
        opened.append(nc)
        return nc

    yield open_as
    for nc in opened:
        await nc.close()


async def _refusal(open_as: Open, creds: Path) -> AgentLedgerError:
    with pytest.raises(AgentLedgerError) as info:
        await open_as(creds)
    return info.value


async def test_a_tenant_at_its_connection_limit_is_refused_while_another_connects(
        admin: Settings, open_as: Open) -> None:
    """Protects the server from one tenant's connection flood: past its limit a tenant gets
    `too_many_connections` at once (not minutes of retries), another tenant still connects, and
    a connection closed makes room again."""
    await auth.tenant_add(admin, "acme", max_connections=2)
    await auth.tenant_add(admin, "globex", max_connections=2)
    acme = await auth.agent_add(admin, "acme", "agent-a")
    globex = await auth.agent_add(admin, "globex", "agent-g")
    first, _second = await open_as(acme), await open_as(acme)

    refused = await _refusal(open_as, acme)

    assert refused.code == "too_many_connections"
    assert "--max-connections" in refused.message
    assert (await open_as(globex)).is_connected
    await first.close()
    await assert_eventually(lambda: _connects(open_as, acme), timeout=10)


async def _connects(open_as: Open, creds: Path) -> bool:
    try:
        return (await open_as(creds)).is_connected
    except AgentLedgerError as exc:
        assert exc.code == "too_many_connections"
        return False


async def test_a_changed_setting_reaches_existing_tenants_on_sync(
        admin: Settings, open_as: Open) -> None:
    """Protects limits for tenants added before them: `sync_tenants` (run on every start) pushes
    every tenant account with the current settings, and the server then closes connections
    beyond the new limit and refuses new ones."""
    await auth.tenant_add(admin, "acme")
    creds = await auth.agent_add(admin, "acme", "agent-a")
    conns = [await open_as(creds) for _ in range(3)]
    lowered = msgspec.structs.replace(admin, tenant_max_connections=1)

    await auth.sync_tenants(lowered)

    await assert_eventually(lambda: sum(nc.is_connected for nc in conns) == 1, timeout=10)
    assert (await _refusal(open_as, creds)).code == "too_many_connections"


async def test_a_limit_set_for_one_tenant_is_kept_until_given_again(admin: Settings) -> None:
    """Protects the operator's per-tenant limits: a later `tenant add` without them (or a start)
    keeps them, and only the limits not set follow the settings."""
    await auth.tenant_add(admin, "acme", max_connections=5, max_payload=-1)
    record = await auth.tenant_add(admin, "acme")
    limits = auth.TenantLimits.of(msgspec.structs.replace(admin, tenant_max_subscriptions=7), record)
    assert limits == auth.TenantLimits(connections=5, subscriptions=7, payload=-1)
    with pytest.raises(AgentLedgerError) as info:
        await auth.tenant_add(admin, "acme", max_connections=0)
    assert info.value.code == "invalid_value"


async def test_subscriptions_per_connection_are_limited(admin: Settings, open_as: Open) -> None:
    """Protects the server's interest graph: a connection of a tenant cannot subscribe beyond its
    tenant's limit; the server refuses with "maximum subscriptions exceeded"."""
    await auth.tenant_add(admin, "acme", max_subscriptions=3)
    creds = await auth.agent_add(admin, "acme", "agent-a")
    nc = await open_as(creds)
    inbox = auth.inbox_prefix(auth.creds_user(creds))
    for i in range(4):
        await nc.subscribe(f"{inbox}.s{i}")
    await assert_eventually(
        lambda: "maximum subscriptions exceeded" in str(nc.last_error).lower(), timeout=10,
        message=str(nc.last_error))


async def test_a_message_above_the_payload_limit_is_refused(admin: Settings, open_as: Open) -> None:
    """Protects the services from oversized requests: a tenant's message above its payload limit
    is refused by the server (which closes that connection), one at the limit passes."""
    await auth.tenant_add(admin, "acme", max_payload=4096)
    creds = await auth.agent_add(admin, "acme", "agent-a")
    nc = await open_as(creds)
    subject = f"{admin.prefix}.writer.append"
    await nc.publish(subject, b"x" * 4096)
    await nc.flush()
    await nc.publish(subject, b"x" * 4097)
    await assert_eventually(
        lambda: nc.is_closed and "maximum payload violation" in str(nc.last_error).lower(),
        timeout=10, message=str(nc.last_error))


def test_the_cli_sets_a_tenants_limits_and_lists_them(
        admin: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Protects the operator's control of quotas: `agentledger tenant add --max-connections N`
    (and --max-subscriptions, --max-payload) sets a tenant's limits, `tenant list` shows the ones
    in force, and an invalid one is refused with the variable's rule."""
    for name, value in settings_env(admin).items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AGENTLEDGER_TENANT_MAX_SUBSCRIPTIONS", "50")

    def run(*argv: str) -> int:
        with pytest.raises(SystemExit) as done:
            cli.main(list(argv))
        return int(done.value.code or 0)

    assert run("tenant", "add", "acme", "--max-connections", "3", "--max-payload", "65536") == 0
    assert run("tenant", "list") == 0
    assert "limits: 3 connections, 50 subscriptions, 65536 bytes" in capsys.readouterr().out
    assert run("tenant", "add", "acme", "--max-subscriptions", "0") == 2
    assert "max_subscriptions 0 must be at least 1, or -1" in capsys.readouterr().err
