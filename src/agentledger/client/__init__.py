"""Async Python client: append events and read Working Memory over NATS.

    async with await connect(settings) as client:
        results = await client.append(event)
        wm = await client.working_memory("acme", "task-1")

Errors come back as the typed exceptions of ``agentledger.errors`` with the
server's ``code`` and ``path``. ``append`` retries a timed-out request with the
same event ids, which the writer turns into ``duplicate`` answers, never into a
second copy or a false conflict.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import Any

import blake3
import msgspec
import nats
import nats.errors
from nats.aio.client import Client as Nats
from nats.aio.msg import Msg
from nats.errors import MaxPayloadError, NoRespondersError
from nats.errors import TimeoutError as NatsTimeout

from agentledger.client.context import ContextMethods
from agentledger.client.forget import ForgetMethods
from agentledger.client.memory import MemoryMethods
from agentledger.config import Settings
from agentledger.contracts.api import (
    MAX_REJECTIONS_PAGE,
    AppendReply,
    AppendResult,
    LeaseBody,
    LeaseReply,
    RejectionItem,
    RejectionsPage,
    ViewChunk,
    WorkingMemoryReply,
)
from agentledger.contracts.artifacts import (
    H_BLAKE3,
    H_ERROR,
    H_PRODUCER,
    H_SCHEMA,
    H_TENANT,
    H_VERSION,
    ArtifactReply,
    ArtifactRequest,
)
from agentledger.contracts.codec import encode_request
from agentledger.contracts.events import ArtifactRef, EventBase
from agentledger.contracts.resume import (
    CheckpointSaveReply,
    CheckpointSaveRequest,
    ResumeReply,
    ResumeRequest,
)
from agentledger.errors import (
    AgentLedgerError,
    ContractError,
    UnavailableError,
)
from agentledger.replies import Replies, raise_error  # also importable from here, as before
from agentledger.security import auth
from agentledger.stores import artifacts

# Reads of a chunked Working Memory view: how often to start over when the task changes
# meanwhile, and how many chunk requests to keep in flight.
VIEW_ATTEMPTS = 5
# An append answered `unavailable` (retryable) is sent again after this pause, within the
# client's ``retries``; the writer has already retried its publish for up to 4 s by then.
APPEND_RETRY_PAUSE_S = 0.1
CHUNKS_IN_FLIGHT = 4
# Every way a request can fail because the bus or the service is away: a typed, retryable
# `unavailable` for the caller, never a raw nats-py exception.
_UNAVAILABLE = (NatsTimeout, NoRespondersError, nats.errors.ConnectionClosedError,
                nats.errors.ConnectionReconnectingError, nats.errors.StaleConnectionError,
                nats.errors.OutboundBufferLimitError, nats.errors.ConnectionDrainingError)
_append_reply = msgspec.json.Decoder(AppendReply)
_wm_reply = msgspec.json.Decoder(WorkingMemoryReply)
_lease_reply = msgspec.json.Decoder(LeaseReply)
_save_reply = msgspec.json.Decoder(CheckpointSaveReply)
_resume_reply = msgspec.json.Decoder(ResumeReply)
_artifact_reply = msgspec.json.Decoder(ArtifactReply)
_encoder = msgspec.json.Encoder()


class Client(MemoryMethods, ContextMethods, ForgetMethods):
    """A NATS connection plus the agentledger request subjects."""

    def __init__(self, nc: Nats, settings: Settings, *, timeout: float = 10.0,
                 retries: int = 2) -> None:
        self.nc = nc
        self.settings = settings
        self.timeout = timeout
        self.retries = retries
        self._replies = Replies(nc)

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    async def close(self) -> None:
        if not self.nc.is_closed:
            await self.nc.drain()

    async def append(self, event: EventBase | dict[str, Any], *,
                     expected_last_seq: int | None = None,
                     lease: LeaseBody | None = None) -> AppendResult:
        """Append one event; returns its sequence and whether it was a duplicate.

        ``lease``: the task's lease as granted (acquire or resume); see ``append_batch``.
        """
        return (await self.append_batch([event], expected_last_seq=expected_last_seq,
                                        lease=lease))[0]

    async def append_batch(self, events: Sequence[EventBase | dict[str, Any]], *,
                           expected_last_seq: int | None = None,
                           lease: LeaseBody | None = None) -> list[AppendResult]:
        """Append events of one task atomically: all are stored, or none.

        With ``lease`` (as acquire or resume returned it, secret included) the
        request carries the lease's secret and every event without a
        ``fencing_token`` gets the lease's token: what a leased task needs.
        """
        body: dict[str, Any] = {"events": list(events)}
        if expected_last_seq is not None:
            body["expected_last_seq"] = expected_last_seq
        if lease is not None:
            body["events"] = [_fenced(e, lease.token) for e in events]
            if lease.secret is not None:
                body["lease_secret"] = lease.secret
        return await self.append_raw(encode_request(body))

    async def append_raw(self, payload: bytes) -> list[AppendResult]:
        """Send an already-encoded AppendRequest (the CLI's ``append`` uses this)."""
        subject = f"{self.settings.prefix}.writer.append"
        for attempt in range(self.retries + 1):
            try:
                msg = await self._replies.request(subject, payload, self.timeout)
            except MaxPayloadError as exc:
                raise self._too_large(len(payload)) from exc
            except _UNAVAILABLE as exc:
                if attempt == self.retries:
                    raise UnavailableError("the ledger-writer did not answer") from exc
                continue
            reply = _append_reply.decode(msg.data)
            if reply.error is None:
                return reply.results
            # The ledger away (a clustered stream between leaders, a writer shutting down): the
            # same request again, with the same ids, is stored once whatever happened to this one.
            if reply.error.code != "unavailable" or not reply.error.retryable or attempt == self.retries:
                raise_error(reply.error)
            await asyncio.sleep(APPEND_RETRY_PAUSE_S)
        raise AssertionError("unreachable")

    async def working_memory(self, tenant: str, task_id: str, *, reveal_personal: bool = False,
                             min_seq: int | None = None, wait_ms: int = 5_000,
                             transcript_tail: int | None = None) -> WorkingMemoryReply:
        """The task's Working Memory and the ledger sequence it reflects, whatever its size.

        ``min_seq`` reads your own writes: pass the ``seq`` an append returned and
        the reply waits (up to ``wait_ms``) until the projection has folded it.
        ``transcript_tail`` limits the transcript to the newest that many turns.
        A view too large for one reply arrives in chunks: they are fetched (a few
        at a time), checked against the view's size and blake3 and put together
        here; should the task change meanwhile, the read starts over.
        """
        base: dict[str, Any] = {"tenant": tenant, "task_id": task_id,
                                "reveal_personal": reveal_personal}
        if transcript_tail is not None:
            base["transcript_tail"] = transcript_tail
        first = await self._wm_get(base if min_seq is None
                                   else base | {"min_seq": min_seq, "wait_ms": wait_ms})
        for attempt in range(VIEW_ATTEMPTS):
            if first.chunk is None:
                return first
            try:
                data = await self._view_chunks(base, first.chunk)
            except AgentLedgerError as exc:
                if exc.code != "state_changed" or attempt == VIEW_ATTEMPTS - 1:
                    raise
                first = await self._wm_get(base)  # the projection moved on: from the start
                continue
            return WorkingMemoryReply(ok=True, seq=first.seq, state=msgspec.json.decode(data))
        raise AgentLedgerError(f"the task changed during each of {VIEW_ATTEMPTS} reads of its "
                               "Working Memory; retry", code="state_changed", retryable=True)

    async def _wm_get(self, req: dict[str, Any]) -> WorkingMemoryReply:
        try:
            msg = await self.nc.request(f"{self.settings.prefix}.wm.get", _encoder.encode(req),
                                        timeout=self.timeout)
        except _UNAVAILABLE as exc:
            raise UnavailableError("the projector did not answer") from exc
        reply = _wm_reply.decode(msg.data)
        if reply.error is not None:
            raise_error(reply.error)
        return reply

    async def _view_chunks(self, base: dict[str, Any], first: ViewChunk) -> bytes:
        """Fetch chunks 1 .. count-1 of the view ``first`` belongs to; the whole view, verified."""
        parts: list[bytes] = [first.data] + [b""] * (first.count - 1)
        gate = asyncio.Semaphore(CHUNKS_IN_FLIGHT)

        async def fetch(index: int) -> None:
            async with gate:
                reply = await self._wm_get(base | {"chunk": index, "digest": first.digest})
            got = reply.chunk
            if got is None or (got.index, got.count, got.digest) != (index, first.count, first.digest):
                raise AgentLedgerError(f"the projector answered chunk {index} of {first.digest} "
                                       "with something else", code="internal")
            parts[index] = got.data

        await asyncio.gather(*(fetch(i) for i in range(1, first.count)))
        data = b"".join(parts)
        if len(data) != first.size or blake3.blake3(data).hexdigest() != first.digest:
            raise AgentLedgerError(f"the chunks of view {first.digest} add up to {len(data)} bytes "
                                   "that do not hash to it", code="view_hash_mismatch")
        return data

    async def rejections(self, tenant: str, task_id: str, *, after_seq: int = 0,
                         limit: int = 100) -> RejectionsPage:
        """One page of the task's full rejection trace: rejections after ``after_seq``, oldest
        first. The state lists only the newest; pass ``next_after_seq`` on for the next page."""
        reply = await self._wm_get({"tenant": tenant, "task_id": task_id,
                                    "rejections": {"after_seq": after_seq, "limit": limit}})
        assert reply.rejections is not None
        return reply.rejections

    async def all_rejections(self, tenant: str, task_id: str, *,
                             page_size: int = MAX_REJECTIONS_PAGE) -> AsyncIterator[RejectionItem]:
        """Every rejection of the task, oldest first, read page by page."""
        after: int | None = 0
        while after is not None:
            page = await self.rejections(tenant, task_id, after_seq=after, limit=page_size)
            for item in page.items:
                yield item
            after = page.next_after_seq

    async def _request(self, subject: str, body: dict[str, Any], what: str, *,
                       timeout: float | None = None) -> bytes:  # noqa: ASYNC109 - per request
        payload = encode_request(body)
        try:
            msg = await self.nc.request(f"{self.settings.prefix}.{subject}", payload,
                                        timeout=self.timeout if timeout is None else timeout)
        except MaxPayloadError as exc:
            raise self._too_large(len(payload)) from exc
        except _UNAVAILABLE as exc:
            raise UnavailableError(f"the {what} did not answer") from exc
        return msg.data

    def _too_large(self, size: int) -> ContractError:
        """A request NATS cannot carry, refused here as the typed error it is (nothing was sent)."""
        return ContractError(f"the request is {size} bytes; one NATS message holds at most "
                             f"{self.nc.max_payload} (put large content in an artifact)",
                             code="request_too_large", path="$")

    async def _call(self, subject: str, body: dict[str, Any], what: str,
                    decoder: msgspec.json.Decoder[Any], *,
                    timeout: float | None = None) -> Any:  # noqa: ASYNC109 - per request
        """Request, decode the reply, and raise its typed error if it carries one (``timeout``:
        this call's, for one whose work grows with its size; default the client's)."""
        reply = decoder.decode(await self._request(subject, body, what, timeout=timeout))
        if reply.error is not None:
            raise_error(reply.error)
        return reply

    async def _lease(self, action: str, **body: Any) -> LeaseBody | None:
        reply = _lease_reply.decode(await self._request(f"lease.{action}", body, "ledger-writer"))
        if reply.error is not None:
            raise_error(reply.error)
        return reply.lease

    async def acquire_lease(self, tenant: str, task_id: str, holder: str, ttl_s: float = 30.0) -> LeaseBody:
        """Take the task's execution lease (at most 600 s; renew it).

        The returned lease carries its secret: pass it as ``lease=`` to every
        append of the task and to ``renew_lease`` / ``release_lease``. A tenant
        agent's ``holder`` is its own agent name.
        """
        lease = await self._lease("acquire", tenant=tenant, task_id=task_id, holder=holder, ttl_s=ttl_s)
        assert lease is not None
        return lease

    async def renew_lease(self, tenant: str, task_id: str, lease: LeaseBody, ttl_s: float = 30.0) -> LeaseBody:
        """Move the lease's expiry to ``ttl_s`` from now; the returned lease keeps the secret."""
        renewed = await self._lease("renew", tenant=tenant, task_id=task_id, holder=lease.holder,
                                    token=lease.token, secret=lease.secret, ttl_s=ttl_s)
        assert renewed is not None
        return msgspec.structs.replace(renewed, secret=lease.secret)

    async def release_lease(self, tenant: str, task_id: str, lease: LeaseBody) -> None:
        await self._lease("release", tenant=tenant, task_id=task_id, holder=lease.holder,
                          token=lease.token, secret=lease.secret)

    async def save_checkpoint(self, tenant: str, task_id: str) -> CheckpointSaveReply:
        """Checkpoint the task at its latest ledger event; returns the checkpoint id and seq."""
        body = msgspec.to_builtins(CheckpointSaveRequest(tenant=tenant, task_id=task_id))
        reply = _save_reply.decode(await self._request("checkpoint.save", body, "checkpointer"))
        if reply.error is not None:
            raise_error(reply.error)
        return reply

    async def resume(self, tenant: str, task_id: str, executor: str, *, lease_ttl_s: float = 60.0,
                     checkpoint_id: int | None = None,
                     accept_erased: Sequence[str] | None = None,
                     request_id: str | None = None) -> ResumeReply:
        """Resume the task for ``executor`` (see docs/checkpoints.md).

        Returns the reply whatever its status (read ``reasons`` when it is
        ``rejected``: then it carries nothing else); on ``resumable`` or
        ``needs_reconcile`` the reply carries the lease, secret included: pass it
        as ``lease=`` to every append and renew it before ``expires_at``.

        ``accept_erased`` (even empty) makes it a schema version 2 request: artifacts the
        task cites that forget requests erased are answered ``needs_accept`` with the
        list in ``erased``, and resuming again with their request ids in ``accept_erased``
        continues without them. Left out, such a task is ``rejected``
        (``artifact_forgotten``), as for a version 1 caller.

        ``request_id`` (letters, digits, ``_`` and ``-``; e.g. ``uuid4().hex``) names this
        resume: pass the same one when retrying it after an ``unavailable`` (a timeout), and
        the checkpointer answers the first attempt's answer, with its lease, instead of
        granting another lease that supersedes the first. It makes a version 3 request,
        which answers erasures as version 2 does (``needs_accept``).
        """
        version = 3 if request_id is not None else 1 if accept_erased is None else 2
        body = msgspec.to_builtins(ResumeRequest(
            tenant=tenant, task_id=task_id, executor=executor, lease_ttl_s=lease_ttl_s,
            checkpoint_id=checkpoint_id, schema_version=version,
            accept_erased=list(accept_erased or ()), request_id=request_id))
        reply = _resume_reply.decode(await self._request("resume", body, "checkpointer"))
        if reply.error is not None:
            raise_error(reply.error)
        if reply.state_omitted:
            # Too large for the resume reply: the projection has it (at the watermark or later).
            wm = await self.working_memory(tenant, task_id, min_seq=reply.watermark)
            reply = msgspec.structs.replace(reply, state=wm.state)
        return reply

    async def _artifact_request(self, action: str, payload: bytes,
                                headers: dict[str, str] | None = None) -> Msg:
        """One request to ``<prefix>.artifact.<action>``; retried, as every artifact call is idempotent."""
        subject = f"{self.settings.prefix}.artifact.{action}"
        for attempt in range(self.retries + 1):
            try:
                return await self.nc.request(subject, payload, timeout=self.timeout, headers=headers)
            except MaxPayloadError as exc:
                raise ContractError(f"{len(payload)} bytes do not fit in one NATS message (the "
                                    f"server's max_payload is {self.nc.max_payload})",
                                    code="artifact_too_large") from exc
            except _UNAVAILABLE as exc:
                if attempt == self.retries:
                    raise UnavailableError("the ledger-writer did not answer") from exc
        raise AssertionError("unreachable")

    @staticmethod
    def _artifact_ref(msg: Msg) -> ArtifactRef:
        reply = _artifact_reply.decode(msg.data)
        if reply.error is not None:
            raise_error(reply.error)
        if reply.artifact is None:
            raise AgentLedgerError("the artifact reply carries no artifact", code="internal")
        return reply.artifact

    async def put_artifact(self, data: bytes, *, schema: str, producer: str, version: int = 1,
                           tenant: str | None = None) -> ArtifactRef:
        """Store content durably; cite the returned reference in events afterwards.

        The artifact belongs to this connection's tenant; an operator connection
        names the ``tenant`` it stores for. The content's blake3 travels with it
        and the service refuses content that arrives different.
        """
        data = bytes(data)
        digest = await artifacts.hash_content(data)
        headers = {H_SCHEMA: schema, H_PRODUCER: producer, H_VERSION: str(version), H_BLAKE3: digest}
        if tenant is not None:
            headers[H_TENANT] = tenant
        for name, value in headers.items():
            # NATS trims header values and folds line breaks: refuse rather than store another name.
            if value != value.strip() or "\r" in value or "\n" in value:
                raise ContractError(f"{value!r} has surrounding white space or a line break",
                                    code="invalid_value", path=f"headers.{name}")
        ref = self._artifact_ref(await self._artifact_request("put", data, headers))
        if ref.blake3 != digest:
            raise AgentLedgerError(f"the service stored {ref.uri} for content hashing to {digest}",
                                   code="artifact_hash_mismatch")
        return ref

    async def get_artifact(self, uri: str) -> bytes:
        """Read an artifact; the service verifies its blake3, and so does the client."""
        expected = artifacts.parse_uri(uri).blake3
        msg = await self._artifact_request("get", _artifact_body(uri))
        headers = msg.headers or {}
        if H_ERROR in headers:
            self._artifact_ref(msg)  # raises the error the reply carries
        actual = await artifacts.hash_content(msg.data)
        if actual != expected or headers.get(H_BLAKE3) != expected:
            raise AgentLedgerError(f"artifact {uri}: received content hashes to {actual} (reply "
                                   f"header {headers.get(H_BLAKE3)!r})", code="artifact_hash_mismatch")
        return msg.data

    async def stat_artifact(self, uri: str) -> ArtifactRef:
        """The reference of a stored artifact, from its metadata (no content is read)."""
        return self._artifact_ref(await self._artifact_request("stat", _artifact_body(uri)))


def _fenced(event: EventBase | dict[str, Any], token: int) -> EventBase | dict[str, Any]:
    """``event`` with ``fencing_token`` set to ``token`` unless it already has one."""
    if isinstance(event, EventBase):
        return event if event.fencing_token is not None else msgspec.structs.replace(
            event, fencing_token=token)
    return event if event.get("fencing_token") is not None else {**event, "fencing_token": token}


def _artifact_body(uri: str) -> bytes:
    """The body of an artifact get / stat request."""
    return _encoder.encode(ArtifactRequest(uri=uri))


# Connection attempts before `connect` gives up (a few seconds), not the reconnects afterwards.
INITIAL_ATTEMPTS = 2
# An agent's connection pings its server every second and moves to another after 3 unanswered
# pings (3 to 4 s). The services' 2 s x 4 (natsclient) waits for their stuck-read-loop exit, which
# a client does not have; on a cluster a client left on a frozen node 8 to 10 s had no append
# answered for 11 s, although the two other nodes served the ledger.
CLIENT_PING_INTERVAL_S = 1
CLIENT_MAX_OUTSTANDING_PINGS = 3


async def connect(settings: Settings, *, timeout: float = 10.0,  # noqa: ASYNC109 - per request
                  retries: int = 2, **nats_options: Any) -> Client:
    """Connect to ``settings.nats_url`` as the agent of ``settings.nats_creds``.

    Without agent credentials the client uses the operator's (the CLI on the
    machine that ran ``agentledger up``), or none on a server without accounts.
    ``nats_options`` go to ``nats.connect`` (e.g. ``error_cb``).
    """
    nats_options.setdefault("name", "agentledger-client")
    # Fail in seconds when no server answers at first (a CLI must say so, not hang), then, once
    # connected, reconnect forever: an agent outlives any server restart.
    nats_options.setdefault("max_reconnect_attempts", INITIAL_ATTEMPTS)
    nats_options.setdefault("reconnect_time_wait", 1.0)
    nats_options.setdefault("connect_timeout", 2.0)
    nats_options.setdefault("ping_interval", CLIENT_PING_INTERVAL_S)
    nats_options.setdefault("max_outstanding_pings", CLIENT_MAX_OUTSTANDING_PINGS)
    nc = await auth.connect(settings, auth.OPERATOR_ROLE, **nats_options)
    nc.options["max_reconnect_attempts"] = -1
    return Client(nc, settings, timeout=timeout, retries=retries)
