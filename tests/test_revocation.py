"""Revocation, tried with real credentials against the session's operator-mode NATS server.

An adversary who once held an agent's credentials keeps every file it was ever
given: revoking the agent must refuse all of them, and revoking a tenant must
stay in force when a tenant of the same name is added again. Each check opens
real connections with the credentials files ``agent add`` wrote; open ones must
be closed by the server, new ones refused.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import nkeys
import pytest
from nats.aio.client import Client as NATS

from agentledger.cli import main as cli
from agentledger.config import Settings
from agentledger.errors import AgentLedgerError
from agentledger.runtime.state import settings_env
from agentledger.security import auth
from agentledger.security.identity import REQUEST_INFO, TenantRegistry
from helpers import assert_eventually


class Connection:
    """One agent connection."""

    def __init__(self, nc: NATS) -> None:
        self.nc = nc

    @property
    def cut_off(self) -> bool:
        """Closed because the server said its credentials were revoked (no reconnect follows)."""
        return self.nc.is_closed and "revoked" in str(self.nc.last_error).lower()


@pytest.fixture
async def open_as(admin: Settings) -> AsyncIterator[object]:
    """Connect with a credentials file; every connection is closed after the test."""
    opened: list[Connection] = []

    async def open_as(creds: Path) -> Connection:
        conn = Connection(await auth.connect(msgspec.structs.replace(admin, nats_creds=creds),
                                             "agent"))
        opened.append(conn)
        return conn

    yield open_as
    for conn in opened:
        await conn.nc.close()


async def _refused(settings: Settings, creds: Path) -> str:
    """The error code a fresh connection with ``creds`` gets."""
    with pytest.raises(AgentLedgerError) as info:
        nc = await auth.connect(msgspec.structs.replace(settings, nats_creds=creds), "agent")
        await nc.close()
    return info.value.code


async def test_revoking_an_agent_revokes_every_credential_it_was_ever_issued(
        admin: Settings, open_as: object, tmp_path: Path) -> None:
    """Protects agent revocation: a credentials file from an earlier `agent add` of the same
    agent is refused too (only the latest one was), and open connections of both are closed."""
    await auth.tenant_add(admin, "acme")
    first = await auth.agent_add(admin, "acme", "agent-7", tmp_path / "first.creds")
    second = await auth.agent_add(admin, "acme", "agent-7", tmp_path / "second.creds")
    other = await auth.agent_add(admin, "acme", "agent-8")
    conns = [await open_as(first), await open_as(second)]  # type: ignore[operator]
    bystander = await open_as(other)  # type: ignore[operator]

    revoked = await auth.agent_revoke(admin, "acme", "agent-7")

    await assert_eventually(lambda: all(c.cut_off for c in conns), timeout=10,
                            message=f"{[c.nc.last_error for c in conns]}")
    assert [await _refused(admin, creds) for creds in (first, second)] == ["unauthenticated"] * 2
    assert revoked.complete
    assert set(revoked.keys) == {auth.creds_user(first), auth.creds_user(second)}
    # Another agent of the tenant keeps its connection, and the agent itself can be enrolled again.
    assert bystander.nc.is_connected
    again = await auth.agent_add(admin, "acme", "agent-7", tmp_path / "again.creds")
    assert (await open_as(again)).nc.is_connected  # type: ignore[operator]


async def test_an_agent_recorded_before_keys_were_kept_loses_its_connected_credentials(
        admin: Settings, open_as: object, tmp_path: Path) -> None:
    """Protects revocation of credentials issued before every key was recorded: an earlier
    credentials file of the agent that is connected during the revoke is found on the server
    (by the agent's name in its user JWT), revoked and disconnected, and the operator is told
    that unconnected earlier ones cannot be found."""
    await auth.tenant_add(admin, "acme")
    earlier = await auth.agent_add(admin, "acme", "agent-7", tmp_path / "earlier.creds")
    latest = await auth.agent_add(admin, "acme", "agent-7", tmp_path / "latest.creds")
    # The record as an older agentledger wrote it: the latest key only.
    store = auth.auth_store(admin)
    record = store.tenant(admin.prefix, "acme")
    agent = record.agents["agent-7"]
    record.agents["agent-7"] = auth.AgentRecord(user=agent.user, issued_at=agent.issued_at)
    store.save_tenant(record)
    conn = await open_as(earlier)  # type: ignore[operator]

    revoked = await auth.agent_revoke(admin, "acme", "agent-7")

    await assert_eventually(lambda: conn.cut_off, timeout=10, message=f"{conn.nc.last_error}")
    assert await _refused(admin, earlier) == "unauthenticated"
    assert await _refused(admin, latest) == "unauthenticated"
    assert not revoked.complete
    assert set(revoked.keys) == {auth.creds_user(earlier), auth.creds_user(latest)}


async def test_a_revoked_tenant_added_again_never_revives_its_old_credentials(
        admin: Settings, open_as: object, tmp_path: Path) -> None:
    """Protects tenant revocation: `tenant add` after `tenant revoke` creates a new account with
    new credentials; every credential of the old account (an earlier file of an agent too) stays
    refused by the NATS server, also after the accounts are pushed again on a start, and by the
    services' tenant registry."""
    await auth.tenant_add(admin, "globex")
    old_creds = [await auth.agent_add(admin, "globex", "agent-g", tmp_path / f"old{i}.creds")
                 for i in range(2)]
    conns = [await open_as(creds) for creds in old_creds]  # type: ignore[operator]
    old = await auth.tenant_revoke(admin, "globex")
    await assert_eventually(lambda: all(c.cut_off for c in conns), timeout=10,
                            message=f"{[c.nc.last_error for c in conns]}")

    new = await auth.tenant_add(admin, "globex")

    assert [await _refused(admin, creds) for creds in old_creds] == ["unauthenticated"] * 2
    await auth.sync_tenants(admin)
    assert [await _refused(admin, creds) for creds in old_creds] == ["unauthenticated"] * 2
    assert new.account != old.account and new.retired_accounts == [old.account]
    assert new.agents == {}
    new_creds = await auth.agent_add(admin, "globex", "agent-g", tmp_path / "new.creds")
    assert (await open_as(new_creds)).nc.is_connected  # type: ignore[operator]
    # The services map accounts to tenants through the registry: the old one stays revoked.
    nc = await auth.connect(admin, auth.OPERATOR_ROLE)
    registry = TenantRegistry(nc, admin.prefix)
    await registry.start()
    try:
        def header(account: str) -> dict[str, str]:
            return {REQUEST_INFO: json.dumps({"acc": account, "name_tag": "agent-g"})}

        with pytest.raises(AgentLedgerError) as info:
            await registry.caller(header(old.account))
        assert info.value.code == "tenant_revoked"
        caller = await registry.caller(header(new.account))
        assert (caller.tenant, caller.agent) == ("globex", "agent-g")
    finally:
        await registry.stop()
        await nc.close()


async def test_a_retired_account_refuses_credentials_signed_after_its_revocation(
        admin: Settings, tmp_path: Path) -> None:
    """Protects a retired account against a stolen copy of its seed: credentials signed after the
    revocation (which the `*` revocation alone would let in) are refused by its zero
    connection limit."""
    await auth.tenant_add(admin, "globex")
    old = await auth.tenant_revoke(admin, "globex")
    await auth.tenant_add(admin, "globex")
    seed = bytes(nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_USER)).decode()
    later = int(time.time()) + 60  # issued after every revocation the account carries
    jwt = auth.encode_jwt({"sub": auth.public_key(seed), "name": "agent-g", "iat": later, "nats": {
        "type": "user", "version": 2, "subs": -1, "data": -1, "payload": -1}}, old.account_seed)
    forged = tmp_path / "forged.creds"
    forged.write_text(auth.creds_text(jwt, seed))
    assert await _refused(admin, forged) == "too_many_connections"


def test_the_cli_says_when_earlier_credentials_cannot_be_found(
        admin: Settings, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Protects the operator from a false sense of safety: `agentledger agent revoke` of an agent
    whose earlier keys were never recorded says that unconnected earlier files stay valid and how
    to refuse them all, and `tenant list` marks the agent revoked."""
    for name, value in settings_env(admin).items():
        monkeypatch.setenv(name, value)

    def run(*argv: str) -> None:
        with pytest.raises(SystemExit) as done:
            cli.main(list(argv))
        assert done.value.code == 0

    run("tenant", "add", "acme")
    run("agent", "add", "acme", "bot")
    store = auth.auth_store(admin)
    record = store.tenant(admin.prefix, "acme")
    agent = record.agents["bot"]
    record.agents["bot"] = auth.AgentRecord(user=agent.user, issued_at=agent.issued_at)
    store.save_tenant(record)
    capsys.readouterr()
    run("agent", "revoke", "acme", "bot")
    out = capsys.readouterr()
    assert "revoked: 1 credential key" in out.out
    assert "tenant revoke acme && agentledger tenant add acme" in out.err
    run("tenant", "list")
    assert "bot (revoked)" in capsys.readouterr().out
