"""Supervisor: runs each service as its own OS process and keeps it running.

One process per service means a crash or a memory leak in one never takes
another down, and each can be killed and restarted on its own. The supervisor
restarts a crashed service with capped exponential backoff, keeps
runtime.json current whenever a pid changes, and on SIGTERM/SIGINT stops its
children gracefully before exiting.

Run as ``python -m agentledger.runtime.supervisor --data-dir DIR --services JSON``;
``agentledger up`` does this with the service list from
``agentledger.runtime.commands.SERVICES``. Settings come from ``AGENTLEDGER_*``
variables and are passed on to every service.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType

import msgspec
import structlog

from agentledger import logs
from agentledger.auth import AuthStore
from agentledger.config import from_env
from agentledger.errors import AgentLedgerError
from agentledger.runtime.embedded import EmbeddedNats, pid_alive
from agentledger.runtime.postgres import EmbeddedPostgres
from agentledger.runtime.state import RuntimeInfo, settings_env, write_runtime

log = structlog.get_logger(__name__)

POLL_S = 0.1
BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 30.0
# A service that ran this long before exiting starts its backoff afresh.
STABLE_AFTER_S = 60.0
STOP_TIMEOUT_S = 10.0
# Wait between attempts to restart an embedded server that does not come back.
SERVER_RETRY_S = 2.0

ServiceSpec = tuple[str, Sequence[str]]


@dataclass
class _Child:
    name: str
    argv: list[str]
    proc: subprocess.Popen[bytes] | None = None
    ready: bool = False
    started: float = 0.0
    failures: int = 0
    restart_at: float = 0.0


class Supervisor:
    """Keeps one process per service alive until told to stop."""

    def __init__(self, services: Sequence[ServiceSpec], *, env: Mapping[str, str],
                 log_dir: Path, runtime_file: Path, info: RuntimeInfo,
                 stop_timeout: float = STOP_TIMEOUT_S,
                 servers: Mapping[str, Callable[[], int | None]] | None = None) -> None:
        self._children = [_Child(name, list(argv)) for name, argv in services]
        self._env = dict(env)
        self._log_dir = log_dir
        self._runtime_file = runtime_file
        self._info = info
        self._stop_timeout = stop_timeout
        # Embedded servers to keep alive: name ("nats", "postgres") -> restart, returning the pid.
        self._servers = dict(servers or {})
        self._server_restart_at: dict[str, float] = {}
        # Set by the signal handler, which only records it: logging from a
        # handler could re-enter a write already in progress on stderr.
        self._stop_signal: int | None = None

    def run(self) -> None:
        """Start every service and supervise until SIGTERM or SIGINT, then stop them."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        self._log_dir.mkdir(parents=True, exist_ok=True)
        try:
            for child in self._children:
                self._spawn(child)
            self._publish()
            while self._stop_signal is None:
                if self._check() | self._check_servers():
                    self._publish()
                time.sleep(POLL_S)
            log.info("supervisor_stopping", signal=signal.Signals(self._stop_signal).name)
        finally:
            self._shutdown()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stop_signal = signum

    def _ready_file(self, child: _Child) -> Path:
        return self._log_dir.parent / "run" / f"{child.name}.ready"

    def _spawn(self, child: _Child) -> None:
        child.started = time.monotonic()
        child.ready = False
        ready = self._ready_file(child)
        ready.parent.mkdir(parents=True, exist_ok=True)
        ready.unlink(missing_ok=True)
        env = {**self._env, "AGENTLEDGER_READY_FILE": str(ready)}
        try:
            with (self._log_dir / f"{child.name}.log").open("ab") as out:
                child.proc = subprocess.Popen(child.argv, env=env, stdin=subprocess.DEVNULL,
                                              stdout=out, stderr=subprocess.STDOUT)
        except OSError as exc:
            log.error("service_spawn_failed", child=child.name, error=str(exc))
            self._schedule_restart(child)
            return
        log.info("service_started", child=child.name, pid=child.proc.pid,
                 attempt=child.failures)

    def _schedule_restart(self, child: _Child) -> float:
        if time.monotonic() - child.started >= STABLE_AFTER_S:
            child.failures = 0
        child.failures += 1
        delay = min(BACKOFF_BASE_S * 2.0 ** (child.failures - 1), BACKOFF_CAP_S)
        child.restart_at = time.monotonic() + delay
        return delay

    def _check(self) -> bool:
        """Notice exits and due restarts; return whether any pid changed."""
        changed = False
        for child in self._children:
            if child.proc is not None:
                code = child.proc.poll()
                if code is None:
                    if not child.ready and self._ready_file(child).exists():
                        # Restarted and serving again: the next crash starts the backoff afresh.
                        child.ready, child.failures = True, 0
                        log.info("service_ready", child=child.name, pid=child.proc.pid)
                    continue
                delay = self._schedule_restart(child)
                log.warning("service_exited", child=child.name, pid=child.proc.pid,
                            exit_code=code, restart_in_s=delay, attempt=child.failures)
                child.proc = None
                changed = True
            elif time.monotonic() >= child.restart_at:
                log.info("service_restarting", child=child.name, attempt=child.failures)
                self._spawn(child)
                changed = True
        return changed

    def _check_servers(self) -> bool:
        """Restart an embedded server that died, on its own port and data; whether a pid changed.

        The services reconnect by themselves once it is back; a server that fails
        to start is retried every few seconds, and the failure is logged each time.
        """
        changed = False
        for name, restart in self._servers.items():
            pid = self._info.nats_pid if name == "nats" else self._info.postgres_pid
            if pid is not None and pid_alive(pid):
                continue
            now = time.monotonic()
            if now < self._server_restart_at.get(name, 0.0):
                continue
            log.warning("server_down", server=name, pid=pid)
            try:
                new_pid = restart()
            except AgentLedgerError as exc:
                log.error("server_restart_failed", server=name, error=str(exc)[:500])
                self._server_restart_at[name] = now + SERVER_RETRY_S
                continue
            log.info("server_restarted", server=name, pid=new_pid)
            field = "nats_pid" if name == "nats" else "postgres_pid"
            self._info = msgspec.structs.replace(self._info, **{field: new_pid})
            changed = True
        return changed

    def _publish(self) -> None:
        services = {c.name: c.proc.pid for c in self._children if c.proc is not None}
        self._info = msgspec.structs.replace(self._info, services=services)
        write_runtime(self._runtime_file, self._info)

    def _shutdown(self) -> None:
        """SIGTERM every child, give them ``stop_timeout`` seconds in total, SIGKILL the rest."""
        running = [c for c in self._children if c.proc is not None]
        for child in running:
            assert child.proc is not None
            child.proc.terminate()
        deadline = time.monotonic() + self._stop_timeout
        for child in running:
            assert child.proc is not None
            try:
                code = child.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("service_kill", child=child.name, pid=child.proc.pid)
                child.proc.kill()
                code = child.proc.wait()
            log.info("service_stopped", child=child.name, pid=child.proc.pid, exit_code=code)
            child.proc = None
        self._publish()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agentledger.runtime.supervisor",
                                     description="Run agentledger services, one process each.")
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--services", required=True,
                        help='JSON list of [name, argv] pairs, e.g. [["x", ["sleep", "9"]]]')
    parser.add_argument("--nats-pid", type=int, help="pid of the embedded NATS, if any")
    parser.add_argument("--postgres-pid", type=int, help="pid of the embedded PostgreSQL, if any")
    parser.add_argument("--stop-timeout", type=float, default=STOP_TIMEOUT_S,
                        help="seconds a service gets to exit after SIGTERM before SIGKILL")
    args = parser.parse_args(argv)

    settings = from_env(data_dir=args.data_dir.absolute())
    logs.configure(settings.log_level, service="supervisor")
    servers: dict[str, Callable[[], int | None]] = {}
    if args.nats_pid is not None:
        servers["nats"] = lambda: EmbeddedNats(settings.data_dir, auth=AuthStore(settings.auth_root),
                                               server_root=settings.server_root).start().pid
    if args.postgres_pid is not None:
        servers["postgres"] = lambda: EmbeddedPostgres(settings.data_dir,
                                                       server_root=settings.server_root).start().pid
    services = msgspec.json.decode(args.services, type=list[tuple[str, list[str]]])
    info = RuntimeInfo(nats_url=settings.nats_url, database_url=settings.database_url,
                       data_dir=str(settings.data_dir), supervisor_pid=os.getpid(),
                       nats_pid=args.nats_pid, postgres_pid=args.postgres_pid,
                       started_at=datetime.now(UTC))
    Supervisor(services, env={**os.environ, **settings_env(settings)},
               log_dir=settings.data_dir / "logs", runtime_file=settings.runtime_file,
               info=info, stop_timeout=args.stop_timeout, servers=servers).run()


if __name__ == "__main__":
    main()
