"""The digest that pins a frozen generation, and the frozen form of a compacted build's final one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import blake3
import msgspec

from agentledger.contracts.context_api import Generation

# Not part of what the digest covers: the digest itself, and where the frozen bytes were
# stored (the artifact's uri is known only after the generation, digest included, is written).
DIGEST_EXCLUDES: frozenset[str] = frozenset({"digest", "artifact_uri"})


def canonical_generation(generation: Generation | Mapping[str, Any]) -> bytes:
    """The generation without ``DIGEST_EXCLUDES`` as canonical JSON (keys sorted, no whitespace)."""
    data = msgspec.to_builtins(generation)
    body = {k: v for k, v in data.items() if k not in DIGEST_EXCLUDES}
    return msgspec.json.encode(body, order="sorted")


def generation_digest(generation: Generation | Mapping[str, Any]) -> str:
    """blake3 of the canonical generation minus its digest (and its storage uri)."""
    return blake3.blake3(b"agentledger/context-generation/v1\x00" + canonical_generation(generation)).hexdigest()


# The failure a compacted build's frozen generation records: it was frozen before the compactor ran.
FROZEN_FAILURE = "frozen before the compactor ran"


def frozen_form(final: Generation) -> Generation:
    """The generation a compacted build froze before its compactor ran, re-derived from its final
    one: the same head, the fallback branch alone, the plan marked ``FROZEN_FAILURE``.

    A finished compacted build erases its frozen artifact (its bytes are the final one's fallback
    branch); the row's tagged ``frozen_digest`` still pins them, so ``frozen_form(final).digest``
    equal to it proves the fallback served is byte for byte what was frozen, never a fresh decision.
    """
    fallback = [b for b in final.branches if b.name == "fallback"]
    plan = msgspec.structs.replace(final.compaction, outcome="fallback", failure=FROZEN_FAILURE)
    frozen = msgspec.structs.replace(final, selected="fallback", branches=fallback, compaction=plan, digest="")
    return msgspec.structs.replace(frozen, digest=generation_digest(frozen))
