"""A dependency that fails is a typed, retryable ``unavailable`` naming it, never ``internal``.

The services run as OS processes, as ``agentledger up`` runs them, against a PostgreSQL
server of the test's own (the session's shared one is never stopped) or a NATS cluster of
its own whose node is killed. Every line a process logged is read back: each must be one
JSON object, and a dependency's outage a warning without a traceback.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import msgspec
import nats.errors
import nats.js.errors
import pytest
from nats.aio.client import Client as NATS

from agentledger.client import Client, connect
from agentledger.config import Settings
from agentledger.errors import AgentLedgerError
from agentledger.runtime import commands
from agentledger.runtime.postgres import EmbeddedPostgres, database_url
from agentledger.runtime.state import read_runtime, resolve_urls
from agentledger.security import auth
from agentledger.security.identity import REQUEST_INFO, Caller
from ckpt_support import Stack, created, end_process, service_env
from helpers import assert_eventually
from test_shell_service import EchoReply, EchoRequest, Probe, echo

TENANT = "acme"
# The services whose typed endpoints read PostgreSQL, each with the subject it is ready on.
SERVICES = {"ledger_writer": "writer.append", "memory_policy": "memory.get",
            "context_builder": "context.get", "tombstone_fanout": "forget.receipt",
            "checkpointer": "checkpoint.save"}
Call = Callable[[Client], Awaitable[Any]]
# One request of each PostgreSQL-backed service; each reads the database to answer.
CALLS: dict[str, Call] = {
    "memory.get": lambda c: c.memory_get(TENANT, "deploy_target", "tenant"),
    "context.get": lambda c: c.get_generation(TENANT, "g-none"),
    "forget.receipt": lambda c: c.forget_receipts(TENANT, request_id="r-none"),
    "resume": lambda c: c.resume(TENANT, "t-none", "agent-1"),
}
# The table each of those requests reads first: what its query waits on while it is locked.
READS = {"memory.get": "memory_records", "context.get": "context_generations",
         "forget.receipt": "forget_requests", "resume": "checkpoint_pointer"}
# The prepared transaction holding the tables (it outlives its session and the server's stop).
LOCKER = "deperr-lock-every-table"


class Services:
    """Service modules run as processes, each logging to a file of its own."""

    def __init__(self, settings: Settings, folder: Path) -> None:
        self.settings = settings
        self.folder = folder
        self.procs: dict[str, asyncio.subprocess.Process] = {}

    async def start(self, client: Client, modules: dict[str, str]) -> None:
        for module in modules:
            with (self.folder / f"{module}.log").open("wb") as log_file:
                self.procs[module] = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", f"agentledger.services.{module}",
                    env={**service_env(self.settings), "AGENTLEDGER_LOG_LEVEL": "info"},
                    stdout=log_file, stderr=log_file)
        for module, subject in modules.items():
            await assert_eventually(lambda s=subject, m=module: self._answers(client, s, m), timeout=120,
                                    interval=0.2, message=f"{module} never answered {subject}")

    async def _answers(self, client: Client, subject: str, module: str) -> bool:
        self.assert_alive(module)
        try:
            await client.nc.request(f"{self.settings.prefix}.{subject}", b"{}", timeout=1)
        except Exception:
            return False
        return True

    def assert_alive(self, *modules: str) -> None:
        for module in modules or tuple(self.procs):
            code = self.procs[module].returncode
            assert code is None, f"{module} exited with {code}: {self.log_lines(module)[-5:]}"

    async def stop(self) -> None:
        for proc in self.procs.values():
            await end_process(proc)

    def log_lines(self, module: str) -> list[str]:
        return (self.folder / f"{module}.log").read_text(errors="replace").splitlines()

    def logged(self) -> list[dict[str, Any]]:
        """Every line the processes logged, each parsed as the one JSON object it must be."""
        records = []
        for module in self.procs:
            for line in self.log_lines(module):
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    pytest.fail(f"{module} logged a line that is no JSON object: {line!r}")
                assert isinstance(record, dict), (module, line)
                records.append(record)
        return records


async def outcome(call: Call, client: Client) -> tuple[str, bool, str]:
    """The code, retryable and message a request answered with (``ok`` when it succeeded)."""
    try:
        await call(client)
    except AgentLedgerError as exc:
        return exc.code, exc.retryable, exc.message
    return "ok", False, ""


def served(result: tuple[str, bool, str]) -> bool:
    """The service answered from its database: anything but a dependency's error or a bug."""
    return result[0] not in ("unavailable", "internal")


@pytest.fixture
async def own_postgres(settings: Settings, tmp_path: Path, server_root: Path) -> AsyncIterator[
        tuple[Settings, EmbeddedPostgres]]:
    """A PostgreSQL server of this test alone, and ``settings`` pointing at it; it allows
    prepared transactions (``_lock_every_table``)."""
    pg = EmbeddedPostgres(tmp_path / "pg", server_root=server_root).start()
    try:
        conn = await asyncpg.connect(pg.url)
        try:
            await conn.execute("ALTER SYSTEM SET max_prepared_transactions = 2")
        finally:
            await conn.close()
        pg.stop()
        pg.start()
        url = pg.provision("agentledger")
        yield msgspec.structs.replace(settings, database_url=url, data_dir=tmp_path / "data"), pg
    finally:
        pg.stop()


async def _lock_every_table(super_url: str) -> asyncpg.Connection:
    """Every table of the services' database held by a prepared transaction (``LOCKER``):
    requests wait on it; returns the superuser session that prepared it.

    Not a session's open transaction: a fast shutdown terminates every session at once, and
    the holder's rollback could grant a waiter its lock before that waiter's own termination,
    so it read the table and answered (``not_found``) while the server stopped. A prepared
    transaction's locks outlive the stop (and the restart: ``_unlock_every_table``)."""
    conn = await asyncpg.connect(super_url)
    tables = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
    await conn.execute("BEGIN")
    await conn.execute("LOCK TABLE " + ", ".join(f'public."{t["tablename"]}"' for t in tables)
                       + " IN ACCESS EXCLUSIVE MODE")
    await conn.execute(f"PREPARE TRANSACTION '{LOCKER}'")
    return conn


async def _unlock_every_table(super_url: str) -> None:
    """Roll ``_lock_every_table``'s prepared transaction back (it came back with the server)."""
    conn = await asyncpg.connect(super_url)
    try:
        await conn.execute(f"ROLLBACK PREPARED '{LOCKER}'")
    finally:
        await conn.close()


async def _waiting_reads(locker: asyncpg.Connection) -> set[str]:
    """The requests (``READS``) whose query waits on a lock now."""
    queries = await locker.fetch("SELECT query FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                                 " AND datname = current_database()")
    return {name for name, table in READS.items()
            if any(f" FROM {table}" in r["query"] for r in queries)}


async def test_postgresql_stopping_and_away_answers_unavailable_and_no_service_ends(
        own_postgres: tuple[Settings, EmbeddedPostgres], tmp_path: Path) -> None:
    """Protects every PostgreSQL-backed service from a database outage: requests caught in flight
    by its shutdown (``AdminShutdownError``) and requests while it is away answer a typed,
    retryable ``unavailable`` naming the database, never ``internal``; no process exits; each
    line they logged is one JSON object, the outage logged as warnings without a traceback;
    once the server is back they answer from it again."""
    settings, pg = own_postgres
    services = Services(settings, tmp_path)
    client = await connect(settings, timeout=90)
    try:
        await services.start(client, SERVICES)
        for name, call in CALLS.items():
            assert served(await outcome(call, client)), name

        super_url = database_url(pg.url, "agentledger")
        locker = await _lock_every_table(super_url)
        caught = {name: asyncio.create_task(outcome(call, client)) for name, call in CALLS.items()}

        async def all_waiting() -> bool:
            # Each request's own query, not a count (a background loop may wait on a lock too).
            return await _waiting_reads(locker) == set(CALLS)

        await assert_eventually(all_waiting, timeout=60, interval=0.1,
                                message="the requests never reached the locked tables")
        await asyncio.to_thread(pg.stop)
        with contextlib.suppress(Exception):
            await locker.close(timeout=1)
        answers = {name: await task for name, task in caught.items()}
        for _ in range(3):
            for name, call in CALLS.items():
                answers[f"{name} (away)"] = await outcome(call, client)
        for name, (code, retryable, message) in answers.items():
            assert (code, retryable) == ("unavailable", True), (name, code, message)
            assert "the database" in message, (name, message)
        services.assert_alive()

        await asyncio.to_thread(pg.start)
        await _unlock_every_table(super_url)
        for name, call in CALLS.items():
            await assert_eventually(lambda c=call: _served_now(c, client), timeout=120, interval=0.5,
                                    message=f"{name} never answered again once PostgreSQL was back")
        services.assert_alive()
    finally:
        await client.close()
        await services.stop()
    records = services.logged()
    outages = [r for r in records if str(r.get("event", "")).endswith(".unavailable")]
    assert outages, "no request's outage was logged"
    assert all(r["level"] == "warning" and r.get("error") for r in outages), outages[:3]
    # The outage is expected: no line of it (the services' own, asyncpg's pool restoring its
    # floor) carries a traceback.
    traced = [(r.get("service"), r.get("logger"), r["event"]) for r in records if "exception" in r]
    assert not traced, traced


async def _served_now(call: Call, client: Client) -> bool:
    return served(await outcome(call, client))


# --- a NATS node killed --------------------------------------------------------------------------

@pytest.fixture
def cluster(tmp_path: Path, server_root: Path) -> Iterator[Settings]:
    """`up --cluster 3` of this test alone (its own nodes, PostgreSQL and services)."""
    settings = Settings(data_dir=tmp_path / "cluster", prefix="deperr", server_root=server_root,
                        cluster_size=3)
    try:
        commands.up(settings)
        yield resolve_urls(settings)
    finally:
        if settings.runtime_file.exists():
            commands.down(settings)


async def _leases_leader(settings: Settings) -> tuple[str, int]:
    """The node leading the leases bucket's stream, and its pid."""
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        info = await nc.jsm().stream_info(f"KV_{settings.prefix.upper()}_LEASES")
    finally:
        await nc.close()
    assert info.cluster is not None and info.cluster.leader
    node = next(n for n in read_runtime(settings.runtime_file).nats_nodes if n.name == info.cluster.leader)
    assert node.pid is not None
    return node.name, node.pid


async def _lease_round(client: Client, task: str, codes: collections.Counter[str]) -> None:
    """Acquire, renew and release a lease of ``task``, resume it and release the resume's lease;
    each outcome counted, the round ended by the first refusal (short leases: one a refusal
    left behind lapses within seconds)."""
    lease: Any = None
    for step in ("acquire", "renew", "release", "resume", "release-resumed"):
        try:
            if step == "acquire":
                lease = await client.acquire_lease(TENANT, task, "exec", ttl_s=5)
            elif step == "renew":
                lease = await client.renew_lease(TENANT, task, lease, ttl_s=5)
            elif step == "resume":
                lease = (await client.resume(TENANT, task, "exec", lease_ttl_s=5)).lease
            else:
                await client.release_lease(TENANT, task, lease)
        except AgentLedgerError as exc:
            codes[f"{step}:{exc.code}"] += 1
            return
        codes[f"{step}:ok"] += 1


@pytest.mark.timeout(420)
async def test_a_nats_node_killed_answers_leases_and_resume_unavailable_never_internal(
        cluster: Settings) -> None:
    """Protects lease calls and resume on the cluster: while the node leading the leases bucket
    is SIGKILLed and the supervisor restarts it, every lease acquire/renew/release and every
    resume answers or is refused typed (``unavailable`` while JetStream elects), never
    ``internal``; every line the services logged is one JSON object, none with a traceback;
    afterwards all serve."""
    settings = cluster
    client = await connect(settings, timeout=5, retries=0)
    codes: collections.Counter[str] = collections.Counter()
    try:
        tasks = [f"lease-{i}" for i in range(8)]
        for task in tasks:
            await client.append_batch([created(task)])
        await asyncio.gather(*(_lease_round(client, t, codes) for t in tasks))
        assert codes["resume:ok"] == len(tasks), codes
        codes.clear()

        name, pid = await _leases_leader(settings)
        os.kill(pid, signal.SIGKILL)
        loop = asyncio.get_running_loop()
        stop = loop.time() + 30
        while loop.time() < stop:  # rounds through the election and the node's restart
            await asyncio.gather(*(_lease_round(client, t, codes) for t in tasks))
        assert not [c for c in codes if c.endswith(":internal")], codes

        def restarted() -> bool:
            node = next(n for n in read_runtime(settings.runtime_file).nats_nodes if n.name == name)
            return node.pid not in (None, pid)

        await assert_eventually(restarted, timeout=90, message=f"{name} was not restarted")

        async def serving() -> bool:
            after: collections.Counter[str] = collections.Counter()
            await asyncio.gather(*(_lease_round(client, t, after) for t in tasks))
            assert not [c for c in after if c.endswith(":internal")], after
            return after["resume:ok"] == len(tasks)

        await assert_eventually(serving, timeout=120, interval=0.5, message="leases never served again")
    finally:
        await client.close()
    traced = []
    for log_file in (settings.data_dir / "logs").glob("*.log"):
        for line in log_file.read_text(errors="replace").splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                pytest.fail(f"{log_file.name} logged a line that is no JSON object: {line!r}")
            assert isinstance(record, dict), (log_file.name, line)
            if "exception" in record:
                traced.append((log_file.name, record["event"]))
    assert not traced, f"an outage logged with a traceback: {traced[:5]}"
    print(f"leases and resume while {name} was down: {dict(codes)}")


# --- each failure a handler may meet, through the shell -----------------------------------------

# What a handler's dependency raises, and what its reply must name (None: a bug, ``internal``).
RAISED: dict[str, tuple[BaseException, str | None]] = {
    "admin shutdown": (asyncpg.exceptions.AdminShutdownError("terminating connection due to "
                                                              "administrator command"), "the database"),
    "cannot connect now": (asyncpg.exceptions.CannotConnectNowError("the database system is "
                                                                     "shutting down"), "the database"),
    "too many connections": (asyncpg.exceptions.TooManyConnectionsError("sorry, too many clients"),
                             "the database"),
    "lost mid-statement": (asyncpg.InternalClientError("cannot switch to state 15"), "the database"),
    "no stream response": (nats.js.errors.NoStreamResponseError(), "JetStream"),
    "jetstream between leaders": (nats.js.errors.APIError(
        code=503, err_code=10008, description="JetStream system temporarily unavailable"), "JetStream"),
    "jetstream no responders": (nats.js.errors.ServiceUnavailableError(), "JetStream"),
    "nats timeout": (nats.errors.TimeoutError(), "NATS"),
    "nats closed": (nats.errors.ConnectionClosedError(), "NATS"),
    "no responders": (nats.errors.NoRespondersError(), "another agentledger service"),
    "unique violation": (asyncpg.exceptions.UniqueViolationError("duplicate key"), None),
    "key not found": (nats.js.errors.KeyNotFoundError(), None),
}


class Raiser(Probe):
    """The shell's probe service, its handler raising what the request's text names."""

    async def echo(self, caller: Caller, body: EchoRequest) -> EchoReply:
        raise RAISED[body.text][0]


@pytest.fixture
async def operator(settings: Settings) -> AsyncIterator[NATS]:
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        yield nc
    finally:
        await nc.close()


async def test_each_dependency_failure_is_unavailable_naming_it_and_a_bug_internal(
        settings: Settings, operator: NATS) -> None:
    """Protects the one classification every endpoint answers through: PostgreSQL shutting down,
    refusing or out of connections, asyncpg's broken protocol state, JetStream without a
    response or between leaders, NATS timing out or closed, no responder: retryable
    ``unavailable`` naming the dependency and nothing of the server's text; a constraint
    violation or a missing key (bugs if they escape) stay ``internal``."""
    probe = Raiser(settings)
    await probe.start()

    async def routed() -> bool:
        # The operator's route to a just-started service can lag its start on a loaded host
        # ("no responders" once in CI): any reply (an unknown text is a bug, ``internal``) says it
        # is there.
        with contextlib.suppress(nats.errors.NoRespondersError):
            return (await echo(operator, settings, {"tenant": TENANT, "text": "route?"})).error is not None
        return False

    try:
        await assert_eventually(routed, timeout=60, interval=0.2)
        for text, (raised, what) in RAISED.items():
            reply = await echo(operator, settings, {"tenant": TENANT, "text": text})
            assert reply.error is not None, text
            if what is None:
                assert (reply.error.code, reply.error.retryable) == ("internal", True), (text, reply.error)
            else:
                assert (reply.error.code, reply.error.retryable, reply.error.message) == (
                    "unavailable", True, f"{what} is unavailable; retry"), (text, type(raised).__name__)
    finally:
        await probe.stop()


async def test_the_writer_answers_a_tenant_lookup_its_bucket_cannot_serve_unavailable(
        settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    """Protects the writer's own-wire endpoints: a tenant agent's append, lease or artifact request
    whose account is not cached yet is looked up in the tenants bucket; with JetStream away that
    lookup fails, and the request answered nothing typed (the micro-service library's bare
    "500" with the exception's repr). Now each answers retryable ``unavailable`` naming
    JetStream."""
    stack = await Stack(settings).start(checkpointer=False, projector=False)
    try:
        registry = stack.writer._tenants
        assert registry is not None

        async def away(_account: str) -> None:
            raise nats.js.errors.ServiceUnavailableError

        monkeypatch.setattr(registry, "lookup", away)
        agent = {REQUEST_INFO: json.dumps({"acc": "A" + "D" * 55, "name_tag": "bot"})}
        body = json.dumps({"events": [created("t1")]}).encode()
        p = settings.prefix
        for subject, data in ((f"{p}.writer.append", body),
                              (f"{p}.lease.acquire", json.dumps({"tenant": TENANT, "task_id": "t1",
                                                                  "holder": "bot"}).encode()),
                              (f"{p}.artifact.stat", json.dumps({"uri": "artifact://x"}).encode())):
            msg = await stack.c.nc.request(subject, data, timeout=10, headers=agent)
            assert msg.data, (subject, msg.headers)
            error = json.loads(msg.data)["error"]
            assert (error["code"], error["retryable"], error["message"]) == (
                "unavailable", True, "JetStream is unavailable; retry"), subject
    finally:
        await stack.stop()
