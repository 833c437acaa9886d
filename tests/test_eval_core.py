"""The evaluation's pure core: the seeded corpus, the executor, and §24's metrics.

No server: every case here is fed in on purpose (a strategy that leaks the ground truth, an
empty read set, a version-blind match, a stale record that was retrieved and then gated) and
must be caught by the code the real run uses.
"""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from agentledger.cli.main import build_parser
from agentledger.config import from_env
from agentledger.core.context.render import data_block
from agentledger.core.context.units import Unit
from agentledger.eval import corpus as c
from agentledger.eval import plots
from agentledger.eval.command import _fits_the_quota, run_eval, scenarios_of
from agentledger.eval.executor import act, read, score
from agentledger.eval.metrics import LeakError, StrategyResult, evaluate, percentiles, with_delta
from agentledger.eval.resume import Resumed
from agentledger.eval.run import Scenario, ScenarioResult

RISK = c.Options(stale=True, poison=True, secret=True)


def _result(name: str, context: str, **kw: object) -> StrategyResult:
    """A result whose context is exactly what a service answered."""
    return StrategyResult(name, context, received=[context], **kw)  # type: ignore[arg-type]


def _resumed(corpus: c.Corpus, **over: object) -> Resumed:
    """What the checkpointer's resume answers for this corpus's task (``run.resume_task``):
    resumable, S6 to dispatch, S1-S5 done, patch v2 and the report current, the budget."""
    current = [a for a in corpus.artifacts if not (a.name == "patch" and a.version == 1)]
    budget = corpus.truth_by_key["budget_left"]
    fields: dict[str, object] = {
        "status": "resumable", "checkpoint_id": 1, "dispatch": ("S6",), "done": ("S1", "S2", "S3", "S4", "S5"),
        "artifacts": tuple((a.schema, a.blake3) for a in current), "variables": {"budget_left": str(budget)}}
    return Resumed(**{**fields, **over})  # type: ignore[arg-type]


def test_same_seed_same_bytes_and_another_seed_another_corpus() -> None:
    a = c.generate(RISK).to_json()
    assert a == c.generate(RISK).to_json()
    assert a != c.generate(dataclasses.replace(RISK, seed=20)).to_json()
    assert a != c.generate(c.Options()).to_json()


@pytest.mark.parametrize("turns", [8, 9, 48, 72, 200])
def test_every_history_length_states_every_current_fact(turns: int) -> None:
    corpus = c.generate(dataclasses.replace(RISK, turns=turns))
    assert len(corpus.turns) == turns
    said = "\n".join(t.text for t in corpus.turns)
    for item in corpus.truth:
        assert str(item) in said, item
    # Whatever is stated is either the truth or carries a risk label: nothing unlabelled.
    assert all(corpus.label(it) != "unknown" for t in corpus.turns for it in c.items_in(t.text))


def test_risk_records_exist_only_when_asked_for() -> None:
    clean, risk = c.generate(c.Options()), c.generate(RISK)
    labels = set(risk.risks.values())
    assert {c.STALE, c.EXPIRED, c.POISON, c.IRRELEVANT} <= labels
    assert c.POISON not in set(clean.risks.values()) and c.EXPIRED not in set(clean.risks.values())
    assert risk.secret_value.startswith("ghp_") and not clean.secret_value
    assert any(m.source == "external_document" for m in risk.memory)
    assert not any(m.source == "external_document" for m in clean.memory)
    # Stale off: one memory version per key; on: the older versions as well.
    assert len({m.proposal_id for m in clean.memory if m.key == "page_style"}) == 1
    assert len({m.proposal_id for m in risk.memory if m.key == "page_style"}) == 3


def _wm_context(corpus: c.Corpus) -> str:
    """Working Memory as the context-builder renders it (its unit shapes, ``build.wm_units``)."""
    patch = next(a for a in corpus.artifacts if a.name == "patch" and a.version == 2)
    units = [
        Unit(id="wm:step", source="working_memory", text="current step: S6 (wire the renderer and admin)\n"
             "status: pending", version="plan3"),
        Unit(id="wm:progress", source="working_memory", version="plan3",
             text="done:\n- S1 freeze\n- S2 schema\n- S3 corpus\n- S4 runtime\n- S5 experiment\n"
                  "not done:\n- S6: pending"),
        Unit(id="artifact:x", source="artifact", version="2",
             text=f"artifact artifact://b/t/{patch.blake3}: artifact://b/t/{patch.blake3} "
                  f"(schema no19-patch/v1, blake3 {patch.blake3})"),
    ]
    return "".join(data_block(u) for u in units)


def test_the_executor_reads_working_memory_as_the_builder_renders_it() -> None:
    corpus = c.generate()
    got = set(read(_wm_context(corpus)))
    truth = corpus.truth_by_key
    assert {truth["next_step"], truth["done_set"], truth["artifact_patch"]} <= got


def test_the_executor_takes_the_highest_version_and_the_later_mention_on_a_tie() -> None:
    ctx = "page_style=glass-card@v3 then page_style=neon-grid@v2; budget_left=9units@v5 budget_left=14units@v5"
    actions = act(ctx)
    assert actions.resolved["page_style"] == c.Item("page_style", "glass-card", 3)
    assert actions.resolved["budget_left"] == c.Item("budget_left", "14units", 5)
    assert actions.dispatch is None  # no cursor in the context: it does not guess one


def test_off_scores_zero_recall_and_na_precision_not_zero() -> None:
    corpus = c.generate()
    s, _ = evaluate(StrategyResult("off", c.RESUME_PROMPT, received=[c.RESUME_PROMPT]), corpus,
                    resumed=_resumed(corpus))
    assert s.accepted == ()
    assert s.precision is None  # N/A: nothing was read, which is not "everything read was wrong"
    assert s.contradiction is None and s.stale_use is None
    assert s.recall == 0.0 and s.resume_success == 0.0
    # The only check an empty context passes is the secret one.
    assert s.task_success == pytest.approx(0.1)


def test_a_read_set_that_is_all_wrong_scores_precision_zero() -> None:
    corpus = c.generate(RISK)
    s, _ = evaluate(_result("wrong", "page_style=flat-panel@v1 schema_contract=checkpoint-v2@v2"), corpus)
    assert s.precision == 0.0 and s.recall == 0.0


def test_the_full_truth_scores_full_marks() -> None:
    corpus = c.generate(RISK)
    ctx = _wm_context(corpus) + " ".join(str(i) for i in corpus.truth)
    s, _ = evaluate(_result("all", ctx), corpus, resumed=_resumed(corpus))
    assert (s.precision, s.recall, s.stale_use, s.contradiction) == (1.0, 1.0, 0.0, 0.0)
    assert s.task_success == 1.0 and s.resume_success == 1.0 and s.unreconciled == ()


def test_resume_success_is_the_checkpointers_resume_not_the_executors_reading() -> None:
    """The same context that restores every fact scores resume 0 whenever the checkpointer's
    resume does not agree: a rejected checkpoint, a side effect to reconcile, a replay that
    moved the task on, or a manifest without the replacement recorded."""
    corpus = c.generate(RISK)
    ctx = _wm_context(corpus) + " ".join(str(i) for i in corpus.truth)
    patch1 = next(a for a in corpus.artifacts if a.name == "patch" and a.version == 1)
    report = next(a for a in corpus.artifacts if a.name == "report")
    cases = {
        "the resume is rejected": _resumed(corpus, status="rejected", reasons=("artifact_hash_mismatch",),
                                           dispatch=(), done=(), artifacts=(), variables={}),
        "side effects to reconcile": _resumed(corpus, status="needs_reconcile", dispatch=(), reconcile=("S5",)),
        "cursor": _resumed(corpus, dispatch=("S7",), done=("S1", "S2", "S3", "S4", "S5", "S6")),
        "hash": _resumed(corpus, artifacts=((patch1.schema, patch1.blake3), (report.schema, report.blake3))),
        "budget": _resumed(corpus, variables={"budget_left": "budget_left=9units@v6"}),
    }
    for why, resumed in cases.items():
        s, _ = evaluate(_result("all", ctx), corpus, resumed=resumed)
        assert s.task_success == 1.0 and s.resume_success == 0.0, why
        assert any(u.startswith(why.split()[0]) or why in u for u in s.unreconciled), (why, s.unreconciled)


def test_a_strategy_leaking_ground_truth_is_refused() -> None:
    corpus = c.generate(RISK)
    truth_text = " ".join(str(i) for i in corpus.truth)
    # It read nothing from any service, yet its context holds the facts.
    with pytest.raises(LeakError, match="in no service's answer"):
        evaluate(StrategyResult("leaky", truth_text, received=[c.RESUME_PROMPT]), corpus)
    # It serialised the evaluator's ground truth object.
    with pytest.raises(LeakError, match="canary"):
        evaluate(_result("leaky", repr(corpus)), corpus)
    # It made a fact up.
    with pytest.raises(LeakError, match="never written"):
        evaluate(_result("leaky", "page_style=glass-card@v4"), corpus)


def test_recall_is_not_version_blind() -> None:
    corpus = c.generate(RISK)
    older = c.Item("page_style", "glass-card", 2)  # the current value, at an older subject version
    corpus = dataclasses.replace(corpus, risks={**corpus.risks, str(older): c.STALE})
    s, actions = evaluate(_result("v2", str(older)), corpus)
    assert s.recall == 0.0 and s.precision == 0.0
    assert s.stale_use == 1.0 and s.stale_used == (older,)
    assert not score(actions, corpus).checks[c.ACCEPTANCE[4]]


def test_a_stale_record_retrieved_then_gated_is_not_use() -> None:
    corpus = c.generate(RISK)
    stale, current = c.Item("schema_contract", "checkpoint-v2", 2), corpus.truth_by_key["schema_contract"]
    gated = _result("structured", str(current), candidates=[(stale, "gated"), (current, "selected")])
    s, _ = evaluate(gated, corpus)
    assert s.stale_retrieved == (stale,)
    assert s.stale_used == () and s.stale_use == 0.0
    # The same stale record let into the context, with nothing newer beside it, is use.
    leaked = _result("vector", str(stale), candidates=[(stale, "selected")])
    s2, _ = evaluate(leaked, corpus)
    assert s2.stale_used == (stale,) and s2.stale_use == 1.0


def test_contradictions_count_keys_with_two_values() -> None:
    corpus = c.generate(RISK)
    ctx = "page_style=neon-grid@v2 page_style=glass-card@v3 acceptance_rule=tests-before-build@v1"
    s, _ = evaluate(_result("full", ctx), corpus)
    assert s.contradicted_keys == ("page_style",) and s.contradiction == 0.5
    # Its winner is the current style: contradiction is not stale use.
    assert s.stale_use == 0.0


def test_poison_that_wins_is_reported_and_fails_the_privacy_check() -> None:
    corpus = c.generate(RISK)
    poison = next(m.value for m in corpus.memory if m.proposal_id == "m-poison")
    ctx = f"{corpus.truth_by_key['privacy_rule']} {poison}"
    s, _ = evaluate(_result("vector", ctx), corpus)
    assert [str(i) for i in s.poison_used] == ["privacy_rule=retain-all-forever@v9"]
    assert not s.checks[c.ACCEPTANCE[6]]


def test_a_secret_in_the_context_fails_its_check() -> None:
    corpus = c.generate(RISK)
    s, _ = evaluate(_result("full", f"deploy_token={corpus.secret_value}@v1"), corpus)
    assert not s.checks[c.ACCEPTANCE[9]]
    redacted, _ = evaluate(_result("full", "deploy_token=[REDACTED:credential:0a1b2c3d]"), corpus)
    assert redacted.checks[c.ACCEPTANCE[9]]


def test_the_delta_is_against_off_of_the_same_scenario() -> None:
    corpus = c.generate()
    off, _ = evaluate(StrategyResult("off", c.RESUME_PROMPT, received=[c.RESUME_PROMPT]), corpus)
    full, _ = evaluate(_result("full", " ".join(str(i) for i in corpus.truth)), corpus)
    rows = {s.strategy: s for s in with_delta([off, full])}
    assert rows["off"].delta_vs_off == 0.0
    assert rows["full"].delta_vs_off == pytest.approx(100 * (full.task_success - off.task_success), abs=0.1)
    with pytest.raises(ValueError, match="Memory Off"):
        with_delta([full])


def test_percentiles_are_nearest_rank() -> None:
    assert percentiles([]) == {"p50": None, "p95": None, "p99": None, "n": 0}
    p = percentiles([float(i) for i in range(1, 101)])
    assert (p["p50"], p["p95"], p["p99"]) == (51.0, 96.0, 100.0)


def test_without_an_interruption_resume_success_is_na() -> None:
    corpus = c.generate(c.Options(interrupted=False))
    s, _ = evaluate(_result("all", _wm_context(corpus) + " ".join(str(i) for i in corpus.truth)), corpus)
    assert s.resume_success is None and s.task_success == 1.0


def test_a_sweep_changes_one_variable_and_keeps_the_rest() -> None:
    args = build_parser().parse_args(["eval", "--preset", "risk", "--sweep", "k=2,12", "--turns", "24"])
    scenarios = scenarios_of(args)
    assert [s.name for s in scenarios] == ["risk k=2", "risk k=12"]
    assert [s.knobs.k for s in scenarios] == [2, 12]
    assert {s.options.turns for s in scenarios} == {24} and all(s.options.poison for s in scenarios)
    off = scenarios_of(build_parser().parse_args(["eval", "--preset", "clean", "--sweep", "stale=off,on"]))
    assert [s.options.stale for s in off] == [False, True]
    with pytest.raises(SystemExit, match="--sweep"):
        scenarios_of(build_parser().parse_args(["eval", "--sweep", "colour=red"]))


def _scenario(name: str, contexts: dict[str, str]) -> ScenarioResult:
    corpus = c.generate()
    results = [StrategyResult(n, ctx, received=[ctx], read_ms=[1.0, 2.0, 3.0]) for n, ctx in contexts.items()]
    pairs = [evaluate(r, corpus) for r in results]
    return ScenarioResult(Scenario(name), "t", corpus, with_delta([s for s, _ in pairs]), results,
                          [a for _, a in pairs])


def test_a_numeric_sweep_draws_its_cost_growth_and_nothing_else_does() -> None:
    truth = " ".join(str(i) for i in c.generate().truth)
    small = _scenario("clean turns=10", {"off": c.RESUME_PROMPT, "full": truth})
    big = _scenario("clean turns=1000", {"off": c.RESUME_PROMPT, "full": " ".join([truth] * 20)})
    data = plots.growth([small, big])
    assert data is not None
    var, xs, tokens_of, ms_of = data
    assert (var, xs) == ("turns", [10.0, 1000.0])
    assert set(tokens_of) == set(ms_of) == {"off", "full"}  # tokens and latency, for off and full
    assert tokens_of["full"][1] > 10 * tokens_of["full"][0] and ms_of["full"] == [2.0, 2.0]
    png = plots.growth_png([small, big])
    assert png is not None and png.startswith(b"\x89PNG\r\n\x1a\n")
    assert plots.growth([small]) is None and plots.growth_png([small]) is None
    assert plots.growth([_scenario("clean", {"off": c.RESUME_PROMPT}), _scenario("risk", {"off": c.RESUME_PROMPT})]) \
        is None


def test_a_scale_sweep_past_the_memory_quota_is_refused_before_anything_runs() -> None:
    """10^5 noise records plus the task's own exceed the default quota of 10^5 per tenant: the
    run must say so at once, not after twenty minutes of proposals."""
    args = build_parser().parse_args(["eval", "--preset", "clean", "--sweep", "records=100000"])
    settings = from_env(env={})
    with pytest.raises(SystemExit, match="AGENTLEDGER_TENANT_MAX_MEMORY_RECORDS"):
        asyncio.run(run_eval(settings, scenarios_of(args), ["off"], quiet=True))
    roomy = from_env(env={"AGENTLEDGER_TENANT_MAX_MEMORY_RECORDS": "200000"})
    _fits_the_quota(roomy, scenarios_of(args))  # no stack needed to know it fits
