"""runtime.json: where the running runtime is, so every command can find it.

``agentledger up`` leaves servers and services running after it exits; the
supervisor records their URLs and pids in ``<data_dir>/runtime.json`` and keeps
the file current. Commands that leave ``AGENTLEDGER_NATS_URL`` /
``AGENTLEDGER_DATABASE_URL`` empty read their URLs from it.
"""

from __future__ import annotations

import os
import tempfile
from datetime import datetime
from pathlib import Path

import msgspec

from agentledger.config import Settings
from agentledger.errors import RuntimeStateError
from agentledger.runtime.embedded import pid_matches

# Module the supervisor runs as; also how its pid is told apart from a reused one.
SUPERVISOR_MODULE = "agentledger.runtime.supervisor"


class NatsNode(msgspec.Struct, kw_only=True, frozen=True):
    """One node of an embedded NATS cluster: its server name, client URL and pid (None while down)."""

    name: str
    url: str
    pid: int | None = None
    # Its monitoring endpoints' loopback port (/varz, /jsz, /healthz).
    monitor_port: int | None = None


class RuntimeInfo(msgspec.Struct, kw_only=True, frozen=True):
    """What ``up`` started: server URLs, and the pid of every process it owns."""

    # Every server's URL, comma-separated, when NATS is a cluster.
    nats_url: str
    database_url: str
    # A string: msgspec does not encode pathlib.Path.
    data_dir: str
    supervisor_pid: int
    # None when the server was given by URL instead of embedded, or is an embedded cluster.
    nats_pid: int | None = None
    # The embedded cluster's nodes (`up --cluster N`); empty for a single server or one given by URL.
    nats_nodes: list[NatsNode] = []
    postgres_pid: int | None = None
    # Service name -> pid of its live process; a crashed service is absent until restarted.
    services: dict[str, int] = {}
    # Process name ("supervisor" and each service) -> the port of its scrape endpoint
    # (shell/metrics.py), from when it reported ready; absent while it restarts.
    metrics_ports: dict[str, int] = {}
    # The embedded single server's monitoring port (/varz, /jsz, /healthz) on loopback.
    nats_monitor_port: int | None = None
    started_at: datetime


def read_runtime(path: Path) -> RuntimeInfo:
    """Read runtime.json; a missing or unreadable file means the runtime is not up."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise RuntimeStateError(f"agentledger is not up: {path} does not exist; "
                                "run `agentledger up`") from None
    try:
        return msgspec.json.decode(raw, type=RuntimeInfo)
    except msgspec.DecodeError as exc:
        raise RuntimeStateError(f"{path} is not a valid runtime file ({exc}); delete it once "
                                "no agentledger process runs, then run `agentledger up`") from exc


def write_runtime(path: Path, info: RuntimeInfo) -> None:
    """Replace runtime.json atomically, so readers never see a half-written file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(msgspec.json.format(msgspec.json.encode(info)))
            out.write(b"\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def supervisor_alive(info: RuntimeInfo) -> bool:
    """Whether the supervisor recorded in ``info`` still runs (not a reused pid)."""
    return pid_matches(info.supervisor_pid, SUPERVISOR_MODULE)


def resolve_urls(settings: Settings) -> Settings:
    """Fill empty NATS / database URLs from runtime.json; explicit URLs always win."""
    if settings.nats_url and settings.database_url:
        return settings
    try:
        info = read_runtime(settings.runtime_file)
    except RuntimeStateError:
        raise RuntimeStateError("agentledger is not up; run `agentledger up` or set "
                                "AGENTLEDGER_NATS_URL and AGENTLEDGER_DATABASE_URL") from None
    if not supervisor_alive(info):
        raise RuntimeStateError(f"agentledger is not up: its supervisor (pid "
                                f"{info.supervisor_pid}) is gone; run `agentledger down` "
                                "and `agentledger up`")
    return msgspec.structs.replace(settings, nats_url=settings.nats_url or info.nats_url,
                                   database_url=settings.database_url or info.database_url)


def settings_env(settings: Settings) -> dict[str, str]:
    """``AGENTLEDGER_*`` variables that make ``config.from_env`` rebuild ``settings``.

    The supervisor and services are separate processes: this is how they get
    exactly the settings ``up`` ran with, including values given as overrides.
    """
    return {f"AGENTLEDGER_{name.upper()}": str(value)
            for name in settings.__struct_fields__
            if (value := getattr(settings, name)) is not None}
