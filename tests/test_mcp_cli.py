"""``agentledger mcp`` as a command: the core install without the ``mcp`` extra, and the start-up
refusals (no token table for HTTP, a token table that does not hold what it must)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agentledger.adapters.mcp import TokenIdentities, write_token_table
from agentledger.adapters.mcp.identity import token_digest
from agentledger.config import Settings
from agentledger.errors import ContractError

# The CLI with the SDK made unimportable, as on a core install without the extra.
WITHOUT_MCP = ("import sys; sys.modules['mcp'] = None; "
               "from agentledger.cli.main import main; main()")


def run(code: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          timeout=120, check=False)


def test_without_the_extra_every_other_command_starts_and_mcp_says_what_is_missing() -> None:
    """``agentledger --help`` works without ``mcp``; ``agentledger mcp`` exits 2 naming the extra."""
    assert run(WITHOUT_MCP, "--help").returncode == 0
    done = run(WITHOUT_MCP, "mcp", "--tenant", "acme")
    assert done.returncode == 2, done.stderr
    assert "extra_missing" in done.stderr and "agentledger[mcp]" in done.stderr
    assert done.stdout == ""


def test_http_needs_a_token_table() -> None:
    """A request without a bearer token is refused, so the server will not start without the table."""
    done = run("from agentledger.cli.main import main; main()", "mcp", "--http")
    assert done.returncode == 2
    assert "missing_field" in done.stderr and "--tokens" in done.stderr


def test_a_token_table_is_checked_before_the_server_starts(tmp_path: Path) -> None:
    """A digest that is not SHA-256 hex, a tenant that is not a token, a credentials file that is
    not there, an empty table: each a typed error naming the entry."""
    creds = tmp_path / "a.creds"
    creds.write_text("not read until the first call")
    settings = Settings(data_dir=tmp_path)
    table = tmp_path / "tokens.json"
    write_token_table(table, [("tok-7Qx2-first", "acme", creds)])
    assert table.stat().st_mode & 0o077 == 0
    assert "tok-7Qx2-first" not in table.read_text() and token_digest("tok-7Qx2-first") in table.read_text()
    TokenIdentities.load(settings, table)
    for body, code, path in [
        ('{"tokens": [{"sha256": "abc", "tenant": "acme", "creds": "a.creds"}]}', "invalid_value",
         "$.tokens[0].sha256"),
        (f'{{"tokens": [{{"sha256": "{"0" * 64}", "tenant": "ac me", "creds": "a.creds"}}]}}', "invalid_token",
         "$.tokens[0].tenant"),
        (f'{{"tokens": [{{"sha256": "{"0" * 64}", "tenant": "acme", "creds": "gone.creds"}}]}}', "not_found",
         "$.tokens[0].creds"),
        ('{"tokens": []}', "invalid_value", "$.tokens"),
        ('{"tokens": [{"sha256": 1}]}', "invalid_value", "--tokens"),
    ]:
        table.write_text(body)
        with pytest.raises(ContractError) as info:
            TokenIdentities.load(settings, table)
        assert (info.value.code, info.value.path) == (code, path), body


async def test_the_verifier_accepts_exactly_the_tokens_in_the_table(tmp_path: Path) -> None:
    """The SDK's ``TokenVerifier`` side: a listed token maps onto its entry, any other is None."""
    creds = tmp_path / "a.creds"
    creds.write_text("x")
    table = tmp_path / "tokens.json"
    write_token_table(table, [("tok-7Qx2-first", "acme", creds), ("tok-7Qx2-second", "globex", creds)])
    verifier = TokenIdentities.load(Settings(data_dir=tmp_path), table)
    one = await verifier.verify_token("tok-7Qx2-first")
    assert one is not None and one.client_id == token_digest("tok-7Qx2-first") and one.claims == {"tenant": "acme"}
    assert (await verifier.verify_token("tok-7Qx2-second")).claims == {"tenant": "globex"}  # type: ignore[union-attr]
    for other in ("", "tok-7Qx2-third", "tok-7Qx2-first ", token_digest("tok-7Qx2-first")):
        assert await verifier.verify_token(other) is None
