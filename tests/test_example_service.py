"""The example of docs/adding-a-service.md, built and run: real NATS, real PostgreSQL, the writer
and the projector in process, the example in process and as its own OS process.

The example's subject is not one the services' account exports to tenants (a test subject has no
place in the production export list), so a tenant agent's request is sent here with the
``Nats-Request-Info`` header the server stamps on a request crossing a service import, naming an
account the operator registered with ``tenant add``: the same header the shell reads for every
service.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest

from agentledger.config import Settings
from agentledger.security import auth
from agentledger.security.identity import REQUEST_INFO
from ckpt_support import Stack, created, end_process, service_env, variable
from example_service import StatsReply, TaskStats
from helpers import assert_eventually

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "adding-a-service.md"
EXAMPLE = Path(__file__).with_name("example_service.py")

_reply = msgspec.json.Decoder(StatsReply)


def as_agent(account: str, agent: str) -> dict[str, str]:
    """The identity header the server stamps on a request of ``agent`` in ``account``."""
    return {REQUEST_INFO: json.dumps({"acc": account, "user": "U" + agent.upper(), "name_tag": agent})}


@pytest.fixture
async def stack(admin: Settings) -> AsyncIterator[Stack]:
    """The writer and the projector, with tasks of two tenants projected."""
    s = await Stack(admin).start(checkpointer=False)
    try:
        await s.append([created("t1"), variable("t1", "x", 1)])
        await s.append([created("t2")])
        await s.append([created("g1", tenant="globex")])
        await s.projected()
        yield s
    finally:
        await s.stop()


async def ask(stack: Stack, body: bytes, headers: dict[str, str] | None = None) -> StatsReply:
    msg = await stack.c.nc.request(f"{stack.settings.prefix}.stats.tasks", body, timeout=10, headers=headers)
    return _reply.decode(msg.data)


def test_the_page_shows_the_example_as_it_is() -> None:
    """Protects the how-to from drifting: its Python blocks, in order, are the example file (blank
    lines between blocks aside), so the page shows the code the next test runs."""
    blocks = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.S)

    def squeezed(text: str) -> str:
        return re.sub(r"\n{3,}", "\n\n", text.strip())

    assert squeezed("\n\n".join(blocks)) == squeezed(EXAMPLE.read_text())


async def test_the_example_answers_its_callers_and_refuses_other_tenants(stack: Stack) -> None:
    """Protects the walk-through's promises: the declared endpoint answers the operator about any
    tenant and a tenant agent about its own tenant (named as the connection proves it); another
    tenant, an unknown account and a body that does not decode get typed errors."""
    acme = await auth.tenant_add(stack.settings, "acme")
    service = TaskStats(stack.settings)
    await service.start()
    try:
        got = await ask(stack, b'{"tenant": "acme"}', as_agent(acme.account, "bot"))
        assert (got.ok, got.asked_by, got.tasks) == (True, "acme/bot", 2)
        assert got.last_seq == await stack.last_seq() - 1  # globex's task came last
        got = await ask(stack, b'{"tenant": "globex"}')
        assert (got.ok, got.asked_by, got.tasks) == (True, "operator", 1)

        refused = await ask(stack, b'{"tenant": "globex"}', as_agent(acme.account, "bot"))
        assert refused.error is not None
        assert (refused.ok, refused.error.code, refused.error.path) == (False, "tenant_mismatch", "$.tenant")
        unknown = await ask(stack, b'{"tenant": "acme"}', as_agent("A" + "B" * 55, "bot"))
        assert unknown.error is not None and unknown.error.code == "unknown_tenant"
        bad = await ask(stack, b'{"tenant": "acme", "extra": 1}')
        assert bad.error is not None and (bad.error.code, bad.error.retryable) == ("unknown_field", False)
    finally:
        await service.stop()


async def test_the_example_runs_as_a_process_and_drains_on_sigterm(stack: Stack, tmp_path: Path) -> None:
    """Protects the process side of the shape for a new service: ready file once it answers,
    and a SIGTERM that ends it cleanly (exit 0) after the request it was answering."""
    ready = tmp_path / "run" / "task-stats.ready"
    env = {**service_env(stack.settings), "AGENTLEDGER_READY_FILE": str(ready)}
    proc = await asyncio.create_subprocess_exec(sys.executable, str(EXAMPLE), env=env)
    try:
        await assert_eventually(ready.exists, timeout=60, message="the example never got ready")
        got = await ask(stack, b'{"tenant": "acme"}')
        assert (got.ok, got.tasks) == (True, 2)
        proc.terminate()
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        await end_process(proc)
