"""Where a build's material comes from: the ledger's head, the Working Memory projection, sealed
turns, the memory-policy service, and the writer (for the events the builder appends).

All of it is I/O; nothing here decides what enters a context (``core.context`` does).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import nats.errors
import nats.js.errors
import structlog
from nats.aio.client import Client

from agentledger.client import raise_error
from agentledger.config import Settings
from agentledger.contracts.api import AppendReply
from agentledger.contracts.artifacts import H_BLAKE3, H_PRODUCER, H_SCHEMA, H_TENANT, H_VERSION, ArtifactReply
from agentledger.contracts.codec import encode
from agentledger.contracts.events import ArtifactRef, EventBase
from agentledger.contracts.memory_api import ReadReply, ReadRequest
from agentledger.core.state import Turn, WorkingMemory
from agentledger.errors import NotFoundError, UnavailableError
from agentledger.projection.catch_up import covering
from agentledger.security.identity import OPERATOR, Caller
from agentledger.security.on_behalf import headers_for
from agentledger.security.sealing import Keyring, kek_of, unseal
from agentledger.services.context_builder.store import ContextStore
from agentledger.stores.artifacts import hash_content
from agentledger.stores.ledger import task_last_seq

log = structlog.get_logger()

_append_reply = msgspec.json.Decoder(AppendReply)
_read_reply = msgspec.json.Decoder(ReadReply)
_artifact_reply = msgspec.json.Decoder(ArtifactReply)
# How long the builder waits for the memory-policy service to answer a read.
MEMORY_TIMEOUT_S = 10.0
APPEND_TIMEOUT_S = 30.0


class Sources:
    """The builder's reads and the one kind of write it does (an append through the writer)."""

    def __init__(self, settings: Settings, nc: Client, store: ContextStore) -> None:
        self.settings = settings
        self._nc = nc
        self.store = store
        self._keys: Keyring | None = None

    # ---- the projection -------------------------------------------------------------------------

    async def caught_up(self, tenant: str, task_id: str, target: int | None = None) -> WorkingMemory:
        """The task's projected state once the projection covers the ledger up to ``target``
        (default: the task's last ledger message), waiting at most ``context_catch_up_s``."""
        if target is None:
            target = await task_last_seq(self._nc, self.settings, tenant, task_id)
            if target == 0:
                raise NotFoundError(f"the ledger has no task {task_id!r} of tenant {tenant!r}",
                                    path="$.task_id")
        await covering(self.store.watermark, target, self.settings.context_catch_up_s)
        state = await self.store.state(tenant, task_id)
        if state is None:
            raise NotFoundError(f"no projected task {task_id!r} of tenant {tenant!r}", path="$.task_id")
        return state

    async def turn_texts(self, tenant: str, task_id: str, turns: Sequence[Turn]) -> dict[int, str | None]:
        """Each turn's text by ordinal, sealed ones opened (None: its subject's key is destroyed)."""
        out: dict[int, str | None] = {}
        for turn in turns:
            if turn.sealed is None:
                out[turn.ordinal] = turn.content or ""
                continue
            plain = await unseal(turn.sealed, tenant, task_id, self.keyring())
            out[turn.ordinal] = None if plain is None else plain.decode()
        return out

    def cached_keyring(self) -> Keyring | None:
        """The keyring if one was opened (what an eviction drops keys from)."""
        return self._keys

    def keyring(self) -> Keyring:
        if self._keys is None:
            self._keys = Keyring(self._nc, self.settings.keys_bucket,
                                 kek_of(self.settings, create=False),
                                 cache_bytes=self.settings.key_cache_bytes)
        return self._keys

    # ---- memory -----------------------------------------------------------------------------------

    async def memory(self, request: ReadRequest) -> ReadReply | None:
        """A gated read through the memory-policy service, as a service caller (the scopes were
        checked against the agent's bindings before); None when the service does not answer."""
        try:
            msg = await self._nc.request(f"{self.settings.prefix}.memory.read", encode(request),
                                         timeout=MEMORY_TIMEOUT_S)
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError):
            log.warning("context.memory_unavailable")
            return None
        reply = _read_reply.decode(msg.data)
        if reply.error is not None:
            raise_error(reply.error)
        return reply

    # ---- appends ----------------------------------------------------------------------------------

    async def append(self, event: EventBase, *, caller: Caller = OPERATOR, lease_secret: str | None = None) -> int:
        """Append one event through the writer, checked as ``caller``'s own append; its sequence."""
        body: dict[str, Any] = {"events": [event]}
        if lease_secret is not None:
            body["lease_secret"] = lease_secret
        try:
            msg = await self._nc.request(f"{self.settings.prefix}.writer.append", encode(body),
                                         timeout=APPEND_TIMEOUT_S, headers=headers_for(caller))
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError) as exc:
            raise UnavailableError("the ledger-writer did not answer; retry") from exc
        reply = _append_reply.decode(msg.data)
        if reply.error is not None:
            raise_error(reply.error)
        return int(reply.results[0].seq)

    async def put_artifact(self, data: bytes, *, tenant: str, schema: str) -> ArtifactRef:
        """Store bytes in the tenant's artifact store through the writer's ``artifact.put``."""
        headers = {H_SCHEMA: schema, H_PRODUCER: "context-builder", H_VERSION: "1",
                   H_BLAKE3: await hash_content(data), H_TENANT: tenant}
        try:
            msg = await self._nc.request(f"{self.settings.prefix}.artifact.put", data, timeout=APPEND_TIMEOUT_S,
                                         headers=headers)
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError) as exc:
            raise UnavailableError("the ledger-writer's artifact store did not answer; retry") from exc
        reply = _artifact_reply.decode(msg.data)
        if reply.error is not None:
            raise_error(reply.error)
        assert reply.artifact is not None
        return reply.artifact
