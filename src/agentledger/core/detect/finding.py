"""What a detector reports: a kind and a span of the text, never the matched value itself."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec


class Finding(msgspec.Struct, frozen=True):
    """``text[start:end]`` is what was found; ``detector`` names the rule or plugin that fired.

    The value is not kept so that a list of findings can be logged or stored without
    carrying what it points at.
    """

    kind: str
    start: int
    end: int
    detector: str


def non_overlapping(found: Iterable[Finding]) -> list[Finding]:
    """Sorted by start; of overlapping findings the earliest and then the longest wins.

    Redaction replaces spans right to left, so overlapping spans would corrupt the text.
    """
    out: list[Finding] = []
    for f in sorted(found, key=lambda f: (f.start, -(f.end - f.start))):
        if out and f.start < out[-1].end:
            if f.end > out[-1].end:  # extend the earlier one over the overlap
                last = out[-1]
                out[-1] = Finding(last.kind, last.start, f.end, last.detector)
            continue
        out.append(f)
    return out
