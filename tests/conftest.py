"""Fixtures: real NATS and PostgreSQL servers, and isolated Settings per test.

By default the session starts embedded servers (the same ones ``agentledger
up`` uses); set AGENTLEDGER_TEST_NATS_URL / AGENTLEDGER_TEST_DATABASE_URL to
run against servers of your own. Each test gets its own subject prefix (so
its own stream) and its own freshly created database, so tests never see
each other's data and can run in any order.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest

from agentledger.config import Settings
from agentledger.runtime.embedded import (
    EmbeddedNats,
    EmbeddedPostgres,
    create_database,
    drop_database,
)


@pytest.fixture(scope="session")
def nats_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a JetStream-enabled NATS server shared by the whole session."""
    url = os.environ.get("AGENTLEDGER_TEST_NATS_URL")
    if url:
        yield url
        return
    with EmbeddedNats(tmp_path_factory.mktemp("nats")) as server:
        yield server.url


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a PostgreSQL server (its maintenance database) shared by the whole session."""
    url = os.environ.get("AGENTLEDGER_TEST_DATABASE_URL")
    if url:
        yield url
        return
    # Not under pytest's basetemp: a pytest session starting meanwhile (a second run on
    # the same machine) resets that tree to mode 0700, which would lock the server's
    # unprivileged user out of its own data directory.
    root = Path(tempfile.mkdtemp(prefix="agentledger-test-pg-"))
    try:
        with EmbeddedPostgres(root) as server:
            yield server.url
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def settings(nats_server_url: str, postgres_url: str, tmp_path: Path) -> Iterator[Settings]:
    """Settings for one test: a unique prefix (stream) and a fresh database, both removed after."""
    prefix = "t" + uuid.uuid4().hex[:10]
    database = f"test_{prefix}"
    database_url = create_database(postgres_url, database)
    yield Settings(nats_url=nats_server_url, database_url=database_url, data_dir=tmp_path,
                   prefix=prefix)
    drop_database(postgres_url, database)
    _run_in_thread(_delete_streams(nats_server_url, prefix))


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


async def _delete_streams(url: str, prefix: str) -> None:
    """Delete the test's streams (named after its prefix) so a shared server does not fill up."""
    nc = await nats.connect(url)
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
