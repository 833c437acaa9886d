"""The evaluation's report: Markdown, HTML with PNG plots, and JSON of every read set.

The JSON holds, per scenario and strategy, the context handed to the executor, its read set A
(each item with its label: truth, stale_version, expired, poison, secret, irrelevant), the
used set U, the candidate set with each candidate's outcome, the checks, and the trace lines
the services returned, so every number of the tables can be traced to the records behind it.
The plots are PNG files beside the pages (``plots``).
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import blake3

from agentledger.eval import plots
from agentledger.eval.metrics import Scores
from agentledger.eval.run import ScenarioResult, latency_summary

COLUMNS = ("task_success", "delta_vs_off", "resume_success", "precision", "recall", "stale_use", "contradiction",
           "tokens")


def _f(v: Any) -> str:
    if v is None:
        return "N/A"
    if isinstance(v, float):
        return f"{v:.2f}" if abs(v) < 10 else f"{v:.0f}"
    return str(v)


def verdict(res: ScenarioResult) -> list[str]:
    """Whether Structured met what issue 25 expects of it, each claim checked on the numbers."""
    by = {s.strategy: s for s in res.scores}
    st = by.get("structured")
    if st is None:
        return []
    out = []
    for name, ok, got in (("recall 1.0", st.recall == 1.0, st.recall), ("stale use 0", not st.stale_use, st.stale_use),
                          ("contradiction 0", not st.contradiction, st.contradiction),
                          ("resume success 1.0", st.resume_success == 1.0, st.resume_success)):
        out.append(f"{'met' if ok else 'NOT met'}: {name} (measured {_f(got)})")
    rivals = [s for s in res.scores if s.recall >= 0.9]
    if st.recall >= 0.9:
        fewest = min(rivals, key=lambda s: s.tokens)
        ok = fewest.strategy == "structured"
        out.append(f"{'met' if ok else 'NOT met'}: fewest tokens among recall >= 0.9 "
                   f"({', '.join(f'{s.strategy} {s.tokens}' for s in rivals)})")
    else:
        out.append(f"NOT met: fewest tokens among recall >= 0.9 (structured's recall is {_f(st.recall)})")
    missing = [k for k, v in st.checks.items() if not v]
    if missing:
        out.append("structured failed the checks: " + "; ".join(missing))
    return out


def _why(s: Scores, res: ScenarioResult) -> list[str]:
    c = res.corpus
    out = []
    if s.stale_used:
        out.append(f"stale items used: {', '.join(f'{i} ({c.label(i)})' for i in s.stale_used)}")
    if s.poison_used:
        out.append(f"poisoned items used: {', '.join(map(str, s.poison_used))}")
    if s.contradicted_keys:
        out.append(f"keys with several values in the context: {', '.join(s.contradicted_keys)}")
    truth = c.truth_by_key
    missing = [k for k, t in truth.items() if t not in s.accepted]
    if missing and s.strategy != "off":
        out.append(f"not in the context at its current version: {', '.join(missing)}")
    out += [f"outranked: {o}" for o in s.outranked]
    if s.unsupported:
        out.append(f"acted on items its context does not hold: {', '.join(map(str, s.unsupported))}")
    if s.stale_retrieved:
        out.append(f"stale among the candidates (retrieved, not necessarily used): "
                   f"{', '.join(map(str, s.stale_retrieved))}")
    if s.truncated:
        out.append("the context was cut to the window")
    if s.unreconciled and s.strategy != "off":
        out.append("did not reconcile with the resume: " + "; ".join(s.unreconciled))
    return out


def markdown(results: Sequence[ScenarioResult], meta: dict[str, Any]) -> str:
    lines = ["# agentledger eval: five ways of bringing old information back (seed 000 §21-24)", "",
             f"Seed {meta['seed']}, {meta['elapsed_s']:.0f} s, stack: {meta['stack']}. Read the table left to right: "
             "task success first (10 acceptance checks), then safety and consistency (stale use, contradiction), "
             "then cost (tokens, latency). Precision of an empty read set is N/A, never 0.", ""]
    for res in results:
        sc = res.scenario
        lat = latency_summary(res)
        lines += [f"## {sc.name}", "",
                  f"Corpus: {len(res.corpus.turns)} turns, {len(res.corpus.memory)} memory proposals, "
                  f"{len(res.corpus.documents)} documents; stale {sc.options.stale}, poison {sc.options.poison}, "
                  f"secret {sc.options.secret}. Knobs: summary budget {sc.knobs.summary_budget}, K {sc.knobs.k}, "
                  f"structured window {sc.knobs.window}, full-history window {sc.knobs.full_window}.", "",
                  "| strategy | success | Δ vs off (pts) | resume | precision | recall | stale use | contradiction "
                  "| tokens | read p50 ms |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for s in res.scores:
            p50 = lat["read"][s.strategy]["p50"]
            lines.append(f"| {s.strategy} | {_f(s.task_success)} | {_f(s.delta_vs_off)} | {_f(s.resume_success)} | "
                         f"{_f(s.precision)} | {_f(s.recall)} | {_f(s.stale_use)} | {_f(s.contradiction)} | "
                         f"{s.tokens} | {_f(p50)} |")
        lines += ["", "Write latency (ms, per call): " + "; ".join(
            f"{k} p50 {_f(v['p50'])} p95 {_f(v['p95'])} p99 {_f(v['p99'])} (n {v['n']})"
            for k, v in lat["write"].items()), ""]
        if res.resumed is not None:
            lines += [f"The checkpointer's {res.resumed.summary()}: each strategy's resume success is whether its "
                      "executor's actions reconcile with it.", ""]
        for s, r in zip(res.scores, res.results, strict=True):
            why = _why(s, res) + r.notes
            if why:
                lines.append(f"- **{s.strategy}**: " + "; ".join(why))
        v = verdict(res)
        if v:
            lines += ["", "Structured, against what issue 25 expects: " + "; ".join(v) + "."]
        lines.append("")
    return "\n".join(lines)


def payload(results: Sequence[ScenarioResult], meta: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"meta": meta, "scenarios": []}
    for res in results:
        c = res.corpus
        strategies = []
        for s, r, a in zip(res.scores, res.results, res.actions, strict=True):
            strategies.append({
                **s.row(),
                "accepted": [{"item": str(i), "label": c.label(i)} for i in s.accepted],
                "used": [{"item": str(i), "label": c.label(i)} for i in s.used],
                "candidates": [{"item": str(i), "outcome": o, "label": c.label(i)} for i, o in r.candidates],
                "stale_used": list(map(str, s.stale_used)), "stale_retrieved": list(map(str, s.stale_retrieved)),
                "poison_used": list(map(str, s.poison_used)), "contradicted_keys": list(s.contradicted_keys),
                "unsupported": list(map(str, s.unsupported)), "unreconciled": list(s.unreconciled),
                "checks": s.checks, "outranked": list(s.outranked), "truncated": s.truncated,
                "dispatch": a.dispatch, "skip": list(a.skip), "read_ms": list(s.read_ms), "notes": r.notes,
                "trace": r.trace, "context": r.context})
        out["scenarios"].append({
            "name": res.scenario.name, "tenant": res.tenant, "options": asdict(res.scenario.options),
            "knobs": asdict(res.scenario.knobs), "corpus_blake3": blake3.blake3(c.to_json()).hexdigest(),
            "truth": [str(i) for i in c.truth], "risks": c.risks, "latency": latency_summary(res),
            "resume": asdict(res.resumed) if res.resumed is not None else None,
            "verdict": verdict(res), "strategies": strategies})
    return out


def write(out_dir: Path, results: Sequence[ScenarioResult], meta: dict[str, Any]) -> list[Path]:
    """Write report.md, report.json, report.html and the PNG plots (growth.png for a numeric
    sweep); their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    md = markdown(results, meta)
    pictures = {"success-vs-tokens.png": plots.success_vs_tokens(results), "metrics.png": plots.metrics(results)}
    grown = plots.growth_png(results)
    if grown is not None:
        pictures["growth.png"] = grown
    images = "".join(f"<p><img src='{name}' alt='{name[:-4]}'></p>" for name in pictures)
    texts = {"report.md": md, "report.json": json.dumps(payload(results, meta), indent=1, ensure_ascii=False),
             "report.html": ("<!doctype html><meta charset='utf-8'><title>agentledger eval</title>"
                             "<body style='font-family:sans-serif;max-width:70em'>"
                             f"{_html_tables(results)}<h2>plots</h2>{images}"
                             f"<h2>report</h2><pre>{html.escape(md)}</pre></body>")}
    paths = []
    for name, text in texts.items():
        p = out_dir / name
        p.write_text(text, encoding="utf-8")
        paths.append(p)
    for name, data in pictures.items():
        p = out_dir / name
        p.write_bytes(data)
        paths.append(p)
    return paths


def _html_tables(results: Sequence[ScenarioResult]) -> str:
    parts = []
    for res in results:
        rows = "".join("<tr>" + "".join(f"<td>{html.escape(_f(s.row()[c]) if c != 'strategy' else s.strategy)}</td>"
                                        for c in ("strategy", *COLUMNS)) + "</tr>" for s in res.scores)
        head = "".join(f"<th>{c}</th>" for c in ("strategy", *COLUMNS))
        parts.append(f"<h2>{html.escape(res.scenario.name)}</h2><table border='1' cellpadding='4'>"
                     f"<tr>{head}</tr>{rows}</table>")
    return "".join(parts)
