"""What the clients saw: every attempted event, lease grant and resume answer.

The checker judges the ledger against the clients' own view, Jepsen-style, so
the view has to be recorded where it happens: each append attempt of each
event id ends acknowledged (with the sequence the writer gave), definitely
refused (an error whose contract says nothing was stored) or unknown (a
timeout, the service or the server away, the run ending mid-request). Lease
grants are recorded with their token, which is the ledger sequence of the
writer's ``lease_granted`` event, and every resume answer with the Working
Memory read right after it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentledger.errors import AgentLedgerError

# Error codes that leave the outcome open: the writer may have stored the events anyway.
UNKNOWN_CODES = frozenset({"unavailable", "internal", "partial_duplicate"})

ACKED, FAILED, UNKNOWN = "acked", "failed", "unknown"


def is_definite(exc: AgentLedgerError) -> bool:
    """Whether an append error guarantees that nothing of the request was stored."""
    return exc.code not in UNKNOWN_CODES


@dataclass
class Attempt:
    """One event id as the clients saw it, over all its append attempts."""

    msg_id: str  # tenant/task/event_id: the stream's Nats-Msg-Id
    task_id: str
    kind: str
    role: str  # agent | resumer | zombie | probe
    acked_seq: int | None = None
    # Attempts answered with a definite refusal, with their codes; attempts left unknown.
    refusals: list[str] = field(default_factory=list)
    unknowns: int = 0
    # A retry answered `duplicate: true` after an attempt with unknown outcome: it had landed.
    acked_after_unknown: bool = False

    @property
    def outcome(self) -> str:
        if self.acked_seq is not None:
            return ACKED
        return FAILED if self.refusals and self.unknowns == 0 else UNKNOWN


@dataclass(frozen=True)
class Grant:
    """A lease a client was told it holds: the token is the ledger sequence of its grant."""

    tenant: str
    task_id: str
    holder: str
    token: int


@dataclass(frozen=True)
class ResumeCheck:
    """A resume answer and the Working Memory read at the answer's watermark."""

    task_id: str
    executor: str
    status: str
    watermark: int
    differences: list[str]


@dataclass
class History:
    """Everything the clients of one run attempted and were told."""

    attempts: dict[str, Attempt] = field(default_factory=dict)
    grants: list[Grant] = field(default_factory=list)
    resumes: list[ResumeCheck] = field(default_factory=list)

    def attempt(self, msg_id: str, task_id: str, kind: str, role: str) -> Attempt:
        found = self.attempts.get(msg_id)
        if found is None:
            found = self.attempts[msg_id] = Attempt(msg_id, task_id, kind, role)
        return found

    def acked(self, attempt: Attempt, seq: int, duplicate: bool) -> None:
        if attempt.acked_seq is None:
            attempt.acked_seq = seq
            attempt.acked_after_unknown = duplicate and attempt.unknowns > 0

    def resume_checked(self, check: ResumeCheck) -> None:
        self.resumes.append(check)


def differing_keys(expected: dict[str, Any], actual: dict[str, Any]) -> list[str]:
    """Top-level keys of two Working Memory views whose values differ."""
    return sorted(k for k in expected.keys() | actual.keys() if expected.get(k) != actual.get(k))
