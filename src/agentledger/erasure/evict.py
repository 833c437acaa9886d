"""Telling every service instance to drop what it caches of forgotten data, and knowing they did.

A forget request is not done while a process still holds a destroyed key, a
cached Working Memory state or a lease of a forgotten task. The tombstone-fanout
publishes an ``Eviction`` on ``<prefix>.forget.evict`` (core NATS, no queue
group: every instance of every service receives it); each instance drops what
it holds and answers with an ``EvictionAck`` naming its micro-service name and
instance id. The fan-out knows who is running from ``$SRV.PING`` (``Instances``)
and repeats the eviction until every instance it knows has answered; an instance
that went away drops out of the next ping (a process that starts later starts
with empty caches). The subject lives in the services' account: tenants cannot
publish to it, nor see it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

import msgspec
import structlog
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from agentledger.errors import UnavailableError
from agentledger.security.sealing import Keyring
from agentledger.security.task_seal import slot
from agentledger.shell.tasks import stop_task

log = structlog.get_logger()

# Micro-service names of every service that caches tenant data and answers evictions
# (``tests/test_forget_registry.py`` checks this against the runtime's service list).
CACHE_HOLDERS = frozenset({"agentledger-ledger-writer", "agentledger-projector", "agentledger-checkpointer",
                           "agentledger-memory-policy", "agentledger-context-builder"})
# How long a discovery ping collects answers.
GATHER_S = 0.5
# An eviction not yet answered is sent again this often; after TIMEOUT_S the step fails
# (and the saga retries it).
RESEND_S = 2.0
TIMEOUT_S = 60.0


class Eviction(msgspec.Struct, frozen=True, omit_defaults=True):
    """What to drop: everything of ``tenant`` (``whole_tenant``), of one task, of one data
    subject, or of memory records."""

    request_id: str
    tenant: str
    whole_tenant: bool = False
    task_id: str | None = None
    subject: str | None = None
    record_ids: list[str] = []


class EvictionAck(msgspec.Struct, frozen=True):
    service: str
    instance: str
    evicted: dict[str, int]


class _Ping(msgspec.Struct):
    name: str
    id: str


_ack = msgspec.json.Decoder(EvictionAck)
_eviction = msgspec.json.Decoder(Eviction)
_ping = msgspec.json.Decoder(_Ping)

Evictor = Callable[[Eviction], Awaitable[dict[str, int]]]


def keys_of(keyring: Keyring, eviction: Eviction) -> int:
    """Drop the keyring's cached keys an eviction reaches (a tenant's, one data subject's, or
    one task's: ``task_seal``)."""
    if eviction.whole_tenant:
        return keyring.evict(eviction.tenant)
    dropped = keyring.evict(eviction.tenant, eviction.subject) if eviction.subject else 0
    if eviction.task_id:
        dropped += keyring.evict(eviction.tenant, slot(eviction.task_id))
    return dropped


def evict_subject(prefix: str) -> str:
    return f"{prefix}.forget.evict"


async def listen(nc: Client, prefix: str, service: str, instance: str, evictor: Evictor) -> Subscription:
    """Answer evictions for one service instance: ``evictor`` drops what it caches, its counts
    go back in the ack. ``service`` is the micro-service name, ``instance`` its id."""

    async def on_eviction(msg: Msg) -> None:
        try:
            eviction = _eviction.decode(msg.data)
        except msgspec.MsgspecError:
            log.warning("evict.undecodable", service=service)
            return
        counts = await evictor(eviction)
        log.info("evict.done", service=service, request=eviction.request_id, tenant=eviction.tenant,
                 **{f"evicted_{k}": v for k, v in counts.items()})
        if msg.reply:
            with contextlib.suppress(Exception):
                await msg.respond(msgspec.json.encode(EvictionAck(service=service, instance=instance,
                                                                  evicted=counts)))

    return await nc.subscribe(evict_subject(prefix), cb=on_eviction)


async def _gather(nc: Client, subject: str, body: bytes, seconds: float) -> list[bytes]:
    inbox = nc.new_inbox()
    got: list[bytes] = []
    sub = await nc.subscribe(inbox)
    try:
        await nc.publish(subject, body, reply=inbox)
        await nc.flush()
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                msg = await sub.next_msg(timeout=left)
            except TimeoutError:
                break
            got.append(msg.data)
    finally:
        await sub.unsubscribe()
    return got


async def running(nc: Client, names: frozenset[str]) -> set[tuple[str, str]]:
    """(micro-service name, instance id) of every running instance of ``names``."""
    found: set[tuple[str, str]] = set()
    for data in await _gather(nc, "$SRV.PING", b"", GATHER_S):
        with contextlib.suppress(msgspec.MsgspecError):
            p = _ping.decode(data)
            if p.name in names:
                found.add((p.name, p.id))
    return found


class Instances:
    """The running instances of the cache holders, as ``$SRV.PING`` last answered.

    Refreshed in the background every ``REFRESH_S`` so an eviction does not wait for a
    ping: an instance started since the last refresh began with empty caches and need
    not be waited for; one that went away is dropped when ``broadcast`` asks again.
    """

    REFRESH_S = 5.0

    def __init__(self, nc: Client, names: frozenset[str] = CACHE_HOLDERS) -> None:
        self._nc = nc
        self.names = names
        self.known: set[tuple[str, str]] = set()
        self._task: asyncio.Task[None] | None = None

    async def refresh(self) -> set[tuple[str, str]]:
        self.known = await running(self._nc, self.names)
        return self.known

    async def start(self) -> None:
        # The first ping (GATHER_S) is not waited for: until it is answered, ``known`` is empty
        # and ``broadcast`` asks itself; a service that starts need not wait half a second.
        self._task = asyncio.create_task(self._loop(), name="evict-instances")

    async def stop(self) -> None:
        await stop_task(self._task)

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(Exception):  # NATS away: keep the last answer
                await self.refresh()
            await asyncio.sleep(self.REFRESH_S)


async def broadcast(nc: Client, prefix: str, eviction: Eviction, instances: Instances) -> list[EvictionAck]:
    """Evict on every running instance of the cache holders; the acks once all have answered.

    The eviction is sent again every ``RESEND_S`` while some have not answered (an
    evictor may wait for work in flight, e.g. a build that opened a key), and who is
    running is asked again each time, so an instance that went away stops being waited
    for. ``UnavailableError`` after ``TIMEOUT_S`` with instances that keep answering
    pings but never the eviction (the saga retries the step later).
    """
    body = msgspec.json.encode(eviction)
    acks: dict[tuple[str, str], EvictionAck] = {}
    expected = set(instances.known) or await instances.refresh()
    inbox = nc.new_inbox()
    sub = await nc.subscribe(inbox)
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while True:
            await nc.publish(evict_subject(prefix), body, reply=inbox)
            await nc.flush()
            resend = min(deadline, time.monotonic() + RESEND_S)
            while expected - set(acks) and (left := resend - time.monotonic()) > 0:
                try:
                    msg = await sub.next_msg(timeout=left)
                except TimeoutError:
                    break
                with contextlib.suppress(msgspec.MsgspecError):
                    a = _ack.decode(msg.data)
                    acks.setdefault((a.service, a.instance), a)
            if not expected - set(acks):
                return sorted(acks.values(), key=lambda a: (a.service, a.instance))
            if time.monotonic() >= deadline:
                break
            expected = (await instances.refresh()) | (expected & set(acks))
    finally:
        await sub.unsubscribe()
    missing = expected - set(acks)
    raise UnavailableError(f"{len(missing)} service instance(s) did not confirm the eviction: "
                           + ", ".join(sorted(n for n, _ in missing)), code="eviction_incomplete")


async def broadcast_to(nc: Client, prefix: str, eviction: Eviction, names: frozenset[str]) -> list[EvictionAck]:
    """``broadcast`` to the running instances of ``names`` (asked now)."""
    return await broadcast(nc, prefix, eviction, Instances(nc, names))
