"""The evaluation end to end, against the real services (writer, projector, memory-policy,
context-builder on embedded NATS JetStream and PostgreSQL).

The clean preset's table is pinned: a change to a strategy, the corpus, the executor, a
metric or a service that moves a number must say so here. The same seed in a second tenant
must give the same read sets and the same scores (latency aside).
"""

from __future__ import annotations

import json
from pathlib import Path

from agentledger.config import Settings
from agentledger.eval.corpus import POISON, SECRET
from agentledger.eval.report import write
from agentledger.eval.run import PRESETS, ScenarioResult, run_scenario
from agentledger.eval.strategies import Env
from agentledger.models.embedding import load_embedder
from ckpt_support import running

# The clean preset's table (seed 19, 48 turns): strategy, success, delta, resume, precision,
# recall, stale use, contradiction; as `agentledger eval` measured it on b14d336. Vector top-K
# moved from 0.6 / 0.833 / 0.556 with 676dce4: a key its value repeats (`next_step` of
# `next_step=S6@v3`, every key of this corpus) is no longer indexed, so the embeddings are of the
# values alone.
PINNED_CLEAN = [
    ("off", 0.1, 0.0, 0.0, None, 0.0, None, None),
    ("full", 1.0, 90.0, 1.0, 0.346, 1.0, 0.0, 0.538),
    ("summary", 0.6, 50.0, 0.0, 0.625, 0.556, 0.167, 0.333),
    ("vector", 0.7, 60.0, 0.0, 1.0, 0.667, 0.0, 0.0),
    ("structured", 1.0, 90.0, 1.0, 0.692, 1.0, 0.0, 0.0),
]


def _read_sets(res: ScenarioResult) -> list[tuple[str, list[str], list[str], list[tuple[str, str]]]]:
    return [(s.strategy, [str(i) for i in s.accepted], [str(i) for i in s.used],
             [(str(i), o) for i, o in r.candidates]) for s, r in zip(res.scores, res.results, strict=True)]


def _table(res: ScenarioResult) -> list[tuple[object, ...]]:
    return [(s.strategy, s.task_success, s.delta_vs_off, s.resume_success,
             None if s.precision is None else round(s.precision, 3), round(s.recall, 3),
             None if s.stale_use is None else round(s.stale_use, 3),
             None if s.contradiction is None else round(s.contradiction, 3)) for s in res.scores]


async def test_the_clean_table_is_pinned_and_the_same_seed_reads_the_same(settings: Settings,
                                                                          tmp_path: Path) -> None:
    async with running(settings, checkpointer=True, memory=True, context=True) as stack:
        embedder = load_embedder(stack.settings)
        first = await run_scenario(Env(stack.c, stack.settings, embedder, "evala"), PRESETS["clean"])
        second = await run_scenario(Env(stack.c, stack.settings, embedder, "evalb"), PRESETS["clean"])
        risk = await run_scenario(Env(stack.c, stack.settings, embedder, "evalr"), PRESETS["risk"])
    assert _read_sets(first) == _read_sets(second)
    assert _table(first) == _table(second)
    # Token counts agree up to the ids in the provenance tags (record, receipt, checkpoint and
    # lineage ids are per tenant, and two ids of one length can tokenize to different counts).
    for a, b in zip(first.scores, second.scores, strict=True):
        assert abs(a.tokens - b.tokens) <= max(2, a.tokens // 20), (a.strategy, a.tokens, b.tokens)
    assert _table(first) == PINNED_CLEAN
    by = {s.strategy: s for s in risk.scores}
    # Off reads nothing: N/A, not 0.
    assert by["off"].precision is None and by["off"].accepted == ()
    # Full history reads the poisoned and the expired record and acts on them.
    assert by["full"].poison_used and by["full"].stale_used
    # The secret never reached a context: the writer redacted the turn, the policy denied the record.
    secret = risk.corpus.secret_value
    assert secret and all(secret not in r.context for r in risk.results)
    assert all(risk.corpus.label(i) != SECRET for s in risk.scores for i in s.accepted)
    # The structured build read through the gates: no poison, no stale item in its context.
    assert not any(risk.corpus.label(i) == POISON for i in by["structured"].accepted)
    assert by["structured"].stale_use == 0.0
    # ... yet it retrieved them: its candidates hold the older versions, the expired probe and the
    # poisoned rule, each refused by a gate (retrieved-then-gated is not use).
    structured = next(r for r in risk.results if r.name == "structured")
    refused = {(str(i), o) for i, o in structured.candidates if o.startswith("gated")}
    assert ("budget_left=22units@v6", "gated:ttl") in refused
    assert ("privacy_rule=retain-all-forever@v9", "gated:status") in refused
    assert ("schema_contract=checkpoint-v2@v2", "gated:status") in refused
    assert {str(i) for i in by["structured"].stale_retrieved} >= {"budget_left=22units@v6",
                                                                  "schema_contract=checkpoint-v2@v2"}
    # Working Memory marks patch v1 replaced by v2: structured's context holds one patch, so no
    # key with two values; full history still reads both (and every older version).
    assert by["structured"].contradiction == 0.0 and "artifact_patch" in by["full"].contradicted_keys
    # Resume success is the checkpointer's resume: it resumed from the interruption's checkpoint,
    # and full history, acting on the expired budget probe, does not reconcile with it.
    assert risk.resumed is not None and risk.resumed.status == "resumable" and risk.resumed.dispatch == ("S6",)
    assert by["structured"].resume_success == 1.0 and by["full"].resume_success == 0.0
    assert any(u.startswith("budget:") for u in by["full"].unreconciled)
    # Every read was timed, and every kind of write.
    assert all(len(s.read_ms) == PRESETS["risk"].knobs.repeats for s in risk.scores)
    writes = {"ledger.append", "memory.propose", "context.ingest", "artifact.put", "checkpoint.save"}
    assert writes <= set(risk.write_ms)
    paths = write(tmp_path / "report", [first, risk], {"seed": 19, "elapsed_s": 1.0, "stack": "test"})
    names = {p.name for p in paths}
    assert {"report.md", "report.json", "report.html", "success-vs-tokens.png", "metrics.png"} <= names
    assert not any(p.suffix == ".svg" for p in paths)
    for p in paths:
        if p.suffix == ".png":
            assert p.read_bytes().startswith(b"\x89PNG\r\n\x1a\n") and p.stat().st_size > 5000, p
            assert f"<img src='{p.name}'" in (tmp_path / "report" / "report.html").read_text(encoding="utf-8")
    data = json.loads((tmp_path / "report" / "report.json").read_text(encoding="utf-8"))
    full = next(s for s in data["scenarios"][1]["strategies"] if s["strategy"] == "full")
    assert {"item": "privacy_rule=retain-all-forever@v9", "label": POISON} in full["used"]
    assert "| structured |" in (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
