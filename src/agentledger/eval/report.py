"""The evaluation's report: Markdown, HTML with SVG plots, and JSON of every read set.

The JSON holds, per scenario and strategy, the context handed to the executor, its read set A
(each item with its label: truth, stale_version, expired, poison, secret, irrelevant), the
used set U, the candidate set with each candidate's outcome, the checks, and the trace lines
the services returned, so every number of the tables can be traced to the records behind it.
The plots are SVG written here (no plotting library is a dependency of the project).
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import blake3

from agentledger.eval.metrics import Scores
from agentledger.eval.run import ScenarioResult, latency_summary

COLOURS = {"off": "#888888", "full": "#d62728", "summary": "#ff7f0e", "vector": "#1f77b4", "structured": "#2ca02c"}
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
                "unsupported": list(map(str, s.unsupported)),
                "checks": s.checks, "outranked": list(s.outranked), "truncated": s.truncated,
                "dispatch": a.dispatch, "skip": list(a.skip), "read_ms": list(s.read_ms), "notes": r.notes,
                "trace": r.trace, "context": r.context})
        out["scenarios"].append({
            "name": res.scenario.name, "tenant": res.tenant, "options": asdict(res.scenario.options),
            "knobs": asdict(res.scenario.knobs), "corpus_blake3": blake3.blake3(c.to_json()).hexdigest(),
            "truth": [str(i) for i in c.truth], "risks": c.risks, "latency": latency_summary(res),
            "verdict": verdict(res), "strategies": strategies})
    return out


def svg_scatter(results: Sequence[ScenarioResult]) -> str:
    """Task success against context tokens (log scale), one point per scenario and strategy."""
    w, h, pad = 640, 360, 56
    points = [(res.scenario.name, s) for res in results for s in res.scores]
    xmax = max((s.tokens for _, s in points), default=10) or 10
    lx = math.log10(max(xmax, 10)) + 0.2

    def x(t: int) -> float:
        return pad + (w - 2 * pad) * (math.log10(max(t, 1)) / lx)

    def y(v: float) -> float:
        return h - pad - (h - 2 * pad) * v

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="black"/>',
           f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="black"/>',
           f'<text x="{w / 2}" y="{h - 16}" text-anchor="middle">context tokens (log scale)</text>',
           f'<text x="14" y="{h / 2}" transform="rotate(-90 14 {h / 2})" text-anchor="middle">task success</text>']
    for v in (0.0, 0.5, 1.0):
        out.append(f'<text x="{pad - 6}" y="{y(v) + 4}" text-anchor="end">{v:.1f}</text>')
    for t in (1, 10, 100, 1000, 10000, 100000):
        if t <= 10 ** lx:
            out.append(f'<text x="{x(t)}" y="{h - pad + 14}" text-anchor="middle">{t}</text>')
    shapes = {n: i for i, n in enumerate(dict.fromkeys(r.scenario.name for r in results))}
    for scen, s in points:
        cx, cy, col = x(s.tokens), y(s.task_success), COLOURS.get(s.strategy.partition("·")[0], "black")
        r = 5 + 2 * shapes[scen]
        out.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="{r}" fill="none" stroke="{col}" stroke-width="2">'
                   f'<title>{html.escape(scen)} / {s.strategy}: success {s.task_success:.2f}, {s.tokens} tokens'
                   f'</title></circle>')
    for i, (name, col) in enumerate(COLOURS.items()):
        out.append(f'<circle cx="{w - pad - 80}" cy="{pad + 14 * i}" r="4" fill="{col}"/>'
                   f'<text x="{w - pad - 70}" y="{pad + 14 * i + 4}">{name}</text>')
    for n, i in shapes.items():
        out.append(f'<circle cx="{pad + 20}" cy="{pad + 14 * i}" r="{5 + 2 * i}" fill="none" stroke="black"/>'
                   f'<text x="{pad + 34 + 2 * i}" y="{pad + 14 * i + 4}">{html.escape(n)}</text>')
    out.append("</svg>")
    return "\n".join(out)


def svg_metrics(results: Sequence[ScenarioResult]) -> str:
    """One panel per metric in [0, 1]: bars per strategy, grouped by scenario (N/A: no bar, a mark)."""
    metrics = ("task_success", "resume_success", "precision", "recall", "stale_use", "contradiction")
    pw, ph, pad = 300, 170, 30
    w, h = pw * 3, ph * 2
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="10">',
           f'<rect width="{w}" height="{h}" fill="white"/>']
    for m_i, metric in enumerate(metrics):
        ox, oy = (m_i % 3) * pw, (m_i // 3) * ph
        out.append(f'<text x="{ox + pw / 2}" y="{oy + 14}" text-anchor="middle" font-weight="bold">{metric}</text>')
        base = oy + ph - pad
        out.append(f'<line x1="{ox + pad}" y1="{base}" x2="{ox + pw - 10}" y2="{base}" stroke="black"/>')
        groups = len(results)
        gw = (pw - pad - 10) / max(groups, 1)
        for g, res in enumerate(results):
            bw = gw / (len(res.scores) + 1)
            out.append(f'<text x="{ox + pad + g * gw + gw / 2}" y="{base + 12}" text-anchor="middle">'
                       f'{html.escape(res.scenario.name)}</text>')
            for k, s in enumerate(res.scores):
                v = s.row()[metric]
                bx = ox + pad + g * gw + k * bw + bw / 2
                if v is None:
                    out.append(f'<text x="{bx + bw / 2}" y="{base - 3}" text-anchor="middle" font-size="7">N/A</text>')
                    continue
                bh = (ph - 2 * pad) * float(v)
                col = COLOURS.get(s.strategy.partition("·")[0], "black")
                out.append(f'<rect x="{bx:.1f}" y="{base - bh:.1f}" width="{bw * 0.9:.1f}" height="{bh:.1f}" '
                           f'fill="{col}"><title>{html.escape(res.scenario.name)} / {s.strategy}: {v:.2f}'
                           '</title></rect>')
    out.append("</svg>")
    return "\n".join(out)


def _swept(results: Sequence[ScenarioResult]) -> tuple[str, list[float]] | None:
    """The swept variable and its numeric values, when every scenario is ``<preset> var=<number>``."""
    parts = [r.scenario.name.rpartition(" ")[2].partition("=") for r in results]
    if len(results) < 2 or any(not sep or not v.isdigit() for _, sep, v in parts) or len({p[0] for p in parts}) != 1:
        return None
    return parts[0][0], [float(v) for _, _, v in parts]


def _p50(s: Scores) -> float:
    return sorted(s.read_ms)[len(s.read_ms) // 2] if s.read_ms else 0.0


def _growth_panel(ox: int, title: str, var: str, xs: list[float], series: dict[str, list[float]]) -> list[str]:
    """One log-log panel: a line per strategy of ``series`` (values at ``xs``)."""
    pw, ph, pad = 420, 300, 56
    ys = [max(y, 0.01) for vals in series.values() for y in vals]
    lo_x, hi_x = math.log10(max(min(xs), 1)), math.log10(max(*xs, 10))
    lo_y, hi_y = math.log10(min(ys)), math.log10(max(ys)) + 0.1

    def px(x: float) -> float:
        return ox + pad + (pw - 2 * pad) * (math.log10(max(x, 1)) - lo_x) / max(hi_x - lo_x, 1e-9)

    def py(y: float) -> float:
        return ph - pad - (ph - 2 * pad) * (math.log10(max(y, 0.01)) - lo_y) / max(hi_y - lo_y, 1e-9)

    out = [f'<text x="{ox + pw / 2}" y="16" text-anchor="middle" font-weight="bold">{title} against '
           f'{html.escape(var)} (log-log)</text>',
           f'<line x1="{ox + pad}" y1="{ph - pad}" x2="{ox + pw - pad}" y2="{ph - pad}" stroke="black"/>',
           f'<line x1="{ox + pad}" y1="{pad}" x2="{ox + pad}" y2="{ph - pad}" stroke="black"/>']
    out += [f'<text x="{px(x):.1f}" y="{ph - pad + 14}" text-anchor="middle">{x:g}</text>' for x in xs]
    out += [f'<text x="{ox + pad - 4}" y="{py(y) + 4:.1f}" text-anchor="end">{y:.3g}</text>'
            for y in (min(ys), max(ys))]
    for name, vals in series.items():
        col = COLOURS.get(name.partition("·")[0], "black")
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(xs, vals, strict=True))
        out.append(f'<polyline points="{path}" fill="none" stroke="{col}" stroke-width="2">'
                   f'<title>{html.escape(name)}</title></polyline>')
    return out


def svg_growth(results: Sequence[ScenarioResult]) -> str | None:
    """Cost growth of a numeric sweep: tokens and read p50 (ms) per strategy, both log scale."""
    swept = _swept(results)
    if swept is None:
        return None
    var, xs = swept
    tokens_of: dict[str, list[float]] = {}
    ms_of: dict[str, list[float]] = {}
    for res in results:
        for s in res.scores:
            tokens_of.setdefault(s.strategy, []).append(float(s.tokens))
            ms_of.setdefault(s.strategy, []).append(_p50(s))
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="840" height="300" font-family="sans-serif" '
           'font-size="11">', '<rect width="840" height="300" fill="white"/>',
           *_growth_panel(0, "context tokens", var, xs, tokens_of),
           *_growth_panel(420, "read p50 ms", var, xs, ms_of)]
    out += [f'<text x="{360 + 70 * i}" y="292" fill="{col}">{name}</text>' for i, (name, col) in
            enumerate(COLOURS.items())]
    out.append("</svg>")
    return "\n".join(out)


def write(out_dir: Path, results: Sequence[ScenarioResult], meta: dict[str, Any]) -> list[Path]:
    """Write report.md, report.json, report.html and the two SVG plots; their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    md = markdown(results, meta)
    files = {"report.md": md, "report.json": json.dumps(payload(results, meta), indent=1, ensure_ascii=False),
             "success-vs-tokens.svg": svg_scatter(results), "metrics.svg": svg_metrics(results)}
    growth = svg_growth(results)
    if growth is not None:
        files["growth.svg"] = growth
    body = f"<pre>{html.escape(md)}</pre>"
    files["report.html"] = ("<!doctype html><meta charset='utf-8'><title>agentledger eval</title>"
                            "<body style='font-family:sans-serif;max-width:70em'>"
                            f"{_html_tables(results)}<h2>plots</h2>{files['success-vs-tokens.svg']}"
                            f"{files['metrics.svg']}{growth or ''}<h2>report</h2>{body}</body>")
    paths = []
    for name, text in files.items():
        p = out_dir / name
        p.write_text(text, encoding="utf-8")
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
