"""Seed 000 §24's metrics, from the actual read set of each strategy.

* G: the required facts with versions (``Corpus.truth``).
* A: what the strategy put into the context, deduplicated (items ``key=value@vN``).
* U: what actually influenced the resume cursor or an action (the executor's winners).

Memory precision ``|A∩G|/|A|`` is None (N/A) for an empty A — "nothing read" is not "all
wrong". Recall ``|A∩G|/|G|`` compares whole items: a key read at another version is no hit.
Stale use is the share of U that is stale (an older version or an expired record); a record a
strategy retrieved and then gated is in its *candidates*, not in A, and so never in U.
Contradiction: the keys of A with more than one value over the keys of A. Task success is the
share of the 10 acceptance checks passed; resume success whether the executor's actions
reconcile with the checkpointer's real resume of the task (``resume.reconcile``: resumable,
cursor, done set, both artifact hashes, budget), N/A without an interruption; the task-success
delta is taken against Memory Off of the same scenario (``with_delta``). Tokens are counted
with the project's tokenizer (tiktoken, ``agentledger.models.tokens``), as the context-builder
counts them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from agentledger.errors import AgentLedgerError
from agentledger.eval.corpus import EXPIRED, POISON, STALE, Corpus, Item
from agentledger.eval.executor import Actions, act, read, score
from agentledger.eval.resume import Resumed, reconcile
from agentledger.models import tokens

ENCODING = "cl100k_base"


class LeakError(AgentLedgerError):
    """A strategy's context holds what it was never given by a service: it is not scored."""

    code = "ground_truth_leak"


@dataclass
class StrategyResult:
    """What one strategy handed to the executor, and where it came from.

    ``context``: the exact text. ``received``: the texts the services answered with (rendered
    builds, record values, ledger messages, chunks); every fact of ``context`` must be in one of
    them. ``candidates``: items a gated read looked at, with the outcome it gave each (for the
    candidate vs accepted sets). ``ranked``: for a ranking strategy, the items in rank order.
    """

    name: str
    context: str
    received: list[str] = field(default_factory=list)
    candidates: list[tuple[Item, str]] = field(default_factory=list)
    ranked: list[list[Item]] = field(default_factory=list)
    read_ms: list[float] = field(default_factory=list)
    truncated: bool = False
    trace: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Scores:
    strategy: str
    accepted: tuple[Item, ...]  # A, sorted
    used: tuple[Item, ...]  # U
    precision: float | None
    recall: float
    stale_use: float | None
    stale_used: tuple[Item, ...]
    stale_retrieved: tuple[Item, ...]  # stale items among the candidates (gated or not)
    poison_used: tuple[Item, ...]
    contradiction: float | None
    contradicted_keys: tuple[str, ...]
    resume_success: float | None  # None: no interruption in this scenario, nothing to resume
    task_success: float
    checks: dict[str, bool]
    tokens: int
    read_ms: tuple[float, ...]
    truncated: bool
    outranked: tuple[str, ...] = ()
    delta_vs_off: float | None = None
    # Items the executor acted on that its context does not hold (a model's guesses).
    unsupported: tuple[Item, ...] = ()
    # What of its actions did not reconcile with the checkpointer's resume (``resume.reconcile``).
    unreconciled: tuple[str, ...] = ()

    def row(self) -> dict[str, Any]:
        return {"strategy": self.strategy, "task_success": self.task_success, "delta_vs_off": self.delta_vs_off,
                "resume_success": self.resume_success, "precision": self.precision, "recall": self.recall,
                "stale_use": self.stale_use, "contradiction": self.contradiction, "tokens": self.tokens}


def check_leak(result: StrategyResult, corpus: Corpus) -> None:
    """Refuse a context that holds the evaluator's canary, a fact nobody wrote, or a fact that
    none of the services' answers held."""
    if corpus.canary and corpus.canary in result.context:
        raise LeakError(f"{result.name}: the context holds the evaluator's canary")
    received = "\n".join(result.received)
    got = set(read(received))
    for it in read(result.context):
        if corpus.label(it) == "unknown":
            raise LeakError(f"{result.name}: {it} was never written by the corpus")
        if it not in got:
            raise LeakError(f"{result.name}: {it} is in the context but in no service's answer")


def _outranked(result: StrategyResult, corpus: Corpus) -> tuple[str, ...]:
    """For a ranking: each case where an item of a required key that is not the truth ranks
    before the truth of that key (or the truth is not ranked at all)."""
    truth = corpus.truth_by_key
    out = []
    pos: dict[Item, int] = {}
    for rank, items in enumerate(result.ranked, 1):
        for it in items:
            pos.setdefault(it, rank)
    for it, rank in sorted(pos.items(), key=lambda p: (p[1], str(p[0]))):
        t = truth.get(it.key)
        if t is None or it == t:
            continue
        t_rank = pos.get(t)
        if t_rank is None or t_rank > rank:
            where = "not ranked" if t_rank is None else f"rank {t_rank}"
            out.append(f"{it} ({corpus.label(it)}) at rank {rank} before {t} ({where})")
    return tuple(out)


def secret_markers(corpus: Corpus) -> tuple[str, ...]:
    return (corpus.secret_value,) if corpus.secret_value else ()


def evaluate(result: StrategyResult, corpus: Corpus, actions: Actions | None = None, executor: str = "",
             resumed: Resumed | None = None) -> tuple[Scores, Actions]:
    """Score one strategy's context (after the leak check), acted on by the deterministic
    executor, or by ``actions`` another executor (``executor`` names it) took on the same context.
    ``resumed``: the checkpointer's resume of the task (None: no interruption, resume N/A)."""
    check_leak(result, corpus)
    if actions is None:
        actions = act(result.context, secret_markers(corpus))
    s = score(actions, corpus)
    truth = set(corpus.truth)
    accepted = tuple(sorted(set(read(result.context))))
    hits = [it for it in accepted if it in truth]
    values: dict[str, set[str]] = {}
    for it in accepted:
        values.setdefault(it.key, set()).add(f"{it.value}@v{it.version}")
    contradicted = tuple(sorted(k for k, v in values.items() if len(v) > 1))
    used = actions.used
    unreconciled = reconcile(actions, resumed) if resumed is not None else None
    stale = tuple(it for it in used if corpus.label(it) in (STALE, EXPIRED))
    return Scores(
        strategy=f"{result.name}·{executor}" if executor else result.name,
        accepted=accepted,
        used=used,
        precision=len(hits) / len(accepted) if accepted else None,
        recall=len(hits) / len(truth),
        stale_use=len(stale) / len(used) if used else None,
        stale_used=stale,
        stale_retrieved=tuple(sorted({it for it, _ in result.candidates if corpus.label(it) in (STALE, EXPIRED)})),
        poison_used=tuple(it for it in used if corpus.label(it) == POISON),
        contradiction=len(contradicted) / len(values) if values else None,
        contradicted_keys=contradicted,
        resume_success=None if unreconciled is None else 0.0 if unreconciled else 1.0,
        unreconciled=tuple(unreconciled or ()),
        task_success=s.success,
        checks=s.checks,
        tokens=tokens.count(result.context, ENCODING) if result.context else 0,
        read_ms=tuple(result.read_ms),
        truncated=result.truncated,
        outranked=_outranked(result, corpus),
        unsupported=tuple(it for it in used if it not in accepted),
    ), actions


def with_delta(scores: list[Scores]) -> list[Scores]:
    """Each strategy's task-success delta against Memory Off of the same scenario and the same
    executor (``full·model`` against ``off·model``), in points."""
    out = []
    for s in scores:
        executor = s.strategy.partition("·")[2]
        base = f"off·{executor}" if executor else "off"
        off = next((o for o in scores if o.strategy == base), None)
        if off is None:
            raise ValueError(f"a scenario's delta needs its own Memory Off run ({base})")
        out.append(replace(s, delta_vs_off=round(100 * (s.task_success - off.task_success), 1)))
    return out


def percentiles(samples: list[float]) -> dict[str, float | None]:
    """p50 / p95 / p99 (nearest rank) of ``samples``; None when there are none."""
    if not samples:
        return {"p50": None, "p95": None, "p99": None, "n": 0}
    xs = sorted(samples)

    def q(p: float) -> float:
        return round(xs[min(len(xs) - 1, int(p * len(xs)))], 3)

    return {"p50": q(0.5), "p95": q(0.95), "p99": q(0.99), "n": len(xs)}
