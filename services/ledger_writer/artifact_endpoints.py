"""The ledger-writer's artifact endpoints: put, get and stat artifacts for authenticated callers.

Tenant accounts have no JetStream access, so agents store and read artifacts
through ``<prefix>.artifact.put|get|stat`` (wire format in
``agentledger.contracts.artifacts`` and docs/contracts.md). The caller's
identity decides the tenant: a tenant caller stores under its own tenant and
sees only its own artifacts; a URI of another tenant is answered exactly like
a missing artifact, so nothing tells whether that tenant stored the content.
The operator (a caller inside the services' account) names the tenant it puts
for and may read any tenant's artifacts.

Each tenant's artifacts take at most ``tenant_max_artifact_bytes`` of the store
(``artifact_quota_exceeded``; content the tenant already stored is not counted
twice), counted in the writer's usage counters (``quotas.Usage``); a store at its
own size answers ``artifact_store_full``.

``ArtifactEndpoints`` holds the rules with the caller as a parameter and no NATS
request in sight; ``endpoints`` declares its three endpoints for the writer's micro service.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator, Mapping
from functools import partial

import nats.js.errors
import structlog
from nats.aio.client import Client
from nats.micro.request import Request

from agentledger.config import Settings
from agentledger.contracts.artifacts import (
    H_BLAKE3,
    H_ERROR,
    H_PRODUCER,
    H_SCHEMA,
    H_SIZE,
    H_TENANT,
    H_VERSION,
    ArtifactPutHeaders,
    ArtifactReply,
)
from agentledger.contracts.codec import (
    decode_artifact_put_headers,
    decode_artifact_request,
    encode,
    error_body,
)
from agentledger.contracts.events import ArtifactRef
from agentledger.errors import (
    AgentLedgerError,
    ContractError,
    NotFoundError,
    RateLimitedError,
    StorageFullError,
)
from agentledger.security.identity import Caller, TenantRegistry
from agentledger.services.ledger_writer.group_commit import ERR_STREAM_LIMIT
from agentledger.services.ledger_writer.quotas import Quotas, Usage
from agentledger.shell.endpoints import RawEndpoint, failed
from agentledger.stores.artifacts import ArtifactStore, hash_content

log = structlog.get_logger()

ACTIONS = ("put", "get", "stat")
# Room left in a reply for its headers: content larger than max_payload minus this cannot be sent.
REPLY_HEADROOM = 4096
# Requests served at once: each holds its content (up to max_artifact_bytes) in memory.
MAX_CONCURRENT = 16


def artifact_subject(prefix: str, action: str) -> str:
    return f"{prefix}.artifact.{action}"


def _too_large(size: int, limit: int, what: str) -> ContractError:
    return ContractError(f"{what} is {size} bytes, the limit is {limit}", code="artifact_too_large")


def _no_secret_in_headers(meta: ArtifactPutHeaders) -> None:
    """Refuse a put whose schema or producer holds a secret: they are stored in plaintext as the
    object's metadata and returned by every stat, and like an id they are not rewritten (a
    redacted producer names another producer), so nothing is stored (``secret_in_identifier``)."""
    # The package, not its ``secrets`` module: the writer's warm-up imports the package in a
    # worker thread, and importing a submodule first here takes the locks in the other order
    # (submodule, then package), which importlib breaks by handing one side a half-run module.
    from agentledger.core import detect  # noqa: PLC0415 - loaded with the writer's detectors

    for header, value in ((H_PRODUCER, meta.producer), (H_SCHEMA, meta.schema)):
        if detect.find_secrets(value):
            raise ContractError(f"{header} holds a secret; nothing was stored (name the producer otherwise)",
                                code="secret_in_identifier", path=f"headers.{header}")


class ArtifactEndpoints:
    """What each endpoint does for a given caller; raises ``AgentLedgerError`` to refuse."""

    def __init__(self, store: ArtifactStore, settings: Settings, *, max_payload: int,
                 usage: Usage | None = None) -> None:
        self.store = store
        # The writer's shared counters; on their own, the endpoints count in memory.
        self.usage = usage or Usage("artifacts", settings.tenant_max_artifact_bytes,
                                    "AGENTLEDGER_TENANT_MAX_ARTIFACT_BYTES")
        self.max_put_bytes = settings.max_artifact_bytes
        # Any stored artifact that fits in a reply can be read, even above today's put limit.
        self.max_get_bytes = max_payload - REPLY_HEADROOM

    async def put(self, caller: Caller, data: bytes, headers: Mapping[str, str] | None) -> ArtifactRef:
        """Store ``data`` for the caller's tenant (the operator names it in ``Agentledger-Tenant``)."""
        meta = decode_artifact_put_headers(headers)
        path = f"headers.{H_TENANT}"
        tenant = meta.tenant or caller.tenant
        if tenant is None:
            raise ContractError("the operator puts artifacts for a tenant it names",
                                code="missing_field", path=path)
        caller.require_tenant(tenant, path)
        _no_secret_in_headers(meta)
        if len(data) > self.max_put_bytes:
            raise _too_large(len(data), self.max_put_bytes, "the artifact")
        if meta.blake3 is not None and (actual := await hash_content(data)) != meta.blake3:
            raise AgentLedgerError(f"the content arrived hashing to {actual}, the request says "
                                   f"{meta.blake3}; nothing was stored",
                                   code="artifact_hash_mismatch", path=f"headers.{H_BLAKE3}")
        written = False

        def admit() -> None:
            # Called only when the content is not stored yet: what is stored already is not
            # counted again, even at the quota.
            nonlocal written
            self.usage.check(tenant, len(data), "artifact_quota_exceeded")
            written = True

        try:
            ref = await self.store.put(data, tenant=tenant, schema=meta.schema,
                                       producer=meta.producer, version=meta.version, before_write=admit)
        except nats.js.errors.APIError as exc:
            if exc.err_code != ERR_STREAM_LIMIT:
                raise
            raise StorageFullError(f"the artifact store is full ({exc.description}); nothing was "
                                   "stored. Raise AGENTLEDGER_MAX_ARTIFACT_STORE_BYTES",
                                   code="artifact_store_full") from None
        if written:
            self.usage.add(tenant, len(data))
        return ref

    async def stat(self, caller: Caller, body: bytes) -> ArtifactRef:
        """The ref of one of the caller's artifacts (any tenant's for the operator)."""
        request = decode_artifact_request(body)
        with _uri_errors():
            return await self.store.stat(request.uri, tenant=caller.tenant)

    async def get(self, caller: Caller, body: bytes) -> tuple[bytes, ArtifactRef]:
        """Content and ref of one of the caller's artifacts, re-hashed here before it is sent."""
        request = decode_artifact_request(body)
        with _uri_errors():
            ref = await self.store.stat(request.uri, tenant=caller.tenant)
            if ref.size is not None and ref.size > self.max_get_bytes:
                raise _too_large(ref.size, self.max_get_bytes, f"artifact {request.uri}")
            return await self.store.read(request.uri, request.blake3, tenant=caller.tenant)


@contextlib.contextmanager
def _uri_errors() -> Iterator[None]:
    """A malformed, missing or too large artifact is named by its path in the request, ``$.uri``."""
    try:
        yield
    except (ContractError, NotFoundError) as exc:
        if exc.path is None:
            exc.path = "$.uri"
        raise


def content_headers(ref: ArtifactRef, size: int) -> dict[str, str]:
    """The headers of a successful get reply: the ref of the content in the payload."""
    return {H_BLAKE3: ref.blake3, H_SCHEMA: ref.schema, H_PRODUCER: ref.producer,
            H_VERSION: str(ref.version), H_SIZE: str(size)}


class _Server:
    """NATS glue: identity from the request headers, one task per request, typed error replies."""

    def __init__(self, endpoints: ArtifactEndpoints, tenants: TenantRegistry,
                 tasks: set[asyncio.Task[None]], quotas: Quotas) -> None:
        self.endpoints = endpoints
        self.tenants = tenants
        self.tasks = tasks
        self.quotas = quotas
        self.slots = asyncio.Semaphore(MAX_CONCURRENT)

    def handler(self, action: str) -> Callable[[Request], Awaitable[None]]:
        async def handle(req: Request) -> None:
            # A tenant over its artifact rate is refused before it takes a slot or its content
            # is hashed: the slots are every tenant's (the refusal is held like an append's).
            try:
                caller = await self.tenants.caller(req.headers)
                self.quotas.admit_artifact(caller, len(req.data))
            except RateLimitedError as exc:
                if not self.quotas.hold(caller, exc, partial(self._refuse, req, exc)):
                    await self._refuse(req, exc)
                return
            except AgentLedgerError as exc:
                await self._refuse(req, exc)
                return
            except Exception as exc:  # noqa: BLE001 - the tenant lookup's bucket away: typed, not micro's 500
                await self._refuse(req, failed(exc, "artifact", "internal error"))
                return
            # Waiting for a slot here leaves further requests queued in the subscription,
            # where the client's pending limits apply, instead of in memory here.
            await self.slots.acquire()
            task = asyncio.create_task(self.serve(action, req, caller))
            self.tasks.add(task)
            task.add_done_callback(self._done)
        return handle

    def _done(self, task: asyncio.Task[None]) -> None:
        self.tasks.discard(task)
        self.slots.release()

    async def serve(self, action: str, req: Request, caller: Caller) -> None:
        try:
            with structlog.contextvars.bound_contextvars(action=f"artifact.{action}",
                                                         tenant=caller.tenant, agent=caller.agent):
                if action == "put":
                    ref = await self.endpoints.put(caller, req.data, req.headers)
                    await req.respond(encode(ArtifactReply(ok=True, artifact=ref)))
                elif action == "stat":
                    ref = await self.endpoints.stat(caller, req.data)
                    await req.respond(encode(ArtifactReply(ok=True, artifact=ref)))
                else:
                    data, ref = await self.endpoints.get(caller, req.data)
                    await req.respond(data, headers=content_headers(ref, len(data)))
        except AgentLedgerError as exc:
            log.info("artifact.refused", action=action, code=exc.code, path=exc.path)
            await self._refuse(req, exc)
        except Exception as exc:  # noqa: BLE001 - every request gets a typed reply
            with structlog.contextvars.bound_contextvars(action=f"artifact.{action}"):
                error = failed(exc, "artifact", "internal error")
            await self._refuse(req, error)

    @staticmethod
    async def _refuse(req: Request, exc: AgentLedgerError) -> None:
        # The header, not the payload, marks an error: an empty artifact is a valid payload.
        await req.respond(encode(ArtifactReply(ok=False, error=error_body(exc))),
                          headers={H_ERROR: exc.code})


def endpoints(nc: Client, settings: Settings, store: ArtifactStore, tenants: TenantRegistry, *,
              tasks: set[asyncio.Task[None]], quotas: Quotas) -> list[RawEndpoint]:
    """``<prefix>.artifact.put|get|stat``, for the writer's micro service.

    Requests run in tasks added to ``tasks``, which the writer awaits on shutdown; ``quotas``
    limits each tenant's request rate and counts its stored artifact bytes.
    """
    artifact = ArtifactEndpoints(store, settings, max_payload=nc.max_payload, usage=quotas.artifacts)
    if settings.max_artifact_bytes > artifact.max_get_bytes:
        log.warning("artifact.limit_above_max_payload", max_artifact_bytes=settings.max_artifact_bytes,
                    max_payload=nc.max_payload)
    server = _Server(artifact, tenants, tasks, quotas)
    return [RawEndpoint(f"artifact-{action}", artifact_subject(settings.prefix, action), server.handler(action))
            for action in ACTIONS]
