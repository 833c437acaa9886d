"""The client's context methods: build, get, trace, commit, clear, ingest.

``Client`` inherits them. Every call goes to the context-builder on
``<prefix>.context.<action>``; the identity is the connection's, so ``tenant``
is checked, never trusted. Errors come back as the typed exceptions of
``agentledger.errors`` with the server's code and path.
"""

from __future__ import annotations

from typing import Any

import msgspec

from agentledger.contracts.api import LeaseBody
from agentledger.contracts.codec import checked
from agentledger.contracts.context_api import (
    BuildReply,
    BuildRequest,
    ClearReply,
    ClearRequest,
    CommitReply,
    CommitRequest,
    Generation,
    GenerationRef,
    IngestReply,
    IngestRequest,
    TraceLine,
)

_build_reply = msgspec.json.Decoder(BuildReply)
_commit_reply = msgspec.json.Decoder(CommitReply)
_clear_reply = msgspec.json.Decoder(ClearReply)
_ingest_reply = msgspec.json.Decoder(IngestReply)
SERVICE = "context-builder"


class ContextMethods:
    """Mixed into ``agentledger.client.Client``, which provides ``_call``."""

    async def _call(self, subject: str, body: dict[str, Any], what: str,
                    decoder: msgspec.json.Decoder[Any]) -> Any:
        raise NotImplementedError  # Client's: request, decode, raise a typed error

    async def build_context(self, tenant: str, task_id: str, input_ordinal: int, *,
                            window_tokens: int, **options: Any) -> Generation:
        """Build (and freeze) the context of one model call; see ``BuildRequest`` for the
        options (``reserve_tokens``, ``encoding``, ``model``, ``system``, ``tools``,
        ``memory_query``, ``document_query``, scopes, ``compaction``, ``generation_id``,
        ``regenerate``). Send the branch the generation ``selected``."""
        body = checked(BuildRequest, {"tenant": tenant, "task_id": task_id,
                                       "input_ordinal": input_ordinal,
                                       "window_tokens": window_tokens, **options})
        reply = await self._call("context.build", body, SERVICE, _build_reply)
        assert reply.generation is not None
        return reply.generation

    async def get_generation(self, tenant: str, generation_id: str) -> Generation:
        """A frozen generation, byte-identical to what its build returned."""
        body = checked(GenerationRef, {"tenant": tenant, "generation_id": generation_id})
        reply = await self._call("context.get", body, SERVICE, _build_reply)
        assert reply.generation is not None
        return reply.generation

    async def generation_trace(self, tenant: str, generation_id: str) -> list[TraceLine]:
        """The trace of the generation's selected branch: one line per candidate unit."""
        generation = await self.get_generation(tenant, generation_id)
        branch = next(b for b in generation.branches if b.name == generation.selected)
        return branch.trace

    async def commit_generation(self, tenant: str, generation_id: str,
                                answer_ordinal: int) -> CommitReply:
        """The answer is in the ledger as turn ``answer_ordinal``: activate the generation's
        staged checkpoint, if everything it was built on still holds (``reason`` if not)."""
        body = checked(CommitRequest, {"tenant": tenant, "generation_id": generation_id,
                                        "answer_ordinal": answer_ordinal})
        return await self._call("context.commit", body, SERVICE, _commit_reply)

    async def clear_history(self, tenant: str, task_id: str, *, through_ordinal: int | None = None,
                            reason: str = "", lease: LeaseBody | None = None) -> ClearReply:
        """Clear the conversation (through ``through_ordinal``, default all): a new epoch.

        On a leased task, pass the ``lease`` as granted: the clear is the caller's own append.
        """
        body = checked(ClearRequest, {"tenant": tenant, "task_id": task_id,
                                       "through_ordinal": through_ordinal, "reason": reason,
                                       "fencing_token": lease.token if lease is not None else None,
                                       "lease_secret": lease.secret if lease is not None else None})
        return await self._call("context.clear", body, SERVICE, _clear_reply)

    async def ingest_document(self, tenant: str, doc_id: str, version: int, text: str, *,
                              source: str, title: str = "", **options: Any) -> IngestReply:
        """Add a version of a document to the tenant's RAG index (chunked by the service)."""
        body = checked(IngestRequest, {"tenant": tenant, "doc_id": doc_id, "version": version,
                                        "text": text, "source": source, "title": title, **options})
        return await self._call("context.ingest", body, SERVICE, _ingest_reply)
