"""The compactors a build may name (``CompactionPolicy.compactor``), and how one is called.

A compactor is an async callable ``(CompactionInput) -> Summary | bytes | str | dict``: the
previous checkpoint's summary and the prefix's turns in, a ``checkpoint-v1`` summary (or
its raw JSON, which ``stage_candidate`` validates) out. Whatever it returns is only a
candidate; a compactor that raises, times out or answers something invalid makes the
build select its frozen fallback.

* ``structured``: ``core.context.compact_structured``, deterministic, no model (default);
* ``openai``: an OpenAI-compatible chat endpoint (``agentledger.models.compactors``), when
  ``context_compactor_url`` is set;
* any name passed to ``ContextBuilder(compactors=...)`` (tests register failing ones).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agentledger.config import Settings
from agentledger.contracts.context_api import Coverage, Summary
from agentledger.core.context import compact_structured
from agentledger.errors import ContractError
from agentledger.models.compactors import make_compactor


@dataclass(frozen=True)
class PlainTurn:
    """A turn with its text opened (``content`` None: its data-subject key was destroyed)."""

    ordinal: int
    role: str
    content: str | None


@dataclass(frozen=True)
class CompactionInput:
    tenant: str
    task_id: str
    generation_id: str
    previous: Summary | None
    turns: list[PlainTurn]
    coverage: Coverage
    lineage_base: int


Compactor = Callable[[CompactionInput], Awaitable[Summary | bytes | str | Mapping[str, Any]]]


async def structured(request: CompactionInput) -> Summary:
    return compact_structured(request.previous, request.turns)


def registry(settings: Settings, extra: Mapping[str, Compactor]) -> dict[str, Compactor]:
    """``structured`` always; ``openai`` when an endpoint is configured; then ``extra``."""
    found: dict[str, Compactor] = {"structured": structured}
    if settings.context_compactor_url:
        found["openai"] = make_compactor(settings)
    found.update(extra)
    return found


def pick(compactors: Mapping[str, Compactor], name: str, path: str) -> Compactor:
    try:
        return compactors[name]
    except KeyError:
        raise ContractError(f"no compactor {name!r}; this service has {sorted(compactors)}",
                            code="unknown_compactor", path=path) from None
