"""The I/O-free rules of forgetting: which selectors are well formed, who may ask, the receipt digest.

Every service that forgets imports these; the tombstone-fanout's saga
(``services/tombstone_fanout``) is the I/O shell that drives the indexes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import msgspec
from blake3 import blake3

from agentledger.contracts import events as ev
from agentledger.core.memory.keys import normalise_key, tombstone_key
from agentledger.errors import ContractError, PermissionDeniedError

# The one field each selector kind needs; every other selector field must be empty.
_NEEDS = {"record": "record_id", "key": "key", "subject": "subject", "task": "task_id", "tenant": None}
_FIELDS = ("record_id", "key", "scope", "subject", "task_id")
# What the stored selector's key digests are keyed under (the scope part of ``tombstone_key``).
SELECTOR_KEY_SCOPE = "forget-selector"


def check_selector(selector: ev.ForgetSelector, tenant: str, path: str = "$.selector") -> None:
    """Refuse a selector missing the field its kind needs, or carrying one it does not use."""
    need = _NEEDS[selector.kind]
    allowed = {need} | ({"scope"} if selector.kind == "key" else set())
    for name in _FIELDS:
        value = getattr(selector, name)
        if name == need and value is None:
            raise ContractError(f"a {selector.kind} selector needs {name}", code="missing_field",
                                path=f"{path}.{name}")
        if name not in allowed and value is not None:
            raise ContractError(f"a {selector.kind} selector takes no {name}", code="unknown_field",
                                path=f"{path}.{name}")
    if selector.key_digests:
        raise ContractError("key_digests is the service's: a request names its key", code="unknown_field",
                            path=f"{path}.key_digests")
    if selector.scope is not None and selector.scope.tenant != tenant:
        raise ContractError("the scope's tenant must be the request's tenant", code="invalid_value",
                            path=f"{path}.scope.tenant")
    if selector.task_id is not None and selector.task_id.startswith(ev.RESERVED_TASK_PREFIX):
        raise ContractError("the runtime's own ledgers are forgotten by record, key, subject or tenant",
                            code="reserved_task", path=f"{path}.task_id")


def selector_key_digest(key: str, secret: bytes) -> str:
    """The keyed digest a key selector stores for ``key`` (``secret``: the marker key)."""
    return tombstone_key(SELECTOR_KEY_SCOPE, key, secret)


def stored_selector(selector: ev.ForgetSelector, secret: bytes) -> ev.ForgetSelector:
    """The selector as the service appends, stores and answers it: a key selector's words
    replaced by the keyed digests of the key and of its canonical form (the two a forget of
    the key matches), so neither the ``_forget`` ledger, the request's row nor the receipt
    holds them; any other selector as it is. Idempotent."""
    if selector.kind != "key" or selector.key is None:
        return selector
    forms = dict.fromkeys((selector.key, normalise_key(selector.key)))
    return msgspec.structs.replace(selector, key=None,
                                   key_digests=[selector_key_digest(k, secret) for k in forms])


def check_may_forget(selector: ev.ForgetSelector, *, operator: bool, bound_users: frozenset[str] = frozenset(),
                     bound_projects: frozenset[str] = frozenset(), agent: str | None = None,
                     lease_holder: str | None = None, record_scope: ev.Scope | None = None) -> None:
    """Who may forget what inside a tenant (an operator: anything).

    A whole tenant only an operator; a data subject only an agent bound to that user
    (``bound_users``), since crypto-shredding it destroys what every task holds of them;
    a task another agent holds a live lease on (``lease_holder``) only that holder. A key
    or a record within the agent's bindings, as its reads and writes are: a key in a user's
    or a project's scope only when bound to it (``bound_users``, ``bound_projects``), and a
    key named without a scope not at all (it reaches every scope of the tenant, other users'
    too); a record (its scope ``record_scope``, None when there is no such record) likewise.
    """
    if operator:
        return
    if selector.kind == "tenant":
        raise PermissionDeniedError("only an operator may forget a whole tenant", path="$.selector.kind")
    if selector.kind == "subject" and selector.subject not in bound_users:
        raise PermissionDeniedError(f"data subject {selector.subject!r} is not a user this agent is bound to",
                                    code="subject_not_bound", path="$.selector.subject")
    if selector.kind == "task" and lease_holder is not None and lease_holder != agent:
        raise PermissionDeniedError(f"task {selector.task_id!r} is leased by another agent; only its holder "
                                    "or an operator may forget it", code="task_leased", path="$.selector.task_id")
    if selector.kind == "key":
        if selector.scope is None:
            raise PermissionDeniedError("an agent names the scope of a key it forgets: without one the forget "
                                        "reaches every scope of the tenant, other users' too",
                                        code="scope_required", path="$.selector.scope")
        _within(selector.scope, bound_users, bound_projects, "$.selector.scope.id")
    if selector.kind == "record" and record_scope is not None:
        _within(record_scope, bound_users, bound_projects, "$.selector.record_id")


def _within(scope: ev.Scope, users: frozenset[str], projects: frozenset[str], path: str) -> None:
    """Refuse a user or project scope the agent is not bound to (``scope_not_allowed``)."""
    names = users if scope.level == "user" else projects if scope.level == "project" else None
    if names is not None and scope.id not in names:
        raise PermissionDeniedError(f"{scope.level} {scope.id!r} is not bound to this agent",
                                    code="scope_not_allowed", path=path)


def receipt_digest(receipt: ev.DeletionReceipt) -> str:
    """blake3 hex of the canonical JSON of every field of ``receipt`` but ``digest``.

    Canonical: msgspec's encoding with the digest blanked (fields in declaration order,
    defaults omitted), so the same receipt always hashes the same, in any process.
    """
    body = msgspec.structs.replace(receipt, digest="0" * 64)
    return str(blake3(msgspec.json.encode(body)).hexdigest())


def make_receipt(request: ev.ForgetRequested, *, tenant: str, requested_at: datetime,
                 completed_at: datetime, indexes: Sequence[ev.IndexReceipt]) -> ev.DeletionReceipt:
    """The sealed receipt of a finished request (indexes in the order they ran)."""
    draft = ev.DeletionReceipt(
        request_id=request.request_id, tenant=tenant, selector=request.selector,
        requested_by=request.requested_by, requested_at=requested_at, completed_at=completed_at,
        indexes=list(indexes), digest="0" * 64, subject=request.selector.subject)
    return msgspec.structs.replace(draft, digest=receipt_digest(draft))


def verify_receipt(receipt: ev.DeletionReceipt) -> bool:
    """Whether ``receipt`` still hashes to its digest."""
    return bool(receipt.digest == receipt_digest(receipt))
