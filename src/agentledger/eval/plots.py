"""The evaluation report's pictures, as PNG: success against tokens, each metric per scenario,
and the cost growth of a numeric sweep.

Drawn with matplotlib's Agg backend (raster, in memory: no display, no network) and the font it
ships, so a report renders the same on a headless host. ``growth`` is the data of the growth
plot, kept apart so what the picture shows can be checked without reading pixels.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")  # before pyplot: no display is ever opened

import matplotlib.pyplot as plt  # after the backend is chosen

from agentledger.eval.metrics import Scores

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from agentledger.eval.run import ScenarioResult

COLOURS = {"off": "#888888", "full": "#d62728", "summary": "#ff7f0e", "vector": "#1f77b4", "structured": "#2ca02c"}
MARKERS = "osD^vP*X"
METRICS = ("task_success", "resume_success", "precision", "recall", "stale_use", "contradiction")


def _colour(strategy: str) -> str:
    return COLOURS.get(strategy.partition("·")[0], "black")


def _png(fig: Figure) -> bytes:
    """The figure as PNG bytes, without the library's version in the metadata (a report of
    the same figures is the same file)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def success_vs_tokens(results: Sequence[ScenarioResult]) -> bytes:
    """Task success against context tokens (log scale): a colour per strategy, a marker per scenario."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for n, res in enumerate(results):
        marker = MARKERS[n % len(MARKERS)]
        for s in res.scores:
            ax.scatter(max(s.tokens, 1), s.task_success, s=60, marker=marker, facecolors="none",
                       edgecolors=_colour(s.strategy), linewidths=2)
        ax.scatter([], [], marker=marker, facecolors="none", edgecolors="black", label=res.scenario.name)
    for name, col in COLOURS.items():
        ax.scatter([], [], marker="s", color=col, label=name)
    ax.set_xscale("log")
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("context tokens (log scale)")
    ax.set_ylabel("task success (10 checks)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.0, 0.5))
    fig.tight_layout()
    return _png(fig)


def metrics(results: Sequence[ScenarioResult]) -> bytes:
    """One panel per metric in [0, 1]: bars per strategy, grouped by scenario; N/A is a mark, no bar."""
    fig, axes = plt.subplots(2, 3, figsize=(11, 5.4), sharey=True)
    names = [r.scenario.name for r in results]
    for ax, metric in zip(axes.flat, METRICS, strict=True):
        for g, res in enumerate(results):
            width = 0.8 / max(len(res.scores), 1)
            for k, s in enumerate(res.scores):
                x = g - 0.4 + width * (k + 0.5)
                v = s.row()[metric]
                if v is None:
                    ax.text(x, 0.02, "N/A", ha="center", va="bottom", fontsize=5, rotation=90)
                    continue
                ax.bar(x, float(v), width * 0.9, color=_colour(s.strategy))
        ax.set_title(metric, fontsize=9)
        ax.set_xticks(range(len(names)), names, fontsize=7, rotation=15)
        ax.set_ylim(0, 1.05)
        ax.grid(axis="y", alpha=0.3)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    fig.legend(handles, list(COLOURS), loc="lower center", ncol=len(COLOURS), fontsize=8)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return _png(fig)


def _p50(s: Scores) -> float:
    return sorted(s.read_ms)[len(s.read_ms) // 2] if s.read_ms else 0.0


def growth(results: Sequence[ScenarioResult]) -> tuple[str, list[float], dict[str, list[float]],
                                                       dict[str, list[float]]] | None:
    """A numeric sweep's variable, its values, and per strategy the context tokens and read p50
    (ms) at each value; None unless every scenario is ``<preset> var=<number>`` of one variable."""
    parts = [r.scenario.name.rpartition(" ")[2].partition("=") for r in results]
    if len(results) < 2 or any(not sep or not v.isdigit() for _, sep, v in parts) or len({p[0] for p in parts}) != 1:
        return None
    tokens_of: dict[str, list[float]] = {}
    ms_of: dict[str, list[float]] = {}
    for res in results:
        for s in res.scores:
            tokens_of.setdefault(s.strategy, []).append(float(s.tokens))
            ms_of.setdefault(s.strategy, []).append(_p50(s))
    return parts[0][0], [float(v) for _, _, v in parts], tokens_of, ms_of


def growth_png(results: Sequence[ScenarioResult]) -> bytes | None:
    """Cost growth of a numeric sweep: tokens and read p50 per strategy against the variable,
    log-log (a zero is drawn at the axis floor: Off reads nothing and takes no time)."""
    data = growth(results)
    if data is None:
        return None
    var, xs, tokens_of, ms_of = data
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, title, series in ((axes[0], "context tokens", tokens_of), (axes[1], "read p50 ms", ms_of)):
        for name, ys in series.items():
            ax.plot(xs, [max(y, 0.01) for y in ys], marker="o", color=_colour(name), label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(var)
        ax.set_title(f"{title} against {var} (log-log)", fontsize=10)
        ax.grid(alpha=0.3, which="both")
    axes[1].legend(fontsize=8)
    fig.tight_layout()
    return _png(fig)
