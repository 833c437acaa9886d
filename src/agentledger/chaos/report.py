"""The chaos report: what happened, what the checker found, and whether the goals were met.

The output folder gets ``report.txt`` (for people: counts, checks, one line
per injected fault with the recovery of each lane and of each target, the
goals), ``report.json`` (the same for programs, e.g. the test),
``timeline.svg`` (``timeline.render``) and ``samples.json`` (every probe, for
a second look). Recovery times are measured here and compared with the goals
(``goal_s``), but they never decide the exit status: only the correctness
results and "everything came back" do.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentledger.chaos import timeline
from agentledger.chaos.checker import Verdict
from agentledger.chaos.faults import Injected
from agentledger.chaos.probes import LANES, Recovery, Sample, recovery
from agentledger.chaos.workload import Stats

# Appends and WM must be back within this many seconds of any single fault: on an idle machine,
# and with every core busy (``--hog``). On a cluster, appends after a nats node's kill get
# LEADER_GOAL_S: the ledger stream may have to elect a new leader first.
GOAL_S = 2.0
LOADED_GOAL_S = 3.0
LEADER_GOAL_S = 5.0
FAULT_SIGNALS = frozenset({"SIGKILL", "SIGSTOP", "SIGCONT"})


@dataclass(frozen=True)
class FaultRow:
    index: int
    label: str
    kind: str
    targets: tuple[str, ...]
    start: float
    end: float
    pause_s: float
    lanes: dict[str, Recovery]
    back_s: dict[str, float | None]

    @property
    def single(self) -> bool:
        return len(self.targets) == 1

    def goal_s(self, lane: str, *, loaded: bool) -> float:
        """Seconds the lane may take to come back after this (single) fault."""
        if lane == "append" and any(t.startswith("nats-") for t in self.targets):
            return LEADER_GOAL_S  # a cluster node: perhaps the ledger stream's leader
        return LOADED_GOAL_S if loaded else GOAL_S

    def missed(self, *, loaded: bool) -> list[str]:
        """The lanes that came back later than their goal (or never)."""
        return [lane for lane in LANES if (s := self.lanes[lane].seconds) is None
                or s > self.goal_s(lane, loaded=loaded)]


def fault_rows(injected: list[Injected], samples: list[Sample], until: float) -> list[FaultRow]:
    """One row per injected fault; each fault's window ends where the next one starts."""
    rows = []
    for n, inj in enumerate(injected):
        window_end = injected[n + 1].start if n + 1 < len(injected) else until
        rows.append(FaultRow(
            index=inj.fault.index, label=inj.fault.label, kind=inj.fault.kind,
            targets=inj.fault.targets, start=round(inj.start, 2), end=round(inj.end, 2),
            pause_s=inj.fault.pause_s,
            lanes={lane: recovery(samples, lane, inj.start, inj.end, window_end) for lane in LANES},
            back_s=dict(inj.back_s)))
    return rows


@dataclass
class RunResult:
    """One chaos run, as reported."""

    profile: str
    seed: int
    elapsed_s: float
    phases: dict[str, float]
    faults: list[FaultRow]
    verdict: Verdict
    end_health: dict[str, bool]
    stats: Stats
    lanes: dict[str, dict[str, int]]
    signals: list[str]
    agents: int
    resumers: int
    notes: list[str] = field(default_factory=list)
    # Exceptions that ended one of the harness's own tasks: the run proves nothing then.
    errors: list[str] = field(default_factory=list)
    # Busy-loop processes that ran beside the stack for the whole run (``--hog``).
    hog: int = 0

    def goals(self) -> dict[str, bool]:
        c = self.verdict.classification
        loaded = self.hog > 0
        goal = LOADED_GOAL_S if loaded else GOAL_S
        return {
            "0 lost": not c.lost,
            "0 duplicated": not c.duplicated,
            "every correctness check passed": self.verdict.ok,
            "every service and server back by itself": self.everything_back(),
            f"appends and WM back within {goal:.0f} s of any single fault"
            + (f" ({LEADER_GOAL_S:.0f} s for appends after a cluster node's)"
               if any(t.startswith("nats-") for f in self.faults for t in f.targets) else "")
            + (f", with {self.hog} busy processes beside the stack" if loaded else ""):
                not self.missed_goals(),
            "no manual step (only fault signals sent)": set(self.signals) <= FAULT_SIGNALS,
        }

    def missed_goals(self) -> list[str]:
        """``#<index> <fault> <lane>`` for every single fault whose lane missed its goal."""
        return [f"#{f.index} {f.label} {lane}" for f in self.faults if f.single
                for lane in f.missed(loaded=self.hog > 0)]

    def everything_back(self) -> bool:
        return bool(self.end_health) and all(self.end_health.values()) and all(
            v is not None for f in self.faults for v in f.back_s.values())

    @property
    def correct(self) -> bool:
        """The exit-status verdict: correctness and recovery, never timing."""
        return self.verdict.ok and self.everything_back() and not self.errors

    def to_dict(self) -> dict[str, Any]:
        return {
            "profile": self.profile, "seed": self.seed, "elapsed_s": self.elapsed_s,
            "phases": self.phases, "agents": self.agents, "resumers": self.resumers,
            "correct": self.correct, "goals": self.goals(), "end_health": self.end_health,
            "faults": [asdict(f) | {"single": f.single,
                                    "outage_s": {k: r.outage_s for k, r in f.lanes.items()}}
                       for f in self.faults],
            "verdict": self.verdict.to_dict(), "workload": asdict(self.stats),
            "lanes": self.lanes, "signals": len(self.signals), "notes": self.notes,
            "errors": self.errors, "hog": self.hog, "missed_goals": self.missed_goals(),
        }


def _s(value: float | None) -> str:
    return "never" if value is None else f"{value:.2f}s"


def _list(items: list[str], limit: int = 5) -> str:
    shown = "; ".join(items[:limit])
    return shown + (f"; … {len(items) - limit} more" if len(items) > limit else "")


def render(result: RunResult) -> str:
    v = result.verdict
    c = v.classification
    st = result.stats
    lines = [
        f"agentledger chaos: profile {result.profile}, seed {result.seed}, {result.elapsed_s:.1f} s "
        f"({', '.join(f'{k} {t:.1f} s' for k, t in result.phases.items())})"
        + (f"; {result.hog} busy processes beside the stack (--hog)" if result.hog else ""),
        "",
        f"workload   {result.agents} agents + {result.resumers} resumer(s): {st.tasks_started} tasks "
        f"started, {st.tasks_completed} completions; {st.crashes} crashes on purpose, {st.lease_lost} "
        f"leases lost, {st.gave_up} gave up on an append; {st.handoffs} hand-offs, {st.resumed} "
        f"resumed ({st.needs_reconcile} needs_reconcile: {st.reconciled_applied} applied, "
        f"{st.reconciled_not_applied} not applied; {st.interrupted_closed} interrupted closed); "
        f"{st.dropped} dropped",
        f"           {st.zombie_writes} zombie writes ({c.zombie_refused} refused); "
        f"{st.step_failures} step failures retried; sink {v.effects.calls} calls, "
        f"{st.sink_unknown} unknown outcomes, {v.effects.keys_applied} keys applied",
        f"tasks      {', '.join(f'{k} {n}' for k, n in v.task_status.items())} (probe task included)",
        f"events     attempted {c.attempted}: " + ", ".join(f"{k} {n}" for k, n in c.outcomes.items())
        + f" | stored {c.stored} (+ {c.writer_grants} writer lease grants)",
        "           by role: " + "; ".join(
            f"{role} " + "/".join(str(n) for n in counts.values()) for role, counts in c.by_role.items())
        + " (acked/failed/unknown)",
        f"           lost {len(c.lost)}, duplicated {len(c.duplicated)}, unexpected {len(c.unexpected)}, "
        f"misplaced {len(c.misplaced)}, failed-but-stored {len(c.failed_but_stored)}, zombie accepted "
        f"{len(c.zombie_accepted)}, grants missing {len(c.grants_missing)}",
        f"           unknown-then-landed {c.unknown_then_landed}, unknown-not-landed "
        f"{c.unknown_not_landed}; acked after a retry {c.acked_after_retry} (of which had landed "
        f"during the unknown attempt: {c.acked_after_unknown})",
    ]
    for name in c.violations():
        found: list[str] = getattr(c, name)
        if found:
            lines.append(f"           {name}: {_list(found)}")
    checks = [
        ("projection = replay", v.projection_equals_replay, v.projection_summary.splitlines()[0]),
        ("checkpoints re-derived", not v.checkpoints.mismatches,
         f"{v.checkpoints.checked} checked" + (f"; {_list(v.checkpoints.mismatches)}"
                                               if v.checkpoints.mismatches else "")),
        ("checkpoint pointers", not v.pointers, _list(v.pointers) or "each on its newest"),
        ("side effects exactly once", not v.effects.violations,
         f"{v.effects.side_effect_steps} side-effecting steps, {v.effects.succeeded} succeeded"
         + (f"; {_list(v.effects.violations)}" if v.effects.violations else "")),
        ("resume = Working Memory", not v.resume_inconsistent,
         f"{v.resumes} resumes compared" + (f"; {_list(v.resume_inconsistent)}"
                                            if v.resume_inconsistent else "")),
        ("all back at the end", all(result.end_health.values()) and bool(result.end_health),
         ", ".join(f"{t} {'up' if ok else 'DOWN'}" for t, ok in result.end_health.items())),
    ]
    lines += ["", "checks"]
    lines += [f"  {'OK  ' if ok else 'FAIL'} {name:<26} {detail}" for name, ok, detail in checks]
    lines += ["", "probes     " + "; ".join(
        f"{lane}: {d['samples']} samples, {d['failed']} failed" for lane, d in result.lanes.items()),
        "", "faults (recovery: from the fault's end, i.e. the kill or the SIGCONT, until the lane "
        "answered for good)",
        "(down: from the lane's first failing probe until it answered again)",
        f"  {'#':>2}  {'fault':<34} {'at':>7} {'pause':>6} {'append':>8} {'down':>6} {'wm':>8} "
        f"{'down':>6}  back (serving again)"]
    for f in result.faults:
        back = ", ".join(f"{t} {_s(s)}" for t, s in f.back_s.items())
        lanes = " ".join(f"{_s(f.lanes[lane].seconds):>8} {_s(f.lanes[lane].outage_s):>6}"
                         for lane in LANES)
        lines.append(f"  {f.index:>2}  {f.label:<34} {f.start:>6.1f}s "
                     f"{(f'{f.pause_s:.1f}s' if f.kind == 'stop' else '-'):>6} {lanes}  {back}")
    by_kind: dict[str, list[FaultRow]] = defaultdict(list)
    for f in result.faults:
        by_kind[f.label if f.single else f"{f.kind} pair"].append(f)
    lines += ["", "worst recovery per fault kind (append / wm)"]
    for label, rows in sorted(by_kind.items()):
        worst = {lane: _worst([r.lanes[lane].seconds for r in rows]) for lane in LANES}
        lines.append(f"  {label:<34} {_s(worst['append']):>8} {_s(worst['wm']):>8}  ({len(rows)}x)")
    lines += ["", "goals"]
    lines += [f"  [{'met' if ok else 'NOT MET'}] {goal}" for goal, ok in result.goals().items()]
    if missed := result.missed_goals():
        lines.append(f"  over the goal: {_list(missed, 10)}")
    lines += [f"note: {n}" for n in result.notes]
    lines += [f"HARNESS ERROR: {e}" for e in result.errors]
    lines.append("")
    lines.append(f"verdict: {'CORRECT' if result.correct else 'INCORRECT'}")
    return "\n".join(lines) + "\n"


def _worst(values: list[float | None]) -> float | None:
    return None if any(v is None for v in values) else max(v for v in values if v is not None)


def write(out: Path, result: RunResult, samples: list[Sample], injected: list[Injected],
          until: float) -> str:
    """Write report.txt, report.json and timeline.svg into ``out``; returns the text."""
    out.mkdir(parents=True, exist_ok=True)
    text = render(result)
    (out / "report.txt").write_text(text, encoding="utf-8")
    (out / "report.json").write_text(json.dumps(result.to_dict(), indent=2, default=str) + "\n",
                                     encoding="utf-8")
    (out / "samples.json").write_text(json.dumps([asdict(s) for s in samples]) + "\n",
                                      encoding="utf-8")
    timeline.write(out / "timeline.svg", samples, injected, until,
                   f"agentledger chaos {result.profile} seed {result.seed}: faults against append "
                   f"and Working Memory availability")
    return text
