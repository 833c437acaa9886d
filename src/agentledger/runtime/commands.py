"""``agentledger up`` / ``down``: start and stop the whole local runtime.

``up`` starts embedded NATS and PostgreSQL (unless URLs are given), applies
the database migrations, makes sure the ledger stream exists, then starts the
supervisor, which runs every service in ``SERVICES`` as its own process. It
returns once the ledger writer answers on NATS, so the runtime is usable the
moment the command finishes. ``down`` stops everything ``up`` started, using
the pids recorded in runtime.json.

With ``cluster_size`` N > 1 (``up --cluster 3``) the embedded NATS is N
nats-servers forming one JetStream cluster on loopback; ``up`` waits for its meta
leader, and the ledger stream, KV buckets and object store get
``stream_replicas`` (min(N, 3) unless set higher) replicas. See docs/scaling.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from pathlib import Path
from types import FrameType
from typing import Any

import msgspec
import nats
import nats.errors
import nats.js.errors
import structlog
from nats.aio.client import Client

from agentledger.config import Settings, nats_servers
from agentledger.errors import RuntimeStateError, UnavailableError
from agentledger.runtime import service_users
from agentledger.runtime.embedded import (
    EmbeddedCluster,
    EmbeddedNats,
    check_nats_layout,
    log_tail,
    pid_alive,
    terminate_pid,
)
from agentledger.runtime.hosting import isolating
from agentledger.runtime.logfiles import log_folder, open_log
from agentledger.runtime.postgres import EmbeddedPostgres
from agentledger.runtime.state import (
    SUPERVISOR_MODULE,
    NatsNode,
    RuntimeInfo,
    read_runtime,
    settings_env,
    supervisor_alive,
)
from agentledger.runtime.supervisor import STOP_TIMEOUT_S
from agentledger.security import auth
from agentledger.stores.natsclient import open_connection

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
# Services of which `up` runs ``instances`` processes: every one (docs/scaling.md says how each
# shares its work).
SCALED = tuple(name for name, _ in SERVICES)


def services_of(settings: Settings) -> list[tuple[str, list[str]]]:
    """``SERVICES`` with ``settings.instances`` of each: ``projector``, ``projector-2``, ...
    (each supervised, logged and listed in runtime.json on its own)."""
    return [(name if i == 1 else f"{name}-{i}", argv) for name, argv in SERVICES
            for i in range(1, settings.instances + 1)]


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

# Servers and supervisors `up` left running. Holding on to them keeps their Popen
# objects from being collected while the processes run (which warns "subprocess
# is still running"); once this process exits they are reparented to init.
_left_running: list[object] = []


def up(settings: Settings, *, foreground: bool = False,
       on_ready: Callable[[RuntimeInfo], None] | None = None, accept_rollback: bool = False,
       serve_tenants: bool = True) -> RuntimeInfo:
    """Start the runtime and return what runs where once the ledger writer answers.

    Synchronous (it runs its own event loops): call it from a thread when an
    event loop is already running.

    In the background mode (default) everything keeps running after this
    process exits. With ``foreground=True`` this blocks until Ctrl-C or
    SIGTERM, calls ``on_ready`` once the runtime is up (so the caller can say
    so while blocked), and stops everything before returning.
    Anything started before a failure is stopped again before the error propagates.

    A ledger behind its witness (``stores.witness``: cut back, or the data folder restored
    from an older copy) is refused with ``IntegrityViolationError`` before any service runs;
    ``accept_rollback`` serves it anyway and records in the witness what was lost.

    ``serve_tenants`` False leaves the tenants' accounts out of the NATS server (a fresh server
    knows none until they are pushed: ``auth.sync_tenants``), so only the operator is served:
    ``agentledger restore`` forgets again what it must before any tenant can connect.
    """
    settings = msgspec.structs.replace(settings, data_dir=settings.data_dir.absolute())
    _clear_stale(settings)
    with contextlib.ExitStack() as undo:
        nats_pid = postgres_pid = None
        nats_nodes: list[NatsNode] = []
        started: list[object] = []
        if not settings.nats_url:
            check_nats_layout(settings.data_dir, settings.cluster_size)
            identity = auth.AuthStore(settings.auth_root).init()
            if settings.cluster_size > 1:
                cluster = EmbeddedCluster(settings.data_dir, settings.cluster_size, auth=identity,
                                          server_root=settings.server_root).start()
                undo.callback(cluster.stop)
                started.append(cluster)
                nats_nodes = [NatsNode(name=node.name, url=node.url, pid=cluster.node(node.name).pid,
                                       monitor_port=cluster.node(node.name).monitor_port)
                              for node in cluster.record.nodes]
                settings = msgspec.structs.replace(settings, nats_url=cluster.url,
                                                   stream_replicas=cluster_replicas(settings))
            else:
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
        if nats_nodes:
            # JetStream must elect its meta leader before a stream can be created.
            asyncio.run(wait_for_cluster(settings, len(nats_nodes), time.monotonic() + settings.up_timeout_s))
        asyncio.run(_prepare(settings, accept_rollback=accept_rollback, serve_tenants=serve_tenants))
        undo.callback(settings.runtime_file.unlink, missing_ok=True)
        supervisor = _start_supervisor(settings, nats_pid, postgres_pid, foreground, nats_nodes)
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


def cluster_replicas(settings: Settings) -> int:
    """Replicas on an embedded cluster of ``cluster_size`` nodes: ``stream_replicas`` when set above
    1, else min(nodes, 3) (R3 survives the loss of one node; more replicas cost latency)."""
    if settings.stream_replicas > settings.cluster_size:
        raise RuntimeStateError(f"stream_replicas {settings.stream_replicas} is more than the "
                                f"{settings.cluster_size} nodes of the cluster")
    return settings.stream_replicas if settings.stream_replicas > 1 else min(settings.cluster_size, 3)


async def _prepare(settings: Settings, *, accept_rollback: bool = False, serve_tenants: bool = True) -> None:
    """Bring the database schema, the ledger stream and (replicated) buckets up to date before
    any service runs, once the ledger is found at or past its witness."""
    # Imported here: these modules need the servers this module starts, not the reverse.
    from agentledger.stores.db import migrate  # noqa: PLC0415
    from agentledger.stores.ledger import ensure_stream  # noqa: PLC0415

    deadline = time.monotonic() + settings.up_timeout_s
    await migrate(settings.database_url)
    # A cluster that restarts elects each stream's leader after its meta leader: until then the
    # stream API times out or answers 503, so these are retried for a while.
    await _until_streams_answer(lambda: ensure_stream(settings), deadline)
    if settings.integrity:
        await _check_witness(settings, accept_rollback=accept_rollback)
    await _until_streams_answer(lambda: ensure_erasable_buckets(settings), deadline)
    if settings.stream_replicas > 1:
        await _until_streams_answer(lambda: ensure_bucket_replicas(settings), deadline)
    if serve_tenants and auth.auth_store(settings).initialized:
        # A server that lost its resolver folder would not know the tenants any more.
        await auth.sync_tenants(settings)


async def _check_witness(settings: Settings, *, accept_rollback: bool) -> None:
    """Contain a ledger behind its witness (``stores.witness.check_at_start``): say which tasks
    are fenced and what to do, or what an accepted rollback lost."""
    from agentledger.stores.witness import check_up  # noqa: PLC0415 - needs the servers, as above

    if isolating():
        # The writer runs as its own user and keeps the witness in its home.
        service_users.writer_home(settings).prepare()
        settings = service_users.with_witness(settings)
    found = await check_up(settings, accept_rollback=accept_rollback)
    if isolating():
        service_users.hand_witness_to_writer(settings)
    if found.accepted:
        log.warning("up.rollback_accepted", lost=len(found.accepted))
        print("agentledger: rollback accepted and recorded in the witness; lost:\n  "
              + "\n  ".join(found.accepted), file=sys.stderr)
    if found.fenced:
        log.error("up.tasks_fenced", tasks=len(found.fenced), filled=found.filled)
        print(f"agentledger: {len(found.fenced)} task(s) fenced, their ledger behind its witness (every "
              "other task is served; they answer integrity_violation):\n  " + "\n  ".join(found.fenced.values())
              + f"\nThe witness ({settings.witness_path}) records what the writer had committed. Put the newer "
              "copy of the data folder back (or the NATS store that holds these events) and run `agentledger "
              "up` again; only if that copy is gone for good, `agentledger up --accept-rollback` serves them "
              "as they are and records in the witness what was lost (docs/operations.md).", file=sys.stderr)
    if found.stream:
        log.error("up.ledger_cut", filled=found.filled)
        print(f"agentledger: {found.stream}; no task's chain is short, so nothing is fenced "
              f"({found.filled} sequence(s) taken so that none is handed out twice); `agentledger verify` "
              "audits the whole ledger", file=sys.stderr)


async def wait_for_cluster(settings: Settings, size: int, deadline: float) -> None:
    """Wait until JetStream's meta group has a leader that sees all ``size`` servers current,
    and every server serves JetStream to the services' account.

    Asks every server for its JetStream report over the system account
    (``$SYS.REQ.SERVER.PING.JSZ``); the leader's report lists its peers. A server can
    take a moment longer to enable JetStream for an account (10039 "JetStream not
    enabled for account" meanwhile), so each is then asked for the account's info.
    """
    sys_creds = auth.auth_store(settings).creds(auth.SYS_ROLE)
    tls = ({"tls": ssl.create_default_context(cafile=str(settings.nats_ca_file))}
           if settings.nats_ca_file is not None else {})
    nc = await open_connection(settings.nats_url, user_credentials=str(sys_creds),
                               name="agentledger-up", connect_timeout=5, reconnect_time_wait=0.25,
                               **tls)
    seen = "no answer"
    try:
        while (seen := await _meta_state(nc, size)) != "ready":
            _check_deadline(deadline, f"no JetStream meta leader with all {size} servers current: {seen}")
            await asyncio.sleep(0.2)
    finally:
        await nc.close()
    for url in nats_servers(settings.nats_url):
        node = await auth.connect(msgspec.structs.replace(settings, nats_url=url), auth.OPERATOR_ROLE,
                                  allow_reconnect=False, connect_timeout=5)
        try:
            while True:
                try:
                    await node.jetstream().account_info()
                    break
                except nats.js.errors.Error as exc:
                    _check_deadline(deadline, f"{url} does not serve JetStream yet: {exc}")
                    await asyncio.sleep(0.2)
        finally:
            await node.close()


async def _until_streams_answer(step: Callable[[], Awaitable[None]], deadline: float) -> None:
    """Run ``step`` until the JetStream API stops answering "not now" (a timeout, 503, or a store
    that says so as ``UnavailableError``: the artifact bucket's first create on a cluster that has
    just elected its leaders), or ``deadline`` (monotonic) passes; any other error propagates at
    once."""
    while True:
        try:
            await step()
            return
        except (nats.errors.TimeoutError, nats.errors.NoRespondersError,
                nats.js.errors.ServiceUnavailableError, UnavailableError) as exc:
            _check_deadline(deadline, f"the JetStream API answers {exc!r}")
            log.info("jetstream_not_ready", error=repr(exc))
            await asyncio.sleep(0.5)


def _check_deadline(deadline: float, what: str) -> None:
    if time.monotonic() > deadline:
        raise RuntimeStateError(f"the NATS cluster was not ready within AGENTLEDGER_UP_TIMEOUT_S: {what}")


async def _meta_state(nc: Client, size: int) -> str:
    """"ready", or what the meta leader's JetStream report says is still missing."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    try:
        await nc.publish("$SYS.REQ.SERVER.PING.JSZ", b"{}", reply=inbox)
        reports: list[dict[str, Any]] = []
        with contextlib.suppress(nats.errors.TimeoutError):
            while len(reports) < size:
                reports.append(json.loads((await sub.next_msg(timeout=0.5)).data))
    finally:
        await sub.unsubscribe()
    for report in reports:
        meta = (report.get("data") or {}).get("meta_cluster") or {}
        if meta.get("leader") and meta.get("leader") == report.get("server", {}).get("name"):
            peers = meta.get("replicas") or []
            behind = [p.get("name") for p in peers if not p.get("current")]
            if meta.get("cluster_size") == size and len(peers) == size - 1 and not behind:
                return "ready"
            return f"meta leader {meta['leader']}, peers not current: {behind or 'unknown'}"
    return f"{len(reports)} of {size} servers answered, none is the meta leader"


async def ensure_erasable_buckets(settings: Settings) -> None:
    """Rebuild the buckets a forget erases entries of (tenants, bindings, data-subject keys,
    leases) where an older version made them deny message deletes (``bucket_migration``)."""
    # Imported here for the same reason as in _prepare.
    from agentledger.security.bindings import bindings_bucket  # noqa: PLC0415
    from agentledger.security.identity import tenants_bucket  # noqa: PLC0415
    from agentledger.stores.bucket_migration import make_erasable  # noqa: PLC0415

    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        for bucket in (tenants_bucket(settings.prefix), bindings_bucket(settings.prefix),
                       settings.keys_bucket, settings.leases_bucket):
            await make_erasable(nc.jetstream(), bucket)
    finally:
        await nc.close()


async def ensure_bucket_replicas(settings: Settings) -> None:
    """Create the KV buckets and the object store with ``stream_replicas`` replicas, and bring
    existing ones (made R1 before) to that count, before any service opens them.

    The services create a missing bucket on first use; made here first, each is replicated
    from its first write (leases and data-subject keys must survive a node).
    """
    # Imported here for the same reason as in _prepare.
    from agentledger.security.bindings import bindings_bucket  # noqa: PLC0415
    from agentledger.security.identity import tenants_bucket  # noqa: PLC0415
    from agentledger.stores import artifacts, leases  # noqa: PLC0415
    from agentledger.stores.buckets import open_kv  # noqa: PLC0415

    replicas = settings.stream_replicas
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        js = nc.jetstream()
        for bucket in (tenants_bucket(settings.prefix), bindings_bucket(settings.prefix)):
            await open_kv(js, bucket, replicas=replicas)
        await open_kv(js, settings.keys_bucket, settings.max_keys_bytes, replicas=replicas)
        table = leases.LeaseTable(nc, settings.leases_bucket, _NO_GRANTS,
                                  max_bytes=settings.max_leases_bytes, replicas=replicas)
        await table.start()
        await table.stop()
        await artifacts.open(nc, settings)
        streams = [f"KV_{tenants_bucket(settings.prefix)}", f"KV_{bindings_bucket(settings.prefix)}",
                   f"KV_{settings.keys_bucket}", f"KV_{settings.leases_bucket}",
                   f"OBJ_{artifacts.artifacts_bucket(settings)}"]
        # The memory put-back reference: created by memory-policy's leader (which fills it the
        # first time), brought to the count here once it exists.
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await js.stream_info(settings.reach_stream)
            streams.append(settings.reach_stream)
        for name in streams:
            config = (await js.stream_info(name)).config
            if config.num_replicas != replicas:
                log.info("bucket_replicas_changed", stream=name, replicas=replicas,
                         was=config.num_replicas)
                config.num_replicas = replicas
                await js.update_stream(config)
    finally:
        await nc.close()


class _NoGrants:
    """The lease table opened by ``ensure_bucket_replicas`` only creates its bucket: no grants."""

    async def task_last_seq(self, tenant: str, task_id: str) -> int:
        raise RuntimeStateError("no grants while preparing the buckets")

    async def record_grant(self, tenant: str, task_id: str, *, holder: str, expires_at: float,
                           secret_hash: str, expected_last_seq: int) -> int:
        raise RuntimeStateError("no grants while preparing the buckets")

    async def granted_at(self, tenant: str, task_id: str, token: int) -> tuple[str, str] | None:
        return None


_NO_GRANTS = _NoGrants()


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
    if info.nats_nodes:
        EmbeddedCluster(data_dir, len(info.nats_nodes)).stop()


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
                      foreground: bool, nats_nodes: list[NatsNode] | None = None,
                      ) -> subprocess.Popen[bytes]:
    """Start the supervisor in its own process group (its own session unless foreground).

    Its own group lets ``down`` reach services the supervisor left behind; its own
    session (background) keeps the terminal's Ctrl-C away from it. In the
    foreground it logs to the terminal and this process forwards the stop.
    """
    argv = [sys.executable, "-m", SUPERVISOR_MODULE, "--data-dir", str(settings.data_dir),
            "--services", json.dumps(services_of(settings)), *SUPERVISOR_OPTIONS]
    if nats_pid is not None:
        argv += ["--nats-pid", str(nats_pid)]
    if postgres_pid is not None:
        argv += ["--postgres-pid", str(postgres_pid)]
    if nats_nodes:
        argv += ["--nats-nodes", msgspec.json.encode(nats_nodes).decode()]
    env = {**os.environ, **settings_env(settings)}
    log_dir = log_folder(settings.data_dir / "logs")
    if foreground:
        return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, process_group=0)
    with open_log(log_dir / "supervisor.log") as out:
        return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _stop_process(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(STOP_TIMEOUT_S + 5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class StartProgress:
    """Whether the processes ``up`` started are getting anywhere: each one's log growing.

    ``check`` fails when none of them wrote to its log for ``stall_s`` (a wedged start), or
    once ``ceiling_s`` passed whatever happens; so a slow, busy machine is waited for as
    long as something moves. The error names the processes not ready yet and the last line
    each one logged.
    """

    def __init__(self, log_dir: Path, names: Sequence[str], *, stall_s: float, ceiling_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._log_dir = log_dir
        self._names = [*names, "supervisor"]
        self.stall_s, self.ceiling_s = stall_s, ceiling_s
        self._clock = clock
        self._sizes = self._read()
        self._started = self._moved = clock()

    def _read(self) -> tuple[int, ...]:
        sizes = []
        for name in self._names:
            try:
                sizes.append((self._log_dir / f"{name}.log").stat().st_size)
            except OSError:
                sizes.append(-1)
        return tuple(sizes)

    def check(self, what: str, waiting: Sequence[str]) -> None:
        """Raise ``RuntimeStateError`` (``what`` has not happened; ``waiting`` are the processes
        not ready) if nothing moved for ``stall_s`` or the ceiling passed."""
        now = self._clock()
        sizes = self._read()
        if sizes != self._sizes:
            self._sizes, self._moved = sizes, now
        if now - self._started > self.ceiling_s:
            why = f"within the ceiling of {self.ceiling_s:.0f} s (AGENTLEDGER_UP_TIMEOUT_S)"
        elif now - self._moved > self.stall_s:
            why = (f"and no process wrote to its log for {self.stall_s:.0f} s "
                   "(AGENTLEDGER_UP_STALL_S)")
        else:
            return
        lasts = "\n".join(f"  {name}: {self.last_line(name)}" for name in waiting)
        raise RuntimeStateError(f"{what} {why}; not ready:\n{lasts}\n"
                                f"(logs in {self._log_dir})")

    def last_line(self, name: str) -> str:
        lines = log_tail(self._log_dir / f"{name}.log", 1).strip()
        return lines or "(nothing logged yet)"


def _wait_until_up(settings: Settings, supervisor: subprocess.Popen[bytes]) -> RuntimeInfo:
    """Wait until runtime.json lists a live pid for every service and the services answer,
    for as long as the processes make progress (``StartProgress``)."""
    log_dir = settings.data_dir / "logs"
    names = sorted(name for name, _ in services_of(settings))
    progress = StartProgress(log_dir, names, stall_s=settings.up_stall_s, ceiling_s=settings.up_timeout_s)
    while True:
        if supervisor.poll() is not None:
            raise RuntimeStateError(f"the supervisor exited with {supervisor.returncode}:\n"
                                    f"{log_tail(log_dir / 'supervisor.log')}")
        info = _read_if_present(settings.runtime_file)
        live = set() if info is None or info.supervisor_pid != supervisor.pid else {
            name for name in names if name in info.services and pid_alive(info.services[name])}
        if live >= set(names):
            break
        progress.check("the services did not all start", [n for n in names if n not in live])
        time.sleep(0.05)
    for name, micro in READY_PINGS.items():
        if name in names:
            asyncio.run(_answers(settings, micro, partial(
                progress.check, f"the {name} did not answer on $SRV.PING.{micro}", [name])))
    return read_runtime(settings.runtime_file)


def _read_if_present(path: Path) -> RuntimeInfo | None:
    try:
        return read_runtime(path)
    except RuntimeStateError:
        return None


async def _answers(settings: Settings, micro: str, check: Callable[[], None]) -> None:
    """Ping a NATS micro service until it answers; ``check`` raises when waiting should end."""
    nc = await auth.connect(settings, auth.OPERATOR_ROLE, connect_timeout=5, max_reconnect_attempts=3)
    try:
        while True:
            try:
                await nc.request(f"$SRV.PING.{micro}", b"", timeout=1.0)
                return
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError):
                check()
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
