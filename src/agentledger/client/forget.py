"""The client's forget methods: request a forget, follow it to its receipt.

Inherited by ``agentledger.client.Client``. Calls go to the tombstone-fanout on
``<prefix>.forget.<action>``; who asks is the connection, so ``tenant`` is
checked, never trusted. Errors come back as the typed exceptions of
``agentledger.errors``.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec

from agentledger.contracts.codec import checked
from agentledger.contracts.forget_api import (
    ForgetReply,
    ForgetRequest,
    ReceiptReply,
    ReceiptRequest,
    RequestProgress,
)
from agentledger.errors import UnavailableError

_forget_reply = msgspec.json.Decoder(ForgetReply)
_receipt_reply = msgspec.json.Decoder(ReceiptReply)
SERVICE = "tombstone-fanout"


class ForgetMethods:
    """Mixed into ``agentledger.client.Client``, which provides ``_call``."""

    async def _call(self, subject: str, body: dict[str, Any], what: str,
                    decoder: msgspec.json.Decoder[Any]) -> Any:
        raise NotImplementedError  # Client's: request, decode, raise a typed error

    async def forget(self, tenant: str, selector: dict[str, Any], *, reason: str = "",
                     legal_basis: str = "", request_id: str | None = None) -> ForgetReply:
        """Ask to forget what ``selector`` names (``{"kind": "subject", "subject": ...}``, ...).

        The request is durable on the ledger when this returns; the fan-out runs in the
        background (``forget_wait`` follows it to its receipt).
        """
        body = checked(ForgetRequest, {"tenant": tenant, "selector": selector, "reason": reason,
                                       "legal_basis": legal_basis, "request_id": request_id})
        reply: ForgetReply = await self._call("forget.request", body, SERVICE, _forget_reply)
        return reply

    async def forget_receipts(self, tenant: str, *, request_id: str | None = None,
                              subject: str | None = None) -> list[RequestProgress]:
        """Where one request stands (``request_id``), or every request about a ``subject``."""
        body = checked(ReceiptRequest, {"tenant": tenant, "request_id": request_id, "subject": subject})
        reply: ReceiptReply = await self._call("forget.receipt", body, SERVICE, _receipt_reply)
        return list(reply.requests)

    async def forget_wait(self, tenant: str, request_id: str, timeout_s: float = 60.0) -> RequestProgress:
        """Poll a request until its receipt is sealed; ``UnavailableError`` after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        delay = 0.02
        while True:
            progress = (await self.forget_receipts(tenant, request_id=request_id))[0]
            if progress.receipt is not None:
                return progress
            if time.monotonic() > deadline:
                raise UnavailableError(f"forget request {request_id!r} is not complete after {timeout_s} s"
                                       + (f" (last error: {progress.last_error})" if progress.last_error else ""),
                                       code="forget_pending")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.25)
