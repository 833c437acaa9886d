"""Seed 002's walk-through in pure form: 48 turns, CP-30 active, turn 49 crosses the watermark.

The plan compacts 31..42 and keeps 43..48 exact with 49 current; the structured compactor
folds CP-30 and turns 31..42 into CP-42, which validates and carries a receipt that
verifies; the commit predicate accepts it once and refuses each way it can go stale or
be forged. The service runs the same functions inside its transaction
(tests/test_context_service*.py cover the NATS/PostgreSQL side).
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from agentledger.contracts.context_api import CompactionCheckpoint, Coverage, Summary, SummaryItem
from agentledger.core import context as cx
from agentledger.core.state import Turn
from agentledger.models import tokens


def count(text: str) -> int:
    return tokens.count(text, "cl100k_base")


@dataclass(frozen=True)
class T:
    ordinal: int
    role: str
    content: str | None


KEY = {
    1: "Our goal is a post-mortem of the message list freezing after the connection recovers.",
    3: "Confirmed: the fault appears after a long offline period when the app returns to the foreground. "
       "Short network jitter does not reproduce it.",
    9: "The review scope is limited to recovery succeeding while the message list stays stuck, not login or push.",
    12: "用户偏好：结论先行，段落要短。",
    17: "Evidence must cite redacted logs, state transitions and aggregate metrics, never account or device ids.",
    20: "必须使用脱敏日志。",
    26: "The fix must cover foreground resume, background reconnect and duplicate callbacks.",
    33: "这个问题还需要确认吗？",
    41: "Confirmed: the resume flow has a race between the cursor and the local revision. "
        "Which two metrics are still unverified?",
    45: "Correction: the root cause is not a network timeout; the old cursor is resubmitted by the resume task.",
    47: "Verification passed: the focused tests pass and the long-offline case no longer freezes.",
    48: "We decided to rewrite the root cause and verification sections next.",
}
TURN_TOKENS = 600  # every turn's whole message: 43..48 is 3,600 <= 4,000, 42..48 would be 4,200


def _padded(ordinal: int) -> T:
    role = "user" if ordinal % 2 else "assistant"
    base = KEY.get(ordinal, f"Turn {ordinal} discusses logs.")
    text = base + "\n"
    while cx.turn_tokens(T(ordinal, role, text + " x"), count) <= TURN_TOKENS:
        text += " x"
    turn = T(ordinal, role, text)
    assert cx.turn_tokens(turn, count) == TURN_TOKENS
    return turn


TURNS = [_padded(i) for i in range(1, 49)]
INPUT = T(49, "user", "Rewrite the root cause and verification sections; the root cause is not a network "
                      "timeout; do not reveal account or device ids; end with a publishable conclusion.")
TENANT, TASK, EPOCH, BASE = "acme", "postmortem", 3, 0
LINEAGE = cx.lineage_id(TENANT, TASK, EPOCH, BASE)
POLICY = cx.policy_version("structured", 0.75, 4000)
KEYPAIR = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
PUBLIC = KEYPAIR.public_key()


def _cp(summary: Summary, through: int, generation: str, *, key: Ed25519PrivateKey = KEYPAIR) -> CompactionCheckpoint:
    return cx.stage_candidate(
        summary, checkpoint_id=cx.checkpoint_id_for(generation, through), generation_id=generation, tenant=TENANT,
        task_id=TASK, epoch=EPOCH, lineage=LINEAGE, lineage_base=BASE, coverage=Coverage(1, through),
        source_digest=cx.source_digest(TURNS, through), policy_version=POLICY, private_key=key)


CP30 = msgspec.structs.replace(_cp(cx.compact_structured(None, TURNS[:30]), 30, "G-31-A"), status="active")
PLAN = cx.plan(TURNS, lineage_base=BASE, active_checkpoint_coverage_end=30, measured_tokens=13_000, cap=16_000,
               high_watermark=0.75, recent_exact_tokens=4000, count=count, active_checkpoint_id=CP30.checkpoint_id)
SUMMARY42 = cx.compact_structured(CP30.summary, TURNS[30:42])
CP42 = _cp(SUMMARY42, 42, "G-49-A")
COMMIT = {"expected_checkpoint_id": CP42.checkpoint_id, "input_ordinal": 49, "answer_ordinal": 50,
          "transcript_revision": 50, "epoch": EPOCH, "lineage": LINEAGE, "lineage_base": BASE,
          "active_coverage_end": 30, "public_key": PUBLIC}


def _cited(summary: Summary) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for field in cx.compaction.FIELDS:
        for item in getattr(summary, field):
            for o in item.source_turn_ordinals:
                out.setdefault(o, []).append(field)
    return out


def test_the_plan_is_one_contiguous_split() -> None:
    """13,000 measured > 12,000 watermark: compact 31..42, keep 43..48 exact, answer 49."""
    assert PLAN.outcome == "compacted" and PLAN.reason == "high_watermark_crossed"
    assert PLAN.high_watermark_tokens == 12_000 and PLAN.measured_tokens == 13_000
    assert PLAN.compacted == Coverage(31, 42) and PLAN.recent_exact == Coverage(43, 48)
    assert PLAN.base_checkpoint == CP30.checkpoint_id and not PLAN.degraded


def test_below_the_watermark_nothing_happens() -> None:
    p = cx.plan(TURNS, lineage_base=BASE, active_checkpoint_coverage_end=30, measured_tokens=12_000, cap=16_000,
                high_watermark=0.75, recent_exact_tokens=4000, count=count)
    assert p.outcome == "not_needed" and p.compacted is None and p.reason == "below_high_watermark"


def test_a_gap_after_the_coverage_is_degraded_recent_only() -> None:
    """Turn 35 missing: no checkpoint can claim 31..42; recent exact turns only, reported as degraded."""
    holed = [t for t in TURNS if t.ordinal != 35]
    p = cx.plan(holed, lineage_base=BASE, active_checkpoint_coverage_end=30, measured_tokens=13_000, cap=16_000,
                high_watermark=0.75, recent_exact_tokens=4000, count=count)
    assert (p.outcome, p.degraded, p.reason, p.compacted) == ("fallback", True, "coverage_gap", None)
    assert p.recent_exact == Coverage(43, 48) and p.base_checkpoint is None


def test_after_a_clear_the_lineage_base_bounds_everything() -> None:
    """Cleared through 20 (new epoch): no checkpoint below the base, the prefix starts at 21."""
    p = cx.plan(TURNS, lineage_base=20, active_checkpoint_coverage_end=None, measured_tokens=13_000, cap=16_000,
                high_watermark=0.75, recent_exact_tokens=4000, count=count)
    assert p.compacted == Coverage(21, 42) and p.recent_exact == Coverage(43, 48)
    s = cx.compact_structured(None, [t for t in TURNS if 20 < t.ordinal <= 42])
    assert all(o > 20 for o in _cited(s))
    assert cx.validate_summary(s, Coverage(21, 42), 20) == []
    assert cx.validate_summary(CP30.summary, Coverage(21, 42), 20)  # the old lineage's items are out of range


def test_cp30_keeps_the_old_boundaries() -> None:
    """CP-30 holds the reproduction boundary, scope, evidence constraint and fix requirement (turns 3/9/17/26)."""
    cited = _cited(CP30.summary)
    assert cited[1] == ["conversation_goal"] and cited[3] == ["confirmed_facts"]
    assert cited[9] == cited[17] == cited[20] == cited[26] == ["decisions_constraints"]
    assert cited[12] == ["preferences"]
    assert max(cited) <= 30
    assert cx.validate_summary(CP30.summary, Coverage(1, 30), BASE) == []


def test_cp42_validates_and_its_receipt_verifies() -> None:
    """CP-42 = CP-30 + turns 31..42: cites nothing past 42, keeps 41's race and open question; deterministic."""
    cited = _cited(SUMMARY42)
    assert {1, 3, 9, 12, 17, 20, 26, 33, 41} <= set(cited) and max(cited) == 41
    assert "unresolved_questions" in cited[33] and "confirmed_facts" in cited[41]
    assert "unresolved_questions" in cited[41]
    assert not any(o > 42 for o in cited)
    assert cx.validate_summary(SUMMARY42, Coverage(1, 42), BASE) == []
    assert cx.compact_structured(CP30.summary, TURNS[30:42]) == SUMMARY42
    assert CP42.summary_digest == cx.summary_digest(SUMMARY42) and CP42.status == "staged"
    assert cx.verify_checkpoint(CP42, PUBLIC)
    assert CP42.receipt.key_id == cx.key_id(PUBLIC) and len(CP42.receipt.key_id) == 16
    assert CP42.source_digest == cx.source_digest(TURNS, 42, resume=(30, CP30.source_digest))
    assert cx.cas_check(CP42, **COMMIT) is None


def test_both_branches_fit_and_the_fallback_is_the_recent_exact_part() -> None:
    """Primary: CP-42 + 43..48 + 49; fallback: 43..48 + 49; both frozen, counted, within B."""
    b = 16_000
    recent = [cx.turn_unit(t, mandatory=True) for t in TURNS[42:48]]
    current = cx.turn_unit(INPUT, mandatory=True, source="input")
    cp = cx.Unit(id=CP42.checkpoint_id, source="checkpoint", text=cx.summary_text(SUMMARY42), version="42",
                 mandatory=True, verifiability=1.0)
    primary = cx.select([cp, *recent, current], b, count)
    fallback = cx.select([*recent, current], b, count)
    for sel in (primary, fallback):
        r = sel.rendered
        assert r.tokens == count(r.text) == sum(r.unit_tokens.values()) + r.separator_tokens <= b
    assert primary.rendered.messages[1:] == fallback.rendered.messages
    assert primary.rendered.messages[0].content.startswith(f'<data source="checkpoint" id="{CP42.checkpoint_id}"')
    assert "[turns 41]" in primary.rendered.messages[0].content
    assert "not a network timeout" in fallback.rendered.messages[2].content  # turn 45 verbatim


def test_source_digest_is_a_chain_and_needs_every_turn() -> None:
    d30 = cx.source_digest(TURNS, 30)
    assert cx.source_digest(TURNS, 42) == cx.source_digest(TURNS[30:42], 42, resume=(30, d30))
    assert cx.source_digest(TURNS, 0) == cx.source_genesis(0)
    state_turns = [Turn(t.role, t.ordinal, seq=t.ordinal * 7, content=t.content) for t in TURNS]
    assert cx.source_digest(state_turns, 42) == cx.source_digest(TURNS, 42)  # seq is not part of the source
    edited = [*TURNS[:39], T(40, TURNS[39].role, "edited"), *TURNS[40:]]
    assert cx.source_digest(edited, 42) != cx.source_digest(TURNS, 42)
    with pytest.raises(cx.compaction.ContractError) as e:
        cx.source_digest([t for t in TURNS if t.ordinal != 35], 42)
    assert e.value.code == "source_gap"


@pytest.mark.parametrize(("change", "reason"), [
    ({"transcript_revision": 51}, "transcript_moved_on"),  # turn 51 arrived after the answer
    ({"answer_ordinal": 51, "transcript_revision": 51}, "transcript_moved_on"),  # turn 50 was not the answer
    ({"epoch": EPOCH + 1}, "stale_epoch"),
    ({"lineage": cx.lineage_id(TENANT, "other-task", EPOCH, BASE)}, "other_lineage"),
    ({"lineage_base": 10}, "other_lineage"),
    ({"active_coverage_end": 44}, "coverage_regression"),  # another generation got further meanwhile
    ({"active_coverage_end": 42}, "coverage_regression"),
    ({"public_key": Ed25519PrivateKey.from_private_bytes(bytes(32)).public_key()}, "bad_signature"),
    ({"expected_checkpoint_id": "cp42-someoneelse"}, "not_staged"),
    ({"source_digest_now": "00" * 32}, "source_changed"),
])
def test_each_refusal(change: dict[str, object], reason: str) -> None:
    assert cx.cas_check(CP42, **{**COMMIT, **change}) == reason  # type: ignore[arg-type]


def test_not_staged_twice() -> None:
    """An active (already committed) or refused checkpoint is not activated again."""
    for status in ("active", "refused", "superseded"):
        assert cx.cas_check(msgspec.structs.replace(CP42, status=status), **COMMIT) == "not_staged"  # type: ignore[arg-type]


def test_a_tampered_summary_is_refused() -> None:
    """Changing one item's text (digest recomputed or not) breaks the receipt."""
    items = list(SUMMARY42.confirmed_facts)
    items[0] = SummaryItem(text="The root cause is a network timeout.",
                           source_turn_ordinals=items[0].source_turn_ordinals)
    forged = msgspec.structs.replace(SUMMARY42, confirmed_facts=items)
    assert cx.cas_check(msgspec.structs.replace(CP42, summary=forged), **COMMIT) == "bad_signature"  # type: ignore[arg-type]
    both = msgspec.structs.replace(CP42, summary=forged, summary_digest=cx.summary_digest(forged))
    assert cx.cas_check(both, **COMMIT) == "bad_signature"  # type: ignore[arg-type]
    resigned = _cp(forged, 42, "G-49-A", key=Ed25519PrivateKey.from_private_bytes(bytes(32)))
    assert cx.cas_check(resigned, **COMMIT) == "bad_signature"  # type: ignore[arg-type]


def test_a_cited_ordinal_out_of_range_is_refused() -> None:
    """An item citing turn 45 (never given to the compactor) is refused, even under a valid signature."""
    leak = SummaryItem(text="The root cause is not a network timeout.", source_turn_ordinals=[45])
    bad = msgspec.structs.replace(SUMMARY42, confirmed_facts=[*SUMMARY42.confirmed_facts, leak])
    with pytest.raises(cx.InvalidSummaryError) as e:
        _cp(bad, 42, "G-49-A")
    assert any(p.startswith("cited_ordinal_out_of_range at $.confirmed_facts[") for p in e.value.problems)
    signed_anyway = msgspec.structs.replace(CP42, summary=bad, summary_digest=cx.summary_digest(bad))
    assert cx.cas_check(signed_anyway, **COMMIT) == "cited_ordinal_out_of_range"  # type: ignore[arg-type]


def test_validation_rules() -> None:
    """Exact field set, non-empty bounded text, unique ordinals inside (base, coverage end], not empty."""
    cov = Coverage(1, 42)
    raw = msgspec.json.encode(SUMMARY42)
    assert cx.validate_summary(raw, cov, BASE) == []
    extra = msgspec.json.encode({**msgspec.to_builtins(SUMMARY42), "user_preferences": []})
    assert cx.validate_summary(extra, cov, BASE)[0].startswith("invalid_schema")
    missing = msgspec.to_builtins(SUMMARY42)
    del missing["preferences"]
    assert cx.validate_summary(missing, cov, BASE)[0].startswith("invalid_schema")
    assert cx.validate_summary(b'{"schema_version": "checkpoint-v1", ', cov, BASE)[0].startswith("invalid_json")
    empty = Summary("checkpoint-v1", [], [], [], [], [])
    assert cx.validate_summary(empty, cov, BASE) == ["empty_summary at $: every field is empty"]

    def one(item: SummaryItem) -> list[str]:
        return cx.validate_summary(Summary("checkpoint-v1", [item], [], [], [], []), cov, BASE)

    assert one(SummaryItem("  ", [3]))[0].startswith("empty_text at $.conversation_goal[0].text")
    assert one(SummaryItem("x" * 2001, [3]))[0].startswith("text_too_long")
    assert one(SummaryItem("ok", [3, 3]))[0].startswith("duplicate_ordinal at $.conversation_goal[0]")
    assert one(SummaryItem("ok", [0]))[0].startswith("cited_ordinal_out_of_range")
    assert one(SummaryItem("ok", [43]))[0].startswith("cited_ordinal_out_of_range")
    assert one(SummaryItem("ok", []))[0].startswith("no_ordinals")
    assert cx.validate_summary(SUMMARY42, Coverage(2, 42), BASE)[0].startswith("invalid_coverage")


def test_compactor_is_bounded_and_deterministic() -> None:
    """500 turns of cue sentences: within every bound, valid, the same bytes twice."""
    long = [T(i, "user" if i % 2 else "assistant",
              f"We must keep invariant {i}. Confirmed value {i} is {i * 7}. Why is {i} slow? I prefer {i}.")
            for i in range(1, 501)]
    a = cx.compact_structured(None, long)
    assert cx.canonical_summary(a) == cx.canonical_summary(cx.compact_structured(None, long))
    assert cx.validate_summary(a, Coverage(1, 500), 0) == []
    assert len(a.confirmed_facts) == 80 and a.confirmed_facts[-1].text == "Confirmed value 500 is 3500."
    assert len(cx.canonical_summary(a)) <= cx.compaction.COMPACTOR_MAX_BYTES
    again = cx.compact_structured(a, long[-10:])  # restating merges, never duplicates
    assert len(again.confirmed_facts) == 80 and again.confirmed_facts == a.confirmed_facts
    sealed = cx.compact_structured(None, [T(1, "user", None)])
    assert cx.validate_summary(sealed, Coverage(1, 1), 0) == ["empty_summary at $: every field is empty"]
