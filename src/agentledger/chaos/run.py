"""One chaos run, start to finish, always on a private stack that is always torn down.

The harness starts its own embedded stack (``agentledger up`` machinery: nats-server,
PostgreSQL, the supervisor and the services) in a fresh temporary folder with
prefix ``chaos``, so it never touches a developer's ``.agentledger`` stack and
two runs never share anything. Then:

1. setup: the tenant and one agent identity per executor (credentials of their
   own), the probe task, the probes, the agents and the resumers;
2. faults: the seeded schedule, one fault at a time; after each, wait (bounded)
   until every hit target serves again and both probe lanes answer, then a
   seeded quiet gap;
3. drain: no new tasks; the executors finish what they hold (bounded);
4. health: every service and server must be serving (bounded wait), with
   nothing done by hand;
5. check: the checker reads the stream, the checkpoints and the projection;
6. report: report.txt / report.json / timeline.svg / samples.json, the service
   logs and the sink's call log in the output folder.

The stack is stopped (``down``) and its folder removed on every exit path,
Ctrl-C included; a frozen process is thawed first so it can be stopped.
Exit status 0 when every correctness check passed and everything came back,
1 otherwise (recovery times are reported against their goal, never asserted).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import msgspec
import structlog

from agentledger import logs
from agentledger.chaos import report
from agentledger.chaos.checker import check
from agentledger.chaos.faults import Injected, Injector, schedule, targets
from agentledger.chaos.health import Health
from agentledger.chaos.history import History
from agentledger.chaos.hog import busy, cores
from agentledger.chaos.probes import LANES, Prober
from agentledger.chaos.profile import PROFILES, Profile
from agentledger.chaos.sink import IdempotentSink
from agentledger.chaos.workload import TENANT, Executor, Workload, run_agent, run_resumer
from agentledger.client import Client, connect
from agentledger.config import Settings, from_env
from agentledger.runtime.commands import down, up
from agentledger.runtime.hosting import remove_instance
from agentledger.security import auth

log = structlog.get_logger(__name__)

PREFIX = "chaos"
REQUEST_TIMEOUT_S = 2.0
# Quiet time before the first fault, so the timeline starts from a healthy baseline.
BASELINE_S = 2.0
CLOSE_TIMEOUT_S = 5.0


def _clock() -> Callable[[], float]:
    t0 = time.monotonic()
    return lambda: round(time.monotonic() - t0, 3)


async def _enroll(settings: Settings, names: list[str],
                  timeouts: dict[str, float]) -> dict[str, Client]:
    """The tenant, and a client per identity connected with its own agent credentials."""
    await auth.tenant_add(settings, TENANT)
    clients = {}
    for name in names:
        creds = await auth.agent_add(settings, TENANT, name)
        clients[name] = await connect(msgspec.structs.replace(settings, nats_creds=creds),
                                      timeout=timeouts.get(name, REQUEST_TIMEOUT_S), retries=0)
    return clients


async def _until(condition: Callable[[], bool], bound_s: float) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound_s
    while not condition():
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.1)
    return True


async def _serving_everywhere(health: Health, bound_s: float) -> dict[str, bool]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound_s
    while True:
        state = await health.all_serving()
        if all(state.values()) or loop.time() > deadline:
            return state
        await asyncio.sleep(0.25)


async def _drain(tasks: list[asyncio.Task[None]], bound_s: float) -> int:
    """Wait for ``tasks`` up to ``bound_s``; cancel the rest and return how many that was."""
    if not tasks:
        return 0
    _, pending = await asyncio.wait(tasks, timeout=bound_s)
    for t in pending:
        t.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return len(pending)


class ChaosRun:
    """The phases of one run against the stack ``settings`` points at."""

    def __init__(self, profile: Profile, seed: int, out: Path, *, settings: Settings,
                 injector: Injector, clock: Callable[[], float], hog: int = 0) -> None:
        self.profile = profile
        self.hog = hog
        self.seed = seed
        self.out = out
        self.settings = settings
        self.injector = injector
        self.clock = clock
        self.phases: dict[str, float] = {}
        self.notes: list[str] = []
        self.errors: list[str] = []
        self.agents = [f"agent-{i}" for i in range(profile.agents)]
        self.resumers = [f"resumer-{i}" for i in range(profile.resumers)]
        self.history = History()
        self.sink = IdempotentSink(out / "sink.jsonl", profile.rng(seed, "sink"),
                                   profile.sink_flake_share)
        self.work = Workload(profile, self.history, self.sink)
        self.injected: list[Injected] = []
        self._tasks: dict[str, asyncio.Task[None]] = {}

    def _phase(self, name: str, since: float) -> None:
        self.phases[name] = round(self.clock() - since, 1)

    def _spawn(self, name: str, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = self._tasks[name] = asyncio.create_task(coro, name=name)
        return task

    async def setup(self) -> None:
        """Identities, the probe task and the probes, then the agents and the resumers."""
        profile, seed = self.profile, self.seed
        self.clients = await _enroll(self.settings, [*self.agents, *self.resumers, "prober"],
                                     {"prober": profile.probe_timeout_s})
        ex = {name: Executor(self.work, self.clients[name], name,
                             "agent" if name in self.agents else "resumer", profile.rng(seed, name))
              for name in [*self.agents, *self.resumers]}
        self.prober = Prober(Executor(self.work, self.clients["prober"], "prober", "probe",
                                      profile.rng(seed, "prober")), self.clock, profile.probe_interval_s)
        await self.prober.setup()
        self.operator = await auth.connect(self.settings, auth.OPERATOR_ROLE,
                                           max_reconnect_attempts=-1, reconnect_time_wait=0.25)
        self.health = Health(self.settings, self.operator, self.injector, self.clock,
                             targets(self.profile))
        self.probe_stop = asyncio.Event()
        self._spawn("probes", self.prober.run(self.probe_stop))
        self.agent_tasks = [self._spawn(a, run_agent(ex[a])) for a in self.agents]
        self.resumer_tasks = [self._spawn(r, run_resumer(ex[r])) for r in self.resumers]

        async def agents_finished() -> None:
            await asyncio.gather(*self.agent_tasks, return_exceptions=True)
            self.work.agents_done.set()

        self._spawn("agents-finished", agents_finished())

    async def inject_faults(self) -> None:
        """The schedule, one fault at a time, each followed by recovery and a quiet gap."""
        started = self.clock()
        await asyncio.sleep(BASELINE_S)
        faults = schedule(self.profile, self.seed)
        for fault in faults:
            if self.clock() - started > self.profile.fault_phase_s:
                self.notes.append(f"the fault phase reached its {self.profile.fault_phase_s:.0f} s "
                                  f"bound: {len(faults) - len(self.injected)} faults not injected")
                break
            log.info("chaos.fault", index=fault.index, fault=fault.label, pause_s=fault.pause_s)
            inj = await self.injector.inject(fault)
            self.injected.append(inj)
            await self.health.watch(inj, self.profile.recovery_wait_s)
            if not await _until(functools.partial(self.prober.answering_since, inj.end),
                                self.profile.recovery_wait_s):
                self.notes.append(f"fault {fault.index}: the probe lanes did not answer within "
                                  f"{self.profile.recovery_wait_s:.0f} s; next fault injected anyway")
            await asyncio.sleep(fault.gap_s)

    async def drain(self) -> None:
        """No new tasks; the executors finish what they hold, within the drain bound."""
        started = self.clock()
        self.work.stop.set()
        cancelled = await _drain(self.agent_tasks, self.profile.drain_s)
        await self._tasks["agents-finished"]
        left = max(1.0, self.profile.drain_s - (self.clock() - started))
        cancelled += await _drain(self.resumer_tasks, left)
        if cancelled:
            self.notes.append(f"{cancelled} executors were still busy at the drain bound and were "
                              "cancelled")

    async def finish(self) -> tuple[dict[str, bool], float]:
        """Wait for everything to serve, stop the probes, close the clients."""
        end_health = await _serving_everywhere(self.health, self.profile.health_s)
        self.probe_stop.set()
        await asyncio.gather(self._tasks["probes"], return_exceptions=True)
        until = self.clock()
        for client in self.clients.values():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(client.close(), CLOSE_TIMEOUT_S)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.operator.close(), CLOSE_TIMEOUT_S)
        self.sink.close()
        for name, task in self._tasks.items():
            if task.done() and not task.cancelled() and task.exception() is not None:
                exc = task.exception()
                log.error("chaos.harness_error", task=name, exc_info=exc)
                self.errors.append(f"{name}: {exc!r}")
        return end_health, until

    async def __call__(self) -> report.RunResult:
        self.phases["up"] = round(self.clock(), 1)  # the clock started just before `up`
        started = self.clock()
        await self.setup()
        self._phase("setup", started)
        started = self.clock()
        await self.inject_faults()
        self._phase("faults", started)
        started = self.clock()
        await self.drain()
        self._phase("drain", started)
        started = self.clock()
        end_health, until = await self.finish()
        verdict = await check(self.settings, attempts=self.history.attempts.values(),
                              grants=self.history.grants, resumes=self.history.resumes,
                              sink=self.sink.entries, holders={*self.agents, *self.resumers, "prober"})
        self._phase("health+check", started)
        samples = self.prober.samples
        lanes = {lane: {"samples": sum(1 for s in samples if s.lane == lane),
                        "failed": sum(1 for s in samples if s.lane == lane and not s.ok)}
                 for lane in LANES}
        result = report.RunResult(
            profile=self.profile.name, seed=self.seed, elapsed_s=round(self.clock(), 1),
            phases=self.phases, faults=report.fault_rows(self.injected, samples, until),
            verdict=verdict, end_health=end_health, stats=self.work.stats, lanes=lanes,
            signals=[s[3] for s in self.injector.signals], agents=self.profile.agents,
            resumers=self.profile.resumers, notes=self.notes, errors=self.errors, hog=self.hog)
        report.write(self.out, result, samples, self.injected, until)
        return result


def run(profile: Profile, seed: int, out: Path, *, hog: int = 0) -> report.RunResult:
    """Start a private stack, run ``chaos`` against it, tear everything down whatever happens.

    ``hog``: busy processes to run beside the stack for the whole run, ``up`` included.
    """
    with busy(hog):
        return _run(profile, seed, out, hog)


def _run(profile: Profile, seed: int, out: Path, hog: int) -> report.RunResult:
    out = out.absolute()
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="agentledger-chaos-"))
    # Embedded servers started as root run as their own users, who must pass through to their homes.
    scratch.chmod(0o711)
    server_root = scratch / "servers"
    server_root.mkdir(mode=0o711)
    settings = Settings(data_dir=scratch / "data", prefix=PREFIX, server_root=server_root,
                        cluster_size=profile.cluster, instances=profile.instances,
                        projector_partitions=profile.partitions)
    clock = _clock()
    injector = Injector(settings.runtime_file, clock)
    try:
        info = up(settings)
        stack = msgspec.structs.replace(settings, nats_url=info.nats_url,
                                        database_url=info.database_url)
        log.info("chaos.stack_up", seconds=clock(), data_dir=str(settings.data_dir))
        return asyncio.run(ChaosRun(profile, seed, out, settings=stack, injector=injector,
                                    clock=clock, hog=hog)())
    finally:
        injector.release()
        try:
            if settings.runtime_file.exists():
                down(settings)
        finally:
            logs_dir = settings.data_dir / "logs"
            if logs_dir.is_dir():
                shutil.copytree(logs_dir, out / "logs", dirs_exist_ok=True)
            remove_instance(settings.data_dir, server_root)
            shutil.rmtree(scratch, ignore_errors=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--profile", choices=sorted(PROFILES), default="short",
                        help="short (about a minute, what `make test` runs), full or cluster "
                             "(`make chaos` runs both: one node, then 3 nodes with 2 writers "
                             "and 2 projectors)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the schedule and the workload")
    parser.add_argument("--hog", default="0", metavar="N|cores",
                        help="run N busy processes beside the stack for the whole run ('cores': "
                             "one per core): recovery on a loaded host (default 0)")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for report.txt, report.json, timeline.svg and the logs "
                             "(default .agentledger/chaos/<profile>-<seed>)")


def command(args: argparse.Namespace) -> int:
    """Run the chaos harness as the arguments say; print the report; 0 when correct."""
    hog = cores() if args.hog == "cores" else int(args.hog)
    loaded = f"-hog{hog}" if hog else ""
    out = args.out or Path(".agentledger") / "chaos" / f"{args.profile}-{args.seed}{loaded}"
    try:
        result = run(PROFILES[args.profile], args.seed, out, hog=hog)
    except KeyboardInterrupt:
        print("chaos: interrupted; the stack was torn down", file=sys.stderr)
        return 130
    print(report.render(result), end="")
    print(f"report: {out / 'report.txt'}\ntimeline: {out / 'timeline.svg'}")
    return 0 if result.correct else 1


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agentledger.chaos", description=__doc__.split("\n")[0])
    add_arguments(parser)
    args = parser.parse_args(argv)
    logs.configure(from_env().log_level)
    sys.exit(command(args))
