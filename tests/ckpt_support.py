"""Shared by test_checkpointer.py, test_resume.py and scenario_executor.py.

``Stack`` runs a LedgerWriter, a Projector and (optionally) a Checkpointer in
process against the test's real NATS and PostgreSQL, plus a client. Event
builders produce wire dicts the writer accepts.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import asyncpg
import nats
import nats.errors

from agentledger.client import Client, connect
from agentledger.config import Settings
from agentledger.core import checkpoint as cp_mod
from agentledger.core.validate import goal_hash
from agentledger.runtime.state import settings_env
from agentledger.security import auth
from agentledger.services.checkpointer.service import Checkpointer
from agentledger.services.context_builder.service import ContextBuilder
from agentledger.services.ledger_writer.service import LedgerWriter
from agentledger.services.memory_policy.service import MemoryPolicy
from agentledger.services.projector.service import Projector
from helpers import assert_eventually

TENANT = "acme"
GOAL_TEXT = "ship the release"
CRITERIA = ["tests pass"]
_ids = itertools.count()


def now() -> str:
    return datetime.now(UTC).isoformat()


def event(kind: str, payload: dict[str, Any], task: str, *, event_id: str | None = None,
          tenant: str = TENANT, token: int | None = None, producer: str = "test") -> dict[str, Any]:
    body: dict[str, Any] = {"kind": kind, "event_id": event_id or f"e{next(_ids)}", "tenant": tenant,
                            "task_id": task, "producer": producer, "occurred_at": now(),
                            "schema_version": 1, "payload": payload}
    if token is not None:
        body["fencing_token"] = token
    return body


def created(task: str, *, text: str = GOAL_TEXT, **kw: Any) -> dict[str, Any]:
    goal = {"text": text, "acceptance_criteria": CRITERIA, "goal_hash": goal_hash(text, CRITERIA)}
    return event("task_created", {"goal": goal, "budget": {"tokens": 10**9}}, task, **kw)


def plan(task: str, steps: list[dict[str, Any]], version: int = 1, **kw: Any) -> dict[str, Any]:
    return event("plan_versioned", {"plan_id": "p", "version": version, "steps": steps}, task, **kw)


def chain(n: int, side_effects: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Steps S1..Sn, each depending on the previous one."""
    return [{"id": f"S{i}", "depends_on": [f"S{i - 1}"] if i > 1 else [],
             "side_effect": f"S{i}" in side_effects} for i in range(1, n + 1)]


def started(task: str, step: str, *, version: int = 1, attempt: int = 1, key: str | None = None,
            **kw: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {"plan_version": version, "step_id": step, "attempt": attempt}
    if key is not None:
        payload["idempotency_key"] = key
    return event("step_started", payload, task, **kw)


def succeeded(task: str, step: str, *, version: int = 1, attempt: int = 1,
              artifacts: list[dict[str, Any]] | None = None, **kw: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {"plan_version": version, "step_id": step, "attempt": attempt}
    if artifacts:
        payload["artifacts"] = artifacts
    return event("step_succeeded", payload, task, **kw)


def variable(task: str, name: str, value: Any, **kw: Any) -> dict[str, Any]:
    return event("variable_set", {"name": name, "value": value}, task, **kw)


def budget_cycle(task: str, i: int) -> list[dict[str, Any]]:
    """Reserve, consume and release one reservation, then set a variable of a recurring name."""
    r = f"r{i}"
    return [
        event("budget_reserved", {"reservation_id": r, "resource": "tokens", "amount": 100}, task),
        event("budget_consumed", {"reservation_id": r, "resource": "tokens", "amount": 60}, task),
        event("budget_released", {"reservation_id": r, "resource": "tokens"}, task),
        variable(task, f"x{i % 8}", i),
    ]


class Stack:
    """Writer + projector (+ checkpointer, memory-policy, context-builder) in process, and a client."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.writer = LedgerWriter(settings)
        self.projector = Projector(settings)
        self.checkpointer: Checkpointer | None = None
        self.memory: MemoryPolicy | None = None
        self.context: ContextBuilder | None = None
        self.fanout: Any = None
        self.client: Client | None = None
        self.db: asyncpg.Pool | None = None

    async def start(self, checkpointer: bool = True, projector: bool = True, memory: bool = False,
                    context: bool = False, compactors: dict[str, Any] | None = None,
                    tombstone: bool = False, **checkpointer_kw: Any) -> Stack:
        await self.writer.start()
        if projector:
            await self.projector.start()
        if checkpointer:
            self.checkpointer = Checkpointer(self.settings, **checkpointer_kw)
            await self.checkpointer.start()
        if memory:
            self.memory = MemoryPolicy(self.settings)
            await self.memory.start()
        if context:
            self.context = ContextBuilder(self.settings, compactors=compactors)
            await self.context.start()
        if tombstone:
            from agentledger.services.tombstone_fanout.service import TombstoneFanout  # noqa: PLC0415
            self.fanout = TombstoneFanout(self.settings)
            await self.fanout.start()
        self.client = await connect(self.settings, timeout=30)
        self.db = await asyncpg.create_pool(self.settings.database_url, min_size=1, max_size=4)
        return self

    async def stop(self) -> None:
        if self.db is not None:
            await self.db.close()
        if self.client is not None:
            await self.client.close()
        for service in (self.fanout, self.context, self.memory, self.checkpointer, self.projector,
                        self.writer):
            if service is not None:
                with contextlib.suppress(Exception):
                    await service.stop()

    @property
    def c(self) -> Client:
        assert self.client is not None
        return self.client

    async def append(self, events: list[dict[str, Any]], chunk: int = 500) -> int:
        """Append events of one task in atomic chunks; the last stored sequence."""
        seq = 0
        for i in range(0, len(events), chunk):
            seq = (await self.c.append_batch(events[i:i + chunk]))[-1].seq
        return seq

    async def last_seq(self) -> int:
        info = await self.c.nc.jetstream().stream_info(self.settings.stream)
        return int(info.state.last_seq)

    async def projected(self, upto: int | None = None) -> int:
        """Wait until the projection's watermark reaches ``upto`` (default: the stream's last seq)."""
        target = upto if upto is not None else await self.last_seq()

        async def reached() -> bool:
            assert self.db is not None
            try:
                wm = await self.db.fetchval(
                    "SELECT seq FROM projector_watermark WHERE name = 'projector'")
            except asyncpg.UndefinedTableError:
                return False
            return wm is not None and wm >= target

        await assert_eventually(reached, timeout=30, message=f"projection never reached {target}")
        return target

    async def evaluated(self, task: str, seq: int, tenant: str = TENANT) -> None:
        """Wait until the in-process checkpointer has evaluated the task at ``seq`` or later."""
        assert self.checkpointer is not None
        ck = self.checkpointer
        await assert_eventually(lambda: ck.evaluated.get((tenant, task), 0) >= seq, timeout=30,
                                message=f"checkpointer never evaluated {task} at {seq}")

    async def rows(self, task: str, tenant: str = TENANT) -> list[asyncpg.Record]:
        """The task's checkpoint rows, newest first."""
        assert self.db is not None
        return await self.db.fetch(
            "SELECT id, seq, events, body, checksum FROM checkpoints WHERE tenant = $1 AND task_id = $2"
            " ORDER BY seq DESC, id DESC", tenant, task)

    async def pointer(self, task: str, tenant: str = TENANT) -> asyncpg.Record | None:
        assert self.db is not None
        return await self.db.fetchrow(
            "SELECT p.checkpoint_id, p.version, c.seq, c.events, c.body FROM checkpoint_pointer p"
            " JOIN checkpoints c ON c.id = p.checkpoint_id WHERE p.tenant = $1 AND p.task_id = $2",
            tenant, task)

    async def active(self, task: str, tenant: str = TENANT) -> cp_mod.Checkpoint | None:
        row = await self.pointer(task, tenant)
        return cp_mod.decode(bytes(row["body"])) if row else None


@contextlib.asynccontextmanager
async def running(settings: Settings, checkpointer: bool = True, projector: bool = True,
                  memory: bool = False, **kw: Any) -> AsyncIterator[Stack]:
    stack = Stack(settings)
    try:
        yield await stack.start(checkpointer, projector, memory, **kw)
    finally:
        await stack.stop()


def service_env(settings: Settings) -> dict[str, str]:
    """Environment for a service or executor process of the test's settings."""
    return {**os.environ, **settings_env(settings), "AGENTLEDGER_LOG_LEVEL": "warning",
            "AGENTLEDGER_AUTH_DIR": str(settings.auth_root)}


async def wait_for_service(nc: nats.NATS, subject: str, proc: asyncio.subprocess.Process) -> None:
    """Wait until something answers on ``subject`` (any reply, even an error, means it is up)."""

    async def answers() -> bool:
        assert proc.returncode is None, f"the service process exited with {proc.returncode}"
        try:
            await nc.request(subject, b"{}", timeout=0.5)
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
            return False
        return True

    await assert_eventually(answers, timeout=30, interval=0.05, message=f"nothing answers {subject}")


async def spawn_service(settings: Settings, module: str) -> asyncio.subprocess.Process:
    """``python -m agentledger.services.<module>`` as an OS process (not waited for)."""
    return await asyncio.create_subprocess_exec(sys.executable, "-m", f"agentledger.services.{module}",
                                                env=service_env(settings))


async def end_process(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM, then SIGKILL if it does not exit within 20 s."""
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 20)
        except TimeoutError:
            proc.kill()
            await proc.wait()


READY_SUBJECT = {"ledger_writer": "{prefix}.writer.append", "checkpointer": "{prefix}.checkpoint.save"}


@contextlib.asynccontextmanager
async def processes(settings: Settings, *modules: str) -> AsyncIterator[list[asyncio.subprocess.Process]]:
    """Run agentledger service modules as OS processes; each is ready (answering) on entry.

    ``modules``: ``ledger_writer`` (ready when ``writer.append`` answers) and
    ``checkpointer`` (ready when ``checkpoint.save`` answers).
    """
    procs: list[asyncio.subprocess.Process] = []
    nc = await auth.connect(settings, auth.WRITER)
    try:
        for module in modules:
            procs.append(await spawn_service(settings, module))
        await asyncio.gather(*(
            wait_for_service(nc, READY_SUBJECT[m].format(prefix=settings.prefix), p)
            for m, p in zip(modules, procs, strict=True)))
        yield procs
    finally:
        await nc.close()
        await asyncio.gather(*(end_process(p) for p in procs))
