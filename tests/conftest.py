"""Fixtures: real NATS and PostgreSQL servers, and isolated Settings per test.

By default the session starts embedded servers (the same ones ``agentledger
up`` uses); set AGENTLEDGER_TEST_NATS_URL / AGENTLEDGER_TEST_DATABASE_URL to
run against servers of your own. Each test gets its own subject prefix (so
its own stream) and its own freshly created database, so tests never see
each other's data and can run in any order.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import secrets
import shutil
import tempfile
import threading
import uuid
from collections.abc import AsyncIterator, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentledger.config import Settings
from agentledger.errors import RuntimeStateError
from agentledger.runtime.embedded import EmbeddedNats
from agentledger.runtime.hosting import DEFAULT_SERVER_ROOT, remove_instances
from agentledger.runtime.postgres import (
    EmbeddedPostgres,
    create_database,
    database_url,
    drop_database,
    drop_role,
    ensure_role,
    psql,
    role_url,
    write_passfile,
)
from agentledger.security import auth
from agentledger.security.auth import AuthStore
from agentledger.stores.ledger import ensure_stream
from hang_watch import HangWatch
from raw_ledger import Ledger

# Key-encryption keys live outside the data folders, by default under $XDG_CONFIG_HOME: the
# test session's (and its service processes') go to a folder of their own, removed with the
# session (it holds keys).
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="agentledger-test-config-")
atexit.register(shutil.rmtree, os.environ["XDG_CONFIG_HOME"], ignore_errors=True)

_hang_watch = HangWatch()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Each test under the hang watch (``hang_watch``: its pending tasks dumped before a timeout)."""
    _hang_watch.begin(item)
    try:
        yield
    finally:
        _hang_watch.end()


@pytest.fixture(scope="session")
def nats_auth(tmp_path_factory: pytest.TempPathFactory) -> AuthStore | None:
    """The operator identity of the session's server; None for an external open server.

    With AGENTLEDGER_TEST_NATS_URL the server is yours: point
    AGENTLEDGER_TEST_NATS_AUTH_DIR at the auth dir it was configured from
    (`agentledger auth server-config`), or leave it unset for an open server,
    on which the isolation tests are skipped.
    """
    if os.environ.get("AGENTLEDGER_TEST_NATS_URL"):
        folder = os.environ.get("AGENTLEDGER_TEST_NATS_AUTH_DIR")
        return AuthStore(Path(folder)) if folder else None
    return AuthStore(tmp_path_factory.mktemp("auth")).init()


@pytest.fixture(scope="session")
def nats_server_url(tmp_path_factory: pytest.TempPathFactory, nats_auth: AuthStore | None,
                    server_root: Path) -> Iterator[str]:
    """URL of a JetStream-enabled NATS server in operator mode, shared by the whole session."""
    url = os.environ.get("AGENTLEDGER_TEST_NATS_URL")
    if url:
        yield url
        return
    with EmbeddedNats(tmp_path_factory.mktemp("nats"), auth=nats_auth,
                      server_root=server_root) as server:
        yield server.url


@pytest.fixture(scope="session", autouse=True)
def server_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Where embedded servers started as root keep their homes; removed, users included, at the end.

    Autouse and session-wide, so it is torn down after every server fixture stopped.
    """
    root = Path(tempfile.mkdtemp(prefix="agentledger-test-servers-"))
    # mkdtemp makes it 0700; the servers' users must pass through it to their homes.
    root.chmod(0o711)
    yield root
    remove_instances(root)
    # Servers started by tests without a server root got homes under the default one.
    remove_instances(DEFAULT_SERVER_ROOT, data_under=tmp_path_factory.getbasetemp())
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres_url(server_root: Path) -> Iterator[str]:
    """Superuser URL of a PostgreSQL server's maintenance database, shared by the whole session.

    Superuser because the fixtures create and drop databases and roles; tests
    themselves connect as the non-superuser ``postgres_role``.
    """
    url = os.environ.get("AGENTLEDGER_TEST_DATABASE_URL")
    if url:
        yield url
        return
    # Not under pytest's basetemp, which a second session on this machine may clean up meanwhile.
    data_dir = Path(tempfile.mkdtemp(prefix="agentledger-test-pg-"))
    try:
        with EmbeddedPostgres(data_dir, server_root=server_root) as server:
            yield server.url
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


class PostgresRole:
    """A session's non-superuser login role, and the template its test databases copy."""

    def __init__(self, admin_url: str, folder: Path) -> None:
        self.admin_url = admin_url
        self.name = "agl_test_" + uuid.uuid4().hex[:8]
        self.template = f"{self.name}_template"
        self.passfile = folder / f"{self.name}.pgpass"
        password = secrets.token_urlsafe(24)
        write_passfile(self.passfile, self.name, password, host="*")
        ensure_role(admin_url, self.name, password)
        create_database(admin_url, self.template, owner=self.name)
        # As `up` does for the services' database: extensions only a superuser may create.
        with contextlib.suppress(RuntimeStateError):  # an external server without pgvector
            psql(database_url(admin_url, self.template), "CREATE EXTENSION IF NOT EXISTS vector;")

    def create_database(self, name: str) -> str:
        """A fresh database owned by the role; its URL logs in as the role."""
        create_database(self.admin_url, name, owner=self.name, template=self.template)
        return role_url(self.admin_url, self.name, name, self.passfile)

    def drop_database(self, name: str) -> None:
        drop_database(self.admin_url, name)

    def drop(self) -> None:
        """Drop the template and the role (every test database must be gone)."""
        drop_database(self.admin_url, self.template)
        drop_role(self.admin_url, self.name)


@pytest.fixture(scope="session")
def postgres_role(postgres_url: str) -> Iterator[PostgresRole]:
    """The non-superuser role (created once per session) that owns each test's database."""
    folder = Path(tempfile.mkdtemp(prefix="agentledger-test-role-"))
    role = PostgresRole(postgres_url, folder)
    try:
        yield role
    finally:
        with contextlib.suppress(RuntimeStateError):
            role.drop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def settings(nats_server_url: str, postgres_role: PostgresRole, tmp_path: Path,
             nats_auth: AuthStore | None) -> Iterator[Settings]:
    """Settings for one test: a unique prefix (stream) and a fresh database, both removed after.

    The database belongs to the session's non-superuser role, and the URL logs
    in as that role, as the services' URL does in production.
    """
    prefix = "t" + uuid.uuid4().hex[:10]
    database = f"test_{prefix}"
    database_url = postgres_role.create_database(database)
    test_settings = Settings(nats_url=nats_server_url, database_url=database_url,
                             data_dir=tmp_path, prefix=prefix,
                             auth_dir=nats_auth.root if nats_auth else None)
    yield test_settings
    postgres_role.drop_database(database)
    _run_in_thread(_delete_streams(test_settings))


@pytest.fixture
def admin(settings: Settings) -> Settings:
    """``settings`` of a NATS server with accounts (operator mode), where tenants and agents can
    be added and revoked; the test is skipped on a server without them."""
    if settings.auth_dir is None:
        pytest.skip("the NATS server runs without accounts (AGENTLEDGER_TEST_NATS_URL without "
                    "AGENTLEDGER_TEST_NATS_AUTH_DIR)")
    return settings


def _run_in_thread(coro: Coroutine[Any, Any, None]) -> None:
    """Run ``coro`` on a private loop in a thread, leaving pytest-asyncio's loop untouched."""
    failure: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(coro)
        except BaseException as exc:  # re-raised in the calling thread
            failure.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


async def _delete_streams(settings: Settings) -> None:
    """Delete the test's streams (named after its prefix) so a shared server does not fill up."""
    prefix = settings.prefix
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        jsm = nc.jsm()
        offset, names = 0, []
        while batch := await jsm.streams_info(offset):
            names += [info.config.name for info in batch if info.config.name]
            offset += len(batch)
        for name in names:
            if prefix.upper() in name.upper():
                await jsm.delete_stream(name)
    finally:
        await nc.close()


@pytest.fixture
async def ledger(settings: Settings) -> AsyncIterator[Ledger]:
    """The test's ledger stream, for publishing raw messages as the writer's NATS user."""
    await ensure_stream(settings)
    nc = await auth.connect(settings, auth.WRITER)
    yield Ledger(settings, nc)
    await nc.close()
