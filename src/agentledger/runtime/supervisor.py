"""Supervisor: runs each service as its own OS process and keeps it running.

One process per service means a crash or a memory leak in one never takes
another down, and each can be killed and restarted on its own. The supervisor
restarts a crashed service with capped exponential backoff, keeps
runtime.json current whenever a pid changes, and on SIGTERM/SIGINT stops its
children gracefully before exiting. Run as root, it starts every service as a
system user of its own, on copies of what that service reads (``service_users``).

Run as ``python -m agentledger.runtime.supervisor --data-dir DIR --services JSON``;
``agentledger up`` does this with the service list from
``agentledger.runtime.commands.SERVICES``. Settings come from ``AGENTLEDGER_*``
variables and are passed on to every service.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from urllib.parse import urlsplit

import msgspec
import structlog

from agentledger import logs
from agentledger.config import from_env
from agentledger.errors import AgentLedgerError
from agentledger.runtime.embedded import EmbeddedCluster, EmbeddedNats, pid_alive
from agentledger.runtime.logfiles import log_folder, open_log
from agentledger.runtime.postgres import EmbeddedPostgres
from agentledger.runtime.service_users import ServiceProcess, ServiceUsers
from agentledger.runtime.state import NatsNode, RuntimeInfo, settings_env, write_runtime
from agentledger.security.auth import AuthStore
from agentledger.shell import metrics

log = structlog.get_logger(__name__)

POLL_S = 0.1
# The first restart after a crash is immediate (a service that was serving is wanted back at
# once: every 0.5 s waited was 0.5 s of outage); a service that crashes again before it gets
# ready waits BACKOFF_BASE_S, doubling to BACKOFF_CAP_S.
BACKOFF_BASE_S = 0.5
BACKOFF_CAP_S = 30.0
# A service that ran this long before exiting starts its backoff afresh.
STABLE_AFTER_S = 60.0
STOP_TIMEOUT_S = 10.0
# Wait between attempts to restart an embedded server that does not come back (a start that
# failed for a reason of its own: a killed PostgreSQL's leftovers are waited for inside its start,
# ``EmbeddedPostgres._await_leftovers``): short at first, doubling to SERVER_RETRY_MAX_S.
SERVER_RETRY_S = 0.2
SERVER_RETRY_MAX_S = 2.0
# An embedded server that accepts connections but has not answered one for this long (frozen by
# SIGSTOP, hung) is SIGKILLed, then restarted like a dead one; probed every SERVER_PROBE_S.
SERVER_LIVENESS_TIMEOUT_S = 20.0
SERVER_PROBE_S = 2.0
# A ready service refreshes its ready file every second (lifecycle.HEARTBEAT_S) while it can
# make progress; silent for this long (frozen, SIGSTOPped, wedged) it is killed and restarted.
LIVENESS_TIMEOUT_S = 10.0

ServiceSpec = tuple[str, Sequence[str]]
# Where runtime.json keeps each embedded server's pid (a cluster node's is in `nats_nodes`,
# under the node's name).
_PID_FIELD = {"nats": "nats_pid", "postgres": "postgres_pid"}


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
                 servers: Mapping[str, Callable[[], int | None]] | None = None,
                 liveness_timeout: float = LIVENESS_TIMEOUT_S,
                 server_liveness_timeout: float = SERVER_LIVENESS_TIMEOUT_S,
                 users: ServiceUsers | None = None) -> None:
        self._children = [_Child(name, list(argv)) for name, argv in services]
        # Run as root: the services run as users of their own (service_users).
        self._users = users
        self._env = dict(env)
        self._log_dir = log_dir
        self._runtime_file = runtime_file
        self._info = info
        self._stop_timeout = stop_timeout
        self._liveness_timeout = liveness_timeout
        self._server_liveness_timeout = server_liveness_timeout
        # Embedded servers to keep alive: name ("nats", "postgres", or a cluster node's name such
        # as "nats-2") -> restart, returning the pid.
        self._servers = dict(servers or {})
        self._server_restart_at: dict[str, float] = {}
        self._server_failures: dict[str, int] = {}
        addresses = [("nats", _address(info.nats_url)), ("postgres", _address(info.database_url)),
                     *((node.name, _address(node.url)) for node in info.nats_nodes)]
        self._prober = ServerProber({name: addr for name, addr in addresses
                                     if name in self._servers and addr is not None})
        # Set by the signal handler, which only records it: logging from a
        # handler could re-enter a write already in progress on stderr.
        self._stop_signal: int | None = None

    def run(self) -> None:
        """Start every service and supervise until SIGTERM or SIGINT, then stop them."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        # A service writes its log through the descriptor it is given (as its own user, when
        # there are service users); reading the others' is not for it.
        log_folder(self._log_dir)
        self._prober.start()
        try:
            for child in self._children:
                self._spawn(child)
            self._publish()
            while self._stop_signal is None:
                self._check_frozen()
                if self._check() | self._check_servers():
                    self._publish()
                time.sleep(POLL_S)
            log.info("supervisor_stopping", signal=signal.Signals(self._stop_signal).name)
        finally:
            self._shutdown()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stop_signal = signum

    def _ready_file(self, child: _Child) -> Path:
        if self._users is not None and self._users.hosts(child.name):
            return self._users.ready_file(child.name)
        return self._log_dir.parent / "run" / f"{child.name}.ready"

    def _spawn(self, child: _Child) -> None:
        child.started = time.monotonic()
        child.ready = False
        ready = self._ready_file(child)
        ready.parent.mkdir(parents=True, exist_ok=True)
        ready.unlink(missing_ok=True)
        metrics.port_file(ready).unlink(missing_ok=True)
        self._info = msgspec.structs.replace(self._info, metrics_ports={
            k: v for k, v in self._info.metrics_ports.items() if k != child.name})
        argv, env = child.argv, {**self._env, "AGENTLEDGER_READY_FILE": str(ready)}
        options: ServiceProcess = {}
        try:
            if self._users is not None and self._users.hosts(child.name):
                argv, env, options = self._users.launch(child.name, argv, env)
            with open_log(self._log_dir / f"{child.name}.log") as out:
                child.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                              stdout=out, stderr=subprocess.STDOUT, **options)
        except (OSError, AgentLedgerError) as exc:
            log.error("service_spawn_failed", child=child.name, error=str(exc))
            self._schedule_restart(child)
            return
        log.info("service_started", child=child.name, pid=child.proc.pid,
                 attempt=child.failures)

    def _silent_s(self, child: _Child) -> float:
        """Seconds since the service last refreshed its heartbeat (its ready file)."""
        try:
            return time.time() - self._ready_file(child).stat().st_mtime
        except FileNotFoundError:
            return float("inf")

    def _schedule_restart(self, child: _Child) -> float:
        if time.monotonic() - child.started >= STABLE_AFTER_S:
            child.failures = 0
        child.failures += 1
        delay = 0.0 if child.failures == 1 else min(BACKOFF_BASE_S * 2.0 ** (child.failures - 2),
                                                     BACKOFF_CAP_S)
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
                        changed |= self._note_metrics_port(child)
                    elif child.ready and (silent := self._silent_s(child)) > self._liveness_timeout:
                        # Alive as a pid, dead as a service: the next poll sees the exit and restarts it.
                        log.error("service_unresponsive", child=child.name, pid=child.proc.pid,
                                  silent_s=round(silent, 1))
                        child.proc.kill()
                    continue
                delay = self._schedule_restart(child)
                log.warning("service_exited", child=child.name, pid=child.proc.pid,
                            exit_code=code, restart_in_s=delay, attempt=child.failures)
                child.proc = None
                changed = True
                if delay > 0:
                    continue
                # Restarted in this pass, not the next one: a poll (POLL_S) less of outage.
            if time.monotonic() >= child.restart_at:
                log.info("service_restarting", child=child.name, attempt=child.failures)
                metrics.SUPERVISOR_RESTARTS.inc(process=child.name)
                self._spawn(child)
                changed = True
        return changed

    def _note_metrics_port(self, child: _Child) -> bool:
        """Record the port a ready service's scrape endpoint bound (it wrote it beside its ready
        file, shell/metrics.py); whether runtime.json changes."""
        ports = dict(self._info.metrics_ports)
        port = metrics.read_port(self._ready_file(child))
        if port is None or ports.get(child.name) == port:
            return False
        ports[child.name] = port
        self._info = msgspec.structs.replace(self._info, metrics_ports=ports)
        return True

    def _check_frozen(self) -> None:
        """SIGKILL an embedded server the prober has not heard from for too long (then it is dead)."""
        now = time.monotonic()
        for name in self._servers:
            pid = self._server_pid(name)
            silent = now - self._prober.last_answer(name, now)
            if pid is not None and pid_alive(pid) and silent > self._server_liveness_timeout:
                log.error("server_unresponsive", server=name, pid=pid, silent_s=round(silent, 1))
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                self._prober.forget(name)

    def _check_servers(self) -> bool:
        """Restart an embedded server that died, on its own port and data; whether a pid changed.

        The services reconnect by themselves once it is back; a server that fails
        to start is retried every few seconds, and the failure is logged each time.
        """
        changed = False
        for name, restart in self._servers.items():
            pid = self._server_pid(name)
            if pid is not None and pid_alive(pid):
                continue
            now = time.monotonic()
            if now < self._server_restart_at.get(name, 0.0):
                continue
            log.warning("server_down", server=name, pid=pid)
            try:
                new_pid = restart()
            except AgentLedgerError as exc:
                failures = self._server_failures[name] = self._server_failures.get(name, 0) + 1
                delay = min(SERVER_RETRY_S * 2 ** (failures - 1), SERVER_RETRY_MAX_S)
                # The reason is at the end (the server's last log lines end with its FATAL line).
                log.error("server_restart_failed", server=name, attempt=failures,
                          retry_in_s=delay, error=str(exc)[-800:])
                self._server_restart_at[name] = now + delay
                continue
            self._server_failures.pop(name, None)
            log.info("server_restarted", server=name, pid=new_pid)
            self._prober.forget(name)
            self._set_server_pid(name, new_pid)
            changed = True
        return changed

    def _server_pid(self, name: str) -> int | None:
        if name in _PID_FIELD:
            return getattr(self._info, _PID_FIELD[name])  # type: ignore[no-any-return]
        return next((node.pid for node in self._info.nats_nodes if node.name == name), None)

    def _set_server_pid(self, name: str, pid: int | None) -> None:
        if name in _PID_FIELD:
            self._info = msgspec.structs.replace(self._info, **{_PID_FIELD[name]: pid})
            return
        nodes = [msgspec.structs.replace(node, pid=pid) if node.name == name else node
                 for node in self._info.nats_nodes]
        self._info = msgspec.structs.replace(self._info, nats_nodes=nodes)

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


class ServerProber:
    """Asks each embedded server for its greeting every few seconds, on a thread of its own.

    A stopped or hung process still accepts TCP connections (the kernel completes
    the handshake), so a connect proves nothing: NATS must send its ``INFO`` line,
    PostgreSQL must answer an SSL request with one byte. The thread keeps the
    supervisor's own loop from blocking on a frozen server.
    """

    def __init__(self, servers: Mapping[str, tuple[str, int]]) -> None:
        self._servers = dict(servers)
        self._answered: dict[str, float] = {}
        self._lock = threading.Lock()

    def start(self) -> None:
        if self._servers:
            threading.Thread(target=self._loop, name="server-prober", daemon=True).start()

    def last_answer(self, name: str, now: float) -> float:
        """When ``name`` last answered (``now`` if it was never probed or was just restarted)."""
        with self._lock:
            return self._answered.setdefault(name, now)

    def forget(self, name: str) -> None:
        """Start the clock afresh (a server that was just killed or restarted)."""
        with self._lock:
            self._answered.pop(name, None)

    def _loop(self) -> None:
        while True:
            for name, (host, port) in self._servers.items():
                if _greets(name, host, port):
                    with self._lock:
                        self._answered[name] = time.monotonic()
            time.sleep(SERVER_PROBE_S)


def _greets(name: str, host: str, port: int, timeout: float = 2.0) -> bool:
    """Whether the server on ``host:port`` speaks first (NATS) or answers (PostgreSQL) in time."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            if name == "postgres":
                sock.sendall(_PG_SSL_REQUEST)
                return sock.recv(1) in (b"N", b"S")
            return sock.recv(4) == b"INFO"
    except OSError:
        return False


# PostgreSQL's SSLRequest: length 8, code 80877103; the server answers one byte, 'S' or 'N'.
_PG_SSL_REQUEST = (8).to_bytes(4, "big") + (80877103).to_bytes(4, "big")


def _address(url: str | None) -> tuple[str, int] | None:
    """Host and port of a ``nats://`` or ``postgresql://`` URL (the first server of a list)."""
    if not url:
        return None
    parts = urlsplit(url.split(",")[0])
    if parts.hostname is None or parts.port is None:
        return None
    return parts.hostname, parts.port


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agentledger.runtime.supervisor",
                                     description="Run agentledger services, one process each.")
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--services", required=True,
                        help='JSON list of [name, argv] pairs, e.g. [["x", ["sleep", "9"]]]')
    parser.add_argument("--nats-pid", type=int, help="pid of the embedded NATS, if any")
    parser.add_argument("--postgres-pid", type=int, help="pid of the embedded PostgreSQL, if any")
    parser.add_argument("--nats-nodes", default="[]",
                        help='JSON list of the embedded NATS cluster\'s nodes, [{"name", "url", "pid"}]')
    parser.add_argument("--stop-timeout", type=float, default=STOP_TIMEOUT_S,
                        help="seconds a service gets to exit after SIGTERM before SIGKILL")
    parser.add_argument("--liveness-timeout", type=float, default=LIVENESS_TIMEOUT_S,
                        help="seconds a ready service may go without a heartbeat before it is killed")
    parser.add_argument("--server-liveness-timeout", type=float, default=SERVER_LIVENESS_TIMEOUT_S,
                        help="seconds an embedded server may go without answering before it is killed")
    args = parser.parse_args(argv)

    settings = from_env(data_dir=args.data_dir.absolute())
    logs.configure(settings.log_level, service="supervisor")
    # Its own scrape endpoint (restarts by process); no port file: it writes runtime.json itself.
    endpoint = metrics.open_endpoint(msgspec.structs.replace(settings, ready_file=None))
    servers: dict[str, Callable[[], int | None]] = {}
    if args.nats_pid is not None:
        servers["nats"] = lambda: EmbeddedNats(settings.data_dir, auth=AuthStore(settings.auth_root),
                                               server_root=settings.server_root).start().pid
    nodes = msgspec.json.decode(args.nats_nodes, type=list[NatsNode])
    if nodes:
        cluster = EmbeddedCluster(settings.data_dir, len(nodes), auth=AuthStore(settings.auth_root),
                                  server_root=settings.server_root)
        for node in nodes:
            servers[node.name] = lambda name=node.name: cluster.node(name).start().pid
    if args.postgres_pid is not None:
        servers["postgres"] = lambda: EmbeddedPostgres(settings.data_dir,
                                                       server_root=settings.server_root).start().pid
    services = msgspec.json.decode(args.services, type=list[tuple[str, list[str]]])
    users = ServiceUsers.of(settings, [name for name, _ in services])
    monitor = (EmbeddedNats(settings.data_dir, server_root=settings.server_root).monitor_port
               if args.nats_pid is not None else None)
    info = RuntimeInfo(nats_url=settings.nats_url, database_url=settings.database_url,
                       data_dir=str(settings.data_dir), supervisor_pid=os.getpid(),
                       nats_pid=args.nats_pid, postgres_pid=args.postgres_pid,
                       nats_nodes=nodes, started_at=datetime.now(UTC), nats_monitor_port=monitor,
                       metrics_ports={} if endpoint.port is None else {"supervisor": endpoint.port})
    Supervisor(services, env={**os.environ, **settings_env(settings)},
               log_dir=settings.data_dir / "logs", runtime_file=settings.runtime_file,
               info=info, stop_timeout=args.stop_timeout, servers=servers,
               liveness_timeout=args.liveness_timeout,
               server_liveness_timeout=args.server_liveness_timeout, users=users).run()


if __name__ == "__main__":
    main()
