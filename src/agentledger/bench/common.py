"""Shared pieces of the benchmarks: the JSON line, sizes, the bench stack, CPU accounting.

The stack runs like ``agentledger up`` does: embedded NATS in operator mode and
PostgreSQL (unless configured), the ledger-writer, the projector and the
checkpointer each as its own OS process, so a figure includes what the whole
system costs while it works, and the projector and checkpointer can be paused
(SIGSTOP) to see what they take from appends.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import psutil

from agentledger.config import Settings
from agentledger.core.validate import goal_hash
from agentledger.runtime.embedded import EmbeddedNats
from agentledger.runtime.hosting import remove_instance
from agentledger.runtime.postgres import EmbeddedPostgres
from agentledger.runtime.state import settings_env
from agentledger.security import auth
from agentledger.services.projector.store import Store
from agentledger.stores import db
from agentledger.stores.ledger import ensure_stream

# The services the stack runs, as `up` runs them: (name, module, NATS micro service name).
SERVICES = (
    ("writer", "agentledger.services.ledger_writer", "agentledger-ledger-writer"),
    ("projector", "agentledger.services.projector", "agentledger-projector"),
    ("checkpointer", "agentledger.services.checkpointer", "agentledger-checkpointer"),
)
READY_TIMEOUT_S = 60.0
# How long a figure waits for the projector to fold what the previous run appended.
CATCH_UP_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Profile:
    """Sizes of one ``make bench``; ``SMOKE`` only proves the code runs (the test uses it).

    ``full`` keeps each measured window a few seconds so that the whole run,
    3 repeats of every figure, stays within minutes on a 2-core machine.
    """

    repeats: int = 3
    warmup_s: float = 0.5
    window_s: float = 2.5
    single_agents: tuple[int, ...] = (1, 32, 512)
    # Agents share client connections (as they would share a process's connection):
    # at most this many per side, agent i on connection i % n, raw publishers alike.
    connections: int = 8
    batch_agents: int = 32
    batch_events: int = 20
    one_task_agents: int = 32
    pause_agents: int = 32
    # The integrity bench's repeats of its on/off pair: its effect (~2 % of the CPU per event) is
    # smaller than the spread of a few 2.5 s windows, so it pools more of them.
    integrity_repeats: int = 8
    sweep_rates: tuple[int, ...] = (1000, 2000, 3000, 5000)
    sweep_s: float = 3.0
    sweep_tasks: int = 256
    lag_limit_ms: float = 200.0
    history_sizes: tuple[int, int] = (500, 6000)
    history_tail: int = 200
    wm_samples: int = 300
    rebuild_events: int = 200_000
    rebuild_tasks: int = 400
    reducer_events: int = 100_000
    # Scale-out: agents, events each, and the writer / projector counts on the 3-node cluster.
    scaleout_agents: int = 32
    scaleout_events: int = 150
    scaleout_counts: tuple[int, ...] = (1, 2, 3)
    # Evidence recall: generated conversations, sessions each, turns per session, questions each.
    recall_conversations: int = 10
    recall_sessions: int = 24
    recall_turns: int = 16
    recall_questions: int = 30


PROFILES = {
    "full": Profile(),
    "smoke": Profile(repeats=1, warmup_s=0.1, window_s=0.4, single_agents=(1, 4), connections=2,
                     batch_agents=4, batch_events=3, one_task_agents=4, pause_agents=4, integrity_repeats=1,
                     sweep_rates=(100, 200), sweep_s=0.5, sweep_tasks=8, history_sizes=(40, 90),
                     history_tail=20, wm_samples=10, rebuild_events=2_000, rebuild_tasks=10,
                     reducer_events=2_000, scaleout_agents=4, scaleout_events=10,
                     scaleout_counts=(2,), recall_conversations=1, recall_sessions=4, recall_turns=8,
                     recall_questions=10),
}


def emit(bench: str, value: float, unit: str, baseline: float | None, ratio: float | None, *,
         target: str | None = None, **extra: Any) -> None:
    """Print one figure as a JSON line; ``target`` is the goal for ``ratio`` (or for
    ``value`` when there is no baseline), null when there is none, so a reader sees
    pass or fail."""
    line = {"bench": bench, "value": round(value, 3), "unit": unit,
            "baseline": None if baseline is None else round(baseline, 3),
            "ratio": None if ratio is None else round(ratio, 3), "target": target, **extra}
    print(json.dumps(line), flush=True)


@dataclass
class ServiceProcess:
    """One more service of the bench stack, as its own process (``agentledger.services.<module>``)."""

    proc: subprocess.Popen[bytes]

    @classmethod
    async def start(cls, stack: Stack, module: str, micro: str, *, settings: Settings | None = None,
                    **extra: str) -> ServiceProcess:
        """Start it (with the stack's settings, or ``settings``; ``extra`` added to its
        environment) and wait until its micro service answers a PING."""
        env = {**os.environ, **settings_env(settings or stack.settings), **extra}
        proc = subprocess.Popen([sys.executable, "-m", f"agentledger.services.{module}"], env=env)
        service = cls(proc)
        nc = await auth.connect(stack.settings, auth.OPERATOR_ROLE)
        try:
            deadline = time.monotonic() + READY_TIMEOUT_S
            while True:
                if proc.poll() is not None:
                    raise RuntimeError(f"{module} exited with {proc.returncode}")
                try:
                    await nc.request(f"$SRV.PING.{micro}", b"", timeout=0.2)
                    return service
                except Exception:  # not up yet
                    if time.monotonic() > deadline:
                        service.stop()
                        raise
                    await asyncio.sleep(0.1)
        finally:
            await nc.close()

    def pause(self) -> None:
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGCONT)
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def median(values: Iterable[float]) -> float:
    return float(statistics.median(list(values)))


def median_ratio(values: Sequence[float], baselines: Sequence[float]) -> float | None:
    """Median of the per-repeat ratios (repeats whose baseline measured nothing left out)."""
    ratios = [v / b for v, b in zip(values, baselines, strict=True) if b > 0]
    return median(ratios) if ratios else None


def pct(samples: Sequence[float], q: float) -> float:
    """The ``q`` quantile (nearest rank) of ``samples``."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def agent_settings(s: Settings, tenant: str, agent: str = "bench") -> Settings:
    """Settings of an agent of ``tenant`` (created on the way); ``s`` itself without accounts."""
    if not auth.auth_store(s).initialized:
        return s
    await auth.tenant_add(s, tenant)
    return msgspec.structs.replace(s, nats_creds=await auth.agent_add(s, tenant, agent))


def _now() -> str:
    return datetime.now(UTC).isoformat()


def variable_event(tenant: str, task: str, event_id: str, i: int) -> dict[str, Any]:
    """A small event that every open task accepts: the shape of the append figures (open the
    task first, ``create_tasks``: on a task never created the reducer refuses it, and the
    figures would measure the rejection path)."""
    return {"kind": "variable_set", "event_id": event_id, "tenant": tenant, "task_id": task,
            "producer": "bench", "occurred_at": _now(), "schema_version": 1,
            "payload": {"name": f"x{i % 16}", "value": i}}


def created_event(tenant: str, task: str) -> dict[str, Any]:
    """The event that opens ``task`` (with a budget no figure exhausts)."""
    return {"kind": "task_created", "event_id": "created", "tenant": tenant, "task_id": task,
            "producer": "bench", "occurred_at": _now(), "schema_version": 1,
            "payload": _created_payload()}


def _created_payload() -> dict[str, Any]:
    return {"goal": {"text": "bench", "acceptance_criteria": [], "goal_hash": goal_hash("bench", [])},
            "budget": {"tokens": 10**12}}


async def create_tasks(clients: Sequence[Any], tenant: str, tasks: Iterable[str]) -> None:
    """Open every task of ``tasks`` (untimed, before a figure), through ``clients`` in turn."""
    pending = sorted(set(tasks))
    for i in range(0, len(pending), 64):
        await asyncio.gather(*(clients[j % len(clients)].append(created_event(tenant, task))
                               for j, task in enumerate(pending[i:i + 64], i)))


def task_stream(tenant: str, task: str, n: int) -> list[dict[str, Any]]:
    """A plausible task history of ``n`` events: plan, steps, budget, variables."""
    steps = [{"id": f"S{i}", "depends_on": [f"S{i - 1}"] if i else []} for i in range(8)]
    out: list[dict[str, Any]] = [
        {"kind": "task_created", "payload": _created_payload()},
        {"kind": "plan_versioned", "payload": {"plan_id": "p", "version": 1, "steps": steps}},
    ]
    for i in range(8):
        out.append({"kind": "step_started", "payload": {"plan_version": 1, "step_id": f"S{i}"}})
        out.append({"kind": "step_succeeded", "payload": {"plan_version": 1, "step_id": f"S{i}"}})
    i = 0
    while len(out) < n:
        r = f"r{i}"
        out += [
            {"kind": "budget_reserved", "payload": {"reservation_id": r, "resource": "tokens", "amount": 100}},
            {"kind": "budget_consumed", "payload": {"reservation_id": r, "resource": "tokens", "amount": 60}},
            {"kind": "budget_released", "payload": {"reservation_id": r, "resource": "tokens"}},
            {"kind": "variable_set", "payload": {"name": f"x{i % 16}", "value": i}},
        ]
        i += 1
    return [{**e, "event_id": f"e{j}", "tenant": tenant, "task_id": task, "producer": "bench",
             "occurred_at": _now(), "schema_version": 1} for j, e in enumerate(out[:n])]


async def raw_atomic_batch(nc: Any, items: Sequence[tuple[str, bytes, str]],
                           extra: Sequence[dict[str, str]] | None = None) -> None:
    """Commit ``items`` (subject, body, message id) as one JetStream atomic batch, raw; ``extra``:
    more headers of each message."""
    bid = uuid.uuid4().hex
    for i, (subject, body, mid) in enumerate(items, 1):
        headers = {"Nats-Batch-Id": bid, "Nats-Batch-Sequence": str(i), "Nats-Msg-Id": mid,
                   **(extra[i - 1] if extra else {})}
        if i == len(items):
            headers["Nats-Batch-Commit"] = "1"
            reply = await nc.request(subject, body, headers=headers, timeout=30)
            if b"error" in reply.data:
                raise RuntimeError(reply.data.decode())
        else:
            await nc.publish(subject, body, headers=headers)


# --- CPU of the whole stack ---------------------------------------------------------------

@dataclass(frozen=True)
class Proc:
    """A process whose CPU a figure counts; ``tree``: with all its children (PostgreSQL)."""

    name: str
    pid: int
    tree: bool = False


def _cpu_s(proc: Proc) -> float:
    """User + system CPU seconds of ``proc`` (and, for a tree, of every child, gone or alive).

    A PostgreSQL backend that exits is reaped by the postmaster, whose
    children times then hold it; live backends are read one by one.
    """
    try:
        p = psutil.Process(proc.pid)
        t = p.cpu_times()
        total = t.user + t.system
        if proc.tree:
            total += t.children_user + t.children_system
            for child in p.children(recursive=True):
                try:
                    c = child.cpu_times()
                except psutil.NoSuchProcess:
                    continue
                total += c.user + c.system
    except psutil.NoSuchProcess:
        return 0.0
    return total


def cpu_sample(procs: Sequence[Proc]) -> dict[str, float]:
    return {p.name: _cpu_s(p) for p in procs}


def cpu_ms_per_event(before: dict[str, float], after: dict[str, float],
                     events: int) -> tuple[float, dict[str, float]]:
    """CPU milliseconds per event over a window: the sum, and each process's share."""
    by = {name: (after[name] - before[name]) * 1000 / max(events, 1) for name in before}
    return sum(by.values()), {k: round(v, 3) for k, v in by.items()}


# --- the stack ------------------------------------------------------------------------------

@dataclass
class Stack:
    """What the figures run against: settings, the service processes, PIDs for CPU."""

    settings: Settings
    profile: Profile
    services: dict[str, subprocess.Popen[bytes]]
    nats_pid: int | None
    postgres_pid: int | None
    # Settings of a second stream of the same configuration on the same server, for the
    # raw baselines: no service reads it, so the raw runs cost only nats-server and us.
    raw: Settings = field(init=False)

    def __post_init__(self) -> None:
        self.raw = msgspec.structs.replace(self.settings, prefix=f"{self.settings.prefix}raw")

    @property
    def client_proc(self) -> Proc:
        return Proc("client", os.getpid())

    def server_procs(self) -> list[Proc]:
        """nats-server, and PostgreSQL with all its backends, when this process knows them."""
        out = []
        if self.nats_pid is not None:
            out.append(Proc("nats", self.nats_pid))
        if self.postgres_pid is not None:
            out.append(Proc("postgres", self.postgres_pid, tree=True))
        return out

    def stack_procs(self) -> list[Proc]:
        """Every process of the whole stack: the client, the services, the servers."""
        return [self.client_proc, *(Proc(n, p.pid) for n, p in self.services.items()),
                *self.server_procs()]

    def raw_procs(self) -> list[Proc]:
        """A raw baseline's processes: the raw client (this process) and nats-server."""
        return [self.client_proc, *(p for p in self.server_procs() if p.name == "nats")]

    def pause(self, names: Sequence[str]) -> None:
        for n in names:
            self.services[n].send_signal(signal.SIGSTOP)

    def resume(self, names: Sequence[str]) -> None:
        for n in names:
            self.services[n].send_signal(signal.SIGCONT)

    async def wait_projected(self, timeout: float = CATCH_UP_TIMEOUT_S) -> None:  # noqa: ASYNC109
        """Wait until the projector's watermark reaches the ledger's last sequence."""
        nc = await auth.connect(self.settings, auth.OPERATOR_ROLE)
        conn = await db.connect(self.settings.database_url)
        try:
            last = (await nc.jetstream().stream_info(self.settings.stream)).state.last_seq
            deadline = time.monotonic() + timeout
            while (await Store().watermark(conn) or 0) < last:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the projector did not reach seq {last} in {timeout} s")
                await asyncio.sleep(0.05)
        finally:
            await conn.close()
            await nc.close()


async def _wait_services(s: Settings, services: dict[str, subprocess.Popen[bytes]]) -> None:
    nc = await auth.connect(s, auth.OPERATOR_ROLE)
    try:
        for name, _, micro_name in SERVICES:
            deadline = time.monotonic() + READY_TIMEOUT_S
            while True:
                if services[name].poll() is not None:
                    raise RuntimeError(f"bench {name} exited with {services[name].returncode}")
                try:
                    await nc.request(f"$SRV.PING.{micro_name}", b"", timeout=0.2)
                    break
                except Exception:  # not up yet
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.1)
    finally:
        await nc.close()


async def restart_services(stack: Stack, **env: str) -> None:
    """Stop the stack's services and start them again with ``env`` added to their environment
    (e.g. ``AGENTLEDGER_INTEGRITY="false"``); returns once every one answers."""
    services = stack.services
    for proc in services.values():
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
    for proc in services.values():
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    full = {**os.environ, **settings_env(stack.settings), **env}
    for name, module, _ in SERVICES:
        services[name] = subprocess.Popen([sys.executable, "-m", module], env=full)
    await _wait_services(stack.settings, services)


@asynccontextmanager
async def bench_stack(settings: Settings, profile: Profile) -> AsyncIterator[Stack]:
    """Embedded servers (unless configured) and the three services as processes.

    With AGENTLEDGER_DATABASE_URL the projector writes the public schema of that
    database: point it at a scratch database.
    """
    with tempfile.TemporaryDirectory(prefix="agentledger-bench-") as tmp:
        root = Path(tmp)
        started: list[Any] = []
        nats_url, db_url = settings.nats_url, settings.database_url
        nats_pid = postgres_pid = None
        auth_dir = settings.auth_dir
        services: dict[str, subprocess.Popen[bytes]] = {}
        try:
            if not nats_url:
                # Operator mode, as `up` runs it: appends come from a tenant's agent.
                auth_dir = root / "auth"
                srv = EmbeddedNats(root / "nats", auth=auth.AuthStore(auth_dir).init())
                srv.start()
                started.append(srv)
                nats_url, nats_pid = srv.url, srv.pid
            if not db_url:
                pg = EmbeddedPostgres(root / "pg")
                pg.start()
                started.append(pg)
                db_url, postgres_pid = pg.provision("agentledger"), pg.pid
            s = msgspec.structs.replace(settings, nats_url=nats_url, database_url=db_url,
                                        prefix=f"bench{uuid.uuid4().hex[:8]}", data_dir=root,
                                        auth_dir=auth_dir, log_level="warning")
            await db.migrate(s.database_url)
            await ensure_stream(s)
            stack = Stack(s, profile, services, nats_pid, postgres_pid)
            await ensure_stream(stack.raw)
            env = {**os.environ, **settings_env(s)}
            for name, module, _ in SERVICES:
                services[name] = subprocess.Popen([sys.executable, "-m", module], env=env)
            await _wait_services(s, services)
            yield stack
        finally:
            for proc in services.values():
                proc.send_signal(signal.SIGCONT)  # a paused service cannot stop
                proc.terminate()
            for proc in services.values():
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            for srv in reversed(started):
                srv.stop()
            # As root the servers had homes and users of their own outside `root`.
            remove_instance(root / "nats")
            remove_instance(root / "pg")
