"""Requests and replies of the tombstone-fanout service (``<prefix>.forget.<action>``).

Who asks is the authenticated connection, never a field of the body: a tenant
agent may forget records, keys, data subjects and tasks of its own tenant; only
an operator may forget a whole tenant, and an operator names the tenant it acts
on. Every Struct forbids unknown fields.
"""

from __future__ import annotations

from typing import Literal

from msgspec import Struct

from agentledger.contracts.api import ErrorBody
from agentledger.contracts.events import (
    DeletionReceipt,
    ForgetSelector,
    IndexReceipt,
    Text,
    Timestamp,
    Token,
)

RequestStatus = Literal["pending", "completed"]


class _Req(Struct, forbid_unknown_fields=True, frozen=True, omit_defaults=True):
    """Base of the service's requests."""


class ForgetRequest(_Req, frozen=True):
    """Forget what ``selector`` names in ``tenant``.

    ``request_id`` is the idempotency key: the same id again answers the same
    request (and is refused with ``conflict`` if the selector differs). Without
    one, the service makes one up.
    """

    tenant: Token
    selector: ForgetSelector
    reason: Text = ""
    legal_basis: Text = ""
    request_id: Token | None = None


class ForgetReply(Struct, frozen=True, omit_defaults=True):
    """The request as accepted: its id, whether the fan-out finished, and the receipt if so.

    ``ok`` is always on the wire (``true``, or ``false`` with ``error``), as in every reply.
    """

    ok: bool
    request_id: str = ""
    status: RequestStatus = "pending"
    duplicate: bool = False
    receipt: DeletionReceipt | None = None
    error: ErrorBody | None = None


class ReceiptRequest(_Req, frozen=True):
    """One request's receipt (``request_id``), or every receipt of a data subject (``subject``)."""

    tenant: Token
    request_id: Token | None = None
    subject: Token | None = None


class RequestProgress(Struct, frozen=True, omit_defaults=True):
    """Where one request stands: the indexes done so far, and the receipt once all are."""

    request_id: str
    status: RequestStatus
    requested_at: Timestamp
    selector: ForgetSelector
    indexes: list[IndexReceipt] = []
    receipt: DeletionReceipt | None = None
    last_error: str = ""


class ReceiptReply(Struct, frozen=True, omit_defaults=True):
    """Where the requests asked about stand; ``ok`` always on the wire, as in every reply."""

    ok: bool
    requests: list[RequestProgress] = []
    error: ErrorBody | None = None


# Most requests one ``forget.receipt`` by subject returns.
MAX_RECEIPTS = 1000
