"""The digest that pins a frozen generation."""

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
