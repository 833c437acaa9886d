"""`agentledger up --cluster 3`: the ledger on a 3-node JetStream cluster on loopback.

One stack for the module, as ``up --cluster 3`` runs it: three nats-servers (one JetStream
cluster, operator-mode accounts), PostgreSQL and every real service under the supervisor.
The ledger stream, KV buckets and object store are R3. Then nodes fail under load: the
ledger stream's leader and a follower are SIGKILLed while a client appends, and a node is
frozen (SIGSTOP) for longer than the election timeout and continued. The client retries an
append that answered ``unavailable`` with the same event ids, as any client should; after
each fault every acked event is in the stream exactly once and the projection equals
``replay --verify``.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import msgspec
import nats.errors
import nats.js.errors
import pytest

from agentledger.client import connect
from agentledger.config import Settings, from_env, nats_servers
from agentledger.contracts import events as ev
from agentledger.errors import ContractError, NotFoundError, RuntimeStateError, UnavailableError
from agentledger.runtime import commands
from agentledger.runtime.embedded import (
    NATS_BIN,
    ClusterNode,
    ClusterRecord,
    check_nats_layout,
    free_port,
    log_tail,
    pid_alive,
)
from agentledger.runtime.state import RuntimeInfo, read_runtime, resolve_urls
from agentledger.security import auth
from agentledger.security.auth import AuthStore
from agentledger.services.projector.rebuild import verify
from agentledger.services.projector.store import Store
from agentledger.stores.ledger import MSG_ID, ensure_stream, ledger_wildcard
from ckpt_support import created, event
from helpers import assert_eventually
from projection_support import raw_publish
from raw_ledger import Ledger
from test_deploy import _self_signed
from test_memory_service import proposal

TENANT = "acme"
PREFIX = "clustertest"
# Longer than NATS' election timeout (4 to 9 s) and than a connection's patience for an
# unanswered server (8 to 10 s, natsclient), shorter than the supervisor's patience for a server
# that does not greet (20 s since its last greeting), after which it would SIGKILL and restart it.
FREEZE_S = 16.0
# Longest time without an ack once a node froze: its routes close after 3 s, connections on it
# leave after 8 to 10 s, a new leader is elected 4 to 9 s after it stopped, and a request lost on
# the frozen node waits out the client's 10 s before it is sent again.
FROZEN_GAP_S = 14.0
# The client's own retries in the strict loads: each attempt waits up to 10 s, and the writer
# retries a publish for 4 s before it answers `unavailable`, so 5 retries outlast any election.
STRICT_RETRIES = 5


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, server_root: Path) -> Iterator[Settings]:
    """`up --cluster 3 --instances 2 --partitions 3` with the real services (two of each; the
    projectors share three partitions); the settings a client resolves from runtime.json."""
    settings = Settings(data_dir=tmp_path_factory.mktemp("cluster"), prefix=PREFIX,
                        server_root=server_root, cluster_size=3, instances=2,
                        projector_partitions=3)
    nodes = []
    try:
        nodes = commands.up(settings).nats_nodes
        yield resolve_urls(settings)
    finally:
        if settings.runtime_file.exists():
            nodes = runtime(settings).nats_nodes
            commands.down(settings)
    assert not any(n.pid is not None and pid_alive(n.pid) for n in nodes), "down left a node running"


def runtime(settings: Settings) -> RuntimeInfo:
    return read_runtime(settings.runtime_file)


def node_url(settings: Settings, name: str) -> str:
    return next(n.url for n in runtime(settings).nats_nodes if n.name == name)


async def ledger_cluster(settings: Settings) -> Any:
    """The ledger stream's cluster info (leader, replicas), asked over every node."""
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        return (await nc.jetstream().stream_info(settings.stream)).cluster
    finally:
        await nc.close()


async def replicas_current(settings: Settings) -> bool:
    """Whether every stream of the prefix has a leader and all its replicas caught up (False
    while the JetStream API itself is between leaders)."""
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        try:
            streams = await nc.jsm().streams_info()
        except (nats.errors.TimeoutError, nats.js.errors.ServiceUnavailableError):
            return False
        for info in streams:
            cluster = info.cluster
            if PREFIX.upper() not in (info.config.name or ""):
                continue
            if (cluster is None or not cluster.leader or len(cluster.replicas or []) != 2
                    or not all(r.current and not r.offline for r in cluster.replicas)):
                return False
        return True
    finally:
        await nc.close()


async def stream_ids(settings: Settings) -> collections.Counter[str]:
    """How often each message id (``tenant/task/event``) is in the ledger stream, read raw.

    Read again from the start when the new consumer is not served yet (503, a timeout).
    """
    stop = time.monotonic() + 60
    while True:
        try:
            return await _read_ids(settings)
        except (nats.errors.TimeoutError, nats.js.errors.ServiceUnavailableError):
            assert time.monotonic() < stop, "the ledger stream could not be read"
            await asyncio.sleep(0.5)


async def _read_ids(settings: Settings) -> collections.Counter[str]:
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        js = nc.jetstream()
        last = (await js.stream_info(settings.stream)).state.last_seq
        sub = await js.pull_subscribe(ledger_wildcard(settings.prefix), durable=None,
                                      stream=settings.stream)
        seen: collections.Counter[str] = collections.Counter()
        seq = 0
        while seq < last:
            for msg in await sub.fetch(500, timeout=5):
                seq = msg.metadata.sequence.stream
                seen[(msg.headers or {}).get(MSG_ID, "")] += 1
                await msg.ack()
        await sub.unsubscribe()
        return seen
    finally:
        await nc.close()


@dataclass
class Load:
    """Appends ``per_task`` events to each of ``tasks`` tasks, one task per worker, in order.

    An append that answers ``unavailable`` (or times out) is sent again with the same event
    id until it is acked: the writer deduplicates by id, so a retry of an event that was in
    fact stored answers ``duplicate`` with its first sequence.
    """

    settings: Settings
    run: str
    tasks: int = 10
    per_task: int = 100
    deadline_s: float = 120.0
    acked: dict[str, int] = field(default_factory=dict)
    ack_times: list[float] = field(default_factory=list)
    retries: int = 0
    in_process: int = 0
    # ``strict``: a client as an agent runs it (its own retries, 10 s per request), and an append
    # that still answers ``unavailable`` is recorded in ``refused`` instead of being sent again.
    strict: bool = False
    refused: list[str] = field(default_factory=list)

    def ids(self) -> list[str]:
        return [f"{TENANT}/{self.task(t)}/{self.event_id(t, i)}"
                for t in range(self.tasks) for i in range(self.per_task)]

    def task(self, t: int) -> str:
        return f"{self.run}-t{t}"

    def event_id(self, t: int, i: int) -> str:
        return f"{self.run}-t{t}-e{i}"

    async def __call__(self) -> None:
        client = await (connect(self.settings, retries=STRICT_RETRIES) if self.strict
                        else connect(self.settings, timeout=2.0, retries=0))
        try:
            await asyncio.gather(*(self._task(client, t) for t in range(self.tasks)))
        finally:
            await client.close()

    async def _task(self, client: Any, t: int) -> None:
        task = self.task(t)
        for i in range(self.per_task):
            eid = self.event_id(t, i)
            body = (created(task, event_id=eid) if i == 0 else
                    event("variable_set", {"name": f"v{i % 7}", "value": i}, task, event_id=eid))
            stop = time.monotonic() + self.deadline_s
            while True:
                try:
                    result = await client.append(body)
                    break
                except UnavailableError as exc:
                    if self.strict:
                        self.refused.append(f"{eid}: {exc}")
                    # JetStream 10158 ("duplicate message id is in process": an earlier copy is
                    # still being proposed) is answered unavailable too: the event will be stored.
                    self.retries += 1
                    self.in_process += "still being replicated" in str(exc)
                assert time.monotonic() < stop, f"{eid} was never acked"
                await asyncio.sleep(0.1)
            self.acked[f"{TENANT}/{task}/{eid}"] = result.seq
            self.ack_times.append(time.monotonic())

    def longest_gap(self, after: float) -> float:
        """Longest stretch without an ack from ``after`` on (the outage a fault caused)."""
        times = sorted([after, *(t for t in self.ack_times if t >= after)])
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)


async def check_exactly_once(settings: Settings, *loads: Load) -> None:
    """Every acked event is in the stream once, at the sequence it was acked with; and the
    projection, once it reaches the stream's end, equals a replay of the whole ledger."""
    seen = await stream_ids(settings)
    for load in loads:
        expected = set(load.ids())
        assert set(load.acked) == expected, f"{len(expected - set(load.acked))} events never acked"
        missing = [i for i in expected if seen[i] == 0]
        doubled = [i for i in expected if seen[i] > 1]
        assert not missing, f"{len(missing)} acked events are not in the stream: {missing[:5]}"
        assert not doubled, f"{len(doubled)} events are in the stream more than once: {doubled[:5]}"
        assert len(set(load.acked.values())) == len(load.acked), "two events acked with one seq"
    report = await verify(settings, wait_s=60)
    assert report.ok, report.summary()


async def heal(settings: Settings, name: str, old_pid: int) -> None:
    """Wait until the supervisor restarted node ``name`` and every stream is current again."""
    def restarted() -> bool:
        pid = next(n.pid for n in runtime(settings).nats_nodes if n.name == name)
        return pid not in (None, old_pid) and pid_alive(pid)

    await assert_eventually(restarted, timeout=60, interval=0.1,
                            message=f"the supervisor did not restart {name}")
    await assert_eventually(lambda: replicas_current(settings), timeout=60, interval=0.2,
                            message="the streams did not catch up")


async def add_tenant(settings: Settings, tenant: str) -> None:
    """``tenant add``, retried while a bucket it writes is between leaders (``unavailable``)."""
    stop = time.monotonic() + 60
    while True:
        try:
            await auth.tenant_add(settings, tenant)
            return
        except UnavailableError:  # a bucket between leaders: tenant add says so, typed
            assert time.monotonic() < stop, f"tenant add {tenant} never went through"
            await asyncio.sleep(0.5)


def node_of(settings: Settings, server_name: str) -> tuple[str, int]:
    node = next(n for n in runtime(settings).nats_nodes if n.name == server_name)
    assert node.pid is not None
    return node.name, node.pid


# --- settings and layout ---------------------------------------------------------------------------

def test_a_nats_url_may_list_several_servers_and_the_cluster_size_is_a_setting() -> None:
    """Protects the external form's configuration: AGENTLEDGER_NATS_URL with several URLs, and
    AGENTLEDGER_CLUSTER_SIZE, which `up --cluster N` sets."""
    assert nats_servers("nats://a:1, nats://b:2,,nats://c:3,") == ["nats://a:1", "nats://b:2", "nats://c:3"]
    assert nats_servers("nats://a:1") == ["nats://a:1"]
    assert from_env({"AGENTLEDGER_CLUSTER_SIZE": "3"}).cluster_size == 3
    with pytest.raises(ContractError, match="AGENTLEDGER_CLUSTER_SIZE"):
        from_env({"AGENTLEDGER_CLUSTER_SIZE": "0"})
    with pytest.raises(ContractError, match="AGENTLEDGER_STREAM_REPLICAS"):
        from_env({"AGENTLEDGER_STREAM_REPLICAS": "7"})
    assert commands.cluster_replicas(Settings(cluster_size=3)) == 3
    assert commands.cluster_replicas(Settings(cluster_size=5)) == 3
    assert commands.cluster_replicas(Settings(cluster_size=5, stream_replicas=5)) == 5
    with pytest.raises(RuntimeStateError, match="more than"):
        commands.cluster_replicas(Settings(cluster_size=3, stream_replicas=5))


def test_a_data_folder_keeps_the_nats_layout_it_was_started_with(tmp_path: Path) -> None:
    """Protects the ledger from a silent switch: a data folder that ran a single server refuses a
    cluster and the reverse, and a cluster refuses another size (each would serve an empty ledger
    beside the kept one)."""
    single, clustered = tmp_path / "single", tmp_path / "clustered"
    (single / "nats").mkdir(parents=True)
    (single / "nats" / "home.json").write_text("{}")
    check_nats_layout(single, 1)
    with pytest.raises(RuntimeStateError, match="single NATS server"):
        check_nats_layout(single, 3)
    clustered.mkdir()
    (clustered / "nats-cluster.json").write_bytes(msgspec.json.encode(ClusterRecord(
        name="agentledger", nodes=[ClusterNode(name=f"nats-{i}", port=1000 + i, route_port=2000 + i)
                                   for i in (1, 2, 3)])))
    check_nats_layout(clustered, 3)
    with pytest.raises(RuntimeStateError, match="--cluster 3"):
        check_nats_layout(clustered, 1)
    with pytest.raises(RuntimeStateError, match="--cluster 3"):
        check_nats_layout(clustered, 5)


# --- up --cluster 3 ------------------------------------------------------------------------------

@pytest.mark.timeout(120)
async def test_up_cluster_runs_three_nodes_with_everything_replicated(stack: Settings) -> None:
    """Protects the cluster itself: three nodes recorded in runtime.json, the ledger and every
    bucket R3 with a leader, appends projected to the end and equal to a replay, and tenants
    added at runtime known on every node (an agent on any node appends through the writer)."""
    info = runtime(stack)
    assert [n.name for n in info.nats_nodes] == ["nats-1", "nats-2", "nats-3"]
    assert nats_servers(info.nats_url) == [n.url for n in info.nats_nodes]
    assert all(n.pid is not None and pid_alive(n.pid) for n in info.nats_nodes)
    assert info.nats_pid is None

    nc = await auth.connect(stack, auth.OPERATOR_ROLE)
    try:
        streams = {i.config.name: i for i in await nc.jsm().streams_info()
                   if PREFIX.upper() in (i.config.name or "")}
    finally:
        await nc.close()
    upper = PREFIX.upper()
    assert {f"{upper}_LEDGER", f"KV_{upper}_KEYS", f"KV_{upper}_LEASES", f"KV_{upper}_TENANTS",
            f"KV_{upper}_BINDINGS", f"OBJ_{upper}_ARTIFACTS"} <= streams.keys()
    for name, stream in streams.items():
        assert stream.config.num_replicas == 3, name
        assert stream.cluster is not None and stream.cluster.leader, name

    load = Load(stack, "up", tasks=3, per_task=100)
    await load()
    await check_exactly_once(stack, load)

    await auth.tenant_add(stack, "cltenant")
    creds = await auth.agent_add(stack, "cltenant", "bot")
    for node in info.nats_nodes:
        agent = msgspec.structs.replace(stack, nats_url=node.url, nats_creds=creds)
        client = await connect(agent, timeout=5)
        try:
            result = await client.append(created(f"agent-{node.name}", tenant="cltenant",
                                                 producer="bot"))
        finally:
            await client.close()
        assert result.seq > 0 and not result.duplicate


# --- faults under load -----------------------------------------------------------------------------

async def kill_under_load(settings: Settings, run: str, pick: str) -> tuple[Load, float, str]:
    """SIGKILL the ledger's leader node (``pick="leader"``) or a follower while 2,000 events are
    appended; the load, the longest time without an ack after the kill, and the node's name.

    A tenant is added right after the kill, while the node is (most likely) still down: the
    node must learn its account from the others once it is back."""
    load = Load(settings, run, tasks=10, per_task=200)
    running = asyncio.ensure_future(load())
    await assert_eventually(lambda: len(load.acked) >= 300 or running.done(), timeout=60)
    assert not running.done()
    cluster = await ledger_cluster(settings)
    target = cluster.leader if pick == "leader" else cluster.replicas[0].name
    name, pid = node_of(settings, target)
    os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    await add_tenant(settings, f"late-{run}")
    await asyncio.wait_for(running, 150)
    await heal(settings, name, pid)
    creds = await auth.agent_add(settings, f"late-{run}", "bot")
    agent = msgspec.structs.replace(settings, nats_url=node_url(settings, name), nats_creds=creds)
    client = await connect(agent, timeout=5)
    try:
        await client.append(created(f"late-{run}", tenant=f"late-{run}", producer="bot"))
    finally:
        await client.close()
    return load, load.longest_gap(killed_at), name


@pytest.mark.timeout(240)
async def test_sigkill_of_the_leader_and_of_a_follower_loses_and_doubles_nothing(
        stack: Settings) -> None:
    """Protects durability on a cluster: SIGKILL of the ledger stream's leader node while 2,000
    events are appended, then of a follower: every acked event is in the stream exactly once,
    and the projection equals the replay. The supervisor restarts each node on its port and data,
    and a tenant added while the node was down works through it once it is back."""
    leader_load, leader_gap, _ = await kill_under_load(stack, "kl", "leader")
    follower_load, follower_gap, _ = await kill_under_load(stack, "kf", "follower")
    await check_exactly_once(stack, leader_load, follower_load)
    print(f"leader kill: {leader_gap:.2f} s without an ack, {leader_load.retries} retries, "
          f"{leader_load.in_process} answered 10158; follower kill: {follower_gap:.2f} s, "
          f"{follower_load.retries} retries, {follower_load.in_process} answered 10158")
    # A new leader is elected within seconds (NATS' election timeout is 4 to 9 s); a follower's
    # death costs the writers only the reconnect of the connections that were on it.
    assert leader_gap < 30, f"no ack for {leader_gap:.1f} s after the leader was killed"
    assert follower_gap < 30, f"no ack for {follower_gap:.1f} s after a follower was killed"


@pytest.mark.timeout(180)
async def test_a_node_frozen_past_the_election_timeout_then_continued(stack: Settings) -> None:
    """Protects availability and durability across a hung node: the ledger's leader node is
    SIGSTOPped for 16 s (past the election timeout: the other two elect a new leader, and a service
    connected to it moves to another node once its pings go unanswered), then SIGCONTed. Appends
    go on meanwhile, the node rejoins as it was (the same pid: 16 s is within the supervisor's
    patience for a silent server), and nothing acked is lost or doubled."""
    cluster = await ledger_cluster(stack)
    name, pid = node_of(stack, cluster.leader)
    others = ",".join(n.url for n in runtime(stack).nats_nodes if n.name != name)
    # The client talks to the live nodes; the services are wherever they connected.
    load = Load(msgspec.structs.replace(stack, nats_url=others), "fz", per_task=200)
    running = asyncio.ensure_future(load())
    await assert_eventually(lambda: len(load.acked) >= 200 or running.done(), timeout=60)
    os.kill(pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        await asyncio.sleep(FREEZE_S)
    finally:
        os.kill(pid, signal.SIGCONT)
    continued_at = time.monotonic()
    # Acks in the first second may be of appends stored before the stop.
    during = [t for t in load.ack_times if stopped_at + 1 < t < continued_at]
    await asyncio.wait_for(running, 120)
    print(f"frozen {FREEZE_S:.0f} s: {len(during)} acks meanwhile, the longest gap "
          f"{load.longest_gap(stopped_at):.2f} s; {load.retries} retries, {load.in_process} answered 10158")
    assert during, f"no append was acked in the {FREEZE_S:.0f} s one node of three was frozen"
    assert load.longest_gap(stopped_at) < FROZEN_GAP_S
    assert next(n.pid for n in runtime(stack).nats_nodes if n.name == name) == pid
    await assert_eventually(lambda: replicas_current(stack), timeout=60, interval=0.2)
    await check_exactly_once(stack, load)


@pytest.mark.timeout(240)
async def test_a_follower_frozen_past_the_election_timeout_costs_no_append(stack: Settings) -> None:
    """Protects availability across a hung follower: a follower of the ledger stream is SIGSTOPped
    for 16 s and continued. Its return bumps the raft term (it campaigns, and the leader steps
    down until it is elected again, well under a second later); meanwhile publishes find no
    responder. Appends are acked during the pause and none answers `unavailable` to a client
    that retries as agents do; nothing acked is lost or doubled."""
    cluster = await ledger_cluster(stack)
    name, pid = node_of(stack, cluster.replicas[0].name)
    others = ",".join(n.url for n in runtime(stack).nats_nodes if n.name != name)
    load = Load(msgspec.structs.replace(stack, nats_url=others), "ff", per_task=300, strict=True)
    running = asyncio.ensure_future(load())
    await assert_eventually(lambda: len(load.acked) >= 200 or running.done(), timeout=60)
    os.kill(pid, signal.SIGSTOP)
    stopped_at = time.monotonic()
    try:
        await asyncio.sleep(FREEZE_S)
    finally:
        os.kill(pid, signal.SIGCONT)
    continued_at = time.monotonic()
    during = [t for t in load.ack_times if stopped_at + 1 < t < continued_at]
    await asyncio.wait_for(running, 180)
    print(f"follower frozen {FREEZE_S:.0f} s: {len(during)} acks meanwhile, the longest gap "
          f"{load.longest_gap(stopped_at):.2f} s, {len(load.refused)} appends answered unavailable")
    assert during, f"no append was acked in the {FREEZE_S:.0f} s a follower was frozen"
    assert not load.refused, f"{len(load.refused)} appends failed: {load.refused[:3]}"
    assert next(n.pid for n in runtime(stack).nats_nodes if n.name == name) == pid
    await assert_eventually(lambda: replicas_current(stack), timeout=60, interval=0.2)
    await check_exactly_once(stack, load)


@pytest.mark.timeout(240)
async def test_sigkill_of_a_writer_and_of_a_projector_under_load(stack: Settings) -> None:
    """Protects the services' scale-out: with two writers and two projectors on the cluster, one
    writer and then one projector are SIGKILLed while 2,000 events are appended. Requests go on to
    the other writer (a request in flight at the dead one is retried by the client with the same
    ids); the other projector takes the dead one's partitions within seconds, and the supervisor
    restarts both. Every acked event is in the stream once and the projection equals the replay."""
    info = runtime(stack)
    assert {"ledger-writer", "ledger-writer-2", "projector", "projector-2"} <= info.services.keys()
    load = Load(stack, "sk", tasks=10, per_task=200)
    running = asyncio.ensure_future(load())
    for name, after in (("ledger-writer-2", 300), ("projector", 1000)):
        await assert_eventually(lambda n=after: len(load.acked) >= n or running.done(), timeout=90)
        assert not running.done()
        pid = runtime(stack).services[name]
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        await assert_eventually(lambda n=name, p=pid: _restarted(stack, n, p), timeout=60,
                                message=f"the supervisor did not restart {name}")
        print(f"{name} SIGKILLed: restarted {time.monotonic() - killed_at:.2f} s later, longest "
              f"gap without an ack {load.longest_gap(killed_at):.2f} s")
    await asyncio.wait_for(running, 150)
    await check_exactly_once(stack, load)
    layout = await _layout(stack)
    assert layout.partitions == 3 and len(set(layout.seqs)) == 1


@pytest.mark.timeout(120)
async def test_a_retry_of_a_stored_fenced_append_is_a_duplicate_and_the_stream_stays_up(
        stack: Settings) -> None:
    """Protects the ledger on a cluster from the writer's own duplicate probe: an executor whose
    lease was released and granted to another retries a fenced append that was stored (its ack was lost), and gets
    `duplicate` with the original sequence, not `stale_fencing_token`. The probe behind that answer
    must not use `Nats-Expected-Last-Msg-Id`: a clustered leader proposes such a message although
    the check fails, every replica then fails to apply it and the stream is left without a leader
    (nats-server 2.15.1), so the next append would never be acked."""
    client = await connect(stack, timeout=5)
    try:
        await client.append(created("probe-task"))
        first = await client.acquire_lease(TENANT, "probe-task", "exec-1", ttl_s=30)
        # Two events: an atomic batch, whose stored ids JetStream refuses (10201) rather than
        # answering duplicate, so the writer probes each id.
        bodies = [event("variable_set", {"name": "x", "value": i}, "probe-task",
                        event_id=f"probe-e{i}", token=first.token) for i in (0, 1)]
        stored = await client.append_batch(bodies, lease=first)
        for _ in range(3):  # each writer may take the retry; every one must answer the same
            again = await client.append_batch(bodies, lease=first)
            assert [(r.seq, r.duplicate) for r in again] == [(r.seq, True) for r in stored]
        await client.release_lease(TENANT, "probe-task", first)
        second = await client.acquire_lease(TENANT, "probe-task", "exec-2", ttl_s=30)
        assert second.token > first.token
        again = await client.append_batch(bodies, lease=first)
        assert [(r.seq, r.duplicate) for r in again] == [(r.seq, True) for r in stored]
        # New fenced appends, each to either writer: one whose pair is stale has its expectation
        # refused and probes the (new) ids before it re-validates.
        seqs = [stored[-1].seq]
        for i in range(10):
            after = await asyncio.wait_for(client.append(
                event("variable_set", {"name": "y", "value": i}, "probe-task", event_id=f"probe-n{i}",
                      token=second.token), lease=second), 15)
            assert after.seq > seqs[-1] and not after.duplicate
            seqs.append(after.seq)
    finally:
        await client.close()
    cluster = await ledger_cluster(stack)
    assert cluster.leader, "the ledger stream lost its leader"


@pytest.mark.timeout(120)
async def test_a_resume_on_the_cluster_folds_its_own_grant(stack: Settings) -> None:
    """Protects resume on a replicated ledger: the resume's lease grant is appended, then the
    task is replayed up to it. A direct get may be answered by a replica that has not stored the
    grant yet; the replay must not end short of it (the chaos cluster run found a resume whose
    state lacked its own lease). For 60 tasks: the watermark is the grant, the state holds the
    lease, and Working Memory at that watermark is the resume's state."""
    client = await connect(stack, timeout=5)
    try:
        for i in range(60):
            task = f"resume-{i}"
            await client.append_batch([created(task), event("variable_set", {"name": "v", "value": i}, task)])
            reply = await client.resume(TENANT, task, "exec", lease_ttl_s=30)
            assert reply.status in ("resumable", "needs_reconcile"), reply.reasons
            assert reply.lease is not None and reply.watermark == reply.lease.token
            assert reply.state is not None and reply.state["lease"]["holder"] == "exec"
            wm = await client.working_memory(TENANT, task, min_seq=reply.watermark, wait_ms=5000)
            assert wm.state["events_applied"] == reply.state["events_applied"] == 3
    finally:
        await client.close()


@pytest.mark.timeout(120)
async def test_two_instances_of_every_service_serve_and_a_forget_completes(stack: Settings) -> None:
    """Protects several instances of every service on the cluster: both instances of each answer
    their PING; memory proposals and forget requests reach either, the reserved-ledger projections
    are folded by one instance each, and a forget request runs once to its receipt."""
    from agentledger.erasure import evict  # noqa: PLC0415 - the ping helper, used only here

    nc = await auth.connect(stack, auth.OPERATOR_ROLE)
    try:
        for micro in ("agentledger-ledger-writer", "agentledger-projector", "agentledger-checkpointer",
                      "agentledger-memory-policy", "agentledger-context-builder",
                      "agentledger-tombstone-fanout"):
            found = await evict.running(nc, frozenset({micro}))
            assert len(found) == 2, (micro, found)
    finally:
        await nc.close()
    client = await connect(stack, timeout=10)
    try:
        await client.append_batch([created("forget-me"), event("variable_set", {"name": "v", "value": 1},
                                                               "forget-me")])
        reply = await client.forget(TENANT, {"kind": "task", "task_id": "forget-me"}, reason="test")
        done = await client.forget_wait(TENANT, reply.request_id, timeout_s=60)
        assert done.receipt is not None
        assert {i.index: i.status for i in done.receipt.indexes}.get("ledger") == "done"
        with pytest.raises(NotFoundError):
            await client.working_memory(TENANT, "forget-me")
    finally:
        await client.close()


@pytest.mark.timeout(120)
async def test_memory_goes_on_past_a_message_put_onto_its_ledger_outside_the_services(stack: Settings) -> None:
    """Protects the writer's walk back on the cluster: a message stored on the tenant's
    ``_memory`` subject without the key fails its chain and the memory fold keeps the head
    before it; the writer's next memory message links to that head (its direct get answered by
    any replica, confirmed with the leader), so the tenant's memory goes on. Before, the next
    decision linked to the refused message, failed too, and no memory write of the tenant was
    folded again."""
    client = await connect(stack, timeout=10)
    nc = await auth.connect(stack, auth.WRITER)
    try:
        first = (await client.memory_propose(TENANT, [proposal("c1", "the build uses make", key="build tool")]))
        assert first.decisions[0].action == "write", first.decisions
        await raw_publish(Ledger(stack, nc), TENANT, ev.MEMORY_TASK, b'{"kind": "memory_proposed"}', "cluster-m4")
        for n in range(3):  # each links past the refused message, one after another
            after = (await client.memory_propose(TENANT, [proposal(f"c{n + 2}", f"the ci system is ci-{n}",
                                                                   key=f"ci system {n}")])).decisions[0]
            assert after.action == "write", after
            read = await client.memory_read(TENANT, f"ci system {n}", key=f"ci system {n}", project_id="p1")
            assert after.record_id in {i.record_id for i in read.items}
    finally:
        await nc.close()
        await client.close()


def _restarted(settings: Settings, name: str, old_pid: int) -> bool:
    pid = runtime(settings).services.get(name)
    return pid not in (None, old_pid) and pid_alive(pid)


async def _layout(settings: Settings) -> Any:
    conn = await asyncpg.connect(settings.database_url)
    try:
        return await Store().layout(conn)
    finally:
        await conn.close()


# --- the external form: deploy/nats-cluster.conf ----------------------------------------------------

CLUSTER_EXAMPLE = Path(__file__).parent.parent / "deploy" / "nats-cluster.conf"


@pytest.fixture
def example_cluster(tmp_path: Path) -> Iterator[Settings]:
    """deploy/nats-cluster.conf on three nodes as it is: only its addresses and paths point at a
    temporary folder, one self-signed certificate serves for clients, routes and their CA."""
    crt, key = _self_signed(tmp_path)
    text = CLUSTER_EXAMPLE.read_text()
    ports = [(free_port(), free_port()) for _ in range(3)]
    store = AuthStore(tmp_path / "auth").init()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for i, (client, route) in enumerate(ports, start=1):
            home = tmp_path / f"nats-{i}"
            home.mkdir()
            conf = (text.replace("0.0.0.0:4222", f"127.0.0.1:{client}")
                    .replace("0.0.0.0:6222", f"127.0.0.1:{route}")
                    .replace("/etc/nats/tls/server.crt", str(crt)).replace("/etc/nats/tls/server.key", str(key))
                    .replace("/etc/nats/tls/route.crt", str(crt)).replace("/etc/nats/tls/route.key", str(key))
                    .replace("/etc/nats/tls/route-ca.crt", str(crt))
                    .replace("/var/lib/nats/jetstream", str(home / "js")))
            for j, (_, other) in enumerate(ports, start=1):
                conf = conf.replace(f"nats-{j}.example.internal:6222", f"127.0.0.1:{other}")
            (home / "nats-server.conf").write_text(conf)
            # The include is relative to the config file; each node keeps its own resolver folder.
            (home / "agentledger-auth.conf").write_text(store.server_config(home / "resolver"))
            with (home / "nats.log").open("wb") as out:
                procs.append(subprocess.Popen([str(NATS_BIN), "-c", str(home / "nats-server.conf")],
                                              stdout=out, stderr=subprocess.STDOUT,
                                              env={**os.environ, "NATS_SERVER_NAME": f"nats-{i}"}))
        for i, proc in enumerate(procs, start=1):
            log = tmp_path / f"nats-{i}" / "nats.log"
            deadline = time.monotonic() + 20
            while "Server is ready" not in log.read_text(errors="replace"):
                assert proc.poll() is None, log_tail(log)
                assert time.monotonic() < deadline, log_tail(log)
                time.sleep(0.05)
        yield Settings(nats_url=",".join(f"tls://127.0.0.1:{c}" for c, _ in ports), data_dir=tmp_path,
                       auth_dir=store.root, nats_ca_file=crt, prefix="depc", stream_replicas=3)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(10)


@pytest.mark.timeout(90)
async def test_the_cluster_example_replicates_and_serves_tenants_on_every_node(
        example_cluster: Settings) -> None:
    """Protects the documented external form: the example's three nodes form one JetStream
    cluster over mutually authenticated TLS routes; with AGENTLEDGER_STREAM_REPLICAS=3 the
    ledger and every bucket are R3; a tenant pushed to one node is known on the others, and its
    agent on node 3 reaches a service on node 2."""
    s = example_cluster
    urls = nats_servers(s.nats_url)
    await commands.wait_for_cluster(s, 3, time.monotonic() + 30)
    await ensure_stream(s)
    await commands.ensure_bucket_replicas(s)
    nc = await auth.connect(s, auth.OPERATOR_ROLE)
    try:
        streams = [i for i in await nc.jsm().streams_info() if "DEPC" in (i.config.name or "")]
    finally:
        await nc.close()
    assert len(streams) == 6 and all(i.config.num_replicas == 3 for i in streams)

    svc = await auth.connect(msgspec.structs.replace(s, nats_url=urls[1]), auth.WRITER)

    async def service(msg: Any) -> None:
        await msg.respond(b"pong")

    await svc.subscribe("depc.writer.append", cb=service)
    await svc.flush()
    await add_tenant(msgspec.structs.replace(s, nats_url=urls[0]), "acme")
    creds = await auth.agent_add(s, "acme", "agent-1")
    agent = await auth.connect(msgspec.structs.replace(s, nats_url=urls[2], nats_creds=creds), "agent")
    async def pong() -> bool:
        # The service's interest reaches node 3 over the routes some time after its subscribe
        # (longer on a busy host): until then node 3 answers "no responders" at once.
        try:
            return (await agent.request("depc.writer.append", b"{}", timeout=5)).data == b"pong"
        except nats.errors.NoRespondersError:
            return False

    try:
        await assert_eventually(pong, timeout=30, interval=0.2, message="node 3 never reached the service on node 2")
    finally:
        await agent.close()
        await svc.close()
