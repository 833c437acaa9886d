"""The one service shape (``agentledger.shell.service``) against the real NATS and PostgreSQL: a
small service declared in this file, started and stopped by the shell.

What every service relies on: a declared endpoint is served and answers typed errors before its
handler sees a request it must not; what a service entered is released last-entered-first, on a
stop and on a start that fails half-way; a request in flight is answered before the parts it uses
stop; a vital task or a projection that fails ends the service; a declared evictor answers the
fan-out's evictions.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import asyncpg
import msgspec
import pytest
from nats.aio.client import Client as NATS

from agentledger.config import Settings
from agentledger.contracts.api import ErrorBody
from agentledger.erasure import evict
from agentledger.errors import ContractError
from agentledger.security import auth
from agentledger.security.identity import REQUEST_INFO, Caller
from agentledger.shell.endpoints import Endpoint, RawEndpoint
from agentledger.shell.parts import Parts
from agentledger.shell.service import Pool, Shape, Shell
from helpers import assert_eventually

MICRO = "agentledger-shell-probe"


class EchoRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    tenant: str
    text: str


class EchoReply(msgspec.Struct, frozen=True, omit_defaults=True):
    ok: bool
    text: str = ""
    asked_by: str = ""
    error: ErrorBody | None = None


class Recorder:
    """A part that records its start and stop in a log shared by the test."""

    def __init__(self, name: str, log: list[str], *, fail_start: bool = False) -> None:
        self.name = name
        self.log = log
        self.fail_start = fail_start
        self.failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.running = False

    async def start(self) -> None:
        self.log.append(f"start {self.name}")
        if self.fail_start:
            raise RuntimeError(f"{self.name} could not start")
        self.running = True

    async def stop(self) -> None:
        self.log.append(f"stop {self.name}")
        self.running = False

    def alive(self) -> bool:
        return self.running


class Probe(Shell):
    """A service with one part of each kind, and an endpoint whose handler the test controls."""

    shape = Shape(name="shell-probe", role=auth.OPERATOR_ROLE, micro=MICRO, log_name="probe",
                  pool=Pool(max_size=2), description="agentledger test: the service shape")

    def __init__(self, settings: Settings, *, fail_at: str | None = None) -> None:
        super().__init__(settings)
        self.log: list[str] = []
        self.fail_at = fail_at
        self.handled: list[str] = []
        self.release = asyncio.Event()
        self.in_handler = asyncio.Event()
        self.vital_ends = asyncio.Event()
        self.evicted: list[evict.Eviction] = []
        self.projection: Recorder | None = None
        self.pool_seen: asyncpg.Pool | None = None

    async def open(self, parts: Parts) -> None:
        self.pool_seen = self._pool
        await parts.part(Recorder("first", self.log))
        self.projection = await parts.projection(Recorder("projection", self.log))
        await parts.live_part(Recorder("second", self.log, fail_start=self.fail_at == "second"))
        parts.task(self._vital(), name="probe-vital", vital=True)

    def endpoints(self) -> list[Endpoint | RawEndpoint]:
        return [Endpoint.at(self.settings.prefix, "probe.echo", EchoRequest, EchoReply, self.echo,
                            check=_no_shouting)]

    def evictor(self) -> evict.Evictor:
        return self._evict

    async def serving(self, parts: Parts) -> None:
        await parts.part(Recorder("after endpoints", self.log))

    async def echo(self, caller: Caller, body: EchoRequest) -> EchoReply:
        self.handled.append(body.text)
        if body.text == "slow":
            self.in_handler.set()
            await self.release.wait()
            # Still open: the shell drains requests before it stops the parts.
            self.log.append(f"answered while projection running={self.projection and self.projection.running}")
        elif body.text == "refuse":
            raise ContractError("not that", code="invalid_value", path="$.text")
        elif body.text == "postgres away":
            raise asyncpg.PostgresConnectionError("the server closed the connection")
        elif body.text == "bug":
            raise KeyError("a bug")
        return EchoReply(ok=True, text=body.text,
                         asked_by="operator" if caller.is_operator else f"{caller.tenant}/{caller.agent}")

    async def _vital(self) -> None:
        await self.vital_ends.wait()
        raise RuntimeError("the vital loop broke")

    async def _evict(self, eviction: evict.Eviction) -> dict[str, int]:
        self.evicted.append(eviction)
        return {"things": 3}


def _no_shouting(body: EchoRequest) -> None:
    if body.text.isupper():
        raise ContractError("text must not be all capitals", code="invalid_value", path="$.text")


@pytest.fixture
async def operator(settings: Settings) -> AsyncIterator[NATS]:
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        yield nc
    finally:
        await nc.close()


async def echo(nc: NATS, settings: Settings, body: dict[str, object],
               headers: dict[str, str] | None = None) -> EchoReply:
    msg = await nc.request(f"{settings.prefix}.probe.echo", json.dumps(body).encode(), timeout=10, headers=headers)
    return msgspec.json.decode(msg.data, type=EchoReply)


async def instances(nc: NATS) -> list[str]:
    """Ids of the probe's micro-service instances that answer a ping now."""
    found = await evict.running(nc, frozenset({MICRO}))
    return sorted(i for _, i in found)


async def test_a_declared_endpoint_is_served_and_answers_typed_errors(settings: Settings, operator: NATS) -> None:
    """Protects the one way endpoints answer: the declared handler gets the decoded body and the
    caller; a contract error (decoding, or the endpoint's own check) and a body naming another
    tenant are refused before the handler runs; an error the handler raises is its typed reply;
    a dependency that failed is retryable `unavailable`, a bug retryable `internal`."""
    probe = Probe(settings)
    await probe.start()
    try:
        ok = await echo(operator, settings, {"tenant": "acme", "text": "hello"})
        assert (ok.ok, ok.text, ok.asked_by) == (True, "hello", "operator")

        def code(reply: EchoReply) -> tuple[str, str | None, bool]:
            assert not reply.ok and reply.error is not None
            return reply.error.code, reply.error.path, reply.error.retryable

        assert code(await echo(operator, settings, {"tenant": "acme"})) == ("missing_field", "$.text", False)
        assert code(await echo(operator, settings, {"tenant": "acme", "text": "LOUD"})) == (
            "invalid_value", "$.text", False)
        unknown = {REQUEST_INFO: json.dumps({"acc": "A" + "C" * 55, "name_tag": "bot"})}
        assert code(await echo(operator, settings, {"tenant": "acme", "text": "hi"}, unknown))[0] == "unknown_tenant"
        assert probe.handled == ["hello"]  # none of the refused requests reached the handler

        assert code(await echo(operator, settings, {"tenant": "acme", "text": "refuse"})) == (
            "invalid_value", "$.text", False)
        assert code(await echo(operator, settings, {"tenant": "acme", "text": "postgres away"})) == (
            "unavailable", None, True)
        assert code(await echo(operator, settings, {"tenant": "acme", "text": "bug"})) == ("internal", None, True)
    finally:
        await probe.stop()


async def test_a_tenant_caller_is_held_to_its_own_tenant(admin: Settings, operator: NATS) -> None:
    """Protects the identity check every endpoint gets from the shell: a tenant agent's request
    (the header the server stamps on it) answers for its own tenant and is refused for another."""
    acme = await auth.tenant_add(admin, "acme")
    agent = {REQUEST_INFO: json.dumps({"acc": acme.account, "name_tag": "bot"})}
    probe = Probe(admin)
    await probe.start()
    try:
        ok = await echo(operator, admin, {"tenant": "acme", "text": "mine"}, agent)
        assert (ok.ok, ok.asked_by) == (True, "acme/bot")
        refused = await echo(operator, admin, {"tenant": "globex", "text": "theirs"}, agent)
        assert refused.error is not None and refused.error.code == "tenant_mismatch"
        assert probe.handled == ["mine"]
    finally:
        await probe.stop()


async def test_stop_releases_everything_in_reverse_order(settings: Settings, operator: NATS) -> None:
    """Protects shutdown without a hand-written stop: what was entered last is released first,
    endpoints before the parts they use, and the pool, the registries and the NATS connection
    last; stopping twice is harmless."""
    probe = Probe(settings)
    await probe.start()
    assert probe.alive()
    assert len(await instances(operator)) == 1
    await probe.stop()
    assert probe.log == ["start first", "start projection", "start second", "start after endpoints",
                         "stop after endpoints", "stop second", "stop projection", "stop first"]
    assert await instances(operator) == []
    assert probe.pool_seen is not None and probe.pool_seen.is_closing()
    assert probe._tenants is not None and not probe._tenants.alive()
    assert probe._nc is not None and probe._nc.is_closed
    assert not probe.alive()
    await probe.stop()
    assert probe.log[-1] == "stop first"


async def test_a_request_in_flight_is_answered_before_the_parts_stop(settings: Settings,
                                                                    operator: NATS) -> None:
    """Protects the drain on SIGTERM: a stop that begins while a request is being handled lets
    it finish, with the parts it uses still running, and its caller gets the answer."""
    probe = Probe(settings)
    await probe.start()
    asking = asyncio.create_task(echo(operator, settings, {"tenant": "acme", "text": "slow"}))
    await asyncio.wait_for(probe.in_handler.wait(), 10)
    stopping = asyncio.create_task(probe.stop())
    await asyncio.sleep(0.2)
    assert not stopping.done()  # waiting for the request
    probe.release.set()
    reply = await asking
    await stopping
    assert (reply.ok, reply.text) == (True, "slow")
    # What ``serving`` entered goes first; the endpoints' requests are drained before ``open``'s parts.
    answered = probe.log.index("answered while projection running=True")
    assert probe.log.index("stop after endpoints") < answered < probe.log.index("stop second")


async def test_a_start_that_fails_half_way_releases_what_it_entered(settings: Settings,
                                                                   operator: NATS) -> None:
    """Protects a service that cannot start: the part that failed and everything before it are
    released in reverse, nothing was registered, and the pool and the connection are closed."""
    probe = Probe(settings, fail_at="second")
    with pytest.raises(RuntimeError, match="second could not start"):
        await probe.start()
    assert probe.log == ["start first", "start projection", "start second",
                         "stop second", "stop projection", "stop first"]
    assert await instances(operator) == []
    assert probe.pool_seen is not None and probe.pool_seen.is_closing()
    assert probe._nc is not None and probe._nc.is_closed
    await probe.stop()
    assert probe.log[-1] == "stop first"


async def test_a_failed_vital_task_or_projection_ends_the_service(settings: Settings) -> None:
    """Protects supervision: the end of a vital task makes the service not alive and fails it
    (the process exits and is restarted); so does a projection that gave up."""
    probe = Probe(settings)
    await probe.start()
    try:
        waiting = asyncio.create_task(probe.wait_failed())
        await asyncio.sleep(0.1)
        assert probe.alive() and not waiting.done()
        probe.vital_ends.set()
        with pytest.raises(RuntimeError, match="the vital loop broke"):
            await asyncio.wait_for(waiting, 10)
        assert not probe.alive()
    finally:
        await probe.stop()

    probe = Probe(settings)
    await probe.start()
    try:
        assert probe.projection is not None
        probe.projection.failed.set_exception(ConnectionError("the projection gave up"))
        with pytest.raises(ConnectionError, match="gave up"):
            await asyncio.wait_for(probe.wait_failed(), 10)
    finally:
        await probe.stop()


async def test_a_declared_evictor_answers_the_fan_outs_evictions(settings: Settings, operator: NATS) -> None:
    """Protects forgetting: a service that declares an evictor answers ``<prefix>.forget.evict``
    with its micro-service name, instance id and counts, as the fan-out waits for."""
    probe = Probe(settings)
    await probe.start()
    try:
        eviction = evict.Eviction(request_id="fg-1", tenant="acme", task_id="t1")
        acks = await evict.broadcast_to(operator, settings.prefix, eviction, frozenset({MICRO}))
        assert [(a.service, a.evicted) for a in acks] == [(MICRO, {"things": 3})]
        assert acks[0].instance == (await instances(operator))[0]
        await assert_eventually(lambda: probe.evicted == [eviction])
    finally:
        await probe.stop()
