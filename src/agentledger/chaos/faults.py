"""Fault injection: a seeded schedule of SIGKILL and SIGSTOP/SIGCONT against the stack.

The faults are the ones a host really produces: a process killed outright
(OOM killer, crash) and a process frozen for a while (a VM pause, a stalled
disk, a debugger), against each service, nats-server and PostgreSQL, alone and
two at a time. The schedule is drawn from the seed, so a run can be repeated;
the single faults first cover every target once (then the other kind, then
random ones), pairs hit two different targets at once.

Pids come from ``<data dir>/runtime.json``, read afresh before each fault (the
supervisor rewrites it on every restart), and each pid is checked against its
command line before it is signalled. A server is signalled as its process
group (the postmaster with its backends), so a stopped PostgreSQL is frozen as
a whole and a killed one dies as a whole. Every signal sent is logged; the
injector never restarts anything — that is the stack's job.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from agentledger.chaos.profile import SHORT, Profile
from agentledger.config import Settings
from agentledger.errors import RuntimeStateError
from agentledger.runtime.commands import SCALED, services_of
from agentledger.runtime.embedded import pid_alive, pid_matches
from agentledger.runtime.state import RuntimeInfo, read_runtime

log = structlog.get_logger(__name__)

KINDS = ("kill", "stop")


def servers(profile: Profile) -> tuple[str, ...]:
    """The server targets: ``nats`` (or each cluster node, ``nats-1`` ...) and ``postgres``."""
    nats = ("nats",) if profile.cluster == 1 else tuple(f"nats-{i}" for i in range(1, profile.cluster + 1))
    return (*nats, "postgres")


def targets(profile: Profile) -> tuple[str, ...]:
    """Every process a fault may hit: each service instance ``up`` runs, then the servers."""
    names = services_of(Settings(instances=profile.instances))
    return (*(name for name, _ in names), *servers(profile))


def base_name(target: str) -> str:
    """The service a target is an instance of (``projector-2`` -> ``projector``), or the target."""
    head, _, tail = target.rpartition("-")
    return head if tail.isdigit() and head in SCALED else target


def is_server(target: str) -> bool:
    return target in ("nats", "postgres") or target.startswith("nats-")


# The targets of ``make test``'s run.
TARGETS: tuple[str, ...] = targets(SHORT)
# What a service's command line contains: its pid from runtime.json is signalled only if it matches.
_SERVICE_NEEDLES = {name: argv[-1] for name, argv in services_of(Settings())}


def needle(target: str) -> str:
    """What the command line of ``target``'s process contains."""
    if target == "postgres":
        return "postgres"
    if is_server(target):
        return "nats-server"
    return _SERVICE_NEEDLES[base_name(target)]
# How long `inject` waits for a target to be running before it skips the fault.
PRESENT_WAIT_S = 10.0


@dataclass(frozen=True)
class Fault:
    """One scheduled fault: a kill or a pause of one or two targets."""

    index: int
    kind: str  # kill | stop
    targets: tuple[str, ...]
    pause_s: float  # stop only: how long the targets stay frozen
    gap_s: float  # quiet time after recovery, before the next fault

    @property
    def label(self) -> str:
        return f"{self.kind} {'+'.join(self.targets)}"


@dataclass
class Injected:
    """A fault as it happened, on the run's clock (seconds since the run began)."""

    fault: Fault
    start: float
    end: float
    pids: dict[str, int]
    # Seconds from the fault's end until each target answered again (None: not within the bound).
    back_s: dict[str, float | None] = field(default_factory=dict)


def schedule(profile: Profile, seed: int) -> list[Fault]:
    """The run's faults, drawn from the seed."""
    rng = profile.rng(seed, "faults")
    all_targets = targets(profile)
    first = [(t, rng.choice(KINDS)) for t in rng.sample(all_targets, len(all_targets))]
    second = [(t, "stop" if k == "kill" else "kill") for t, k in first]
    rng.shuffle(second)
    extra = [(rng.choice(all_targets), rng.choice(KINDS))
             for _ in range(max(0, profile.single_faults - 2 * len(all_targets)))]
    singles = [((t,), k) for t, k in (first + second + extra)[: profile.single_faults]]
    pairs = [(tuple(sorted(rng.sample(all_targets, 2))), rng.choice(KINDS))
             for _ in range(profile.pair_faults)]
    # Pairs land among the singles' second half, after every target was hit alone once.
    head, tail = singles[: len(all_targets)], singles[len(all_targets):] + pairs
    rng.shuffle(tail)
    return [Fault(i, kind, targets, round(rng.uniform(*profile.pause_s), 1) if kind == "stop" else 0.0,
                  round(rng.uniform(*profile.gap_s), 1))
            for i, (targets, kind) in enumerate(head + tail, start=1)]


def target_pids(info: RuntimeInfo) -> dict[str, int]:
    """Pid of each target that runtime.json lists now."""
    pids = dict(info.services)
    if info.nats_pid is not None:
        pids["nats"] = info.nats_pid
    if info.postgres_pid is not None:
        pids["postgres"] = info.postgres_pid
    for node in info.nats_nodes:
        if node.pid is not None:
            pids[node.name] = node.pid
    return pids


def is_stopped(pid: int) -> bool:
    """Whether ``pid`` is in the stopped state (SIGSTOP)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] in ("T", "t")


class Injector:
    """Sends the fault signals, and nothing else, to the processes of one runtime."""

    def __init__(self, runtime_file: Path, clock: Callable[[], float]) -> None:
        self._runtime_file = runtime_file
        self._clock = clock
        self._frozen: dict[int, str] = {}
        # (time, target, pid, signal name) of every signal sent.
        self.signals: list[tuple[float, str, int, str]] = []

    def current(self) -> dict[str, int]:
        """Live pids of the targets (a target between restarts is absent)."""
        try:
            info = read_runtime(self._runtime_file)
        except RuntimeStateError:
            return {}
        return {t: pid for t, pid in target_pids(info).items() if pid_matches(pid, needle(t))}

    def node_url(self, name: str) -> str | None:
        """The client URL of cluster node ``name`` as runtime.json lists it."""
        with contextlib.suppress(RuntimeStateError):
            for node in read_runtime(self._runtime_file).nats_nodes:
                if node.name == name:
                    return node.url
        return None

    async def _present(self, targets: tuple[str, ...]) -> dict[str, int]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + PRESENT_WAIT_S
        while True:
            pids = self.current()
            if all(t in pids for t in targets) or loop.time() > deadline:
                return {t: pids[t] for t in targets if t in pids}
            await asyncio.sleep(0.1)

    def _send(self, target: str, pid: int, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            if is_server(target) and os.getpgid(pid) == pid:
                os.killpg(pid, sig)
            else:
                os.kill(pid, sig)
        self.signals.append((self._clock(), target, pid, sig.name))
        log.info("chaos.signal", target=target, pid=pid, signal=sig.name)

    async def inject(self, fault: Fault) -> Injected:
        """Apply ``fault`` now: SIGKILL, or SIGSTOP, wait ``pause_s``, SIGCONT."""
        pids = await self._present(fault.targets)
        start = self._clock()
        sig = signal.SIGKILL if fault.kind == "kill" else signal.SIGSTOP
        for target, pid in pids.items():
            self._send(target, pid, sig)
            if fault.kind == "stop":
                self._frozen[pid] = target
        if fault.kind == "stop":
            await asyncio.sleep(fault.pause_s)
            self.release()
        return Injected(fault, start, self._clock(), pids)

    def release(self) -> None:
        """SIGCONT everything still frozen (after a pause, and always before teardown)."""
        for pid, target in list(self._frozen.items()):
            if pid_alive(pid):
                self._send(target, pid, signal.SIGCONT)
            del self._frozen[pid]
