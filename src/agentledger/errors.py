"""One root error for agentledger, with typed children that cross the wire.

Every error a caller can see carries a stable ``code``, the JSON ``path`` of the
offending field (when there is one) and whether retrying can help. The wire form
(`ErrorBody` in the contracts) is built from these attributes, so a client in any
language can branch on ``code`` without parsing messages.
"""

from __future__ import annotations


class AgentLedgerError(Exception):
    """Root of every error raised by agentledger code."""

    code: str = "internal"
    retryable: bool = False

    def __init__(self, message: str, *, path: str | None = None, code: str | None = None,
                 retryable: bool | None = None, current_seq: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        if code is not None:
            self.code = code
        if retryable is not None:
            self.retryable = retryable
        self.current_seq = current_seq

    def __str__(self) -> str:
        if self.path:
            return f"{self.code}: {self.message} - at `{self.path}`"
        return f"{self.code}: {self.message}"


class ContractError(AgentLedgerError):
    """Input that does not satisfy a wire contract (shape, type, version, token)."""

    code = "invalid_field"


class PermissionDeniedError(AgentLedgerError):
    """The authenticated caller may not do this (another tenant's data, a revoked tenant)."""

    code = "permission_denied"


class ConflictError(AgentLedgerError):
    """An optimistic-concurrency expectation did not hold; carries the current sequence."""

    code = "conflict"


class EventIdConflictError(ConflictError):
    """An event id already stored with other content: a new event needs a new id."""

    code = "event_id_conflict"


class ProposalIdConflictError(ConflictError):
    """A memory proposal id already decided for other content: a new proposal needs a new id."""

    code = "proposal_id_conflict"


class DuplicateError(AgentLedgerError):
    """Part of an atomic batch was already stored while the rest was not."""

    code = "partial_duplicate"


class UnavailableError(AgentLedgerError):
    """A dependency (NATS, PostgreSQL) did not answer in time; retrying is safe."""

    code = "unavailable"
    retryable = True


class NotFoundError(AgentLedgerError):
    """The requested task, key or record does not exist."""

    code = "not_found"


class KeyDestroyedError(AgentLedgerError):
    """The data-subject key was destroyed: the sealed content is gone for good."""

    code = "key_destroyed"


class RuntimeStateError(AgentLedgerError):
    """The embedded runtime is not in the state the command needs (not up, already up)."""

    code = "runtime_state"


class RateLimitedError(AgentLedgerError):
    """A tenant sends faster than its configured rate; the same request succeeds a little later
    (``retry_after_s``, which the message also names)."""

    code = "rate_limited"
    retryable = True

    def __init__(self, message: str, *, retry_after_s: float = 0.0, **kw: object) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        self.retry_after_s = retry_after_s


class QuotaExceededError(AgentLedgerError):
    """A tenant holds what its quota allows (``ledger_quota_exceeded``,
    ``artifact_quota_exceeded``, ``memory_quota_exceeded``); retrying does not help until
    something of it is erased or the quota is raised."""

    code = "quota_exceeded"


class StorageFullError(AgentLedgerError):
    """A store shared by every tenant is at its configured size (``ledger_full``,
    ``artifact_store_full``); nothing was stored."""

    code = "storage_full"


class LedgerGapError(AgentLedgerError):
    """The ledger no longer holds sequences a projection was folded from or had still to fold
    (its stream was deleted and recreated, or purged): retrying cannot bring them back. The
    message names the missing range (``first_missing`` to ``last_missing``, when known)."""

    code = "ledger_gap"

    def __init__(self, message: str, *, first_missing: int | None = None,
                 last_missing: int | None = None, **kw: object) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        self.first_missing = first_missing
        self.last_missing = last_missing


class IntegrityViolationError(AgentLedgerError):
    """Stored bytes fail their MAC, or a chain does not link: something was edited, moved,
    forged, dropped or rolled back outside the services. Never retryable: the stored copy is
    refused, not served. ``where`` names the store (``ledger``, ``working_memory``, ``memory``,
    ``checkpoint``, ``generation``, ``receipt``, ``witness``); the message names the tenant,
    task and index or record (ids only, never content)."""

    code = "integrity_violation"

    def __init__(self, message: str, *, where: str | None = None, **kw: object) -> None:
        super().__init__(message, **kw)  # type: ignore[arg-type]
        self.where = where


class ReplayWouldShrinkError(AgentLedgerError):
    """``agentledger replay`` would build a projection smaller than the live one (tasks the
    ledger no longer holds would be dropped); nothing was changed. ``--allow-shrink`` rebuilds
    anyway."""

    code = "replay_would_shrink"
