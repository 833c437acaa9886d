"""The context builder's pure core: units, value, selection, rendering, accounting, compaction.

No I/O, clock or randomness: the service (``services/context_builder``) reads the ledger,
Working Memory, memory and documents, turns them into ``Unit`` values, and calls these
functions; tests exercise them without servers. See each module's docstring:
``units`` (what a unit is, its value), ``render`` (the exact text and its additive
count), ``accounting`` (budget, exact or margin), ``select`` (what enters and why),
``compaction`` (seed 002: plan, compactor, validation, digests, receipts, CAS) and
``generation`` (the frozen generation's digest).
"""

from agentledger.core.context.accounting import (
    BudgetTooSmallError,
    Counter,
    budget,
    counter_for,
    model_encoding,
)
from agentledger.core.context.compaction import (
    REFUSALS,
    InvalidSummaryError,
    TurnLike,
    canonical_summary,
    cas_check,
    checkpoint_id_for,
    checkpoint_payload,
    compact_structured,
    empty_summary,
    forgotten_checkpoint,
    key_id,
    lineage_id,
    parse_summary,
    plan,
    policy_version,
    private_key_bytes,
    private_key_from_bytes,
    public_key_bytes,
    public_key_from_bytes,
    receipt_payload,
    sign,
    source_digest,
    source_genesis,
    stage_candidate,
    summary_digest,
    summary_text,
    turn_tokens,
    turn_unit,
    validate_summary,
    verify,
    verify_checkpoint,
)
from agentledger.core.context.generation import FROZEN_FAILURE, canonical_generation, frozen_form, generation_digest
from agentledger.core.context.render import (
    AccountingError,
    Rendered,
    escape_data,
    escape_frame,
    render,
    unescape_data,
    unescape_frame,
)
from agentledger.core.context.select import Selection, select
from agentledger.core.context.units import Reduction, Unit, rank_relevance, structured_reductions, value

__all__ = [
    "FROZEN_FAILURE", "REFUSALS", "AccountingError", "BudgetTooSmallError", "Counter", "InvalidSummaryError",
    "Reduction",
    "Rendered", "Selection", "TurnLike", "Unit", "budget", "canonical_generation", "canonical_summary",
    "cas_check", "checkpoint_id_for", "checkpoint_payload", "compact_structured", "counter_for",
    "empty_summary", "escape_data", "escape_frame", "forgotten_checkpoint", "frozen_form", "generation_digest",
    "key_id",
    "lineage_id", "model_encoding", "parse_summary", "plan", "policy_version", "private_key_bytes",
    "private_key_from_bytes", "public_key_bytes", "public_key_from_bytes", "rank_relevance", "receipt_payload",
    "render", "select", "sign", "source_digest", "source_genesis", "stage_candidate", "structured_reductions",
    "summary_digest", "summary_text", "turn_tokens", "turn_unit", "unescape_data", "unescape_frame",
    "validate_summary", "value", "verify", "verify_checkpoint",
]
