"""The local runtime: embedded servers, the supervisor, runtime.json, up and down."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import nats
import pytest

from agentledger.config import Settings, from_env
from agentledger.errors import RuntimeStateError
from agentledger.runtime import commands
from agentledger.runtime.embedded import EmbeddedNats, pid_alive
from agentledger.runtime.postgres import EmbeddedPostgres
from agentledger.runtime.state import (
    RuntimeInfo,
    read_runtime,
    resolve_urls,
    settings_env,
    write_runtime,
)
from agentledger.security import auth
from agentledger.stores.witness import StartCheck
from helpers import assert_eventually

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]
# Ignores SIGTERM, and says so once it does (so the test knows the handler is in place).
STUBBORN = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, "
            "signal.SIG_IGN); print('ready', flush=True); time.sleep(600)"]
# Stands in for the ledger writer: answers the NATS micro PING that `up` waits for.
FAKE_WRITER = [sys.executable, "-c", f"""
import asyncio
from agentledger.security import auth
from agentledger.config import from_env
async def main():
    nc = await auth.connect(from_env(), auth.WRITER)
    async def pong(msg):
        await msg.respond(b"{{}}")
    await nc.subscribe("$SRV.PING.{commands.WRITER_SERVICE}", cb=pong)
    await asyncio.Event().wait()
asyncio.run(main())
"""]


# --- embedded servers ---------------------------------------------------------

@pytest.mark.asyncio
async def test_embedded_nats_is_durable_and_keeps_streams_across_restarts(tmp_path: Path) -> None:
    """Protects the ledger's durability: fsync before ack, and data that survives a restart.

    Also covers stopping a server through its pid file, which is how `down`
    stops a server that an earlier `up` process started.
    """
    first = EmbeddedNats(tmp_path).start()
    assert "sync_interval: always" in first.conf_file.read_text()
    nc = await nats.connect(first.url)
    js = nc.jetstream()
    await js.add_stream(name="DURABLE", subjects=["durable.>"])
    await js.publish("durable.one", b"kept")
    await nc.close()
    assert EmbeddedNats(tmp_path).pid == first.pid
    first_pid = first.pid
    assert first_pid is not None

    EmbeddedNats(tmp_path).stop()
    assert not pid_alive(first_pid)
    first.stop()

    with EmbeddedNats(tmp_path) as second:
        nc = await nats.connect(second.url)
        msg = await nc.jetstream().get_msg("DURABLE", 1)
        await nc.close()
    assert msg.data == b"kept"


@pytest.mark.asyncio
async def test_embedded_postgres_serves_tcp_and_keeps_data_across_restarts(
        tmp_path: Path, server_root: Path) -> None:
    """Protects the projection store: the cluster is created once and reused, data included.

    As root, PostgreSQL must run as its own user (it refuses root), which
    owns its home outside the data folder.
    """
    with EmbeddedPostgres(tmp_path, server_root=server_root) as server:
        if os.geteuid() == 0:
            assert server.pgdata.stat().st_uid != 0
        url = server.create_database("kept")
        assert server.create_database("kept") == url
        conn = await asyncpg.connect(url)
        await conn.execute("CREATE TABLE t (v text); INSERT INTO t VALUES ('kept')")
        await conn.close()
    assert EmbeddedPostgres(tmp_path).pid is None

    with EmbeddedPostgres(tmp_path) as server:
        conn = await asyncpg.connect(server.create_database("kept"))
        assert await conn.fetchval("SELECT v FROM t") == "kept"
        await conn.close()


# --- supervisor -----------------------------------------------------------------

StartSupervisor = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def start_supervisor(tmp_path: Path) -> Iterator[StartSupervisor]:
    """Start `python -m agentledger.runtime.supervisor` over the given services; kill it after."""
    started: list[subprocess.Popen[bytes]] = []

    def start(services: list[tuple[str, list[str]]], *extra: str) -> subprocess.Popen[bytes]:
        settings = Settings(nats_url="nats://127.0.0.1:1", database_url="postgresql://x/y",
                            data_dir=tmp_path)
        with (tmp_path / "supervisor.log").open("ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "agentledger.runtime.supervisor", "--data-dir",
                 str(tmp_path), "--services", json.dumps(services), *extra],
                env={**os.environ, **settings_env(settings)}, start_new_session=True,
                stderr=log)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _live_services(path: Path, names: set[str]) -> dict[str, int] | None:
    """The services in runtime.json if every one in ``names`` is listed and alive."""
    try:
        services = read_runtime(path).services
    except RuntimeStateError:
        return None
    if names <= services.keys() and all(pid_alive(pid) for pid in services.values()):
        return services
    return None


@pytest.mark.asyncio
async def test_supervisor_restarts_a_killed_service_and_stops_all_on_sigterm(
        tmp_path: Path, start_supervisor: StartSupervisor) -> None:
    """Protects self-healing: a crashed service comes back, runtime.json follows its pid,
    and SIGTERM to the supervisor leaves no service behind.

    Also checks that runtime.json written by the supervisor is what resolve_urls reads.
    """
    runtime = tmp_path / "runtime.json"
    supervisor = start_supervisor([("a", SLEEPER), ("b", SLEEPER)])
    before = await assert_eventually(lambda: _live_services(runtime, {"a", "b"}))
    assert before is not None
    assert read_runtime(runtime).supervisor_pid == supervisor.pid
    resolved = resolve_urls(Settings(data_dir=tmp_path, nats_url="nats://explicit:4222"))
    assert (resolved.nats_url, resolved.database_url) == ("nats://explicit:4222",
                                                          "postgresql://x/y")

    os.kill(before["a"], signal.SIGKILL)
    after = await assert_eventually(
        lambda: (s := _live_services(runtime, {"a", "b"})) and s["a"] != before["a"] and s)
    assert after
    assert after["b"] == before["b"]
    assert (tmp_path / "logs" / "a.log").exists()
    # Log lines name tenants and tasks: the operator's alone.
    assert (tmp_path / "logs").stat().st_mode & 0o777 == 0o700
    assert {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "logs").glob("*.log")} == {
        "a.log": 0o600, "b.log": 0o600}

    supervisor.send_signal(signal.SIGTERM)
    assert await assert_eventually(lambda: supervisor.poll() is not None) is True
    assert supervisor.returncode == 0
    assert not any(pid_alive(pid) for pid in after.values())
    assert read_runtime(runtime).services == {}


# Says it is ready the way a real service does (the file the supervisor names), then keeps
# refreshing it as its heartbeat, as lifecycle.serve does.
READY_SLEEPER = [sys.executable, "-c", "import os, pathlib, time\n"
                 "while True:\n pathlib.Path(os.environ['AGENTLEDGER_READY_FILE']).touch(); time.sleep(0.3)"]
# Gets ready, then falls silent while its pid lives on: a frozen or wedged service.
SILENT_AFTER_READY = [sys.executable, "-c", "import os, pathlib, time; "
                      "pathlib.Path(os.environ['AGENTLEDGER_READY_FILE']).touch(); time.sleep(600)"]


@pytest.mark.asyncio
async def test_a_restart_that_became_ready_resets_the_backoff(
        tmp_path: Path, start_supervisor: StartSupervisor) -> None:
    """Protects availability: five kills of a healthy service in a row never grow its restart delay,
    because each restart reported ready; a service that never gets ready backs off."""
    runtime = tmp_path / "runtime.json"
    start_supervisor([("ready", READY_SLEEPER), ("stuck", SLEEPER)])
    for _ in range(5):
        pid = (await assert_eventually(
            lambda: (s := _live_services(runtime, {"ready"})) and s["ready"], timeout=30))
        # The supervisor saw this very process get ready.
        await assert_eventually(lambda p=pid: any(
            '"service_ready"' in line and f'"pid": {p},' in line
            for line in (tmp_path / "supervisor.log").read_text().splitlines()), timeout=30)
        os.kill(pid, signal.SIGKILL)
        await assert_eventually(lambda p=pid: (s := _live_services(runtime, {"ready"})) and s["ready"] != p,
                                timeout=20)
    for _ in range(3):
        stuck = await assert_eventually(lambda: (s := _live_services(runtime, {"stuck"})) and s["stuck"],
                                        timeout=30)
        os.kill(stuck, signal.SIGKILL)
        await assert_eventually(lambda p=stuck: (s := _live_services(runtime, {"stuck"})) and s["stuck"] != p,
                                timeout=20)
    exits = [json.loads(line) for line in (tmp_path / "supervisor.log").read_text().splitlines()
             if '"service_exited"' in line]
    assert [e["attempt"] for e in exits if e["child"] == "ready"] == [1] * 5
    assert [e["attempt"] for e in exits if e["child"] == "stuck"] == [1, 2, 3]


@pytest.mark.asyncio
async def test_a_service_that_stops_its_heartbeat_is_killed_and_restarted(
        tmp_path: Path, start_supervisor: StartSupervisor) -> None:
    """Protects liveness: a process that stays alive as a pid but no longer refreshes its heartbeat
    (frozen by SIGSTOP, wedged on an await) is killed and restarted by the supervisor, which says
    why (`service_unresponsive`); one that keeps its heartbeat is left alone."""
    runtime = tmp_path / "runtime.json"
    start_supervisor([("silent", SILENT_AFTER_READY), ("beating", READY_SLEEPER)],
                     "--liveness-timeout", "1.5")
    first = await assert_eventually(lambda: _live_services(runtime, {"silent", "beating"}), timeout=30)
    assert first is not None
    again = await assert_eventually(
        lambda: (s := _live_services(runtime, {"silent", "beating"})) and s["silent"] != first["silent"]
        and s, timeout=30)
    assert again and again["beating"] == first["beating"]
    lines = [json.loads(line) for line in (tmp_path / "supervisor.log").read_text().splitlines()
             if '"service_unresponsive"' in line]
    assert lines and {e["child"] for e in lines} == {"silent"}
    assert lines[0]["pid"] == first["silent"] and lines[0]["silent_s"] >= 1.5


@pytest.mark.asyncio
async def test_supervisor_kills_a_service_that_ignores_sigterm(
        tmp_path: Path, start_supervisor: StartSupervisor) -> None:
    """Protects shutdown: a hung service cannot keep the supervisor (and `down`) waiting forever."""
    supervisor = start_supervisor([("stubborn", STUBBORN)], "--stop-timeout", "0.2")
    services = await assert_eventually(lambda: _live_services(tmp_path / "runtime.json",
                                                              {"stubborn"}))
    assert services is not None
    log = tmp_path / "logs" / "stubborn.log"
    await assert_eventually(lambda: log.exists() and "ready" in log.read_text())

    supervisor.send_signal(signal.SIGTERM)
    await assert_eventually(lambda: supervisor.poll() is not None)
    assert not pid_alive(services["stubborn"])


# --- runtime.json ---------------------------------------------------------------

def test_runtime_file_round_trips_and_absence_means_not_up(tmp_path: Path) -> None:
    """Protects the contract every command relies on to find a running runtime."""
    path = tmp_path / "runtime.json"
    with pytest.raises(RuntimeStateError, match="agentledger up"):
        read_runtime(path)
    with pytest.raises(RuntimeStateError, match="AGENTLEDGER_NATS_URL"):
        resolve_urls(Settings(data_dir=tmp_path))
    info = RuntimeInfo(nats_url="nats://a", database_url="postgresql://b", data_dir=str(tmp_path),
                       supervisor_pid=1, services={"x": 2},
                       started_at=datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC))
    write_runtime(path, info)
    assert read_runtime(path) == info
    assert list(tmp_path.iterdir()) == [path]


# --- up / down ------------------------------------------------------------------

def test_up_starts_everything_and_down_stops_everything(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server_root: Path) -> None:
    """Protects `agentledger up` / `down` end to end with embedded servers.

    The real services, migrations and stream setup belong to other modules:
    here stand-ins record the hooks `up` calls and answer the readiness PING.
    """
    prepared: list[str] = []

    async def migrate(dsn: str) -> None:
        prepared.append(f"migrate {dsn}")

    async def ensure_stream(settings: Settings) -> None:
        prepared.append(f"stream {settings.nats_url}")

    monkeypatch.setitem(sys.modules, "agentledger.stores.db", types.SimpleNamespace(migrate=migrate))
    async def check_up(settings: Settings, *, accept_rollback: bool) -> StartCheck:
        prepared.append(f"witness {settings.nats_url} accept_rollback={accept_rollback}")
        return StartCheck()

    monkeypatch.setitem(sys.modules, "agentledger.stores.ledger",
                        types.SimpleNamespace(ensure_stream=ensure_stream))
    monkeypatch.setitem(sys.modules, "agentledger.stores.witness", types.SimpleNamespace(check_up=check_up))
    monkeypatch.setattr(commands, "SERVICES", [("ledger-writer", FAKE_WRITER),
                                               ("projector", SLEEPER)])
    settings = Settings(data_dir=tmp_path, prefix="uptest", server_root=server_root)
    try:
        info = commands.up(settings)
        assert urlsplit(info.database_url).path == "/agentledger"
        assert prepared == [f"migrate {info.database_url}", f"stream {info.nats_url}",
                            f"witness {info.nats_url} accept_rollback=False"]
        assert set(info.services) == {"ledger-writer", "projector"}
        pids = [info.supervisor_pid, info.nats_pid, info.postgres_pid, *info.services.values()]
        assert all(pid is not None and pid_alive(pid) for pid in pids)
        assert resolve_urls(settings).database_url == info.database_url
        with pytest.raises(RuntimeStateError, match="already up"):
            commands.up(settings)
    finally:
        if settings.runtime_file.exists():
            commands.down(settings)
    assert not any(pid_alive(pid) for pid in pids if pid is not None)
    assert not settings.runtime_file.exists()
    with pytest.raises(RuntimeStateError, match="not up"):
        commands.down(settings)


async def _reachable(settings: Settings) -> None:
    """Both servers answer on the addresses ``settings`` resolved from runtime.json."""
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    await nc.close()
    conn = await asyncpg.connect(settings.database_url)
    assert await conn.fetchval("SELECT 1") == 1
    await conn.close()


def _servers_replaced(settings: Settings, info: RuntimeInfo, signum: int, *, within_s: float,
                      interval_s: float, failure: str) -> RuntimeInfo:
    """Send ``signum`` to both servers the stack of ``info`` runs, then wait until its supervisor
    has replaced both (new pids, alive); the runtime info it then records."""
    assert info.nats_pid is not None and info.postgres_pid is not None
    os.kill(info.nats_pid, signum)
    os.kill(info.postgres_pid, signum)
    deadline = datetime.now(UTC).timestamp() + within_s
    while True:
        now = read_runtime(settings.runtime_file)
        if (now.nats_pid not in (None, info.nats_pid) and now.postgres_pid not in (None, info.postgres_pid)
                and pid_alive(now.nats_pid) and pid_alive(now.postgres_pid)):
            return now
        assert datetime.now(UTC).timestamp() < deadline, failure
        subprocess.run(["sleep", str(interval_s)], check=True)


def test_the_supervisor_brings_killed_servers_back_on_the_same_addresses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server_root: Path) -> None:
    """Protects self-healing: SIGKILL of nats-server or PostgreSQL under a running stack is
    repaired by the supervisor, on the same port and data, with nothing to do by hand."""
    monkeypatch.setattr(commands, "SERVICES", [("ledger-writer", FAKE_WRITER)])
    settings = Settings(data_dir=tmp_path, prefix="healtest", server_root=server_root)
    try:
        info = commands.up(settings)
        after = _servers_replaced(settings, info, signal.SIGKILL, within_s=60, interval_s=0.1,
                                  failure="the servers did not come back")
        assert (after.nats_url, after.database_url) == (info.nats_url, info.database_url)
        asyncio.run(_reachable(resolve_urls(settings)))
    finally:
        if settings.runtime_file.exists():
            commands.down(settings)


def test_the_supervisor_replaces_frozen_servers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server_root: Path) -> None:
    """Protects self-healing from a hung server: nats-server and PostgreSQL frozen by SIGSTOP
    still accept TCP connections but never answer; the supervisor notices that they do not greet,
    kills them (`server_unresponsive`) and restarts them on the same addresses."""
    monkeypatch.setattr(commands, "SERVICES", [("ledger-writer", FAKE_WRITER)])
    monkeypatch.setattr(commands, "SUPERVISOR_OPTIONS", ["--server-liveness-timeout", "3"])
    settings = Settings(data_dir=tmp_path, prefix="frozentest", server_root=server_root)
    try:
        info = commands.up(settings)
        now = _servers_replaced(settings, info, signal.SIGSTOP, within_s=90, interval_s=0.2,
                                failure="the frozen servers were not replaced")
        assert not pid_alive(info.nats_pid) and not pid_alive(info.postgres_pid)
        assert (now.nats_url, now.database_url) == (info.nats_url, info.database_url)
        lines = (tmp_path / "logs" / "supervisor.log").read_text()
        assert '"server_unresponsive"' in lines
        asyncio.run(_reachable(resolve_urls(settings)))
    finally:
        for pid in (info.nats_pid, info.postgres_pid):
            with contextlib.suppress(ProcessLookupError, TypeError):
                os.kill(pid, signal.SIGCONT)
        if settings.runtime_file.exists():
            commands.down(settings)


# --- fixtures ---------------------------------------------------------------------

@pytest.mark.asyncio
async def test_settings_fixture_gives_a_private_database_and_prefix(settings: Settings) -> None:
    """Protects test isolation: each test's database and stream are its own."""
    conn = await asyncpg.connect(settings.database_url)
    assert await conn.fetchval("SELECT current_database()") == f"test_{settings.prefix}"
    await conn.close()
    nc = await auth.connect(settings, auth.WRITER)
    await nc.jetstream().add_stream(name=settings.stream, subjects=[f"{settings.prefix}.>"])
    await nc.close()
    assert settings.prefix.upper() in settings.stream


def test_settings_env_round_trips_and_skips_unset_values(tmp_path: Path) -> None:
    """Services rebuild exactly the settings `up` ran with; an unset optional is not the string 'None'."""
    settings = Settings(data_dir=tmp_path, prefix="p1", max_event_bytes=1234)
    env = settings_env(settings)
    assert "AGENTLEDGER_KEK_FILE" not in env
    assert from_env(env) == settings


def test_up_waits_while_the_processes_make_progress(tmp_path: Path) -> None:
    """Protects `up` on a slow, busy machine: it gave up after a fixed 30 s and tore down a stack
    that was still starting. Now it waits as long as some process writes to its log, fails when
    none did for the stall time, or at the ceiling, naming the processes not ready and the last
    line each logged (on a fake clock: nothing here depends on how fast the host is)."""
    now = [0.0]
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "ledger-writer.log").write_text('{"event": "writer.ready"}\n')
    progress = commands.StartProgress(logs, ["ledger-writer", "memory-policy"], stall_s=120, ceiling_s=600,
                             clock=lambda: now[0])
    for step in range(20):  # 400 s of a slow start in which the memory policy keeps logging
        now[0] += 20
        with (logs / "memory-policy.log").open("a") as f:
            f.write(f'{{"event": "memory.loading", "step": {step}}}\n')
        progress.check("the services did not all start", ["memory-policy"])
    now[0] += 121  # then nothing moves: the stall
    with pytest.raises(RuntimeStateError) as info:
        progress.check("the services did not all start", ["memory-policy"])
    message = str(info.value)
    assert "AGENTLEDGER_UP_STALL_S" in message
    assert 'memory-policy: {"event": "memory.loading", "step": 19}' in message
    assert "ledger-writer" not in message.split("not ready:")[1].split("(logs in", maxsplit=1)[0]

    busy = commands.StartProgress(logs, ["memory-policy"], stall_s=120, ceiling_s=600, clock=lambda: now[0])
    start = now[0]
    while now[0] - start <= 600:  # progress all along, but past the ceiling
        now[0] += 50
        with (logs / "memory-policy.log").open("a") as f:
            f.write('{"event": "memory.loading"}\n')
        if now[0] - start > 600:
            with pytest.raises(RuntimeStateError, match="AGENTLEDGER_UP_TIMEOUT_S"):
                busy.check("the services did not all start", ["memory-policy"])
        else:
            busy.check("the services did not all start", ["memory-policy"])


async def test_up_waits_out_a_store_that_answers_not_now_and_stops_at_other_errors() -> None:
    """A freshly elected cluster may time out the artifact bucket's first create, which the store
    reports as ``UnavailableError`` (retrying is safe): ``up`` tries again until its deadline
    instead of failing the start (a restore of a 3-node cluster failed so in CI); any other error,
    and a deadline that passes, stop it at once."""
    import time  # noqa: PLC0415

    from agentledger.errors import ContractError, UnavailableError  # noqa: PLC0415

    calls = 0

    async def slow_bucket() -> None:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise UnavailableError("artifact bucket X: TimeoutError()")

    await commands._until_streams_answer(slow_bucket, time.monotonic() + 3600)
    assert calls == 3

    async def refused() -> None:
        raise ContractError("a bad setting", code="invalid_config")

    with pytest.raises(ContractError):
        await commands._until_streams_answer(refused, time.monotonic() + 3600)

    async def never() -> None:
        raise UnavailableError("artifact bucket X: TimeoutError()")

    with pytest.raises(RuntimeStateError, match="was not ready within"):
        await commands._until_streams_answer(never, 0.0)
