"""Is it back? Whether each service and server of the stack answers, asked from outside.

"Back by itself" has to mean serving, not merely a pid: a service is back when
its NATS micro endpoint answers a PING (its subscriptions are live; with several
instances, when as many answer as run), NATS (or a cluster node) when a fresh
connection to it is accepted, PostgreSQL when a fresh connection runs
``SELECT 1``. A target that was killed must also have a new pid in
runtime.json, and a frozen one must not be stopped any more.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from collections.abc import Callable

import asyncpg
import msgspec
import nats.errors
import structlog
from nats.aio.client import Client as Nats

from agentledger.chaos.faults import TARGETS, Injected, Injector, base_name, is_stopped
from agentledger.config import Settings
from agentledger.erasure import evict
from agentledger.errors import AgentLedgerError
from agentledger.security import auth
from agentledger.services.checkpointer.service import SERVICE_NAME as CHECKPOINTER
from agentledger.services.context_builder.service import SERVICE_NAME as CONTEXT_BUILDER
from agentledger.services.ledger_writer.service import SERVICE_NAME as WRITER
from agentledger.services.memory_policy.service import SERVICE_NAME as MEMORY_POLICY
from agentledger.services.projector.service import SERVICE_NAME as PROJECTOR
from agentledger.services.tombstone_fanout.service import SERVICE_NAME as TOMBSTONE_FANOUT
from agentledger.stores import db

log = structlog.get_logger(__name__)

MICRO_NAMES = {"ledger-writer": WRITER, "projector": PROJECTOR, "checkpointer": CHECKPOINTER,
               "memory-policy": MEMORY_POLICY, "context-builder": CONTEXT_BUILDER,
               "tombstone-fanout": TOMBSTONE_FANOUT}
ASK_TIMEOUT_S = 0.5
POLL_S = 0.1


class Health:
    """Asks each target whether it serves, over a reconnecting operator connection."""

    def __init__(self, settings: Settings, nc: Nats, injector: Injector,
                 clock: Callable[[], float], targets: tuple[str, ...] = TARGETS) -> None:
        self._settings = settings
        self._nc = nc
        self._injector = injector
        self._clock = clock
        self.targets = targets
        # Instances each service runs (its targets ``projector``, ``projector-2``, ...).
        self._instances = collections.Counter(base_name(t) for t in targets if base_name(t) in MICRO_NAMES)

    async def answers(self, target: str) -> bool:
        try:
            if target == "nats" or target.startswith("nats-"):
                url = self._injector.node_url(target) if target != "nats" else self._settings.nats_url
                if url is None:
                    return False
                node = msgspec.structs.replace(self._settings, nats_url=url)
                fresh = await auth.connect(node, auth.OPERATOR_ROLE, allow_reconnect=False,
                                           connect_timeout=ASK_TIMEOUT_S, max_reconnect_attempts=0)
                await fresh.close()
            elif target == "postgres":
                conn = await asyncio.wait_for(db.connect(self._settings.database_url), ASK_TIMEOUT_S)
                try:
                    await asyncio.wait_for(conn.fetchval("SELECT 1"), ASK_TIMEOUT_S)
                finally:
                    with contextlib.suppress(Exception):
                        await conn.close(timeout=ASK_TIMEOUT_S)
            elif self._instances[base_name(target)] > 1:
                micro = MICRO_NAMES[base_name(target)]
                found = await evict.running(self._nc, frozenset({micro}))
                return len(found) >= self._instances[base_name(target)]
            else:
                await self._nc.request(f"$SRV.PING.{MICRO_NAMES[target]}", b"", timeout=ASK_TIMEOUT_S)
        except (AgentLedgerError, nats.errors.Error, asyncpg.PostgresError, asyncpg.InterfaceError,
                OSError, TimeoutError):
            return False
        return True

    async def serving(self, target: str, replaced: int | None = None) -> bool:
        """Running (under a new pid when ``replaced`` is the killed one), not frozen, answering."""
        pid = self._injector.current().get(target)
        if pid is None or pid == replaced or is_stopped(pid):
            return False
        return await self.answers(target)

    async def all_serving(self) -> dict[str, bool]:
        names = list(self.targets)
        results = await asyncio.gather(*(self.serving(t) for t in names))
        return dict(zip(names, results, strict=True))

    async def watch(self, injected: Injected, bound_s: float) -> None:
        """Fill ``injected.back_s``: how long after the fault's end each target served again."""
        async def one(target: str) -> None:
            replaced = injected.pids.get(target) if injected.fault.kind == "kill" else None
            while self._clock() - injected.end < bound_s:
                if await self.serving(target, replaced):
                    injected.back_s[target] = round(max(0.0, self._clock() - injected.end), 2)
                    return
                await asyncio.sleep(POLL_S)
            injected.back_s[target] = None
            log.warning("chaos.not_back", fault=injected.fault.label, target=target, bound_s=bound_s)

        await asyncio.gather(*(one(t) for t in injected.fault.targets))
