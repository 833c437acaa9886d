"""The client's memory methods: propose, read, show, history, feedback, receipts.

Kept apart from ``client.py`` so that the ledger client stays readable; ``Client``
inherits them. Every call goes to the memory-policy service on
``<prefix>.memory.<action>``; the identity is the connection's, so ``tenant`` is
checked, never trusted. Errors come back as the typed exceptions of
``agentledger.errors`` with the server's code and path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from agentledger.contracts.codec import checked
from agentledger.contracts.memory_api import (
    MAX_PROPOSALS,
    FeedbackReply,
    FeedbackRequest,
    KeyReply,
    KeyRequest,
    Proposal,
    ProposeReply,
    ProposeRequest,
    ReadReply,
    ReadRequest,
    ReceiptsReply,
    ReceiptsRequest,
)

_propose_reply = msgspec.json.Decoder(ProposeReply)
_read_reply = msgspec.json.Decoder(ReadReply)
_key_reply = msgspec.json.Decoder(KeyReply)
_feedback_reply = msgspec.json.Decoder(FeedbackReply)
_receipts_reply = msgspec.json.Decoder(ReceiptsReply)
SERVICE = "memory-policy service"


# Extra wait per proposal of one call: the bulk path decides ~380 a second on an idle 2-core
# host (docs/benchmarks.md), so 10 ms each leaves room for a host four times slower.
PROPOSAL_WAIT_S = 0.01


class MemoryMethods:
    """Mixed into ``agentledger.client.Client``, which provides ``_call``."""

    timeout: float

    async def _call(self, subject: str, body: dict[str, Any], what: str,
                    decoder: msgspec.json.Decoder[Any], *,
                    timeout: float | None = None) -> Any:  # noqa: ASYNC109 - per request
        raise NotImplementedError  # Client's: request, decode, raise a typed error

    async def memory_propose(self, tenant: str,
                             proposals: Sequence[Proposal | dict[str, Any]]) -> ProposeReply:
        """Submit candidate memories; one decision per proposal, in order.

        More than ``MAX_PROPOSALS`` (a bulk import) go in several calls; the
        decisions come back as one list. A call waits the client's timeout plus
        ``PROPOSAL_WAIT_S`` per proposal: the service decides them one after another, so a
        fixed wait that suits one proposal gives up on a thousand on a busy host.
        """
        items = [msgspec.to_builtins(p) if isinstance(p, Proposal) else p for p in proposals]
        decisions = []
        for start in range(0, len(items), MAX_PROPOSALS):
            body = checked(ProposeRequest, {"tenant": tenant, "proposals": items[start:start + MAX_PROPOSALS]})
            wait = self.timeout + PROPOSAL_WAIT_S * len(body["proposals"])
            reply = await self._call("memory.propose", body, SERVICE, _propose_reply, timeout=wait)
            decisions += reply.decisions
        return ProposeReply(ok=True, decisions=decisions)

    async def memory_read(self, tenant: str, query: str = "", **options: Any) -> ReadReply:
        """A gated read (``ReadRequest`` fields as keywords); the reply carries its receipt."""
        body = checked(ReadRequest, {"tenant": tenant, "query": query, **options})
        reply = await self._call("memory.read", body, SERVICE, _read_reply)
        return reply

    async def _key(self, action: str, tenant: str, key: str, level: str,
                   scope_id: str | None) -> KeyReply:
        body = checked(KeyRequest, {"tenant": tenant, "key": key, "scope": {"level": level, "id": scope_id}})
        reply = await self._call(f"memory.{action}", body, SERVICE, _key_reply)
        return reply

    async def memory_get(self, tenant: str, key: str, level: str,
                         scope_id: str | None = None) -> KeyReply:
        """The records of ``key`` in one scope that the caller may see, active first.

        ``key`` is canonicalised by the service as a proposal's is: its normal form
        (``Deploy Target`` → ``deploy_target``) when the scope holds it, else the subject
        the key lexicon names (``answer language`` → ``response_language``), else its
        content words (``core.memory.keys.lookup_keys``).
        """
        return await self._key("get", tenant, key, level, scope_id)

    async def memory_history(self, tenant: str, key: str, level: str,
                             scope_id: str | None = None) -> KeyReply:
        """Every version of ``key`` in one scope, with the decisions and feedback behind them
        (``key`` canonicalised as in ``memory_get``)."""
        return await self._key("history", tenant, key, level, scope_id)

    async def memory_feedback(self, tenant: str, record_id: str, action: str, feedback_id: str,
                              *, value: Any = None, reason: str = "") -> FeedbackReply:
        """Confirm, correct (with ``value``) or revoke a record, for its user."""
        body = checked(FeedbackRequest, {"tenant": tenant, "record_id": record_id, "action": action,
                                         "feedback_id": feedback_id, "value": value, "reason": reason})
        reply = await self._call("memory.feedback", body, SERVICE, _feedback_reply)
        return reply

    async def memory_receipts(self, tenant: str, *, task_id: str | None = None,
                              record_id: str | None = None, limit: int = 50,
                              before: str | None = None) -> ReceiptsReply:
        """Read receipts of a task or of a record, newest first (page with ``before``)."""
        body = checked(ReceiptsRequest, {"tenant": tenant, "task_id": task_id, "record_id": record_id,
                                         "limit": limit, "before": before})
        reply = await self._call("memory.receipts", body, SERVICE, _receipts_reply)
        return reply
