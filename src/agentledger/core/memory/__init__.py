"""agentledger.core.memory: the memory policy, pure and I/O-free.

Tools and models propose; this package decides. ``authority`` holds the static
tables (source authority, what each kind may be, its scopes and TTL),
``keys`` the canonical key and value identity, ``decide`` the write path
(``prepare`` then ``decide``, one ``MemoryDecided`` with its trace per
proposal), ``resolve`` the order-independent resolution of a key group,
``state`` the reducer the projection and replay share, and ``read`` the read
path's scopes, gates, score, merge and token budget. No network, database or
clock: time comes in as ``now``.
"""

from agentledger.core.memory.authority import (
    AUTHORITY,
    KIND_RULES,
    SENSITIVITY_RANK,
    SPECIFICITY,
    KindRule,
    authority_of,
    effective_source,
    parse_scope_key,
    promoted_id_for,
    record_id_for,
    scope_key,
    specificity_of,
)
from agentledger.core.memory.decide import Detectors, Prepared, decide, default_detectors, prepare, with_sealed
from agentledger.core.memory.keys import (
    canonical_key,
    looks_diagnostic,
    normalise_key,
    normalise_text,
    text_of,
    value_identity,
)
from agentledger.core.memory.read import (
    Bindings,
    Selection,
    allowed_scopes,
    freshness,
    gates,
    merge_candidates,
    merge_rank,
    needs_review,
    passes,
    score,
    select_within_budget,
)
from agentledger.core.memory.resolve import (
    PROMOTION_THRESHOLD,
    TIE_REASON,
    FeedbackMark,
    GroupEntry,
    GroupKey,
    KeyGroup,
    Resolved,
    Tombstone,
    decode_group,
    encode_group,
    is_gated,
    promoted_record,
    resolve,
)
from agentledger.core.memory.state import (
    FORGOTTEN,
    DecisionIndex,
    Forgot,
    MemoryState,
    RecordRow,
    apply_memory_event,
    forget_records,
    is_forgotten,
    item_of,
    names_forgotten,
    render_rows,
    tombstone_row,
    update_rows,
)

__all__ = [
    "AUTHORITY", "FORGOTTEN", "KIND_RULES", "PROMOTION_THRESHOLD", "SENSITIVITY_RANK", "SPECIFICITY", "TIE_REASON",
    "Bindings", "DecisionIndex", "Detectors", "FeedbackMark", "Forgot", "GroupEntry", "GroupKey", "KeyGroup",
    "KindRule", "MemoryState", "Prepared", "RecordRow", "Resolved", "Selection", "Tombstone", "allowed_scopes",
    "apply_memory_event", "authority_of", "canonical_key", "decide", "decode_group", "default_detectors",
    "effective_source", "encode_group", "forget_records", "freshness", "gates", "is_forgotten", "is_gated", "item_of",
    "looks_diagnostic", "merge_candidates", "merge_rank", "names_forgotten", "needs_review", "normalise_key",
    "normalise_text", "parse_scope_key", "passes", "prepare", "promoted_id_for", "promoted_record", "record_id_for",
    "render_rows", "resolve", "scope_key", "score", "select_within_budget", "specificity_of", "text_of",
    "tombstone_row", "update_rows", "value_identity", "with_sealed",
]
