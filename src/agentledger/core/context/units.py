"""Candidate units of a context and their value.

A unit is one piece the builder may put in front of the model: the goal, a
Working Memory part, the active checkpoint, a turn, the current input, a memory
record, a document chunk, an artifact reference. It carries what selection needs
(mandatory, value components, optional reduced forms) and what the trace reports
(id, source, version).

``value(u) = W_RELEVANCE·relevance + W_FRESHNESS·freshness + W_VERIFIABILITY·verifiability
- LAMBDA_RISK·risk``, every component in [0, 1] (clamped). Relevance (does it serve the
next action) weighs most; verifiability (it can be checked against the ledger, a hash, a
receipt) next, because a checkable unit is worth more than a plausible one; freshness
last. Risk (untrusted origin, instruction-like text, low authority) subtracts at half
weight, so a relevant but risky unit can still enter, yet a merely fresh risky one
cannot. The range is [-0.5, 1.0]; ``select`` drops units below its ``min_value`` (0).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Literal

from msgspec import Struct

W_RELEVANCE = 0.5
W_VERIFIABILITY = 0.3
W_FRESHNESS = 0.2
LAMBDA_RISK = 0.5
# Selection's marginal value: a unit's value less this times its redundancy, the share of its
# distinct words the context already shows (``select``).
W_REDUNDANCY = 0.2

Source = Literal["goal", "working_memory", "checkpoint", "turn", "input", "memory", "document", "artifact"]
# Sources rendered as provenance-tagged data blocks (low privilege, never instructions).
DATA_SOURCES: frozenset[str] = frozenset({"goal", "working_memory", "checkpoint", "memory", "document",
                                          "artifact"})
# Data sources whose units are lines of one shared block (per source and attributes), not a
# block each: memory items are short, and a block's tags would cost more than the item.
LISTED_SOURCES: frozenset[str] = frozenset({"memory"})
# Sources rendered as chat turns with their own role.
TURN_SOURCES: frozenset[str] = frozenset({"turn", "input"})
# Fixed order of the data blocks in the data message, then of the turns.
SOURCE_RANK: dict[str, int] = {"goal": 0, "working_memory": 1, "checkpoint": 2, "memory": 3, "document": 4,
                               "artifact": 5, "turn": 6, "input": 7}


class Reduction(Struct, frozen=True):
    """A smaller form of a unit, tried when the full text does not fit.

    ``kind`` names it in the trace (``structured``, ``structured:essential``,
    ``summary``); reductions are tried in the order given, the free summary last.
    """

    kind: str
    text: str


class Unit(Struct, frozen=True, omit_defaults=True):
    """One candidate piece of context.

    ``id`` is unique within a build. ``role`` is the turn's role (turn and input
    units only). ``key``: units sharing a key supersede each other (highest
    ``version`` wins, compared as integers when both are). ``gated``: a gate
    refused it (memory read gates, a tombstone): it is traced, never rendered.
    ``verbatim``: the text must never be reduced (tool arguments, error codes,
    numbers, permission states); its ``reductions`` are ignored. ``observed_at``
    (seconds since the Unix epoch) with ``half_life_s`` computes freshness at
    ``value(unit, now)``; without it ``freshness`` is used as given. ``attrs`` are
    extra provenance attributes of the data block (e.g. an artifact's uri and hash).
    """

    id: str
    source: Source
    text: str
    version: str = ""
    mandatory: bool = False
    role: Literal["user", "assistant", "system", "tool"] | None = None
    ordinal: int | None = None
    kind: str = ""
    key: str | None = None
    relevance: float = 0.0
    freshness: float = 1.0
    verifiability: float = 0.0
    risk: float = 0.0
    observed_at: float | None = None
    half_life_s: float | None = None
    verbatim: bool = False
    gated: str | None = None
    reductions: tuple[Reduction, ...] = ()
    attrs: tuple[tuple[str, str], ...] = ()


# Reciprocal rank fusion's constant: a candidate source's rank r becomes relevance
# (RRF_K + 1) / (RRF_K + r), 1 for the first of every source, so memory items and document
# chunks ranked by different searches meet on one scale (their order, not their raw scores).
RRF_K = 60


def rank_relevance(rank: int) -> float:
    """The relevance of the ``rank``-th candidate (from 1) of a ranked source, in (0, 1]."""
    return (RRF_K + 1) / (RRF_K + max(rank, 1))


def _clamp(x: float) -> float:
    if math.isnan(x):
        return 0.0
    return min(max(x, 0.0), 1.0)


def freshness_of(unit: Unit, now: float | None) -> float:
    """``exp(-age / half_life)`` when the unit has an observation time and ``now`` is given."""
    if unit.observed_at is None or now is None or not unit.half_life_s:
        return _clamp(unit.freshness)
    age = max(now - unit.observed_at, 0.0)
    return math.exp(-age / unit.half_life_s)


def value(unit: Unit, now: float | None = None) -> float:
    """relevance + freshness + verifiability - λ·risk, weighted (see the module docstring).

    Rounded to 9 decimals so the order and the trace are the same on every platform.
    """
    v = (W_RELEVANCE * _clamp(unit.relevance) + W_FRESHNESS * freshness_of(unit, now)
         + W_VERIFIABILITY * _clamp(unit.verifiability) - LAMBDA_RISK * _clamp(unit.risk))
    return round(v, 9)


# Items that must survive a reduction whole: numbers, error codes, tool calls / arguments,
# permission states. An item is never cut inside; a reduction drops whole items only.
_CRITICAL = re.compile(r"\d|[A-Z][A-Z0-9]*_[A-Z0-9_]+|[a-z]+_[a-z0-9_]+|\w+\(|[{}\[\]=]|"
                       r"\b(?:denied|granted|allowed|forbidden|permission|error|failed)\b", re.IGNORECASE)


def is_critical(item: str) -> bool:
    """Does ``item`` carry something that must stay verbatim (number, code, argument, permission)?"""
    return _CRITICAL.search(item) is not None


def _section(title: str, items: Sequence[str]) -> str:
    return f"{title}:\n" + "\n".join(f"- {i}" for i in items) if items else f"{title}: none"


def structured_reductions(*, done: Sequence[str], not_done: Sequence[str], assumptions: Sequence[str] = (),
                          evidence: Sequence[str] = (), summary: str | None = None) -> tuple[Reduction, ...]:
    """The reduction ladder of a Working Memory unit: structured, then essential, then a free summary.

    ``structured`` keeps every item verbatim in four sections; ``structured:essential``
    keeps what is left to do and the assumptions whole, and of the done items and the
    evidence only those carrying numbers, error codes, arguments or permission states
    (whole, never cut); ``summary`` (free text) comes last, only if given.
    """
    full = "\n".join([_section("done", done), _section("not done", not_done),
                      _section("assumptions", assumptions), _section("evidence", evidence)])
    out = [Reduction("structured", full)]
    essential_done = [d for d in done if is_critical(d)]
    essential_evidence = [e for e in evidence if is_critical(e)]
    if len(essential_done) < len(done) or len(essential_evidence) < len(evidence):
        parts = [_section("not done", not_done), _section("assumptions", assumptions)]
        if essential_done:
            parts.insert(0, _section(f"done ({len(done)}; kept {len(essential_done)})", essential_done))
        else:
            parts.insert(0, f"done: {len(done)} items")
        if essential_evidence:
            parts.append(_section(f"evidence ({len(evidence)}; kept {len(essential_evidence)})", essential_evidence))
        out.append(Reduction("structured:essential", "\n".join(parts)))
    if summary:
        out.append(Reduction("summary", summary))
    return tuple(out)
