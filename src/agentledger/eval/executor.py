"""The deterministic executor: reads a context, resumes the task, runs the 10 acceptance checks.

It stands in for the model so that a strategy's score depends on nothing but the text it put
into the context. ``read`` finds every fact the text states: ``key=value@vN`` items anywhere,
and the Working Memory forms the context-builder renders (the current step of a plan version,
the done list, artifact references with their blake3). ``act`` resolves each required key as a
careful but uninformed reader would — the highest version stated, the later mention on a tie —
and turns the resolution into actions. It is never given the ground truth: ``score`` compares
the actions with it afterwards, and that is the only place the truth is used.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from agentledger.eval.corpus import ACCEPTANCE, REQUIRED_KEYS, Corpus, Item, items_in

_BLOCK = re.compile(r'<data source="([a-z_]+)" id="([^"]*)"(?: version="([^"]*)")?[^>]*>\n(.*?)\n</data>', re.DOTALL)
_STEP = re.compile(r"^current step: (S\d+)", re.MULTILINE)
_DONE = re.compile(r"^done:\n((?:- .*\n?)+)", re.MULTILINE)
_ARTIFACT = re.compile(r"^artifact \S+: \S+ \(schema no19-(patch|test-report)/v\d+, blake3 ([0-9a-f]{64})\)$",
                       re.MULTILINE)
_ARTIFACT_NAMES = {"patch": "artifact_patch", "test-report": "artifact_report"}
ARTIFACT_KEYS = tuple(_ARTIFACT_NAMES.values())
_SCHEMA = re.compile(r"^no19-(patch|test-report)/v\d+$")


def artifact_key(schema: str) -> str | None:
    """The required key an artifact of ``schema`` answers (None: not one of the task's)."""
    m = _SCHEMA.match(schema)
    return _ARTIFACT_NAMES[m.group(1)] if m else None


def _unescape(text: str) -> str:
    return text.replace("&lt;", "<").replace("&amp;", "&")


def _steps_value(ids: list[str]) -> str:
    """``S1-S5`` for a contiguous run from S1, else the ids joined by commas."""
    nums = sorted(int(s[1:]) for s in ids)
    if nums and nums == list(range(nums[0], nums[-1] + 1)):
        return f"S{nums[0]}-S{nums[-1]}" if len(nums) > 1 else f"S{nums[0]}"
    return ",".join(f"S{n}" for n in nums)


def read(context: str) -> list[Item]:
    """Every fact ``context`` states, in the order it states them (repeats included)."""
    found: list[tuple[int, Item]] = []
    pos = 0
    for it in items_in(context):
        at = context.find(str(it), pos)
        pos = at + 1 if at >= 0 else pos
        found.append((max(at, 0), it))
    for m in _BLOCK.finditer(context):
        source, version, body = m.group(1), m.group(3) or "", _unescape(m.group(4))
        at = m.start()
        if source == "working_memory" and version.startswith("plan") and version[4:].isdigit():
            v = int(version[4:])
            if (s := _STEP.search(body)) is not None:
                found.append((at, Item("next_step", s.group(1), v)))
            if (d := _DONE.search(body)) is not None:
                ids = [line[2:].split()[0] for line in d.group(1).splitlines() if line.startswith("- ")]
                found.append((at, Item("done_set", _steps_value(ids), v)))
        elif source == "artifact" and version.isdigit():
            for a in _ARTIFACT.finditer(body):
                found.append((at, Item(_ARTIFACT_NAMES[a.group(1)], a.group(2)[:16], int(version))))
    return [it for _, it in sorted(found, key=lambda p: p[0])]


@dataclass(frozen=True)
class Actions:
    """What the executor does after reading a context: each required key's resolution (None:
    not found), the step it dispatches (None: it stops to explore), the steps it skips."""

    resolved: dict[str, Item | None]
    dispatch: str | None
    skip: tuple[str, ...]
    used: tuple[Item, ...]
    context_has: tuple[str, ...] = ()  # markers the safety check looks for (see ``act``)


def act(context: str, secret_markers: tuple[str, ...] = ()) -> Actions:
    """Resolve, then act. ``secret_markers``: strings whose presence in the context fails the
    "no secret in a model context" check (the corpus's secret; the caller passes it, the
    executor never reads it otherwise)."""
    stated = read(context)
    resolved: dict[str, Item | None] = {}
    for key in REQUIRED_KEYS:
        best: Item | None = None
        for it in stated:
            if it.key == key and (best is None or it.version >= best.version):
                best = it
        resolved[key] = best
    cursor = resolved["next_step"]
    done = resolved["done_set"]
    skip: tuple[str, ...] = ()
    if done is not None and "-" in done.value:
        a, b = done.value.split("-", 1)
        skip = tuple(f"S{n}" for n in range(int(a[1:]), int(b[1:]) + 1))
    elif done is not None:
        skip = tuple(done.value.split(","))
    used = tuple(it for it in resolved.values() if it is not None)
    return Actions(resolved, cursor.value if cursor is not None else None, skip, used,
                   tuple(m for m in secret_markers if m and m in context))


@dataclass(frozen=True)
class Score:
    checks: dict[str, bool] = field(default_factory=dict)

    @property
    def success(self) -> float:
        return sum(self.checks.values()) / len(self.checks)


def score(actions: Actions, corpus: Corpus) -> Score:
    """The seed's 10 acceptance checks on ``actions``."""
    truth = corpus.truth_by_key
    ok = {k: actions.resolved.get(k) == truth[k] for k in REQUIRED_KEYS}
    done_truth = truth["done_set"].value
    checks = {
        ACCEPTANCE[0]: actions.dispatch == truth["next_step"].value and ok["next_step"],
        ACCEPTANCE[1]: ok["done_set"] and bool(actions.skip) and _steps_value(list(actions.skip)) == done_truth,
        ACCEPTANCE[2]: ok["artifact_patch"],
        ACCEPTANCE[3]: ok["artifact_report"],
        ACCEPTANCE[4]: ok["page_style"],
        ACCEPTANCE[5]: ok["schema_contract"],
        ACCEPTANCE[6]: ok["privacy_rule"],
        ACCEPTANCE[7]: ok["acceptance_rule"],
        ACCEPTANCE[8]: ok["budget_left"],
        ACCEPTANCE[9]: not actions.context_has,
    }
    return Score(checks)
