"""``agentledger up`` / ``down``: start and stop the whole local runtime.

``up`` starts embedded NATS and PostgreSQL (unless URLs are given), applies
the database migrations, makes sure the ledger stream exists, then starts the
supervisor, which runs every service in ``SERVICES`` as its own process. It
returns once the ledger writer answers on NATS, so the runtime is usable the
moment the command finishes. ``down`` stops everything ``up`` started, using
the pids recorded in runtime.json.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType

import msgspec
import nats
import nats.errors
import structlog

from agentledger import auth
from agentledger.config import Settings
from agentledger.errors import RuntimeStateError
from agentledger.runtime.embedded import (
    EmbeddedNats,
    log_tail,
    pid_alive,
    terminate_pid,
)
from agentledger.runtime.postgres import EmbeddedPostgres
from agentledger.runtime.state import (
    SUPERVISOR_MODULE,
    RuntimeInfo,
    read_runtime,
    settings_env,
    supervisor_alive,
)
from agentledger.runtime.supervisor import STOP_TIMEOUT_S

log = structlog.get_logger(__name__)

# The one list of services; the supervisor receives it as JSON on its command line.
SERVICES: list[tuple[str, list[str]]] = [
    ("ledger-writer", [sys.executable, "-m", "agentledger.services.ledger_writer"]),
    ("projector", [sys.executable, "-m", "agentledger.services.projector"]),
    ("checkpointer", [sys.executable, "-m", "agentledger.services.checkpointer"]),
    ("memory-policy", [sys.executable, "-m", "agentledger.services.memory_policy"]),
    ("context-builder", [sys.executable, "-m", "agentledger.services.context_builder"]),
    ("tombstone-fanout", [sys.executable, "-m", "agentledger.services.tombstone_fanout"]),
]
# Extra supervisor flags (`python -m agentledger.runtime.supervisor --help`); empty: its defaults.
SUPERVISOR_OPTIONS: list[str] = []
# NATS micro service name of the ledger writer; `up` waits until it answers a PING.
WRITER_SERVICE = "agentledger-ledger-writer"
# Services whose endpoints a client calls the moment `up` returns (appends, memory proposals,
# context builds, forget requests):
# `up` also waits for each of these that it started to answer a PING.
READY_PINGS = {"ledger-writer": WRITER_SERVICE, "memory-policy": "agentledger-memory-policy",
               "context-builder": "agentledger-context-builder",
               "tombstone-fanout": "agentledger-tombstone-fanout"}
# Database created in the embedded PostgreSQL, owned by the services' role (the
# server's `postgres` db stays empty and closed to it).
EMBEDDED_DATABASE = "agentledger"
READY_TIMEOUT_S = 30.0

# Servers and supervisors `up` left running. Holding on to them keeps their Popen
# objects from being collected while the processes run (which warns "subprocess
# is still running"); once this process exits they are reparented to init.
_left_running: list[object] = []


def up(settings: Settings, *, foreground: bool = False,
       on_ready: Callable[[RuntimeInfo], None] | None = None) -> RuntimeInfo:
    """Start the runtime and return what runs where once the ledger writer answers.

    Synchronous (it runs its own event loops): call it from a thread when an
    event loop is already running.

    In the background mode (default) everything keeps running after this
    process exits. With ``foreground=True`` this blocks until Ctrl-C or
    SIGTERM, calls ``on_ready`` once the runtime is up (so the caller can say
    so while blocked), and stops everything before returning.
    Anything started before a failure is stopped again before the error propagates.
    """
    settings = msgspec.structs.replace(settings, data_dir=settings.data_dir.absolute())
    _clear_stale(settings)
    with contextlib.ExitStack() as undo:
        nats_pid = postgres_pid = None
        started: list[object] = []
        if not settings.nats_url:
            identity = auth.AuthStore(settings.auth_root).init()
            embedded_nats = EmbeddedNats(settings.data_dir, auth=identity,
                                         server_root=settings.server_root).start()
            undo.callback(embedded_nats.stop)
            started.append(embedded_nats)
            nats_pid = embedded_nats.pid
            settings = msgspec.structs.replace(settings, nats_url=embedded_nats.url)
        if not settings.database_url:
            embedded_pg = EmbeddedPostgres(settings.data_dir,
                                           server_root=settings.server_root).start()
            undo.callback(embedded_pg.stop)
            postgres_pid = embedded_pg.pid
            # The services' role and database; the URL names a passfile, never the password.
            settings = msgspec.structs.replace(
                settings, database_url=embedded_pg.provision(EMBEDDED_DATABASE))
        asyncio.run(_prepare(settings))
        undo.callback(settings.runtime_file.unlink, missing_ok=True)
        supervisor = _start_supervisor(settings, nats_pid, postgres_pid, foreground)
        undo.callback(_stop_process, supervisor)
        info = _wait_until_up(settings, supervisor)
        undo.pop_all()
    _left_running.extend([*started, supervisor])
    if foreground:
        _block_until_stopped(settings, supervisor, info, on_ready)
    return info


def down(settings: Settings) -> None:
    """Stop the supervisor (and with it the services), then the embedded servers."""
    info = read_runtime(settings.runtime_file)
    _teardown(info)
    settings.runtime_file.unlink(missing_ok=True)


async def _prepare(settings: Settings) -> None:
    """Bring the database schema and the ledger stream up to date before any service runs."""
    # Imported here: these modules need the servers this module starts, not the reverse.
    from agentledger.db import migrate  # noqa: PLC0415
    from agentledger.ledger import ensure_stream  # noqa: PLC0415

    await migrate(settings.database_url)
    await ensure_stream(settings)
    if auth.auth_store(settings).initialized:
        # A server that lost its resolver folder would not know the tenants any more.
        await auth.sync_tenants(settings)


def _clear_stale(settings: Settings) -> None:
    """Refuse to start twice; clean up after a runtime whose supervisor died."""
    if not settings.runtime_file.exists():
        return
    info = read_runtime(settings.runtime_file)
    if supervisor_alive(info):
        raise RuntimeStateError(f"agentledger is already up (supervisor pid {info.supervisor_pid},"
                                f" NATS {info.nats_url}); run `agentledger down` first")
    log.warning("stale_runtime_cleared", supervisor_pid=info.supervisor_pid)
    _teardown(info)
    settings.runtime_file.unlink(missing_ok=True)


def _teardown(info: RuntimeInfo) -> None:
    data_dir = Path(info.data_dir)
    if supervisor_alive(info):
        # The supervisor gives its services STOP_TIMEOUT_S; allow a little more.
        terminate_pid(info.supervisor_pid, timeout=STOP_TIMEOUT_S + 5)
    _kill_orphaned_services(info)
    if info.postgres_pid is not None:
        EmbeddedPostgres(data_dir).stop()
    if info.nats_pid is not None:
        EmbeddedNats(data_dir).stop()


def _kill_orphaned_services(info: RuntimeInfo) -> None:
    """SIGKILL services left behind by a supervisor that was itself killed.

    Services share the supervisor's process group, so a service whose group
    is still the dead supervisor's pid is ours and not a reused pid.
    """
    for pid in info.services.values():
        with contextlib.suppress(ProcessLookupError):
            if pid_alive(pid) and os.getpgid(pid) == info.supervisor_pid:
                os.killpg(info.supervisor_pid, signal.SIGKILL)
                return


def _start_supervisor(settings: Settings, nats_pid: int | None, postgres_pid: int | None,
                      foreground: bool) -> subprocess.Popen[bytes]:
    """Start the supervisor in its own process group (its own session unless foreground).

    Its own group lets ``down`` reach services the supervisor left behind; its own
    session (background) keeps the terminal's Ctrl-C away from it. In the
    foreground it logs to the terminal and this process forwards the stop.
    """
    argv = [sys.executable, "-m", SUPERVISOR_MODULE, "--data-dir", str(settings.data_dir),
            "--services", json.dumps(SERVICES), *SUPERVISOR_OPTIONS]
    if nats_pid is not None:
        argv += ["--nats-pid", str(nats_pid)]
    if postgres_pid is not None:
        argv += ["--postgres-pid", str(postgres_pid)]
    env = {**os.environ, **settings_env(settings)}
    log_dir = settings.data_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    if foreground:
        return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, process_group=0)
    with (log_dir / "supervisor.log").open("ab") as out:
        return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _stop_process(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(STOP_TIMEOUT_S + 5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _wait_until_up(settings: Settings, supervisor: subprocess.Popen[bytes]) -> RuntimeInfo:
    """Wait until runtime.json lists a live pid for every service and the writer answers."""
    log_dir = settings.data_dir / "logs"
    names = {name for name, _ in SERVICES}
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        if supervisor.poll() is not None:
            raise RuntimeStateError(f"the supervisor exited with {supervisor.returncode}:\n"
                                    f"{log_tail(log_dir / 'supervisor.log')}")
        info = _read_if_present(settings.runtime_file)
        if (info is not None and info.supervisor_pid == supervisor.pid
                and names <= info.services.keys()
                and all(pid_alive(info.services[name]) for name in names)):
            break
        if time.monotonic() > deadline:
            tails = "\n".join(f"--- {name}.log\n{log_tail(log_dir / f'{name}.log')}"
                              for name in sorted(names))
            raise RuntimeStateError(f"services did not start within {READY_TIMEOUT_S:.0f} s\n"
                                    f"{tails}")
        time.sleep(0.05)
    for name, micro in READY_PINGS.items():
        if name in names and not asyncio.run(_answers(settings, micro, deadline)):
            raise RuntimeStateError(f"the {name} did not answer on $SRV.PING.{micro} "
                                    f"within {READY_TIMEOUT_S:.0f} s; its log ends with:\n"
                                    f"{log_tail(log_dir / f'{name}.log')}")
    return read_runtime(settings.runtime_file)


def _read_if_present(path: Path) -> RuntimeInfo | None:
    try:
        return read_runtime(path)
    except RuntimeStateError:
        return None


async def _answers(settings: Settings, micro: str, deadline: float) -> bool:
    """Ping a NATS micro service until it answers or ``deadline`` (monotonic) passes."""
    nc = await auth.connect(settings, auth.OPERATOR_ROLE, connect_timeout=5, max_reconnect_attempts=3)
    try:
        while True:
            try:
                await nc.request(f"$SRV.PING.{micro}", b"", timeout=1.0)
                return True
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
                if time.monotonic() > deadline:
                    return False
                await asyncio.sleep(0.1)
    finally:
        await nc.close()


def _block_until_stopped(settings: Settings, supervisor: subprocess.Popen[bytes],
                         info: RuntimeInfo,
                         on_ready: Callable[[RuntimeInfo], None] | None) -> None:
    """Foreground mode: run until Ctrl-C or SIGTERM (or the supervisor dies), then ``down``."""
    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        if on_ready is not None:
            on_ready(info)
        supervisor.wait()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        down(settings)
