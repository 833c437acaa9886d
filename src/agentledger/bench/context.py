"""The context builder's core in process: build cost, compaction, and tokens sent.

* ``context_build_p50`` / ``_p99``: ``core.context.select`` (value, selection, render,
  exact count) over 1,000 candidate units with B = 8k, against tokenizing the same
  units' texts alone with tiktoken (the floor any exact builder pays). Target p99 <= 20 ms.
* ``context_compaction_500_turns``: plan + deterministic structured compactor +
  validation + digest of a 500-turn conversation, end to end in process.
* ``context_tokens_{50,200,500}_turns``: tokens one build sends with compaction
  (summary of the old prefix + recent exact turns) against the full history.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass

from agentledger.bench.common import emit, pct
from agentledger.contracts.context_api import CompactionPlan, Coverage
from agentledger.core.context import BudgetTooSmallError, compact_structured, counter_for, plan, select
from agentledger.core.context.accounting import Count
from agentledger.core.context.compaction import (
    summary_digest,
    summary_text,
    turn_tokens,
    turn_unit,
    validate_summary,
)
from agentledger.core.context.units import Unit
from agentledger.models import tokens

_WORDS = ("deploy", "billing", "region", "eu-west-1", "error", "E1043", "retry", "the", "user", "wants",
          "never", "on", "fridays", "version", "2.4.1", "approved", "budget", "tokens", "must", "keep")
# Conversation turns: mostly working chatter; every tenth carries a decision, a fact or a question,
# which is what a compactor keeps (random cue words in every turn would make it keep everything).
_CHATTER = ("we", "looked", "at", "the", "log", "output", "again", "and", "checked", "step", "three",
            "with", "a", "longer", "sample", "from", "yesterday", "run", "it", "shows", "same", "pattern")
_CUES = ("We decided the deploy must wait for the billing migration {n}.",
         "Confirmed: error E{n} comes from the retry path in eu-west-1.",
         "Which region should release {n} go to first?",
         "The user prefers summaries with the numbers of run {n} kept verbatim.")


@dataclass(frozen=True)
class _Turn:
    ordinal: int
    role: str
    content: str | None


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words)) + "."


def _units(n: int, rng: random.Random) -> list[Unit]:
    sources = ("memory", "document", "turn", "artifact", "working_memory")
    out = [Unit(id="goal", source="goal", text="Deploy billing v2.4.1 to eu-west-1.", mandatory=True),
           Unit(id="input", source="input", text="Go ahead.", mandatory=True, role="user", ordinal=n + 1)]
    for i in range(n - 2):
        src = sources[i % len(sources)]
        out.append(Unit(id=f"u{i}", source=src, text=_text(rng, rng.randint(10, 60)), version=str(1 + i % 3),
                        relevance=rng.random(), verifiability=rng.random(), risk=rng.random() * 0.3,
                        role="user" if src == "turn" else None, ordinal=i + 1 if src == "turn" else None))
    return out


def _turns(n: int, rng: random.Random) -> list[_Turn]:
    def text(i: int) -> str:
        chatter = " ".join(rng.choice(_CHATTER) for _ in range(rng.randint(20, 120))) + "."
        return f"{_CUES[i // 10 % len(_CUES)].format(n=i)} {chatter}" if i % 10 == 0 else chatter
    return [_Turn(i, "user" if i % 2 else "assistant", text(i)) for i in range(1, n + 1)]


def _sent(conv: list[_Turn], p: CompactionPlan, count: Count, budget: int) -> tuple[int, str]:
    """Tokens the builder would send for the last turn as input: the checkpoint (a summary of the
    compacted prefix) + the recent exact turns + the input, selected and rendered under the
    budget like the service does; a summary that does not fit means the recent-only fallback."""
    *history, current = conv
    if p.compacted is None or p.recent_exact is None:
        units = [turn_unit(t) for t in history] + [turn_unit(current, mandatory=True, source="input")]
        return select(units, budget, count).rendered.budgeted_tokens, "direct"
    recent = [turn_unit(t) for t in history if t.ordinal >= p.recent_exact.first]
    current_unit = turn_unit(current, mandatory=True, source="input")
    summary = compact_structured(None, [t for t in history if t.ordinal <= p.compacted.through])
    checkpoint = Unit(id="checkpoint", source="checkpoint", text=summary_text(summary), mandatory=True)
    try:
        return select([checkpoint, *recent, current_unit], budget, count).rendered.budgeted_tokens, "primary"
    except BudgetTooSmallError:
        return select([*recent, current_unit], budget, count).rendered.budgeted_tokens, "fallback"


def bench_context(build_runs: int, repeats: int = 3) -> None:
    rng = random.Random(7)  # noqa: S311 - reproducible bench data, not secrets
    counter = counter_for(None, "cl100k_base")
    count = counter.count
    units = _units(1000, rng)
    budget = 8000
    select(units, budget, count)  # warm the encoder
    samples, floors = [], []
    for _ in range(build_runs):
        start = time.perf_counter()
        for u in units:
            tokens.count(u.text, "cl100k_base")
        floors.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        chosen = select(units, budget, count)
        samples.append((time.perf_counter() - start) * 1000)
    assert chosen.rendered.budgeted_tokens <= budget
    p50, p99 = pct(samples, 0.5), pct(samples, 0.99)
    f50, f99 = pct(floors, 0.5), pct(floors, 0.99)
    emit("context_build_p50", p50, "ms", f50, p50 / f50, units=len(units), budget=budget,
         baseline_is="tiktoken count of the same units alone")
    emit("context_build_p99", p99, "ms", f99, p99 / f99, target="value <= 20 ms", units=len(units), budget=budget,
         baseline_is="tiktoken count of the same units alone")

    turns = _turns(500, rng)
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        full = sum(count(t.content or "") for t in turns)
        p = plan(turns, lineage_base=0, active_checkpoint_coverage_end=None, measured_tokens=full, cap=budget,
                 high_watermark=0.75, recent_exact_tokens=4000, count=count)
        assert p.compacted is not None
        covered = [t for t in turns if p.compacted.first <= t.ordinal <= p.compacted.through]
        summary = compact_structured(None, covered)
        problems = validate_summary(summary, Coverage(first=p.compacted.first, through=p.compacted.through), 0)
        summary_digest(summary)
        runs.append((time.perf_counter() - start) * 1000)
    emit("context_compaction_500_turns", sorted(runs)[len(runs) // 2], "ms", None, None, turns=500,
         compacted=p.compacted.through, valid=not problems)

    for n in (50, 200, 500):
        conv = turns[:n]
        full = sum(turn_tokens(t, count) for t in conv)
        p = plan(conv[:-1], lineage_base=0, active_checkpoint_coverage_end=None, measured_tokens=full,
                 cap=budget, high_watermark=0.75, recent_exact_tokens=4000, count=count)
        sent, branch = _sent(conv, p, count, budget)
        emit(f"context_tokens_{n}_turns", sent, "tokens", full, sent / full, turns=n, outcome=p.outcome,
             branch=branch, budget=budget, baseline_is="the full history's tokens (every turn as rendered)")
