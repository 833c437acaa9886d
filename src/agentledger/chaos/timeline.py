"""The timeline picture: faults as bands against append and Working Memory availability.

A table of recovery times says how long; the picture shows what overlapped
with what (a pause that outlived a lease, a projector that lagged after the
writer came back). It is a self-contained SVG drawn here, with no plotting
dependency: one band per fault across both lanes (red for a kill, orange for
a pause, its number on top and spelled out in the key below), and per lane the probes' outcome in
200 ms bins (green: every probe started in the bin answered, red: one failed,
grey: no probe).
"""

from __future__ import annotations

from collections.abc import Iterable
from html import escape
from pathlib import Path

from agentledger.chaos.faults import Injected
from agentledger.chaos.probes import LANES, Sample

BIN_S = 0.2
WIDTH = 1200
LEFT = 90
RIGHT = 20
LABEL_ROWS = 3
ROW_H = 16
LANE_H = 34
LANE_GAP = 12
AXIS_H = 30
COLORS = {"ok": "#2e9d4f", "fail": "#d43c3c", "none": "#d0d0d0"}
BAND = {"kill": "#d43c3c", "stop": "#f0a030"}
KEY_COLUMNS = 5


def lane_runs(samples: Iterable[Sample], lane: str, until: float) -> list[tuple[float, float, str]]:
    """(start, end, status) runs of 100 ms bins for one lane, merged where equal."""
    bins = max(1, int(until / BIN_S) + 1)
    state = ["none"] * bins
    for s in samples:
        if s.lane != lane or s.start < 0:
            continue
        i = min(bins - 1, int(s.start / BIN_S))
        if not s.ok:
            state[i] = "fail"
        elif state[i] == "none":
            state[i] = "ok"
    runs: list[tuple[float, float, str]] = []
    for i, st in enumerate(state):
        if runs and runs[-1][2] == st:
            runs[-1] = (runs[-1][0], (i + 1) * BIN_S, st)
        else:
            runs.append((i * BIN_S, (i + 1) * BIN_S, st))
    return runs


def render(samples: list[Sample], faults: list[Injected], until: float, title: str) -> str:
    """The SVG document."""
    until = max(until, BIN_S)
    plot_w = WIDTH - LEFT - RIGHT
    top = 30 + LABEL_ROWS * ROW_H
    lanes_h = len(LANES) * (LANE_H + LANE_GAP)
    key_rows = -(-len(faults) // KEY_COLUMNS)
    height = top + lanes_h + AXIS_H + 24 + key_rows * ROW_H + 8

    def x(t: float) -> float:
        return LEFT + plot_w * min(max(t, 0.0), until) / until

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">',
           f'<rect width="{WIDTH}" height="{height}" fill="white"/>',
           f'<text x="{LEFT}" y="18" font-size="14" font-weight="bold">{escape(title)}</text>']
    for n, lane in enumerate(LANES):
        y = top + n * (LANE_H + LANE_GAP)
        out.append(f'<text x="{LEFT - 8}" y="{y + LANE_H / 2 + 4}" text-anchor="end">'
                   f'{escape(lane)}</text>')
        for start, end, status in lane_runs(samples, lane, until):
            out.append(f'<rect x="{x(start):.1f}" y="{y}" width="{max(0.5, x(end) - x(start)):.1f}" '
                       f'height="{LANE_H}" fill="{COLORS[status]}"/>')
    for f in faults:
        x0 = x(f.start)
        w = max(2.0, x(max(f.end, f.start + 0.2)) - x0)
        row = (f.fault.index - 1) % LABEL_ROWS
        color = BAND[f.fault.kind]
        out.append(f'<rect x="{x0:.1f}" y="{30 + row * ROW_H}" width="{w:.1f}" '
                   f'height="{top - 30 - row * ROW_H + lanes_h - LANE_GAP}" fill="{color}" '
                   f'fill-opacity="0.35" stroke="{color}"/>')
        out.append(f'<text x="{x0 + 2:.1f}" y="{42 + row * ROW_H}">{f.fault.index}</text>')
    axis_y = top + lanes_h
    out.append(f'<line x1="{LEFT}" y1="{axis_y}" x2="{WIDTH - RIGHT}" y2="{axis_y}" stroke="black"/>')
    step = 5 if until <= 60 else 10 if until <= 200 else 30
    for t in range(0, int(until) + 1, step):
        out.append(f'<line x1="{x(t):.1f}" y1="{axis_y}" x2="{x(t):.1f}" y2="{axis_y + 5}" '
                   'stroke="black"/>')
        out.append(f'<text x="{x(t):.1f}" y="{axis_y + 17}" text-anchor="middle">{t} s</text>')
    legend_y = axis_y + AXIS_H + 10
    legend = [("answered", COLORS["ok"]), ("failed", COLORS["fail"]), ("no probe", COLORS["none"]),
              ("SIGKILL", BAND["kill"]), ("SIGSTOP..SIGCONT", BAND["stop"])]
    lx = LEFT
    for name, color in legend:
        out.append(f'<rect x="{lx}" y="{legend_y - 9}" width="12" height="10" fill="{color}"/>')
        out.append(f'<text x="{lx + 16}" y="{legend_y}">{escape(name)}</text>')
        lx += 30 + 7 * len(name)
    # The key: what each numbered band was.
    key_w = (WIDTH - LEFT - RIGHT) / KEY_COLUMNS
    for n, f in enumerate(faults):
        kx = LEFT + (n % KEY_COLUMNS) * key_w
        ky = legend_y + 22 + (n // KEY_COLUMNS) * ROW_H
        out.append(f'<text x="{kx:.1f}" y="{ky}" fill="{BAND[f.fault.kind]}">'
                   f'{f.fault.index} {escape(f.fault.label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write(path: Path, samples: list[Sample], faults: list[Injected], until: float, title: str) -> None:
    path.write_text(render(samples, faults, until, title), encoding="utf-8")
