"""Shared by the tests/test_langgraph_*.py files: the stack a LangGraph adapter talks to.

The ledger-writer, the Working Memory projector and the tombstone-fanout run in process on
the test's real NATS and PostgreSQL (``ckpt_support.Stack``); savers connect to them over
NATS like any agent would.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from agentledger.adapters.langgraph import AgentledgerSaver
from agentledger.config import Settings
from ckpt_support import TENANT, Stack


@asynccontextmanager
async def langgraph_stack(settings: Settings, **kw: Any) -> AsyncIterator[Stack]:
    stack = await Stack(settings).start(checkpointer=False, tombstone=True, **kw)
    try:
        yield stack
    finally:
        await stack.stop()


@asynccontextmanager
async def saver(settings: Settings, **kw: Any) -> AsyncIterator[AgentledgerSaver]:
    """A saver for the test's tenant, closed (its leases released) afterwards."""
    kw.setdefault("tenant", TENANT)
    s = AgentledgerSaver(settings, **kw)
    try:
        yield s
    finally:
        await s.aclose()
