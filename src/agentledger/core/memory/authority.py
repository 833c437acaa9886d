"""Who may write what, where, and for how long: the static tables of the memory policy.

Authority ranks sources (6 user-confirmed … 1 external document); each kind
names the scopes it may take, how long it lives (``expires_at``) or when it is
due for review (``review_at``) and which sources may write it. A scope is an
exact identity tuple; ``scope_key`` spells it as one string for equality
tests (SQL ``=``, never ``LIKE``). Its tokens are ``[A-Za-z0-9_-]``, so the
``/`` separators can never be forged by an id.
"""

from __future__ import annotations

from datetime import timedelta

import blake3
from msgspec import Struct

from agentledger.contracts.events import MemoryKind, MemorySource, Scope, ScopeLevel, Sensitivity, SourceKind

AUTHORITY: dict[SourceKind, int] = {
    "user_confirmed": 6,
    "runtime_evidence": 5,
    "project_rule": 4,
    "tool_output": 3,
    "model_inference": 2,
    "external_document": 1,
}
# A user's confirm feedback lifts a record to this authority.
CONFIRMED_AUTHORITY = 6
EXTERNAL_AUTHORITY = 1
# Records this trusted or less are reviewed at the latest after ``INFERENCE_REVIEW``:
# one inference never becomes a permanent memory.
LOW_AUTHORITY = 2
INFERENCE_REVIEW = timedelta(days=180)

# More specific scopes win a read-time merge between equal authority and version.
SPECIFICITY: dict[ScopeLevel, int] = {"session": 4, "task": 3, "user": 2, "project": 1, "tenant": 0}
SENSITIVITY_RANK: dict[Sensitivity, int] = {"public": 0, "internal": 1, "personal": 2}


class KindRule(Struct, frozen=True):
    """The policy of one kind.

    ``scopes`` in order of specificity (most specific first, what a narrowing
    picks); ``expires`` / ``review`` are offsets from ``observed_at``;
    ``forbidden`` sources are quarantined; ``episodic`` kinds hold observations
    of one task each, so two tasks' values never conflict.
    """

    scopes: tuple[ScopeLevel, ...]
    expires: timedelta | None = None
    review: timedelta | None = None
    forbidden: frozenset[SourceKind] = frozenset()
    episodic: bool = False
    text_only: bool = False


KIND_RULES: dict[MemoryKind, KindRule] = {
    # Tools only propose; they never set a user's preference, and a document never does.
    "preference": KindRule(("session", "user"), forbidden=frozenset({"tool_output", "external_document"})),
    "fact": KindRule(("task", "user", "project", "tenant")),
    "task_result": KindRule(("task", "project"), review=timedelta(days=30), episodic=True),
    "diagnostic": KindRule(("session", "task"), expires=timedelta(days=2), episodic=True),
    # How the agent does a task steers it as a rule does: a document or a page never sets it.
    "procedure": KindRule(("task", "project", "tenant"), review=timedelta(days=90),
                          forbidden=frozenset({"external_document"})),
    "rule": KindRule(("project", "tenant"), text_only=True,
                     forbidden=frozenset({"tool_output", "model_inference", "external_document"})),
}


def authority_of(source: MemorySource) -> int:
    """The authority of a source: tool output quoting a document counts as the document."""
    if source.kind == "tool_output" and source.quotes_external:
        return EXTERNAL_AUTHORITY
    return AUTHORITY[source.kind]


def effective_source(source: MemorySource) -> SourceKind:
    """The source kind the policy judges: ``external_document`` for quoting tool output."""
    if source.kind == "tool_output" and source.quotes_external:
        return "external_document"
    return source.kind


def scope_key(scope: Scope) -> str:
    """``level/tenant/id`` (``id`` empty at tenant level): equal strings iff equal scopes."""
    return f"{scope.level}/{scope.tenant}/{scope.id or ''}"


def parse_scope_key(key: str) -> Scope:
    """The inverse of ``scope_key``."""
    level, tenant, ident = key.split("/")
    return Scope(level=level, tenant=tenant, id=ident or None)


def specificity_of(scope: Scope | str) -> int:
    """Specificity of a scope or of a ``scope_key``."""
    level = scope.level if isinstance(scope, Scope) else scope.split("/", 1)[0]
    return SPECIFICITY[level]


def record_id_for(tenant: str, proposal_id: str) -> str:
    """The record id a proposal's decision gives it: the same proposal, the same id."""
    return "mem_" + blake3.blake3(f"{tenant}\x00{proposal_id}".encode()).hexdigest()[:24]


def promoted_id_for(group_scope: str, key: str) -> str:
    """The id of the fact promoted from a group's episodes (one per group, stable)."""
    return "mem_p" + blake3.blake3(f"promoted\x00{group_scope}\x00{key}".encode()).hexdigest()[:24]
