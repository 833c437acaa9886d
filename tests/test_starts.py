"""Fast starts (issue 20): a service serves as soon as its endpoints are added, and warms its
heavy parts (tokenizer, embedding model, detectors) in the background after that.

* Every service, as an OS process: it answers ``$SRV.PING``, answers a request at once with a
  typed reply (a part still warming answers retryable ``unavailable`` naming it, never
  ``internal``, never a timeout), and then reports each part warm.
* A warming part, in process, on a load the test holds: the endpoints answer while it loads;
  a request waits for it, then answers ``unavailable`` "warming: <part>"; once loaded, served.
* The writer's first append, even one that arrives while the secret detectors warm, is
  redacted.

No figure here depends on how fast the host is: ``agentledger bench --only starts`` times them.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from agentledger.client import connect
from agentledger.config import Settings
from agentledger.contracts.api import ErrorBody
from agentledger.core.detect import secrets as secret_detectors
from agentledger.security import auth
from agentledger.security.identity import Caller
from agentledger.services.ledger_writer.service import LedgerWriter
from agentledger.shell import lifecycle, parts
from agentledger.shell.endpoints import Endpoint
from agentledger.shell.parts import Parts
from agentledger.shell.service import Shape, Shell
from agentledger.stores.ledger import ensure_stream
from ckpt_support import created, end_process, service_env
from helpers import assert_eventually
from writer_support import ledger_messages

SECRET = "AKIAIOSFODNN7EXAMPLQ"

# module, micro service name, (subject under the prefix, body) of one request it serves, the
# parts it warms after its endpoints answer.
SERVICES: dict[str, tuple[str, str, dict[str, Any], tuple[str, ...]]] = {
    "ledger_writer": ("agentledger-ledger-writer", "writer.append", {}, ("secret detectors",)),
    "projector": ("agentledger-projector", "wm.get", {"tenant": "acme", "task_id": "nope"}, ()),
    "checkpointer": ("agentledger-checkpointer", "checkpoint.save", {"tenant": "acme", "task_id": "nope"}, ()),
    "memory_policy": ("agentledger-memory-policy", "memory.read", {"tenant": "acme", "query": "deploy"},
                      ("tokenizer", "embedding model", "detectors")),
    "context_builder": ("agentledger-context-builder", "context.get",
                        {"tenant": "acme", "generation_id": "g-none"}, ("tokenizer", "embedding model")),
    "tombstone_fanout": ("agentledger-tombstone-fanout", "forget.receipt",
                         {"tenant": "acme", "request_id": "nope"}, ()),
}


class Logged:
    """A service process's JSON log lines (stderr), read as they come so the pipe never fills."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.lines: list[dict[str, Any]] = []
        assert proc.stderr is not None
        self._task = asyncio.create_task(self._read(proc.stderr))

    async def _read(self, out: asyncio.StreamReader) -> None:
        async for raw in out:
            with contextlib.suppress(ValueError):
                self.lines.append(json.loads(raw))

    def events(self, name: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("event") == name]

    async def close(self) -> None:
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


@contextlib.asynccontextmanager
async def service_process(settings: Settings, module: str, ready: Path) -> AsyncIterator[Logged]:
    env = {**service_env(settings), "AGENTLEDGER_READY_FILE": str(ready), "AGENTLEDGER_LOG_LEVEL": "info"}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", f"agentledger.services.{module}",
                                                env=env, stderr=asyncio.subprocess.PIPE)
    logged = Logged(proc)
    try:
        yield logged
    finally:
        await end_process(proc)
        await logged.close()


def body_for(module: str, settings: Settings, task: str) -> dict[str, Any]:
    if module == "ledger_writer":
        return {"events": [created(task, text=f"deploy with {SECRET}")]}
    return SERVICES[module][2]


@pytest.mark.parametrize("module", list(SERVICES))
async def test_a_service_process_answers_at_once_and_warms_after(module: str, settings: Settings,
                                                                 tmp_path: Path) -> None:
    """Protects the start order: a service answers PING, then every request gets a typed reply
    from the first one on (a part still warming: retryable ``unavailable`` naming it), and it
    says when each of its heavy parts is warm. Before, the parts loaded before the endpoints
    were added and no service reported a warm-up."""
    micro, path, _, warms = SERVICES[module]
    ready = tmp_path / f"{module}.ready"
    await ensure_stream(settings)  # as `up` does before it starts the services
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        async with service_process(settings, module, ready) as logged:
            async def pings() -> bool:
                try:
                    await nc.request(f"$SRV.PING.{micro}", b"", timeout=1)
                except Exception:
                    return False
                return True

            await assert_eventually(pings, timeout=90, interval=0.02, message=f"{module} never answered PING")
            body = json.dumps(body_for(module, settings, "t-first")).encode()
            reply = json.loads((await nc.request(f"{settings.prefix}.{path}", body, timeout=60)).data)
            error = reply.get("error")
            if error is not None:
                err = msgspec.convert(error, ErrorBody)
                assert err.code != "internal", err
                if err.code == "unavailable":
                    assert err.retryable and err.message.startswith("warming: "), err
            elif module == "ledger_writer":
                assert reply["ok"], reply

            def warm() -> bool:
                return ready.exists() and not lifecycle.warming(ready) and bool(logged.events("service.warm"))

            await assert_eventually(warm, timeout=90, message=f"{module} never said it was warm")
            warmed = {line["part"] for line in logged.lines if str(line.get("event", "")).endswith(".warm")
                      and "part" in line}
            assert warmed == set(warms)
    finally:
        await nc.close()


async def test_the_first_append_is_redacted_even_during_the_warm_up(settings: Settings,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """Protects redaction at start: the detectors now load after the endpoints answer. An append
    that arrives while they load waits for them, and what is stored is redacted; it is never
    stored as it came, nor refused while waiting is still within bounds."""
    loading = threading.Event()
    release = threading.Event()
    real = secret_detectors.warm

    def held_warm() -> None:
        loading.set()
        release.wait(60)
        real()

    monkeypatch.setattr(secret_detectors, "warm", held_warm)
    monkeypatch.setattr(parts, "WARM_WAIT_S", 600.0)  # however slow the host: it waits, never refused
    writer = LedgerWriter(settings)
    await writer.start()
    try:
        client = await connect(settings)
        try:
            await assert_eventually(loading.is_set, timeout=30, message="the warm-up never began")
            append = asyncio.create_task(client.append(created("t-warm", text=f"ship it, key {SECRET}")))
            await asyncio.sleep(0.2)
            assert not append.done()  # it waits for the detectors, held by the test
            release.set()
            await append
        finally:
            await client.close()
        stored = [body for _, body, _ in await ledger_messages(settings)]
        assert len(stored) == 1 and SECRET.encode() not in stored[0]
        assert "[REDACTED:aws_access_key:" in json.loads(stored[0])["payload"]["goal"]["text"]
    finally:
        release.set()
        await writer.stop()


class EchoRequest(msgspec.Struct, frozen=True):
    tenant: str
    text: str


class EchoReply(msgspec.Struct, frozen=True, omit_defaults=True):
    ok: bool
    text: str = ""
    error: ErrorBody | None = None


class Warmer(Shell):
    """A service with one part that loads when the test lets it."""

    shape = Shape(name="warm-probe", micro="agentledger-warm-probe", log_name="probe", role=auth.OPERATOR_ROLE,
                  description="a service with a part that warms")

    def __init__(self, settings: Settings, release: threading.Event) -> None:
        super().__init__(settings)
        self._release = release
        self.loaded = False

    async def open(self, parts: Parts) -> None:
        parts.warm("probe model", self._load)

    def _load(self) -> None:
        self._release.wait(60)
        self.loaded = True

    def endpoints(self) -> list[Endpoint]:
        return [Endpoint.at(self.settings.prefix, "probe.echo", EchoRequest, EchoReply, self.echo)]

    async def echo(self, caller: Caller, body: EchoRequest) -> EchoReply:
        assert self.loaded
        return EchoReply(ok=True, text=body.text)


async def test_a_warming_part_answers_unavailable_naming_it_then_serves(settings: Settings,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Protects what a request gets while a part warms: PING and the endpoint answer while the part
    loads (held here by the test); past the bounded wait the reply is retryable ``unavailable``
    "warming: probe model", never ``internal``; once loaded the request is served."""
    monkeypatch.setattr(parts, "WARM_WAIT_S", 0.3)
    release = threading.Event()
    service = Warmer(settings, release)
    await service.start()
    nc = await auth.connect(settings, auth.OPERATOR_ROLE)
    try:
        await nc.request("$SRV.PING.agentledger-warm-probe", b"", timeout=10)
        body = json.dumps({"tenant": "acme", "text": "hi"}).encode()
        reply = msgspec.json.decode((await nc.request(f"{settings.prefix}.probe.echo", body, timeout=30)).data,
                                    type=EchoReply)
        assert reply.error is not None
        assert (reply.error.code, reply.error.retryable) == ("unavailable", True)
        assert reply.error.message.startswith("warming: probe model")
        release.set()
        await asyncio.wait_for(service.warmed(), 30)
        reply = msgspec.json.decode((await nc.request(f"{settings.prefix}.probe.echo", body, timeout=30)).data,
                                    type=EchoReply)
        assert (reply.ok, reply.text) == (True, "hi")
    finally:
        release.set()
        await nc.close()
        await service.stop()
