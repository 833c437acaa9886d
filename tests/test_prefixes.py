"""Prefixes name streams and buckets: two deployments must never share or rewrite one."""

from __future__ import annotations

import msgspec
import pytest

from agentledger.config import Settings, from_env
from agentledger.errors import AgentLedgerError, ContractError
from agentledger.security import auth
from agentledger.stores.ledger import ensure_stream


@pytest.mark.parametrize("prefix", ["agent-ledger", "agent_ledger", "AgentLedger", "a.b", "", "9x",
                                    "a" * 33, "a>", "a b"])
def test_prefixes_that_could_collide_or_break_subjects_are_refused(prefix: str) -> None:
    """Protects injectivity: upper-casing a prefix must never map two of them to one stream."""
    with pytest.raises(ContractError) as info:
        Settings(prefix=prefix)
    assert info.value.code == "invalid_config" and info.value.path == "AGENTLEDGER_PREFIX"
    if prefix:  # an empty variable means "unset": the default prefix
        with pytest.raises(ContractError):
            from_env({"AGENTLEDGER_PREFIX": prefix})


def test_plain_prefixes_are_accepted() -> None:
    assert Settings(prefix="agentledger2").stream == "AGENTLEDGER2_LEDGER"


async def test_an_existing_streams_subjects_are_never_rewritten(settings: Settings) -> None:
    """Protects a live ledger: a stream of the same name with other subjects is left alone."""
    nc = await auth.connect(settings, auth.WRITER)
    try:
        js = nc.jetstream()
        await js.add_stream(name=settings.stream, subjects=[f"{settings.prefix}x.ledger.>"])
        with pytest.raises(AgentLedgerError, match="exists with subjects"):
            await ensure_stream(settings)
        info = await js.stream_info(settings.stream)
        assert info.config.subjects == [f"{settings.prefix}x.ledger.>"]
        await js.delete_stream(settings.stream)
        await ensure_stream(settings)
        await ensure_stream(msgspec.structs.replace(settings, dedupe_window_s=60))  # same subjects
        assert (await js.stream_info(settings.stream)).config.duplicate_window == 60
    finally:
        await nc.close()
